/* tests/train_util.h — shared by the tests that run spmd-train on
 * Fashion-MNIST: skip (exit 77) when the data set is not installed, and
 * remove a scratch directory afterwards. */
#ifndef SPMD_TEST_TRAIN_UTIL_H
#define SPMD_TEST_TRAIN_UTIL_H

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "spmd/data.h"

/* 1 when the test split of the default data set loads; else prints why. */
static inline int train_data_present(void) {
    spmd_dataset probe = SPMD_DATASET_INIT;
    char err[512];
    if (spmd_dataset_load_dir(NULL, SPMD_SPLIT_TEST, &probe, err, sizeof err) != SPMD_OK) {
        printf("skipped: Fashion-MNIST not installed (%s)\n", err);
        return 0;
    }
    spmd_dataset_free(&probe);
    return 1;
}

static inline void train_rm_rf(const char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

#endif
