/* src/coll/mpi_native.c — "mpi": MPI's own collectives, for a group over MPI
 * (compiled only with SPMD_WITH_MPI).  MPI_Iallreduce, MPI_Ibcast, ... on
 * the group's coll communicator, waited for by polling with the group's
 * deadline and failure state (transport/mpi_internal.h).
 *
 * Reductions run spmd's own kernels (coll/reduce.h) as MPI user ops, so a
 * result is bit for bit what spmd's algorithms give: 8-bit integers wrap
 * (Open MPI 4.1's AVX ops saturate them: 200 + 100 gives 255), MIN/MAX on
 * floats are IEEE 754-2019 minimum/maximum (NaN wins, -0 < +0), and
 * float16/bfloat16, which MPI has no type for, travel as 2-byte types of
 * spmd's.  AVG reduces as SUM and is divided by select.c, as for every
 * algorithm.
 *
 * MPI's collectives do not check that the ranks agree; a zero-byte exchange
 * around the ring carrying the collective's descriptor does (the agreement step,
 * coll/agree.c, does it for rooted collectives), so disagreeing ranks still get
 * SPMD_ERR_MISMATCH instead of MPI's undefined behaviour.
 *
 * Buffers larger than MPI's int counts go to spmd's algorithm for the
 * collective over MPI point-to-point instead. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "coll/algos.h"
#include "transport/mpi_internal.h"

/* ---- datatypes and ops -------------------------------------------------------- */

static pthread_once_t types_once = PTHREAD_ONCE_INIT;
static MPI_Datatype f16_type = MPI_DATATYPE_NULL, bf16_type = MPI_DATATYPE_NULL;
static MPI_Op user_op[SPMD_OP_COUNT];
static int types_ok;

static spmd_dtype dtype_of(MPI_Datatype t) {
    if (t == MPI_FLOAT) return SPMD_F32;
    if (t == MPI_DOUBLE) return SPMD_F64;
    if (t == f16_type) return SPMD_F16;
    if (t == bf16_type) return SPMD_BF16;
    if (t == MPI_INT8_T) return SPMD_I8;
    if (t == MPI_UINT8_T) return SPMD_U8;
    if (t == MPI_INT32_T) return SPMD_I32;
    if (t == MPI_INT64_T) return SPMD_I64;
    return SPMD_DTYPE_COUNT;
}

/* inout[i] = in[i] (op) inout[i]: every spmd op is commutative per element. */
#define USER_OP(fn, OP)                                                                       \
    static void fn(void *in, void *inout, int *len, MPI_Datatype *t) {                       \
        spmd_dtype dt = dtype_of(*t);                                                         \
        if (dt != SPMD_DTYPE_COUNT && *len > 0) spmd__reduce(inout, in, (size_t)*len, dt, OP); \
    }
USER_OP(op_sum, SPMD_SUM)
USER_OP(op_prod, SPMD_PROD)
USER_OP(op_min, SPMD_MIN)
USER_OP(op_max, SPMD_MAX)
USER_OP(op_band, SPMD_BAND)
USER_OP(op_bor, SPMD_BOR)
USER_OP(op_bxor, SPMD_BXOR)

static void make_types(void) {
    MPI_User_function *fns[SPMD_OP_COUNT] = {
        [SPMD_SUM] = op_sum, [SPMD_AVG] = op_sum, [SPMD_PROD] = op_prod, [SPMD_MIN] = op_min,
        [SPMD_MAX] = op_max, [SPMD_BAND] = op_band, [SPMD_BOR] = op_bor, [SPMD_BXOR] = op_bxor};
    spmd__mpi_lock();
    int ok = MPI_Type_contiguous(2, MPI_BYTE, &f16_type) == MPI_SUCCESS && MPI_Type_commit(&f16_type) == MPI_SUCCESS &&
             MPI_Type_contiguous(2, MPI_BYTE, &bf16_type) == MPI_SUCCESS && MPI_Type_commit(&bf16_type) == MPI_SUCCESS;
    for (int o = 0; o < SPMD_OP_COUNT && ok; o++) ok = MPI_Op_create(fns[o], 1, &user_op[o]) == MPI_SUCCESS;
    spmd__mpi_unlock();
    types_ok = ok;
}

