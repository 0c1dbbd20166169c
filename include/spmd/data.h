/* spmd/data.h — the data half of the training stack: MNIST-format (IDX)
 * datasets, normalised float batches, torch's DistributedSampler, batch
 * iteration, and checkpoints in the safetensors format.
 *
 * Nothing here knows about layers or models: tensors are (name, dtype, shape,
 * pointer).  The only link to communication is the pair of "dist" checkpoint
 * helpers at the end, which use the public group API (spmd/group.h).
 *
 * Errors: every call returns spmd_status.  Calls that can fail for reasons
 * worth explaining take a caller-owned error buffer (err, errlen; NULL/0 is
 * fine) that receives one line naming the file, the byte offset or the
 * tensor at fault.  Nothing is written to out-parameters on failure.
 * Thread safety: distinct objects may be used from distinct threads; one
 * object must not be used by two threads at once (read-only accessors of a
 * loaded dataset and of an open checkpoint excepted).
 */
#ifndef SPMD_DATA_H
#define SPMD_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"
#include "spmd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * IDX files (the MNIST container: big-endian header, u8 payload)
 * ====================================================================== */

#define SPMD_IDX_MAX_DIMS 8
/* Largest payload accepted (bytes), checked before anything is allocated. */
#define SPMD_IDX_MAX_BYTES ((size_t)1 << 30)
/* Largest single dimension accepted. */
#define SPMD_IDX_MAX_DIM ((uint32_t)1 << 28)

/* One IDX array of unsigned bytes (dtype byte 0x08), dims[0] outermost. */
typedef struct {
    int ndims;
    uint32_t dims[SPMD_IDX_MAX_DIMS];
    size_t count;  /* product of dims = number of bytes in data */
    uint8_t *data; /* malloc()ed, owned by the struct: release with spmd_idx_free */
} spmd_idx;

/* Parse an IDX image of `len` bytes from memory.  expected_ndims 1..8 (or 0
 * for any).  Validates: magic (two zero bytes), dtype byte (only 0x08 is
 * supported), number of dims, every dim (1..SPMD_IDX_MAX_DIM), total size
 * (<= SPMD_IDX_MAX_BYTES), payload length exactly equal to the product of
 * dims (truncated or trailing bytes are SPMD_ERR_FORMAT).  `name` is used in
 * messages only (NULL: "<memory>").  The bytes are copied: buf need not
 * outlive the call.  On success *out owns a fresh copy. */
spmd_status spmd_idx_parse(const void *buf, size_t len, int expected_ndims, const char *name,
                           spmd_idx *out, char *err, size_t errlen);
/* Same from a file, raw or gzip-compressed (detected from the content).
 * Errors: SPMD_ERR_NOTFOUND (no such file), SPMD_ERR_IO (open/read/
 * decompress failure), SPMD_ERR_FORMAT, SPMD_ERR_NOMEM.  Offsets in messages are in the uncompressed stream. */
spmd_status spmd_idx_load(const char *path, int expected_ndims, spmd_idx *out, char *err,
                          size_t errlen);
/* Free x->data and zero *x.  NULL or an already-freed struct is fine. */
void spmd_idx_free(spmd_idx *x);

/* ======================================================================
 * Labelled image datasets (MNIST, Fashion-MNIST)
 * ====================================================================== */

#define SPMD_DATASET_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
/* Per-pixel statistics over the training set (as in the torch examples). */
#define SPMD_FASHION_MNIST_MEAN 0.2860f
#define SPMD_FASHION_MNIST_STD 0.3530f
#define SPMD_MNIST_MEAN 0.1307f
#define SPMD_MNIST_STD 0.3081f

typedef enum { SPMD_SPLIT_TRAIN = 0, SPMD_SPLIT_TEST = 1 } spmd_split;

/* A dataset held in memory: n examples of rows x cols u8 pixels and one u8
 * label each.  A plain struct the caller may read freely; the two arrays are
 * owned by it and released by spmd_dataset_free.  A caller may lower n (to
 * train on a prefix); never raise it. */
