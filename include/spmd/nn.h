/* spmd/nn.h — the neural-network half of spmd's training stack.
 *
 * In the manner of llm.c: plain float arrays, explicit forward and backward
 * per layer, shape comments, GEMM through OpenBLAS, convolution by im2col +
 * GEMM.  A model keeps ALL its parameters in one contiguous float allocation
 * and ALL gradients in another (same layout), so data-parallel code can
 * bucket and all-reduce contiguous memory.  The parameter table lists each
 * tensor (name, shape, offset, count) in model order; the names follow
 * torch's state_dict ("conv1.weight", "layer1.0.bn1.bias" ...).
 *
 * Layout.  Weights use torch's layout: Linear (OC, C), Conv2d (OC, C, KH, KW).
 * Spatial activations inside a model are stored channel-major, (C, B, H, W)
 * ("CNHW"), so a convolution over a whole batch is one GEMM whose output is
 * already the next layer's input; flatten converts to torch's (B, C*H*W)
 * order.  A model's input is (B, C, H, W) as torch's; with C = 1 (every
 * built-in model) that is the same memory as (C, B, H, W).
 *
 * Conventions of the layer kernels below: forward writes its output (=);
 * backward ACCUMULATES parameter gradients (+=, as torch does until
 * zero_grad) and writes the input gradient (=) unless `acc` is non-zero,
 * in which case it adds to it (an activation read by two layers).  A NULL
 * input-gradient pointer skips that computation.
 *
 * Threads: the kernels are single-threaded except the GEMMs, whose thread
 * count is spmd_nn_set_threads() (default 1 per process).
 * Nothing here talks to the network; see ddp.h / group.h for that.
 */
#ifndef SPMD_NN_H
#define SPMD_NN_H

#include <stddef.h>
#include <stdint.h>
#include "spmd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- threads -------------------------------------------------------------- */
/* Threads the BLAS may use (n >= 1). */
spmd_status spmd_nn_set_threads(int n);
/* OPENBLAS_NUM_THREADS or OMP_NUM_THREADS when set, else 1. */
int spmd_nn_default_threads(void);

/* ---- random numbers ------------------------------------------------------- */
/* xoshiro256** — small, fast, and its whole state is 4 words, so it can be
 * checkpointed and restored exactly. */
typedef struct {
    uint64_t s[4];
} spmd_rng;

/* Seed from (seed, stream): different streams (e.g. ranks) give independent sequences. */
void spmd_rng_seed(spmd_rng *r, uint64_t seed, uint64_t stream);
uint64_t spmd_rng_next(spmd_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float spmd_rng_uniform(spmd_rng *r);
/* Standard normal (mean 0, variance 1), as torch.randn's distribution (not
 * its sequence): Box–Muller on two 53-bit uniforms, one value per call, so
 * the generator's state stays the 4 words above. */
float spmd_rng_normal(spmd_rng *r);
/* out[0..n) = mean + std * N(0, 1), as tensor.normal_(mean, std); uses both
 * values of each Box–Muller pair (std >= 0). */
void spmd_rng_normal_fill(spmd_rng *r, float *out, size_t n, float mean, float std);

/* ---- layer kernels (public so each can be tested and reused) --------------- */

/* Linear: out (B, OC) = inp (B, C) @ w^T + b;  w (OC, C), b (OC) or NULL. */
void spmd_linear_forward(float *out, const float *inp, const float *w, const float *b, int B,
                         int C, int OC);
/* dinp (B, C) (NULL: skip), dw (OC, C) +=, db (OC) += (NULL: no bias). */
void spmd_linear_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, int B, int C, int OC, int acc);

