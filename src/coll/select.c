/* src/coll/select.c — which algorithm runs a collective, and the work every
 * collective shares around it (world size 1, in place vs out of place, AVG).
 *
 * Choice, first match wins:
 *   1. the per-call option (spmd_coll_opts.algo, checked by api.c),
 *   2. the environment: SPMD_ALGO_<COLLECTIVE>=<name>, e.g.
 *      SPMD_ALGO_ALL_REDUCE=ring, SPMD_ALGO_BROADCAST=tree,
 *   3. the table below: the first row of the collective whose byte range and
 *      world-size range contain this call; where two rows trade places from
 *      one machine to the next (w = 2 from 128 KiB: cma or the slots), the
 *      group's first calls time both and keep the faster (trial.c).
 * A name that is unknown, or that names an algorithm of another collective,
 * fails with SPMD_ERR_INVALID listing the valid names.
 *
 * "bytes" is what every rank agrees on without talking: the buffer for
 * broadcast/reduce/all_reduce, the whole w·count output (or input) for the
 * gather/scatter family, reduce_scatter and all_to_all.  all_to_all_v's
 * counts differ per rank, so it never depends on them (pairwise always).
 *
 * The thresholds were measured on the 2-core development machine (TCP
 * loopback, world sizes 2, 3, 4 and 8) with bench/coll_sweep, fastest of
 * several repeats, algorithms interleaved in one run; the comments above the
 * rows say what decided them.  Rows with an empty byte range are never picked
 * automatically but stay available by name.
 *
 * On a group over MPI the rows marked ON_MPI come first (ON_MPI_HOST
 * ones before them when every rank runs on this host), then every row
 * marked ANY_PATH: spmd's algorithms run over MPI point-to-point.  "mpi" —
 * MPI's own non-blocking collective (mpi_native.c) — was measured against
 * them for every collective (bench/mpi_sweep.sh, Open MPI 4.1 over shared
 * memory and TCP, worlds 2 and 4) and is chosen where it won: nowhere so
 * far (docs/PERFORMANCE.md, "The MPI backend").
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/agree.h"
#include "coll/algos.h"
#include "coll/trial.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define ANY_SIZE SIZE_MAX
#define ANY_WORLD (1 << 30)
#define BY_NAME_ONLY 0, 0, 0, 0, 0
#define SHM , 1     /* the row needs shared slots with every rank */
#define ANY_PATH , 0 /* TCP or rings */
#define HIER , 2     /* the row needs several hosts of equal size, shared memory within each */
#define ON_MPI , 3   /* the row is for groups over MPI (SPMD_BACKEND=mpi) */
#define ON_MPI_HOST , 4 /* ... over MPI with every rank on this host (MPI's shared memory) */

typedef struct {
    spmd__coll_kind kind;
    const char *name;
    spmd__algo_fn fn;
    size_t lo, hi;  /* automatic choice for lo <= bytes < hi */
    int wlo, whi;   /* ... and wlo <= world <= whi */
    int shm;        /* ... and (1) only when every pair shares memory, (2) only over hosts
                       of equal size sharing memory within (transport/xfer.h), (3) only
                       on a group over MPI, (4) only on one over MPI within one host */
} algo_row;