typedef struct {
    size_t n;
    int rows, cols;
    int num_classes;  /* labels are in [0, num_classes) */
    uint8_t *images;  /* n * rows * cols bytes, example-major, row-major */
    uint8_t *labels;  /* n bytes */
} spmd_dataset;

#define SPMD_DATASET_INIT {0, 0, 0, 0, NULL, NULL}

/* Build a dataset from an idx3 image file and an idx1 label file (raw or
 * .gz): both files validated as in spmd_idx_load, counts must be equal, every
 * label < num_classes (1..256) — the message names the file and the byte
 * offset of the first bad label.  On success *out owns new arrays. */
spmd_status spmd_dataset_load_files(const char *images_path, const char *labels_path,
                                    int num_classes, spmd_dataset *out, char *err,
                                    size_t errlen);
/* Same from two in-memory IDX images (copied; names used in messages). */
spmd_status spmd_dataset_parse(const void *images, size_t images_len, const void *labels,
                               size_t labels_len, int num_classes, spmd_dataset *out, char *err,
                               size_t errlen);
/* Load the MNIST-layout files of one split from a directory:
 * train-images-idx3-ubyte / train-labels-idx1-ubyte (SPMD_SPLIT_TRAIN) or
 * t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte (SPMD_SPLIT_TEST), each
 * tried first without and then with a ".gz" suffix.  dir NULL or "":
 * SPMD_DATASET_DEFAULT_DIR (Debian package dataset-fashion-mnist).
 * num_classes is 10.  SPMD_ERR_NOTFOUND if a file is missing. */
spmd_status spmd_dataset_load_dir(const char *dir, spmd_split split, spmd_dataset *out,
                                  char *err, size_t errlen);
/* Free the arrays and zero *ds.  NULL or an already-freed struct is fine. */
void spmd_dataset_free(spmd_dataset *ds);

/* Fill one batch: for i < count, example idx[i] goes to
 *   x[i*rows*cols + p] = ((float)pixel / 255.0f - mean) / std   (float32
 *   arithmetic, as torchvision's ToTensor + Normalize) — an NCHW batch of
 *   count x 1 x rows x cols floats, and y[i] = label.
 * x or y may be NULL to skip it.  Caller owns x and y, sized for count.
 * SPMD_ERR_INVALID if an index is >= ds->n or std <= 0 (nothing written). */
spmd_status spmd_dataset_batch(const spmd_dataset *ds, const size_t *idx, size_t count,
                               float mean, float std, float *x, int *y);
/* Normalise the whole dataset into a new malloc()ed array of n*rows*cols
 * floats (*out, owned by the caller: free()). */
spmd_status spmd_dataset_to_float(const spmd_dataset *ds, float mean, float std, float **out);

/* ======================================================================
 * DistributedSampler (torch.utils.data.distributed semantics)
 * ====================================================================== */

typedef struct {
    size_t dataset_len;  /* N */
    int num_replicas;    /* W >= 1 */
    int rank;            /* 0 <= rank < W */
    int shuffle;         /* non-zero: permute per epoch */
    uint64_t seed;       /* the permutation of epoch e is a function of seed + e */
    int drop_last;       /* non-zero: drop the tail instead of padding */
} spmd_sampler_opts;

#define SPMD_SAMPLER_OPTS_DEFAULT {0, 1, 0, 1, 0, 0}

/* Opaque; owns the index list of the current epoch. */
typedef struct spmd_sampler spmd_sampler;

/* Semantics (as torch):
 *   drop_last && N % W:  num_samples = floor(N / W)   else  ceil(N / W)
 *   total_size = num_samples * W
 *   list = shuffle ? permutation(N, seed + epoch) : 0, 1, ..., N-1
 *   !drop_last: list is padded to total_size by repeating it from its start
 *   (cyclically when the padding exceeds N); drop_last: cut to total_size
 *   rank r takes list[r], list[r + W], list[r + 2W], ...  (num_samples items)
 * Permutation: a xoshiro256** generator seeded by four successive splitmix64
 * outputs starting from the state (seed + epoch); Fisher–Yates from the last
 * position down: for i = N-1 .. 1, j = uniform in [0, i] by Lemire's
 * multiply-and-reject, swap(list[i], list[j]).  (Not torch's randperm: torch's
 * generator cannot be reproduced, but this one is specified, portable and the
 * same on every rank.)
 * The epoch starts at 0; indices are computed at init and at set_epoch. */
