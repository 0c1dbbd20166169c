/* cma_parallel.h — a large point-to-point message read from its sender's
 * memory by the receiving thread and a helper thread at once (cma_parallel.c). */
#ifndef SPMD_TRANSPORT_CMA_PARALLEL_H
#define SPMD_TRANSPORT_CMA_PARALLEL_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/spmd.h"

typedef struct spmd__cma_parallel spmd__cma_parallel;
struct spmd__mesh;

/* No thread yet: it starts at the first read that can use it. */
spmd__cma_parallel *spmd__cma_parallel_new(void);
/* Stops and joins the helper; no read may be in progress. */
void spmd__cma_parallel_free(spmd__cma_parallel *s);
/* spmd__cma_read_sealed's contract (mesh.h), the copy shared with the
 * helper when there is one and the message is worth it.  One caller at a
 * time per s (the p2p engine's copy_mu). */
spmd_status spmd__cma_read_parallel(spmd__cma_parallel *s, struct spmd__mesh *m, int peer, void *dst, uint64_t addr,
                                    size_t len, uint64_t seal_addr, uint64_t seal, char *err, size_t errlen);
/* Reads offered to the helper, and the chunks it copied (tests, benchmarks). */
unsigned long spmd__cma_parallel_jobs(const spmd__cma_parallel *s);
unsigned long spmd__cma_parallel_helped(const spmd__cma_parallel *s);

#endif
