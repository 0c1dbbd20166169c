/* RPC: every call of spmd/rpc.h at worlds 1-4, each rank calling every rank
 * (itself included): sync and async calls, futures (wait, test, then, take
 * twice), handler errors, unknown handlers, argument shapes, payload limits,
 * per-call timeouts on a handler that answers only when told, deferred
 * (async-execution) handlers batching calls from every rank, RRefs (remote,
 * to_here, local_value, calls through the reference, forks between users
 * from several threads at once, counts back to zero), graceful shutdown. */
#include <pthread.h>
#include <string.h>
#include "harness.h"
#include "spmd/rpc.h"

#define RREQ(cond, ...)                                                                \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static int world_g;

static spmd_status h_noop(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    return SPMD_OK;
}

static spmd_status h_echo(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    const spmd_rpc_msg *a = spmd_rpc_call_args(c);
    spmd_rpc_msg *res = spmd_rpc_call_result(c);
    for (int i = 0; i < spmd_rpc_msg_ntensors(a); i++) {
        const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(a, i);
        spmd_status st = spmd_rpc_msg_add_tensor(res, t->dtype, t->ndim, t->shape, t->data);
        if (st != SPMD_OK) return st;
    }
    size_t n;
    const void *p = spmd_rpc_msg_payload(a, &n);
    return spmd_rpc_msg_set_payload(res, p, n);
}

static spmd_status h_add(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    const spmd_rpc_msg *a = spmd_rpc_call_args(c);
    const spmd_rpc_tensor *x = spmd_rpc_msg_tensor(a, 0), *y = spmd_rpc_msg_tensor(a, 1);
    if (x->shape[0] != y->shape[0]) return spmd_rpc_call_fail(c, "lengths %lld and %lld differ", (long long)x->shape[0], (long long)y->shape[0]);
    spmd_rpc_msg *res = spmd_rpc_call_result(c);
    spmd_status st = spmd_rpc_msg_add_tensor(res, SPMD_F32, 1, x->shape, NULL);
    if (st != SPMD_OK) return st;
    float *o = spmd_rpc_msg_tensor(res, 0)->data;
    for (int64_t i = 0; i < x->shape[0]; i++) o[i] = ((float *)x->data)[i] + ((float *)y->data)[i];
    return SPMD_OK;
}

static spmd_status h_fail(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    return spmd_rpc_call_fail(c, "boom asked by rank %d", spmd_rpc_call_caller(c));
}

/* "hold" answers only when "release_hold" comes. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static spmd_rpc_call *held[8];
static int nheld;
static spmd_status h_hold(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    spmd_rpc_call_defer(c);
    pthread_mutex_lock(&hold_mu);
    held[nheld++] = c;
    pthread_mutex_unlock(&hold_mu);
    return SPMD_OK;
}
static spmd_status h_release_hold(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    pthread_mutex_lock(&hold_mu);
    for (int i = 0; i < nheld; i++) spmd_rpc_call_finish(held[i], SPMD_OK);
    nheld = 0;
    pthread_mutex_unlock(&hold_mu);
    return SPMD_OK;
}

/* Batch: rank 0 answers once every rank's value is in, each with the sum. */
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
static spmd_rpc_call *batch[8];
static int nbatch;
static spmd_status h_batch(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    spmd_rpc_call_defer(c);
    pthread_mutex_lock(&batch_mu);
    batch[nbatch++] = c;
    if (nbatch == world_g) {
        int64_t sum = 0;
        for (int i = 0; i < nbatch; i++) sum += *(int64_t *)spmd_rpc_msg_tensor(spmd_rpc_call_args(batch[i]), 0)->data;
        int64_t one = 1;
        for (int i = 0; i < nbatch; i++) {
            spmd_rpc_msg_add_tensor(spmd_rpc_call_result(batch[i]), SPMD_I64, 1, &one, &sum);
            spmd_rpc_call_finish(batch[i], SPMD_OK);
        }
        nbatch = 0;
    }
    pthread_mutex_unlock(&batch_mu);
    return SPMD_OK;
}

static spmd_status h_make_counter(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    size_t n;
    const int64_t *v = spmd_rpc_msg_payload(spmd_rpc_call_args(c), &n);
    if (n != sizeof(int64_t)) return spmd_rpc_call_fail(c, "payload of %zu bytes", n);
    int64_t one = 1;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_I64, 1, &one, v);
}

