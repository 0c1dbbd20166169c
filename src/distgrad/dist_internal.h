/* dist_internal.h — what dist_autograd.c and dist_optim.c share. */
#ifndef SPMD_DIST_INTERNAL_H
#define SPMD_DIST_INTERNAL_H

#include "spmd/dist_autograd.h"

/* The payload of every dist-autograd call. */
typedef struct {
    int64_t ctx;
    int32_t rec, kind;
    spmd_optim_opts optim;
} dag_hdr;

spmd_status spmd__dag_fail(spmd_dag *d, spmd_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Wait for f, take its result into *out (may be NULL), free f. */
spmd_status spmd__dag_finish(spmd_dag *d, spmd_rpc_future *f, spmd_rpc_msg **out, const char *what);

#endif
