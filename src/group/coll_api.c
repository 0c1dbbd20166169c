/* src/group/coll_api.c — the public collective functions of spmd/group.h.
 *
 * Each call validates its arguments, builds a spmd__coll_args (copying the
 * arrays the caller may free right after the call: all_gather_list's buffer
 * list, all_to_all_v's counts and displacements) and hands it to the group's
 * executor (spmd__group_collective), which runs it inline (blocking form) or
 * queues it (async form) and eventually calls spmd__coll_run (select.c).
 *
 * Validation happens before anything is sent, so a bad argument leaves the
 * group usable.  Checks that depend only on arguments every rank must pass
 * identically (dtype, op, root, sizes, algorithm name) produce the same
 * SPMD_ERR_INVALID and the same message on every rank; checks of rank-local
 * arguments (a NULL buffer where this rank needs one) fail on that rank only.
 * The message is kept by spmd__group_error (spmd_group_errmsg()).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll/algos.h"
#include "group_internal.h"

/* Stand-in for a NULL buffer of zero bytes, so algorithms never do
 * arithmetic on a null pointer.  Nothing is ever written to it. */
static unsigned char empty_buf[64];

static spmd_status invalid(spmd_group *g, const char *fn, const char *fmt, ...) SPMD__PRINTF(3, 4);
static spmd_status invalid(spmd_group *g, const char *fn, const char *fmt, ...) {
    char msg[SPMD__ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return spmd__group_error(g, SPMD_ERR_INVALID, "%s: %s", fn, msg);
}

/* a * b without overflow, kept below PTRDIFF_MAX so pointer offsets are safe. */
static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a && b > (size_t)PTRDIFF_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Common start: group, handle pointer, options, dtype (and op when reducing). */
static spmd_status begin(spmd_group *g, const char *fn, spmd__coll_kind kind, spmd_dtype dt,
                         int reducing, spmd_op op, const spmd_coll_opts *o, spmd_work **w,
                         int async, spmd__coll_args *a) {
    if (!g) return SPMD_ERR_INVALID; /* nowhere to keep a message */
    if (async && !w) return invalid(g, fn, "the work handle pointer is NULL");
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->dt = dt;
    a->op = reducing ? op : SPMD_SUM;
    if (kind != SPMD__C_BARRIER && ((int)dt < 0 || dt >= SPMD_DTYPE_COUNT))
        return invalid(g, fn, "unknown dtype %d", (int)dt);
    if (reducing) {
        if ((int)op < 0 || op >= SPMD_OP_COUNT) return invalid(g, fn, "unknown op %d", (int)op);
        if (spmd__reduce_check(dt, op) != SPMD_OK)
            return invalid(g, fn, "op '%s' is not defined for dtype %s", spmd_op_name(op),
                           spmd_dtype_name(dt));
    }
    if (o && o->algo && o->algo[0]) {
        char err[SPMD__ERRLEN];
        if (strlen(o->algo) >= sizeof a->algo)
            return invalid(g, fn, "algorithm name '%.40s...' is too long", o->algo);
        if (spmd__coll_algo_check(kind, o->algo, err, sizeof err) != SPMD_OK)
            return invalid(g, fn, "%s", err);
        memcpy(a->algo, o->algo, strlen(o->algo) + 1);
    }
    return SPMD_OK;
}

static spmd_status check_root(spmd_group *g, const char *fn, int root) {
    const int world = spmd_group_size(g);
    if (root < 0 || root >= world)
        return invalid(g, fn, "root %d is out of range for world size %d", root, world);
    return SPMD_OK;
}

/* bytes = count * dtype size * mult, or an error naming the overflow. */
static spmd_status sized(spmd_group *g, const char *fn, size_t count, spmd_dtype dt, size_t mult,
                         size_t *bytes) {
    size_t b;
    if (!mul_ok(count, spmd_dtype_size(dt), &b) || !mul_ok(b, mult, &b))
        return invalid(g, fn, "count %zu x %zu x %zu bytes overflows the address space", count,
                       mult, spmd_dtype_size(dt));
    *bytes = b;
    return SPMD_OK;
}

/* A buffer this rank needs: NULL is an error unless it spans no bytes. */
static spmd_status need(spmd_group *g, const char *fn, const char *what, const void **p,
                        size_t bytes) {
    if (*p) return SPMD_OK;
    if (bytes) return invalid(g, fn, "%s is NULL but %zu bytes are needed", what, bytes);
    *p = empty_buf;
    return SPMD_OK;
}
#define NEED(what, ptr, bytes)                                                    \
    do {                                                                          \
        const void *need_p_ = (ptr);                                              \
        if ((st = need(g, fn, what, &need_p_, bytes)) != SPMD_OK) goto fail;      \
        (ptr) = (void *)(uintptr_t)need_p_;                                       \
    } while (0)

static spmd_status submit(spmd_group *g, spmd__coll_args *a, spmd_work **w) {
    return spmd__group_collective(g, a, w);
}

/* ---- the collectives ------------------------------------------------------ */

static spmd_status do_barrier(spmd_group *g, const spmd_coll_opts *o, spmd_work **w, int async) {
    const char *fn = async ? "spmd_barrier_async" : "spmd_barrier";
    spmd__coll_args a;
    spmd_status st = begin(g, fn, SPMD__C_BARRIER, SPMD_U8, 0, SPMD_SUM, o, w, async, &a);
    if (st != SPMD_OK) return st;
    a.sendbuf = a.recvbuf = empty_buf;
    return submit(g, &a, w);
}

static spmd_status do_broadcast(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int root,
                                const spmd_coll_opts *o, spmd_work **w, int async) {
    const char *fn = async ? "spmd_broadcast_async" : "spmd_broadcast";
    spmd__coll_args a;
    size_t bytes = 0;
    spmd_status st = begin(g, fn, SPMD__C_BROADCAST, dt, 0, SPMD_SUM, o, w, async, &a);
    if (st != SPMD_OK) return st;
    if ((st = check_root(g, fn, root)) != SPMD_OK) return st;
    if ((st = sized(g, fn, count, dt, 1, &bytes)) != SPMD_OK) return st;
    NEED("buf", buf, bytes);
    a.sendbuf = a.recvbuf = buf;
    a.count = count;
    a.root = root;
    return submit(g, &a, w);
fail:
    return st;
}

static spmd_status do_reduce(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                             spmd_dtype dt, spmd_op op, int root, int all, const spmd_coll_opts *o,
                             spmd_work **w, int async) {
    const char *fn = all ? (async ? "spmd_all_reduce_async" : "spmd_all_reduce")
                         : (async ? "spmd_reduce_async" : "spmd_reduce");
    spmd__coll_args a;
    size_t bytes = 0;
    spmd_status st = begin(g, fn, all ? SPMD__C_ALL_REDUCE : SPMD__C_REDUCE, dt, 1, op, o, w, async, &a);
    if (st != SPMD_OK) return st;
    if (!all && (st = check_root(g, fn, root)) != SPMD_OK) return st;
    if ((st = sized(g, fn, count, dt, 1, &bytes)) != SPMD_OK) return st;
    NEED("sendbuf", sendbuf, bytes);
    if (all || spmd_group_rank(g) == root) NEED("recvbuf", recvbuf, bytes);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.root = all ? 0 : root;
    return submit(g, &a, w);
fail:
    return st;
}

/* gather (to_root) and scatter (!to_root): `many` is the w*count side. */
static spmd_status do_gather_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                     spmd_dtype dt, int root, int gather, const spmd_coll_opts *o,
                                     spmd_work **w, int async) {
    const char *fn = gather ? (async ? "spmd_gather_async" : "spmd_gather")
                            : (async ? "spmd_scatter_async" : "spmd_scatter");
    spmd__coll_args a;
    size_t one = 0, all = 0;
    spmd_status st = begin(g, fn, gather ? SPMD__C_GATHER : SPMD__C_SCATTER, dt, 0, SPMD_SUM, o, w,
                           async, &a);
    if (st != SPMD_OK) return st;
    if ((st = check_root(g, fn, root)) != SPMD_OK) return st;
    if ((st = sized(g, fn, count, dt, (size_t)spmd_group_size(g), &all)) != SPMD_OK) return st;
    one = count * spmd_dtype_size(dt);
    const int at_root = spmd_group_rank(g) == root;
    if (gather) {
        NEED("sendbuf", sendbuf, one);
        if (at_root) NEED("recvbuf", recvbuf, all);
    } else {
        if (at_root) NEED("sendbuf", sendbuf, all);
        NEED("recvbuf", recvbuf, one);
    }
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.root = root;
    return submit(g, &a, w);
fail:
    return st;
}

