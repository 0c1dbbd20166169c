/* src/nn/internal.h — the model graph behind spmd_model.
 *
 * A model is a list of nodes in forward order over a list of activations.
 * Each node reads one activation (two for the residual add) and writes a new
 * one; backward walks the nodes in reverse.  Parameters, gradients and
 * buffers live in three contiguous allocations described by the tables;
 * nodes refer to their tensors by table index.  Activation data and
 * activation gradients live in two more allocations sized for the largest
 * batch seen so far, per-node caches (dropout masks, pool argmax, batch
 * statistics) and the shared im2col scratch in a sixth.
 *
 * The builder functions are internal (spmd__) so tests can assemble small
 * graphs (one layer, one residual block) and check their gradients. */
#ifndef SPMD_NN_INTERNAL_H
#define SPMD_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "common/xoshiro.h" /* spmd__xoshiro_next, inlined in hot loops */
#include "spmd/nn.h"

enum {
    SPMD__OP_LINEAR,
    SPMD__OP_CONV,
    SPMD__OP_BN,
    SPMD__OP_RELU,
    SPMD__OP_MAXPOOL,
    SPMD__OP_DROPOUT,
    SPMD__OP_FLATTEN,
    SPMD__OP_GAP,
    SPMD__OP_ADD,
    SPMD__OP_CUSTOM
};

typedef struct {
    int c, h, w;   /* per-sample shape */
    int flat;      /* 1: stored (B, c*h*w); 0: stored (c, B, h, w) */
    size_t size;   /* c*h*w */
    float *data;   /* B*size floats (act 0: the caller's input unless transposed) */
    float *grad;   /* same size; NULL for act 0 */
} spmd__act;

typedef struct {
    int op;
    int in, in2, out;     /* activation ids (in2: ADD only) */
    int acc_in, acc_in2;  /* backward adds into d(in) rather than writing it */
    int relu_fused;       /* conv: its ReLU is applied as it stores (spmd_conv2d_relu_forward);
                             ReLU: that conv's output is already this node's, which shares its memory */
    int relu_in_pool;     /* max-pool: the index of the ReLU node whose output only this pool reads;
                             the pool's backward does that ReLU's too (-1: none).
                             ReLU: 1 when a pool does its backward */
    int p0, np;           /* parameter table entries p0 .. p0+np-1 */
    int b0;               /* BatchNorm: buffer entries b0 (mean), b0+1 (var) */
    spmd_conv2d_dims conv;
    int k;                /* max-pool kernel */
    float p;              /* dropout probability */
    /* caches, pointing into the model's cache allocation */
    float *col;           /* conv: the shared im2col scratch */
    float *mask;
    int32_t *idx;
    float *mean, *rstd;
    spmd_layer_def *custom;   /* SPMD__OP_CUSTOM: the model's copy of the definition */
} spmd__node;

typedef struct {
    char *name;
    int ndim;
    int shape[4];
    size_t count;
    int init;            /* SPMD__INIT_* */
    float bound;
} spmd__tensor_decl;

enum { SPMD__INIT_UNIFORM, SPMD__INIT_ONES, SPMD__INIT_ZEROS };

struct spmd_model {
    char arch[24];
    int in_c, in_h, in_w;
    int training;
    int dropout_on;
    int stage_input;      /* input in the model's layout, its gradient computed (a pipeline stage) */
    int stage_output;     /* the output may be spatial (a stage before the last) */
    uint64_t init_skip;   /* initialisation: random draws the layers before the stage made */
    spmd_status err;      /* first builder failure */
    char errmsg[160];
    spmd_rng drop_rng;

    spmd__act *acts;
    int nacts, cap_acts;
    spmd__node *nodes;
    int nnodes, cap_nodes;

    spmd_tensor_info *params;
    int nparams, cap_params;
    size_t param_count;
    spmd_tensor_info *bufs;
    int nbufs, cap_bufs;
    size_t buf_count;

