/* src/common/procs.h — process-lifecycle helpers shared by the launchers
 * (spmdrun, spmd_spawn): naming the right rank when several die at once, and
 * finding every descendant of a job, even one that left its process group. */
#ifndef SPMD_COMMON_PROCS_H
#define SPMD_COMMON_PROCS_H

#include <sys/types.h>

/* 1 when pid is dying or dead but not reaped: the kernel has started its
 * exit (PF_EXITING) or it is a zombie.  A rank that saw a peer's socket close
 * exited after that peer had begun to die, so a launcher that looks at this
 * before naming a root cause never blames the survivor. */
int spmd__proc_exiting(pid_t pid);

/* 1 when pid is stopped by a signal (SIGSTOP, SIGTSTP), 2 when a tracer
 * holds it (a debugger, but also LeakSanitizer checking for leaks as the
 * process exits), else 0.  A stopped rank's peers lose its heartbeat and exit
 * with an error naming it, so a launcher that finds such a worker when the
 * first failure comes names it instead. */
int spmd__proc_stopped(pid_t pid);

/* SIGKILL every process of this user whose environment holds `entry`
 * ("NAME=value", exactly), except `skip1`, `skip2` and the caller.  Returns
 * how many were signalled; call until it returns 0 (a process may fork while
 * the scan runs). */
int spmd__proc_sweep(const char *entry, pid_t skip1, pid_t skip2);

/* Put this process's job secret (a generated one included) into its
 * environment as SPMD_AUTH_TOKEN, for a child about to exec() a program.
 * Nothing when SPMD_AUTH=off or no secret exists.  Single-threaded callers
 * only (setenv). */
void spmd__auth_export(void);

#endif
