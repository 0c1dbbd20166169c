/* flight.c — the workers' flight records (src/group/recorder.h): where they
 * go, how spmdrun asks for them, and the diagnosis it prints from them.
 *
 *   directory  SPMD_RECORDER_DIR when the user set it; else
 *              <log-dir>/<run-id>/attempt_<k>/flight when logs are kept;
 *              else a private temporary directory removed at exit
 *   asking     SIGUSR1 to spmdrun writes a new generation number to
 *              <dir>/request; each group's progress thread notices it within
 *              a second and writes its record; spmdrun waits (bounded) for
 *              one record per local worker and prints the diagnosis — the
 *              job keeps running
 *   failure    every rank that can writes its record when its group fails;
 *              spmdrun prints the diagnosis above its failure report
 *   leftovers  the temporary directory is named spmdrun_flight_<pid>_XXXXXX;
 *              a SIGKILLed spmdrun cannot remove its own, so each spmdrun
 *              that makes one first removes those of the same user whose
 *              spmdrun (the pid in the name) is gone
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "group/flight_record.h"
#include "spmdrun.h"

#define MAX_RECORDS 4096

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int make_dir(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

static void remove_tree(const char *dir, int depth);

/* Directories spmdrun_flight_<pid>_* in tmp that are ours (a real directory,
 * owned by this user) and whose spmdrun no longer runs: removed. */
static void remove_stale(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return;
    static const char prefix[] = "spmdrun_flight_";
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, sizeof prefix - 1)) continue;
        char *end = NULL;
        long pid = strtol(de->d_name + sizeof prefix - 1, &end, 10);
        if (pid <= 0 || !end || *end != '_' || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask) */
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", tmp, de->d_name) >= (int)sizeof path) continue;
        if (lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        remove_tree(path, 1);
    }
    closedir(d);
}

int sr_flight_begin(sr_agent *a, int attempt, char *err, size_t errlen) {
    const char *user = getenv("SPMD_RECORDER_DIR");
    a->flight_since = wall_now() - 1.0; /* records of earlier attempts or jobs are not this one's */
    a->flight_gen = 0;
    if (user && *user) {
        snprintf(a->flight_dir, sizeof a->flight_dir, "%s", user);
    } else if (a->log_root[0]) {
        snprintf(a->flight_dir, sizeof a->flight_dir, "%s/attempt_%d/flight", a->log_root, attempt);
    } else {
        if (!a->flight_tmp[0]) {
            const char *t = getenv("TMPDIR");
            if (!t || !*t) t = "/tmp";
            remove_stale(t);
            snprintf(a->flight_tmp, sizeof a->flight_tmp, "%s/spmdrun_flight_%d_XXXXXX", t, (int)getpid());
            if (!mkdtemp(a->flight_tmp)) {
                snprintf(err, errlen, "cannot create a directory for flight records %s: %s", a->flight_tmp,
                         strerror(errno));
                a->flight_tmp[0] = a->flight_dir[0] = 0;
                return -1;
            }
        }
        snprintf(a->flight_dir, sizeof a->flight_dir, "%s/attempt_%d", a->flight_tmp, attempt);
    }
    if (make_dir(a->flight_dir) < 0) {
        snprintf(err, errlen, "cannot create the flight-record directory %s: %s", a->flight_dir, strerror(errno));
        a->flight_dir[0] = 0;
        return -1;
    }
    return 0;
}

int sr_flight_env(const sr_agent *a, char ***envp) {
    if (!a->flight_dir[0]) return 0;
    static const char name[] = "SPMD_RECORDER_DIR=";
    size_t len = strlen(name) + strlen(a->flight_dir) + 1;
    char *entry = malloc(len);
    if (!entry) return -1;
    snprintf(entry, len, "%s%s", name, a->flight_dir);
    char **env = *envp;
    size_t n = 0;
    for (; env[n]; n++)
        if (!strncmp(env[n], name, sizeof name - 1)) {
            free(env[n]);
            env[n] = entry;
            return 0;
        }
    char **grown = realloc(env, (n + 2) * sizeof *grown);
    if (!grown) {
        free(entry);
        return -1;
    }
    grown[n] = entry;
    grown[n + 1] = NULL;
    *envp = grown;
    return 0;
}

uint64_t sr_flight_request(sr_agent *a) {
    char path[PATH_MAX + 32], tmp[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/request", a->flight_dir);
    snprintf(tmp, sizeof tmp, "%s/.request.%d", a->flight_dir, (int)getpid());
    uint64_t gen = ++a->flight_gen;
    /* A new file each time (rename): the workers notice a new inode or mtime. */
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%llu\n", (unsigned long long)gen) < 0 || fclose(f) != 0 || rename(tmp, path) < 0) {
        fprintf(stderr, "spmdrun: cannot ask for flight records (%s): %s\n", path, strerror(errno));
        unlink(tmp);
    }
    return gen;
}