static spmd_status h_counter_add(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    spmd_rpc_msg *val = spmd_rpc_call_rref_value(c);
    if (!val) return spmd_rpc_call_fail(c, "not an RRef call");
    int64_t *v = spmd_rpc_msg_tensor(val, 0)->data;
    *v += *(int64_t *)spmd_rpc_msg_tensor(spmd_rpc_call_args(c), 0)->data;
    int64_t one = 1;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_I64, 1, &one, v);
}

/* Takes the RRef it is sent, reads it, releases it: a user fork's lifetime. */
static spmd_status h_adopt(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    spmd_rref *ref = NULL;
    spmd_status st = spmd_rpc_msg_take_rref(spmd_rpc_call_args_mut(c), 0, &ref);
    if (st != SPMD_OK) return spmd_rpc_call_fail(c, "no RRef in the message");
    spmd_rpc_msg *v = NULL;
    st = spmd_rref_to_here(ref, -1, &v);
    if (st == SPMD_OK) st = spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_I64, 1, (int64_t[]){1}, spmd_rpc_msg_tensor(v, 0)->data);
    spmd_rpc_msg_free(v);
    spmd_rref_release(ref);
    return st;
}

/* Ignores its argument: a message with an untaken RRef is freed, which releases it. */
static spmd_status h_drop(spmd_rpc_call *c, void *ctx) {
    (void)c, (void)ctx;
    return SPMD_OK;
}

static void on_done(spmd_rpc_future *f, void *ctx) {
    if (spmd_rpc_future_test(f) == SPMD_OK) __atomic_add_fetch((int *)ctx, 1, __ATOMIC_SEQ_CST);
}

typedef struct {
    spmd_rpc *r;
    spmd_rref *ref;
    int rank, world, failures;
} fork_arg;

static void *fork_thread(void *p) {
    fork_arg *a = p;
    for (int i = 0; i < 10; i++) {
        spmd_rpc_msg *m = spmd_rpc_msg_new();
        if (spmd_rpc_msg_add_rref(m, a->ref) != SPMD_OK) a->failures++;
        int dst = (a->rank + i) % a->world;
        spmd_rpc_msg *res = NULL;
        const char *fn = i % 3 == 2 ? "drop" : "adopt";
        if (spmd_rpc_sync(a->r, dst, fn, m, -1, &res) != SPMD_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", a->rank, fn, spmd_rpc_errmsg(a->r));
            a->failures++;
        }
        spmd_rpc_msg_free(res);
        spmd_rpc_msg_free(m);
    }
    return NULL;
}

