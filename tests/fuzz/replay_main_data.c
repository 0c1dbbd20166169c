/* replay_main_data.c — runs a libFuzzer harness (LLVMFuzzerTestOneInput)
 * without libFuzzer, as a normal test: over files given on the command line
 * (a corpus, or a crash to reproduce), else over a deterministic stream of
 * pseudo-random inputs and of mutations of the harness's valid seeds
 * (fuzz_seed_input).  Each input is copied to a buffer of exactly its size so
 * ASan catches any read past the end.  SPMD_FUZZ_ITERS sets the count
 * (default 100000), SPMD_FUZZ_SEED the stream. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t fuzz_seed_input(unsigned i, uint8_t *buf, size_t cap);

static uint64_t state;
static uint64_t rnd(void) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

#define CAP 4096

static void run(const uint8_t *buf, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    if (n) memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
}

/* One structural change to buf[0..*n). */
static void mutate(uint8_t *buf, size_t *n) {
    static const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '\\', '{', '}', '[', ']', ',',
                                    ':', '0', '9', '-', '.', 'e', 'u', ' '};
    static const uint64_t ints[] = {0, 1, 0x7f, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0xffffffff,
                                    0x100000000ull, UINT64_MAX, 0x8000000000000000ull};
    size_t len = *n;
    switch (below(8)) {
    case 0: /* flip a bit */
        if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
        break;
    case 1: /* an interesting byte */
        if (len) buf[below(len)] = bytes[below(sizeof bytes)];
        break;
    case 2: /* truncate */
        *n = below(len + 1);
        break;
    case 3: /* insert random bytes */
    {
        size_t k = 1 + below(8), at = below(len + 1);
        if (len + k > CAP) break;
        memmove(buf + at + k, buf + at, len - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)rnd();
        *n = len + k;
        break;
    }
    case 4: /* delete a range */
    {
        if (!len) break;
        size_t at = below(len), k = 1 + below(len - at);
        memmove(buf + at, buf + at + k, len - at - k);
        *n = len - k;
        break;
    }
    case 5: /* duplicate a range */
    {
        if (!len) break;
        size_t at = below(len), k = 1 + below(len - at < 32 ? len - at : 32);
        if (len + k > CAP) break;
        memmove(buf + at + k, buf + at, len - at);
        *n = len + k;
        break;
    }
    case 6: /* an interesting integer, either byte order, 4 or 8 bytes */
    {
        size_t w = below(2) ? 8 : 4;
        if (len < w) break;
        size_t at = below(len - w + 1);
        uint64_t v = ints[below(sizeof ints / sizeof ints[0])];
        int be = (int)below(2);
        for (size_t i = 0; i < w; i++)
            buf[at + i] = (uint8_t)(v >> (8 * (be ? w - 1 - i : i)));
        break;
    }
    default: /* a digit run changed (offsets and shapes live in digits) */
        for (size_t i = below(len + 1); i < len; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                buf[i] = (uint8_t)('0' + below(10));
                break;
            }
        }
        break;
    }
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int a = 1; a < argc; a++) {
            FILE *f = fopen(argv[a], "rb");
            if (!f) {
                perror(argv[a]);
                return 1;
            }
            static uint8_t buf[1 << 20];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            run(buf, n);
        }
        printf("replayed %d file(s)\n", argc - 1);
        return 0;
    }
    const char *it = getenv("SPMD_FUZZ_ITERS"), *sd = getenv("SPMD_FUZZ_SEED");
    long iters = it ? atol(it) : 100000;
    state = sd ? strtoull(sd, NULL, 0) : 0x5eed;
    static uint8_t buf[CAP];
    size_t seeds = 0;
    for (long i = 0; i < iters; i++) {
        size_t n;
        if (i % 5 == 0) { /* pure noise */
            n = below(300);
            for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)rnd();
        } else { /* a valid seed with a few mutations (the first pass unmutated) */
            n = fuzz_seed_input((unsigned)below(64), buf, CAP);
            if (i >= 5) {
                int m = 1 + (int)below(6);
                while (m--) mutate(buf, &n);
            } else {
                seeds++;
            }
        }
        run(buf, n);
    }
    printf("ran %ld inputs (%zu unmutated seeds)\n", iters, seeds);
    return 0;
}
