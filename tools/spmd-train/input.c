/* input.c — spmd-train's data: Fashion-MNIST (IDX) or CIFAR-10 (binary),
 * and the batches of an epoch, filled ahead by a loader thread
 * (spmd_prefetch) or on the training thread. */
#include <stdlib.h>
#include <string.h>
#include "train.h"

spmd_status train_data_load(const options *o, spmd_split split, train_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->cifar = strcmp(o->dataset, "cifar10") == 0;
    if (!d->cifar) return spmd_dataset_load_dir(o->data, split, &d->fm, err, errlen);
    if (!o->data) {
        snprintf(err, errlen, "--dataset cifar10 needs --data DIR with the CIFAR-10 binary files "
                              "(cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html)");
        return SPMD_ERR_INVALID;
    }
    return spmd_cifar_load_dir(o->data, split, &d->cf, err, errlen);
}

size_t train_data_len(const train_data *d) { return d->cifar ? d->cf.n : d->fm.n; }

void train_data_truncate(train_data *d, size_t n) {
    if (n >= train_data_len(d)) return;
    if (d->cifar) d->cf.n = n;
    else d->fm.n = n;
}

void train_data_shape(const train_data *d, int *c, int *h, int *w, int *classes) {
    *c = d->cifar ? 3 : 1;
    *h = d->cifar ? 32 : d->fm.rows;
    *w = d->cifar ? 32 : d->fm.cols;
    if (classes) *classes = d->cifar ? 10 : d->fm.num_classes;
}

spmd_status train_data_fill(const train_data *d, const size_t *idx, size_t count, int augment,
                            uint64_t seed, uint64_t batch_no, float *x, int *y) {
    if (d->cifar)
        return spmd_cifar_batch(&d->cf, idx, count, augment, seed * 1000003u + batch_no, x, y);
    return spmd_dataset_batch(&d->fm, idx, count, SPMD_FASHION_MNIST_MEAN, SPMD_FASHION_MNIST_STD, x, y);
}

void train_data_free(train_data *d) {
    spmd_dataset_free(&d->fm);
    spmd_cifar_free(&d->cf);
}

/* The loader thread's fill: batch k of the epoch is batch first_batch_no + k
 * of the run (the number the augmentation is drawn from). */
static spmd_status fill(void *ctx, const size_t *idx, size_t count, uint64_t k, float *x, int *y, char *err,
                        size_t errlen) {
    const batch_source *s = ctx;
    spmd_status st = train_data_fill(s->d, idx, count, s->augment, s->seed, s->first_batch_no + k, x, y);
    if (st != SPMD_OK) snprintf(err, errlen, "cannot fill a batch of %zu examples: %s", count, spmd_status_str(st));
    return st;
}

spmd_status batch_source_open(batch_source *s, const train_data *d, int augment, uint64_t seed,
                              const size_t *indices, size_t n, size_t batch, size_t skip,
                              uint64_t first_batch_no, int prefetch, float *x, int *y, char *err,
                              size_t errlen) {
    memset(s, 0, sizeof *s);
    s->d = d;
    s->augment = augment;
    s->seed = seed;
    s->first_batch_no = first_batch_no;
    s->x = x;
    s->y = y;
    if (prefetch > 0) {
        int c, h, w;
        train_data_shape(d, &c, &h, &w, NULL);
        spmd_prefetch_opts po = {indices, n, batch, 0, skip, (size_t)c * h * w, prefetch, fill, s};
        return spmd_prefetch_start(&po, &s->pf, err, errlen);
    }
    spmd_status st = spmd_batch_iter_init(&s->it, indices, n, batch, 0);
    const size_t *bi;
    size_t bn;
    for (size_t k = 0; st == SPMD_OK && k < skip && spmd_batch_iter_next(&s->it, &bi, &bn); k++) {}
    s->next_no = skip;
    return st;
}

int batch_source_next(batch_source *s, const float **x, const int **y, size_t *n, char *err, size_t errlen) {
    if (s->pf) {
        int rc = spmd_prefetch_next(s->pf, x, y, NULL, n);
        if (rc < 0) snprintf(err, errlen, "%s", spmd_prefetch_errmsg(s->pf));
        return rc;
    }
    const size_t *bi;
    if (!spmd_batch_iter_next(&s->it, &bi, n)) return 0;
    spmd_status st = train_data_fill(s->d, bi, *n, s->augment, s->seed, s->first_batch_no + s->next_no++, s->x, s->y);
    if (st != SPMD_OK) {
        snprintf(err, errlen, "batch %llu: cannot fill a batch of %zu examples: %s",
                 (unsigned long long)(s->next_no - 1), *n, spmd_status_str(st));
        return -1;
    }
    *x = s->x;
    *y = s->y;
    return 1;
}

void batch_source_close(batch_source *s) {
    spmd_prefetch_stop(s->pf);
    s->pf = NULL;
}