spmd_status spmd_sampler_init(const spmd_sampler_opts *opts, spmd_sampler **out, char *err,
                              size_t errlen);
/* Recompute the list for epoch `epoch` (call before each epoch, as torch). */
spmd_status spmd_sampler_set_epoch(spmd_sampler *s, uint64_t epoch);
size_t spmd_sampler_num_samples(const spmd_sampler *s); /* this rank's count */
size_t spmd_sampler_total_size(const spmd_sampler *s);  /* num_samples * W */
uint64_t spmd_sampler_epoch(const spmd_sampler *s);
/* This rank's indices for the current epoch: num_samples entries, owned by
 * the sampler, valid until the next set_epoch or free. */
const size_t *spmd_sampler_indices(const spmd_sampler *s);
/* Elastic training (spmd/elastic.h): the world changed in the middle of an
 * epoch.  Rank r of W consuming its indices in batches of B takes list[r +
 * W*j], so after s steps the ranks together have consumed the list's first
 * consumed = W*B*s entries, a prefix.  spmd_sampler_consumed(s, steps, B)
 * computes it for this epoch's deal (what the ranks took in `steps` batches of
 * B since the epoch or the last reshard began, cut at the list's end).
 * spmd_sampler_reshard deals the rest, list[consumed..N), over the new world
 * by the same rule (rank r takes rest[r], rest[r + W'], ..., padded
 * cyclically from the rest's start; none when nothing is left), so every
 * remaining sample is seen once (plus padding) and none twice.  The deal
 * lasts for the epoch: set_epoch deals the next epoch's whole list over the
 * new world. */
spmd_status spmd_sampler_reshard(spmd_sampler *s, int rank, int world, size_t consumed, char *err,
                                 size_t errlen);
size_t spmd_sampler_consumed(const spmd_sampler *s, size_t steps, size_t batch);
void spmd_sampler_free(spmd_sampler *s); /* NULL is fine */

/* The permutation used above, exposed for tests and single-process use:
 * perm[0..n) receives a permutation of 0..n-1 determined by `seed`. */
void spmd_permutation(size_t n, uint64_t seed, size_t *perm);

/* ======================================================================
 * Batches over an index list (a plain iterator, no allocation)
 * ====================================================================== */

typedef struct {
    const size_t *indices; /* not owned: must outlive the iterator */
    size_t n, batch_size, pos;
    int drop_last;
} spmd_batch_iter;

/* batch_size >= 1.  drop_last: a final short batch is skipped. */
spmd_status spmd_batch_iter_init(spmd_batch_iter *it, const size_t *indices, size_t n,
                                 size_t batch_size, int drop_last);
/* Number of batches the iterator yields in total. */
size_t spmd_batch_iter_count(const spmd_batch_iter *it);
/* Next batch: returns 1 and sets *batch (pointing into `indices`) and
 * *count, or returns 0 when done. */
int spmd_batch_iter_next(spmd_batch_iter *it, const size_t **batch, size_t *count);
void spmd_batch_iter_reset(spmd_batch_iter *it);

/* ======================================================================
 * Prefetching batches (torch's DataLoader with a worker): a loader thread
 * fills the next batches into a bounded queue while the caller trains on
 * the current one.
 * ====================================================================== */
/* Fills batch `batch_no` (0, 1, ... from the start of the index list,
 * counting skipped batches) from examples idx[0..count): inputs x (count x
 * x_per_sample floats) and labels y.  Runs on the loader thread, never two
 * at once; it must not depend on when it runs (a batch's randomness drawn
 * from batch_no, not from a shared generator), so that the batches are the
 * same, bit for bit, as when filled on the caller's thread.  A failure
 * returns its status and writes one line to err. */