    float *param_mem, *grad_mem, *buf_mem;
    float *own_grad_mem;   /* grad_mem when the model allocated it, else NULL (spmd_model_use_grad_memory) */
    float *own_param_mem;  /* likewise for param_mem (spmd_model_use_param_memory) */
    float *own_buf_mem;    /* likewise for buf_mem (spmd_model_use_buffer_memory) */
    float *act_mem, *actgrad_mem, *cache_mem, *col_scratch, *dcol_scratch;
    int bmax;             /* batch the activation memory is sized for */
    size_t act_bytes;     /* activation, activation-gradient and cache memory at bmax */
    int batch;            /* batch of the last forward */
    int fwd_ready;        /* a forward has run since allocation */
    int grad_stale;       /* spmd_model_zero_grad_lazy: the next backward writes the gradients */
    /* SyncBatchNorm (spmd_model_set_syncbn): the cross-rank reduce, its
     * scratch (2 * widest BatchNorm + 1 doubles), and whether the last
     * forward used it (backward must match the forward) */
    spmd_bn_reduce_fn bn_reduce;
    void *bn_ctx;
    double *bn_scratch;
    int fwd_sync;
};

/* ---- builder (each returns the new activation id, or -1 after recording
 * the failure in m->err; a failed builder call makes later calls no-ops) --- */
spmd_model *spmd__model_new(const char *arch, int c, int h, int w, int flat_input);
int spmd__add_linear(spmd_model *m, int in, int oc, int bias, const char *name);
int spmd__add_conv(spmd_model *m, int in, int oc, int k, int stride, int pad, int bias,
                   const char *name);
int spmd__add_bn(spmd_model *m, int in, const char *name);
int spmd__add_relu(spmd_model *m, int in);
int spmd__add_maxpool(spmd_model *m, int in, int k);
int spmd__add_dropout(spmd_model *m, int in, float p);
int spmd__add_flatten(spmd_model *m, int in);
int spmd__add_gap(spmd_model *m, int in);
int spmd__add_add(spmd_model *m, int a, int b);
/* A user-defined layer (spmd_layers_custom); def is copied. */
int spmd__add_custom(spmd_model *m, int in, const spmd_layer_def *def);
/* torchvision's BasicBlock: conv3x3(stride)-bn-relu-conv3x3-bn (+ 1x1 conv-bn
 * shortcut when the shape changes), add, relu.  prefix e.g. "layer2.0". */
int spmd__add_basic_block(spmd_model *m, int in, int planes, int stride, const char *prefix);
/* Allocate parameter/gradient/buffer memory and initialise from seed. */
spmd_status spmd__model_finish(spmd_model *m, uint64_t seed, char *err, size_t errlen);


/* Hot loops that are not GEMMs are compiled for AVX2 and AVX-512 as well as
 * the baseline, the best chosen at load time (GCC/clang function clones).
 * Not under ThreadSanitizer: its runtime is not ready when the ifunc
 * resolvers run during relocation, and the process dies before main. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(SPMD_NO_CLONES)
#define SPMD_NO_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(SPMD_NO_CLONES)
#define SPMD_NO_CLONES 1
#endif
/* clang before 16 names the dispatcher "<fn>.ifunc" and leaves calls from
 * other files to <fn> unresolved: there the functions are built once, for
 * the baseline. */
#if defined(__clang__) && __clang_major__ < 16 && !defined(SPMD_NO_CLONES)
#define SPMD_NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SPMD_NO_CLONES)
#define SPMD__VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPMD__VECTOR_CLONES
#endif

/* spmd_linear_backward with acc_w = 0 writing dw and db (=) instead of
 * adding to them (a gradient known to be zero need not be cleared first). */
void spmd__linear_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, int B, int C, int OC, int acc,
                           int acc_w);

/* Max-pool backward followed by the backward of the ReLU before it, from the
 * pool's output: dinp is the ReLU's input gradient (out NULL: no ReLU, as
 * spmd_maxpool_backward). */
void spmd__maxpool_relu_backward(float *dinp, const float *dout, const float *out,
                                 const int32_t *idx, int planes, int h, int w, int k, int acc);

/* Sum of n floats with 16 independent partial sums (vectorisable without
 * -ffast-math; the rounding differs from a serial sum by a few ulps). */
float spmd__sum(const float *x, size_t n);

/* Architectures (models.c). */
spmd_status spmd__build_arch(const spmd_model_opts *o, spmd_model **out, char *err,
                             size_t errlen);

#endif
