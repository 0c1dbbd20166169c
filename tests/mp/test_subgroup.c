/* Subgroups: at world 5, the even ranks {4, 0, 2} (listed out of order) and
 * the odd ranks {1, 3} form subgroups; collectives and p2p inside each use
 * subgroup ranks (translated back with spmd_group_parent_rank), the parent
 * group keeps working in between and afterwards, a rank outside a subgroup
 * gets NULL, bad rank lists are refused identically everywhere, and destroying
 * the subgroups is clean. */
#include "harness.h"
#include "mpi_job.h"
#include "spmd/group.h"

#define RREQ(cond, ...)                                                         \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "rank %d: %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static int body(int rank, int world, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[512];
    RREQ(spmd_group_init(NULL, &g, err, sizeof err) == SPMD_OK, "%s", err);
    const int evens[] = {4, 0, 2}, odds[] = {1, 3};
    spmd_group *even = NULL, *odd = NULL;
    RREQ(spmd_group_new_subgroup(g, evens, 3, &even) == SPMD_OK, "%s", spmd_group_errmsg(g));
    RREQ(spmd_group_new_subgroup(g, odds, 2, &odd) == SPMD_OK, "%s", spmd_group_errmsg(g));
    RREQ((even != NULL) == (rank % 2 == 0) && (odd != NULL) == (rank % 2 == 1), "membership");
    spmd_group *mine = even ? even : odd;
    int sr = spmd_group_rank(mine), sw = spmd_group_size(mine);
    RREQ(sw == (even ? 3 : 2) && sr == rank / 2, "sub rank %d of %d", sr, sw);
    RREQ(spmd_group_parent_rank(mine, sr) == rank, "translation");

    /* a collective inside the subgroup: sum of parent ranks */
    int32_t v = rank, sum = 0;
    RREQ(spmd_all_reduce(mine, &v, &sum, 1, SPMD_I32, SPMD_SUM) == SPMD_OK, "%s", spmd_group_errmsg(mine));
    RREQ(sum == (even ? 0 + 2 + 4 : 1 + 3), "sum %d", sum);
    /* the parent in between */
    int32_t one = 1, n = 0;
    RREQ(spmd_all_reduce(g, &one, &n, 1, SPMD_I32, SPMD_SUM) == SPMD_OK && n == world, "parent");
    /* p2p inside: subgroup rank 0 sends to subgroup rank 1 */
    if (sr == 0) {
        int32_t msg = 100 + rank;
        RREQ(spmd_send(mine, &msg, 1, SPMD_I32, 1, 5) == SPMD_OK, "%s", spmd_group_errmsg(mine));
    } else if (sr == 1) {
        int32_t msg = 0;
        int src = -1;
        RREQ(spmd_recv(mine, &msg, 1, SPMD_I32, SPMD_ANY_SOURCE, 5, &src) == SPMD_OK, "%s", spmd_group_errmsg(mine));
        int parent_src = spmd_group_parent_rank(mine, src);
        RREQ(src == 0 && msg == 100 + parent_src && parent_src == (even ? 0 : 1), "msg %d from %d", msg, parent_src);
    }
    /* broadcast from the last subgroup rank */
    int32_t b = sr == sw - 1 ? 77 + rank : 0;
    RREQ(spmd_broadcast(mine, &b, 1, SPMD_I32, sw - 1) == SPMD_OK, "%s", spmd_group_errmsg(mine));
    RREQ(b == 77 + (even ? 4 : 3), "bcast %d", b);
    /* a rank out of the parent's range, or listed twice: refused on every rank */
    const int bad[] = {0, 9}, dup[] = {1, 1};
    spmd_group *x = (spmd_group *)1;
    RREQ(spmd_group_new_subgroup(g, bad, 2, &x) == SPMD_ERR_INVALID && x == (spmd_group *)1, "bad list");
    RREQ(strstr(spmd_group_errmsg(g), "rank 9") != NULL, "%s", spmd_group_errmsg(g));
    RREQ(spmd_group_new_subgroup(g, dup, 2, &x) == SPMD_ERR_INVALID, "duplicate");
    spmd_group_destroy(even);
    spmd_group_destroy(odd);
    /* the parent is unaffected */
    RREQ(spmd_all_reduce(g, &one, &n, 1, SPMD_I32, SPMD_SUM) == SPMD_OK && n == world, "parent after");
    /* a subgroup of everyone, then a second subgroup after destroying it */
    const int all[] = {0, 1, 2, 3, 4};
    spmd_group *everyone = NULL;
    RREQ(spmd_group_new_subgroup(g, all, 5, &everyone) == SPMD_OK && everyone, "everyone");
    RREQ(spmd_barrier(everyone) == SPMD_OK, "%s", spmd_group_errmsg(everyone));
    spmd_group_destroy(everyone);
    spmd_group_destroy(g);
    return 0;
}

int main(void) {
    char report[512];
    setenv("SPMD_TIMEOUT", "30", 1);
    CHECK_MSG(test_spawn(5, body, NULL, 120000, report, sizeof report) == SPMD_OK, "%s", report);
    TEST_MAIN_END();
}
