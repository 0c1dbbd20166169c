/* src/ckpt/ckpt_internal.h — what the files of src/ckpt share. */
#ifndef SPMD_CKPT_INTERNAL_H
#define SPMD_CKPT_INTERNAL_H

#include <stddef.h>
#include "spmd/ckpt.h"

/* The rules every metadata obeys, decoded or about to be encoded: keys
 * unique, each storage item naming a tensor entry and one of its chunks
 * (offset and rank equal) or a bytes entry (no offset).  Errors are st,
 * with a message prefixed by what. */
spmd_status spmd__dcp_check(const spmd_dcp_metadata *m, const char *what, char *err,
                            size_t errlen, spmd_status st);

/* Read a whole regular file of at most max bytes into a malloc'd buffer. */
spmd_status spmd__read_small_file(const char *path, size_t max, void **buf, size_t *len,
                                  char *err, size_t errlen);

#endif
