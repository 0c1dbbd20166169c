/* src/common/common.h — the internal toolbox every other folder may use:
 * status text, logging, clocks and deadlines, full reads/writes on
 * non-blocking sockets, socket setup, environment parsing, Slurm hostlists.
 * Nothing here knows about groups, stores or tensors. */
#ifndef SPMD_COMMON_H
#define SPMD_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "spmd/status.h"

#define SPMD__ERRLEN 512

#if defined(__GNUC__)
#define SPMD__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SPMD__PRINTF(a, b)
#endif

/* ---- error text ---------------------------------------------------------- */
/* snprintf into a caller-owned buffer (NULL or len 0: ignored); returns st. */
spmd_status spmd__fail(char *buf, size_t len, spmd_status st, const char *fmt, ...)
    SPMD__PRINTF(4, 5);
/* spmd__fail with a va_list, for an object's own error setter. */
spmd_status spmd__vfail(char *buf, size_t len, spmd_status st, const char *fmt, va_list ap);
/* The same, storing the message under mu (formatted before taking it), for
 * an error text other threads read. */
spmd_status spmd__vfail_locked(pthread_mutex_t *mu, char *buf, size_t len, spmd_status st, const char *fmt,
                               va_list ap);
/* Same, appending ": <strerror(errno_value)>". */
spmd_status spmd__fail_errno(char *buf, size_t len, spmd_status st, int errno_value,
                             const char *fmt, ...) SPMD__PRINTF(5, 6);

/* ---- logging: SPMD_LOG_LEVEL=error|warn|info|debug (default warn) -------- */
enum { SPMD__LOG_ERROR = 0, SPMD__LOG_WARN, SPMD__LOG_INFO, SPMD__LOG_DEBUG };
int spmd__log_enabled(int level);
void spmd__log(int level, const char *fmt, ...) SPMD__PRINTF(2, 3);
#define SPMD_LOGW(...) (spmd__log_enabled(SPMD__LOG_WARN) ? spmd__log(SPMD__LOG_WARN, __VA_ARGS__) : (void)0)
#define SPMD_LOGI(...) (spmd__log_enabled(SPMD__LOG_INFO) ? spmd__log(SPMD__LOG_INFO, __VA_ARGS__) : (void)0)
#define SPMD_LOGD(...) (spmd__log_enabled(SPMD__LOG_DEBUG) ? spmd__log(SPMD__LOG_DEBUG, __VA_ARGS__) : (void)0)

/* ---- clocks and deadlines ------------------------------------------------ */
uint64_t spmd__now_ns(void);   /* CLOCK_MONOTONIC */
int64_t spmd__now_ms(void);
/* Absolute deadline (ms, monotonic) timeout_ms from now; timeout_ms < 0: never. */
int64_t spmd__deadline(int timeout_ms);
/* Milliseconds left until deadline as a poll() timeout (-1 for never, >= 0 else). */
int spmd__remaining_ms(int64_t deadline);

/* ---- full I/O on non-blocking descriptors -------------------------------- */
/* Loop until all len bytes are written/read, polling while the socket would
 * block, retrying EINTR.  abort_flag (may be NULL) is checked each wake-up.
 * Errors: SPMD_ERR_TIMEOUT, SPMD_ERR_REMOTE (EOF/reset/EPIPE), SPMD_ERR_SYSTEM,
 * SPMD_ERR_ABORTED.  err receives the detail. */
spmd_status spmd__write_full(int fd, const void *buf, size_t len, int64_t deadline,
                             const atomic_int *abort_flag, char *err, size_t errlen);
spmd_status spmd__read_full(int fd, void *buf, size_t len, int64_t deadline,
                            const atomic_int *abort_flag, char *err, size_t errlen);

/* ---- sockets ------------------------------------------------------------- */
/* Non-blocking, CLOEXEC, TCP_NODELAY. */
int spmd__set_sock_opts(int fd);
/* Listen on host:port (host NULL/"" = any, port 0 = free port).  Returns fd or
 * -1 with err filled; *bound_port receives the real port. */
int spmd__listen(const char *host, int port, int backlog, int *bound_port, char *err,
                 size_t errlen);
/* Connect to host:port before deadline (retrying ECONNREFUSED while the peer
 * is not up yet).  Returns a non-blocking fd or -1 with err filled. */
