/* tests/harness.h — the few macros every test uses.
 * A test is an executable: CHECK failures print file:line and the expression
 * and make main() return non-zero through test_failures. */
#ifndef SPMD_TEST_HARNESS_H
#define SPMD_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures = 0;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
            test_failures++;                                                            \
        }                                                                               \
    } while (0)

#define CHECK_MSG(cond, ...)                                                            \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
            test_failures++;                                                            \
        }                                                                               \
    } while (0)

/* Stop this test (or this rank) at the first failure of a precondition. */
#define REQUIRE(cond)                                                                   \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);  \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

/* Status-returning call that must succeed. */
#define CHECK_OK(expr)                                                                  \
    do {                                                                                \
        int check_ok_rc_ = (int)(expr);                                                 \
        if (check_ok_rc_ != 0) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr,        \
                    check_ok_rc_);                                                      \
            test_failures++;                                                            \
        }                                                                               \
    } while (0)

#define TEST_MAIN_END()                                                                 \
    do {                                                                                \
        if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);      \
        return test_failures ? 1 : 0;                                                   \
    } while (0)

#endif
