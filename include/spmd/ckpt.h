/* spmd/ckpt.h — sharded checkpoints in torch.distributed.checkpoint's (DCP)
 * layout: a directory with one `.metadata` file (a pickle of DCP's Metadata)
 * and the ranks' data files.
 *
 * This part: the metadata, decoded without executing anything (a restricted
 * pickle reader: only an allow-list of opcodes and of DCP's own classes is
 * accepted, everything else is an error naming it) and encoded as the
 * classes torch's dcp.load expects.  See docs/DATA.md.
 *
 * Ownership: every spmd_dcp_metadata filled by spmd_dcp_metadata_decode owns
 * its arrays and strings; free with spmd_dcp_metadata_free. */
#ifndef SPMD_CKPT_H
#define SPMD_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/group.h"
#include "spmd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPMD_DCP_MAX_DIMS 8

/* One chunk of a tensor: the box [offsets, offsets + sizes) in the global
 * tensor's index space. */
typedef struct {
    int64_t offsets[SPMD_DCP_MAX_DIMS];
    int64_t sizes[SPMD_DCP_MAX_DIMS];
} spmd_dcp_chunk;

/* One state-dict entry: a tensor (its global shape and the chunks saved) or a
 * bytes item (a BytesStorageMetadata: RNG state, sampler position, ...). */
typedef struct {
    char *fqn;      /* the state-dict key, e.g. "model.fc1.weight" */
    int is_bytes;   /* 1: bytes item (no dtype, shape or chunks) */
    char dtype[16]; /* torch's name: "float32", "bfloat16", "int64", "bool" ... */
    int requires_grad;
    int ndim; /* 0..SPMD_DCP_MAX_DIMS */
    int64_t size[SPMD_DCP_MAX_DIMS];
    size_t nchunks;
    spmd_dcp_chunk *chunks;
} spmd_dcp_entry;

/* Where one saved item lives: file relative to the checkpoint directory and
 * the byte range in it (DCP's MetadataIndex -> _StorageInfo). */
typedef struct {
    char *fqn;
    int has_offset; /* tensors: offset of the chunk; bytes items: none */
    int ndim;
    int64_t offset[SPMD_DCP_MAX_DIMS];
    int64_t index;       /* the chunk index hint, -1 when none */
    char *relative_path; /* e.g. "__0_0.distcp" */
    uint64_t file_offset, length;
} spmd_dcp_storage;

typedef struct {
    size_t nentries;
    spmd_dcp_entry *entries;
    size_t nstorage;
    spmd_dcp_storage *storage;
} spmd_dcp_metadata;

/* Decode a `.metadata` file's bytes.  Accepts pickle protocols 2-5 as
 * Python's pickle.dump writes them for DCP's classes; rejects any other
 * opcode or global, shapes or chunks out of range, more than
 * SPMD_DCP_MAX_DIMS dims, and inputs over the limits (64 Mi values), with
 * SPMD_ERR_FORMAT and a message naming the cause and the offset.  what names
 * the input in messages (a path). */
spmd_status spmd_dcp_metadata_decode(const void *buf, size_t len, const char *what,
                                     spmd_dcp_metadata *out, char *err, size_t errlen);

/* Read and decode DIR/.metadata (*out is zeroed first: freeable on any
 * return).  No .metadata: SPMD_ERR_NOTFOUND (an incomplete checkpoint). */
spmd_status spmd_dcp_metadata_read(const char *dir, spmd_dcp_metadata *out, char *err,
                                   size_t errlen);

/* Encode as a pickle (protocol 2) of torch.distributed.checkpoint.metadata.
 * Metadata with planner_data {fqn: (fqn,)} (a flat state dict).  *buf is
 * malloc'd (free it).  Checks what decode checks (SPMD_ERR_INVALID). */
spmd_status spmd_dcp_metadata_encode(const spmd_dcp_metadata *m, void **buf, size_t *len,
                                     char *err, size_t errlen);

void spmd_dcp_metadata_free(spmd_dcp_metadata *m);

/* The entry named fqn, or NULL. */
const spmd_dcp_entry *spmd_dcp_metadata_find(const spmd_dcp_metadata *m, const char *fqn);

/* ---- loading with resharding ---------------------------------------------- */
/* One tensor (or a box of it) a rank wants: the global shape it expects and
 * the box [offsets, offsets + sizes) it holds, row-major in data.  A whole
 * tensor: offsets 0, sizes = global.  A ZeRO-1 slice or a TP row/column
 * slice: the box of that slice. */
