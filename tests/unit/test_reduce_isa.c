/* Kernel-family dispatch: SPMD_REDUCE_ISA, and a first use from several
 * threads at once (run under TSan in CI).
 * Usage: test_reduce_isa <expected>, where <expected> is the SPMD_REDUCE_ISA
 * value the test was started with ("auto" when unset). */
#include <pthread.h>
#include "coll/reduce.h"
#include "harness.h"

enum { NTHREADS = 4, N = 1001 };

static pthread_barrier_t start;
static const char *seen[NTHREADS];
static int wrong[NTHREADS];

static void *first_use(void *arg) {
    int id = (int)(intptr_t)arg;
    float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(id + 1);
    }
    pthread_barrier_wait(&start);
    spmd__reduce(a, b, N, SPMD_F32, SPMD_SUM); /* the very first call in the process */
    seen[id] = spmd__reduce_isa();
    for (int i = 0; i < N; i++)
        wrong[id] += a[i] != (float)(i + id + 1);
    return NULL;
}

/* The best family at or below `want` that this CPU runs. */
static const char *expected(const char *want) {
    static const char *const order[] = {"scalar", "avx2", "avx512"};
    int top = 2;
    for (int i = 0; i < 3; i++)
        if (strcmp(want, order[i]) == 0)
            top = i;
    for (int i = top; i > 0; i--)
        if (spmd__reduce_table_get(order[i]))
            return order[i];
    return "scalar";
}

int main(int argc, char **argv) {
    REQUIRE(argc == 2);
    pthread_t th[NTHREADS];
    REQUIRE(pthread_barrier_init(&start, NULL, NTHREADS) == 0);
    for (int i = 0; i < NTHREADS; i++)
        REQUIRE(pthread_create(&th[i], NULL, first_use, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);

    const char *isa = spmd__reduce_isa();
    for (int i = 0; i < NTHREADS; i++) {
        CHECK(seen[i] && strcmp(seen[i], isa) == 0);
        CHECK(wrong[i] == 0);
    }
    const char *want = expected(argv[1]); /* "auto" and unknown values: the best */
    CHECK_MSG(strcmp(isa, want) == 0, "SPMD_REDUCE_ISA=%s: got %s, want %s", argv[1], isa, want);
    printf("SPMD_REDUCE_ISA=%s -> %s\n", argv[1], isa);
    TEST_MAIN_END();
}