static spmd_status do_all_gather(spmd_group *g, const void *sendbuf, void *recvbuf,
                                 void *const *recvbufs, int list, size_t count, spmd_dtype dt,
                                 const spmd_coll_opts *o, spmd_work **w, int async) {
    const char *fn = list ? (async ? "spmd_all_gather_list_async" : "spmd_all_gather_list")
                          : (async ? "spmd_all_gather_async" : "spmd_all_gather");
    spmd__coll_args a;
    size_t all = 0;
    spmd_status st = begin(g, fn, SPMD__C_ALL_GATHER, dt, 0, SPMD_SUM, o, w, async, &a);
    if (st != SPMD_OK) return st;
    const int world = spmd_group_size(g);
    if ((st = sized(g, fn, count, dt, (size_t)world, &all)) != SPMD_OK) return st;
    const size_t one = count * spmd_dtype_size(dt);
    NEED("sendbuf", sendbuf, one);
    if (list) {
        if (!recvbufs) return invalid(g, fn, "recvbufs (the list of %d buffers) is NULL", world);
        a.recvbufs = malloc((size_t)world * sizeof *a.recvbufs);
        if (!a.recvbufs) return spmd__group_error(g, SPMD_ERR_NOMEM, "%s: out of memory", fn);
        for (int i = 0; i < world; i++) {
            const void *p = recvbufs[i];
            if (!p && one) {
                st = invalid(g, fn, "recvbufs[%d] is NULL but %zu bytes are needed", i, one);
                goto fail;
            }
            a.recvbufs[i] = p ? (void *)(uintptr_t)p : empty_buf;
        }
        a.recvbuf = a.recvbufs[0];
    } else {
        NEED("recvbuf", recvbuf, all);
        a.recvbuf = recvbuf;
    }
    a.sendbuf = sendbuf;
    a.count = count;
    return submit(g, &a, w);
fail:
    spmd__coll_args_free(&a);
    return st;
}