/* clang-format off */
static const algo_row TABLE[] = {
/*  collective                name         function                       bytes from .. to        world  */
    /* Shared slots (one host, every pair on rings) come first: no message
     * headers, no kernel, one flag exchange per step. */
    {SPMD__C_BARRIER,        "shm",       spmd__barrier_shm,           0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_BARRIER,        "dissemination", spmd__barrier_dissemination, 0, ANY_SIZE,          2, ANY_WORLD ANY_PATH},

    {SPMD__C_BROADCAST,      "shm",       spmd__bcast_shm,             0,         ANY_SIZE,       2, ANY_WORLD SHM},
    /* scatter_ring never beat the pipelined tree here (w = 2, 4, 8; up to 16 MiB) */
    {SPMD__C_BROADCAST,      "tree",      spmd__bcast_tree,            0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},
    {SPMD__C_BROADCAST,      "scatter_ring", spmd__bcast_scatter_ring, BY_NAME_ONLY},

    {SPMD__C_REDUCE,         "shm",       spmd__reduce_shm,            0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_REDUCE,         "tree",      spmd__reduce_tree,           0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},

    /* shared slots: one step (every rank reduces everything) below 128 KiB
     * (w = 2, 4, 8: faster than two steps up to 64 KiB, slower from 128 KiB);
     * from there, w = 2: each rank reduces its half straight out of the
     * other's buffer (cma: fewer bytes moved, 3 syncs) or reduce-scatter +
     * all-gather through the slots, whichever the group's first calls of the
     * size class measured faster (trial_turn below: on the guests either
     * won by 1.15-1.5x from one day's CPU to the next); w > 2 on 2 cores:
     * the slots (cma's copies cost more there) */
    {SPMD__C_ALL_REDUCE,     "oneshot",   spmd__allreduce_shm_oneshot, 0,         128 * KiB,      2, ANY_WORLD SHM},
    {SPMD__C_ALL_REDUCE,     "cma",       spmd__allreduce_cma,         128 * KiB, ANY_SIZE,       2, 2 SHM},
    {SPMD__C_ALL_REDUCE,     "shm",       spmd__allreduce_shm,         0,         ANY_SIZE,       2, ANY_WORLD SHM},
    /* several hosts: reduce within each through shared memory, one ring per
     * host index across them, gather within each */
    {SPMD__C_ALL_REDUCE,     "hier",      spmd__allreduce_hier,        0,         ANY_SIZE,       4, ANY_WORLD HIER},
    /* a group over MPI, w = 2, rows good over both of Open MPI 4.1's paths
     * (bench/mpi_overhead -a rd,rhd,ring; docs/performance-log.md): rd, one
     * exchange of the whole buffer, is fastest over shared memory to 512 KiB
     * and over TCP everywhere but at 64 KiB, where the whole buffer just
     * misses TCP's eager limit and rhd's halves do not (29 us against rd's
     * 37 and MPI_Allreduce's 29); rhd is 1.4x faster than rd over shared
     * memory from 1 MiB, but from 2 MiB 1.2-1.4x slower over TCP, which is
     * how hosts talk (shared memory: rd still beats MPI_Allreduce, 0.9x).
     * MPI's own all_reduce never wins.
     * Within one host, Open MPI (4.1's vader, 5's sm) sends eagerly only up
     * to 4 KiB including its match header: rd's whole buffer of 4048 bytes
     * or more goes by rendezvous (8 us against 2.3 at 4032 B, and
     * MPI_Allreduce's 3.7 at 4 KiB), while rhd's halves stay eager up to
     * 8064 B (4.1-4.9 us; spmd-bench over mpirun --mca btl vader,self,
     * performance-log.md).  Over TCP (eager to 64 KiB) rhd's second step
     * would double the time, so the row is for one host only. */
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          0,         4040,           2, 2 ON_MPI},
    {SPMD__C_ALL_REDUCE,     "rhd",       spmd__allreduce_rhd,         4040,      8080,           2, 2 ON_MPI_HOST},
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          4040,      64 * KiB,       2, 2 ON_MPI},
    {SPMD__C_ALL_REDUCE,     "rhd",       spmd__allreduce_rhd,         64 * KiB,  128 * KiB,      2, 2 ON_MPI},
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          128 * KiB, 1 * MiB,        2, 2 ON_MPI},
    {SPMD__C_ALL_REDUCE,     "rhd",       spmd__allreduce_rhd,         1 * MiB,   2 * MiB,        2, 2 ON_MPI},
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          2 * MiB,   ANY_SIZE,       2, 2 ON_MPI},
    /* w = 2: one exchange of the whole buffer (rd) beats two half exchanges
     * up to 512 KiB; beyond that the ring's halved reduction and in-cache
     * pieces win.  w >= 3: rd to 128 KiB, rhd to 1 MiB, then the ring. */
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          0,         512 * KiB,      2, 2 ANY_PATH},
    {SPMD__C_ALL_REDUCE,     "rd",        spmd__allreduce_rd,          0,         128 * KiB,      3, ANY_WORLD ANY_PATH},
    {SPMD__C_ALL_REDUCE,     "rhd",       spmd__allreduce_rhd,         128 * KiB, 1 * MiB,        3, ANY_WORLD ANY_PATH},
    {SPMD__C_ALL_REDUCE,     "ring",      spmd__allreduce_ring,        0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},
    {SPMD__C_ALL_REDUCE,     "naive",     spmd__allreduce_naive,       BY_NAME_ONLY},
    {SPMD__C_ALL_REDUCE,     "butterfly", spmd__allreduce_butterfly,   BY_NAME_ONLY},

    {SPMD__C_GATHER,         "shm",       spmd__gather_shm,            0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_SCATTER,        "shm",       spmd__scatter_shm,           0,         ANY_SIZE,       2, ANY_WORLD SHM},
    /* the trees never beat the direct versions here (w = 4, 8) */
    {SPMD__C_GATHER,         "linear",    spmd__gather_linear,         0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},
    {SPMD__C_GATHER,         "tree",      spmd__gather_tree,           BY_NAME_ONLY},
    {SPMD__C_SCATTER,        "linear",    spmd__scatter_linear,        0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},
    {SPMD__C_SCATTER,        "tree",      spmd__scatter_tree,          BY_NAME_ONLY},

    /* bytes = the whole output; at w = 2 Bruck is the ring plus a copy */
    {SPMD__C_ALL_GATHER,     "shm",       spmd__allgather_shm,         0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_ALL_GATHER,     "bruck",     spmd__allgather_bruck,       0,         256 * KiB,      3, ANY_WORLD ANY_PATH},
    {SPMD__C_ALL_GATHER,     "ring",      spmd__allgather_ring,        0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},

    /* bytes = the whole input */
    {SPMD__C_REDUCE_SCATTER, "shm",       spmd__reduce_scatter_shm,    0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_REDUCE_SCATTER, "direct",    spmd__reduce_scatter_direct, 0,         256 * KiB,      2, ANY_WORLD ANY_PATH},
    {SPMD__C_REDUCE_SCATTER, "ring",      spmd__reduce_scatter_ring,   0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},

    /* bytes = the whole input; uneven splits always go pairwise */
    {SPMD__C_ALL_TO_ALL,     "shm",       spmd__alltoall_shm,          0,         ANY_SIZE,       2, ANY_WORLD SHM},
    {SPMD__C_ALL_TO_ALL,     "linear",    spmd__alltoall_linear,       0,         256 * KiB,      2, ANY_WORLD ANY_PATH},
    {SPMD__C_ALL_TO_ALL,     "pairwise",  spmd__alltoall_pairwise,     0,         ANY_SIZE,       2, ANY_WORLD ANY_PATH},

    /* MPI's own implementation (mpi_native.c), by name on a group over MPI */
    {SPMD__C_BARRIER,        "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_BROADCAST,      "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_REDUCE,         "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_ALL_REDUCE,     "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_GATHER,         "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_SCATTER,        "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_ALL_GATHER,     "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_REDUCE_SCATTER, "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
    {SPMD__C_ALL_TO_ALL,     "mpi",       SPMD__COLL_MPI,              BY_NAME_ONLY},
};
/* clang-format on */
#define NROWS (sizeof TABLE / sizeof TABLE[0])

