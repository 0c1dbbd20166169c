/* test_nn_torch.c — the C models against values computed by PyTorch 1.13.
 *
 * tests/fixtures/make_fixtures.py builds the same models in torch with the
 * same deterministic weights and inputs (det_values below mirrors its
 * formula) and stores logits, loss, gradients, the parameters after two SGD
 * steps (lr 0.01, momentum 0.5), BatchNorm running statistics, eval-mode
 * logits, and a few steps of each optimizer.  This test needs no torch: it
 * reads the fixture text files and compares within 1e-4 relative (relative
 * to the entry, with a floor of 1e-4 of the tensor's mean magnitude so that
 * entries near zero are not judged on rounding noise). */
#include <math.h>
#include "harness.h"
#include "nn/internal.h"

#ifndef FIXTURE_DIR
#error "FIXTURE_DIR must name tests/fixtures"
#endif

#define RTOL 1e-4

typedef struct {
    char key[128];
    size_t n;
    double sum, sumabs;
    size_t k;
    size_t *idx;
    double *val;
} ref_tensor;

typedef struct {
    ref_tensor *t;
    size_t n;
} fixture;

static int load_fixture(const char *name, fixture *fx) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURE_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    memset(fx, 0, sizeof *fx);
    char key[128];
    while (fscanf(f, "%127s", key) == 1) {
        if (key[0] == '#' || strcmp(key, "batch") == 0) {
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            continue;
        }
        ref_tensor r;
        memset(&r, 0, sizeof r);
        snprintf(r.key, sizeof r.key, "%s", key);
        if (strcmp(key, "loss") == 0) {
            r.k = 1;
            r.idx = calloc(1, sizeof(size_t));
            r.val = calloc(1, sizeof(double));
            if (fscanf(f, "%zu %lf", &r.n, &r.val[0]) != 2) goto bad;
        } else {
            if (fscanf(f, "%zu %lf %lf %zu", &r.n, &r.sum, &r.sumabs, &r.k) != 4) goto bad;
            r.idx = calloc(r.k, sizeof(size_t));
            r.val = calloc(r.k, sizeof(double));
            for (size_t i = 0; i < r.k; i++)
                if (fscanf(f, "%zu %lf", &r.idx[i], &r.val[i]) != 2) goto bad;
        }
        fx->t = realloc(fx->t, (fx->n + 1) * sizeof(ref_tensor));
        fx->t[fx->n++] = r;
        continue;
    bad:
        fprintf(stderr, "%s: malformed entry %s\n", path, key);
        free(r.idx);
        free(r.val);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static void free_fixture(fixture *fx) {
    for (size_t i = 0; i < fx->n; i++) {
        free(fx->t[i].idx);
        free(fx->t[i].val);
    }
    free(fx->t);
}

static const ref_tensor *find(const fixture *fx, const char *key) {
    for (size_t i = 0; i < fx->n; i++)
        if (strcmp(fx->t[i].key, key) == 0) return &fx->t[i];
    fprintf(stderr, "fixture has no %s\n", key);
    return NULL;
}

/* Compare n floats against a reference entry. */
static void compare(const fixture *fx, const char *key, const float *a, size_t n) {
    const ref_tensor *r = find(fx, key);
    CHECK(r != NULL);
    if (!r) return;
    CHECK_MSG(r->n == n, "%s: %zu elements, torch has %zu", key, n, r->n);
    if (r->n != n) return;
    double floor = RTOL * (r->sumabs > 0 ? r->sumabs / (double)n : 1.0);
    int bad = 0;
    for (size_t i = 0; i < r->k; i++) {
        double want = r->val[i], got = a[r->idx[i]];
        if (!(fabs(got - want) <= RTOL * fabs(want) + floor)) {
            if (bad++ < 5)
                fprintf(stderr, "%s[%zu]: %.9g, torch %.9g\n", key, r->idx[i], got, want);
        }
    }
    if (strcmp(key, "loss") != 0) {
        double s = 0, sa = 0;
        for (size_t i = 0; i < n; i++) {
            s += a[i];
            sa += fabs(a[i]);
        }
        if (!(fabs(s - r->sum) <= RTOL * r->sumabs + 1e-12) ||
            !(fabs(sa - r->sumabs) <= RTOL * r->sumabs + 1e-12)) {
            fprintf(stderr, "%s: sum %.9g abs %.9g, torch %.9g %.9g\n", key, s, sa, r->sum,
                    r->sumabs);
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d mismatches", key, bad);
}

/* Mirror of make_fixtures.py det_values. */
static void det_values(uint64_t id, size_t n, double bound, float *out) {
    for (size_t j = 0; j < n; j++) {
        uint64_t z = (id << 32) | j;
        z = z * 0x9E3779B97F4A7C15ULL + 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        double u = (double)(z >> 40) / 16777216.0;
        out[j] = (float)(bound * (2.0 * u - 1.0));
    }
}

static int is_bn(const char *name) {
    char buf[160];
    snprintf(buf, sizeof buf, ".%s", name);
    return strstr(buf, ".bn") != NULL || strstr(name, "downsample.1") != NULL;
}

static void set_det_params(spmd_model *m) {
    float *p = spmd_model_params(m, NULL);
    size_t fan_in = 1;
    for (int k = 0; k < spmd_model_num_params(m); k++) {
        const spmd_tensor_info *t = spmd_model_param(m, k);
        if (t->ndim > 1) fan_in = t->count / (size_t)t->shape[0];
        float *v = p + t->offset;
        det_values((uint64_t)k + 1, t->count, 1.0 / sqrt((double)fan_in), v);
        if (is_bn(t->name)) {
            double base = strstr(t->name, "weight") ? 1.0 : 0.0;
            for (size_t j = 0; j < t->count; j++)
                v[j] = (float)(base + (double)v[j] / 4.0 * sqrt((double)fan_in));
        }
    }
}

static void run_classifier(const char *fixture_name, spmd_model *m, int B) {
    fixture fx;
    CHECK(load_fixture(fixture_name, &fx) == 0);
    if (fx.n == 0) return;
    set_det_params(m);
    int c, h, w;
    spmd_model_input_shape(m, &c, &h, &w);
    size_t xin = (size_t)B * c * h * w;
    float *x = malloc(sizeof(float) * xin), *dl = malloc(sizeof(float) * (size_t)B * 10);
    int *y = malloc(sizeof(int) * (size_t)B);
    det_values(1000, xin, 1.0, x);
    for (int i = 0; i < B; i++) y[i] = (7 * i + 3) % 10;
    spmd_optim_opts oo = SPMD_OPTIM_OPTS_SGD;
    oo.lr = 0.01f;
    oo.momentum = 0.5f;
    spmd_optim *opt = NULL;
    size_t np;
    float *p = spmd_model_params(m, &np), *g = spmd_model_grads(m, NULL);
    CHECK_OK(spmd_optim_create(&oo, np, &opt));
    for (int step = 1; step <= 2; step++) {
        spmd_model_zero_grad(m);
        const float *logits;
        CHECK_OK(spmd_model_forward(m, x, B, &logits));
        float loss = spmd_cross_entropy(dl, logits, y, B, 10, NULL);
        CHECK_OK(spmd_model_backward(m, dl, NULL, NULL));
        if (step == 1) {
            compare(&fx, "logits", logits, (size_t)B * 10);
            compare(&fx, "loss", &loss, 1);
            for (int k = 0; k < spmd_model_num_params(m); k++) {
                const spmd_tensor_info *t = spmd_model_param(m, k);
                char key[160];
                snprintf(key, sizeof key, "grad.%s", t->name);
                compare(&fx, key, g + t->offset, t->count);
            }
        }
        spmd_optim_step(opt, p, g);
    }
    for (int k = 0; k < spmd_model_num_params(m); k++) {
        const spmd_tensor_info *t = spmd_model_param(m, k);
        char key[160];
        snprintf(key, sizeof key, "step2.%s", t->name);
        compare(&fx, key, p + t->offset, t->count);
    }
    float *buf = spmd_model_buffers(m, NULL);
    for (int k = 0; k < spmd_model_num_buffers(m); k++) {
        const spmd_tensor_info *t = spmd_model_buffer(m, k);
        char key[160];
        snprintf(key, sizeof key, "buffer.%s", t->name);
        compare(&fx, key, buf + t->offset, t->count);
    }
    spmd_model_train(m, 0);
    const float *logits;
    CHECK_OK(spmd_model_forward(m, x, B, &logits));
    compare(&fx, "eval_logits", logits, (size_t)B * 10);
    printf("%s: %zu reference tensors compared\n", fixture_name, fx.n);
    spmd_optim_free(opt);
    free(x);
    free(dl);
    free(y);
    free_fixture(&fx);
}

static spmd_model *arch(const char *name) {
    spmd_model_opts o = SPMD_MODEL_OPTS_DEFAULT;
    o.arch = name;
    o.dropout = 0;
    spmd_model *m = NULL;
    char err[200];
    CHECK_OK(spmd_model_create(&o, &m, err, sizeof err));
    return m;
}

/* The graph of make_fixtures.py's TinyRes. */
static spmd_model *tinyres(void) {
    spmd_model *m = spmd__model_new("tinyres", 1, 8, 8, 0);
    int x = spmd__add_conv(m, 0, 4, 3, 1, 1, 0, "conv1");
    x = spmd__add_bn(m, x, "bn1");
    x = spmd__add_relu(m, x);
    x = spmd__add_basic_block(m, x, 4, 1, "layer1.0");
    x = spmd__add_basic_block(m, x, 8, 2, "layer2.0");
    x = spmd__add_gap(m, x);
    spmd__add_linear(m, x, 10, 1, "fc");
    char err[200];
    if (spmd__model_finish(m, 1, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        spmd_model_free(m);
        return NULL;
    }
    return m;
}

static void run_optim(void) {
    fixture fx;
    CHECK(load_fixture("nn_optim.txt", &fx) == 0);
    if (fx.n == 0) return;
    struct {
        const char *name;
        spmd_optim_opts o;
    } cases[] = {
        {"sgd", {SPMD_OPTIM_SGD, 0.1f, 0.0f, 0.0f, 0, 0.0f, 0.9f, 0.999f, 1e-8f}},
        {"sgd_momentum", {SPMD_OPTIM_SGD, 0.1f, 0.9f, 0.1f, 0, 0.01f, 0.9f, 0.999f, 1e-8f}},
        {"sgd_nesterov", {SPMD_OPTIM_SGD, 0.1f, 0.9f, 0.0f, 1, 0.01f, 0.9f, 0.999f, 1e-8f}},
        {"adam", {SPMD_OPTIM_ADAM, 0.01f, 0.0f, 0.0f, 0, 0.01f, 0.9f, 0.999f, 1e-8f}},
        {"adamw", {SPMD_OPTIM_ADAMW, 0.01f, 0.0f, 0.0f, 0, 0.1f, 0.9f, 0.999f, 1e-8f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float p[10], g[10];
        det_values(2000, 10, 1.0, p);
        spmd_optim *o = NULL;
        CHECK_OK(spmd_optim_create(&cases[c].o, 10, &o));
        if (!o) continue;
        for (int s = 0; s < 3; s++) {
            det_values(2001 + (uint64_t)s, 10, 1.0, g);
            spmd_optim_step(o, p, g);
        }
        compare(&fx, cases[c].name, p, 10);
        spmd_optim_free(o);
    }
    free_fixture(&fx);
}

int main(void) {
    spmd_nn_set_threads(1);
    spmd_model *m = arch("mlp");
    if (m) run_classifier("nn_mlp.txt", m, 8);
    spmd_model_free(m);
    m = arch("cnn");
    if (m) run_classifier("nn_cnn.txt", m, 4);
    spmd_model_free(m);
    m = tinyres();
    CHECK(m != NULL);
    if (m) run_classifier("nn_tinyres.txt", m, 4);
    spmd_model_free(m);
    run_optim();
    TEST_MAIN_END();
}
