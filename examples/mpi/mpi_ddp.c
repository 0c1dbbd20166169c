/* mpi_ddp — an MPI program that already has its own communicators trains
 * with spmd's DistributedDataParallel on them (spmd/mpi.h).
 *
 * The program initializes MPI and splits MPI_COMM_WORLD into `--replicas K`
 * independent data-parallel jobs (world rank r trains in job r % K).  Each
 * job's communicator becomes an spmd group (spmd_group_from_mpi_comm), and
 * an MLP learns a synthetic 10-class problem (a fixed random linear teacher
 * labels random inputs) with the spmd_ddp reducer averaging gradients over
 * the job's ranks, each rank on its own samples.  The program keeps using
 * its communicators for its own MPI calls: at the end an MPI_Allreduce over
 * each job's communicator checks that its replicas hold bit-identical
 * parameters, and that the loss went down.
 *
 * Run: mpirun -np 4 mpi_ddp [--replicas 2] [--steps 200]
 * Exit status 0 when every job's replicas agree and learned. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/ddp.h"
#include "spmd/mpi.h"
#include "spmd/nn.h"

enum { IN = 32, CLASSES = 10, BATCH = 32 };

/* xorshift: the same stream on every run */
static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float uniform(uint64_t *s) { return (float)(next(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

/* A batch: random inputs, labelled by the teacher (argmax of teacher · x). */
static void batch(uint64_t *s, const float *teacher, float *x, int *y) {
    for (int b = 0; b < BATCH; b++) {
        float *xb = x + b * IN, best = -INFINITY;
        for (int i = 0; i < IN; i++) xb[i] = uniform(s);
        for (int c = 0; c < CLASSES; c++) {
            float z = 0;
            for (int i = 0; i < IN; i++) z += teacher[c * IN + i] * xb[i];
            if (z > best) { best = z; y[b] = c; }
        }
    }
}

/* model = DistributedDataParallel(model) over the group */
static spmd_status wrap_ddp(spmd_group *g, spmd_model *m, spmd_ddp **out) {
    spmd_status st = spmd_ddp_create(g, NULL, out);
    float *params = spmd_model_params(m, NULL), *grads = spmd_model_grads(m, NULL);
    for (int i = 0; !st && i < spmd_model_num_params(m); i++) {
        const spmd_tensor_info *p = spmd_model_param(m, i);
        st = spmd_ddp_add_param(*out, p->name, params + p->offset, grads + p->offset, p->count);
    }
    return st ? st : spmd_ddp_finalize(*out);
}

int main(int argc, char **argv) {
    int replicas = 1, steps = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--replicas")) replicas = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    }
    int provided, wrank, wsize;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (replicas < 1 || replicas > wsize) replicas = 1;
    /* the application's own communicator: this rank's job */
    MPI_Comm job;
    MPI_Comm_split(MPI_COMM_WORLD, wrank % replicas, wrank, &job);

    char err[512];
    spmd_group *g = NULL;
    if (spmd_group_from_mpi_comm(job, NULL, &g, err, sizeof err)) {
        fprintf(stderr, "world rank %d: %s\n", wrank, err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int rank = spmd_group_rank(g), size = spmd_group_size(g);
    spmd_nn_set_threads(1);
    spmd_model *model = NULL;
    spmd_ddp *ddp = NULL;
    spmd_optim *opt = NULL;
    spmd_model_opts mo = {"mlp", 42, 0, CLASSES, 1, 1, IN};
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.1f;
    oo.momentum = 0.9f;
    int rc = 1;
    if (spmd_model_create(&mo, &model, err, sizeof err)) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        goto out;
    }
    if (wrap_ddp(g, model, &ddp)) { /* also broadcasts rank 0's parameters */
        fprintf(stderr, "rank %d: DDP: %s\n", rank, ddp ? spmd_ddp_errmsg(ddp) : "out of memory");
        goto out;
    }
    size_t nparams = 0;
    float *params = spmd_model_params(model, &nparams);
    if (spmd_optim_create(&oo, nparams, &opt)) goto out;

    float teacher[CLASSES * IN], x[BATCH * IN], dlogits[BATCH * CLASSES];
    int y[BATCH];
    uint64_t ts = 0x9E3779B97F4A7C15ull, data = 0x1234567ull + 7919ull * (uint64_t)wrank;
    for (int i = 0; i < CLASSES * IN; i++) teacher[i] = uniform(&ts);
    double first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        batch(&data, teacher, x, y); /* this rank's own samples */
        spmd_model_zero_grad(model);
        spmd_ddp_prepare(ddp);
        const float *logits;
        spmd_model_forward(model, x, BATCH, &logits);
        float loss = spmd_cross_entropy(dlogits, logits, y, BATCH, CLASSES, NULL);
        spmd_model_backward(model, dlogits, spmd_ddp_grad_ready_hook, ddp); /* buckets reduce meanwhile */
        if (spmd_ddp_finish(ddp)) {
            fprintf(stderr, "rank %d: %s\n", rank, spmd_ddp_errmsg(ddp));
            goto out;
        }
        spmd_optim_step(opt, params, spmd_model_grads(model, NULL));
        if (s < 20) first += loss / 20;
        if (s >= steps - 20) last += loss / 20;
    }
    /* The application's own MPI on its communicator: are the replicas one? */
    double sum = 0, lo, hi, losses[2] = {first, last};
    for (size_t i = 0; i < nparams; i++) sum += params[i] * (double)(i % 97 + 1);
    MPI_Allreduce(&sum, &lo, 1, MPI_DOUBLE, MPI_MIN, job);
    MPI_Allreduce(&sum, &hi, 1, MPI_DOUBLE, MPI_MAX, job);
    MPI_Allreduce(MPI_IN_PLACE, losses, 2, MPI_DOUBLE, MPI_SUM, job);
    if (rank == 0)
        printf("job %d: %d ranks over MPI (%s), loss %.3f -> %.3f, replicas %s\n", wrank % replicas, size,
               spmd_group_backend(g), losses[0] / size, losses[1] / size, lo == hi ? "identical" : "DIFFER");
    rc = lo == hi && losses[1] < 0.5 * losses[0] ? 0 : 1;
out:
    spmd_optim_free(opt);
    spmd_ddp_free(ddp);
    spmd_model_free(model);
    spmd_group_destroy(g);
    MPI_Comm_free(&job);
    MPI_Finalize();
    return rc;
}
