/* dcp_async.c — async saves (spmd_dcp_saver in spmd/ckpt.h): the caller's
 * state copied into a staging buffer, then spmd__dcp_save_run on a thread
 * of the saver's, over a subgroup of its own.
 *
 * Threads: the caller's thread touches the saver only while no save thread
 * runs (after pthread_join, which orders everything the thread wrote), except
 * `staged`, always under mu: a deferred save's thread copies the data first
 * and then says so (spmd_dcp_save_staged waits for it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"
#include "common/common.h"

struct spmd_dcp_saver {
    spmd_group *sub; /* all of g's ranks on connections of their own; NULL for one process */
    pthread_t thread;
    int running;     /* a thread to join */
    int pending;     /* result not yet returned by wait */
    spmd_status mine, result;
    char *dir;
    uint8_t *stage; /* the copies of the caller's items (kept across saves) */
    size_t stage_cap;
    spmd_dcp_shard *shards;
    size_t nshards, shards_cap;
    spmd_dcp_bytes *bytes;
    size_t nbytes, bytes_cap;
    struct copy {
        void *to;
        const void *from;
        size_t n;
    } *copies; /* the data copies of this save, done by the caller or (deferred) the thread */
    size_t ncopies, copies_cap;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int staged; /* under mu: the copies are done */
    char err[SPMD__ERRLEN];
};

spmd_status spmd_dcp_saver_new(spmd_group *g, spmd_dcp_saver **out, char *err, size_t errlen) {
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_saver_new: out is NULL");
    *out = NULL;
    if (g && !strncmp(spmd_group_backend(g), "mpi", 3))
        return spmd__fail(err, errlen, SPMD_ERR_UNSUPPORTED,
                          "spmd_dcp_saver_new: groups over MPI are not supported (the save thread would call MPI "
                          "beside the caller); use spmd_dcp_save");
    spmd_dcp_saver *s = calloc(1, sizeof *s);
    int world = g ? spmd_group_size(g) : 1, *ranks = calloc((size_t)world, sizeof *ranks);
    if (!s || !ranks) {
        free(s);
        free(ranks);
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "spmd_dcp_saver_new: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->staged = 1;
    for (int r = 0; r < world; r++) ranks[r] = r;
    spmd_status st = g ? spmd_group_new_subgroup(g, ranks, world, &s->sub) : SPMD_OK;
    free(ranks);
    if (st) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return spmd__fail(err, errlen, st, "spmd_dcp_saver_new: %s", spmd_group_errmsg(g));
    }
    *out = s;
    return SPMD_OK;
}

