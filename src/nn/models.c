/* models.c — the architectures spmd-train offers, built from graph nodes.
 * Names follow torch's state_dict of the equivalent nn.Module. */
#include <stdio.h>
#include <string.h>
#include "nn/internal.h"

/* Seed 003's MLP: 784 -> 50 -> 10 with ReLU (input (B,1,28,28) read flat). */
static void build_mlp(spmd_model *m, int ncls) {
    int x = spmd__add_linear(m, 0, 50, 1, "fc1");
    x = spmd__add_relu(m, x);
    spmd__add_linear(m, x, ncls, 1, "fc2");
}

/* Seed 000's Net: conv 1->32 3x3, ReLU, conv 32->32 3x3, ReLU, max-pool 2,
 * dropout 0.25, flatten, fc 4608->128, ReLU, dropout 0.5, fc 128->10. */
static void build_cnn(spmd_model *m, int ncls) {
    int x = spmd__add_conv(m, 0, 32, 3, 1, 0, 1, "conv1");
    x = spmd__add_relu(m, x);
    x = spmd__add_conv(m, x, 32, 3, 1, 0, 1, "conv2");
    x = spmd__add_relu(m, x);
    x = spmd__add_maxpool(m, x, 2);
    x = spmd__add_dropout(m, x, 0.25f);
    x = spmd__add_flatten(m, x);
    x = spmd__add_linear(m, x, 128, 1, "fc1");
    x = spmd__add_relu(m, x);
    x = spmd__add_dropout(m, x, 0.5f);
    spmd__add_linear(m, x, ncls, 1, "fc2");
}

/* Seed 002's ToyModel: Linear 10->10, ReLU, Linear 10->5 (trained with MSE). */
static void build_toy(spmd_model *m) {
    int x = spmd__add_linear(m, 0, 10, 1, "net1");
    x = spmd__add_relu(m, x);
    spmd__add_linear(m, x, 5, 1, "net2");
}

/* torchvision's ResNet with BasicBlocks, adapted to 28x28x1 inputs: a 3x3
 * stride-1 stem, no initial max-pool; 28 -> 28 -> 14 -> 7 -> 4, then global
 * average pool and fc. */
static void build_resnet(spmd_model *m, const int *blocks, int ncls) {
    int x = spmd__add_conv(m, 0, 64, 3, 1, 1, 0, "conv1");
    x = spmd__add_bn(m, x, "bn1");
    x = spmd__add_relu(m, x);
    static const int planes[4] = {64, 128, 256, 512};
    for (int l = 0; l < 4; l++) {
        for (int b = 0; b < blocks[l]; b++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", l + 1, b);
            x = spmd__add_basic_block(m, x, planes[l], (b == 0 && l > 0) ? 2 : 1, prefix);
        }
    }
    x = spmd__add_gap(m, x);
    spmd__add_linear(m, x, ncls, 1, "fc");
}

spmd_status spmd__build_arch(const spmd_model_opts *o, spmd_model **out, char *err,
                             size_t errlen) {
    const char *a = o->arch ? o->arch : "cnn";
    int ncls = o->num_classes > 0 ? o->num_classes : 10;
    spmd_model *m;
    if (strcmp(a, "mlp") == 0) {
        m = spmd__model_new(a, 1, 28, 28, 1);
        if (m) build_mlp(m, ncls);
    } else if (strcmp(a, "cnn") == 0) {
        m = spmd__model_new(a, 1, 28, 28, 0);
        if (m) build_cnn(m, ncls);
    } else if (strcmp(a, "toy") == 0) {
        m = spmd__model_new(a, 10, 1, 1, 1);
        if (m) build_toy(m);
    } else if (strcmp(a, "resnet18") == 0 || strcmp(a, "resnet34") == 0) {
        static const int r18[4] = {2, 2, 2, 2}, r34[4] = {3, 4, 6, 3};
        m = spmd__model_new(a, 1, 28, 28, 0);
        if (m) build_resnet(m, a[6] == '1' ? r18 : r34, ncls);
    } else {
        if (err && errlen)
            snprintf(err, errlen, "unknown model '%s' (mlp, cnn, toy, resnet18, resnet34)", a);
        return SPMD_ERR_INVALID;
    }
    if (!m) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return SPMD_ERR_NOMEM;
    }
    m->dropout_on = o->dropout != 0;
    spmd_status st = spmd__model_finish(m, o->seed, err, errlen);
    if (st != SPMD_OK) {
        spmd_model_free(m);
        return st;
    }
    *out = m;
    return SPMD_OK;
}

spmd_status spmd_model_create(const spmd_model_opts *opts, spmd_model **out, char *err,
                              size_t errlen) {
    if (!opts || !out) return SPMD_ERR_INVALID;
    return spmd__build_arch(opts, out, err, errlen);
}