typedef spmd_status (*spmd_batch_fill_fn)(void *ctx, const size_t *idx, size_t count, uint64_t batch_no,
                                          float *x, int *y, char *err, size_t errlen);
typedef struct {
    const size_t *indices;  /* not copied: must outlive the iterator (e.g. a sampler's epoch list) */
    size_t n;
    size_t batch_size;      /* >= 1 */
    int drop_last;          /* as spmd_batch_iter */
    size_t first_batch;     /* batches skipped at the start (resuming mid-epoch) */
    size_t x_per_sample;    /* floats of input per example, >= 1 */
    int depth;              /* batches prepared ahead, 1..64 (torch's prefetch_factor) */
    spmd_batch_fill_fn fill;
    void *ctx;
} spmd_prefetch_opts;
typedef struct spmd_prefetch spmd_prefetch;
/* Start the loader thread (SPMD_ERR_INVALID for bad options, SPMD_ERR_NOMEM,
 * SPMD_ERR_IO when no thread can be made; err says which). */
spmd_status spmd_prefetch_start(const spmd_prefetch_opts *o, spmd_prefetch **out, char *err,
                                size_t errlen);
/* The next batch, in the order of the index list: returns 1 with *x, *y,
 * *count (and *idx, may be NULL) valid until the next call or stop; 0 after
 * the last batch; -1 when the loader failed on this batch (the batches
 * before it were all returned): spmd_prefetch_status / _errmsg give the
 * cause, with the batch number. */
int spmd_prefetch_next(spmd_prefetch *p, const float **x, const int **y, const size_t **idx, size_t *count);
spmd_status spmd_prefetch_status(spmd_prefetch *p);
const char *spmd_prefetch_errmsg(const spmd_prefetch *p);
/* Stop the loader (at once: a batch being filled is finished and dropped),
 * join its thread and free everything.  At any point, also before the last
 * batch (an early stop) or after an error.  NULL is fine. */
void spmd_prefetch_stop(spmd_prefetch *p);
/* The same over an image dataset, torch's
 *   DataLoader(dataset, batch_size, sampler, num_workers=1, prefetch_factor=depth)
 * with ToTensor + Normalize(mean, std): batches of indices[0..n) (e.g. a
 * sampler's epoch, spmd_sampler_indices / _num_samples) filled by
 * spmd_dataset_batch, the last one short.  ds and indices must outlive the
 * iterator.  SPMD_ERR_INVALID for a dataset not loaded or std <= 0. */
spmd_status spmd_prefetch_dataset(const spmd_dataset *ds, float mean, float std, const size_t *indices, size_t n,
                                  size_t batch_size, int depth, spmd_prefetch **out, char *err, size_t errlen);

/* ======================================================================
 * Checkpoints: the safetensors format
 *   [u64 little-endian header length H][H bytes of JSON, space padded]
 *   [raw little-endian tensor data]
 * JSON: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
 *        ..., "__metadata__": {"key": "value", ...}}
 * offsets relative to the start of the data; readable by safetensors'
 * safe_open / load_file and by PyTorch through it.
 * ====================================================================== */

#define SPMD_CKPT_MAX_DIMS 8
/* Limits enforced when reading (and writing). */
#define SPMD_CKPT_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* as safetensors */
#define SPMD_CKPT_MAX_NAME 1024u                            /* bytes per name or key */
#define SPMD_CKPT_MAX_VALUE 65536u                          /* bytes per metadata value */
#define SPMD_CKPT_MAX_TENSORS 100000u

/* A named tensor.  For saving, data is read only (never written) and must
 * hold prod(shape) * spmd_dtype_size(dtype) bytes (ndim 0: a scalar, one
 * element; any dim 0: an empty tensor, data may be NULL).  For loading, data
 * is the caller's destination of that size.  Names are UTF-8, unique,
 * 1..SPMD_CKPT_MAX_NAME bytes, and not "__metadata__". */
typedef struct {
    const char *name;
    spmd_dtype dtype; /* F32 F64 F16 BF16 I8 U8 I32 I64 */
    int ndim;         /* 0..SPMD_CKPT_MAX_DIMS */
    int64_t shape[SPMD_CKPT_MAX_DIMS];
    void *data;
} spmd_ckpt_tensor;

