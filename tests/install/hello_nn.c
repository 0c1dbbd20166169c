/* A program of another project using the installed training stack: a
 * model's state_dict round trip through spmd_model_save / spmd_model_load. */
#include <spmd/nn.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    spmd_model_opts o = SPMD_MODEL_OPTS_DEFAULT;
    o.arch = "mlp";
    spmd_model *a, *b;
    char err[256];
    if (spmd_model_create(&o, &a, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    o.seed = 99;
    if (spmd_model_create(&o, &b, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    const char *path = "hello_nn.safetensors";
    if (spmd_model_save(a, path, err, sizeof err) || spmd_model_load(b, path, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t n;
    float *pa = spmd_model_params(a, &n), *pb = spmd_model_params(b, NULL);
    int same = memcmp(pa, pb, n * sizeof(float)) == 0;
    printf("state_dict of %zu floats: %s\n", n, same ? "round trip exact" : "DIFFERS");
    remove(path);
    spmd_model_free(a);
    spmd_model_free(b);
    return !same;
}
