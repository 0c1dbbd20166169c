/* table.c — the store's key table: a chained hash of entries, seeded per
 * server so that a client cannot choose keys that all land in one chain.
 * An entry is either present (it holds a value) or a placeholder that exists
 * only to hold the watchers of an absent key.  Nothing here knows about
 * sockets or limits (ops.c charges the bytes); a parked request's watches
 * hang on entries, and come off here. */
#include <stdlib.h>
#include <string.h>
#include "common/fnv.h"
#include "store/server_internal.h"

static uint64_t hash_key(uint64_t seed, const unsigned char *k, size_t n) {
    uint64_t h = spmd__fnv1a64(SPMD__FNV64_OFFSET ^ seed, k, n); /* FNV-1a, seeded */
    return h ^ (h >> 29);
}

entry *spmd__store_table_lookup(const spmd__store_table *t, const unsigned char *k, size_t n) {
    if (!t->nbuckets) return NULL;
    uint64_t h = hash_key(t->seed, k, n);
    for (entry *e = t->buckets[h & (t->nbuckets - 1)]; e; e = e->next)
        if (e->hash == h && e->klen == n && memcmp(e->key, k, n) == 0) return e;
    return NULL;
}

static int grow_table(spmd__store_table *t) {
    size_t nb = t->nbuckets ? t->nbuckets * 2 : 64;
    entry **b = calloc(nb, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < t->nbuckets; i++) {
        entry *e = t->buckets[i];
        while (e) {
            entry *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
    return 0;
}

entry *spmd__store_table_find_or_create(spmd__store_table *t, const unsigned char *k, size_t n) {
    entry *e = spmd__store_table_lookup(t, k, n);
    if (e) return e;
    if (t->nentries >= t->nbuckets && grow_table(t)) return NULL;
    e = calloc(1, sizeof *e + n + 1);
    if (!e) return NULL;
    e->hash = hash_key(t->seed, k, n);
    e->klen = (uint32_t)n;
    if (n) memcpy(e->key, k, n);
    size_t b = e->hash & (t->nbuckets - 1);
    e->next = t->buckets[b];
    t->buckets[b] = e;
    t->nentries++;
    return e;
}

void spmd__store_table_free_value(entry *e) {
    free(e->block ? e->block : e->val);
    e->block = e->val = NULL;
}

static void remove_entry(spmd__store_table *t, entry *e) {
    for (entry **pp = &t->buckets[e->hash & (t->nbuckets - 1)]; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    t->nentries--;
    spmd__store_table_free_value(e);
    free(e);
}

void spmd__store_table_reap(spmd__store_table *t, entry *e) {
    if (!e->present && !e->watchers) remove_entry(t, e);
}

void spmd__store_table_disown(spmd__store_table *t, const conn *owner) {
    for (size_t i = 0; i < t->nbuckets; i++)
        for (entry *e = t->buckets[i]; e; e = e->next)
            if (e->owner == owner) e->owner = NULL;
}

void spmd__store_table_clear(spmd__store_table *t) {
    for (size_t i = 0; i < t->nbuckets; i++) {
        entry *e = t->buckets[i];
        while (e) {
            entry *next = e->next;
            spmd__store_table_free_value(e);
            free(e);
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = NULL;
    t->nbuckets = t->nentries = t->npresent = 0;
}

/* A parked connection's watches come off their entries (placeholders
 * nobody waits on any more go). */
static void detach_watch(spmd_store_server *s, watch *w) {
    entry *e = w->e;
    if (!e) return;
    if (w->prev) w->prev->next = w->next; else e->watchers = w->next;
    if (w->next) w->next->prev = w->prev;
    w->e = NULL;
    w->prev = w->next = NULL;
    spmd__store_table_reap(&s->table, e);
}

void spmd__store_unpark(spmd_store_server *s, conn *c) {
    if (!c->parked) return;
    for (uint32_t i = 0; i < c->park_nkeys; i++) detach_watch(s, &c->watches[i]);
    free(c->watches);
    free(c->park_keys);
    c->watches = NULL;
    c->park_keys = NULL;
    if (c->pprev) c->pprev->pnext = c->pnext; else s->parked = c->pnext;
    if (c->pnext) c->pnext->pprev = c->pprev;
    c->pprev = c->pnext = NULL;
    c->parked = 0;
    atomic_fetch_sub(&s->nparked, 1);
}
