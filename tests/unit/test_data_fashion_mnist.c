/* The real Fashion-MNIST (Debian package dataset-fashion-mnist) when it is
 * installed: sizes, label range, the balanced classes, and the pixel
 * statistics that SPMD_FASHION_MNIST_MEAN/STD quote.  Exit 77 (skip) when the
 * files are absent: the parser's correctness is tested on generated files. */
#include <math.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/data.h"

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : SPMD_DATASET_DEFAULT_DIR;
    spmd_dataset tr = SPMD_DATASET_INIT, te = SPMD_DATASET_INIT;
    char err[512] = "";
    spmd_status st = spmd_dataset_load_dir(dir, SPMD_SPLIT_TRAIN, &tr, err, sizeof err);
    if (st == SPMD_ERR_NOTFOUND) {
        printf("SKIP: Fashion-MNIST not installed (%s)\n", err);
        return 77;
    }
    CHECK_MSG(st == SPMD_OK, "%s", err);
    CHECK_MSG(spmd_dataset_load_dir(dir, SPMD_SPLIT_TEST, &te, err, sizeof err) == SPMD_OK, "%s", err);
    CHECK(tr.n == 60000 && te.n == 10000);
    CHECK(tr.rows == 28 && tr.cols == 28 && te.rows == 28 && te.cols == 28);
    CHECK(tr.num_classes == 10);
    size_t per[2][10] = {{0}};
    for (size_t i = 0; i < tr.n; i++) per[0][tr.labels[i] < 10 ? tr.labels[i] : 0]++;
    for (size_t i = 0; i < te.n; i++) per[1][te.labels[i] < 10 ? te.labels[i] : 0]++;
    for (int c = 0; c < 10; c++) CHECK(per[0][c] == 6000 && per[1][c] == 1000);

    /* mean and std of x/255 over the training set, as quoted in data.h */
    double s = 0, s2 = 0;
    size_t total = tr.n * 784;
    for (size_t i = 0; i < total; i++) {
        double v = tr.images[i] / 255.0;
        s += v;
        s2 += v * v;
    }
    double mean = s / (double)total, sd = sqrt(s2 / (double)total - mean * mean);
    printf("train: %zu, test: %zu, pixel mean %.4f std %.4f\n", tr.n, te.n, mean, sd);
    CHECK(fabs(mean - SPMD_FASHION_MNIST_MEAN) < 5e-4 && fabs(sd - SPMD_FASHION_MNIST_STD) < 5e-4);

    /* a normalised batch has about zero mean and unit variance */
    size_t idx[256];
    for (size_t i = 0; i < 256; i++) idx[i] = i * 233;
    float *x = malloc(256 * 784 * sizeof *x);
    int y[256];
    CHECK_OK(spmd_dataset_batch(&tr, idx, 256, SPMD_FASHION_MNIST_MEAN, SPMD_FASHION_MNIST_STD, x, y));
    double bm = 0;
    for (size_t i = 0; i < 256 * 784; i++) bm += x[i];
    bm /= 256 * 784;
    CHECK_MSG(fabs(bm) < 0.1, "batch mean %f", bm);
    free(x);
    spmd_dataset_free(&tr);
    spmd_dataset_free(&te);
    TEST_MAIN_END();
}