void spmd__coll_algo_names(spmd__coll_kind k, char *out, size_t outlen) {
    size_t used = 0;
    if (outlen) out[0] = '\0';
    for (size_t i = 0; i < NROWS; i++) {
        if (TABLE[i].kind != k || !TABLE[i].fn) continue;
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            if (TABLE[j].kind == k && strcmp(TABLE[j].name, TABLE[i].name) == 0) dup = 1;
        if (dup) continue;
        int m = snprintf(out + used, outlen > used ? outlen - used : 0, "%s%s", used ? ", " : "",
                         TABLE[i].name);
        if (m > 0) used += (size_t)m;
        if (used >= outlen) break;
    }
}

static const algo_row *find_named(spmd__coll_kind k, const char *name) {
    for (size_t i = 0; i < NROWS; i++)
        if (TABLE[i].kind == k && TABLE[i].fn && strcmp(TABLE[i].name, name) == 0) return &TABLE[i];
    return NULL;
}

static void invalid_name_msg(spmd__coll_kind k, const char *name, const char *origin, char *err,
                             size_t errlen) {
    char names[256];
    spmd__coll_algo_names(k, names, sizeof names);
    int other = 0;
    for (size_t i = 0; i < NROWS; i++)
        if (TABLE[i].fn && strcmp(TABLE[i].name, name) == 0) other = 1;
    snprintf(err, errlen, "%s: unknown algorithm '%s'%s; valid choices: %s", spmd__coll_kind_name(k),
             name, origin, names);
    if (other) { /* say it exists, but for another collective */
        size_t l = strlen(err);
        snprintf(err + l, errlen > l ? errlen - l : 0, " ('%s' is an algorithm of another collective)",
                 name);
    }
}

