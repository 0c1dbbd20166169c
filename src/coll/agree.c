/* src/coll/agree.c — what the ranks of a collective must agree on, and the
 * agreement step that makes a disagreement fail on every rank alike.
 *
 * The descriptor (spmd__coll_describe) hashes the arguments every rank must
 * pass alike (count, dtype, reduce op, root), the algorithm this rank chose
 * (the per-call option, SPMD_ALGO_<COLLECTIVE> or the table) and the segment
 * size (SPMD_SEGMENT_BYTES).  Every header and slot flag carries it, so ranks
 * that differ in any of them fail with SPMD_ERR_MISMATCH before a byte of
 * payload is used — never a wrong result.  Not in it, because they need no
 * agreement: the cross-memory settings (cma.c settles them per pair and every
 * message says how it travels), slot and ring sizes (a pair whose sizes
 * differ shares no memory), the spin budget.
 *
 * When every rank's result depends on every rank's data (all_reduce,
 * all_gather, reduce_scatter, all_to_all, barrier), no rank can finish a
 * collective the others disagree with: the first mismatching message or flag
 * stops the rank that sees it, which fails the group and tells every other
 * rank (the abort notice carries SPMD_ERR_MISMATCH and the message).
 *
 * Rooted collectives are different: a broadcast leaf only hears from its
 * parent, a reduce or gather leaf only sends, so a rank could succeed while
 * its peers disagree.  They run the agreement step first: every rank learns
 * the smallest and the largest (descriptor, rank) of the group in
 * ceil(log2 w) rounds of recursive doubling (dissemination) — over the
 * rings when every pair shares memory (measured: faster than a sync of the
 * collective slots, whose waiters yield less) — and all decide alike: go
 * on, or SPMD_ERR_MISMATCH with the same message everywhere and the group
 * still usable (nothing else moved).  A
 * rank that could not choose an algorithm (an invalid SPMD_ALGO_* setting on
 * that rank only) takes part with "no algorithm", so its peers never wait
 * for it in vain. */
#include <stdio.h>
#include <string.h>
#include "coll/algos.h"
#include "coll/agree.h"

/* ---- the descriptor -------------------------------------------------------- */

int spmd__coll_is_rooted(spmd__coll_kind k) {
    return k == SPMD__C_BROADCAST || k == SPMD__C_REDUCE || k == SPMD__C_GATHER || k == SPMD__C_SCATTER;
}

static int is_reducing(spmd__coll_kind k) {
    return k == SPMD__C_REDUCE || k == SPMD__C_ALL_REDUCE || k == SPMD__C_REDUCE_SCATTER;
}

/* The fields of a call the ranks must agree on, as compared and reported. */
typedef struct {
    uint32_t desc, rank;
    int32_t root;
    uint32_t algo, dt, op;
    uint64_t count, seg;
} record;

static void fill(record *r, const spmd__coll_args *a, int algo, size_t seg) {
    memset(r, 0, sizeof *r);
    r->algo = (uint32_t)algo;
    r->seg = seg;
    if (a->kind == SPMD__C_BARRIER) return;
    r->count = a->sendcounts ? UINT64_MAX : (uint64_t)a->count; /* uneven all_to_all: counts differ by design */
    r->dt = (uint32_t)a->dt;
    if (is_reducing(a->kind)) r->op = (uint32_t)a->op;
    if (spmd__coll_is_rooted(a->kind)) r->root = a->root;
}

static uint32_t hash_record(spmd__coll_kind kind, const record *r) {
    uint64_t v[7] = {(uint64_t)kind, r->count, r->dt, r->op, (uint64_t)(int64_t)r->root, r->algo, r->seg};
    return spmd__hash_words(v, 7);
}

uint32_t spmd__coll_describe(const spmd__coll_args *a, int algo, size_t seg) {
    record r;
    fill(&r, a, algo, seg);
    return hash_record(a->kind, &r);
}

/* ---- records on the wire (little-endian, 40 bytes) ------------------------ */
#define REC 40

static void put_rec(unsigned char *p, const record *r) {
    spmd__put_u32(p, r->desc);
    spmd__put_u32(p + 4, r->rank);
    spmd__put_u32(p + 8, (uint32_t)r->root);
    spmd__put_u32(p + 12, r->algo);
    spmd__put_u32(p + 16, r->dt);
    spmd__put_u32(p + 20, r->op);
    spmd__put_u64(p + 24, r->count);
    spmd__put_u64(p + 32, r->seg);
}

