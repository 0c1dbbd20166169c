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

/* Start a server listening on host:port (host NULL or "" = all interfaces,
 * port 0 = pick a free port; read it back with spmd_store_server_port).
 * The server runs in its own thread until spmd_store_server_stop(). */
spmd_status spmd_store_server_start(const char *host, int port, spmd_store_server **out,
                                    char *err, size_t errlen);
int spmd_store_server_port(const spmd_store_server *s);
/* Stops the thread, closes every connection, frees everything. NULL is fine. */
void spmd_store_server_stop(spmd_store_server *s);
/* For a child after fork(): close the server's descriptors and free its memory
 * without touching its thread (which does not exist in the child). */
void spmd_store_server_forget(spmd_store_server *s);

/* Connect to a server, retrying until timeout_ms passes (the server may not
 * be up yet).  timeout_ms also becomes the default deadline of every call. */
spmd_status spmd_store_connect(const char *host, int port, int timeout_ms, spmd_store **out,
                               char *err, size_t errlen);
/* A second handle on the same connection whose keys are prefixed with
 * `prefix` (namespaces per group).  Close it before its parent. */
spmd_status spmd_store_prefixed(spmd_store *parent, const char *prefix, spmd_store **out);
void spmd_store_close(spmd_store *s);
/* Deadline (ms) for blocking calls on this handle; <= 0 means the default 30 min. */
void spmd_store_set_timeout(spmd_store *s, int timeout_ms);
/* Detailed message of the last failed call on this handle (thread-local to the handle). */
const char *spmd_store_errmsg(const spmd_store *s);

spmd_status spmd_store_set(spmd_store *s, const char *key, const void *val, size_t len);
/* Blocks until key exists or the deadline passes. *val is malloc()ed (NUL-terminated
 * for convenience, the terminator not counted in *len). */
spmd_status spmd_store_get(spmd_store *s, const char *key, void **val, size_t *len);
/* Like get but does not block: SPMD_ERR_NOTFOUND if the key is absent. */
spmd_status spmd_store_try_get(spmd_store *s, const char *key, void **val, size_t *len);
/* Blocks until every key exists or the deadline (timeout_ms, <=0: handle default). */
spmd_status spmd_store_wait(spmd_store *s, const char *const *keys, size_t nkeys, int timeout_ms);
/* Atomic add to a 64-bit counter stored as decimal text; missing key counts as 0. */
spmd_status spmd_store_add(spmd_store *s, const char *key, int64_t delta, int64_t *result);
/* If key's value equals expected (or key is absent and expected_len == 0 with
 * expected == NULL), set it to desired.  *current receives the value after the
 * operation (malloc()ed), as torch's compare_set does. */
spmd_status spmd_store_compare_set(spmd_store *s, const char *key, const void *expected,
                                   size_t expected_len, const void *desired, size_t desired_len,
                                   void **current, size_t *current_len);
/* *deleted = 1 if the key existed. */
spmd_status spmd_store_delete(spmd_store *s, const char *key, int *deleted);
/* Number of keys in the whole store (all prefixes). */
spmd_status spmd_store_num_keys(spmd_store *s, int64_t *n);

#ifdef __cplusplus
}
#endif
#endif