spmd_status spmd__coll_algo_check(spmd__coll_kind k, const char *name, char *err, size_t errlen) {
    if (find_named(k, name)) return SPMD_OK;
    invalid_name_msg(k, name, "", err, errlen);
    return SPMD_ERR_INVALID;
}

/* Bytes every rank agrees on (see the header comment). */
static size_t select_bytes(const spmd__coll_args *a, int w) {
    const size_t es = spmd_dtype_size(a->dt);
    switch (a->kind) {
    case SPMD__C_BROADCAST:
    case SPMD__C_REDUCE:
    case SPMD__C_ALL_REDUCE: return a->count * es;
    case SPMD__C_ALL_TO_ALL:
        if (a->sendcounts) return ANY_SIZE; /* uneven: never rank-dependent */
        return a->count * es * (size_t)w;
    case SPMD__C_GATHER:
    case SPMD__C_SCATTER:
    case SPMD__C_ALL_GATHER:
    case SPMD__C_REDUCE_SCATTER: return a->count * es * (size_t)w;
    default: return 0;
    }
}

/* Whether a row marked `need` (algo_row.shm) fits a mesh with these paths:
 * a group over MPI within one host (4) also takes the rows of any group
 * over MPI (3). */
static int row_fits(int need, int paths) {
    return !need || need == paths || (need == 3 && paths == 4);
}

/* shm: 1 every pair shares memory, 2 hosts of equal size, 3 a group over
 * MPI, 4 one over MPI within one host, 0 none of these */
static const algo_row *auto_row(const spmd__coll_args *a, int w, int shm) {
    const size_t bytes = select_bytes(a, w);
    for (size_t i = 0; i < NROWS; i++) {
        const algo_row *t = &TABLE[i];
        if (t->kind != a->kind || !t->fn || t->lo == t->hi || !row_fits(t->shm, shm)) continue;
        if (bytes >= t->lo && (bytes < t->hi || t->hi == ANY_SIZE) && w >= t->wlo && w <= t->whi) return t;
    }
    return NULL;
}

/* An algorithm's id on the wire: the index of the first row with its name
 * (a name may have several rows, one per size range; every rank runs the
 * same table), worked out once per row. */
static int first_row[NROWS];
static pthread_once_t first_row_once = PTHREAD_ONCE_INIT;
static void fill_first_row(void) {
    for (size_t i = 0; i < NROWS; i++) {
        const algo_row *f = TABLE[i].fn ? find_named(TABLE[i].kind, TABLE[i].name) : NULL;
        first_row[i] = f ? (int)(f - TABLE) : (int)i;
    }
}
static int algo_id(const algo_row *row) {
    pthread_once(&first_row_once, fill_first_row);
    return first_row[row - TABLE];
}

static const char *algo_label(int kind, int id) {
    return id >= 0 && (size_t)id < NROWS && (int)TABLE[id].kind == kind ? TABLE[id].name : NULL;
}

const char *spmd__coll_select_name(const spmd__coll_args *a, int w, int shm) {
    const algo_row *t = auto_row(a, w, shm);
    return t ? t->name : NULL;
}

/* SPMD_ALGO_ALL_REDUCE etc.: read at every call (a program may change it
 * between calls), through common/env_watch.c (getenv's walk was 8 % of a
 * small all_reduce); the names are made once. */
