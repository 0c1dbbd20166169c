/* src/auth/user_secret.h — the per-user secret file (rules in user_secret.c
 * and docs/SECURITY.md): the job secret when no SPMD_AUTH_TOKEN,
 * SPMD_AUTH_FILE or launcher's secret is present. */
#ifndef SPMD_AUTH_USER_SECRET_H
#define SPMD_AUTH_USER_SECRET_H

#include <stddef.h>
#include "common/common.h"

/* The file's path and its directory ($XDG_CONFIG_HOME/spmd or ~/.config/spmd). */
spmd_status spmd__user_secret_path(char *path, size_t pathlen, char *dir, size_t dirlen, char *err,
                                   size_t errlen);
/* Read the per-user secret, creating it (and its directories, mode 700) on
 * first use; checked like SPMD_AUTH_FILE.  path gets the file's path. */
spmd_status spmd__user_secret_read(char *buf, size_t cap, size_t *len, char *path, size_t pathlen,
                                   char *err, size_t errlen);

#endif
