/* spmd/status.h — status codes shared by every spmd call.
 *
 * Every function returns spmd_status: SPMD_OK (0) or a negative error.
 * The list lives in one X-macro so spmd_status_str() never drifts from the enum.
 * Detailed messages (which rank, which operation, which syscall) are kept per
 * handle: spmd_group_errmsg(), spmd_work_errmsg(), spmd_store_errmsg().
 */
#ifndef SPMD_STATUS_H
#define SPMD_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define SPMD_STATUS_LIST(X)                                                        \
    X(SPMD_OK, 0, "success")                                                       \
    X(SPMD_ERR_INVALID, -1, "invalid argument")                                    \
    X(SPMD_ERR_SYSTEM, -2, "system call failed")                                   \
    X(SPMD_ERR_REMOTE, -3, "peer closed or reset the connection")                  \
    X(SPMD_ERR_PROTOCOL, -4, "protocol violation")                                 \
    X(SPMD_ERR_TIMEOUT, -5, "deadline passed")                                     \
    X(SPMD_ERR_NOMEM, -6, "out of memory")                                         \
    X(SPMD_ERR_ABORTED, -7, "operation aborted")                                   \
    X(SPMD_ERR_MISMATCH, -8, "ranks disagree (size, dtype, root or shape)")        \
    X(SPMD_ERR_NOTFOUND, -9, "not found")                                          \
    X(SPMD_ERR_FORMAT, -10, "malformed file or data")                              \
    X(SPMD_ERR_UNSUPPORTED, -11, "not supported")                                  \
    X(SPMD_ERR_AGAIN, -12, "not finished yet")                                     \
    X(SPMD_ERR_IO, -13, "input/output error")

typedef enum {
#define SPMD__STATUS_ENUM(name, value, text) name = value,
    SPMD_STATUS_LIST(SPMD__STATUS_ENUM)
#undef SPMD__STATUS_ENUM
} spmd_status;

/* A short, static, human-readable description of a status code. Never NULL. */
const char *spmd_status_str(spmd_status s);

/* The symbolic name of a status code ("SPMD_ERR_TIMEOUT"). Never NULL. */
const char *spmd_status_name(spmd_status s);

#ifdef __cplusplus
}
#endif
#endif