/* Conv2d geometry; oh/ow are derived by spmd_conv2d_dims_init. */
typedef struct {
    int c, h, w;        /* input channels and size */
    int oc, kh, kw;     /* output channels, kernel */
    int stride, pad;
    int oh, ow;         /* output size */
} spmd_conv2d_dims;
/* Fills oh/ow; SPMD_ERR_INVALID when the geometry gives an empty output. */
spmd_status spmd_conv2d_dims_init(spmd_conv2d_dims *d, int c, int h, int w, int oc, int k,
                                  int stride, int pad);
/* Scratch floats for one im2col chunk at batch B (the kernels process a few
 * samples at a time so the matrix stays in cache). */
size_t spmd_conv2d_col_size(const spmd_conv2d_dims *d, int B);
/* im2col of inp (C, B, H, W) into col (C*KH*KW, B*OH*OW), zero padding. */
void spmd_im2col(float *col, const float *inp, const spmd_conv2d_dims *d, int B);
/* Adjoint of im2col: dinp (C, B, H, W) += scatter of dcol. */
void spmd_col2im(float *dinp, const float *dcol, const spmd_conv2d_dims *d, int B);
/* out (OC, B, OH, OW) = conv(inp (C, B, H, W), w (OC, C, KH, KW)) + b (OC or NULL).
 * col: scratch of spmd_conv2d_col_size(d, B) floats. */
void spmd_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                         float *col, const spmd_conv2d_dims *d, int B);
/* The same followed by ReLU (out = max(conv, 0), as spmd_relu_forward), applied
 * as each output is stored instead of in a second pass over the output. */
void spmd_conv2d_relu_forward(float *out, const float *inp, const float *w, const float *b,
                              float *col, const spmd_conv2d_dims *d, int B);
/* dw +=, db += (NULL: no bias), dinp (C, B, H, W) (NULL: skip).  col and dcol
 * are scratch of spmd_conv2d_col_size(d, B) floats each (dcol may be NULL
 * when dinp is NULL). */
void spmd_conv2d_backward(float *dinp, float *dw, float *db, const float *dout,
                          const float *inp, const float *w, float *col, float *dcol,
                          const spmd_conv2d_dims *d, int B, int acc);

/* ReLU over n elements (in place allowed). Backward uses the output: dinp = dout * (out > 0). */
void spmd_relu_forward(float *out, const float *inp, size_t n);
void spmd_relu_backward(float *dinp, const float *dout, const float *out, size_t n, int acc);

/* Max pooling k×k with stride k (as F.max_pool2d(x, k)), on (C, B, H, W) or
 * (B, C, H, W) alike: planes = C*B.  out (planes, H/k, W/k); idx records the
 * argmax offset inside each input plane for backward. */
void spmd_maxpool_forward(float *out, int32_t *idx, const float *inp, int planes, int h, int w,
                          int k);
void spmd_maxpool_backward(float *dinp, const float *dout, const int32_t *idx, int planes, int h,
                           int w, int k, int acc);

/* Dropout with probability p (torch semantics: kept values scaled by 1/(1-p)).
 * mask (n) receives 0 or 1/(1-p). */
void spmd_dropout_forward(float *out, float *mask, const float *inp, size_t n, float p,
                          spmd_rng *rng);
void spmd_dropout_backward(float *dinp, const float *dout, const float *mask, size_t n, int acc);

/* Flatten (C, B, H, W) -> (B, C*H*W) in torch's order, and its adjoint. */
void spmd_flatten_forward(float *out, const float *inp, int C, int B, int HW);
void spmd_flatten_backward(float *dinp, const float *dout, int C, int B, int HW, int acc);

/* Global average pool: inp (C, B, H, W) -> out (B, C). */
void spmd_gap_forward(float *out, const float *inp, int C, int B, int HW);
void spmd_gap_backward(float *dinp, const float *dout, int C, int B, int HW, int acc);

/* Residual add: out = a + b (n elements); backward hands dout to both inputs. */
void spmd_add_forward(float *out, const float *a, const float *b, size_t n);

