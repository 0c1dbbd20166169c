/* dataset.c — an images file and a labels file joined into one labelled
 * dataset (MNIST layout), and normalised float batches from it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "data_internal.h"

/* Check the pair and move the arrays into *out (takes ownership of both). */
static spmd_status join(spmd_idx *img, spmd_idx *lbl, const char *img_name,
                        const char *lbl_name, int num_classes, spmd_dataset *out, char *err,
                        size_t errlen) {
    spmd_status st = SPMD_OK;
    if (img->dims[0] != lbl->dims[0]) {
        st = spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                        "%s holds %u images but %s holds %u labels (byte offset 4 of each)",
                        img_name, img->dims[0], lbl_name, lbl->dims[0]);
        goto fail;
    }
    for (size_t i = 0; i < lbl->count; i++) {
        if (lbl->data[i] >= num_classes) {
            st = spmd__fail(err, errlen, SPMD_ERR_FORMAT,
                            "%s: byte offset %zu: label %u of example %zu is out of range "
                            "[0, %d)",
                            lbl_name, 8 + i, lbl->data[i], i, num_classes);
            goto fail;
        }
    }
    out->n = img->dims[0];
    out->rows = (int)img->dims[1];
    out->cols = (int)img->dims[2];
    out->num_classes = num_classes;
    out->images = img->data;
    out->labels = lbl->data;
    img->data = lbl->data = NULL;
    return SPMD_OK;
fail:
    spmd_idx_free(img);
    spmd_idx_free(lbl);
    return st;
}

spmd_status spmd_dataset_load_files(const char *images_path, const char *labels_path,
                                    int num_classes, spmd_dataset *out, char *err,
                                    size_t errlen) {
    if (!images_path || !labels_path || !out || num_classes < 1 || num_classes > 256)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "spmd_dataset_load_files: invalid arguments");
    spmd_idx img, lbl;
    spmd_status st = spmd_idx_load(images_path, 3, &img, err, errlen);
    if (st) return st;
    st = spmd_idx_load(labels_path, 1, &lbl, err, errlen);
    if (st) {
        spmd_idx_free(&img);
        return st;
    }
    return join(&img, &lbl, images_path, labels_path, num_classes, out, err, errlen);
}

spmd_status spmd_dataset_parse(const void *images, size_t images_len, const void *labels,
                               size_t labels_len, int num_classes, spmd_dataset *out, char *err,
                               size_t errlen) {
    if (!out || num_classes < 1 || num_classes > 256)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dataset_parse: invalid arguments");
    spmd_idx img, lbl;
    spmd_status st = spmd_idx_parse(images, images_len, 3, "<images>", &img, err, errlen);
    if (st) return st;
    st = spmd_idx_parse(labels, labels_len, 1, "<labels>", &lbl, err, errlen);
    if (st) {
        spmd_idx_free(&img);
        return st;
    }
    return join(&img, &lbl, "<images>", "<labels>", num_classes, out, err, errlen);
}

/* dir/base, or dir/base.gz when only that exists.  NOTFOUND if neither. */
static spmd_status find_file(const char *dir, const char *base, char *path, size_t cap, char *err,
                             size_t errlen) {
    struct stat sb;
    int n = snprintf(path, cap, "%s/%s", dir, base);
    if (n < 0 || (size_t)n + 4 >= cap)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: directory name too long", dir);
    if (stat(path, &sb) == 0) return SPMD_OK;
    strcat(path, ".gz");
    if (stat(path, &sb) == 0) return SPMD_OK;
    return spmd__fail(err, errlen, SPMD_ERR_NOTFOUND, "%s/%s(.gz): no such file", dir, base);
}

spmd_status spmd_dataset_load_dir(const char *dir, spmd_split split, spmd_dataset *out,
                                  char *err, size_t errlen) {
    if (!out || (split != SPMD_SPLIT_TRAIN && split != SPMD_SPLIT_TEST))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_dataset_load_dir: invalid arguments");
    if (!dir || !*dir) dir = SPMD_DATASET_DEFAULT_DIR;
    const char *pre = split == SPMD_SPLIT_TRAIN ? "train" : "t10k";
    char base[64], ipath[4096], lpath[4096];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", pre);
    spmd_status st = find_file(dir, base, ipath, sizeof ipath, err, errlen);
    if (st) return st;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", pre);
    st = find_file(dir, base, lpath, sizeof lpath, err, errlen);
    if (st) return st;
    return spmd_dataset_load_files(ipath, lpath, 10, out, err, errlen);
}

void spmd_dataset_free(spmd_dataset *ds) {
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* The 256 possible normalised values, in the order of operations torchvision
 * uses in float32: ToTensor divides by 255, Normalize subtracts then divides. */
static void make_lut(float mean, float std, float lut[256]) {
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
}

static int valid_ds(const spmd_dataset *ds) {
    return ds && ds->rows > 0 && ds->cols > 0 && (ds->n == 0 || (ds->images && ds->labels));
}

spmd_status spmd_dataset_batch(const spmd_dataset *ds, const size_t *idx, size_t count,
                               float mean, float std, float *x, int *y) {
    if (!valid_ds(ds) || (count && !idx) || !(std > 0.0f)) return SPMD_ERR_INVALID;
    for (size_t i = 0; i < count; i++)
        if (idx[i] >= ds->n) return SPMD_ERR_INVALID;
    size_t px = (size_t)ds->rows * (size_t)ds->cols;
    if (x) {
        float lut[256];
        make_lut(mean, std, lut);
        for (size_t i = 0; i < count; i++) {
            const uint8_t *src = ds->images + idx[i] * px;
            float *dst = x + i * px;
            for (size_t p = 0; p < px; p++) dst[p] = lut[src[p]];
        }
    }
    if (y)
        for (size_t i = 0; i < count; i++) y[i] = ds->labels[idx[i]];
    return SPMD_OK;
}

spmd_status spmd_dataset_to_float(const spmd_dataset *ds, float mean, float std, float **out) {
    if (!valid_ds(ds) || !out || !(std > 0.0f)) return SPMD_ERR_INVALID;
    size_t total = ds->n * (size_t)ds->rows * (size_t)ds->cols;
    float *x = malloc(total ? total * sizeof *x : 1);
    if (!x) return SPMD_ERR_NOMEM;
    float lut[256];
    make_lut(mean, std, lut);
    for (size_t i = 0; i < total; i++) x[i] = lut[ds->images[i]];
    *out = x;
    return SPMD_OK;
}
