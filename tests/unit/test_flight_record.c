/* The flight record's text format (round trip, refusals) and the diagnosis
 * spmdrun prints from several ranks' records (src/group/flight_*.c). */
#include <stdint.h>
#include "harness.h"
#include "group/flight_record.h"

#define NOW 1712345678.0

static spmd__flight_op op(char cls, uint64_t seq, const char *kind, int state, double t_start, double t_end) {
    spmd__flight_op o;
    memset(&o, 0, sizeof o);
    o.cls = cls;
    o.seq = seq;
    snprintf(o.kind, sizeof o.kind, "%s", kind);
    o.state = state;
    o.count = 1;
    snprintf(o.dtype, sizeof o.dtype, "float32");
    snprintf(o.op, sizeof o.op, cls == 'c' ? "sum" : "-");
    o.peer = -1;
    o.tag = -1;
    o.t_issue = t_start;
    o.t_start = t_start;
    o.t_end = t_end;
    return o;
}

static spmd__flight_record rec(const char *group, int rank, int world, uint64_t issued, spmd__flight_op *ops,
                               int nops) {
    spmd__flight_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.group, sizeof r.group, "%s", group);
    r.rank = rank;
    r.world = world;
    r.pid = 100 + rank;
    snprintf(r.host, sizeof r.host, "node0");
    r.time = NOW;
    snprintf(r.reason, sizeof r.reason, "failure");
    r.issued = issued;
    r.culprit = -1;
    r.ops = ops;
    r.nops = nops;
    return r;
}