/* BatchNorm2d on (C, B, H, W): per channel over B*H*W values, eps 1e-5,
 * momentum 0.1, torch semantics: training normalises with the biased batch
 * variance and updates running_var with the unbiased one; eval uses the
 * running statistics.  mean/rstd (C) are saved for backward. */
void spmd_batchnorm_forward(float *out, float *mean, float *rstd, const float *inp,
                            const float *gamma, const float *beta, float *running_mean,
                            float *running_var, int C, int B, int HW, int training);
/* xhat is recomputed from inp, mean and rstd.  dgamma/dbeta +=. */
void spmd_batchnorm_backward(float *dinp, float *dgamma, float *dbeta, const float *dout,
                             const float *inp, const float *mean, const float *rstd,
                             const float *gamma, int C, int B, int HW, int training, int acc);

/* ---- losses --------------------------------------------------------------- */
/* Cross-entropy with log-softmax over logits (B, V), mean over the batch.
 * targets (B) in [0, V).  dlogits (B, V) (NULL: skip) receives dLoss/dlogits.
 * Returns the loss; *correct (NULL: skip) counts argmax hits. */
float spmd_cross_entropy(float *dlogits, const float *logits, const int *targets, int B,
                         int V, int *correct);
/* Mean squared error over n elements, mean reduction (torch's MSELoss). */
float spmd_mse(float *dpred, const float *pred, const float *target, size_t n);

/* ---- models ---------------------------------------------------------------- */
typedef struct spmd_model spmd_model;

/* One tensor of a model's parameter (or buffer) table. */
typedef struct {
    const char *name;   /* torch state_dict name */
    int ndim;
    int shape[4];
    size_t offset;      /* in floats from the start of the param (or buffer) base */
    size_t count;       /* elements */
} spmd_tensor_info;

typedef struct {
    const char *arch;    /* "mlp" | "cnn" | "toy" | "resnet18" | "resnet34" */
    uint64_t seed;       /* initialisation seed */
    int dropout;         /* 0: dropout layers are the identity (equivalence tests) */
    int num_classes;     /* <= 0: 10 */
    int in_c, in_h, in_w; /* 0: the architecture's own input (see spmd_layers_arch) */
} spmd_model_opts;
#define SPMD_MODEL_OPTS_DEFAULT {"cnn", 1234, 1, 10, 0, 0, 0}

/* Build a model, parameters initialised as torch's defaults (weights and
 * biases of Linear/Conv2d uniform in ±1/sqrt(fan_in); BatchNorm weight 1,
 * bias 0, running mean 0, var 1) from opts->seed.  Starts in train mode.
 * err (may be NULL) receives the reason of a failure. */
spmd_status spmd_model_create(const spmd_model_opts *opts, spmd_model **out, char *err,
                              size_t errlen);
void spmd_model_free(spmd_model *m);

const char *spmd_model_arch(const spmd_model *m);
/* Per-sample input shape (C, H, W) and the number of outputs (classes). */
void spmd_model_input_shape(const spmd_model *m, int *c, int *h, int *w);
int spmd_model_num_outputs(const spmd_model *m);

/* SPMD_OK when a sample of c x h x w (channels, rows, columns) is the
 * model's input; else SPMD_ERR_MISMATCH with both shapes in err.  Check every
 * data set before the first step: forward reads exactly the model's shape
 * per sample, whatever the data holds. */
spmd_status spmd_model_check_input(const spmd_model *m, int c, int h, int w, char *err,
                                   size_t errlen);

/* The state_dict round trip with PyTorch: a safetensors file of every
 * parameter and buffer under torch's names, float32, in torch's shapes, so
 * torch's model.load_state_dict(safetensors.torch.load_file(path)) accepts it
 * for the same architecture, and a file torch wrote loads here.  BatchNorm's
 * num_batches_tracked is not kept (ignored on load, not written: load with
 * strict=False in torch for models with BatchNorm).  Save is atomic
 * (spmd_ckpt_save).  Load checks every tensor (present, float32, shape)
 * before reading any, naming the first that does not match; tensors of the
 * file that the model lacks are ignored (a spmd-train checkpoint loads too). */