static spmd_status do_reduce_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                     spmd_dtype dt, spmd_op op, const spmd_coll_opts *o,
                                     spmd_work **w, int async) {
    const char *fn = async ? "spmd_reduce_scatter_async" : "spmd_reduce_scatter";
    spmd__coll_args a;
    size_t all = 0;
    spmd_status st = begin(g, fn, SPMD__C_REDUCE_SCATTER, dt, 1, op, o, w, async, &a);
    if (st != SPMD_OK) return st;
    if ((st = sized(g, fn, count, dt, (size_t)spmd_group_size(g), &all)) != SPMD_OK) return st;
    NEED("sendbuf", sendbuf, all);
    NEED("recvbuf", recvbuf, count * spmd_dtype_size(dt));
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    return submit(g, &a, w);
fail:
    return st;
}

static spmd_status do_all_to_all(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                 spmd_dtype dt, const spmd_coll_opts *o, spmd_work **w, int async) {
    const char *fn = async ? "spmd_all_to_all_async" : "spmd_all_to_all";
    spmd__coll_args a;
    size_t all = 0;
    spmd_status st = begin(g, fn, SPMD__C_ALL_TO_ALL, dt, 0, SPMD_SUM, o, w, async, &a);
    if (st != SPMD_OK) return st;
    if ((st = sized(g, fn, count, dt, (size_t)spmd_group_size(g), &all)) != SPMD_OK) return st;
    NEED("sendbuf", sendbuf, all);
    NEED("recvbuf", recvbuf, all);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    return submit(g, &a, w);
fail:
    return st;
}