static void get_rec(const unsigned char *p, record *r) {
    r->desc = spmd__get_u32(p);
    r->rank = spmd__get_u32(p + 4);
    r->root = (int32_t)spmd__get_u32(p + 8);
    r->algo = spmd__get_u32(p + 12);
    r->dt = spmd__get_u32(p + 16);
    r->op = spmd__get_u32(p + 20);
    r->count = spmd__get_u64(p + 24);
    r->seg = spmd__get_u64(p + 32);
}

/* (desc, rank) order: every rank ends with the same smallest and largest. */
static int before(const record *x, const record *y) {
    return x->desc < y->desc || (x->desc == y->desc && x->rank < y->rank);
}

static void merge(record *lo, record *hi, const record *in) {
    if (before(in, lo)) *lo = *in;
    if (before(hi, in)) *hi = *in;
}

/* ---- the verdict ------------------------------------------------------------- */

static void describe_field(const spmd__coll_ctx *c, const record *r, const record *o, char *out, size_t len) {
    size_t n = 0;
#define ADD(...)                                                                                  \
    do {                                                                                          \
        int m_ = snprintf(out + n, n < len ? len - n : 0, "%s", n ? ", " : "");                    \
        if (m_ > 0) n += (size_t)m_;                                                              \
        m_ = snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__);                               \
        if (m_ > 0) n += (size_t)m_;                                                              \
    } while (0)
    if (r->root != o->root) ADD("root %d", (int)r->root);
    if (r->count != o->count) ADD("count %llu", (unsigned long long)r->count);
    if (r->dt != o->dt) ADD("dtype %s", spmd_dtype_name((spmd_dtype)r->dt));
    if (r->op != o->op) ADD("op %s", spmd_op_name((spmd_op)r->op));
    if (r->algo != o->algo) {
        if (r->algo == SPMD__ALGO_NONE) ADD("no valid algorithm (see that rank's own error)");
        else ADD("algorithm '%s'", c->algo_name ? c->algo_name((int)c->kind, (int)r->algo) : "?");
    }
    if (r->seg != o->seg) ADD("SPMD_SEGMENT_BYTES %llu", (unsigned long long)r->seg);
    if (!n) ADD("other arguments");
#undef ADD
}

static spmd_status verdict(spmd__coll_ctx *c, const record *lo, const record *hi) {
    if (lo->desc == hi->desc) return SPMD_OK;
    char a[256], b[256];
    describe_field(c, lo, hi, a, sizeof a);
    describe_field(c, hi, lo, b, sizeof b);
    const record *first = lo->rank < hi->rank ? lo : hi;
    c->unanimous = 1;
    return spmd__coll_fail(c, SPMD_ERR_MISMATCH, "%s #%u: the ranks disagree: rank %u has %s, rank %u has %s",
                           spmd__coll_kind_name(c->kind), c->seq, first->rank, first == lo ? a : b,
                           (first == lo ? hi : lo)->rank, first == lo ? b : a);
}

/* ---- the exchange ------------------------------------------------------------ */

/* Dissemination: in round k send the (smallest, largest) seen so far to
 * rank + 2^k and merge what rank - 2^k sends; after ceil(log2 w) rounds
 * every rank has seen every record. */
static spmd_status disseminate(spmd__coll_ctx *c, record *lo, record *hi) {
    const int w = spmd__ctx_world(c), me = spmd__ctx_rank(c);
    unsigned char out[2 * REC], in[2 * REC];
    spmd_status st = SPMD_OK;
    c->agreeing = 1;
    for (int d = 1; d < w && !st; d <<= 1) {
        put_rec(out, lo);
        put_rec(out + REC, hi);
        st = spmd__xsendrecv(c, (me + d) % w, out, sizeof out, (me - d + w) % w, in, sizeof in);
        if (st) break;
        record a, b;
        get_rec(in, &a);
        get_rec(in + REC, &b);
        merge(lo, hi, &a);
        merge(lo, hi, &b);
    }
    c->agreeing = 0;
    return st;
}

spmd_status spmd__coll_agree(spmd__coll_ctx *c, const spmd__coll_args *a) {
    record mine;
    fill(&mine, a, c->algo, spmd__ctx_segment_bytes(c));
    mine.desc = c->desc;
    mine.rank = (uint32_t)spmd__ctx_rank(c);
    record lo = mine, hi = mine;
    spmd_status st = disseminate(c, &lo, &hi);
    return st ? st : verdict(c, &lo, &hi);
}
