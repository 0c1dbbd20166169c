/* server_internal.h — what the store server's files share.
 *
 * The server is four files, bottom to top:
 *   table.c   the key table: a chained hash of entries, nothing about clients;
 *   ops.c     the operations on it (SET, GET, WAIT, ADD, CAS, DELETE, NUM_KEYS),
 *             the byte limits, and parked GET/WAITs with their watches;
 *   conn.c    the clients: sockets, the handshake, framing, input and output
 *             buffers, dropping a client;
 *   server.c  the loop (epoll), its life cycle and fork safety.
 * ops.c and conn.c call each other (a request produces a reply; a dropped
 * client leaves its parked request): one mutual pair, inside this folder.
 */
#ifndef SPMD_STORE_SERVER_INTERNAL_H
#define SPMD_STORE_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "auth/ratelimit.h"
#include "store/handshake.h"
#include "store/limits.h"
#include "store/store_internal.h"

#define IO_CHUNK ((size_t)64 * 1024)
/* A client may have one maximal request buffered plus a read chunk. */
#define IN_LIMIT ((size_t)SPMD__STORE_MAX_REQ_BODY + 4u + IO_CHUNK)
/* Buffers above this size are released once empty. */
#define KEEP_CAP ((size_t)1 << 20)
/* A value this large that arrived alone takes its input buffer rather than a copy. */
#define TAKE_MIN ((size_t)1 << 20)
/* Output buffers above this size are released once sent (they count against
 * SPMD_STORE_MAX_BYTES while kept). */
#define KEEP_OUT_CAP IO_CHUNK
/* Replies larger than this leave the last sixteenth of SPMD_STORE_MAX_BYTES to
 * small ones, so that readers of big values never stall everyone else. */
#define SMALL_REPLY IO_CHUNK
/* How long accepting pauses when out of descriptors or memory. */
#define ACCEPT_PAUSE_NS (100ull * 1000000ull)

typedef struct entry entry;
typedef struct watch watch;
typedef struct conn conn;

/* One parked connection waiting for one absent key. */
struct watch {
    conn *c;
    entry *e; /* NULL when not attached */
    watch *prev, *next;
};

struct entry {
    entry *next; /* hash chain */
    uint64_t hash;
    unsigned char *val;
    size_t vlen;
    unsigned char *block; /* the allocation val points into, when it was a client's input buffer */
    size_t vbytes;        /* bytes the value occupies (charged to the limits) */
    int present; /* 0: placeholder that only exists to hold watchers */
    watch *watchers;
    conn *owner; /* the connection that set the value (NULL once it left) */
    uint32_t klen;
    unsigned char key[];
};

/* The key table: entries present and placeholders that hold watchers. */
typedef struct {
    entry **buckets;
    size_t nbuckets, nentries, npresent;
    uint64_t seed;
} spmd__store_table;

struct conn {
    int fd;
    int dead, hello_done, closing;
    int stolen;                /* the last SET took the input buffer as its value */
    spmd__store_hs hs;         /* until hello_done: nothing but the handshake is read */
    uint64_t hs_deadline_ns;
    size_t owned;              /* bytes of the keys and values this connection set */
    char name[64];
    unsigned char *in;
    size_t in_off, in_len, in_cap;
    unsigned char *out;
    size_t out_off, out_len, out_cap;
    uint32_t events;
    /* parked GET/WAIT */
    int parked;
    uint8_t park_op;
    uint32_t park_seq, park_timeout_ms, park_nkeys, missing;
    uint64_t park_deadline_ns;
    unsigned char *park_keys; /* copy of the request's key list */
    watch *watches;           /* park_nkeys nodes */
    conn *prev, *next;        /* all live connections */
    conn *pprev, *pnext;      /* parked connections */
    conn *qnext;              /* work queue */
    int queued;
    int mem_wait;             /* its next reply waits for store memory (conn.c) */
    conn *wnext;              /* waiting for memory */
    conn *gnext; /* graveyard */
};

