/* src/group/flight_record.h — a group's flight record as it is written to a
 * file: the text format, its parser, and the diagnosis built from the
 * records of several ranks (what spmdrun prints about a stuck or failed job).
 *
 * The live ring buffer that fills it is recorder.c; this part knows nothing
 * of groups, so spmdrun and the fuzz harness use it alone.  The format, one
 * item per line, fields separated by one space (docs/RELIABILITY.md):
 *
 *   spmd-flight-record 1
 *   group default
 *   rank 2 4                  rank, world size
 *   pid 4242
 *   host node7
 *   time 1712345678.123456    wall clock when written (s)
 *   reason failure            failure | timeout | request | call
 *   request 3                 the dump request answered (0: none)
 *   issued 457                collectives issued so far
 *   status -3                 the group's failure (0: none)
 *   culprit 5                 the rank it blames (-1: none)
 *   error <text to the end of the line>
 *   op c 456 all_reduce running 1 float32 sum -1 -1 <issued> <started> <ended> 0
 *   op p 12 recv done 4 int32 - 0 7 <issued> <started> <ended> 0
 *   end
 *
 * An op line: class (c collective, p point-to-point), number (a collective's
 * #N is the same on every rank; p2p ops are numbered per rank), kind, state
 * (queued running done failed), count (elements; bytes for p2p), dtype, op
 * ("-": none), peer (the root of a rooted collective, the peer of a p2p op;
 * -1 none or any), tag (-1 none), three wall-clock times (0: not yet), status.
 * Unknown keywords are skipped (later versions may add lines); a record
 * without its "end" line is refused (truncated).
 */
#ifndef SPMD_GROUP_FLIGHT_RECORD_H
#define SPMD_GROUP_FLIGHT_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "spmd/status.h"

#define SPMD__FLIGHT_MAGIC "spmd-flight-record"
#define SPMD__FLIGHT_VERSION 1
#define SPMD__FLIGHT_MAX_OPS 100000      /* a parser's bound on op lines */
#define SPMD__FLIGHT_MAX_BYTES (64u << 20) /* and on a file's size */

enum { SPMD__FLIGHT_QUEUED = 1, SPMD__FLIGHT_RUNNING, SPMD__FLIGHT_DONE, SPMD__FLIGHT_FAILED };

typedef struct {
    char cls;          /* 'c' collective, 'p' point-to-point */
    uint64_t seq;
    char kind[16];     /* "all_reduce" ... "send" "recv" */
    int state;         /* SPMD__FLIGHT_* */
    uint64_t count;
    char dtype[16];    /* "float32", "-" */
    char op[16];       /* "sum", "-" */
    int peer, tag;
    double t_issue, t_start, t_end; /* wall clock (s), 0: not yet */
    int status;
} spmd__flight_op;

typedef struct {
    char group[64];
    int rank, world;
    long pid;
    char host[64];
    double time;
    char reason[16];
    uint64_t request, issued;
    int status, culprit;
    char error[SPMD__ERRLEN];
    int nops;
    spmd__flight_op *ops; /* malloc()ed, in the order written */
} spmd__flight_record;

/* The record as text (malloc()ed, NUL-terminated, *len bytes); NULL when out of memory. */
char *spmd__flight_format(const spmd__flight_record *r, size_t *len);
/* Parse len bytes of text into *r (ops malloc()ed; free with spmd__flight_free).
 * On error *r holds nothing to free and err names the line and the problem. */
spmd_status spmd__flight_parse(const char *text, size_t len, spmd__flight_record *r, char *err, size_t errlen);
void spmd__flight_free(spmd__flight_record *r);
const char *spmd__flight_state_name(int state);

/* What the records of a job say, one line per group ('\n'-terminated):
 *   "group default (8 ranks): rank 5 never entered all_reduce #456 (its last
 *    op: broadcast #455, completed 12.3 s ago); ranks 0-4, 6-7 waiting in
 *    all_reduce #456 (for 12.3 s)"
 * then, for a failed group, the first failure's message.  Records of several
 * groups may be mixed (grouped by name); a rank with two records of one group
 * counts with its newest.  Returns the length written (truncated to outlen). */
size_t spmd__flight_diagnose(const spmd__flight_record *recs, int n, char *out, size_t outlen);

#endif
