/* trust.c — the job secret, and finding every descendant of the job.
 *
 * The secret: unless the user gave one (SPMD_AUTH_TOKEN, SPMD_AUTH_FILE) or
 * turned authentication off (SPMD_AUTH=off), a single-node spmdrun generates
 * a random 256-bit token and puts it in its own environment before any thread
 * or worker exists; the store it hosts and every worker (through the
 * environment, which /proc shows only to the same user) prove it.  Nodes of a
 * multi-node job must share one, so there spmdrun requires it from the user.
 *
 * Descendants: spmdrun is a child subreaper (PR_SET_CHILD_SUBREAPER), so a
 * worker's descendant that left its process group (setsid) and lost its
 * parent is re-parented to spmdrun rather than to init; every worker also
 * carries SPMDRUN_AGENT=<pid>-<random> in its environment, inherited by all it
 * starts.  At the end of each attempt spmdrun kills and reaps whatever still
 * carries the mark or is its child; when spmdrun dies (even by SIGKILL) the
 * guard does the same sweep by the mark. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth/auth.h"
#include "auth/procs.h"
#include "spmd/auth.h"
#include "spmdrun.h"

#define MARK_VAR "SPMDRUN_AGENT"

static char mark_entry[96];

int sr_trust_setup(const sr_config *cfg, char *err, size_t errlen) {
    char e[512];
    spmd__auth auth;
    if (spmd__auth_disabled()) {
        fprintf(stderr, "spmdrun: WARNING: SPMD_AUTH=off — the job's store and connections "
                        "accept anyone who can reach their ports\n");
    } else if (spmd__auth_given(&auth, e, sizeof e) != SPMD_OK) {
        snprintf(err, errlen, "%s", e);
        return -1;
    } else if (!auth.on && cfg->max_nodes > 1) {
        /* Nodes must share one secret: the per-user file (a shared home). */
        if (spmd__auth_get(&auth, e, sizeof e) != SPMD_OK) {
            snprintf(err, errlen, "%s", e);
            return -1;
        }
    } else if (!auth.on) {
        char token[SPMD_AUTH_TOKEN_CHARS + 1];
        if (spmd_auth_new_token(token) != SPMD_OK || setenv("SPMD_AUTH_TOKEN", token, 1) != 0) {
            snprintf(err, errlen, "cannot generate the job secret");
            return -1;
        }
        memset(token, 0, sizeof token);
    }
    memset(&auth, 0, sizeof auth);
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = spmd__now_ns();
    char val[64];
    snprintf(val, sizeof val, "%d-%016llx", (int)getpid(), (unsigned long long)r);
    snprintf(mark_entry, sizeof mark_entry, MARK_VAR "=%s", val);
    if (setenv(MARK_VAR, val, 1) != 0) {
        snprintf(err, errlen, "setenv: %s", strerror(errno));
        return -1;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        fprintf(stderr, "spmdrun: warning: cannot become a child subreaper (%s); descendants "
                        "that leave their session may outlive the job\n", strerror(errno));
    return 0;
}

/* Kill every marked process but us and the guard; reap our adopted children. */
void sr_trust_sweep(const sr_agent *a, const pid_t *keep, int nkeep) {
    if (!mark_entry[0]) return;
    for (int round = 0; round < 100 && spmd__proc_sweep(mark_entry, a->guard_pid, 0) > 0; round++) {
    }
    /* Children adopted as subreaper (and the killed ones): reap, but leave the
     * guard and the workers the caller still accounts for. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    for (int round = 0; round < 100; round++) {
        FILE *f = fopen(path, "re");
        if (!f) return;
        int found = 0;
        long pid;
        while (fscanf(f, "%ld", &pid) == 1) {
            if (pid == a->guard_pid) continue;
            int skip = 0;
            for (int i = 0; i < nkeep; i++) skip |= keep[i] == (pid_t)pid;
            if (skip) continue;
            found = 1;
            kill((pid_t)pid, SIGKILL);
            while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR) {
            }
        }
        fclose(f);
        if (!found) return;
    }
}

/* The guard's last act, after spmdrun died: the mark is all it has. */
void sr_trust_guard_sweep(pid_t agent) {
    if (!mark_entry[0]) return;
    for (int round = 0; round < 100 && spmd__proc_sweep(mark_entry, agent, 0) > 0; round++) {
    }
}