spmd_status spmd_model_save(spmd_model *m, const char *path, char *err, size_t errlen);
spmd_status spmd_model_load(spmd_model *m, const char *path, char *err, size_t errlen);

/* Parameter table, in model order (the order of torch's model.parameters()). */
int spmd_model_num_params(const spmd_model *m);
const spmd_tensor_info *spmd_model_param(const spmd_model *m, int i);
/* Contiguous parameter / gradient / buffer memory (owned by the model) and
 * its length in floats. */
float *spmd_model_params(spmd_model *m, size_t *count);
float *spmd_model_grads(spmd_model *m, size_t *count);
/* Buffers: BatchNorm running_mean / running_var (count 0 and NULL for models
 * without BatchNorm). */
float *spmd_model_buffers(spmd_model *m, size_t *count);
int spmd_model_num_buffers(const spmd_model *m);
const spmd_tensor_info *spmd_model_buffer(const spmd_model *m, int i);

void spmd_model_zero_grad(spmd_model *m);
/* torch's zero_grad(set_to_none=True): the next backward writes every
 * gradient instead of adding to it, which saves clearing the gradient memory
 * and reading it back.  Until that backward returns the gradients' contents
 * are unspecified.  The results are the same as after spmd_model_zero_grad. */
void spmd_model_zero_grad_lazy(spmd_model *m);
/* Keep the gradients in caller-owned memory of spmd_model_grads' length from
 * now on (the current ones are copied there), e.g. the DDP reducer's shared
 * gradients (spmd_ddp_alloc_grads).  It must outlive the model's use. */
void spmd_model_use_grad_memory(spmd_model *m, float *mem);
/* The same for the parameters (e.g. spmd_ddp_alloc_step's shared memory). */
void spmd_model_use_param_memory(spmd_model *m, float *mem);
/* 1: train mode (dropout active, BatchNorm batch statistics), 0: eval. */
void spmd_model_train(spmd_model *m, int training);
int spmd_model_is_training(const spmd_model *m);

/* SyncBatchNorm for the whole model (torch.nn.SyncBatchNorm.convert_sync_batchnorm):
 * with a reduce function set, every BatchNorm layer in train mode takes its
 * batch statistics over all ranks — forward and backward each call
 * reduce(ctx, buf, n), which must sum the n doubles of buf in place over
 * every rank (spmd_syncbn_group_reduce in spmd/syncbn.h with a group as ctx).
 * Eval mode still uses the running statistics.  reduce NULL: plain BatchNorm
 * again.  A no-op for models without BatchNorm.  A failing reduce makes
 * spmd_model_forward/backward return its status.  ctx must stay valid while
 * set; the model calls reduce from the thread that runs forward/backward. */
typedef spmd_status (*spmd_bn_reduce_fn)(void *ctx, double *buf, size_t n);
spmd_status spmd_model_set_syncbn(spmd_model *m, spmd_bn_reduce_fn reduce, void *ctx);
/* 1 when a reduce function is set and the model has BatchNorm layers. */
int spmd_model_is_syncbn(const spmd_model *m);

/* The dropout RNG: seed it per rank for reproducible runs; get/set its state
 * for checkpoints. */
void spmd_model_seed_dropout(spmd_model *m, uint64_t seed, uint64_t stream);
spmd_rng *spmd_model_rng(spmd_model *m);

/* Forward a batch x (B, C, H, W) (must stay valid until backward returns).
 * *logits (may be NULL) points at the (B, num_outputs) output owned by the
 * model, valid until the next forward. */
spmd_status spmd_model_forward(spmd_model *m, const float *x, int B, const float **logits);

