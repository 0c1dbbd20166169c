/* report.c — the root-cause report, in the shape of torchrun's ChildFailedError
 * box: the program, other failures, then the first observed failure with its
 * rank, host, pid, exit code or signal, time and the last lines of its stderr. */
#define _GNU_SOURCE /* sigabbrev_np */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spmdrun.h"

const char *sr_signal_name(int signo) {
    static _Thread_local char buf[16];
    const char *abbrev = sigabbrev_np(signo);
    if (abbrev) snprintf(buf, sizeof buf, "SIG%s", abbrev);
    else snprintf(buf, sizeof buf, "SIG%d", signo);
    return buf;
}

void sr_now_text(char *out, size_t outlen) {
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(out, outlen, "%Y-%m-%d_%H:%M:%S", &tm);
}

size_t sr_failure_format(const sr_failure *f, char *out, size_t outlen) {
    char error[128];
    if (f->stopped)
        snprintf(error, sizeof error, "stopped (SIGSTOP or a debugger) while the others waited for it");
    else if (f->signo)
        snprintf(error, sizeof error, "Signal %d (%s) received by PID %d", f->signo,
                 sr_signal_name(f->signo), (int)f->pid);
    else
        snprintf(error, sizeof error, "exited with code %d", f->exit_code);
    int n = snprintf(out, outlen,
                     "[%d]:\n"
                     "  time      : %s\n"
                     "  host      : %s\n"
                     "  rank      : %d (local_rank: %d)\n"
                     "  exitcode  : %d (pid: %d)\n"
                     "  error     : %s\n"
                     "%s%s%s"
                     "%s%s",
                     f->rank, f->when, f->host, f->rank, f->local_rank, f->exit_code,
                     (int)f->pid, error, f->note[0] ? "  note      : " : "", f->note,
                     f->note[0] ? "\n" : "", f->tail[0] ? "  stderr (last lines):\n" : "", f->tail);
    if (n < 0) return 0;
    return (size_t)n < outlen ? (size_t)n : outlen - 1;
}

void sr_report_print(const char *prog, const sr_failure *root, const char *remote_root,
                     const sr_failure *others, int nothers) {
    static const char rule[] = "============================================================\n";
    static const char thin[] = "------------------------------------------------------------\n";
    size_t cap = 4096 + (size_t)(nothers + 1) * (SR_TAIL_BYTES + 1024) +
                 (remote_root ? strlen(remote_root) : 0);
    char *buf = malloc(cap);
    if (!buf) return;
    size_t o = 0;
#define ADD(...) (o += (size_t)snprintf(buf + o, cap - o, __VA_ARGS__), o = o < cap ? o : cap - 1)
    ADD("%s%s FAILED\n%sFailures:\n", rule, prog, thin);
    if (nothers == 0) ADD("  <NO_OTHER_FAILURES>\n");
    for (int i = 0; i < nothers; i++) o += sr_failure_format(&others[i], buf + o, cap - o);
    ADD("%sRoot Cause (first observed failure):\n", thin);
    if (root) o += sr_failure_format(root, buf + o, cap - o);
    else if (remote_root) ADD("%s%s", remote_root,
                              *remote_root && remote_root[strlen(remote_root) - 1] != '\n' ? "\n" : "");
    else ADD("  <unknown>\n");
    ADD("%s", rule);
#undef ADD
    (void)sr_write_all(2, buf, o);
    free(buf);
}
