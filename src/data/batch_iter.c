/* batch_iter.c — consecutive slices of an index list (a DataLoader's batching
 * without the workers). */
#include "data_internal.h"

spmd_status spmd_batch_iter_init(spmd_batch_iter *it, const size_t *indices, size_t n,
                                 size_t batch_size, int drop_last) {
    if (!it || batch_size == 0 || (n && !indices)) return SPMD_ERR_INVALID;
    it->indices = indices;
    it->n = n;
    it->batch_size = batch_size;
    it->pos = 0;
    it->drop_last = drop_last != 0;
    return SPMD_OK;
}

size_t spmd_batch_iter_count(const spmd_batch_iter *it) {
    if (!it || !it->batch_size) return 0;
    return it->drop_last ? it->n / it->batch_size : (it->n + it->batch_size - 1) / it->batch_size;
}

int spmd_batch_iter_next(spmd_batch_iter *it, const size_t **batch, size_t *count) {
    if (!it || !it->batch_size || it->pos >= it->n) return 0;
    size_t left = it->n - it->pos;
    size_t k = left < it->batch_size ? left : it->batch_size;
    if (k < it->batch_size && it->drop_last) return 0;
    if (batch) *batch = it->indices + it->pos;
    if (count) *count = k;
    it->pos += k;
    return 1;
}

void spmd_batch_iter_reset(spmd_batch_iter *it) {
    if (it) it->pos = 0;
}