/* Called from backward as each parameter's gradient is complete, strictly in
 * decreasing param_index order (last layer first), so gradient communication
 * can start while earlier layers are still computing. */
typedef void (*spmd_grad_ready_fn)(void *ctx, int param_index);

/* Backward of the last forward (which must have been in train mode or eval
 * mode alike) from dlogits (B, num_outputs); accumulates into the gradients.
 * grad_ready may be NULL. */
spmd_status spmd_model_backward(spmd_model *m, const float *dlogits, spmd_grad_ready_fn grad_ready,
                                void *ctx);

/* ---- models of your own: a list of layers ---------------------------------
 *
 * A model is a sequence of layers, each reading the previous one's output
 * (a ResNet BasicBlock, whose shortcut reads its input twice, is one layer).
 * Describe it once with spmd_layers, then build a model from all of it or
 * from a range of it (a pipeline stage).  The built-in architectures are
 * layer lists too (spmd_layers_arch).  The parameters of every model built
 * this way are one contiguous allocation laid out in layer order, so the
 * range [first, last) of a list owns the slice of the whole model's memory
 * given by spmd_layers_param_range, and a stage built with the same seed
 * holds exactly that slice of the whole model's initial parameters.
 *
 *   spmd_layers *L;
 *   spmd_layers_create(10, 1, 1, 1, &L);          // seed 001: nn.Linear(10, 10)
 *   spmd_layers_linear(L, 10, 1, "net");
 *   spmd_build_opts b = SPMD_BUILD_OPTS_DEFAULT;
 *   spmd_model_build(L, &b, &model, err, sizeof err);
 *   spmd_layers_free(L);                          // the model does not need it
 *
 * Each spmd_layers_* call checks the layer against the current shape and
 * returns SPMD_ERR_INVALID with spmd_layers_errmsg() naming the layer and the
 * values; after a failure the list is unchanged. */
typedef struct spmd_layers spmd_layers;

/* A list whose input is (B, c, h, w).  flat 1: the first layer reads each
 * sample as c*h*w values (a Linear first, as a model that flattens its input);
 * 0: spatial (a Conv2d first). */
spmd_status spmd_layers_create(int c, int h, int w, int flat, spmd_layers **out);
void spmd_layers_free(spmd_layers *L);
/* The reason of the last failed call ("" if none). */
const char *spmd_layers_errmsg(const spmd_layers *L);

/* nn.Linear(in, out_features, bias): input must be flat.  name: the state_dict prefix ("fc1"). */
spmd_status spmd_layers_linear(spmd_layers *L, int out_features, int bias, const char *name);
/* nn.Conv2d(in, out_channels, k, stride, pad, bias): input must be spatial. */
spmd_status spmd_layers_conv2d(spmd_layers *L, int out_channels, int k, int stride, int pad,
                               int bias, const char *name);
spmd_status spmd_layers_batchnorm2d(spmd_layers *L, const char *name);
spmd_status spmd_layers_relu(spmd_layers *L);
spmd_status spmd_layers_maxpool2d(spmd_layers *L, int k);
spmd_status spmd_layers_dropout(spmd_layers *L, float p);
spmd_status spmd_layers_flatten(spmd_layers *L);
/* AdaptiveAvgPool2d(1) + flatten: (C, H, W) -> C. */
spmd_status spmd_layers_global_avgpool(spmd_layers *L);
/* torchvision's BasicBlock (conv3x3-bn-relu-conv3x3-bn, 1x1 conv-bn shortcut
 * when the shape changes, add, relu).  prefix e.g. "layer2.0". */
spmd_status spmd_layers_basic_block(spmd_layers *L, int planes, int stride, const char *prefix);

