/* src/store/limits.h — the store server's resource limits (docs/STORE.md).
 * Read once per server from the environment; a bad value is an error naming
 * the variable.  Each limit protects the job's own ranks from a client that
 * floods the server (keys, bytes, descriptors) or never finishes its
 * handshake. */
#ifndef SPMD_STORE_LIMITS_H
#define SPMD_STORE_LIMITS_H

#include <stddef.h>
#include "common/common.h"

typedef struct {
    size_t max_keys;         /* SPMD_STORE_MAX_KEYS          keys present at once        */
    size_t max_key;          /* SPMD_STORE_MAX_KEY_BYTES     one key (<= 4096)           */
    size_t max_value;        /* SPMD_STORE_MAX_VALUE_BYTES   one value (<= 64 MiB)       */
    size_t max_bytes;        /* SPMD_STORE_MAX_BYTES         keys+values+buffers, total  */
    size_t max_client_bytes; /* SPMD_STORE_MAX_CLIENT_BYTES  values one client set + its buffer */
    int max_conns;           /* SPMD_STORE_MAX_CONNS         authenticated connections   */
    int max_pending;         /* SPMD_STORE_MAX_PENDING       connections still in handshake */
    int handshake_ms;        /* SPMD_HANDSHAKE_TIMEOUT_MS    to finish the handshake     */
} spmd__store_limits;

spmd_status spmd__store_limits_from_env(spmd__store_limits *l, char *err, size_t errlen);

#endif