/* One metadata entry (both strings UTF-8, caller-owned). */
typedef struct {
    const char *key;
    const char *value;
} spmd_ckpt_kv;

/* Write a checkpoint atomically: the file is written to a temporary
 * ".<basename>.tmp-<host>-<pid>-XXXXXX" in the same directory, fsync()ed, renamed over
 * `path`, then the directory is fsync()ed.  A crash at any point leaves
 * either the old file or the new one at `path`, never a torn one (a stray
 * temporary may remain, never under the checkpoint's name: the next save
 * removes it, see spmd_ckpt_remove_stale).  Tensor data is
 * laid out by decreasing element size so every tensor is naturally aligned.
 * meta may be NULL when nmeta is 0.  Nothing is retained after the call. */
spmd_status spmd_ckpt_save(const char *path, const spmd_ckpt_tensor *tensors, size_t ntensors,
                           const spmd_ckpt_kv *meta, size_t nmeta, char *err, size_t errlen);

/* Remove the temporaries that writers of `path` killed mid-save left in its
 * folder (".<basename>.tmp-<host>-<pid>-XXXXXX" of a pid that no longer
 * exists on this host); a save in progress, here or on another host, is left
 * alone.  spmd_ckpt_save does this first; call it when resuming too.
 * *removed (may be NULL) counts the files removed. */
spmd_status spmd_ckpt_remove_stale(const char *path, int *removed, char *err, size_t errlen);

/* An open, validated checkpoint (opaque). */
typedef struct spmd_ckpt spmd_ckpt;

/* Open a checkpoint and validate its header strictly: length bound, JSON
 * syntax (own bounded parser: nesting, string escapes, UTF-8, number
 * ranges), known dtypes, shapes with at most SPMD_CKPT_MAX_DIMS dims,
 * data_offsets consistent with dtype and shape, offsets in range, tensors
 * neither overlapping nor leaving holes, data covering the file exactly, no
 * duplicate names, metadata values strings.  Failure: SPMD_ERR_FORMAT (or
 * SPMD_ERR_IO / SPMD_ERR_NOMEM) with the offending tensor or byte offset.
 * The file is kept open until spmd_ckpt_close; tensor data is read on demand. */
spmd_status spmd_ckpt_open(const char *path, spmd_ckpt **out, char *err, size_t errlen);
/* Same on an in-memory image (not copied: buf must stay valid and unchanged
 * until spmd_ckpt_close).  `name` is for messages (NULL: "<memory>"). */
spmd_status spmd_ckpt_open_mem(const void *buf, size_t len, const char *name, spmd_ckpt **out,
                               char *err, size_t errlen);
void spmd_ckpt_close(spmd_ckpt *c); /* NULL is fine */

/* Description of one stored tensor.  Strings are owned by the checkpoint and
 * valid until spmd_ckpt_close. */
typedef struct {
    const char *name;
    const char *dtype_name;   /* as in the file: "F32", "BOOL", "U16", ... */
    spmd_dtype dtype;         /* SPMD_DTYPE_COUNT when not an spmd_dtype */
    int ndim;
    int64_t shape[SPMD_CKPT_MAX_DIMS];
    uint64_t nbytes;
} spmd_ckpt_info;

size_t spmd_ckpt_count(const spmd_ckpt *c);
/* The i-th tensor in the order of the file's data (i < count). */
spmd_status spmd_ckpt_info_at(const spmd_ckpt *c, size_t i, spmd_ckpt_info *out);
/* SPMD_ERR_NOTFOUND if no tensor has that name. */
spmd_status spmd_ckpt_find(const spmd_ckpt *c, const char *name, spmd_ckpt_info *out);
/* Copy one tensor into t->data, after checking that the file's dtype and
 * shape equal t->dtype and t->ndim/t->shape (SPMD_ERR_NOTFOUND or
 * SPMD_ERR_MISMATCH naming the tensor and both shapes otherwise). */