static char env_names[SPMD__C_KIND_COUNT][40];
static pthread_once_t env_names_once = PTHREAD_ONCE_INIT;
static void fill_env_names(void) {
    for (int k = 0; k < SPMD__C_KIND_COUNT; k++) {
        const char *kn = spmd__coll_kind_name((spmd__coll_kind)k);
        size_t i = (size_t)snprintf(env_names[k], sizeof env_names[k], "SPMD_ALGO_");
        for (; *kn && i + 1 < sizeof env_names[k]; kn++) env_names[k][i++] = (char)toupper((unsigned char)*kn);
        env_names[k][i] = '\0';
    }
}
static const char *env_choice(spmd__coll_kind k, const char **var) {
    if ((int)k < 0 || k >= SPMD__C_KIND_COUNT) return NULL;
    pthread_once(&env_names_once, fill_env_names);
    *var = env_names[k];
    const char *v = spmd__env_watched(env_names[k]);
    return v && *v ? v : NULL;
}

/* ---- what every algorithm would otherwise repeat ------------------------- */

/* World size 1: the result is our own input. */
static spmd_status run_local(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const size_t es = spmd_dtype_size(a->dt), bytes = a->count * es;
    switch (a->kind) {
    case SPMD__C_BARRIER:
    case SPMD__C_BROADCAST: return SPMD_OK;
    case SPMD__C_REDUCE:
    case SPMD__C_ALL_REDUCE:
    case SPMD__C_GATHER:
    case SPMD__C_SCATTER:
    case SPMD__C_REDUCE_SCATTER:
        spmd__copy(a->recvbuf, a->sendbuf, bytes);
        return SPMD_OK;
    case SPMD__C_ALL_GATHER:
        spmd__copy(spmd__block(a, a->recvbuf, 0, es), a->sendbuf, bytes);
        return SPMD_OK;
    case SPMD__C_ALL_TO_ALL: {
        size_t so, sl, ro, rl;
        spmd__a2a_block(a, 0, 0, &so, &sl);
        spmd__a2a_block(a, 0, 1, &ro, &rl);
        if (sl != rl)
            return spmd__coll_fail(c, SPMD_ERR_MISMATCH,
                                   "all_to_all: rank 0 sends itself %zu bytes but expects %zu", sl, rl);
        spmd__copy((char *)a->recvbuf + ro, (const char *)a->sendbuf + so, sl);
        return SPMD_OK;
    }
    default: return spmd__coll_fail(c, SPMD_ERR_INVALID, "unknown collective kind %d", (int)a->kind);
    }
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen) {
    if (!alen || !blen) return 0;
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + blen && y < x + alen;
}

/* Bytes spanned by the send side of an all_to_all. */
static size_t a2a_send_extent(const spmd__coll_args *a, int w) {
    size_t ext = 0, off, len;
    for (int i = 0; i < w; i++) {
        spmd__a2a_block(a, i, 0, &off, &len);
        if (len && off + len > ext) ext = off + len;
    }
    return ext;
}
static size_t a2a_recv_extent(const spmd__coll_args *a, int w) {
    size_t ext = 0, off, len;
    for (int i = 0; i < w; i++) {
        spmd__a2a_block(a, i, 1, &off, &len);
        if (len && off + len > ext) ext = off + len;
    }
    return ext;
}

/* The row this call runs: SPMD_OK, or SPMD_ERR_INVALID with the reason in
 * why (an unknown name, no algorithm for this world size, a row that needs
 * shared memory the mesh does not have) — decided by this rank alone. */
static spmd_status choose(spmd__coll_ctx *c, const spmd__coll_args *a, const char *name, const char *var,
                          int paths, const algo_row **out, char *why, size_t whylen) {
    const int w = spmd__ctx_world(c);
    const algo_row *row = NULL;
    if (name) {
        row = find_named(a->kind, name);
        if (!row) {
            char origin[96];
            if (a->algo[0]) snprintf(origin, sizeof origin, " (spmd_coll_opts.algo)");
            else snprintf(origin, sizeof origin, " (from %s)", var);
            invalid_name_msg(a->kind, name, origin, why, whylen);
            return SPMD_ERR_INVALID;
        }
        if (row->fn == SPMD__COLL_MPI && !c->m->ext) { /* refused here, so the ranks agree on it */
            snprintf(why, whylen, "%s: algorithm 'mpi' needs a group on the MPI backend",
                     spmd__coll_kind_name(a->kind));
            return SPMD_ERR_INVALID;
        }
    }
    if (w == 1) return SPMD_OK;
    const int shm = paths == 1, hier = paths == 1 ? spmd__shm_coll_hier_usable(c) : paths == 2;
    if (!row) row = auto_row(a, w, paths);
    if (!row) {
        snprintf(why, whylen, "%s: no algorithm for world size %d", spmd__coll_kind_name(a->kind), w);
        return SPMD_ERR_INVALID;
    }
    if ((row->shm == 1 && !shm) || (row->shm == 2 && !hier)) {
        snprintf(why, whylen, "%s %s: needs %s", spmd__coll_kind_name(a->kind), row->name,
                 row->shm == 1 ? "shared memory with every rank" : "hosts of equal size sharing memory");
        return SPMD_ERR_INVALID;
    }
    *out = row;
    return SPMD_OK;
}

