/* ckpt_stale.c — the temporaries of spmd_ckpt_save that a killed writer
 * leaves behind.  A temporary is named "<dir>/.<base>.tmp-<host>-<pid>-XXXXXX",
 * so a later save (or a resume) can tell a dead writer's file (same host, no
 * such process) from one being written right now, by this or another process
 * or by a writer on another host sharing the folder, and removes only the
 * former. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data_internal.h"

/* Split path into its folder ("." when none) and basename. */
static int split(const char *path, char *dir, size_t dirlen, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!**base) return -1;
    if (!slash) snprintf(dir, dirlen, ".");
    else if (slash == path) snprintf(dir, dirlen, "/");
    else snprintf(dir, dirlen, "%.*s", (int)(slash - path), path);
    return 0;
}

/* ".<base>.tmp-<host>-" (the part before the pid). */
static void name_prefix(const char *base, char *out, size_t outlen) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    snprintf(out, outlen, ".%s.tmp-%s-", base, host);
}

int spmd__ckpt_tmp_template(const char *path, char *out, size_t outlen) {
    char dir[4096], prefix[1024];
    const char *base;
    if (split(path, dir, sizeof dir, &base)) return -1;
    name_prefix(base, prefix, sizeof prefix);
    int n = snprintf(out, outlen, "%.*s%s%ld-XXXXXX", (int)(base - path), path, prefix, (long)getpid());
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

spmd_status spmd_ckpt_remove_stale(const char *path, int *removed, char *err, size_t errlen) {
    if (removed) *removed = 0;
    if (!path) return spmd__fail(err, errlen, SPMD_ERR_INVALID, "spmd_ckpt_remove_stale: no path");
    char dir[4096], prefix[1024];
    const char *base;
    if (split(path, dir, sizeof dir, &base))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s: names a directory", path);
    name_prefix(base, prefix, sizeof prefix);
    size_t pl = strlen(prefix);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return SPMD_OK;   /* no folder yet: nothing stale */
        return spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "%s: cannot list", dir);
    }
    spmd_status st = SPMD_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, pl) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (errno || end == e->d_name + pl || pid <= 0 || strncmp(end, "-", 1) || strlen(end + 1) != 6) continue;
        if (pid == (long)getpid()) continue;                /* ours: being written */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer lives */
        char full[4096 + 512];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (unlink(full) == 0) {
            if (removed) (*removed)++;
        } else if (errno != ENOENT && st == SPMD_OK) {
            st = spmd__fail_errno(err, errlen, SPMD_ERR_IO, errno, "cannot remove the stale %s", full);
        }
    }
    closedir(d);
    return st;
}
