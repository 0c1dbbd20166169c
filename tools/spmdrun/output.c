/* output.c — one worker stream from its pipe to the console and a log file.
 *
 * Bytes go to the log file exactly as the worker wrote them.  The console
 * gets whole lines only, each behind the rank prefix ("[rank3]:", torchrun's
 * --tee format), and every batch of whole lines leaves in a single write(),
 * so lines of different workers never mix mid-line.  A line longer than the
 * assembly buffer is cut into pieces of the buffer's size, each a line of its
 * own; a last line without newline gets one at EOF.  The tail of stderr is
 * kept for the failure report.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spmdrun.h"

#define LINE_CAP (32 * 1024)

int sr_write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* A console someone made non-blocking: wait, but not forever. */
            struct pollfd p = {.fd = fd, .events = POLLOUT, .revents = 0};
            if (poll(&p, 1, 10000) > 0) continue;
            errno = ETIMEDOUT;
        }
        return -1;
    }
    return 0;
}

int sr_stream_init(sr_stream *s, int fd, int console_fd, int file_fd, const char *prefix,
                   int keep_tail) {
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->console_fd = console_fd;
    s->file_fd = file_fd;
    s->keep_tail = keep_tail;
    s->eof_deadline_ms = -1;
    size_t pl = strlen(prefix);
    if (pl >= sizeof s->prefix) pl = sizeof s->prefix - 1;
    memcpy(s->prefix, prefix, pl);
    s->prefix[pl] = 0;
    s->prefix_len = pl;
    s->cap = LINE_CAP;
    s->out_cap = 2 * LINE_CAP; /* at least one longest line with its prefix */
    s->buf = malloc(s->cap);
    s->out = malloc(s->out_cap);
    if (!s->buf || !s->out) {
        free(s->buf);
        free(s->out);
        s->buf = s->out = NULL;
        return -1;
    }
    return 0;
}

static void console_write(sr_stream *s, const char *buf, size_t len) {
    if (s->console_fd < 0 || len == 0) return;
    if (sr_write_all(s->console_fd, buf, len) < 0) s->console_fd = -1; /* console gone */
}

static void keep_tail(sr_stream *s, const char *data, size_t n) {
    if (!s->keep_tail) return;
    if (n >= SR_TAIL_BYTES) {
        memcpy(s->tail, data + n - SR_TAIL_BYTES, SR_TAIL_BYTES);
        s->tail_len = SR_TAIL_BYTES;
        return;
    }
    if (s->tail_len + n > SR_TAIL_BYTES) {
        size_t drop = s->tail_len + n - SR_TAIL_BYTES;
        memmove(s->tail, s->tail + drop, s->tail_len - drop);
        s->tail_len -= drop;
    }
    memcpy(s->tail + s->tail_len, data, n);
    s->tail_len += n;
}

/* Append one prefixed line to the batch; a full batch leaves first. */
static void batch_line(sr_stream *s, size_t *o, const char *line, size_t n, int add_nl) {
    size_t need = s->prefix_len + n + 1;
    if (*o + need > s->out_cap) {
        console_write(s, s->out, *o);
        *o = 0;
    }
    memcpy(s->out + *o, s->prefix, s->prefix_len);
    *o += s->prefix_len;
    memcpy(s->out + *o, line, n);
    *o += n;
    if (add_nl) s->out[(*o)++] = '\n';
}

/* Move every complete line of buf (all of it when `all`, or when the buffer
 * is full of one unfinished line) to the console. */
static void emit_lines(sr_stream *s, int all) {
    size_t o = 0, start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] != '\n') continue;
        batch_line(s, &o, s->buf + start, i + 1 - start, 0);
        start = i + 1;
    }
    if ((all || (start == 0 && s->len == s->cap)) && start < s->len) {
        batch_line(s, &o, s->buf + start, s->len - start, 1);
        start = s->len;
    }
    console_write(s, s->out, o);
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

int sr_stream_pump(sr_stream *s) {
    if (s->fd < 0) return 0;
    for (int rounds = 0; rounds < 16; rounds++) { /* bounded: let other workers have a turn */
        ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        if (n <= 0) { /* EOF, or an error that ends the stream all the same */
            sr_stream_close(s);
            return 0;
        }
        if (s->file_fd >= 0 && sr_write_all(s->file_fd, s->buf + s->len, (size_t)n) < 0) {
            close(s->file_fd);
            s->file_fd = -1;
        }
        keep_tail(s, s->buf + s->len, (size_t)n);
        s->len += (size_t)n;
        emit_lines(s, 0);
    }
    return 1;
}

void sr_stream_close(sr_stream *s) {
    if (s->buf && s->len) emit_lines(s, 1);
    if (s->fd >= 0) close(s->fd);
    if (s->file_fd >= 0) close(s->file_fd);
    s->fd = s->file_fd = -1;
}

void sr_stream_free(sr_stream *s) {
    sr_stream_close(s);
    free(s->buf);
    free(s->out);
    s->buf = s->out = NULL;
}

size_t sr_stream_tail(const sr_stream *s, int nlines, const char *indent, char *out,
                      size_t outlen) {
    if (outlen == 0) return 0;
    out[0] = 0;
    size_t n = s->tail_len;
    while (n > 0 && s->tail[n - 1] == '\n') n--; /* ignore the final newline(s) */
    size_t start = n;
    for (int lines = 0; start > 0; start--) {
        if (s->tail[start - 1] == '\n' && ++lines == nlines) break;
    }
    size_t o = 0, il = strlen(indent);
    int at_line_start = 1;
    for (size_t i = start; i < n && o + il + 2 < outlen; i++) {
        if (at_line_start) {
            memcpy(out + o, indent, il);
            o += il;
            at_line_start = 0;
        }
        char c = s->tail[i];
        out[o++] = (c == '\n' || (c >= 32 && c < 127) || (unsigned char)c >= 128 || c == '\t')
                       ? c
                       : '?';
        if (c == '\n') at_line_start = 1;
    }
    if (o > 0 && o + 1 < outlen) out[o++] = '\n';
    out[o] = 0;
    return o;
}
