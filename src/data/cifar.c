/* cifar.c — the CIFAR-10 binary files, and batches with torchvision's
 * standard augmentation (random crop with 4 pixels of zero padding,
 * horizontal flip). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/xoshiro.h"
#include "spmd/data.h"

enum { PIX = 3072, SIDE = 32, PAD = 4 };

spmd_status spmd_cifar_load_file(const char *path, spmd_cifar *ds, char *err, size_t errlen) {
    if (!path || !ds) return SPMD_ERR_INVALID;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? SPMD_ERR_NOTFOUND : SPMD_ERR_IO;
    }
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    rewind(f);
    if (len <= 0 || len % SPMD_CIFAR_RECORD != 0) {
        fclose(f);
        snprintf(err, errlen,
                 "%s: %ld bytes is not a whole number of CIFAR-10 records (%d bytes: 1 label + 3072 pixels)",
                 path, len, SPMD_CIFAR_RECORD);
        return SPMD_ERR_FORMAT;
    }
    size_t add = (size_t)len / SPMD_CIFAR_RECORD;
    uint8_t *img = realloc(ds->images, (ds->n + add) * PIX);
    if (img) ds->images = img;
    uint8_t *lab = img ? realloc(ds->labels, ds->n + add) : NULL;
    if (lab) ds->labels = lab;
    if (!img || !lab) {
        fclose(f);
        snprintf(err, errlen, "%s: out of memory for %zu records", path, add);
        return SPMD_ERR_NOMEM;
    }
    uint8_t rec[SPMD_CIFAR_RECORD];
    for (size_t i = 0; i < add; i++) {
        if (fread(rec, 1, sizeof rec, f) != sizeof rec) {
            fclose(f);
            snprintf(err, errlen, "%s: short read at record %zu", path, i);
            return SPMD_ERR_IO;
        }
        if (rec[0] > 9) {
            fclose(f);
            snprintf(err, errlen, "%s: record %zu (byte offset %zu) has label %d, not 0..9", path, i,
                     i * SPMD_CIFAR_RECORD, rec[0]);
            return SPMD_ERR_FORMAT;
        }
        ds->labels[ds->n + i] = rec[0];
        memcpy(ds->images + (ds->n + i) * PIX, rec + 1, PIX);
    }
    fclose(f);
    ds->n += add;
    return SPMD_OK;
}

spmd_status spmd_cifar_load_dir(const char *dir, spmd_split split, spmd_cifar *out, char *err,
                                size_t errlen) {
    if (!dir || !out) return SPMD_ERR_INVALID;
    spmd_cifar ds = {0, NULL, NULL};
    spmd_status st = SPMD_OK;
    char path[4096];
    for (int i = 1; i <= (split == SPMD_SPLIT_TRAIN ? 5 : 1) && st == SPMD_OK; i++) {
        if (split == SPMD_SPLIT_TRAIN) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, i);
        else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        st = spmd_cifar_load_file(path, &ds, err, errlen);
    }
    if (st != SPMD_OK) {
        spmd_cifar_free(&ds);
        return st;
    }
    *out = ds;
    return SPMD_OK;
}

void spmd_cifar_free(spmd_cifar *ds) {
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* One splitmix64 value of x (as a hash, not a stream). */
static uint64_t splitmix(uint64_t x) { return spmd__splitmix64(&x); }

spmd_status spmd_cifar_batch(const spmd_cifar *ds, const size_t *idx, size_t count, int augment,
                             uint64_t seed, float *x, int *y) {
    if (!ds || (!idx && count)) return SPMD_ERR_INVALID;
    for (size_t i = 0; i < count; i++)
        if (idx[i] >= ds->n) return SPMD_ERR_INVALID;
    static const float mean[3] = SPMD_CIFAR10_MEAN, stdv[3] = SPMD_CIFAR10_STD;
    for (size_t i = 0; i < count; i++) {
        const uint8_t *im = ds->images + idx[i] * PIX;
        if (y) y[i] = ds->labels[idx[i]];
        if (!x) continue;
        int dy = 0, dx = 0, flip = 0;
        if (augment) {
            uint64_t r = splitmix(seed ^ splitmix(idx[i] + 1));
            dy = (int)(r % (2 * PAD + 1)) - PAD;
            dx = (int)((r >> 8) % (2 * PAD + 1)) - PAD;
            flip = (int)((r >> 16) & 1);
        }
        float *o = x + i * PIX;
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < SIDE; h++)
                for (int w = 0; w < SIDE; w++) {
                    int sh = h + dy, sw = (flip ? SIDE - 1 - w : w) + dx;
                    float v = sh >= 0 && sh < SIDE && sw >= 0 && sw < SIDE
                                  ? (float)im[c * 1024 + sh * SIDE + sw] / 255.0f
                                  : 0.0f;   /* padding is zero before normalisation, as torchvision */
                    o[c * 1024 + h * SIDE + w] = (v - mean[c]) / stdv[c];
                }
    }
    return SPMD_OK;
}