/* The MPI datatype and op reducing dt with op (spmd's kernels). */
static int reduce_type(spmd_dtype dt, spmd_op op, MPI_Datatype *t, MPI_Op *o) {
    pthread_once(&types_once, make_types);
    if (!types_ok || (int)op < 0 || op >= SPMD_OP_COUNT) return 0;
    switch (dt) {
    case SPMD_F32: *t = MPI_FLOAT; break;
    case SPMD_F64: *t = MPI_DOUBLE; break;
    case SPMD_F16: *t = f16_type; break;
    case SPMD_BF16: *t = bf16_type; break;
    case SPMD_I8: *t = MPI_INT8_T; break;
    case SPMD_U8: *t = MPI_UINT8_T; break;
    case SPMD_I32: *t = MPI_INT32_T; break;
    case SPMD_I64: *t = MPI_INT64_T; break;
    default: return 0;
    }
    *o = user_op[op];
    return 1;
}

/* ---- running one collective --------------------------------------------------- */

/* Too large for MPI's int counts: spmd's algorithm over MPI point-to-point. */
static spmd_status too_big(spmd__coll_ctx *c, const spmd__coll_args *a) {
    switch (a->kind) {
    case SPMD__C_BROADCAST: return spmd__bcast_tree(c, a);
    case SPMD__C_REDUCE: return spmd__reduce_tree(c, a);
    case SPMD__C_ALL_REDUCE: return spmd__allreduce_ring(c, a);
    case SPMD__C_GATHER: return spmd__gather_linear(c, a);
    case SPMD__C_SCATTER: return spmd__scatter_linear(c, a);
    case SPMD__C_ALL_GATHER: return spmd__allgather_ring(c, a);
    case SPMD__C_REDUCE_SCATTER: return spmd__reduce_scatter_ring(c, a);
    case SPMD__C_ALL_TO_ALL: return spmd__alltoall_pairwise(c, a);
    default: return spmd__barrier_dissemination(c, a);
    }
}

static int overlaps(const void *x, size_t xl, const void *y, size_t yl) {
    uintptr_t a = (uintptr_t)x, b = (uintptr_t)y;
    return xl && yl && a < b + yl && b < a + xl;
}

/* sendbuf as MPI may read it next to recvbuf: MPI_IN_PLACE when it is
 * exactly `inplace_at`, a scratch copy when it overlaps otherwise (NULL when
 * that copy cannot be had). */
static const void *send_side(spmd__coll_ctx *c, const void *send, size_t slen, const void *recv, size_t rlen,
                             const void *inplace_at) {
    if (send == inplace_at) return MPI_IN_PLACE;
    if (!overlaps(send, slen, recv, rlen)) return send;
    void *copy = spmd__tmp(c, 0, slen);
    if (copy) memcpy(copy, send, slen);
    return copy;
}

/* a->sendbuf replaced by send_side(): NULL means out of memory */
#define SEND_SIDE(...)                                                        \
    do {                                                                      \
        if (!(sb = send_side(c, __VA_ARGS__))) return SPMD__NOMEM(c, "MPI collective", all); \
    } while (0)

/* all_to_all_v's counts and displacements in bytes as MPI's ints (scratch
 * slot 1); 0 when one does not fit. */
static int a2av_ints(spmd__coll_ctx *c, const spmd__coll_args *a, int w, int **out) {
    int *v = spmd__tmp(c, 1, sizeof(int) * 4 * (size_t)w);
    if (!v) return 0;
    const size_t es = spmd_dtype_size(a->dt);
    const size_t *src[4] = {a->sendcounts, a->sdispls, a->recvcounts, a->rdispls};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < w; i++) {
            if (src[k][i] > (size_t)INT_MAX / es) return 0;
            v[k * w + i] = (int)(src[k][i] * es);
        }
    *out = v;
    return 1;
}

static int is_rooted(spmd__coll_kind k) {
    return k == SPMD__C_BROADCAST || k == SPMD__C_REDUCE || k == SPMD__C_GATHER || k == SPMD__C_SCATTER;
}

