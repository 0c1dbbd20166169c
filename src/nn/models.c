/* models.c — the architectures spmd-train offers, as layer lists (layers.c).
 * Names follow torch's state_dict of the equivalent nn.Module. */
#include <stdio.h>
#include <string.h>
#include "nn/internal.h"

/* Seed 003's MLP: 784 -> 50 -> 10 with ReLU (input (B,1,28,28) read flat). */
static void build_mlp(spmd_layers *L, int ncls) {
    spmd_layers_linear(L, 50, 1, "fc1");
    spmd_layers_relu(L);
    spmd_layers_linear(L, ncls, 1, "fc2");
}

/* Seed 000's Net: conv 1->32 3x3, ReLU, conv 32->32 3x3, ReLU, max-pool 2,
 * dropout 0.25, flatten, fc 4608->128, ReLU, dropout 0.5, fc 128->10. */
static void build_cnn(spmd_layers *L, int ncls) {
    spmd_layers_conv2d(L, 32, 3, 1, 0, 1, "conv1");
    spmd_layers_relu(L);
    spmd_layers_conv2d(L, 32, 3, 1, 0, 1, "conv2");
    spmd_layers_relu(L);
    spmd_layers_maxpool2d(L, 2);
    spmd_layers_dropout(L, 0.25f);
    spmd_layers_flatten(L);
    spmd_layers_linear(L, 128, 1, "fc1");
    spmd_layers_relu(L);
    spmd_layers_dropout(L, 0.5f);
    spmd_layers_linear(L, ncls, 1, "fc2");
}

/* Seed 002's ToyModel: Linear 10->10, ReLU, Linear 10->5 (trained with MSE). */
static void build_toy(spmd_layers *L) {
    spmd_layers_linear(L, 10, 1, "net1");
    spmd_layers_relu(L);
    spmd_layers_linear(L, 5, 1, "net2");
}

/* torchvision's ResNet with BasicBlocks and the CIFAR stem (a 3x3 stride-1
 * first convolution, no max-pool): 28x28 -> 28 -> 14 -> 7 -> 4, 32x32 ->
 * 32 -> 16 -> 8 -> 4, then global average pool and fc. */
static void build_resnet(spmd_layers *L, const int *blocks, int ncls) {
    spmd_layers_conv2d(L, 64, 3, 1, 1, 0, "conv1");
    spmd_layers_batchnorm2d(L, "bn1");
    spmd_layers_relu(L);
    static const int planes[4] = {64, 128, 256, 512};
    for (int l = 0; l < 4; l++) {
        for (int b = 0; b < blocks[l]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", l + 1, b);
            spmd_layers_basic_block(L, planes[l], (b == 0 && l > 0) ? 2 : 1, prefix);
        }
    }
    spmd_layers_global_avgpool(L);
    spmd_layers_linear(L, ncls, 1, "fc");
}

spmd_status spmd_layers_arch(const char *arch, int num_classes, int in_c, int in_h, int in_w,
                             spmd_layers **out, char *err, size_t errlen) {
    const char *a = arch ? arch : "cnn";
    int ncls = num_classes > 0 ? num_classes : 10;
    int toy = strcmp(a, "toy") == 0, mlp = strcmp(a, "mlp") == 0;
    int resnet = strcmp(a, "resnet18") == 0 || strcmp(a, "resnet34") == 0;
    if (!toy && !mlp && !resnet && strcmp(a, "cnn") != 0) {
        if (err && errlen)
            snprintf(err, errlen, "unknown model '%s' (mlp, cnn, toy, resnet18, resnet34)", a);
        return SPMD_ERR_INVALID;
    }
    int c = in_c > 0 ? in_c : (toy ? 10 : 1);
    int h = in_h > 0 ? in_h : (toy ? 1 : 28);
    int w = in_w > 0 ? in_w : (toy ? 1 : 28);
    spmd_layers *L;
    spmd_status st = spmd_layers_create(c, h, w, toy || mlp, &L);
    if (st != SPMD_OK) {
        if (err && errlen) snprintf(err, errlen, "%s: bad input shape %dx%dx%d", a, c, h, w);
        return st;
    }
    if (mlp) build_mlp(L, ncls);
    else if (toy) build_toy(L);
    else if (resnet) {
        static const int r18[4] = {2, 2, 2, 2}, r34[4] = {3, 4, 6, 3};
        build_resnet(L, a[6] == '1' ? r18 : r34, ncls);
    } else build_cnn(L, ncls);
    if (spmd_layers_errmsg(L)[0]) {   /* a layer did not fit the input */
        if (err && errlen)
            snprintf(err, errlen, "%s on %dx%dx%d input: %s", a, c, h, w, spmd_layers_errmsg(L));
        spmd_layers_free(L);
        return SPMD_ERR_INVALID;
    }
    *out = L;
    return SPMD_OK;
}

spmd_status spmd__build_arch(const spmd_model_opts *o, spmd_model **out, char *err,
                             size_t errlen) {
    spmd_layers *L;
    spmd_status st = spmd_layers_arch(o->arch, o->num_classes, o->in_c, o->in_h, o->in_w, &L,
                                      err, errlen);
    if (st != SPMD_OK) return st;
    spmd_build_opts b = SPMD_BUILD_OPTS_DEFAULT;
    b.arch = o->arch ? o->arch : "cnn";
    b.seed = o->seed;
    b.dropout = o->dropout;
    st = spmd_model_build(L, &b, out, err, errlen);
    spmd_layers_free(L);
    return st;
}

spmd_status spmd_model_create(const spmd_model_opts *opts, spmd_model **out, char *err,
                              size_t errlen) {
    if (!opts || !out) return SPMD_ERR_INVALID;
    return spmd__build_arch(opts, out, err, errlen);
}
