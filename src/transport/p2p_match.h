/* p2p_match.h — the matching rules of point-to-point messages, kept once for
 * both engines (p2p_engine.c over spmd's own paths, mpi_p2p.c over MPI):
 *   - a receive takes a message whose source and tag it names (or any, with
 *     SPMD_ANY_SOURCE / SPMD_ANY_TAG);
 *   - an arriving message goes to the first matching receive in post order;
 *     a receive posted later takes the first matching message kept
 *     unexpected, in arrival order;
 *   - a matched pair whose sizes differ, or whose dtypes differ when both
 *     sides named one, fails the receive with a message naming both sides.
 * The posted receives are a list in post order (head, tail; linked through
 * spmd__preq.next), under the engine's lock. */
#ifndef SPMD_TRANSPORT_P2P_MATCH_H
#define SPMD_TRANSPORT_P2P_MATCH_H

#include <stddef.h>
#include <stdint.h>
#include "mesh.h"

static inline int spmd__p2p_matches(const spmd__preq *w, int src, uint32_t tag) {
    return (w->peer == SPMD_ANY_SOURCE || w->peer == src) && (w->tag == SPMD_ANY_TAG || (uint32_t)w->tag == tag);
}

static inline void spmd__p2p_post(spmd__preq **head, spmd__preq **tail, spmd__preq *w) {
    w->next = NULL;
    if (*tail) (*tail)->next = w;
    else *head = w;
    *tail = w;
}

static inline void spmd__p2p_unlink(spmd__preq **head, spmd__preq **tail, spmd__preq *prev, spmd__preq *w) {
    if (prev) prev->next = w->next;
    else *head = w->next;
    if (*tail == w) *tail = prev;
    w->next = NULL;
}

/* The first posted receive that a message from src with tag matches, taken
 * off the list; NULL when none does. */
static inline spmd__preq *spmd__p2p_take_posted(spmd__preq **head, spmd__preq **tail, int src, uint32_t tag) {
    spmd__preq *prev = NULL;
    for (spmd__preq *w = *head; w; prev = w, w = w->next)
        if (spmd__p2p_matches(w, src, tag)) {
            spmd__p2p_unlink(head, tail, prev, w);
            return w;
        }
    return NULL;
}

/* Take w off the list: 1 when it was there (not matched yet). */
static inline int spmd__p2p_unpost(spmd__preq **head, spmd__preq **tail, spmd__preq *w) {
    spmd__preq *prev = NULL;
    for (spmd__preq *x = *head; x; prev = x, x = x->next)
        if (x == w) {
            spmd__p2p_unlink(head, tail, prev, w);
            return 1;
        }
    return 0;
}

/* A message of (got bytes, dtype gdt) meets a receive of (want, wdt); a
 * dtype of -1 is none, and is not compared. */
static inline int spmd__p2p_fits(uint64_t got, int gdt, size_t want, int wdt) {
    return got == want && (gdt < 0 || wdt < 0 || gdt == wdt);
}

/* p2p_match.c: "3 x float32 (12 bytes)"; "13 bytes of float32" when the
 * size is no multiple of the element; "12 bytes" when no dtype (-1). */
void spmd__p2p_describe(char *buf, size_t len, uint64_t bytes, int dt);
/* p2p_match.c: the receive's error for a pair that does not fit, e.g. "size
 * mismatch: rank 1 sent 2 x int32 (8 bytes) with tag 5 but rank 0's receive
 * expects 3 x int32 (12 bytes)". */
void spmd__p2p_mismatch_msg(char *buf, size_t len, int self, int src, uint32_t tag, uint64_t got, int gdt,
                            size_t want, int wdt);

#endif
