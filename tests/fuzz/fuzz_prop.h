/* tests/fuzz/fuzz_prop.h — a harness's property check: a violation is a
 * finding, so it stops the run (libFuzzer saves the input). */
#ifndef SPMD_FUZZ_PROP_H
#define SPMD_FUZZ_PROP_H

#include <stdio.h>
#include <stdlib.h>

#define REQUIRE_PROP(c)                                                         \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "property violated: %s (line %d)\n", #c, __LINE__); \
            abort();                                                            \
        }                                                                       \
    } while (0)

#endif
