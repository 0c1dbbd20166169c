/* Unit test of the collective patterns (src/coll/pattern.h): the peer and
 * chunk arithmetic is checked by simulating each schedule symbolically —
 * every rank's knowledge is a bit set of contributing ranks — for every
 * world size 1..64 and, for trees, every root. */
#include <stdint.h>
#include "coll/pattern.h"
#include "harness.h"

#define MAXW 64
typedef uint64_t mask;
static mask all_of(int w) { return w == 64 ? ~(mask)0 : (((mask)1 << w) - 1); }

static void test_chunks(void) {
    for (size_t n = 0; n <= 130; n++) {
        for (size_t parts = 1; parts <= 20; parts++) {
            size_t total = 0, lo = SIZE_MAX, hi = 0;
            for (size_t i = 0; i < parts; i++) {
                size_t off = spmd__chunk_off(n, parts, i), len = spmd__chunk_len(n, parts, i);
                CHECK_MSG(off == total, "n %zu parts %zu chunk %zu off %zu", n, parts, i, off);
                total += len;
                if (len < lo) lo = len;
                if (len > hi) hi = len;
                if (i > 0) CHECK(len <= spmd__chunk_len(n, parts, i - 1)); /* longer first */
            }
            CHECK_MSG(total == n, "n %zu parts %zu: chunks cover %zu", n, parts, total);
            CHECK(hi - lo <= 1);
            CHECK(spmd__chunk_off(n, parts, parts) == n);
            for (size_t f = 0; f < parts; f++)
                for (size_t k = 0; f + k <= parts; k++) {
                    size_t s = 0;
                    for (size_t i = f; i < f + k; i++) s += spmd__chunk_len(n, parts, i);
                    CHECK(spmd__chunks_len(n, parts, f, k) == s);
                }
        }
    }
    /* Huge counts: no overflow in i * (n / parts). */
    size_t big = SIZE_MAX - 3;
    CHECK(spmd__chunk_off(big, 7, 7) == big);
    CHECK(spmd__chunk_len(big, 7, 0) >= big / 7);
    CHECK(spmd__nsegs(0, 16) == 0 && spmd__nsegs(1, 16) == 1 && spmd__nsegs(16, 16) == 1 &&
          spmd__nsegs(17, 16) == 2);
}

static void test_pow2(void) {
    for (int w = 1; w <= 5000; w++) {
        int p = spmd__pow2_floor(w);
        CHECK((p & (p - 1)) == 0 && p <= w && 2 * p > w);
        CHECK((1 << spmd__log2_floor(w)) == p);
        int k = spmd__ceil_log2(w);
        CHECK((1 << k) >= w && (k == 0 || (1 << (k - 1)) < w));
    }
    CHECK(spmd__mod(-1, 5) == 4 && spmd__mod(-10, 5) == 0 && spmd__mod(7, 5) == 2);
    CHECK(spmd__ring_next(4, 5) == 0 && spmd__ring_prev(0, 5) == 4);
}

/* Fold + recursive doubling: everyone ends with every contribution. */
static void test_fold_rd(void) {
    for (int w = 1; w <= MAXW; w++) {
        mask know[MAXW];
        int partner_of[MAXW];
        for (int r = 0; r < w; r++) {
            know[r] = (mask)1 << r;
            partner_of[r] = -2;
        }
        int p = spmd__pow2_floor(w);
        for (int r = 0; r < w; r++) {
            spmd__fold f = spmd__fold_of(r, w);
            CHECK(f.p == p);
            CHECK(f.in_core == (r < p));
            partner_of[r] = f.partner;
            if (f.partner >= 0) {
                CHECK(f.partner >= 0 && f.partner < w && f.partner != r);
                CHECK(spmd__fold_of(f.partner, w).partner == r); /* symmetric */
                CHECK(spmd__fold_of(f.partner, w).in_core != f.in_core);
            } else {
                CHECK(f.in_core); /* every extra rank has a partner */
            }
        }
        for (int r = p; r < w; r++) know[partner_of[r]] |= know[r];
        for (int k = 0; (1 << k) < p; k++) {
            mask next[MAXW];
            for (int r = 0; r < p; r++) {
                int q = spmd__rd_partner(r, k);
                CHECK(q >= 0 && q < p && spmd__rd_partner(q, k) == r);
                next[r] = know[r] | know[q];
            }
            for (int r = 0; r < p; r++) know[r] = next[r];
        }
        for (int r = p; r < w; r++) know[r] = know[partner_of[r]];
        for (int r = 0; r < w; r++) CHECK_MSG(know[r] == all_of(w), "rd w %d rank %d", w, r);
    }
}

