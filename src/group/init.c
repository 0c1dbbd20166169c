/* init.c — forming a group: who am I (options, URL or environment), where is
 * the store (hosted by rank 0 unless a launcher or the caller provides one),
 * agreement on the world size and a job id, then the mesh of connections and
 * the threads.  Also the group's failure state and destroy (its error text:
 * error.c; its accessors: accessors.c). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backend.h"
#include "envinfo.h"
#include "group_internal.h"
#include "transport/path.h"

void spmd_group_abort(spmd_group *g, const char *reason) {
    if (g) spmd__group_fail(g, SPMD_ERR_ABORTED, 1, "rank %d aborted the group: %s", g->rank, reason ? reason : "");
}

/* ---- construction ------------------------------------------------------- */

/* The mesh's copy of what it needs to know of the group (name, deadline,
 * ranks per host). */
static void mesh_mirror(spmd_group *g) {
    snprintf(g->t.name, sizeof g->t.name, "%s", g->name);
    g->t.timeout_ms = g->timeout_ms;
    g->t.local_world = g->local_world;
}

/* Agree on the world size and a job id through the (prefixed) store, claim
 * our rank, build the mesh and start the threads. */
spmd_status spmd__group_connect(spmd_group *g, const char *bind_host, char *err, size_t errlen) {
    spmd_status st;
    int64_t deadline = spmd__group_deadline(g);
    mesh_mirror(g);
    if (g->world == 1) { /* nobody to meet */
        if ((st = spmd__p2p_start(&g->t, err, errlen))) return st;
        return spmd__exec_start(g, err, errlen);
    }
    spmd_store_set_timeout(g->store, g->timeout_ms);
    char key[64], val[64];
    /* Two processes claiming one rank: the second one learns it here. */
    snprintf(key, sizeof key, "rank_claim/%d", g->rank);
    int64_t claims = 0;
    if ((st = spmd_store_add(g->store, key, 1, &claims)))
        return spmd__fail(err, errlen, st, "rank %d: store unreachable: %s", g->rank, spmd_store_errmsg(g->store));
    if (claims > 1)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "rank %d is claimed by more than one process (duplicate RANK?)", g->rank);
    snprintf(val, sizeof val, "%d", g->world);
    void *cur = NULL;
    size_t curlen = 0;
    if ((st = spmd_store_compare_set(g->store, "world_size", NULL, 0, val, strlen(val), &cur, &curlen)))
        return spmd__fail(err, errlen, st, "rank %d: store: %s", g->rank, spmd_store_errmsg(g->store));
    int agreed = curlen == strlen(val) && !memcmp(cur, val, curlen);
    if (!agreed) {
        spmd__fail(err, errlen, SPMD_ERR_MISMATCH,
                   "rank %d was started with world size %d but another rank set %.*s", g->rank, g->world,
                   (int)(curlen > 20 ? 20 : curlen), (const char *)cur);
        free(cur);
        return SPMD_ERR_MISMATCH;
    }
    free(cur);
    if (g->rank == 0) {
        uint64_t id = 0;
        if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) id = spmd__now_ns() ^ (uint64_t)getpid();
        snprintf(val, sizeof val, "%016llx", (unsigned long long)id);
        if ((st = spmd_store_set(g->store, "job_id", val, strlen(val))))
            return spmd__fail(err, errlen, st, "rank 0: store: %s", spmd_store_errmsg(g->store));
        g->t.job_id = id;
    } else {
        void *v = NULL;
        size_t vl = 0;
        if ((st = spmd_store_get(g->store, "job_id", &v, &vl)))
            return spmd__fail(err, errlen, st, "rank %d: waiting for rank 0 to publish the job id: %s", g->rank,
                              spmd_store_errmsg(g->store));
        g->t.job_id = strtoull((const char *)v, NULL, 16);
        free(v);
    }
    spmd__group_watch_rdzv(g);
    if ((st = spmd__mesh_connect(&g->t, g->store, bind_host, deadline, err, errlen))) return st;
    if ((st = spmd__p2p_start(&g->t, err, errlen))) return st;
    if ((st = spmd__exec_start(g, err, errlen))) return st;
    return SPMD_OK;
}