static void do_copies(spmd_dcp_saver *s) {
    for (size_t i = 0; i < s->ncopies; i++) memcpy(s->copies[i].to, s->copies[i].from, s->copies[i].n);
    pthread_mutex_lock(&s->mu);
    s->staged = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *save_thread(void *arg) {
    spmd_dcp_saver *s = arg;
    do_copies(s); /* none left unless deferred */
    s->result = spmd__dcp_save_run(s->sub, s->dir, s->shards, s->nshards, s->bytes, s->nbytes, s->mine, s->err,
                                   sizeof s->err);
    return NULL;
}

static void join(spmd_dcp_saver *s) {
    if (!s->running) return;
    pthread_join(s->thread, NULL);
    s->running = 0;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t shard_bytes(const spmd_dcp_shard *sh) {
    size_t n = spmd__dcp_dtype_size(sh->dtype);
    for (int d = 0; d < sh->ndim; d++) n *= (size_t)sh->sizes[d];
    return n;
}

/* Grow an array of elsize-byte items to hold n (contents dropped). */
static int reserve(void **p, size_t *cap, size_t n, size_t elsize) {
    if (n <= *cap) return 1;
    free(*p);
    *cap = 0;
    if (!(*p = malloc(n * elsize))) return 0;
    *cap = n;
    return 1;
}

/* Lay the caller's items out in the staging buffer: names and dtypes copied
 * now, the data copies listed (done by do_copies), the saver's own shard and
 * bytes arrays pointing at the copies. */
static spmd_status stage(spmd_dcp_saver *s, const spmd_dcp_shard *shards, size_t ns,
                         const spmd_dcp_bytes *bytes, size_t nb, char *err, size_t errlen) {
    size_t need = 0;
    for (size_t i = 0; i < ns; i++)
        need += align64(strlen(shards[i].fqn) + 1) + align64(strlen(shards[i].dtype) + 1) + align64(shard_bytes(&shards[i]));
    for (size_t i = 0; i < nb; i++) need += align64(strlen(bytes[i].fqn) + 1) + align64(bytes[i].len);
    if (!reserve((void **)&s->stage, &s->stage_cap, need ? need : 1, 1) ||
        !reserve((void **)&s->shards, &s->shards_cap, ns ? ns : 1, sizeof *s->shards) ||
        !reserve((void **)&s->bytes, &s->bytes_cap, nb ? nb : 1, sizeof *s->bytes) ||
        !reserve((void **)&s->copies, &s->copies_cap, ns + nb ? ns + nb : 1, sizeof *s->copies))
        return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "save %s: out of memory for %zu bytes of staging", s->dir, need);
    uint8_t *at = s->stage;
#define PLACE(dst, src, n, now)                                                  \
    do {                                                                         \
        if (now) memcpy(at, (src), (n));                                         \
        else s->copies[s->ncopies++] = (struct copy){at, (src), (n)};            \
        (dst) = (void *)at;                                                      \
        at += align64(n);                                                        \
    } while (0)
    s->ncopies = 0;
    for (size_t i = 0; i < ns; i++) {
        spmd_dcp_shard *d = &s->shards[i];
        *d = shards[i];
        PLACE(d->fqn, shards[i].fqn, strlen(shards[i].fqn) + 1, 1);
        PLACE(d->dtype, shards[i].dtype, strlen(shards[i].dtype) + 1, 1);
        PLACE(d->data, shards[i].data, shard_bytes(&shards[i]), 0);
    }
    for (size_t i = 0; i < nb; i++) {
        spmd_dcp_bytes *d = &s->bytes[i];
        d->len = bytes[i].len;
        d->pickled = bytes[i].pickled;
        PLACE(d->fqn, bytes[i].fqn, strlen(bytes[i].fqn) + 1, 1);
        if (bytes[i].len) PLACE(d->data, bytes[i].data, bytes[i].len, 0);
        else d->data = NULL;
    }
#undef PLACE
    s->nshards = ns;
    s->nbytes = nb;
    return SPMD_OK;
}

static spmd_status start(spmd_dcp_saver *s, const char *dir, const spmd_dcp_shard *shards, size_t nshards,
                         const spmd_dcp_bytes *bytes, size_t nbytes, int deferred, char *err, size_t errlen) {
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save_async: no saver");
    join(s);
    if (s->pending && s->result != SPMD_OK) { /* agreed: every rank refuses alike */
        s->pending = 0;
        return spmd__fail(err, errlen, s->result, "the previous save failed and was not waited for: %s", s->err);
    }
    s->err[0] = 0;
    free(s->dir);
    s->dir = strdup(dir ? dir : "?");
    spmd_status st = !s->dir ? spmd__fail(s->err, sizeof s->err, SPMD_ERR_NOMEM, "spmd_dcp_save_async: out of memory")
                     : !dir  ? spmd__fail(s->err, sizeof s->err, SPMD_ERR_INVALID, "spmd_dcp_save_async: no directory")
                             : spmd__dcp_save_check(shards, nshards, bytes, nbytes, s->err, sizeof s->err);
    if (!st) st = stage(s, shards, nshards, bytes, nbytes, s->err, sizeof s->err);
    if (st) { /* the other ranks learn it through the save's first agreement */
        s->nshards = s->nbytes = s->ncopies = 0;
        spmd__fail(err, errlen, st, "%s", s->err);
    }
    if (!deferred) {
        for (size_t i = 0; i < s->ncopies; i++) memcpy(s->copies[i].to, s->copies[i].from, s->copies[i].n);
        s->ncopies = 0;
    }
    pthread_mutex_lock(&s->mu);
    s->staged = s->ncopies == 0;
    pthread_mutex_unlock(&s->mu);
    s->mine = st;
    s->pending = 1;
    if (!s->dir) { /* not even the name could be kept: take part in the agreement from here */
        s->result = spmd__dcp_save_run(s->sub, "?", NULL, 0, NULL, 0, st, s->err, sizeof s->err);
        return st;
    }
    if (pthread_create(&s->thread, NULL, save_thread, s) != 0)
        save_thread(s); /* no thread to be had: the save runs here, still correct */
    else
        s->running = 1;
    return st;
}

spmd_status spmd_dcp_save_async(spmd_dcp_saver *s, const char *dir, const spmd_dcp_shard *shards, size_t nshards,
                                const spmd_dcp_bytes *bytes, size_t nbytes, char *err, size_t errlen) {
    return start(s, dir, shards, nshards, bytes, nbytes, 0, err, errlen);
}

spmd_status spmd_dcp_save_async_deferred(spmd_dcp_saver *s, const char *dir, const spmd_dcp_shard *shards,
                                         size_t nshards, const spmd_dcp_bytes *bytes, size_t nbytes, char *err,
                                         size_t errlen) {
    return start(s, dir, shards, nshards, bytes, nbytes, 1, err, errlen);
}

void spmd_dcp_save_staged(spmd_dcp_saver *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    while (!s->staged) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

spmd_status spmd_dcp_save_wait(spmd_dcp_saver *s, char *err, size_t errlen) {
    if (!s) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dcp_save_wait: no saver");
    join(s);
    if (!s->pending) return SPMD_OK;
    s->pending = 0;
    if (s->result) spmd__fail(err, errlen, s->result, "%s", s->err);
    return s->result;
}

void spmd_dcp_saver_free(spmd_dcp_saver *s) {
    if (!s) return;
    join(s);
    if (s->sub) spmd_group_destroy(s->sub);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->copies);
    free(s->dir);
    free(s->stage);
    free(s->shards);
    free(s->bytes);
    free(s);
}
