/* secret.c — where this process's job secret comes from (see auth.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "auth/auth.h"
#include "auth/secret_file.h"
#include "auth/user_secret.h"
#include "spmd/auth.h"

static pthread_mutex_t gen_mu = PTHREAD_MUTEX_INITIALIZER;
static int gen_have;
static char gen_token[SPMD_AUTH_TOKEN_CHARS + 1];
static pthread_once_t off_once = PTHREAD_ONCE_INIT;

static void warn_off(void) {
    SPMD_LOGW("SPMD_AUTH=off: store and mesh connections are NOT authenticated; anyone who can "
              "reach this job's ports can read and write its keys and join its groups");
}

int spmd__auth_disabled(void) {
    const char *v = getenv("SPMD_AUTH");
    if (!v || (strcmp(v, "off") != 0 && strcmp(v, "0") != 0)) return 0;
    pthread_once(&off_once, warn_off);
    return 1;
}

static spmd_status set_key(spmd__auth *a, const char *s, size_t n, const char *source, char *err,
                           size_t errlen) {
    s = spmd__secret_trim(s, &n);
    if (n < SPMD__AUTH_MIN_SECRET || n > SPMD__AUTH_MAX_SECRET)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "%s: the job secret has %zu characters, needs %d..%d (spmdrun generates "
                          "one; or use e.g. `openssl rand -hex 32`)",
                          source, n, SPMD__AUTH_MIN_SECRET, SPMD__AUTH_MAX_SECRET);
    memcpy(a->key, s, n);
    a->keylen = n;
    a->on = 1;
    a->source = source;
    return SPMD_OK;
}

/* A secret read by spmd__secret_file_read (SPMD_AUTH_FILE or the per-user file). */
static spmd_status set_from_file(spmd__auth *a, spmd_status st, char *buf, size_t n,
                                 const char *source, char *err, size_t errlen) {
    if (!st && n > SPMD__AUTH_MAX_SECRET)
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID,
                        "%s: the job secret has %zu characters, needs %d..%d", source, n,
                        SPMD__AUTH_MIN_SECRET, SPMD__AUTH_MAX_SECRET);
    if (!st) st = set_key(a, buf, n, source, err, errlen);
    spmd__auth_wipe(buf, SPMD__AUTH_MAX_SECRET);
    return st;
}

spmd_status spmd__auth_given(spmd__auth *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->source = "none";
    const char *tok = getenv("SPMD_AUTH_TOKEN");
    if (tok && *tok) return set_key(a, tok, strlen(tok), "SPMD_AUTH_TOKEN", err, errlen);
    const char *file = getenv("SPMD_AUTH_FILE");
    char buf[SPMD__AUTH_MAX_SECRET];
    size_t n = 0;
    if (file && *file) {
        spmd_status fst = spmd__secret_file_read(file, "SPMD_AUTH_FILE", buf, sizeof buf, &n, err, errlen);
        return set_from_file(a, fst, buf, n, "SPMD_AUTH_FILE", err, errlen);
    }
    pthread_mutex_lock(&gen_mu);
    spmd_status st = SPMD_OK;
    if (gen_have) st = set_key(a, gen_token, strlen(gen_token), "generated", err, errlen);
    pthread_mutex_unlock(&gen_mu);
    return st;
}

spmd_status spmd__auth_get(spmd__auth *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if (spmd__auth_disabled()) {
        a->source = "SPMD_AUTH=off";
        return SPMD_OK;
    }
    spmd_status st = spmd__auth_given(a, err, errlen);
    if (st || a->on) return st;
    char buf[SPMD__AUTH_MAX_SECRET], path[4200];
    size_t n = 0;
    st = spmd__user_secret_read(buf, sizeof buf, &n, path, sizeof path, err, errlen);
    return set_from_file(a, st, buf, n, "the per-user secret file", err, errlen);
}

spmd_status spmd__auth_ensure(char *err, size_t errlen) {
    spmd__auth a;
    memset(&a, 0, sizeof a);
    spmd_status st = spmd__auth_disabled() ? SPMD_OK : spmd__auth_given(&a, err, errlen);
    int have = a.on;
    spmd__auth_wipe(&a, sizeof a);
    if (st || have || spmd__auth_disabled()) return st;
    pthread_mutex_lock(&gen_mu);
    if (!gen_have) {
        st = spmd_auth_new_token(gen_token);
        if (!st) gen_have = 1;
    }
    pthread_mutex_unlock(&gen_mu);
    if (st) return spmd__fail(err, errlen, st, "generating the job secret: no randomness");
    return SPMD_OK;
}

spmd_status spmd__auth_token(char *out, size_t outlen, char *err, size_t errlen) {
    spmd__auth a;
    spmd_status st = spmd__auth_get(&a, err, errlen);
    if (st) return st;
    if (outlen == 0 || a.keylen >= outlen)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "job secret: buffer too small");
    memcpy(out, a.key, a.keylen);
    out[a.keylen] = 0;
    return SPMD_OK;
}

void spmd__auth_export(void) {
    char tok[SPMD__AUTH_MAX_SECRET + 1], err[SPMD__ERRLEN];
    if (spmd__auth_token(tok, sizeof tok, err, sizeof err) == SPMD_OK && tok[0] &&
        !getenv("SPMD_AUTH_TOKEN") && !getenv("SPMD_AUTH_FILE"))
        setenv("SPMD_AUTH_TOKEN", tok, 1);
    memset(tok, 0, sizeof tok);
}