/* The paths every rank of the mesh has alike, as auto_row takes them: a
 * group over MPI (c->m->ext) has no rings, so its rows come first, then the
 * path-free ones; every rank on one host (mpi_link.c counts them by kernel
 * identity) is so for all of them or for none. */
static int mesh_paths(const spmd__coll_ctx *c) {
    if (c->m->ext) return c->m->local_world == c->m->world ? 4 : 3;
    return spmd__shm_coll_usable(c) ? 1 : spmd__shm_coll_hier_usable(c) ? 2 : 0;
}

/* The table's row and the descriptor of the last call that took them from
 * the table, kept while the arguments that decide both stay the same: a
 * loop of one collective (every training step) skips the table's scan and
 * the hash, a fifth of a small all_reduce's own work (issue 28). */
static int memo_matches(const spmd__coll_memo *m, const spmd__coll_args *a, int paths) {
    return m->row && m->kind == a->kind && m->count == a->count && m->dt == a->dt && m->op == a->op &&
           m->root == a->root && m->paths == paths && !a->sendcounts && !a->recvcounts;
}

static void memo_keep(spmd__coll_memo *m, const spmd__coll_args *a, int paths, const algo_row *row,
                      int algo, uint32_t desc) {
    *m = (spmd__coll_memo){.kind = a->kind, .count = a->count, .dt = a->dt, .op = a->op, .root = a->root,
                           .paths = paths, .row = row, .algo = algo, .desc = desc};
}

/* w = 2 from 128 KiB, the table's "cma" row: cma (candidate 0) or the
 * slots' "shm" (1), as the group's first such calls measured them
 * (trial.c).  Sets *row, c->algo and c->desc for this call; *timed = the
 * candidate to time, or -1, and *trial the size class's trial. */
static spmd_status trial_turn(spmd__coll_ctx *c, const spmd__coll_args *a, const algo_row **row, int *timed,
                              spmd__coll_trial **trial) {
    const size_t bytes = a->count * spmd_dtype_size(a->dt);
    spmd__coll_trial *t = *trial = &c->trial[spmd__trial_class(bytes)];
    int pick = spmd__trial_pick(t), settled = 0;
    if (pick == SPMD__TRIAL_DECIDE) {
        /* every rank's ns per KiB of each, summed by the one-step slot
         * algorithm (two addends: the same sum, bit for bit, everywhere) */
        double mine[2], sum[2];
        spmd__trial_rates(t, mine);
        spmd__coll_args s;
        memset(&s, 0, sizeof s);
        s.kind = SPMD__C_ALL_REDUCE;
        s.sendbuf = mine;
        s.recvbuf = sum;
        s.count = 2;
        s.dt = SPMD_F64;
        s.op = SPMD_SUM;
        const algo_row *one = find_named(SPMD__C_ALL_REDUCE, "oneshot");
        c->algo = algo_id(one);
        c->desc = spmd__coll_describe(&s, c->algo, spmd__ctx_segment_bytes(c));
        spmd_status st = one->fn(c, &s);
        if (st) return st;
        spmd__trial_settle(t, sum);
        SPMD_LOGD("all_reduce of %zu bytes and its size class, world 2: cma %.0f ns/KiB, shm %.0f (summed over "
                  "the ranks): %s", bytes, sum[0], sum[1], t->winner ? "shm" : "cma");
        pick = t->winner;
        settled = 1;
    }
    *timed = t->decided ? -1 : pick;
    if (pick == 1) *row = find_named(a->kind, "shm");
    if (pick == 1 || settled) {
        c->algo = algo_id(*row);
        c->desc = spmd__coll_describe(a, c->algo, spmd__ctx_segment_bytes(c));
    }
    return SPMD_OK;
}

