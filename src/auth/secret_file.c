/* secret_file.c — reading a secret file that nobody else controls (see
 * secret_file.h for the rules and why). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "auth/secret_file.h"

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

const char *spmd__secret_trim(const char *s, size_t *n) {
    while (*n && blank(*s)) s++, (*n)--;
    while (*n && blank(s[*n - 1])) (*n)--;
    return s;
}

static const char *kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The directory holding `path`: owned by us or root, and writable by group
 * or others only when sticky (then they cannot rename or delete our file). */
static spmd_status check_dir(const char *path, const char *what, char *err, size_t errlen) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat d;
    if (stat(dir, &d) != 0)
        return spmd__fail_errno(err, errlen, SPMD_ERR_INVALID, errno, "%s %s: directory %s", what, path, dir);
    if (d.st_uid != geteuid() && d.st_uid != 0)
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "%s %s: its directory %s belongs to uid %u, not to this user (uid %u), who "
                          "could replace the file: keep the secret in a directory of your own",
                          what, path, dir, (unsigned)d.st_uid, (unsigned)geteuid());
    if ((d.st_mode & (S_IWGRP | S_IWOTH)) && !(d.st_mode & S_ISVTX))
        return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                          "%s %s: its directory %s is writable by group or others (mode %03o), who "
                          "could replace the file: chmod go-w %s, or move the file",
                          what, path, dir, (unsigned)(d.st_mode & 0777), dir);
    return SPMD_OK;
}

spmd_status spmd__secret_file_read(const char *path, const char *what, char *buf, size_t cap,
                                   size_t *len, char *err, size_t errlen) {
    *len = 0;
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            return spmd__fail(err, errlen, SPMD_ERR_INVALID,
                              "%s %s is a symbolic link: name the file itself", what, path);
        return spmd__fail_errno(err, errlen, SPMD_ERR_INVALID, e, "%s %s", what, path);
    }
    struct stat sb;
    spmd_status st = SPMD_OK;
    if (fstat(fd, &sb) != 0)
        st = spmd__fail_errno(err, errlen, SPMD_ERR_INVALID, errno, "%s %s", what, path);
    else if (!S_ISREG(sb.st_mode))
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID, "%s %s is %s, not a regular file", what, path,
                        kind(sb.st_mode));
    else if (sb.st_uid != geteuid() && sb.st_uid != 0)
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID,
                        "%s %s belongs to uid %u, not to this user (uid %u): another user may have "
                        "planted it; remove it and create your own (mode 600)",
                        what, path, (unsigned)sb.st_uid, (unsigned)geteuid());
    else if (sb.st_mode & (S_IRWXG | S_IRWXO))
        st = spmd__fail(err, errlen, SPMD_ERR_INVALID,
                        "%s %s is accessible by group or others (mode %03o): chmod 600 %s", what,
                        path, (unsigned)(sb.st_mode & 0777), path);
    if (!st) st = check_dir(path, what, err, errlen);
    if (st) {
        close(fd);
        return st;
    }
    /* A regular file never blocks; O_NONBLOCK is harmless here.  Read one
     * byte more than fits, so an over-long secret is seen as such. */
    char tmp[4096];
    size_t n = 0, want = cap + 1 < sizeof tmp ? cap + 1 : sizeof tmp;
    while (n < want) {
        ssize_t r = read(fd, tmp + n, want - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            memset(tmp, 0, sizeof tmp);
            return spmd__fail_errno(err, errlen, SPMD_ERR_INVALID, e, "%s %s: read", what, path);
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    size_t lead = 0;
    while (lead < n && blank(tmp[lead])) lead++; /* a first line of blanks is not the secret */
    char *nl = memchr(tmp + lead, '\n', n - lead);
    if (nl) n = (size_t)(nl - tmp);
    const char *s = spmd__secret_trim(tmp, &n);
    memcpy(buf, s, n < cap ? n : cap);
    *len = n; /* > cap: the caller's length check names it */
    memset(tmp, 0, sizeof tmp);
    return SPMD_OK;
}
