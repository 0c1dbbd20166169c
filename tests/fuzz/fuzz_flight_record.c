/* fuzz_flight_record.c — libFuzzer harness for the flight-record parser
 * (src/group/flight_text.c), which spmdrun runs on files the job's workers
 * wrote, and for the diagnosis built from what it accepts.
 *
 * Besides "no crash, no out-of-bounds read", it abort()s on a violated
 * property: an accepted record has its rank inside its world, at most the
 * bounded number of ops, NUL-terminated names; formatting it and parsing the
 * text again gives the same record, and the same text once more; the
 * diagnosis of it (alone, and next to a copy of itself claiming another
 * rank) is NUL-terminated within its buffer.
 *
 * Built as a libFuzzer binary with -DSPMD_FUZZ=ON under clang
 * (tests/fuzz.cmake), and in every build as fuzz_flight_record_replay with
 * the shared replay main (tests/fuzz/replay_main_data.c), whose seeds are
 * valid records from fuzz_seed_input below. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "group/flight_record.h"

#include "fuzz/fuzz_prop.h"

static int same_record(const spmd__flight_record *a, const spmd__flight_record *b) {
    if (strcmp(a->group, b->group) || a->rank != b->rank || a->world != b->world || a->pid != b->pid ||
        strcmp(a->host, b->host) || strcmp(a->reason, b->reason) || a->request != b->request ||
        a->issued != b->issued || a->status != b->status || a->culprit != b->culprit || a->nops != b->nops)
        return 0;
    for (int i = 0; i < a->nops; i++) {
        const spmd__flight_op *x = &a->ops[i], *y = &b->ops[i];
        if (x->cls != y->cls || x->seq != y->seq || strcmp(x->kind, y->kind) || x->state != y->state ||
            x->count != y->count || strcmp(x->dtype, y->dtype) || strcmp(x->op, y->op) || x->peer != y->peer ||
            x->tag != y->tag || x->status != y->status)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    spmd__flight_record r;
    char err[256];
    if (spmd__flight_parse((const char *)data, size, &r, err, sizeof err) != SPMD_OK) {
        REQUIRE_PROP(err[0] != 0 && r.ops == NULL);
        return 0;
    }
    REQUIRE_PROP(r.world >= 1 && r.rank >= 0 && r.rank < r.world);
    REQUIRE_PROP(r.nops >= 0 && r.nops <= SPMD__FLIGHT_MAX_OPS);
    REQUIRE_PROP(memchr(r.group, 0, sizeof r.group) && memchr(r.host, 0, sizeof r.host) &&
                 memchr(r.error, 0, sizeof r.error));
    /* to text and back: the same record, and the same text again */
    size_t len = 0, len2 = 0;
    char *text = spmd__flight_format(&r, &len);
    REQUIRE_PROP(text != NULL && strlen(text) == len);
    spmd__flight_record again;
    REQUIRE_PROP(spmd__flight_parse(text, len, &again, err, sizeof err) == SPMD_OK);
    REQUIRE_PROP(same_record(&r, &again));
    char *text2 = spmd__flight_format(&again, &len2);
    REQUIRE_PROP(text2 != NULL && len2 == len && !memcmp(text, text2, len));
    /* the diagnosis of it, and of it next to a copy claiming another rank */
    static char out[8192];
    size_t n = spmd__flight_diagnose(&r, 1, out, sizeof out);
    REQUIRE_PROP(n < sizeof out && out[n] == 0);
    spmd__flight_record two[2] = {r, again};
    two[1].rank = (r.rank + 1) % r.world;
    n = spmd__flight_diagnose(two, 2, out, sizeof out);
    REQUIRE_PROP(n < sizeof out && out[n] == 0);
    n = spmd__flight_diagnose(two, 2, out, 40); /* a short buffer truncates */
    REQUIRE_PROP(n < 40 && out[n] == 0);
    free(text);
    free(text2);
    spmd__flight_free(&again);
    spmd__flight_free(&r);
    return 0;
}

/* Valid records: a few ranks' views of a job stuck in a collective. */
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap) {
    static const char *const kinds[] = {"all_reduce", "broadcast", "barrier", "all_gather", "send", "recv"};
    spmd__flight_op ops[6];
    spmd__flight_record r;
    memset(&r, 0, sizeof r);
    memset(ops, 0, sizeof ops);
    snprintf(r.group, sizeof r.group, i % 4 ? "default" : "default.sub1");
    r.world = 1 + (int)(i % 8);
    r.rank = (int)(i / 8) % r.world;
    r.pid = 1000 + (long)i;
    snprintf(r.host, sizeof r.host, "node%u", i % 3);
    r.time = 1712345678.5 + i;
    snprintf(r.reason, sizeof r.reason, i % 2 ? "failure" : "request");
    r.request = i % 5;
    r.status = i % 2 ? -3 : 0;
    r.culprit = i % 2 ? (int)(i % (unsigned)r.world) : -1;
    snprintf(r.error, sizeof r.error, i % 2 ? "rank 1 has sent no heartbeat for 5.0 s" : "");
    r.nops = (int)(i % 7);
    r.issued = 450 + i % 3;
    r.ops = ops;
    for (int k = 0; k < r.nops && k < 6; k++) {
        spmd__flight_op *o = &ops[k];
        int p2p = k >= 4;
        o->cls = p2p ? 'p' : 'c';
        o->seq = p2p ? (uint64_t)k : 447 + (uint64_t)k;
        snprintf(o->kind, sizeof o->kind, "%s", kinds[(i + (unsigned)k) % 6]);
        o->state = 1 + (int)((i + (unsigned)k) % 4);
        o->count = (uint64_t)k * 1000;
        snprintf(o->dtype, sizeof o->dtype, k % 2 ? "float32" : "-");
        snprintf(o->op, sizeof o->op, k % 2 ? "sum" : "-");
        o->peer = k % 3 - 1;
        o->tag = p2p ? 7 : -1;
        o->t_issue = r.time - 10 + k;
        o->t_start = o->state >= 2 ? o->t_issue + 0.5 : 0;
        o->t_end = o->state >= 3 ? o->t_start + 0.25 : 0;
    }
    size_t len = 0;
    char *text = spmd__flight_format(&r, &len);
    if (!text || len > cap) {
        free(text);
        return 0;
    }
    memcpy(buf, text, len);
    free(text);
    return len;
}
