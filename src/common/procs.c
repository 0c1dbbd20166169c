/* procs.c — process-lifecycle helpers (procs.h), from /proc. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/procs.h"

#define PF_EXITING_FLAG 0x00000004u /* include/linux/sched.h */

/* State letter and flags of pid from /proc/<pid>/stat: 1, 0 when unreadable,
 * -1 when the process is gone altogether. */
static int proc_stat(pid_t pid, char *state, unsigned long *flags) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -1 : 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    /* "pid (comm) state ppid pgrp session tty tpgid flags ..."; comm may hold ')' */
    char *p = strrchr(buf, ')');
    if (!p || !p[1]) return 0;
    int ppid, pgrp, session, tty, tpgid;
    return sscanf(p + 2, "%c %d %d %d %d %d %lu", state, &ppid, &pgrp, &session, &tty, &tpgid, flags) == 7;
}

int spmd__proc_exiting(pid_t pid) {
    char state = 0;
    unsigned long flags = 0;
    int r = proc_stat(pid, &state, &flags);
    if (r <= 0) return r < 0;
    return state == 'Z' || state == 'X' || (flags & PF_EXITING_FLAG) != 0;
}

int spmd__proc_stopped(pid_t pid) {
    char state = 0;
    unsigned long flags = 0;
    if (proc_stat(pid, &state, &flags) <= 0) return 0;
    return state == 'T' ? 1 : state == 't' ? 2 : 0;
}

/* Does /proc/<pid>/environ hold `entry` as one of its NUL-separated strings? */
static int environ_has(const char *pid, const char *entry, size_t elen) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    int found = 0;
    while (buf) {
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        if (len == cap) {
            char *nb = cap < (1u << 24) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    close(fd);
    if (!buf) return 0;
    buf[len] = 0;
    for (size_t i = 0; i < len;) {
        size_t l = strnlen(buf + i, len - i);
        if (l == elen && memcmp(buf + i, entry, elen) == 0) {
            found = 1;
            break;
        }
        i += l + 1;
    }
    free(buf);
    return found;
}

int spmd__proc_sweep(const char *entry, pid_t skip1, pid_t skip2) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    pid_t self = getpid();
    uid_t uid = getuid();
    size_t elen = strlen(entry);
    int killed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end = NULL;
        long v = strtol(de->d_name, &end, 10);
        if (!end || *end || v <= 1) continue;
        pid_t pid = (pid_t)v;
        if (pid == self || pid == skip1 || pid == skip2) continue;
        char path[64];
        struct stat sb;
        snprintf(path, sizeof path, "/proc/%ld", v);
        if (stat(path, &sb) != 0 || sb.st_uid != uid) continue;
        if (spmd__proc_exiting(pid)) continue; /* already on its way */
        if (environ_has(de->d_name, entry, elen) && kill(pid, SIGKILL) == 0) killed++;
    }
    closedir(d);
    return killed;
}
