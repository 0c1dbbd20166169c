/* user_secret.c — the per-user secret: the job secret when nothing else
 * names one (the model is Erlang distribution's cookie).
 *
 * Path: $XDG_CONFIG_HOME/spmd/secret when XDG_CONFIG_HOME is an absolute
 * path, else $HOME/.config/spmd/secret (HOME unset or empty: the home
 * directory of the passwd entry of this uid).  Every process of one user on
 * one host, and on every host that shares the home directory, reads the same
 * file, so they prove the same secret with no set-up; another user cannot
 * read it (mode 600, checked on every use by spmd__secret_file_read).
 *
 * Creation on first use races between the ranks of a job that start at
 * once: each racer writes a complete random secret to a file of its own
 * (O_EXCL, mode 600) and link()s it to the final name, which fails with
 * EEXIST for all but the first; everyone then reads the final name, so every
 * racer ends with the same secret and nobody ever reads a half-written one. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "auth/secret_file.h"
#include "auth/user_secret.h"
#include "spmd/auth.h"

spmd_status spmd__user_secret_path(char *out, size_t outlen, char *dir, size_t dirlen, char *err,
                                   size_t errlen) {
    const char *xdg = getenv("XDG_CONFIG_HOME");
    char base[4096];
    if (xdg && xdg[0] == '/') snprintf(base, sizeof base, "%s", xdg);
    else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            struct passwd pw, *res = NULL;
            char pwbuf[4096];
            if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res && res->pw_dir &&
                res->pw_dir[0] == '/')
                home = res->pw_dir;
        }
        if (!home || home[0] != '/')
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "no job secret: none is set and the per-user secret file has no home "
                              "(HOME and XDG_CONFIG_HOME unset, no home directory for uid %u): set "
                              "HOME or XDG_CONFIG_HOME, or SPMD_AUTH_TOKEN / SPMD_AUTH_FILE for "
                              "every process (or SPMD_AUTH=off)",
                              (unsigned)geteuid());
        snprintf(base, sizeof base, "%s/.config", strcmp(home, "/") ? home : "");
    }
    int n = snprintf(dir, dirlen, "%s/spmd", base);
    int m = snprintf(out, outlen, "%s/spmd/secret", base);
    if (n < 0 || (size_t)n >= dirlen || m < 0 || (size_t)m >= outlen)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID, "per-user secret path under %s is too long", base);
    return SPMD_OK;
}

static spmd_status no_dir(const char *path, const char *dir, int e, char *err, size_t errlen) {
    return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                      "cannot create the per-user secret %s: %s: %s; set SPMD_AUTH_TOKEN or "
                      "SPMD_AUTH_FILE for every process, or XDG_CONFIG_HOME to a directory of "
                      "your own (or SPMD_AUTH=off)",
                      path, dir, strerror(e));
}

/* Write a fresh secret to a private temporary file, then link it to `path`. */
static spmd_status create(const char *path, const char *dir, char *err, size_t errlen) {
    char token[SPMD_AUTH_TOKEN_CHARS + 2], tmp[4200];
    if (spmd_auth_new_token(token) != SPMD_OK)
        return spmd__fail(err, errlen, SPMD_ERR_SYSTEM, "creating %s: no randomness", path);
    unsigned long long salt = 0;
    for (int i = 0; i < 8; i++) salt = salt * 16 + (unsigned long long)(token[i] % 16);
    snprintf(tmp, sizeof tmp, "%s/.secret.%ld.%llx", dir, (long)getpid(), salt);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int e = errno;
        memset(token, 0, sizeof token);
        return no_dir(path, tmp, e, err, errlen);
    }
    size_t len = strlen(token);
    token[len++] = '\n';
    int e = 0;
    if (write(fd, token, len) != (ssize_t)len) e = errno ? errno : EIO;
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    memset(token, 0, sizeof token);
    if (!e && link(tmp, path) != 0 && errno != EEXIST) e = errno; /* EEXIST: another racer won */
    unlink(tmp);
    return e ? no_dir(path, tmp, e, err, errlen) : SPMD_OK;
}

/* mkdir that accepts an existing directory (its checks come later). */
static int make_dir(const char *d) { return mkdir(d, 0700) == 0 || errno == EEXIST ? 0 : errno; }

spmd_status spmd__user_secret_read(char *buf, size_t cap, size_t *len, char *path, size_t pathlen,
                                   char *err, size_t errlen) {
    char dir[4096];
    spmd_status st = spmd__user_secret_path(path, pathlen, dir, sizeof dir, err, errlen);
    if (st) return st;
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            int e = errno;
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "cannot read the per-user secret %s: %s; set SPMD_AUTH_TOKEN or "
                              "SPMD_AUTH_FILE for every process, or XDG_CONFIG_HOME to a directory "
                              "of your own (or SPMD_AUTH=off)",
                              path, strerror(e));
        }
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(dir, '/') - dir), dir);
        int e = make_dir(parent);
        if (e) return no_dir(path, parent, e, err, errlen);
        if ((e = make_dir(dir))) return no_dir(path, dir, e, err, errlen);
        if ((st = create(path, dir, err, errlen))) return st;
    }
    return spmd__secret_file_read(path, "per-user secret", buf, cap, len, err, errlen);
}
