/* src/group/error.c — a group's error text: spmd__group_error stores the
 * message of the call that failed (every file of group/ reports through it),
 * spmd_group_errmsg reads it back. */
#include <stdarg.h>
#include <stdio.h>
#include "group_internal.h"

spmd_status spmd__group_error(spmd_group *g, spmd_status st, const char *fmt, ...) {
    if (!g) return st;
    va_list ap;
    va_start(ap, fmt);
    spmd__vfail_locked(&g->err_mu, g->errmsg, sizeof g->errmsg, st, fmt, ap);
    va_end(ap);
    return st;
}

const char *spmd_group_errmsg(const spmd_group *g) {
    /* The message is copied per call site into a buffer owned by the group;
     * reading it while another thread fails a call may show either message. */
    return g ? g->errmsg : "no group";
}

