/* mode.c — which paths a rank is willing to use (SPMD_TRANSPORT).
 *
 *   SPMD_TRANSPORT=auto   (default) shared memory and cross-memory attach with
 *                         the peers under this kernel, TCP with the others
 *   SPMD_TRANSPORT=tcp    TCP only: no rings, no cross-memory attach, no
 *                         shared gradients (what a multi-host run does; also
 *                         how benchmarks simulate one on a single machine)
 *   SPMD_TRANSPORT=shm    like auto, but a same-kernel pair that cannot share
 *                         memory is an error instead of a quiet fall-back
 * The older knobs narrow it further: SPMD_CMA=0 turns cross-memory attach
 * off, SPMD_SHM=0 turns shared memory (rings and shared gradients) off.
 * A pair uses a path only when both ranks are willing.
 *
 * SPMD_ENCRYPT=1 encrypts every TCP connection of the mesh (path_sealed.c):
 * a pair encrypts when either rank asks.  Off by default; shared memory and
 * cross-memory attach, which never leave the kernel, stay as they are. */
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "mesh.h"

static int is_off(const char *name) {
    const char *e = getenv(name);
    return e && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0 || strcmp(e, "no") == 0);
}

int spmd__transport_mode(void) {
    const char *e = getenv("SPMD_TRANSPORT");
    if (!e || !*e || strcmp(e, "auto") == 0) return SPMD__TRANSPORT_AUTO;
    if (strcmp(e, "tcp") == 0) return SPMD__TRANSPORT_TCP;
    if (strcmp(e, "shm") == 0) return SPMD__TRANSPORT_SHM;
    SPMD_LOGW("SPMD_TRANSPORT=%s is not one of auto, tcp, shm: using auto", e);
    return SPMD__TRANSPORT_AUTO;
}

int spmd__transport_wants_shm(void) {
    return spmd__transport_mode() != SPMD__TRANSPORT_TCP && !is_off("SPMD_SHM");
}

int spmd__transport_wants_cma(void) {
    return spmd__transport_mode() != SPMD__TRANSPORT_TCP && !is_off("SPMD_CMA");
}

int spmd__transport_wants_encrypt(void) {
    const char *e = getenv("SPMD_ENCRYPT");
    if (!e || !*e || is_off("SPMD_ENCRYPT")) return 0;
    if (strcmp(e, "1") && strcmp(e, "on") && strcmp(e, "yes"))
        SPMD_LOGW("SPMD_ENCRYPT=%s is not one of 0, 1: encrypting", e);
    return 1;
}
