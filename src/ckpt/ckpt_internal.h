/* src/ckpt/ckpt_internal.h — what the files of src/ckpt share. */
#ifndef SPMD_CKPT_INTERNAL_H
#define SPMD_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/ckpt.h"

/* The rules every metadata obeys, decoded or about to be encoded: keys
 * unique, each storage item naming a tensor entry and one of its chunks
 * (offset and rank equal) or a bytes entry (no offset).  Errors are st,
 * with a message prefixed by what. */
spmd_status spmd__dcp_check(const spmd_dcp_metadata *m, const char *what, char *err,
                            size_t errlen, spmd_status st);

/* ---- torch.save archives (torch_zip.c) ------------------------------------ */
/* The stored entry <archive>/<suffix> of the zip z[0..n) (exactly one
 * directory level, as torch.save names them). */
spmd_status spmd__zip_find(const uint8_t *z, size_t n, const char *suffix, const uint8_t **data,
                           uint64_t *size, const char *what, char *err, size_t errlen);

/* One tensor saved by torch.save: data points into the archive's buffer. */
typedef struct {
    char dtype[16];
    size_t elsize;
    int ndim;
    int64_t shape[SPMD_DCP_MAX_DIMS];
    const uint8_t *data;
    uint64_t nbytes; /* prod(shape) * elsize */
} spmd__torch_tensor;

spmd_status spmd__torch_tensor_parse(const uint8_t *z, size_t n, const char *what,
                                     spmd__torch_tensor *t, char *err, size_t errlen);

/* Element size of a torch dtype name a tensor item may have (0: none). */
size_t spmd__dcp_dtype_size(const char *dtype);
/* torch's storage class for a dtype ("FloatStorage"), or NULL. */
const char *spmd__dcp_storage_class(const char *dtype);

/* ---- a data file written as it is encoded (file_writer.c) ----------------- */
/* Writes to fd from its start; off counts every byte put (buffered or not).
 * A failed write keeps its errno in err and the rest is skipped (off still
 * counts): check err after spmd__fw_flush.  Zero-initialise, set fd. */
typedef struct {
    int fd;
    uint64_t off;
    uint8_t *buf; /* small pieces, FW_BUF bytes */
    size_t len;
    int err;
} spmd__fw;
void spmd__fw_put(spmd__fw *f, const void *p, size_t n);
/* Put n bytes straight from p; their CRC-32, computed as they are written. */
uint32_t spmd__fw_put_crc(spmd__fw *f, const void *p, size_t n);
/* Overwrite the 4 bytes at file offset at (< off) with v, little-endian. */
void spmd__fw_patch_le32(spmd__fw *f, uint64_t at, uint32_t v);
void spmd__fw_flush(spmd__fw *f);
void spmd__fw_free(spmd__fw *f);

/* ---- writing torch.save archives (torch_save.c) --------------------------- */
/* Put torch.save(tensor) of a contiguous tensor (< 4 GiB) to f: the data
 * written from where it is, never copied. */
spmd_status spmd__torch_save_tensor(spmd__fw *f, const char *dtype, int ndim, const int64_t *shape,
                                    const void *data);
/* Put torch.save(bytes(data)) to f; pickled: data is the pickle of the
 * value to save (data.pkl as it is). */
spmd_status spmd__torch_save_bytes(spmd__fw *f, const void *data, size_t len, int pickled);
/* The bytes object of a torch.save archive (a copy, malloc'd). */
spmd_status spmd__torch_bytes_parse(const uint8_t *z, size_t n, const char *what, void **data,
                                    size_t *len, char *err, size_t errlen);

/* ---- the collective save (dcp_save.c), shared with the async saver ------- */
/* The local argument checks of spmd_dcp_save. */
spmd_status spmd__dcp_save_check(const spmd_dcp_shard *shards, size_t nshards, const spmd_dcp_bytes *bytes,
                                 size_t nbytes, char *err, size_t errlen);
/* The save over g (NULL: one process) of items already checked; mine is this
 * rank's outcome so far (a failed check or staging: it then passes no items),
 * which the ranks agree on before anything is written. */
spmd_status spmd__dcp_save_run(spmd_group *g, const char *dir, const spmd_dcp_shard *shards, size_t nshards,
                               const spmd_dcp_bytes *bytes, size_t nbytes, spmd_status mine, char *err,
                               size_t errlen);

/* A bytes item's torch.save archive z[0..n) as a plain value (dcp_value.c). */
spmd_status spmd__dcp_value_parse(const uint8_t *z, size_t n, const char *what, spmd_dcp_value *out, char *err,
                                  size_t errlen);

/* The byte range of one storage item, read from its file (malloc'd). */
spmd_status spmd__dcp_read_range(const char *dir, const spmd_dcp_storage *s, uint8_t **out, char *err,
                                 size_t errlen);

#endif
