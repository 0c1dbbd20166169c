/* spmd-train — training of the seeds' models on Fashion-MNIST or CIFAR-10
 * (docs/TRAINING.md, docs/PARALLEL.md).
 *
 *   spmd-train --model cnn --epochs 3                  one process
 *   spmdrun -n 2 spmd-train --model cnn --epochs 3     two ranks
 *   mpirun -n 2 spmd-train --model cnn --epochs 3      two ranks over MPI
 *   srun -n 2 spmd-train --model cnn --epochs 3        two ranks under Slurm
 *   spmdrun -n 4 spmd-train --dataset cifar10 --data DIR --pp 2 --zero
 *
 * One process when no launcher variables are set (world 1, no socket); under
 * a launcher the ranks form a group (over MPI when an MPI launcher started
 * them).  Data parallelism (loop.c) unless --pp/--tp > 1 or --zero ask for
 * the model-parallel trainer (parallel.c); both take every option of
 * options.c, or refuse the few that cannot apply with the reason. */
#include "train.h"

int main(int argc, char **argv) {
    options o;
    int rc = train_parse_args(argc, argv, &o);
    if (rc > 0) return 0;    /* --help */
    if (rc < 0) return 2;    /* said why */
    return train_is_parallel(&o) ? train_model_parallel(&o) : train_data_parallel(&o);
}