/* Parse "tcp://host:port" (IPv6 as [addr]:port). */
static spmd_status parse_tcp_url(const char *url, char *host, size_t hostlen, int *port, char *err,
                                 size_t errlen) {
    const char *p = url + strlen("tcp://");
    const char *colon;
    if (*p == '[') {
        const char *rb = strchr(p, ']');
        if (!rb || rb[1] != ':') return spmd__fail(err, errlen, SPMD_ERR_INVALID, "bad init_method '%s'", url);
        snprintf(host, hostlen, "%.*s", (int)(rb - p - 1), p + 1);
        colon = rb + 1;
    } else {
        colon = strrchr(p, ':');
        if (!colon) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "init_method '%s' has no port", url);
        snprintf(host, hostlen, "%.*s", (int)(colon - p), p);
    }
    char *end = NULL;
    long v = strtol(colon + 1, &end, 10);
    if (!end || (*end && *end != '?' && *end != '/') || v < 1 || v > 65535)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "init_method '%s': bad port", url);
    *port = (int)v;
    return SPMD_OK;
}

static int is_numeric_ip(const char *h) {
    unsigned char buf[16];
    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

/* file:// rendezvous: rank 0 hosts the store on a free port and writes
 * "host port" to the file (atomically); the others wait for the file. */
static spmd_status file_rendezvous(const char *path, int rank, char *host, size_t hostlen, int *port,
                                   spmd_store_server **server, int64_t deadline, char *err, size_t errlen) {
    if (rank == 0) {
        spmd_status st = spmd_store_server_start("127.0.0.1", 0, server, err, errlen);
        if (st) return st;
        *port = spmd_store_server_port(*server);
        snprintf(host, hostlen, "127.0.0.1");
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "w");
        if (!f) return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, errno, "cannot write %s", tmp);
        fprintf(f, "%s %d\n", host, *port);
        if (fclose(f) != 0 || rename(tmp, path) != 0) {
            int e = errno;
            unlink(tmp);
            return spmd__fail_errno(err, errlen, SPMD_ERR_SYSTEM, e, "cannot publish %s", path);
        }
        return SPMD_OK;
    }
    long backoff_us = 1000;
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            char line[300] = "";
            int ok = fgets(line, sizeof line, f) != NULL;
            fclose(f);
            char h[256];
            int p = 0;
            if (ok && sscanf(line, "%255s %d", h, &p) == 2 && p > 0 && p < 65536) {
                snprintf(host, hostlen, "%s", h);
                *port = p;
                return SPMD_OK;
            }
        }
        if (spmd__remaining_ms(deadline) == 0)
            return spmd__fail(err, errlen, SPMD_ERR_TIMEOUT, "rank %d: timed out waiting for rank 0 to write %s",
                              rank, path);
        struct timespec ts = {0, backoff_us * 1000};
        nanosleep(&ts, NULL); /* polling a file: there is nothing to wait on */
        if (backoff_us < 50000) backoff_us *= 2;
    }
}