struct spmd_store_server {
    pthread_mutex_t mu; /* held by the serving thread while it works (see fork in server.c) */
    int lfd, epfd, wakefd;
    int port;
    atomic_int stop;
    pthread_t thread;
    int has_thread;
    spmd__store_table table;
    /* connections */
    conn *conns, *parked, *qhead, *qtail, *graveyard;
    atomic_int nconns, nparked;
    int accept_paused;
    uint64_t accept_resume_ns;
    int npending;        /* connections still in their handshake */
    size_t bytes;        /* keys and values present plus input and output buffers */
    size_t unsent;       /* reply bytes queued and not yet sent, all clients */
    conn *waiters;       /* clients whose next reply waits for memory, oldest first */
    int memory_freed;    /* wake the waiters at the end of this turn */
    atomic_int nwaiting; /* (for tests) */
    atomic_size_t peak_bytes; /* (for tests) the highest `bytes` seen */
    spmd__auth auth;
    spmd__store_limits lim;
    spmd__ratelimit refusals; /* warnings about strangers */
    unsigned nrefused;        /* clients refused in the handshake (under mu) */
    uint64_t refused_ns;      /* when the last one was */
    char refused_last[320];   /* "client ADDR: cause" of the last one */
    char limit_msg[256]; /* why set_value refused */
    spmd_store_server *reg_next;
};

/* ---- table.c ---- */
entry *spmd__store_table_lookup(const spmd__store_table *t, const unsigned char *k, size_t n);
/* NULL only when out of memory. */
entry *spmd__store_table_find_or_create(spmd__store_table *t, const unsigned char *k, size_t n);
void spmd__store_table_free_value(entry *e);
/* A placeholder nobody waits on any more goes away. */
void spmd__store_table_reap(spmd__store_table *t, entry *e);
/* Entries set by `owner` belong to nobody from now on. */
void spmd__store_table_disown(spmd__store_table *t, const conn *owner);
/* Frees every entry and the buckets. */
void spmd__store_table_clear(spmd__store_table *t);
/* c's parked request ends: its watches leave their entries. */
void spmd__store_unpark(spmd_store_server *s, conn *c);

/* ---- ops.c ---- */
void spmd__store_execute(spmd_store_server *s, conn *c, const spmd__store_req *r);
void spmd__store_evaluate_park(spmd_store_server *s, conn *c);
void spmd__store_expire_parked(spmd_store_server *s, uint64_t now);
/* The largest reply request r can produce, value bytes only. */
size_t spmd__store_reply_bound(spmd_store_server *s, const spmd__store_req *r);

/* ---- reply.c ---- */
void spmd__store_enqueue(spmd_store_server *s, conn *c);
void spmd__store_drop(spmd_store_server *s, conn *c, int warn, const char *fmt, ...)
    SPMD__PRINTF(4, 5);
void spmd__store_free_conn(conn *c);
void spmd__store_reply(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st, int64_t num,
                       const void *val, size_t vlen);
void spmd__store_reply_err(spmd_store_server *s, conn *c, uint32_t seq, spmd_status st,
                           const char *fmt, ...) SPMD__PRINTF(5, 6);
int spmd__store_flush(spmd_store_server *s, conn *c);
/* Queue bytes that are no reply (the handshake's answer); -1: out of memory. */
int spmd__store_queue_raw(spmd_store_server *s, conn *c, const void *bytes, size_t n);
/* May a reply carrying vlen value bytes be queued for c now?  1: yes; 0: not
 * yet — c now waits for memory (it reads nothing more) and is served again
 * when other replies drain; -1: never (nothing queued could free room; answer
 * an error).  The check that keeps queued replies inside SPMD_STORE_MAX_BYTES. */
int spmd__store_reply_room(spmd_store_server *s, conn *c, size_t vlen);
/* The waiters go back on the work queue (memory came free). */
void spmd__store_wake_waiters(spmd_store_server *s);
/* Account bytes added to (delta > 0) or released from the store's total. */
void spmd__store_charge(spmd_store_server *s, size_t add, size_t release);
/* ---- conn.c ---- */
void spmd__store_on_readable(spmd_store_server *s, conn *c);
void spmd__store_process(spmd_store_server *s, conn *c);
void spmd__store_expire_handshakes(spmd_store_server *s, uint64_t now);
void spmd__store_accept_all(spmd_store_server *s);

#endif