/* Every record of this attempt in the directory (answering request `gen` or
 * later when gen > 0), parsed; returns how many.  Unreadable or foreign files
 * are skipped (they are named on stderr when `loud`). */
static int load(const sr_agent *a, uint64_t gen, spmd__flight_record *out, int cap, int loud) {
    DIR *d = opendir(a->flight_dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while (n < cap && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".rec")) continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", a->flight_dir, de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat sb;
        char *text = NULL;
        ssize_t got = -1;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size <= SPMD__FLIGHT_MAX_BYTES &&
            (text = malloc((size_t)sb.st_size + 1)))
            got = read(fd, text, (size_t)sb.st_size);
        close(fd);
        char err[256];
        if (got < 0 || spmd__flight_parse(text, (size_t)got, &out[n], err, sizeof err) != SPMD_OK) {
            if (loud) fprintf(stderr, "spmdrun: skipping %s: %s\n", path, got < 0 ? "unreadable" : err);
            free(text);
            continue;
        }
        free(text);
        if (out[n].time < a->flight_since || (gen && out[n].request < gen)) {
            spmd__flight_free(&out[n]);
            continue;
        }
        n++;
    }
    closedir(d);
    return n;
}

static void free_all(spmd__flight_record *r, int n) {
    for (int i = 0; i < n; i++) spmd__flight_free(&r[i]);
    free(r);
}

int sr_flight_answered(const sr_agent *a, uint64_t gen) {
    spmd__flight_record *r = calloc(MAX_RECORDS, sizeof *r);
    if (!r) return 0;
    int n = load(a, gen, r, MAX_RECORDS, 0);
    free_all(r, n);
    return n;
}

int sr_flight_culprit(const sr_agent *a, int world) {
    if (!a->flight_dir[0] || world < 1) return -1;
    spmd__flight_record *r = calloc(MAX_RECORDS, sizeof *r);
    int *votes = calloc((size_t)world, sizeof *votes);
    int n = r && votes ? load(a, 0, r, MAX_RECORDS, 0) : 0, best = -1;
    for (int i = 0; i < n; i++)
        if (r[i].status && r[i].world == world && r[i].culprit >= 0 && r[i].culprit < world) votes[r[i].culprit]++;
    for (int k = 0; votes && k < world; k++)
        if (votes[k] && (best < 0 || votes[k] > votes[best])) best = k;
    free(votes);
    if (r) free_all(r, n);
    return best;
}

int sr_flight_missing(const sr_agent *a, const pid_t *pids, int n) {
    if (!a->flight_dir[0]) return -1;
    spmd__flight_record *r = calloc(MAX_RECORDS, sizeof *r);
    if (!r) return -1;
    int nr = load(a, 0, r, MAX_RECORDS, 0), missing = 0;
    for (int k = 0; k < n; k++) {
        int has = 0;
        for (int i = 0; i < nr && !has; i++)
            has = r[i].pid == (long)pids[k] && (!strcmp(r[i].reason, "failure") || !strcmp(r[i].reason, "timeout"));
        missing += !has;
    }
    free_all(r, nr);
    return nr ? missing : -1;
}

void sr_flight_report(const sr_agent *a, const char *why, uint64_t gen) {
    if (!a->flight_dir[0]) return;
    spmd__flight_record *r = calloc(MAX_RECORDS, sizeof *r);
    if (!r) return;
    int n = load(a, gen, r, MAX_RECORDS, 1);
    size_t cap = 4096 + (size_t)n * 256;
    char *text = n ? malloc(cap) : NULL;
    if (text) {
        spmd__flight_diagnose(r, n, text, cap);
        /* one block, each line of the diagnosis indented */
        size_t outcap = cap + 2 * cap / 40 + 512, o = 0;
        char *out = malloc(outcap);
        if (out) {
            o += (size_t)snprintf(out, outcap, "spmdrun: %s; the flight records (%s) say:\n", why, a->flight_dir);
            for (char *line = text; *line && o < outcap;) {
                char *nl = strchr(line, '\n');
                size_t l = nl ? (size_t)(nl - line) : strlen(line);
                o += (size_t)snprintf(out + o, outcap - o, "  %.*s\n", (int)l, line);
                line += l + (nl != NULL);
            }
            if (o >= outcap) o = outcap - 1;
            (void)sr_write_all(2, out, o);
            free(out);
        }
        free(text);
    } else if (gen) {
        fprintf(stderr, "spmdrun: %s; no flight record came back (no group formed yet?)\n", why);
    }
    free_all(r, n);
}

/* rm -r of a directory spmdrun made (one level of subdirectories). */
static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char path[PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            if (unlink(path) < 0 && (errno == EISDIR || errno == EPERM) && depth > 0) remove_tree(path, depth - 1);
        }
        closedir(d);
    }
    rmdir(dir);
}

void sr_flight_end(sr_agent *a) {
    if (a->flight_tmp[0]) remove_tree(a->flight_tmp, 1);
    a->flight_tmp[0] = 0;
}
