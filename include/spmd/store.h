/* spmd/store.h — the TCP key-value store used for rendezvous and control.
 *
 * A server (a thread inside some process: rank 0, spmdrun, or spmd_spawn's
 * parent) and clients that talk to it over one TCP connection each.  Keys are
 * byte strings, values are byte strings.  Everything is blocking with a
 * deadline; nothing here is used on the data path.
 *
 * Ownership: every spmd_store / spmd_store_server returned here is owned by
 * the caller and released with the matching _close/_stop call.  Buffers
 * returned through `void **val` are malloc()ed and owned by the caller (free()).
 * On failure nothing is written to out-parameters.
 *
 * Threads: a connection (spmd_store_connect) and every prefixed handle made
 * from it share one socket guarded by one mutex, so any of them may be used
 * from any thread; calls on one connection are serialised (a blocking get
 * holds the connection until it returns — give a thread that blocks for long
 * its own connection).  A connection must not be used across fork().
 *
 * Failures: SPMD_ERR_TIMEOUT when a deadline passes (the connection stays
 * usable), SPMD_ERR_REMOTE when the server closed the connection (stopped or
 * died; every later call on that connection fails the same way at once),
 * SPMD_ERR_INVALID for bad arguments (key or value over the limits below).
 * Protocol and limits: docs/STORE.md.
 */
#ifndef SPMD_STORE_H
#define SPMD_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spmd_store_server spmd_store_server;
typedef struct spmd_store spmd_store;

/* Limits enforced on the wire (before anything is allocated). */
#define SPMD_STORE_MAX_KEY (4096u)
#define SPMD_STORE_MAX_VALUE (64u * 1024u * 1024u)
#define SPMD_STORE_MAX_WAIT_KEYS (1024u)
/* Deadline of a handle whose timeout is <= 0. */
#define SPMD_STORE_DEFAULT_TIMEOUT_MS (30 * 60 * 1000)

/* Start a server listening on host:port (host NULL or "" = all interfaces,
 * port 0 = pick a free port; read it back with spmd_store_server_port).
 * The server runs in its own thread until spmd_store_server_stop(). */
spmd_status spmd_store_server_start(const char *host, int port, spmd_store_server **out,
                                    char *err, size_t errlen);
int spmd_store_server_port(const spmd_store_server *s);
/* Stops the thread, closes every connection, frees everything. NULL is fine. */
void spmd_store_server_stop(spmd_store_server *s);
/* For a child after fork(): close the server's descriptors and free its memory
 * without touching its thread (which does not exist in the child).  The
 * server's state is consistent in the child: fork() waits (pthread_atfork)
 * until the server thread is between two batches of work. */
void spmd_store_server_forget(spmd_store_server *s);

/* Standalone use (a server in the calling thread, e.g. a launcher's main loop):
 * _open binds and listens without starting a thread (the port is readable at
 * once); _run serves in the calling thread until _interrupt is called, then
 * returns SPMD_OK (SPMD_ERR_SYSTEM if epoll fails).  _interrupt is
 * async-signal-safe and may be called from any thread or a signal handler.
 * Release with spmd_store_server_stop() once _run has returned (or if it never
 * ran).  spmd_store_server_start() is _open plus a thread running _run. */
spmd_status spmd_store_server_open(const char *host, int port, spmd_store_server **out,
                                   char *err, size_t errlen);
spmd_status spmd_store_server_run(spmd_store_server *s);
void spmd_store_server_interrupt(spmd_store_server *s);

/* Connect to a server, retrying until timeout_ms passes (the server may not
 * be up yet), then shake hands (magic, protocol version).  timeout_ms also
 * becomes the default deadline of every call (<= 0: the default 30 min).
 * host NULL or "" = this host.  SPMD_ERR_TIMEOUT if nobody answered in time,
 * SPMD_ERR_PROTOCOL if the peer is not a store server, SPMD_ERR_MISMATCH if
 * its protocol version differs. */
spmd_status spmd_store_connect(const char *host, int port, int timeout_ms, spmd_store **out,
                               char *err, size_t errlen);
/* A second handle on the same connection whose keys are prefixed with
 * `prefix` and a '/' (as torch's PrefixStore: key "k" of prefix "g1" is
 * "g1/k" in the store; prefixes nest; "" adds nothing: a second handle on the
 * same namespace, e.g. one per thread).  It inherits the parent's timeout.
 * Handles may be closed in any order: the connection goes with the last. */
spmd_status spmd_store_prefixed(spmd_store *parent, const char *prefix, spmd_store **out);
/* A handle like h (same prefix and timeout) on a new connection to the same
 * server: a thread that may block in a call for long then holds up no other
 * handle of h's connection. */
spmd_status spmd_store_reconnect(spmd_store *h, spmd_store **out, char *err, size_t errlen);
void spmd_store_close(spmd_store *s);
/* Deadline (ms) for blocking calls on this handle; <= 0 means the default 30 min. */
void spmd_store_set_timeout(spmd_store *s, int timeout_ms);
/* Detailed message of the last failed call on this handle ("" if none; the
 * handle's own buffer: with several threads failing on one handle at once the
 * message is the latest — give each thread its own prefixed handle). */
const char *spmd_store_errmsg(const spmd_store *s);

spmd_status spmd_store_set(spmd_store *s, const char *key, const void *val, size_t len);
/* Blocks until key exists or the deadline passes (SPMD_ERR_TIMEOUT).  The
 * server parks the request and answers when the key is set or the deadline
 * passes.  *val is malloc()ed (NUL-terminated for convenience, the terminator
 * not counted in *len). */
spmd_status spmd_store_get(spmd_store *s, const char *key, void **val, size_t *len);
/* Like get but does not block: SPMD_ERR_NOTFOUND if the key is absent. */
spmd_status spmd_store_try_get(spmd_store *s, const char *key, void **val, size_t *len);
/* Blocks until every key exists (all at the same moment) or the deadline
 * (timeout_ms, <=0: handle default).  nkeys <= SPMD_STORE_MAX_WAIT_KEYS; 0 keys
 * return SPMD_OK at once. */
spmd_status spmd_store_wait(spmd_store *s, const char *const *keys, size_t nkeys, int timeout_ms);
/* Atomic add to a 64-bit counter stored as decimal text; missing key counts as 0.
 * SPMD_ERR_INVALID if the value is not a decimal integer or the sum overflows.
 * result may be NULL. */
spmd_status spmd_store_add(spmd_store *s, const char *key, int64_t delta, int64_t *result);
/* If key's value equals expected (or key is absent and expected_len == 0 with
 * expected == NULL), set it to desired.  *current receives the value after the
 * operation (malloc()ed), as torch's compare_set does — including torch's
 * quirk: when the key is absent and expected is not empty nothing is set and
 * *current receives `expected`.  The swap happened iff *current equals desired
 * (when expected != desired).  current/current_len may both be NULL. */
spmd_status spmd_store_compare_set(spmd_store *s, const char *key, const void *expected,
                                   size_t expected_len, const void *desired, size_t desired_len,
                                   void **current, size_t *current_len);
/* *deleted = 1 if the key existed, else 0 (deleted may be NULL). */
spmd_status spmd_store_delete(spmd_store *s, const char *key, int *deleted);
/* Number of keys in the whole store (all prefixes). */
spmd_status spmd_store_num_keys(spmd_store *s, int64_t *n);

#ifdef __cplusplus
}
#endif
#endif