spmd_status spmd__coll_mpi(spmd__coll_ctx *c, const spmd__coll_args *a) {
    const char *name = spmd__coll_kind_name(a->kind);
    if (!c->m->ext || strcmp(c->m->ext->name, "mpi") != 0)
        return spmd__coll_fail(c, SPMD_ERR_INVALID, "%s: algorithm 'mpi' needs a group on the MPI backend", name);
    spmd__mpi_link *l = spmd__mpi_of(c->m);
    const int w = spmd__ctx_world(c), r = spmd__ctx_rank(c);
    const size_t es = spmd_dtype_size(a->dt), bytes = a->count * es, all = bytes * (size_t)w;
    spmd_status st;
    /* ranks must agree before MPI's collective runs (rooted ones were checked) */
    if (!is_rooted(a->kind) && (st = spmd__xsendrecv(c, (r + 1) % w, NULL, 0, (r - 1 + w) % w, NULL, 0))) return st;
    if (all > INT_MAX || a->count > INT_MAX) return too_big(c, a);
    const int n = (int)a->count, nb = (int)bytes;
    MPI_Datatype t = MPI_BYTE;
    MPI_Op op = MPI_SUM;
    const int reducing = a->kind == SPMD__C_REDUCE || a->kind == SPMD__C_ALL_REDUCE || a->kind == SPMD__C_REDUCE_SCATTER;
    if (reducing && !reduce_type(a->dt, a->op, &t, &op))
        return spmd__coll_fail(c, SPMD_ERR_SYSTEM, "%s: MPI could not create spmd's datatypes and ops", name);
    MPI_Comm comm = l->coll;
    MPI_Request req = MPI_REQUEST_NULL;
    const void *sb = a->sendbuf;
    void *list = NULL; /* all_gather into a list: the flat scratch MPI fills */
    int rc;
    void *rb = a->recvbuf;
    switch (a->kind) {
    case SPMD__C_REDUCE:
        if (r == a->root) SEND_SIDE(a->sendbuf, bytes, a->recvbuf, bytes, a->recvbuf);
        else rb = NULL;
        break;
    case SPMD__C_ALL_REDUCE: SEND_SIDE(a->sendbuf, bytes, a->recvbuf, bytes, a->recvbuf); break;
    case SPMD__C_GATHER:
        if (r == a->root) SEND_SIDE(a->sendbuf, bytes, a->recvbuf, all, (char *)a->recvbuf + (size_t)r * bytes);
        break;
    case SPMD__C_SCATTER:
        /* in place at the root: its own block stays where it is */
        if (r == a->root && a->recvbuf == (char *)a->sendbuf + (size_t)r * bytes) rb = MPI_IN_PLACE;
        else if (r == a->root) SEND_SIDE(a->sendbuf, all, a->recvbuf, bytes, NULL);
        break;
    case SPMD__C_REDUCE_SCATTER: SEND_SIDE(a->sendbuf, all, a->recvbuf, bytes, NULL); break;
    case SPMD__C_ALL_GATHER: /* select.c put our block in place already */
        if (a->recvbufs) {
            if (!(list = spmd__tmp(c, 0, all))) return SPMD__NOMEM(c, "MPI all_gather", all);
            memcpy((char *)list + (size_t)r * bytes, a->recvbufs[r], bytes);
            rb = list;
        }
        break;
    default: break;
    }
    int *v = NULL;
    if (a->kind == SPMD__C_ALL_TO_ALL && a->sendcounts && !a2av_ints(c, a, w, &v)) return too_big(c, a);
    spmd__mpi_lock();
    switch (a->kind) {
    case SPMD__C_BARRIER: rc = MPI_Ibarrier(comm, &req); break;
    case SPMD__C_BROADCAST: rc = MPI_Ibcast(rb, nb, MPI_BYTE, a->root, comm, &req); break;
    case SPMD__C_REDUCE: rc = MPI_Ireduce(sb, rb, n, t, op, a->root, comm, &req); break;
    case SPMD__C_ALL_REDUCE: rc = MPI_Iallreduce(sb, rb, n, t, op, comm, &req); break;
    case SPMD__C_GATHER: rc = MPI_Igather(sb, nb, MPI_BYTE, rb, nb, MPI_BYTE, a->root, comm, &req); break;
    case SPMD__C_SCATTER: rc = MPI_Iscatter(sb, nb, MPI_BYTE, rb, nb, MPI_BYTE, a->root, comm, &req); break;
    case SPMD__C_ALL_GATHER:
        rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, nb, MPI_BYTE, comm, &req);
        break;
    case SPMD__C_REDUCE_SCATTER: rc = MPI_Ireduce_scatter_block(sb, rb, n, t, op, comm, &req); break;
    case SPMD__C_ALL_TO_ALL:
        if (v)
            rc = MPI_Ialltoallv(sb, v, v + w, MPI_BYTE, rb, v + 2 * w, v + 3 * w, MPI_BYTE, comm, &req);
        else
            rc = MPI_Ialltoall(sb, nb, MPI_BYTE, rb, nb, MPI_BYTE, comm, &req);
        break;
    default: rc = MPI_ERR_OTHER; break;
    }
    spmd__mpi_unlock();
    if (rc != MPI_SUCCESS) {
        char e[256];
        spmd__mpi_errstr(rc, e, sizeof e);
        return spmd__coll_fail(c, SPMD_ERR_SYSTEM, "%s #%u: MPI refused the collective: %s", name, c->seq, e);
    }
    if ((st = spmd__mpi_wait_coll(c, &req, 1, name))) return st;
    if (list)
        for (int i = 0; i < w; i++)
            if (i != r) memcpy(a->recvbufs[i], (char *)list + (size_t)i * bytes, bytes);
    return SPMD_OK;
}