typedef struct {
    const char *fqn;
    const char *dtype; /* torch's name, "float32" ... */
    int ndim;
    int64_t global[SPMD_DCP_MAX_DIMS];
    int64_t offsets[SPMD_DCP_MAX_DIMS];
    int64_t sizes[SPMD_DCP_MAX_DIMS];
    void *data; /* prod(sizes) elements */
} spmd_dcp_shard;

/* Fill each shard from the checkpoint in dir (torch's dcp.save or spmd's),
 * whatever world size and layout saved it: every saved chunk that overlaps
 * the box is read (only its own byte range of its file) and the overlap
 * copied.  Errors name the tensor: SPMD_ERR_NOTFOUND (no such key),
 * SPMD_ERR_MISMATCH (dtype or global shape differ: both shapes in the
 * message; or the saved chunks do not cover the box), SPMD_ERR_FORMAT (a
 * data file that is not what the metadata says), SPMD_ERR_IO. */
spmd_status spmd_dcp_load(const char *dir, const spmd_dcp_shard *shards, size_t nshards, char *err,
                          size_t errlen);

/* A bytes item (RNG state, sampler position, step counters kept as bytes):
 * saved as torch.save(bytes), so torch's dcp.load gives a Python bytes. */
typedef struct {
    const char *fqn;
    const void *data;
    size_t len;
    int pickled; /* 1: data is a whole pickle of a value (spmd_dcp_value_encode), saved as
                    torch.save(that value) — torch's dcp.load gives the value, not bytes */
} spmd_dcp_bytes;

/* Collective over g (every rank calls it; g NULL: one process): each rank
 * passes the boxes of tensors it holds (spmd_dcp_shard with offsets/sizes
 * in the global tensor, data row-major) and its bytes items.  The plans are
 * all-gathered; a box held by several ranks (replicas: DP copies, whole
 * tensors) is written once, by the lowest rank holding it; ranks that
 * disagree on a tensor's dtype or global shape fail on every rank with both
 * shapes named.  Rank r writes dir/__r_0.distcp (through a temporary, fsync,
 * rename); rank 0 writes dir/.metadata only after every rank reported its
 * file written and synced, and it removes .metadata first: a save killed at
 * any point leaves no checkpoint that looks complete.  Temporaries of a
 * killed save and data files of a larger earlier world are removed.  The
 * status is agreed: every rank returns the same success or failure. */
spmd_status spmd_dcp_save(spmd_group *g, const char *dir, const spmd_dcp_shard *shards,
                          size_t nshards, const spmd_dcp_bytes *bytes, size_t nbytes, char *err,
                          size_t errlen);

/* ---- async saving ----------------------------------------------------------
 * The caller is blocked only while its state is copied into a staging buffer
 * the saver owns; the plans' exchange, the writes, the fsyncs and the
 * metadata-last commit then run on a thread of the saver's own, with the
 * same outcome and the same directory-level atomicity as spmd_dcp_save (a
 * killed save never leaves a checkpoint that looks complete).
 *
 * The background's collectives run on a subgroup of all of g's ranks that
 * the saver makes at creation: a subgroup has its own connections, sequence
 * numbers and executor, so they never interleave with the collectives the
 * caller keeps issuing on g (two threads issuing collectives on one group
 * would issue them in different orders on different ranks).  Groups over MPI
 * are refused (SPMD_ERR_UNSUPPORTED): the thread would call MPI beside the
 * caller's own MPI calls. */
typedef struct spmd_dcp_saver spmd_dcp_saver;

/* Collective over g (g NULL: one process): a saver.  Free it (collectively,
 * before g is destroyed) with spmd_dcp_saver_free. */
spmd_status spmd_dcp_saver_new(spmd_group *g, spmd_dcp_saver **out, char *err, size_t errlen);

/* Start a save of the same arguments as spmd_dcp_save (every rank calls it,
 * in the same order).  Returns once every shard and bytes item is copied:
 * the caller may change or free its buffers at once.  The staging buffer is
 * kept for the next save (no new page faults when the state keeps its size).
 * A save of this saver still running is waited for first; when that one
 * failed and its outcome was not taken by spmd_dcp_save_wait, that outcome
 * is returned (the same on every rank) and no new save starts.  A bad
 * argument or a failed staging is returned at once, and also agreed with
 * the other ranks in the background, so their wait reports it (naming this
 * rank) instead of waiting for this rank's file. */
