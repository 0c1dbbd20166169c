/* limits.c — defaults and environment overrides of the store's limits. */
#include "store/limits.h"
#include "spmd/store.h"

static spmd_status get(const char *name, long lo, long hi, long *v, char *err, size_t errlen) {
    spmd_status st = spmd__env_int(name, lo, hi, v);
    if (st == SPMD_ERR_NOTFOUND) return SPMD_OK; /* keep the default */
    if (st)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s must be an integer in %ld..%ld", name,
                          lo, hi);
    return SPMD_OK;
}

spmd_status spmd__store_limits_from_env(spmd__store_limits *l, char *err, size_t errlen) {
    long keys = 1000000, key = SPMD_STORE_MAX_KEY, value = SPMD_STORE_MAX_VALUE;
    long bytes = 1024L << 20, client = 256L << 20, conns = 1024, pending = 128, hs = 3000;
    spmd_status st;
    if ((st = get("SPMD_STORE_MAX_KEYS", 1, 1L << 40, &keys, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_KEY_BYTES", 1, SPMD_STORE_MAX_KEY, &key, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_VALUE_BYTES", 0, SPMD_STORE_MAX_VALUE, &value, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_BYTES", 1L << 20, 1L << 50, &bytes, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_CLIENT_BYTES", 1L << 20, 1L << 50, &client, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_CONNS", 1, 1 << 20, &conns, err, errlen)) ||
        (st = get("SPMD_STORE_MAX_PENDING", 1, 1 << 20, &pending, err, errlen)) ||
        (st = get("SPMD_HANDSHAKE_TIMEOUT_MS", 50, 600000, &hs, err, errlen)))
        return st;
    l->max_keys = (size_t)keys;
    l->max_key = (size_t)key;
    l->max_value = (size_t)value;
    l->max_bytes = (size_t)bytes;
    l->max_client_bytes = (size_t)client;
    l->max_conns = (int)conns;
    l->max_pending = (int)pending;
    l->handshake_ms = (int)hs;
    return SPMD_OK;
}