/* Recursive halving then doubling on a power-of-two core: after halving,
 * rank r holds chunk r complete and nothing else is needed; after doubling,
 * every rank holds every chunk complete. */
static void test_rhd(void) {
    for (int p = 1; p <= MAXW; p *= 2) {
        static mask have[MAXW][MAXW]; /* have[rank][chunk] = contributions */
        for (int r = 0; r < p; r++)
            for (int ch = 0; ch < p; ch++) have[r][ch] = (mask)1 << r;
        int steps = spmd__log2_floor(p);
        int lo[MAXW], cnt[MAXW]; /* current responsibility range */
        for (int r = 0; r < p; r++) { lo[r] = 0; cnt[r] = p; }
        for (int k = 0; k < steps; k++) {
            static mask snap[MAXW][MAXW];
            for (int r = 0; r < p; r++)
                for (int ch = 0; ch < p; ch++) snap[r][ch] = have[r][ch];
            for (int r = 0; r < p; r++) {
                spmd__rh_step s = spmd__rh_step_of(r, p, k);
                spmd__rh_step t = spmd__rh_step_of(s.peer, p, k);
                CHECK(t.peer == r && s.half == cnt[r] / 2 && t.half == s.half);
                /* halves partition our range; the peer keeps what we send */
                CHECK(s.keep_first == t.send_first && s.send_first == t.keep_first);
                CHECK((s.keep_first == lo[r] && s.send_first == lo[r] + s.half) ||
                      (s.send_first == lo[r] && s.keep_first == lo[r] + s.half));
                for (int ch = s.keep_first; ch < s.keep_first + s.half; ch++)
                    have[r][ch] = snap[r][ch] | snap[s.peer][ch];
            }
            for (int r = 0; r < p; r++) {
                spmd__rh_step s = spmd__rh_step_of(r, p, k);
                lo[r] = s.keep_first;
                cnt[r] = s.half;
            }
        }
        for (int r = 0; r < p; r++) {
            CHECK_MSG(lo[r] == r && cnt[r] == 1, "p %d rank %d ends with chunks [%d,+%d)", p, r, lo[r], cnt[r]);
            CHECK(have[r][r] == all_of(p));
        }
        /* doubling: replay in reverse, exchanging whole held ranges */
        int ok[MAXW][MAXW];
        for (int r = 0; r < p; r++)
            for (int ch = 0; ch < p; ch++) ok[r][ch] = ch == r;
        for (int k = steps - 1; k >= 0; k--) {
            static int snap2[MAXW][MAXW];
            for (int r = 0; r < p; r++)
                for (int ch = 0; ch < p; ch++) snap2[r][ch] = ok[r][ch];
            for (int r = 0; r < p; r++) {
                spmd__rh_step s = spmd__rh_step_of(r, p, k);
                for (int ch = s.keep_first; ch < s.keep_first + s.half; ch++) CHECK(snap2[r][ch]);
                for (int ch = s.send_first; ch < s.send_first + s.half; ch++) {
                    CHECK(snap2[s.peer][ch]);
                    ok[r][ch] = 1;
                }
            }
        }
        for (int r = 0; r < p; r++)
            for (int ch = 0; ch < p; ch++) CHECK(ok[r][ch]);
    }
}

static void test_tree(void) {
    for (int w = 1; w <= MAXW; w++) {
        for (int root = 0; root < w; root++) {
            int reached = 0, depth_max = 0;
            for (int r = 0; r < w; r++) {
                int par = spmd__tree_parent(r, root, w);
                if (r == root) CHECK(par == -1);
                else CHECK(par >= 0 && par < w && par != r);
                int ch[32];
                int n = spmd__tree_children(r, root, w, ch, 32);
                int sub = 1, prev_sub = 1 << 30;
                int v = spmd__vrank(r, root, w);
                for (int i = 0; i < n; i++) {
                    CHECK(spmd__tree_parent(ch[i], root, w) == r);
                    int cv = spmd__vrank(ch[i], root, w);
                    CHECK(cv < prev_sub); /* farthest child (largest nominal subtree) first */
                    prev_sub = cv;
                }
                /* child subtrees, smallest first, tile [v+1, v+subtree) in virtual ranks */
                for (int i = n - 1; i >= 0; i--) {
                    CHECK(spmd__vrank(ch[i], root, w) == v + sub);
                    sub += spmd__tree_subtree(ch[i], root, w);
                }
                CHECK_MSG(sub == spmd__tree_subtree(r, root, w), "w %d root %d rank %d subtree %d vs %d", w,
                          root, r, sub, spmd__tree_subtree(r, root, w));
                /* depth */
                int d = 0, x = r;
                while (x != root && d <= w) {
                    x = spmd__tree_parent(x, root, w);
                    d++;
                }
                CHECK(x == root);
                if (d > depth_max) depth_max = d;
                reached++;
                CHECK(spmd__unvrank(v, root, w) == r);
            }
            CHECK(reached == w);
            CHECK(spmd__tree_subtree(root, root, w) == w);
            CHECK(depth_max <= spmd__ceil_log2(w));
        }
    }
}