/* Copy one counts/displacements array (the caller may free its own). */
static size_t *copy_sizes(const size_t *src, int world) {
    size_t *p = malloc((size_t)world * sizeof *p);
    if (p) memcpy(p, src, (size_t)world * sizeof *p);
    return p;
}

static spmd_status do_all_to_all_v(spmd_group *g, const void *sendbuf, const size_t *sendcounts,
                                   const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                   const size_t *rdispls, spmd_dtype dt, const spmd_coll_opts *o,
                                   spmd_work **w, int async) {
    const char *fn = async ? "spmd_all_to_all_v_async" : "spmd_all_to_all_v";
    spmd__coll_args a;
    spmd_status st = begin(g, fn, SPMD__C_ALL_TO_ALL, dt, 0, SPMD_SUM, o, w, async, &a);
    if (st != SPMD_OK) return st;
    const int world = spmd_group_size(g), me = spmd_group_rank(g);
    if (!sendcounts || !sdispls || !recvcounts || !rdispls)
        return invalid(g, fn, "%s is NULL",
                       !sendcounts ? "sendcounts" : !sdispls ? "sdispls" : !recvcounts ? "recvcounts" : "rdispls");
    const size_t es = spmd_dtype_size(dt);
    size_t sext = 0, rext = 0;
    for (int i = 0; i < world; i++) {
        size_t e;
        if (sdispls[i] > (size_t)PTRDIFF_MAX - sendcounts[i] || !mul_ok(sdispls[i] + sendcounts[i], es, &e))
            return invalid(g, fn, "sdispls[%d] + sendcounts[%d] = %zu + %zu overflows", i, i,
                           sdispls[i], sendcounts[i]);
        if (sendcounts[i] && e > sext) sext = e;
        if (rdispls[i] > (size_t)PTRDIFF_MAX - recvcounts[i] || !mul_ok(rdispls[i] + recvcounts[i], es, &e))
            return invalid(g, fn, "rdispls[%d] + recvcounts[%d] = %zu + %zu overflows", i, i,
                           rdispls[i], recvcounts[i]);
        if (recvcounts[i] && e > rext) rext = e;
    }
    if (sendcounts[me] != recvcounts[me])
        return invalid(g, fn, "rank %d sends itself %zu elements but expects to receive %zu", me,
                       sendcounts[me], recvcounts[me]);
    NEED("sendbuf", sendbuf, sext);
    NEED("recvbuf", recvbuf, rext);
    a.sendcounts = copy_sizes(sendcounts, world);
    a.sdispls = copy_sizes(sdispls, world);
    a.recvcounts = copy_sizes(recvcounts, world);
    a.rdispls = copy_sizes(rdispls, world);
    if (!a.sendcounts || !a.sdispls || !a.recvcounts || !a.rdispls) {
        st = spmd__group_error(g, SPMD_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    return submit(g, &a, w);
fail:
    spmd__coll_args_free(&a);
    return st;
}

/* ---- public entry points: blocking = async without a handle -------------- */

spmd_status spmd_barrier(spmd_group *g) { return do_barrier(g, NULL, NULL, 0); }
spmd_status spmd_barrier_async(spmd_group *g, const spmd_coll_opts *o, spmd_work **w) {
    return do_barrier(g, o, w, 1);
}

spmd_status spmd_broadcast(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int root) {
    return do_broadcast(g, buf, count, dt, root, NULL, NULL, 0);
}
spmd_status spmd_broadcast_async(spmd_group *g, void *buf, size_t count, spmd_dtype dt, int root,
                                 const spmd_coll_opts *o, spmd_work **w) {
    return do_broadcast(g, buf, count, dt, root, o, w, 1);
}

spmd_status spmd_reduce(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                        spmd_dtype dt, spmd_op op, int root) {
    return do_reduce(g, sendbuf, recvbuf, count, dt, op, root, 0, NULL, NULL, 0);
}
spmd_status spmd_reduce_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                              spmd_dtype dt, spmd_op op, int root, const spmd_coll_opts *o,
                              spmd_work **w) {
    return do_reduce(g, sendbuf, recvbuf, count, dt, op, root, 0, o, w, 1);
}

spmd_status spmd_all_reduce(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt, spmd_op op) {
    return do_reduce(g, sendbuf, recvbuf, count, dt, op, 0, 1, NULL, NULL, 0);
}
spmd_status spmd_all_reduce_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                  spmd_dtype dt, spmd_op op, const spmd_coll_opts *o,
                                  spmd_work **w) {
    return do_reduce(g, sendbuf, recvbuf, count, dt, op, 0, 1, o, w, 1);
}