static void round_trip(void) {
    spmd__flight_op ops[2] = {op('c', 456, "all_reduce", SPMD__FLIGHT_RUNNING, NOW - 1.5, 0),
                              op('p', 3, "recv", SPMD__FLIGHT_DONE, NOW - 2.25, NOW - 2.0)};
    ops[1].peer = 2;
    ops[1].tag = 99;
    ops[1].count = 4096;
    spmd__flight_record r = rec("default", 1, 4, 456, ops, 2);
    r.status = SPMD_ERR_REMOTE;
    r.culprit = 2;
    r.request = 7;
    snprintf(r.error, sizeof r.error, "rank 2 has sent no heartbeat\tfor 5.0 s\n(tab and newline become spaces)");
    size_t len = 0;
    char *text = spmd__flight_format(&r, &len);
    if (!text) {
        CHECK(text != NULL);
        return;
    }
    spmd__flight_record b;
    char err[256];
    CHECK_MSG(spmd__flight_parse(text, len, &b, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK(!strcmp(b.group, "default") && b.rank == 1 && b.world == 4 && b.pid == 101 && !strcmp(b.host, "node0"));
    CHECK(b.time == NOW && !strcmp(b.reason, "failure") && b.request == 7 && b.issued == 456);
    CHECK(b.status == SPMD_ERR_REMOTE && b.culprit == 2);
    CHECK(!strcmp(b.error, "rank 2 has sent no heartbeat for 5.0 s (tab and newline become spaces)"));
    CHECK(b.nops == 2);
    if (b.nops == 2) {
        CHECK(b.ops[0].cls == 'c' && b.ops[0].seq == 456 && !strcmp(b.ops[0].kind, "all_reduce") &&
              b.ops[0].state == SPMD__FLIGHT_RUNNING && b.ops[0].t_start == NOW - 1.5 && b.ops[0].t_end == 0);
        CHECK(b.ops[1].cls == 'p' && b.ops[1].peer == 2 && b.ops[1].tag == 99 && b.ops[1].count == 4096 &&
              !strcmp(b.ops[1].op, "-") && b.ops[1].state == SPMD__FLIGHT_DONE);
    }
    spmd__flight_free(&b);
    /* cut anywhere before the "end" line: refused, never half a record */
    for (size_t cut = 0; cut + 4 < len; cut += 7) {
        CHECK_MSG(spmd__flight_parse(text, cut, &b, err, sizeof err) != SPMD_OK, "accepted a record cut at %zu", cut);
        CHECK(b.ops == NULL && err[0]);
    }
    free(text);
}

static void refusals(void) {
    static const char *const bad[] = {
        "",
        "hello\n",
        "spmd-flight-record 1\ngroup g\nrank 4 4\nend\n",            /* rank outside its world */
        "spmd-flight-record 1\ngroup g\nrank 0 0\nend\n",            /* empty world */
        "spmd-flight-record 1\nrank 0 2\nend\n",                     /* no group */
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop x 1 a done 1 - - -1 -1 0 0 0 0\nend\n", /* bad class */
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop c 1 a done 1 - - -1 -1 0 0 0\nend\n",   /* field missing */
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop c 1 a sleeping 1 - - -1 -1 0 0 0 0\nend\n",
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop c -1 a done 1 - - -1 -1 0 0 0 0\nend\n",
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop c 1 a done 1 - - -1 -1 1e300 0 0 0\nend\n",
        "spmd-flight-record 1\ngroup g\nrank 0 2\nop c 1 a done 1 - - -1 -1 nan 0 0 0\nend\n",
        "spmd-flight-record 1\ngroup g\nrank 0 2\npid -5\nend\n",
        "spmd-flight-record 1\ngroup g h\nrank 0 2\nend\n",
        "spmd-flight-record 1\ngroup g\nrank 0 2\n", /* no end */
    };
    spmd__flight_record r;
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_MSG(spmd__flight_parse(bad[i], strlen(bad[i]), &r, err, sizeof err) != SPMD_OK, "accepted #%zu", i);
        CHECK(err[0] != 0);
    }
    /* a NUL byte inside a line */
    const char nul[] = "spmd-flight-record 1\ngroup g\0x\nrank 0 2\nend\n";
    CHECK(spmd__flight_parse(nul, sizeof nul - 1, &r, err, sizeof err) != SPMD_OK);
    /* an unknown keyword of a later version is skipped */
    const char later[] = "spmd-flight-record 2\ngroup g\nrank 1 2\nflavour mint\nend\ntrailing junk";
    CHECK_MSG(spmd__flight_parse(later, sizeof later - 1, &r, err, sizeof err) == SPMD_OK, "%s", err);
    spmd__flight_free(&r);
}

static void check_diag(const spmd__flight_record *recs, int n, const char *want) {
    char out[2048];
    spmd__flight_diagnose(recs, n, out, sizeof out);
    CHECK_MSG(!strcmp(out, want), "\n got: %s\nwant: %s", out, want);
}

/* The issue's example: rank 5 of 8 never entered all_reduce #456. */
static void diagnosis(void) {
    spmd__flight_op waiting[8][2], late[2];
    spmd__flight_record recs[8];
    for (int r = 0; r < 8; r++) {
        waiting[r][0] = op('c', 455, "broadcast", SPMD__FLIGHT_DONE, NOW - 20, NOW - 12.5);
        waiting[r][1] = op('c', 456, "all_reduce", SPMD__FLIGHT_RUNNING, NOW - 12.3 - 0.01 * r, 0);
        recs[r] = rec("default", r, 8, 456, waiting[r], 2);
    }
    late[0] = op('c', 454, "barrier", SPMD__FLIGHT_DONE, NOW - 30, NOW - 29);
    late[1] = op('c', 455, "broadcast", SPMD__FLIGHT_DONE, NOW - 20, NOW - 12.3);
    recs[5] = rec("default", 5, 8, 455, late, 2);
    check_diag(recs, 8,
               "group default (8 ranks): rank 5 never entered all_reduce #456 (its last op: broadcast #455, completed "
               "12.3 s ago); ranks 0-4, 6-7 waiting in all_reduce #456 (for 12.4 s)\n");
    /* rank 5 waits in a receive meanwhile; rank 7 left no record */
    spmd__flight_op late2[3] = {late[0], late[1], op('p', 9, "recv", SPMD__FLIGHT_RUNNING, NOW - 3, 0)};
    late2[2].peer = 0;
    late2[2].tag = 99;
    recs[5] = rec("default", 5, 8, 455, late2, 3);
    check_diag(recs, 7,
               "group default (8 ranks): rank 5 never entered all_reduce #456 (its last op: broadcast #455, completed "
               "12.3 s ago; in recv from rank 0 (tag 99) for 3.0 s); ranks 0-4, 6 waiting in all_reduce #456 "
               "(for 12.4 s); no record from rank 7 (stopped, dead, or not in this group yet)\n");
    /* a failed group: the first failure in the words of the rank that saw it */
    recs[0].status = recs[1].status = SPMD_ERR_REMOTE;
    snprintf(recs[0].error, sizeof recs[0].error, "rank 1 reported: rank 7 has sent no heartbeat for 5.1 s");
    snprintf(recs[1].error, sizeof recs[1].error, "rank 7 has sent no heartbeat for 5.1 s");
    char out[2048];
    spmd__flight_diagnose(recs, 7, out, sizeof out);
    CHECK_MSG(strstr(out, "\ngroup default failed: rank 7 has sent no heartbeat for 5.1 s\n"), "%s", out);
    /* one rank already past the collective; two groups, "default" first */
    spmd__flight_op past[2] = {op('c', 1, "barrier", SPMD__FLIGHT_DONE, NOW - 2, NOW - 1),
                               op('c', 2, "all_gather", SPMD__FLIGHT_RUNNING, NOW - 1, 0)};
    spmd__flight_op in1[1] = {op('c', 1, "barrier", SPMD__FLIGHT_RUNNING, NOW - 2, 0)};
    spmd__flight_op idle[1] = {op('c', 1, "barrier", SPMD__FLIGHT_DONE, NOW - 4, NOW - 3)};
    spmd__flight_record mix[4] = {rec("pp.sub1", 0, 2, 1, in1, 1), rec("pp.sub1", 1, 2, 2, past, 2),
                                  rec("default", 0, 2, 1, idle, 1), rec("default", 1, 2, 1, idle, 1)};
    mix[3].rank = 1;
    check_diag(mix, 4,
               "group default (2 ranks): no rank is inside a collective; rank 0's last: barrier #1, completed 3.0 s "
               "ago; rank 1's last: barrier #1, completed 3.0 s ago\n"
               "group pp.sub1 (2 ranks): rank 0 waiting in barrier #1 (for 2.0 s); rank 1 finished barrier #1\n");
    /* truncation keeps the text terminated */
    char small[30];
    size_t n = spmd__flight_diagnose(recs, 8, small, sizeof small);
    CHECK(n < sizeof small && small[n] == 0);
}

int main(void) {
    round_trip();
    refusals();
    diagnosis();
    TEST_MAIN_END();
}
