/* bufcache.c — the tensor memory of messages.  Buffers of 64 KiB and more
 * come from a small per-process cache of freed ones, so a stream of large
 * calls reuses memory whose pages are already mapped: a fresh 4 MiB buffer
 * costs a thousand page faults and the kernel's zeroing of it, about as much
 * as the copy the transport then makes into it.  Sizes are rounded up to
 * 64 KiB so that the freeing side finds the capacity from the tensor's size
 * alone.  Message structures themselves are kept for reuse too (below). */
#include <pthread.h>
#include <stdlib.h>
#include "rpc_internal.h"

#define CACHE_MIN ((size_t)64 * 1024)
#define CACHE_SLOTS 8
#define CACHE_MAX_BYTES ((size_t)64 << 20)

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t cap;
} slot[CACHE_SLOTS];   /* oldest first */
static int nslots;
static size_t held;

static size_t cap_of(size_t bytes) { return (bytes + CACHE_MIN - 1) & ~(CACHE_MIN - 1); }

void *spmd__rpc_data_alloc(size_t bytes) {
    if (bytes < CACHE_MIN) return malloc(bytes ? bytes : 1);
    size_t cap = cap_of(bytes);
    pthread_mutex_lock(&cache_mu);
    for (int i = nslots - 1; i >= 0; i--)
        if (slot[i].cap == cap) {
            void *p = slot[i].p;
            for (int j = i; j + 1 < nslots; j++) slot[j] = slot[j + 1];
            nslots--;
            held -= cap;
            pthread_mutex_unlock(&cache_mu);
            return p;
        }
    pthread_mutex_unlock(&cache_mu);
    return malloc(cap);
}

void spmd__rpc_data_free(void *p, size_t bytes) {
    if (!p) return;
    size_t cap = cap_of(bytes);
    if (bytes < CACHE_MIN || cap > CACHE_MAX_BYTES) {
        free(p);
        return;
    }
    void *evict[CACHE_SLOTS];
    int nevict = 0;
    pthread_mutex_lock(&cache_mu);
    /* the oldest make room for the newest */
    while (nslots && (nslots == CACHE_SLOTS || held + cap > CACHE_MAX_BYTES)) {
        evict[nevict++] = slot[0].p;
        held -= slot[0].cap;
        for (int j = 0; j + 1 < nslots; j++) slot[j] = slot[j + 1];
        nslots--;
    }
    slot[nslots].p = p;
    slot[nslots++].cap = cap;
    held += cap;
    pthread_mutex_unlock(&cache_mu);
    for (int i = 0; i < nevict; i++) free(evict[i]);
}

void spmd__rpc_data_trim(void) {
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < nslots; i++) free(slot[i].p);
    nslots = 0;
    held = 0;
    pthread_mutex_unlock(&cache_mu);
}

/* A message is 6 KiB of tables, allocated and freed on every call, often on
 * different threads: freed ones are kept for reuse (malloc's arenas would
 * grow and trim around them on every call).  Their tables are read only up
 * to their counts, so nothing needs zeroing either. */
#define SPARE_MAX 64
static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static spmd_rpc_msg *spare[SPARE_MAX];
static int nspare;

void spmd__rpc_msg_trim(void) {
    pthread_mutex_lock(&spare_mu);
    while (nspare) free(spare[--nspare]);
    pthread_mutex_unlock(&spare_mu);
}

spmd_rpc_msg *spmd__rpc_msg_alloc(void) {
    spmd_rpc_msg *m = NULL;
    pthread_mutex_lock(&spare_mu);
    if (nspare) m = spare[--nspare];
    pthread_mutex_unlock(&spare_mu);
    return m ? m : malloc(sizeof *m);
}

void spmd__rpc_msg_dealloc(spmd_rpc_msg *m) {
    pthread_mutex_lock(&spare_mu);
    if (nspare < SPARE_MAX) spare[nspare++] = m, m = NULL;
    pthread_mutex_unlock(&spare_mu);
    free(m);
}
