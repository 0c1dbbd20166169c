/* thread.c — starting one of the library's own threads (common.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include "common.h"

int spmd__thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name) {
    /* The new thread inherits the mask: with every signal blocked, a signal
     * sent to the process goes to one of the program's threads, whose
     * handlers and sigwait loops expect it, never to ours. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc && name) pthread_setname_np(*t, name); /* top -H, perf, gdb */
    return rc;
}