spmd_status spmd_ckpt_read(spmd_ckpt *c, const spmd_ckpt_tensor *t, char *err, size_t errlen);
/* Metadata value for key, or NULL.  Owned by the checkpoint. */
const char *spmd_ckpt_meta(const spmd_ckpt *c, const char *key);
size_t spmd_ckpt_meta_count(const spmd_ckpt *c);
/* i-th metadata entry (file order); strings owned by the checkpoint. */
spmd_status spmd_ckpt_meta_at(const spmd_ckpt *c, size_t i, const char **key,
                              const char **value);

/* Convenience: open `path`, read every tensor of the list into its data
 * buffer, close.  Every tensor is checked (name, dtype, shape, as in
 * spmd_ckpt_read) before any is read, so a missing or mismatched tensor —
 * named in the message — leaves every buffer untouched; only an I/O error
 * during the reads can leave some filled.  Tensors in the file but not in
 * the list are ignored. */
spmd_status spmd_ckpt_load(const char *path, const spmd_ckpt_tensor *tensors, size_t ntensors,
                           char *err, size_t errlen);

/* ---- distributed pattern (seed 001: save on rank 0, barrier, all load) ----
 * Collective over g: every rank calls it with the same path and the same
 * tensor list (names, dtypes, shapes; data is each rank's own buffer).
 * Rank 0 saves, then the ranks synchronise (rank 0's save status is
 * broadcast, which is also the barrier), then every rank loads the file back
 * into its tensors and the ranks agree on the outcome (an all_reduce of the
 * statuses): SPMD_OK on every rank or an error on every rank.
 * The path must name the same file on every rank (one host or a shared FS). */
spmd_status spmd_ckpt_save_dist(spmd_group *g, const char *path, const spmd_ckpt_tensor *tensors,
                                size_t ntensors, const spmd_ckpt_kv *meta, size_t nmeta,
                                char *err, size_t errlen);
/* Collective: every rank loads path into its tensors; the ranks agree on the
 * outcome as above (used to resume). */
spmd_status spmd_ckpt_load_dist(spmd_group *g, const char *path, const spmd_ckpt_tensor *tensors,
                                size_t ntensors, char *err, size_t errlen);

/* ======================================================================
 * CIFAR-10, binary version (https://www.cs.toronto.edu/~kriz/cifar.html,
 * "CIFAR-10 binary version (suitable for C programs)": data_batch_1.bin ..
 * data_batch_5.bin and test_batch.bin).  Each record is 1 label byte
 * (0..9) and 3072 pixel bytes: the 32x32 red plane, then green, then blue. */
#define SPMD_CIFAR_RECORD 3073
typedef struct {
    size_t n;
    uint8_t *images;   /* n * 3072 bytes, (n, 3, 32, 32) */
    uint8_t *labels;   /* n bytes */
} spmd_cifar;
/* Per-channel mean and std of the training set (as torchvision examples use). */
#define SPMD_CIFAR10_MEAN {0.4914f, 0.4822f, 0.4465f}
#define SPMD_CIFAR10_STD {0.2470f, 0.2435f, 0.2616f}
/* Append the records of one file; a size that is not a whole number of
 * records or a label > 9 is an error naming the file and the value. */
spmd_status spmd_cifar_load_file(const char *path, spmd_cifar *ds, char *err, size_t errlen);
/* The five training batches or test_batch.bin from dir. */
spmd_status spmd_cifar_load_dir(const char *dir, spmd_split split, spmd_cifar *out, char *err,
                                size_t errlen);
void spmd_cifar_free(spmd_cifar *ds);
/* One batch x (count, 3, 32, 32), normalised per channel, y (count).
 * augment: random crop of 32x32 from the image zero-padded by 4 on each side
 * and a horizontal flip with probability 1/2 (torchvision's RandomCrop(32,
 * padding=4) + RandomHorizontalFlip), drawn from seed and the sample index,
 * so a batch is reproducible. */
spmd_status spmd_cifar_batch(const spmd_cifar *ds, const size_t *idx, size_t count, int augment,
                             uint64_t seed, float *x, int *y);

#ifdef __cplusplus
}
#endif
#endif
