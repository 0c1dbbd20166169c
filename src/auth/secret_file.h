/* src/auth/secret_file.h — reading a secret from a file without trusting the
 * file: SPMD_AUTH_FILE and the per-user secret (user_secret.c) both go
 * through spmd__secret_file_read, which refuses, naming the file, what is
 * wrong and the fix:
 *   - a symbolic link (O_NOFOLLOW), a FIFO, device or directory (the open
 *     never blocks: O_NONBLOCK; everything is checked on the descriptor);
 *   - a file owned by another user than the one running (root's files are
 *     accepted: root can replace any file anyway);
 *   - any permission bit for group or others (chmod 600);
 *   - a directory holding it that group or others may write to, unless it is
 *     sticky (like /tmp: nobody else can rename or delete our file there) —
 *     otherwise another user could swap the file between our check and use.
 * The secret is the file's first line with leading and trailing whitespace
 * (spaces, tabs, CR) removed. */
#ifndef SPMD_AUTH_SECRET_FILE_H
#define SPMD_AUTH_SECRET_FILE_H

#include <stddef.h>
#include "common/common.h"

/* Read and check; `what` names the source in errors ("SPMD_AUTH_FILE").  On
 * success buf[0..*len) holds the secret (not NUL-terminated); *len > cap
 * means the secret is longer than cap (only cap bytes were copied). */
spmd_status spmd__secret_file_read(const char *path, const char *what, char *buf, size_t cap,
                                   size_t *len, char *err, size_t errlen);

/* Strip leading and trailing blanks (space, tab, CR, LF) of s[0..*n):
 * returns the new start, *n the new length. */
const char *spmd__secret_trim(const char *s, size_t *n);

#endif