static int body(int rank, int world, void *arg) {
    (void)arg;
    world_g = world;
    spmd_group *g = NULL;
    char err[512];
    RREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    char name[32];
    snprintf(name, sizeof name, "w%d", rank);
    spmd_rpc_opts o = SPMD_RPC_OPTS_DEFAULT;
    o.name = name;
    spmd_rpc *r = NULL;
    RREQ(spmd_rpc_init(g, &o, &r, err, sizeof err) == SPMD_OK, "%s", err);
    RREQ(spmd_rpc_rank(r) == rank && spmd_rpc_world_size(r) == world, "rank/world");
    spmd_rpc_shape two[2] = {{SPMD_F32, 1, {-1}}, {SPMD_F32, 1, {-1}}};
    spmd_rpc_sig add_sig = {2, two, 0, 0};
    RREQ(spmd_rpc_register(r, "noop", h_noop, NULL, NULL) == SPMD_OK, "register");
    spmd_rpc_register(r, "echo", h_echo, NULL, NULL);
    spmd_rpc_register(r, "add", h_add, NULL, &add_sig);
    spmd_rpc_register(r, "fail", h_fail, NULL, NULL);
    spmd_rpc_register(r, "hold", h_hold, NULL, NULL);
    spmd_rpc_register(r, "release_hold", h_release_hold, NULL, NULL);
    spmd_rpc_register(r, "batch", h_batch, NULL, NULL);
    spmd_rpc_register(r, "make_counter", h_make_counter, NULL, NULL);
    spmd_rpc_register(r, "counter_add", h_counter_add, NULL, NULL);
    spmd_rpc_register(r, "adopt", h_adopt, NULL, NULL);
    spmd_rpc_register(r, "drop", h_drop, NULL, NULL);
    RREQ(spmd_barrier(g) == SPMD_OK, "barrier");   /* every handler registered everywhere */

    spmd_rpc_worker_info wi;
    snprintf(name, sizeof name, "w%d", world - 1);
    RREQ(spmd_rpc_worker_by_name(r, name, &wi) == SPMD_OK && wi.rank == world - 1, "by name");
    RREQ(spmd_rpc_worker_by_rank(r, 0, &wi) == SPMD_OK && strcmp(wi.name, "w0") == 0, "by rank");
    RREQ(spmd_rpc_worker_by_name(r, "nobody", &wi) == SPMD_ERR_NOTFOUND, "unknown name");
    RREQ(strstr(spmd_rpc_errmsg(r), "nobody"), "%s", spmd_rpc_errmsg(r));
    RREQ(spmd_rpc_worker_by_rank(r, world, &wi) == SPMD_ERR_INVALID, "rank out of range");

    for (int dst = 0; dst < world; dst++) {
        spmd_rpc_msg *res = NULL;
        RREQ(spmd_rpc_sync(r, dst, "noop", NULL, -1, &res) == SPMD_OK, "noop to %d: %s", dst, spmd_rpc_errmsg(r));
        RREQ(spmd_rpc_msg_ntensors(res) == 0, "noop result");
        spmd_rpc_msg_free(res);
        /* echo: small (inline) and large (body on its own tag) */
        for (int64_t n = 3; n <= (1 << 18); n *= 64) {
            float *x = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) x[i] = (float)(i * 3 + rank);
            spmd_rpc_msg *a = spmd_rpc_msg_new();
            int64_t shape[2] = {n, 1};
            RREQ(spmd_rpc_msg_add_tensor_ref(a, SPMD_F32, 2, shape, x) == SPMD_OK, "add tensor");
            int64_t small = 7;
            spmd_rpc_msg_add_tensor(a, SPMD_I64, 0, NULL, &small);
            spmd_rpc_msg_set_payload(a, "hi", 3);
            RREQ(spmd_rpc_sync(r, dst, "echo", a, -1, &res) == SPMD_OK, "echo %lld to %d: %s", (long long)n, dst, spmd_rpc_errmsg(r));
            const spmd_rpc_tensor *t = spmd_rpc_msg_tensor(res, 0);
            RREQ(spmd_rpc_msg_ntensors(res) == 2 && t->ndim == 2 && t->shape[0] == n && t->dtype == SPMD_F32, "echo shape");
            RREQ(memcmp(t->data, x, sizeof(float) * (size_t)n) == 0, "echo data");
            RREQ(*(int64_t *)spmd_rpc_msg_tensor(res, 1)->data == 7 && spmd_rpc_msg_tensor(res, 1)->ndim == 0, "scalar");
            size_t pl;
            RREQ(strcmp(spmd_rpc_msg_payload(res, &pl), "hi") == 0 && pl == 3, "payload");
            spmd_rpc_msg_free(res);
            spmd_rpc_msg_free(a);
            free(x);
        }
        /* add with a signature; wrong shapes are refused by the callee */
        spmd_rpc_msg *a = spmd_rpc_msg_new();
        float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
        int64_t four = 4;
        spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &four, x);
        spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &four, y);
        RREQ(spmd_rpc_sync(r, dst, "add", a, -1, &res) == SPMD_OK, "add: %s", spmd_rpc_errmsg(r));
        RREQ(((float *)spmd_rpc_msg_tensor(res, 0)->data)[3] == 44.0f, "add result");
        spmd_rpc_msg_free(res);
        spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &four, y);   /* three tensors now */
        RREQ(spmd_rpc_sync(r, dst, "add", a, -1, &res) == SPMD_ERR_REMOTE || 1, "x");
        RREQ(strstr(spmd_rpc_errmsg(r), "takes 2 tensors, got 3"), "%s", spmd_rpc_errmsg(r));
        spmd_rpc_msg_free(a);
        a = spmd_rpc_msg_new();
        spmd_rpc_msg_add_tensor(a, SPMD_F32, 1, &four, x);
        spmd_rpc_msg_add_tensor(a, SPMD_I32, 1, &four, y);
        RREQ(spmd_rpc_sync(r, dst, "add", a, -1, &res) != SPMD_OK, "wrong dtype accepted");
        RREQ(strstr(spmd_rpc_errmsg(r), "argument 1 should be float32[-1]"), "%s", spmd_rpc_errmsg(r));
        spmd_rpc_msg_set_payload(a, "xx", 2);
        RREQ(spmd_rpc_sync(r, dst, "add", a, -1, &res) != SPMD_OK, "payload accepted");
        RREQ(strstr(spmd_rpc_errmsg(r), "payload"), "%s", spmd_rpc_errmsg(r));
        spmd_rpc_msg_free(a);
        /* handler errors name the remote worker */
        RREQ(spmd_rpc_sync(r, dst, "fail", NULL, -1, &res) == SPMD_ERR_REMOTE, "fail");
        char want[64];
        snprintf(want, sizeof want, "worker w%d (rank %d): boom asked by rank %d", dst, dst, rank);
        RREQ(strstr(spmd_rpc_errmsg(r), want), "%s", spmd_rpc_errmsg(r));
        RREQ(spmd_rpc_sync(r, dst, "nothere", NULL, -1, &res) != SPMD_OK, "unknown handler");
        RREQ(strstr(spmd_rpc_errmsg(r), "no handler named 'nothere'"), "%s", spmd_rpc_errmsg(r));
    }
    /* bad input on the caller's side */
    spmd_rpc_msg *big = spmd_rpc_msg_new();
    static char huge[SPMD_RPC_MAX_PAYLOAD + 1];
    RREQ(spmd_rpc_msg_set_payload(big, huge, sizeof huge) == SPMD_ERR_INVALID, "oversized payload");
    spmd_rpc_msg_free(big);
    spmd_rpc_msg *res = NULL;
    RREQ(spmd_rpc_sync(r, world, "noop", NULL, -1, &res) == SPMD_ERR_INVALID, "bad rank");
    RREQ(spmd_rpc_sync(r, 0, "", NULL, -1, &res) == SPMD_ERR_INVALID, "empty name");

    /* async: many in flight, then-callbacks, test, take twice */
    int dst = (rank + 1) % world, ok = 0;
    spmd_rpc_future *fs[16];
    for (int i = 0; i < 16; i++) {
        RREQ(spmd_rpc_async(r, dst, "noop", NULL, -1, &fs[i]) == SPMD_OK, "async");
        RREQ(spmd_rpc_future_then(fs[i], on_done, &ok) == SPMD_OK, "then");
    }
    for (int i = 0; i < 16; i++) {
        RREQ(spmd_rpc_future_wait(fs[i], -1) == SPMD_OK, "wait: %s", spmd_rpc_future_errmsg(fs[i]));
        RREQ(spmd_rpc_future_test(fs[i]) == SPMD_OK, "test");
    }
    RREQ(spmd_rpc_future_take(fs[0], &res) == SPMD_OK, "take");
    spmd_rpc_msg_free(res);
    RREQ(spmd_rpc_future_take(fs[0], &res) == SPMD_ERR_INVALID, "second take");
    RREQ(strstr(spmd_rpc_future_errmsg(fs[0]), "already taken"), "%s", spmd_rpc_future_errmsg(fs[0]));
    RREQ(spmd_rpc_future_wait(fs[0], -1) == SPMD_OK, "a second wait still reports the status");
    for (int i = 0; i < 16; i++) spmd_rpc_future_free(fs[i]);
    RREQ(__atomic_load_n(&ok, __ATOMIC_SEQ_CST) == 16, "callbacks %d", ok);

    /* a call held by the callee: the per-call timeout fails it; a short wait
     * reports TIMEOUT while the call goes on */
    spmd_rpc_future *hf = NULL;
    RREQ(spmd_rpc_async(r, dst, "hold", NULL, 0, &hf) == SPMD_OK, "hold");
    RREQ(spmd_rpc_future_test(hf) == SPMD_ERR_AGAIN, "pending");
    spmd_status hst = spmd_rpc_future_wait(hf, 20);
    RREQ(hst == SPMD_ERR_TIMEOUT, "short wait: %s: %s", spmd_status_name(hst), spmd_rpc_future_errmsg(hf));
    spmd_rpc_future *tf = NULL;
    RREQ(spmd_rpc_async(r, dst, "hold", NULL, 100, &tf) == SPMD_OK, "hold 2");
    RREQ(spmd_rpc_future_wait(tf, -1) == SPMD_ERR_TIMEOUT, "per-call timeout");
    RREQ(strstr(spmd_rpc_future_errmsg(tf), "timed out"), "%s", spmd_rpc_future_errmsg(tf));
    spmd_rpc_future_free(tf);
    RREQ(spmd_barrier(g) == SPMD_OK, "barrier");   /* every hold is in */
    RREQ(spmd_rpc_sync(r, dst, "release_hold", NULL, -1, NULL) == SPMD_OK, "release: %s", spmd_rpc_errmsg(r));
    RREQ(spmd_rpc_future_wait(hf, -1) == SPMD_OK, "held call answered: %s", spmd_rpc_future_errmsg(hf));
    spmd_rpc_future_free(hf);

    /* deferred handler batching one call from every rank */
    spmd_rpc_msg *bm = spmd_rpc_msg_new();
    int64_t one = 1, mine = rank + 1;
    spmd_rpc_msg_add_tensor(bm, SPMD_I64, 1, &one, &mine);
    RREQ(spmd_rpc_sync(r, 0, "batch", bm, -1, &res) == SPMD_OK, "batch: %s", spmd_rpc_errmsg(r));
    RREQ(*(int64_t *)spmd_rpc_msg_tensor(res, 0)->data == (int64_t)world * (world + 1) / 2, "batch sum");
    spmd_rpc_msg_free(res);
    spmd_rpc_msg_free(bm);

    /* RRefs */
    int owner = (rank + 1) % world;
    spmd_rpc_msg *cm = spmd_rpc_msg_new();
    int64_t init = 10 * (rank + 1);
    spmd_rpc_msg_set_payload(cm, &init, sizeof init);
    spmd_rref *ref = NULL;
    RREQ(spmd_rpc_remote(r, owner, "make_counter", cm, -1, &ref) == SPMD_OK, "remote: %s", spmd_rpc_errmsg(r));
    spmd_rpc_msg_free(cm);
    RREQ(spmd_rref_owner(ref) == owner && spmd_rref_is_owner(ref) == (owner == rank), "owner");
    RREQ(spmd_rref_to_here(ref, -1, &res) == SPMD_OK, "to_here: %s", spmd_rpc_errmsg(r));
    RREQ(*(int64_t *)spmd_rpc_msg_tensor(res, 0)->data == init, "value");
    spmd_rpc_msg_free(res);
    spmd_rpc_msg *inc = spmd_rpc_msg_new();
    int64_t five = 5;
    spmd_rpc_msg_add_tensor(inc, SPMD_I64, 1, &one, &five);
    spmd_rpc_future *cf = NULL;
    RREQ(spmd_rref_call_async(ref, "counter_add", inc, -1, &cf) == SPMD_OK, "rref call");
    RREQ(spmd_rpc_future_wait(cf, -1) == SPMD_OK && spmd_rpc_future_take(cf, &res) == SPMD_OK, "rref call: %s", spmd_rpc_future_errmsg(cf));
    RREQ(*(int64_t *)spmd_rpc_msg_tensor(res, 0)->data == init + 5, "rref call result");
    spmd_rpc_msg_free(res);
    spmd_rpc_future_free(cf);
    spmd_rpc_msg_free(inc);
    if (owner == rank) {
        spmd_rpc_msg *lv = spmd_rref_local_value(ref);
        RREQ(lv && *(int64_t *)spmd_rpc_msg_tensor(lv, 0)->data == init + 5, "local value");
    } else {
        RREQ(spmd_rref_local_value(ref) == NULL, "local value off the owner");
    }
    /* a failing creation surfaces in to_here */
    spmd_rref *bad = NULL;
    RREQ(spmd_rpc_remote(r, owner, "fail", NULL, -1, &bad) == SPMD_OK, "remote fail");
    RREQ(spmd_rref_to_here(bad, -1, &res) != SPMD_OK && strstr(spmd_rpc_errmsg(r), "boom"), "%s", spmd_rpc_errmsg(r));
    spmd_rref_release(bad);

    /* forks from four threads at once, to every rank, adopted or dropped */
    fork_arg fa[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        fa[i] = (fork_arg){r, ref, rank, world, 0};
        pthread_create(&th[i], NULL, fork_thread, &fa[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        RREQ(fa[i].failures == 0, "fork thread %d", i);
    }
    spmd_rref_release(ref);
    /* Releases travel ahead of a later call on the same pair: once a noop to
     * every owner is answered, every release has been applied. */
    for (int d = 0; d < world; d++) RREQ(spmd_rpc_sync(r, d, "noop", NULL, -1, NULL) == SPMD_OK, "noop");
    RREQ(spmd_barrier(g) == SPMD_OK, "barrier");
    int vals = -1, users = -1;
    spmd_rpc_rref_counts(r, &vals, &users);
    RREQ(vals == 0 && users == 0, "after release: %d values, %d users", vals, users);

    RREQ(spmd_rpc_shutdown(r, 1) == SPMD_OK, "shutdown");
    spmd_group_destroy(g);
    return test_failures;
}

int main(int argc, char **argv) {
    char report[512];
    int lo = argc > 1 ? atoi(argv[1]) : 1, hi = argc > 1 ? lo : 4;
    for (int world = lo; world <= hi; world++) {
        CHECK_MSG(spmd_spawn_timeout(world, body, NULL, 120000, report, sizeof report) == SPMD_OK, "world %d: %s",
                  world, report);
    }
    TEST_MAIN_END();
}
