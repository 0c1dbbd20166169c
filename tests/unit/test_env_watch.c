/* spmd__env_watched gives getenv's answer after every way a program changes
 * its environment between calls: setenv of a new or a present name,
 * unsetenv (of the name, of another, of the last entry), putenv (and its
 * buffer rewritten), clearenv, and in another thread with its own view. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "harness.h"

static const char *const NAME = "SPMD_ALGO_ALL_REDUCE";
static const char *const OTHER = "SPMD_ALGO_BROADCAST";

/* spmd__env_watched(name) is getenv(name), value and presence */
static int agrees(const char *name) {
    const char *w = spmd__env_watched(name), *g = getenv(name);
    if (!w || !g) return w == g;
    return strcmp(w, g) == 0;
}
#define AGREE(name) CHECK(agrees(name))

static void *other_thread(void *arg) {
    (void)arg;
    AGREE(NAME);
    CHECK(spmd__env_watched(NAME) && !strcmp(spmd__env_watched(NAME), "tree"));
    setenv(NAME, "ring", 1);
    AGREE(NAME);
    return NULL;
}

int main(void) {
    unsetenv(NAME);
    unsetenv(OTHER);
    AGREE(NAME);
    CHECK(spmd__env_watched(NAME) == NULL);
    AGREE(NAME); /* from the kept view */

    setenv(NAME, "ring", 1); /* a new name: appended */
    AGREE(NAME);
    CHECK(!strcmp(spmd__env_watched(NAME), "ring"));
    setenv(NAME, "tree", 1); /* a present name: its entry replaced */
    AGREE(NAME);
    CHECK(!strcmp(spmd__env_watched(NAME), "tree"));
    setenv(NAME, "rd", 0); /* no overwrite: unchanged */
    AGREE(NAME);

    setenv(OTHER, "tree", 1); /* another name after it */
    AGREE(NAME);
    AGREE(OTHER);
    setenv(NAME, "rd", 1); /* replaced where it is, not the last entry */
    AGREE(NAME);
    CHECK(!strcmp(spmd__env_watched(NAME), "rd"));
    unsetenv(NAME); /* removed from the middle: the rest shift down */
    AGREE(NAME);
    AGREE(OTHER);
    CHECK(spmd__env_watched(NAME) == NULL);
    setenv(NAME, "ring", 1);
    unsetenv(OTHER); /* the length is the same as before these two */
    AGREE(NAME);
    AGREE(OTHER);
    CHECK(!strcmp(spmd__env_watched(NAME), "ring"));
    unsetenv(NAME); /* the last entry */
    AGREE(NAME);
    setenv(NAME, "ring", 1); /* back, perhaps as the same string */
    AGREE(NAME);

    static char buf[] = "SPMD_ALGO_ALL_REDUCE=ring";
    putenv(buf); /* the buffer itself becomes the entry */
    AGREE(NAME);
    memcpy(buf + strlen(NAME) + 1, "tree", 4);
    AGREE(NAME);
    CHECK(!strcmp(spmd__env_watched(NAME), "tree"));
    memcpy(buf, "XPMD", 4); /* rewritten to another name */
    AGREE(NAME);
    CHECK(spmd__env_watched(NAME) == NULL);

    setenv(NAME, "tree", 1);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_join(t, NULL);
    AGREE(NAME); /* changed by the other thread */
    CHECK(!strcmp(spmd__env_watched(NAME), "ring"));

    clearenv();
    AGREE(NAME);
    CHECK(spmd__env_watched(NAME) == NULL);
    setenv(NAME, "rd", 1);
    AGREE(NAME);
    CHECK(!strcmp(spmd__env_watched(NAME), "rd"));

    /* more names than the view keeps: still getenv's answers */
    static char names[40][24];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "SPMD_TEST_WATCH_%d", i);
        if (i % 2) setenv(names[i], "x", 1);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 40; i++) AGREE(names[i]);
    TEST_MAIN_END();
}
