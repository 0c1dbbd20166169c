/* tests/mpi/lsan_finalize.c — for the MPI tests of ASan builds only (the
 * ranks LD_PRELOAD it, tests/mpi/run.sh): every library loaded with dlopen
 * stays mapped until exit (RTLD_NODELETE).  Open MPI loads its components
 * with dlopen and unloads the ones it does not select, and unloads the rest
 * in MPI_Finalize; what they allocated and never freed would then be
 * reported from "unknown modules" that no suppression can name.  Kept
 * mapped, those leaks name their component (mca_*.so) and
 * tests/mpi/lsan.supp suppresses Open MPI's, while spmd's own leaks are
 * still found as in every other test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

void *dlopen(const char *file, int flags) {
    static void *(*next)(const char *, int);
    if (!next) next = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    return next ? next(file, flags | RTLD_NODELETE) : NULL;
}