spmd_status spmd_dcp_save_async(spmd_dcp_saver *s, const char *dir, const spmd_dcp_shard *shards,
                                size_t nshards, const spmd_dcp_bytes *bytes, size_t nbytes, char *err,
                                size_t errlen);

/* The same, with the copy into the staging buffer done by the saver's
 * thread too: the call returns at once (names and dtypes copied, memory
 * reserved), and the caller's data buffers must stay unchanged until
 * spmd_dcp_save_staged returns.  In a training loop: start the save after
 * the optimizer step, run the next forward and backward (they only read the
 * parameters), call spmd_dcp_save_staged before the next optimizer step —
 * the copy overlaps the computation instead of stalling it. */
spmd_status spmd_dcp_save_async_deferred(spmd_dcp_saver *s, const char *dir, const spmd_dcp_shard *shards,
                                         size_t nshards, const spmd_dcp_bytes *bytes, size_t nbytes, char *err,
                                         size_t errlen);
/* Wait until the last save started has copied the caller's data (at once
 * for spmd_dcp_save_async, or with no save running). */
void spmd_dcp_save_staged(spmd_dcp_saver *s);

/* Wait for the last save started; its status, agreed by every rank: the
 * lowest failing rank's cause, named ("rank 1: DIR/__1_0.distcp.tmp:
 * create: Permission denied").  SPMD_OK when no save's outcome is pending. */
spmd_status spmd_dcp_save_wait(spmd_dcp_saver *s, char *err, size_t errlen);

/* Wait for a running save (its outcome is dropped), destroy the subgroup. */
void spmd_dcp_saver_free(spmd_dcp_saver *s);

/* A bytes item of the checkpoint in dir (torch.save of a bytes or str
 * object); *data is malloc'd. */
spmd_status spmd_dcp_load_bytes(const char *dir, const char *fqn, void **data, size_t *len,
                                char *err, size_t errlen);

/* The Python value of a bytes item: what torch's dcp.save writes for every
 * non-tensor entry of a state dict (torch.save(obj)), e.g. the optimizer's
 * param_groups (optim.param_groups.0.lr 0.01, .betas (0.9, 0.999),
 * .params [0, 1], .foreach None).  Only plain data is read: None, bools,
 * ints (64-bit), floats, str, bytes, and tuples, lists and dicts of them
 * (nested at most 64 deep, at most 1 Mi values).  Anything else — a global
 * (a torch.dtype, a class, a callable), a tensor — is refused with
 * SPMD_ERR_FORMAT naming the item and what it holds; nothing is executed. */
typedef enum {
    SPMD_DCP_NONE,
    SPMD_DCP_BOOL,
    SPMD_DCP_INT,
    SPMD_DCP_FLOAT,
    SPMD_DCP_STR,
    SPMD_DCP_BYTES,
    SPMD_DCP_LIST, /* a list or a tuple (is_tuple) */
    SPMD_DCP_DICT
} spmd_dcp_value_type;

typedef struct spmd_dcp_value spmd_dcp_value;
struct spmd_dcp_value {
    spmd_dcp_value_type type;
    int is_tuple;
    int64_t i;              /* BOOL (0/1), INT */
    double f;               /* FLOAT */
    char *s;                /* STR (UTF-8, NUL-terminated), BYTES */
    size_t len;             /* STR, BYTES */
    size_t n;               /* LIST: items; DICT: pairs */
    spmd_dcp_value *items;  /* LIST: n values; DICT: key, value, key, value ... */
};

/* Read the bytes item fqn of the checkpoint in dir as a value (*out owns its
 * memory: spmd_dcp_value_free).  No such bytes item: SPMD_ERR_NOTFOUND. */
spmd_status spmd_dcp_load_value(const char *dir, const char *fqn, spmd_dcp_value *out, char *err,
                                size_t errlen);
void spmd_dcp_value_free(spmd_dcp_value *v);

/* v as a pickle (protocol 2) of the Python value: what a pickled
 * spmd_dcp_bytes item holds (e.g. the optimizer's param_groups entries
 * under torch's keys).  *buf is malloc'd (free it); SPMD_ERR_INVALID for a
 * value nested deeper than 64 or a bad type, SPMD_ERR_NOMEM. */
spmd_status spmd_dcp_value_encode(const spmd_dcp_value *v, void **buf, size_t *len);

/* A bytes item holding one number (an int, float or bool) as a double
 * (lr, momentum, weight_decay); SPMD_ERR_MISMATCH for any other value. */
spmd_status spmd_dcp_load_number(const char *dir, const char *fqn, double *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