spmd_status spmd_gather(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                        spmd_dtype dt, int root) {
    return do_gather_scatter(g, sendbuf, recvbuf, count, dt, root, 1, NULL, NULL, 0);
}
spmd_status spmd_gather_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                              spmd_dtype dt, int root, const spmd_coll_opts *o, spmd_work **w) {
    return do_gather_scatter(g, sendbuf, recvbuf, count, dt, root, 1, o, w, 1);
}

spmd_status spmd_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                         spmd_dtype dt, int root) {
    return do_gather_scatter(g, sendbuf, recvbuf, count, dt, root, 0, NULL, NULL, 0);
}
spmd_status spmd_scatter_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                               spmd_dtype dt, int root, const spmd_coll_opts *o, spmd_work **w) {
    return do_gather_scatter(g, sendbuf, recvbuf, count, dt, root, 0, o, w, 1);
}

spmd_status spmd_all_gather(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt) {
    return do_all_gather(g, sendbuf, recvbuf, NULL, 0, count, dt, NULL, NULL, 0);
}
spmd_status spmd_all_gather_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                  spmd_dtype dt, const spmd_coll_opts *o, spmd_work **w) {
    return do_all_gather(g, sendbuf, recvbuf, NULL, 0, count, dt, o, w, 1);
}
spmd_status spmd_all_gather_list(spmd_group *g, const void *sendbuf, void *const *recvbufs,
                                 size_t count, spmd_dtype dt) {
    return do_all_gather(g, sendbuf, NULL, recvbufs, 1, count, dt, NULL, NULL, 0);
}
spmd_status spmd_all_gather_list_async(spmd_group *g, const void *sendbuf, void *const *recvbufs,
                                       size_t count, spmd_dtype dt, const spmd_coll_opts *o,
                                       spmd_work **w) {
    return do_all_gather(g, sendbuf, NULL, recvbufs, 1, count, dt, o, w, 1);
}

spmd_status spmd_reduce_scatter(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                spmd_dtype dt, spmd_op op) {
    return do_reduce_scatter(g, sendbuf, recvbuf, count, dt, op, NULL, NULL, 0);
}
spmd_status spmd_reduce_scatter_async(spmd_group *g, const void *sendbuf, void *recvbuf,
                                      size_t count, spmd_dtype dt, spmd_op op,
                                      const spmd_coll_opts *o, spmd_work **w) {
    return do_reduce_scatter(g, sendbuf, recvbuf, count, dt, op, o, w, 1);
}

spmd_status spmd_all_to_all(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                            spmd_dtype dt) {
    return do_all_to_all(g, sendbuf, recvbuf, count, dt, NULL, NULL, 0);
}
spmd_status spmd_all_to_all_async(spmd_group *g, const void *sendbuf, void *recvbuf, size_t count,
                                  spmd_dtype dt, const spmd_coll_opts *o, spmd_work **w) {
    return do_all_to_all(g, sendbuf, recvbuf, count, dt, o, w, 1);
}

spmd_status spmd_all_to_all_v(spmd_group *g, const void *sendbuf, const size_t *sendcounts,
                              const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls, spmd_dtype dt) {
    return do_all_to_all_v(g, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dt, NULL,
                           NULL, 0);
}
spmd_status spmd_all_to_all_v_async(spmd_group *g, const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, spmd_dtype dt, const spmd_coll_opts *o,
                                    spmd_work **w) {
    return do_all_to_all_v(g, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dt, o, w,
                           1);
}