spmd_status spmd__coll_run(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    if ((int)a->kind <= 0 || a->kind >= SPMD__C_KIND_COUNT)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "unknown collective kind %d", (int)a->kind);

    const char *var = "";
    const char *name = a->algo[0] ? a->algo : env_choice(a->kind, &var);
    const int paths = w > 1 ? mesh_paths(c) : 0;
    const algo_row *row = NULL;
    spmd__coll_memo *memo = &c->memo;
    c->algo_name = algo_label;
    if (!name && w > 1 && memo_matches(memo, a, paths)) {
        row = memo->row;
        c->algo = memo->algo;
        c->desc = memo->desc;
    } else {
        char why[SPMD__ERRLEN];
        why[0] = '\0'; /* not = "": zeroing 512 bytes was 6 % of a small collective */
        spmd_status chosen = choose(c, a, name, var, paths, &row, why, sizeof why);
        if (w == 1) return chosen ? spmd__coll_fail(c, chosen, "%s", why) : run_local(c, a);
        /* What every rank must agree on; a rank that could not choose
         * settles it with every rank first (agree.c, below). */
        c->algo = row ? algo_id(row) : SPMD__ALGO_NONE;
        c->desc = spmd__coll_describe(a, c->algo, spmd__ctx_segment_bytes(c));
        if (!name && row) memo_keep(memo, a, paths, row, c->algo, c->desc);
        if (!row) {
            spmd__desync_announce(c, 1);
            spmd_status st = spmd__coll_agree(c, a);
            if (st) return st;
            c->unanimous = 1; /* every rank failed alike: the group stays usable */
            return spmd__coll_fail(c, chosen, "%s", why);
        }
    }
    int timed = -1;
    spmd__coll_trial *trial = NULL;
    if (!name && row->fn == spmd__allreduce_cma && spmd__shm_coll_cma_usable(c)) {
        spmd_status st = trial_turn(c, a, &row, &timed, &trial);
        if (st) return st;
    }
    /* Rooted collectives settle what every rank must agree on first (agree.c). */
    const int agree = spmd__coll_is_rooted(a->kind);
    spmd__desync_announce(c, agree);
    if (agree) {
        spmd_status st = spmd__coll_agree(c, a);
        if (st) return st;
    }
    SPMD_LOGD("%s: count %zu %s, world %d: algorithm %s", spmd__coll_kind_name(a->kind), a->count,
              spmd_dtype_name(a->dt), w, row->name);

    spmd__coll_args b = *a;
    const size_t es = spmd_dtype_size(a->dt);
    if (a->kind == SPMD__C_ALL_GATHER) {
        /* own block in place once, for every algorithm (memmove: it may overlap) */
        spmd__copy(spmd__block(a, a->recvbuf, r, es), a->sendbuf, a->count * es);
    } else if (a->kind == SPMD__C_ALL_TO_ALL) {
        const size_t sext = a2a_send_extent(a, w);
        if (overlaps(a->sendbuf, sext, a->recvbuf, a2a_recv_extent(a, w))) {
            void *copy = spmd__scratch(c, 3, sext);
            if (!copy) return SPMD__NOMEM(c, "in-place all_to_all", sext);
            memcpy(copy, a->sendbuf, sext);
            b.sendbuf = copy;
        }
    }

    const uint64_t t0 = timed >= 0 ? spmd__now_ns() : 0;
    spmd_status st = row->fn(c, &b);
    if (st != SPMD_OK) return st;
    if (timed >= 0) spmd__trial_record(trial, timed, spmd__now_ns() - t0, a->count * es);

    if (a->op == SPMD_AVG) {
        if (a->kind == SPMD__C_ALL_REDUCE || a->kind == SPMD__C_REDUCE_SCATTER ||
            (a->kind == SPMD__C_REDUCE && r == a->root))
            spmd__avg_finish(a->recvbuf, a->count, a->dt, w);
    }
    return SPMD_OK;
}
