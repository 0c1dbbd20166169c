/* butterfly — seed 000's hand-written "butterfly" all-reduce, built from
 * point-to-point messages only, on five ranks holding five random numbers
 * each; the result is compared with the true mean and with the library's
 * own all_reduce (AVG).
 *
 * The seed's algorithm (rank r owns element r):
 *   1. send element i to rank i (isend), receive element r from every rank
 *      (irecv); average what arrived into our element;
 *   2. send our averaged element to every rank, receive every other element.
 * One element per rank, so it needs as many elements as ranks, like the
 * seed.  (The library's version, algorithm "butterfly", chunks any count.)
 *
 * Every rank regenerates all five vectors from their seeds (like the seed's
 * torch.manual_seed(i) loop) to compute the true mean locally.
 *
 * Run: ./butterfly [world_size]   (default 5).  Exit status 0 on agreement. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/group.h"

/* Standard normal numbers from a seeded xorshift generator (Box-Muller). */
static void randn(uint64_t seed, float *out, int n) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < n; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            u[k] = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
        }
        out[i] = (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
    }
}

static int butterfly_allreduce(spmd_group *g, float *send, int rank, int size) {
    if (size < 1) return 1;
    float *buffer_for_chunk = malloc(sizeof(float) * (size_t)size);
    spmd_work **sends = calloc((size_t)(2 * size), sizeof *sends);
    spmd_work **recvs = calloc((size_t)size, sizeof *recvs);
    int ns = 0, rc = 0;
    if (!buffer_for_chunk || !sends || !recvs) return 1;
    /* 1: element i goes to rank i; collect element `rank` from everyone */
    for (int i = 0; i < size; i++)
        if (i != rank && spmd_isend(g, &send[i], 1, SPMD_F32, i, 0, &sends[ns++])) rc = 1;
    for (int i = 0; i < size; i++) {
        if (i == rank) buffer_for_chunk[i] = send[i];
        else if (spmd_irecv(g, &buffer_for_chunk[i], 1, SPMD_F32, i, 0, &recvs[i])) rc = 1;
    }
    for (int i = 0; i < size; i++)
        if (recvs[i]) {
            if (spmd_work_wait(recvs[i], -1)) rc = 1;
            spmd_work_free(recvs[i]);
            recvs[i] = NULL;
        }
    float sum = 0;
    for (int i = 0; i < size; i++) sum += buffer_for_chunk[i];
    send[rank] = sum / (float)size;
    /* 2: our averaged element to everyone; everyone else's to us */
    for (int i = 0; i < size; i++)
        if (i != rank && spmd_isend(g, &send[rank], 1, SPMD_F32, i, 1, &sends[ns++])) rc = 1;
    for (int i = 0; i < size; i++)
        if (i != rank && spmd_irecv(g, &send[i], 1, SPMD_F32, i, 1, &recvs[i])) rc = 1;
    for (int i = 0; i < size; i++)
        if (recvs[i]) {
            if (spmd_work_wait(recvs[i], -1)) rc = 1;
            spmd_work_free(recvs[i]);
        }
    for (int k = 0; k < ns; k++) {
        if (spmd_work_wait(sends[k], -1)) rc = 1;
        spmd_work_free(sends[k]);
    }
    free(buffer_for_chunk);
    free(sends);
    free(recvs);
    return rc;
}

static int run(int rank, int size, void *arg) {
    (void)arg;
    spmd_group *g = NULL;
    char err[256];
    if (spmd_group_init(NULL, &g, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 1;
    }
    float *tensor = malloc(sizeof(float) * (size_t)size), *mean = calloc((size_t)size, sizeof(float));
    float *lib = malloc(sizeof(float) * (size_t)size), *other = malloc(sizeof(float) * (size_t)size);
    for (int r = 0; r < size; r++) { /* the "true" average, as the seed prints it */
        randn((uint64_t)r, other, size);
        for (int i = 0; i < size; i++) mean[i] += other[i];
    }
    for (int i = 0; i < size; i++) mean[i] /= (float)size;
    randn((uint64_t)rank, tensor, size);
    memcpy(lib, tensor, sizeof(float) * (size_t)size);
    printf("Rank %d has data [", rank);
    for (int i = 0; i < size; i++) printf("%s%.4f", i ? ", " : "", tensor[i]);
    printf("]\n");

    int rc = butterfly_allreduce(g, tensor, rank, size);
    if (!rc && spmd_all_reduce(g, lib, lib, (size_t)size, SPMD_F32, SPMD_AVG) != SPMD_OK) rc = 1;
    printf("Rank %d after butterfly [", rank);
    for (int i = 0; i < size; i++) {
        printf("%s%.4f", i ? ", " : "", tensor[i]);
        if (fabsf(tensor[i] - mean[i]) > 1e-6f || fabsf(lib[i] - mean[i]) > 1e-6f) rc = 1;
    }
    printf("]%s\n", rc ? "  MISMATCH with the true mean" : "  == true mean == spmd_all_reduce(AVG)");
    free(tensor);
    free(mean);
    free(lib);
    free(other);
    spmd_group_destroy(g);
    return rc;
}

int main(int argc, char **argv) {
    int size = argc > 1 ? atoi(argv[1]) : 5;
    if (size < 1 || size > 64) {
        fprintf(stderr, "usage: %s [world_size 1..64]\n", argv[0]);
        return 2;
    }
    char report[256];
    if (spmd_spawn(size, run, NULL, report, sizeof report) != SPMD_OK) {
        fprintf(stderr, "butterfly: %s\n", report);
        return 1;
    }
    return 0;
}