spmd_status spmd_group_init(const spmd_group_opts *opts, spmd_group **out, char *err, size_t errlen) {
    static const spmd_group_opts dflt = SPMD_GROUP_OPTS_DEFAULT;
    if (!out) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_group_init: out is NULL");
    if (!opts) opts = &dflt;
    spmd__backend backend;
    spmd_status st = spmd__env_check_numeric(err, errlen);
    if (!st) st = spmd__backend_choose(opts, &backend, err, errlen);
    if (st) return st;
    spmd__wait_slice_thread(); /* the caller talks to peers: a busy host's scheduler serves it sooner */
#ifdef SPMD_HAVE_MPI
    if (backend == SPMD__BACKEND_MPI) return spmd__group_init_mpi(opts, out, err, errlen);
#endif
    spmd__envinfo env;
    if ((st = spmd__env_read(&env, err, errlen))) return st;
    int rank = opts->rank >= 0 ? opts->rank : env.rank;
    int world = opts->world_size > 0 ? opts->world_size : env.world;
    if (rank < 0 && world < 0 && !opts->init_method && !opts->store) { rank = 0; world = 1; }
    if (world < 1)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "world size unknown: set WORLD_SIZE (or run under spmdrun, mpirun or srun)");
    if (rank < 0)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "rank unknown: set RANK (or run under spmdrun, mpirun or srun)");
    if (rank >= world)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "rank %d is out of range for world size %d", rank, world);

    spmd_group *g = spmd__group_alloc(rank, world);
    if (!g) return spmd__fail(err, errlen, SPMD_ERR_NOMEM, "out of memory");
    snprintf(g->name, sizeof g->name, "%s", opts->name ? opts->name : "default");
    g->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : spmd__group_default_timeout_ms();
    g->local_rank = env.local_rank;
    g->local_world = env.local_world;
    spmd__group_bind(g->local_rank, g->local_world); /* SPMD_BIND */
    int64_t deadline = spmd__group_deadline(g);

    char host[256];
    snprintf(host, sizeof host, "%s", env.master_addr);
    int port = env.master_port;
    int host_store = !env.agent_store;
    const char *im = opts->init_method;
    if (opts->store) {
        g->store_root = opts->store;
        host_store = 0;
    } else if (im && !strncmp(im, "tcp://", 6)) {
        if ((st = parse_tcp_url(im, host, sizeof host, &port, err, errlen))) goto fail;
        host_store = 1;
    } else if (im && !strncmp(im, "file://", 7)) {
        if ((st = file_rendezvous(im + 7, rank, host, sizeof host, &port, &g->store_server, deadline, err, errlen)))
            goto fail;
        host_store = 0;
        g->store_host = 0;
    } else if (im && strcmp(im, "env://") != 0) {
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "unknown init_method '%s' (env://, tcp://host:port, file:///path)", im);
        goto fail;
    }
    if (!g->store_root && world > 1) {
        if (!host[0] || port <= 0) {
            st = spmd__fail(err, errlen, SPMD_ERR_INVALID,
                            "MASTER_ADDR and MASTER_PORT must be set for a group of %d ranks (or pass init_method)", world);
            goto fail;
        }
        if (host_store && rank == 0) {
            /* Listen on the master address itself when it is numeric, else everywhere. */
            st = spmd_store_server_start(is_numeric_ip(host) ? host : NULL, port, &g->store_server, err, errlen);
            if (st) {
                char inner[SPMD__ERRLEN];
                snprintf(inner, sizeof inner, "%s", err ? err : "");
                st = spmd__fail(err, errlen, st,
                                "rank 0 cannot host the store on %s:%d (port in use by another job, or two rank-0 processes?): %s",
                                host, port, inner);
                goto fail;
            }
        }
        char cerr[SPMD__ERRLEN];
        st = spmd_store_connect(host, port, g->timeout_ms, &g->store_root, cerr, sizeof cerr);
        if (st) {
            spmd__fail(err, errlen, st, "rank %d: cannot reach the store at %s:%d: %s", rank, host, port, cerr);
            goto fail;
        }
        g->own_store_client = 1;
    }
    if (g->store_root) {
        char prefix[160];
        snprintf(prefix, sizeof prefix, "spmd/%s/%d/%s/", env.run_id, env.restart_count, g->name);
        snprintf(g->store_prefix, sizeof g->store_prefix, "%s", prefix);
        if ((st = spmd_store_prefixed(g->store_root, prefix, &g->store))) {
            spmd__fail(err, errlen, st, "out of memory");
            goto fail;
        }
    }
    char bind_host[256] = "127.0.0.1";
    const char *override = getenv("SPMD_SOCKET_ADDR");
    if (override && *override) snprintf(bind_host, sizeof bind_host, "%s", override);
    else if (host[0]) spmd__local_addr_towards(host, bind_host, sizeof bind_host);
    snprintf(g->bind_host, sizeof g->bind_host, "%s", bind_host);
    if (host_store && world > 1) g->store_host = 0; /* rank 0 started it above */
    if ((st = spmd__group_connect(g, bind_host, err, errlen))) goto fail;
    if ((st = spmd__group_standby_start(g, err, errlen))) goto fail;
    if (!host_store && !opts->store && g->store_host < 0) spmd__group_launcher_standby(g); /* a launcher's store */
    *out = g;
    return SPMD_OK;
fail:
    spmd__exec_stop(g);
    spmd__p2p_stop(&g->t);
    spmd__group_free(g);
    return st;
}

void spmd_group_destroy(spmd_group *g) {
    if (!g) return;
    spmd__exec_stop(g);
    spmd__p2p_stop(&g->t);
    spmd__group_free(g);
}