int spmd__connect(const char *host, int port, int64_t deadline, char *err, size_t errlen);
/* As spmd__connect, to a server known to have been up: a refused connection
 * is final (it is gone), other failures are retried until the deadline. */
int spmd__connect_up(const char *host, int port, int64_t deadline, char *err, size_t errlen);
/* accept4 with SOCK_NONBLOCK|SOCK_CLOEXEC and the usual options; -1 on error (errno). */
int spmd__accept(int listen_fd);
/* The local address this host would use to reach `remote` (no packet is sent);
 * "127.0.0.1" for a loopback remote.  Writes into out. */
spmd_status spmd__local_addr_towards(const char *remote, char *out, size_t outlen);
/* "ip:port" of the socket's local or peer end. */
void spmd__sock_name(int fd, int peer, char *out, size_t outlen);

/* ---- environment --------------------------------------------------------- */
/* Integer from the environment: SPMD_OK and *out set, SPMD_ERR_NOTFOUND when
 * unset or empty, SPMD_ERR_INVALID when not a whole integer in [lo, hi]. */
spmd_status spmd__env_int(const char *name, long lo, long hi, long *out);
/* Duration: "1800" (seconds), "500ms", "2s", "5m", "1h" -> milliseconds. */
spmd_status spmd__parse_duration_ms(const char *s, long *out_ms);
/* Every numeric SPMD_* variable the library reads (env.c has the list, with
 * each one's range) that is set must parse: SPMD_ERR_INVALID naming the first
 * malformed one and its value, so that a typo is an error and never silently
 * the default.  spmd_group_init calls it first. */
spmd_status spmd__env_check_numeric(char *err, size_t errlen);
/* getenv(name) in a few loads while the environment is unchanged, for a
 * variable read at every call that a program may change between calls
 * (env_watch.c).  name must stay valid (it is remembered by address). */
const char *spmd__env_watched(const char *name);

/* ---- waiting on a busy host (wait_slice.c) ------------------------------- */
/* Put the calling thread on a short scheduler slice (SPMD_WAIT_SLICE_US,
 * default 100 µs; EEVDF kernels), so that on a host with more runnable
 * threads than cores it gets the core as soon as it is due rather than after
 * another program's whole slice.  Once per thread (later calls cost a
 * thread-local read); the thread keeps it. */
void spmd__wait_slice_thread(void);
/* The slice asked for, in ns (0: off, or the kernel has no custom slices). */
uint64_t spmd__wait_slice_ns(void);

/* ---- the library's own threads (thread.c) ------------------------------- */
/* pthread_create with every signal blocked in the new thread (signals are
 * the program's threads' business), named `name` (at most 15 characters;
 * NULL: unnamed).  Returns pthread_create's result. */
int spmd__thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name);

/* 1 when no runnable task waits for a core right now (runnable tasks, the
 * caller included, at most the online cores, at one of the last few
 * samples, taken at most every 5 ms); 0 when busy, on one core, or
 * unknown (idle_core.c). */
int spmd__idle_core(void);

/* ---- Slurm hostlists ----------------------------------------------------- */
/* First host of a hostlist expression such as "node[01-04,07],gpu3". */
spmd_status spmd__hostlist_first(const char *expr, char *out, size_t outlen);
/* Number of hosts in the expression, and the i-th (0-based). */
spmd_status spmd__hostlist_nth(const char *expr, size_t i, char *out, size_t outlen);

/* ---- little-endian codec helpers (wire formats are little-endian) -------- */
static inline void spmd__put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static inline uint32_t spmd__get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void spmd__put_u64(unsigned char *p, uint64_t v) {
    spmd__put_u32(p, (uint32_t)v); spmd__put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t spmd__get_u64(const unsigned char *p) {
    return (uint64_t)spmd__get_u32(p) | ((uint64_t)spmd__get_u32(p + 4) << 32);
}

/* A 32-bit digest of n words, the same on every machine (multiply-xorshift
 * per word: a handful of cycles where a byte-wise hash takes ~40 multiplies;
 * for agreement checks, not security). */
static inline uint32_t spmd__hash_words(const uint64_t *v, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ v[i]) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return (uint32_t)(h ^ (h >> 29));
}

#endif