/* A layer of your own (e.g. the tensor-parallel Linear of spmd/parallel.h).
 * Activations are passed in the model's layout: flat ones (B, n), spatial
 * ones (C, B, H, W).  forward writes out; backward adds to dparams (+=) and
 * writes din (=), or adds to it when acc is 1; din NULL: skip it.  A non-OK
 * status fails the model's forward/backward with it.  init NULL: every
 * parameter uniform in ±1/sqrt(fan_in of the first), as torch's Linear;
 * else init fills params from r (draw as many numbers as the equivalent
 * unsharded layer would, so later layers initialise as in that model). */
#define SPMD_LAYER_MAX_PARAMS 4
typedef struct {
    const char *name;                    /* state_dict prefix */
    int out_c, out_h, out_w, out_flat;   /* per-sample output shape */
    int nparams;
    const char *param_names[SPMD_LAYER_MAX_PARAMS];   /* "weight", "bias" */
    int param_ndim[SPMD_LAYER_MAX_PARAMS];
    int param_shape[SPMD_LAYER_MAX_PARAMS][4];
    spmd_status (*forward)(void *ctx, float *out, const float *in, float *const *params, int B);
    spmd_status (*backward)(void *ctx, float *din, float *const *dparams, const float *dout,
                            const float *in, const float *out, float *const *params, int B,
                            int acc);
    void (*init)(void *ctx, float *const *params, spmd_rng *r);
    void *ctx;                           /* must outlive every model built with the layer */
} spmd_layer_def;
spmd_status spmd_layers_custom(spmd_layers *L, const spmd_layer_def *def);

/* A built-in architecture as a list: "mlp", "cnn", "toy", "resnet18",
 * "resnet34"; in_c/in_h/in_w 0: the architecture's own input (1x28x28,
 * toy 10); resnets take any (C, H, W), e.g. CIFAR's 3x32x32 (the CIFAR stem:
 * a 3x3 stride-1 first convolution, no max-pool). */
spmd_status spmd_layers_arch(const char *arch, int num_classes, int in_c, int in_h, int in_w,
                             spmd_layers **out, char *err, size_t errlen);

int spmd_layers_count(const spmd_layers *L);
/* Index of the layer named name (its state_dict prefix), or -1. */
int spmd_layers_index(const spmd_layers *L, const char *name);
/* Keep layers [0, n) only (e.g. to replace a built-in model's head). */
spmd_status spmd_layers_truncate(spmd_layers *L, int n);
/* Parameters (elements) of layer i, and the parameter range [*off, *off + *count)
 * of layers [first, last) in the memory of a model built from the whole list. */
size_t spmd_layers_layer_params(const spmd_layers *L, int i);
void spmd_layers_param_range(const spmd_layers *L, int first, int last, size_t *off,
                             size_t *count);
/* Per-sample shape of layer i's output (i = -1: the list's input); flat 1: (B, c*h*w). */
void spmd_layers_shape(const spmd_layers *L, int i, int *c, int *h, int *w, int *flat);

typedef struct {
    const char *arch;   /* name for spmd_model_arch; NULL: "custom" */
    uint64_t seed;      /* initialisation seed */
    int dropout;        /* 0: dropout layers are the identity */
    int first, last;    /* layers [first, last) (last <= 0: to the end) */
} spmd_build_opts;
#define SPMD_BUILD_OPTS_DEFAULT {NULL, 1234, 1, 0, 0}

/* Build a model from layers [first, last) of L, initialised as the whole
 * list would be from seed (torch's defaults), in train mode.  A model that
 * starts after layer 0 (a pipeline stage) takes its input in the model's
 * layout (the previous stage's output memory as it is) and computes the input
 * gradient (spmd_model_input_grad); a model that ends before the last layer
 * may give a spatial output (C, B, H, W).  Errors name the range. */
spmd_status spmd_model_build(const spmd_layers *L, const spmd_build_opts *o, spmd_model **out,
                             char *err, size_t errlen);
/* Gradient of the last backward with respect to the input (B * input size
 * floats), for models built from first > 0; NULL otherwise. */
