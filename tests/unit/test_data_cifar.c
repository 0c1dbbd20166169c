/* test_data_cifar.c — the CIFAR-10 binary loader on small files written in
 * the dataset's exact format (1 label byte + 3072 pixel bytes per record):
 * the five training batches and the test batch load in order; a file whose
 * size is not a whole number of records, or with a label above 9, is an
 * error naming the file and the value; batches are normalised per channel,
 * and the augmentation is a padded crop and a flip, reproducible per seed. */
#include <math.h>
#include <unistd.h>
#include "harness.h"
#include "spmd/data.h"

static char dir[] = "/tmp/spmd_cifar_XXXXXX";

static uint8_t pix(size_t rec, int i) { return (uint8_t)((rec * 31 + (size_t)i * 7) % 256); }

static void write_file(const char *name, size_t first, size_t n, size_t extra) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (size_t r = first; r < first + n; r++) {
        fputc((int)(r % 10), f);
        for (int i = 0; i < 3072; i++) fputc(pix(r, i), f);
    }
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char name[64], err[512] = "";
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        write_file(name, (size_t)(b - 1) * 4, 4, 0);
    }
    write_file("test_batch.bin", 100, 3, 0);
    spmd_cifar tr = {0}, te = {0};
    CHECK_OK(spmd_cifar_load_dir(dir, SPMD_SPLIT_TRAIN, &tr, err, sizeof err));
    CHECK_OK(spmd_cifar_load_dir(dir, SPMD_SPLIT_TEST, &te, err, sizeof err));
    CHECK(tr.n == 20 && te.n == 3);
    for (size_t r = 0; r < tr.n; r++) CHECK(tr.labels[r] == r % 10 && tr.images[r * 3072 + 5] == pix(r, 5));
    CHECK(te.labels[0] == 0 && te.images[7] == pix(100, 7));
    /* plain batch: (v/255 - mean[c]) / std[c] */
    size_t idx[2] = {3, 17};
    float x[2 * 3072], xa[2 * 3072], xb[2 * 3072];
    int y[2];
    CHECK_OK(spmd_cifar_batch(&tr, idx, 2, 0, 0, x, y));
    const float mean[3] = SPMD_CIFAR10_MEAN, sd[3] = SPMD_CIFAR10_STD;
    CHECK(y[0] == 3 && y[1] == 7);
    for (int c = 0; c < 3; c++) {
        int i = c * 1024 + 33;
        CHECK(fabsf(x[3072 + i] - ((float)pix(17, i) / 255.0f - mean[c]) / sd[c]) < 1e-6f);
    }
    /* augmented: reproducible, and each output row is the input shifted
     * (maybe mirrored) with zero padding */
    CHECK_OK(spmd_cifar_batch(&tr, idx, 2, 1, 42, xa, NULL));
    CHECK_OK(spmd_cifar_batch(&tr, idx, 2, 1, 42, xb, NULL));
    CHECK(memcmp(xa, xb, sizeof xa) == 0);
    int found = 0;
    for (int dy = -4; dy <= 4; dy++)
        for (int dx = -4; dx <= 4; dx++)
            for (int flip = 0; flip < 2; flip++) {
                int ok = 1;
                for (int h = 0; h < 32 && ok; h++)
                    for (int w = 0; w < 32 && ok; w++) {
                        int sh = h + dy, sw = (flip ? 31 - w : w) + dx;
                        float v = sh >= 0 && sh < 32 && sw >= 0 && sw < 32 ? (float)pix(3, sh * 32 + sw) / 255.0f : 0.0f;
                        ok = fabsf(xa[h * 32 + w] - (v - mean[0]) / sd[0]) < 1e-6f;
                    }
                found += ok;
            }
    CHECK(found >= 1);
    size_t bad = 20;
    CHECK(spmd_cifar_batch(&tr, &bad, 1, 0, 0, x, y) == SPMD_ERR_INVALID);
    /* a truncated file */
    write_file("data_batch_3.bin", 8, 2, 100);
    spmd_cifar t2 = {0};
    CHECK(spmd_cifar_load_dir(dir, SPMD_SPLIT_TRAIN, &t2, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "data_batch_3.bin: 6246 bytes is not a whole number") != NULL, "%s", err);
    CHECK(t2.n == 0 && t2.images == NULL);
    /* a bad label */
    snprintf(name, sizeof name, "%s/data_batch_3.bin", dir);
    write_file("data_batch_3.bin", 8, 2, 0);
    FILE *f = fopen(name, "r+b");
    fseek(f, 3073, SEEK_SET);
    fputc(12, f);
    fclose(f);
    CHECK(spmd_cifar_load_dir(dir, SPMD_SPLIT_TRAIN, &t2, err, sizeof err) == SPMD_ERR_FORMAT);
    CHECK_MSG(strstr(err, "record 1 (byte offset 3073) has label 12") != NULL, "%s", err);
    /* a missing file */
    unlink(name);
    CHECK(spmd_cifar_load_dir(dir, SPMD_SPLIT_TRAIN, &t2, err, sizeof err) == SPMD_ERR_NOTFOUND);
    CHECK(strstr(err, "data_batch_3.bin"));
    spmd_cifar_free(&tr);
    spmd_cifar_free(&te);
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "%s/data_batch_%d.bin", dir, b);
        unlink(name);
    }
    snprintf(name, sizeof name, "%s/test_batch.bin", dir);
    unlink(name);
    rmdir(dir);
    TEST_MAIN_END();
}
