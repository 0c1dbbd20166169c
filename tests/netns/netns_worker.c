/* A rank of the multi-host test: joins the group from the environment
 * (MASTER_ADDR is an address inside a network namespace), checks that the
 * group spans hosts, and exchanges messages around the ring and with every
 * peer — over real veth links, not loopback.  Ranks sharing a namespace
 * share memory (backend "shm+tcp"), so all_reduce goes hierarchical: checked
 * for exact results at several sizes, by the table's choice and by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/group.h"

int main(void) {
    spmd_group *g = NULL;
    char err[512];
    if (spmd_group_init(NULL, &g, err, sizeof err)) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    int r = spmd_group_rank(g), w = spmd_group_size(g);
    int rc = 0;
    /* Ring: 1 MiB each way (rendezvous path across the link). */
    size_t n = 1 << 18;
    int32_t *out = malloc(n * sizeof *out), *in = malloc(n * sizeof *in);
    for (size_t i = 0; i < n; i++) out[i] = (int32_t)(r * 1000003 + (int)i);
    spmd_work *ws, *wr;
    if (spmd_isend(g, out, n, SPMD_I32, (r + 1) % w, 1, &ws) || spmd_irecv(g, in, n, SPMD_I32, (r - 1 + w) % w, 1, &wr)) {
        fprintf(stderr, "rank %d: post: %s\n", r, spmd_group_errmsg(g));
        return 1;
    }
    if (spmd_work_wait(wr, -1) || spmd_work_wait(ws, -1)) {
        fprintf(stderr, "rank %d: ring: %s %s\n", r, spmd_work_errmsg(wr), spmd_work_errmsg(ws));
        rc = 1;
    }
    spmd_work_free(ws);
    spmd_work_free(wr);
    int left = (r - 1 + w) % w;
    for (size_t i = 0; i < n && !rc; i++)
        if (in[i] != (int32_t)(left * 1000003 + (int)i)) { fprintf(stderr, "rank %d: bad data at %zu\n", r, i); rc = 1; }
    /* Every rank reports to rank 0 with an any-source receive. */
    int32_t me = r;
    if (r == 0) {
        int seen = 0;
        for (int k = 1; k < w; k++) {
            int32_t v; int src;
            if (spmd_recv(g, &v, 1, SPMD_I32, SPMD_ANY_SOURCE, 2, &src) || v != src) rc = 1;
            seen |= 1 << src;
        }
        if (seen != ((1 << w) - 2)) rc = 1;
        printf("rank 0: %d ranks exchanged messages\n", w);
    } else if (spmd_send(g, &me, 1, SPMD_I32, 0, 2)) {
        rc = 1;
    }
    /* two ranks per namespace: rings inside, TCP across (unless forced) */
    const char *tr = getenv("SPMD_TRANSPORT");
    int tcp_only = tr && !strcmp(tr, "tcp");
    const char *enc = getenv("SPMD_ENCRYPT"), *want;
    if (enc && !strcmp(enc, "1")) want = tcp_only ? "tcp+aes-gcm" : "shm+tcp+aes-gcm";
    else want = tcp_only ? "tcp" : "shm+tcp";
    int hosts = getenv("SPMD_TEST_NETNS") != NULL; /* run by test_netns_p2p.sh */
    if (hosts && strcmp(spmd_group_backend(g), want) != 0) {
        fprintf(stderr, "rank %d: backend %s, want %s\n", r, spmd_group_backend(g), want);
        rc = 1;
    }
    static const size_t sizes[] = {1, 7, 1000, 300001};
    static const char *algos[] = {NULL, "hier", "ring"};
    int32_t *buf = malloc(sizes[3] * sizeof *buf);
    if (!buf) rc = 1;
    for (int a = 0; a < 3 && !rc; a++)
        for (int k = 0; k < 4 && !rc && !((tcp_only || !hosts) && algos[a] && !strcmp(algos[a], "hier")); k++) {
            size_t m = sizes[k];
            for (size_t i = 0; i < m; i++) buf[i] = (int32_t)((int)i % 97 + r * 3);
            spmd_coll_opts o = {algos[a]};
            spmd_work *wk = NULL;
            if (spmd_all_reduce_async(g, buf, buf, m, SPMD_I32, SPMD_SUM, &o, &wk) || spmd_work_wait(wk, -1)) {
                fprintf(stderr, "rank %d: all_reduce %s of %zu: %s\n", r, algos[a] ? algos[a] : "(table)", m,
                        wk ? spmd_work_errmsg(wk) : spmd_group_errmsg(g));
                rc = 1;
            }
            spmd_work_free(wk);
            for (size_t i = 0; i < m && !rc; i++)
                if (buf[i] != (int32_t)(w * ((int)i % 97) + 3 * (w * (w - 1) / 2))) {
                    fprintf(stderr, "rank %d: all_reduce %s of %zu: element %zu is %d\n", r,
                            algos[a] ? algos[a] : "(table)", m, i, buf[i]);
                    rc = 1;
                }
        }
    free(buf);
    free(out);
    free(in);
    spmd_group_destroy(g);
    return rc;
}