const float *spmd_model_input_grad(const spmd_model *m);
/* Bytes of activation, activation-gradient and cache memory the model holds
 * (sized for the largest batch forwarded so far). */
size_t spmd_model_activation_bytes(const spmd_model *m);
/* Keep the buffers (BatchNorm statistics) in caller-owned memory, as
 * spmd_model_use_param_memory (e.g. models sharing them). */
void spmd_model_use_buffer_memory(spmd_model *m, float *mem);

/* ---- optimizers ---------------------------------------------------------- */
typedef enum { SPMD_OPTIM_SGD = 0, SPMD_OPTIM_ADAM, SPMD_OPTIM_ADAMW } spmd_optim_kind;

typedef struct {
    spmd_optim_kind kind;
    float lr;
    float momentum;      /* SGD */
    float dampening;     /* SGD */
    int nesterov;        /* SGD */
    float weight_decay;  /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* Adam/AdamW */
} spmd_optim_opts;
/* torch's defaults (SGD lr must still be chosen: 0.01 here). */
#define SPMD_OPTIM_OPTS_SGD {SPMD_OPTIM_SGD, 0.01f, 0.0f, 0.0f, 0, 0.0f, 0.9f, 0.999f, 1e-8f}
#define SPMD_OPTIM_OPTS_ADAM {SPMD_OPTIM_ADAM, 1e-3f, 0.0f, 0.0f, 0, 0.0f, 0.9f, 0.999f, 1e-8f}
#define SPMD_OPTIM_OPTS_ADAMW {SPMD_OPTIM_ADAMW, 1e-3f, 0.0f, 0.0f, 0, 1e-2f, 0.9f, 0.999f, 1e-8f}

typedef struct spmd_optim spmd_optim;

/* An optimizer over n parameters (one flat buffer).  Its state (SGD momentum:
 * n floats; Adam: m then v, 2n floats) is one contiguous allocation. */
spmd_status spmd_optim_create(const spmd_optim_opts *o, size_t n, spmd_optim **out);
void spmd_optim_free(spmd_optim *o);
/* p -= update(g), torch semantics (SGD momentum buffer starts as the first
 * gradient; Adam bias correction by the step count). */
void spmd_optim_step(spmd_optim *o, float *params, const float *grads);
/* Name for messages and checkpoints: "sgd", "adam", "adamw". */
const char *spmd_optim_name(const spmd_optim *o);
/* Its hyperparameters (lr as last set by spmd_optim_set_lr). */
const spmd_optim_opts *spmd_optim_get_opts(const spmd_optim *o);
spmd_status spmd_optim_parse(const char *s, spmd_optim_kind *out);
/* The update spmd_optim_step makes to elements [offset, offset + count) of
 * params, from grad[0 .. count) (the gradient of those elements) and the
 * same elements of the state: a step applied in pieces, as the DDP
 * reducer's sharded step does, gives the same bits.  The step count does
 * not move: call spmd_optim_step_done once every piece of a step is in. */
void spmd_optim_update(spmd_optim *o, float *params, const float *grad, size_t offset, size_t count);
void spmd_optim_step_done(spmd_optim *o);
/* State arrays of n floats each: 0 (SGD without momentum), 1 (SGD), 2 (Adam). */
int spmd_optim_state_arrays(const spmd_optim *o);
/* State for checkpoints: the float buffer (owned by o) and the step count. */
float *spmd_optim_state(spmd_optim *o, size_t *count);
/* Keep the state in caller-owned memory of spmd_optim_state's length from
 * now on (the current state is copied there), e.g. spmd_ddp_alloc_step's. */
void spmd_optim_use_state_memory(spmd_optim *o, float *mem);
int64_t spmd_optim_steps(const spmd_optim *o);
void spmd_optim_set_steps(spmd_optim *o, int64_t steps);
void spmd_optim_set_lr(spmd_optim *o, float lr);

#ifdef __cplusplus
}
#endif
#endif
