/* file_writer.c — spmd__fw (ckpt_internal.h): a rank's data file written
 * straight from the caller's (or the saver's staging) memory: small pieces
 * gathered in a buffer, large ones written from where they are, their
 * CRC-32 computed chunk by chunk just before each chunk is written (while
 * it is in the cache), and a field written earlier patched in place. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "ckpt/ckpt_internal.h"

enum { FW_BUF = 1 << 16, FW_CHUNK = 1 << 22 };

static void write_all(spmd__fw *f, const uint8_t *p, size_t n) {
    while (n && !f->err) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            f->err = w < 0 ? errno : EIO;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

void spmd__fw_flush(spmd__fw *f) {
    write_all(f, f->buf, f->len);
    f->len = 0;
}

void spmd__fw_put(spmd__fw *f, const void *p, size_t n) {
    if (f->len + n > FW_BUF) spmd__fw_flush(f);
    if (n >= FW_BUF) {
        write_all(f, p, n);
    } else {
        if (!f->buf && !(f->buf = malloc(FW_BUF))) {
            f->err = f->err ? f->err : ENOMEM;
            f->off += n;
            return;
        }
        memcpy(f->buf + f->len, p, n);
        f->len += n;
    }
    f->off += n;
}

uint32_t spmd__fw_put_crc(spmd__fw *f, const void *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    const uint8_t *b = p;
    if (n < FW_BUF) { /* a small entry: buffered like the headers */
        c = crc32(c, b, (uInt)n);
        spmd__fw_put(f, b, n);
        return (uint32_t)c;
    }
    spmd__fw_flush(f);
    while (n) {
        size_t k = n > FW_CHUNK ? FW_CHUNK : n;
        c = crc32(c, b, (uInt)k);
        write_all(f, b, k);
        f->off += k;
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

void spmd__fw_patch_le32(spmd__fw *f, uint64_t at, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    uint64_t buffered = f->off - f->len; /* the file offset of buf[0] */
    if (at >= buffered) {
        memcpy(f->buf + (at - buffered), b, 4);
        return;
    }
    for (size_t done = 0; done < 4 && !f->err;) {
        ssize_t w = pwrite(f->fd, b + done, 4 - done, (off_t)(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) f->err = w < 0 ? errno : EIO;
        else done += (size_t)w;
    }
}

void spmd__fw_free(spmd__fw *f) {
    free(f->buf);
    f->buf = NULL;
}