static void test_dissemination(void) {
    for (int w = 1; w <= MAXW; w++) {
        mask know[MAXW];
        for (int r = 0; r < w; r++) know[r] = (mask)1 << r;
        int rounds = spmd__dissem_rounds(w);
        for (int k = 0; k < rounds; k++) {
            mask next[MAXW];
            for (int r = 0; r < w; r++) {
                int from = spmd__dissem_from(r, w, k);
                CHECK(spmd__dissem_to(from, w, k) == r);
                next[r] = know[r] | know[from];
            }
            for (int r = 0; r < w; r++) know[r] = next[r];
        }
        for (int r = 0; r < w; r++) CHECK_MSG(know[r] == all_of(w), "barrier w %d rank %d", w, r);
        if (w > 1) { /* one round fewer would not do */
            CHECK(rounds == spmd__ceil_log2(w));
        }
    }
}

static void test_pairwise(void) {
    for (int w = 1; w <= MAXW; w++) {
        static int met[MAXW][MAXW];
        for (int a = 0; a < w; a++)
            for (int b = 0; b < w; b++) met[a][b] = 0;
        for (int s = 1; s < w; s++) {
            int hit[MAXW] = {0};
            for (int r = 0; r < w; r++) {
                int to = spmd__pair_to(r, w, s);
                CHECK(to != r && spmd__pair_from(to, w, s) == r);
                hit[to]++;
                met[r][to]++;
            }
            for (int r = 0; r < w; r++) CHECK(hit[r] == 1); /* a permutation */
        }
        for (int a = 0; a < w; a++)
            for (int b = 0; b < w; b++) CHECK(met[a][b] == (a != b));
    }
}

static void test_bruck(void) {
    for (int w = 1; w <= MAXW; w++) {
        static int t[MAXW][MAXW]; /* t[rank][i] = whose block is at slot i, -1 if none */
        int held[MAXW];
        for (int r = 0; r < w; r++) {
            for (int i = 0; i < w; i++) t[r][i] = -1;
            t[r][0] = r;
            held[r] = 1;
        }
        for (int d = 1; d < w; d *= 2) {
            int cnt = spmd__bruck_count(w, d);
            static int snap[MAXW][MAXW];
            for (int r = 0; r < w; r++)
                for (int i = 0; i < w; i++) snap[r][i] = t[r][i];
            for (int r = 0; r < w; r++) {
                int from = spmd__mod(r + d, w);
                CHECK(held[r] == d && held[from] >= cnt);
                for (int i = 0; i < cnt; i++) t[r][d + i] = snap[from][i];
            }
            for (int r = 0; r < w; r++) held[r] += cnt;
        }
        for (int r = 0; r < w; r++) {
            CHECK(held[r] == w);
            for (int i = 0; i < w; i++) CHECK(t[r][i] == (r + i) % w);
        }
    }
}

/* The ring schedules as the algorithm files use them. */
static void test_ring(void) {
    for (int w = 1; w <= MAXW; w++) {
        static mask have[MAXW][MAXW];
        for (int r = 0; r < w; r++)
            for (int ch = 0; ch < w; ch++) have[r][ch] = (mask)1 << r;
        for (int s = 0; s < w - 1; s++) {
            static mask snap[MAXW][MAXW];
            for (int r = 0; r < w; r++)
                for (int ch = 0; ch < w; ch++) snap[r][ch] = have[r][ch];
            for (int r = 0; r < w; r++) {
                int prev = spmd__ring_prev(r, w);
                int rc = spmd__mod(r - s - 1, w);
                CHECK(spmd__mod(prev - s, w) == rc); /* prev sends the chunk we expect */
                have[r][rc] |= snap[prev][rc];
            }
        }
        for (int r = 0; r < w; r++) CHECK(have[r][spmd__mod(r + 1, w)] == all_of(w));
    }
}

int main(void) {
    test_chunks();
    test_pow2();
    test_fold_rd();
    test_rhd();
    test_tree();
    test_dissemination();
    test_pairwise();
    test_bruck();
    test_ring();
    TEST_MAIN_END();
}
