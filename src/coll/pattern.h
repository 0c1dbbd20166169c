/* src/coll/pattern.h — the pure arithmetic of collective algorithms: who
 * talks to whom at each step and which slice of the buffer moves.  No I/O,
 * no allocation; every function is total over its documented domain so the
 * unit test (tests/unit/test_pattern.c) can sweep world sizes exhaustively.
 *
 * Conventions: `w` is the world size (>= 1), `r` a rank in [0, w).  Element
 * counts and chunk indices are size_t; ranks are int.
 */
#ifndef SPMD_COLL_PATTERN_H
#define SPMD_COLL_PATTERN_H

#include <stddef.h>

/* ---- chunking: n elements cut into `parts` nearly equal chunks ------------
 * The first n % parts chunks are one element longer, so chunk lengths differ
 * by at most one and chunks are contiguous and in order. */
size_t spmd__chunk_off(size_t n, size_t parts, size_t i);
size_t spmd__chunk_len(size_t n, size_t parts, size_t i);
/* Length of the union of chunks [first, first + nchunks). */
size_t spmd__chunks_len(size_t n, size_t parts, size_t first, size_t nchunks);

/* Number of segments of at most seg elements covering n elements (0 for n = 0). */
size_t spmd__nsegs(size_t n, size_t seg);

/* ---- ring -------------------------------------------------------------- */
static inline int spmd__ring_next(int r, int w) { return (r + 1) % w; }
static inline int spmd__ring_prev(int r, int w) { return (r + w - 1) % w; }
/* (r + d) mod w for any integer d (negative too). */
static inline int spmd__mod(int x, int w) { int m = x % w; return m < 0 ? m + w : m; }

/* ---- powers of two ------------------------------------------------------ */
int spmd__pow2_floor(int w);           /* largest power of two <= w (w >= 1) */
int spmd__log2_floor(int w);           /* floor(log2 w) (w >= 1) */
int spmd__ceil_log2(int w);            /* smallest k with 2^k >= w (w >= 1) */

/* ---- non-power-of-two fold for recursive doubling / halving --------------
 * p = pow2_floor(w), extra = w - p.  Ranks r >= p ("extra" ranks) pair with
 * r - p first: they hand their data to that partner and sit out the
 * power-of-two core, then get the result back from it at the end.  Ranks
 * r < extra are the partners; every rank r < p takes part in the core with
 * virtual rank r (identity: the core ranks are exactly 0..p-1). */
typedef struct {
    int p;        /* size of the power-of-two core */
    int in_core;  /* 1 when this rank takes part in the core steps */
    int partner;  /* the rank this one folds with, or -1 */
} spmd__fold;
spmd__fold spmd__fold_of(int r, int w);

/* Recursive doubling partner of core rank r at step k (distance 2^k). */
static inline int spmd__rd_partner(int r, int k) { return r ^ (1 << k); }

/* Recursive halving (Rabenseifner reduce-scatter) on a core of p ranks:
 * the buffer is cut into p chunks.  At step k (k = 0..log2 p - 1) the
 * exchange distance is p >> (k + 1); a rank keeps the half of its current
 * chunk range on its own side and sends the other half.  After the last
 * step rank r owns exactly chunk r.  The all-gather phase replays the steps
 * in reverse.  range_first/range_count describe the chunk range a rank is
 * responsible for *before* step k; send_first/keep_first the halves. */
typedef struct {
    int peer;         /* partner rank (core numbering) */
    int send_first;   /* first chunk of the half sent to the peer */
    int keep_first;   /* first chunk of the half kept */
    int half;         /* chunks in each half */
} spmd__rh_step;
spmd__rh_step spmd__rh_step_of(int r, int p, int k);

/* ---- binomial tree rooted anywhere ---------------------------------------
 * Virtual rank v = (r - root + w) % w; the tree is the usual binomial tree
 * over virtual ranks: the parent of v > 0 is v with its lowest set bit
 * cleared; the children of v are v + 2^j for every 2^j below v's lowest set
 * bit (every 2^j < w for the root) with v + 2^j < w.  The subtree of v covers
 * the virtual ranks [v, v + subtree_size). */
static inline int spmd__vrank(int r, int root, int w) { return (r - root + w) % w; }
static inline int spmd__unvrank(int v, int root, int w) { return (v + root) % w; }
int spmd__tree_parent(int r, int root, int w);   /* -1 for the root */
/* Children as real ranks, farthest first (v + 2^j for decreasing j: the
 * largest nominal subtree first, so it starts earliest); returns how many. */
int spmd__tree_children(int r, int root, int w, int *children, int max);
/* Number of virtual ranks in the subtree of r (r itself included). */
int spmd__tree_subtree(int r, int root, int w);

/* ---- dissemination barrier ------------------------------------------------
 * Round k (k = 0..ceil_log2(w) - 1): send to (r + 2^k) mod w, receive from
 * (r - 2^k) mod w.  After the last round every rank has heard, directly or
 * transitively, from every other. */
int spmd__dissem_rounds(int w);
static inline int spmd__dissem_to(int r, int w, int k) { return spmd__mod(r + (1 << k), w); }
static inline int spmd__dissem_from(int r, int w, int k) { return spmd__mod(r - (1 << k), w); }

/* ---- pairwise exchange (all_to_all) ---------------------------------------
 * Step s = 1..w-1: send to (r + s) mod w, receive from (r - s) mod w.  Every
 * ordered pair meets exactly once and each step is a permutation. */
static inline int spmd__pair_to(int r, int w, int s) { return (r + s) % w; }
static inline int spmd__pair_from(int r, int w, int s) { return spmd__mod(r - s, w); }

/* ---- Bruck all-gather ------------------------------------------------------
 * Step k (distance d = 2^k, while d < w): send the first min(d, w - d) blocks
 * of the rotated buffer to (r - d) mod w, receive as many from (r + d) mod w,
 * appended after the d blocks already held.  Block i of the rotated buffer is
 * rank (r + i) mod w's block. */
static inline int spmd__bruck_count(int w, int d) { return d < w - d ? d : w - d; }

#endif
