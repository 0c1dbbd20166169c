/* SyncBatchNorm across 3 ranks with different batch sizes equals one
 * process's BatchNorm2d on the concatenated batch: outputs, saved mean/rstd,
 * running statistics, input gradients, and (summed over ranks) dgamma/dbeta. */
#include <math.h>
#include "harness.h"
#include "mpi_job.h"
#include "spmd/nn.h"
#include "spmd/syncbn.h"

enum { C = 3, HW = 5, W = 3 };
static const int BS[W] = {2, 3, 4};

static float val(uint64_t salt, int c, int b, int k) {
    uint64_t h = salt * 1000003u + (uint64_t)c * 7919u + (uint64_t)b * 104729u + (uint64_t)k * 31u;
    h ^= h >> 13;
    h *= 0x9E3779B97F4A7C15ull;
    return (float)((h >> 40) % 2000) / 1000.0f - 1.0f + 0.3f * (float)c;
}

static int close_enough(float a, float b) { return fabsf(a - b) <= 1e-4f * (fabsf(b) + 1.0f); }

static int body(int rank, int world, void *arg) {
    (void)arg;
    (void)world;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    int NB = 0, off = 0;
    for (int r = 0; r < W; r++) { if (r < rank) off += BS[r]; NB += BS[r]; }
    int B = BS[rank];
    /* global batch (C, NB, HW) and this rank's slice (C, B, HW) */
    float gx[C * 9 * HW], gdy[C * 9 * HW], x[C * 4 * HW], dy[C * 4 * HW];
    for (int c = 0; c < C; c++)
        for (int b = 0; b < NB; b++)
            for (int k = 0; k < HW; k++) {
                gx[(c * NB + b) * HW + k] = val(1, c, b, k);
                gdy[(c * NB + b) * HW + k] = val(2, c, b, k);
            }
    for (int c = 0; c < C; c++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < HW; k++) {
                x[(c * B + b) * HW + k] = gx[(c * NB + off + b) * HW + k];
                dy[(c * B + b) * HW + k] = gdy[(c * NB + off + b) * HW + k];
            }
    float gamma[C] = {1.0f, 0.5f, -2.0f}, beta[C] = {0.0f, 0.1f, 0.7f};
    /* reference: single process on the whole batch */
    float rout[C * 9 * HW], rmean[C], rrstd[C], rrm[C] = {0, 0, 0}, rrv[C] = {1, 1, 1};
    float rdx[C * 9 * HW], rdg[C] = {0}, rdb[C] = {0};
    spmd_batchnorm_forward(rout, rmean, rrstd, gx, gamma, beta, rrm, rrv, C, NB, HW, 1);
    spmd_batchnorm_backward(rdx, rdg, rdb, gdy, gx, rmean, rrstd, gamma, C, NB, HW, 1, 0);
    /* distributed */
    float out[C * 4 * HW], mean[C], rstd[C], rm[C] = {0, 0, 0}, rv[C] = {1, 1, 1};
    float dx[C * 4 * HW], dg[C] = {0}, db[C] = {0};
    double scratch[2 * C + 1];
    int rc = 0;
    if (spmd_syncbn_forward(out, mean, rstd, x, gamma, beta, rm, rv, C, B, HW, spmd_syncbn_group_reduce, g, scratch) ||
        spmd_syncbn_backward(dx, dg, db, dy, x, mean, rstd, gamma, C, B, HW, 0, spmd_syncbn_group_reduce, g, scratch)) {
        fprintf(stderr, "rank %d: %s\n", rank, spmd_group_errmsg(g));
        rc = 1;
    }
    for (int c = 0; c < C && !rc; c++) {
        if (!close_enough(mean[c], rmean[c]) || !close_enough(rstd[c], rrstd[c]) || !close_enough(rm[c], rrm[c]) ||
            !close_enough(rv[c], rrv[c])) {
            fprintf(stderr, "rank %d: channel %d statistics differ\n", rank, c);
            rc = 1;
        }
        for (int b = 0; b < B; b++)
            for (int k = 0; k < HW; k++) {
                int i = (c * B + b) * HW + k, j = (c * NB + off + b) * HW + k;
                if (!close_enough(out[i], rout[j]) || !close_enough(dx[i], rdx[j])) {
                    fprintf(stderr, "rank %d: element (%d,%d,%d) differs: out %g/%g dx %g/%g\n", rank, c, b, k, out[i],
                            rout[j], dx[i], rdx[j]);
                    rc = 1;
                }
            }
    }
    /* parameter gradients: summed over ranks they are the single-process ones */
    spmd_all_reduce(g, dg, dg, C, SPMD_F32, SPMD_SUM);
    spmd_all_reduce(g, db, db, C, SPMD_F32, SPMD_SUM);
    for (int c = 0; c < C; c++)
        if (!close_enough(dg[c], rdg[c]) || !close_enough(db[c], rdb[c])) {
            fprintf(stderr, "rank %d: dgamma/dbeta %d differ\n", rank, c);
            rc = 1;
        }
    spmd_group_destroy(g);
    return rc;
}

int main(void) {
    char report[256];
    spmd_status st = test_spawn(W, body, NULL, 60000, report, sizeof report);
    CHECK_MSG(st == SPMD_OK, "%s", report);
    TEST_MAIN_END();
}
