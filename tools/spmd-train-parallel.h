/* spmd-train-parallel.h — the model-parallel training path of spmd-train. */
#ifndef SPMD_TRAIN_PARALLEL_H
#define SPMD_TRAIN_PARALLEL_H

/* 1 when argv asks for pipeline / tensor parallelism, ZeRO or CIFAR-10. */
int spmd_train_wants_parallel(int argc, char **argv);
/* Runs the whole training; returns the process exit code. */
int spmd_train_parallel_main(int argc, char **argv);
/* Its options for spmd-train --help. */
extern const char spmd_train_parallel_usage[];

#endif
