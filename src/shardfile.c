/* shardfile.c — shard file header, chunk hashing, the writer thread and the
 * verified range reader; see shardfile.h.
 *
 * Written by hand because no library here does it: the layout is ours.
 * SHA-256 is OpenSSL EVP.  SHARDRUN_BENCH_NO_SHA256=1 (bench/run_ckpt.sh
 * only, testhook.h) measures the I/O path without hashing: chunks get
 * all-zero digests and reads are not verified, so such checkpoints do not
 * verify. */
#include "srconfig.h"

#include "shardfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "mem.h"
#include "testhook.h"

/* The 64-byte header at the start of every shard file (little-endian, as
 * written by the x86-64 / aarch64 hosts this runs on). */
typedef struct {
    char magic[8]; /* "SRSHARD" NUL */
    uint32_t version, shard_index, shard_count, nslices;
    uint64_t step, elements;
    uint8_t reserved[24];
} shard_header;
_Static_assert(sizeof(shard_header) == SR_SHARD_HEADER_BYTES, "shard header is 64 bytes");
static const char shard_magic[8] = "SRSHARD";

#define BATCH_BYTES (SR_SHARD_BATCH_CHUNKS * SR_SHARD_CHUNK_BYTES)

void sr_sha256(const void *data, size_t n, unsigned char out[32]) {
    unsigned int len = 32;
    EVP_Digest(data, n, out, &len, EVP_sha256(), NULL);
}

/* The staging buffer of SR_SHARD_BATCH_CHUNKS chunks for reads and writes.
 * Page aligned: the kernel copies to and from page-aligned user buffers
 * several times faster than from malloc's 16-byte-aligned ones (measured
 * 1.8 vs 12 GB/s for cached reads on the development VM). */
static unsigned char *batch_alloc(void) { return sr_aligned_alloc(BATCH_BYTES); }

/* Hashes the chunks of buf[0..n) (n <= one batch) in parallel. */
static void hash_chunks(const unsigned char *buf, size_t n, unsigned char (*out)[32]) {
    int nc = (int)((n + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES);
    if (sr_testhook()->bench_no_sha256) {
        memset(out, 0, (size_t)nc * 32);
        return;
    }
#pragma omp parallel for schedule(static, 1)
    for (int i = 0; i < nc; i++) {
        size_t off = (size_t)i * SR_SHARD_CHUNK_BYTES,
               len = n - off < SR_SHARD_CHUNK_BYTES ? n - off : SR_SHARD_CHUNK_BYTES;
        sr_sha256(buf + off, len, out[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* writing */

/* The writer thread: writes full staging buffers in order while the caller
 * fills and hashes the other one, and starts writeback of each written
 * range at once (sync_file_range), so the final fsync has little left to do
 * and the page cache never holds the whole shard dirty.  Its first failure
 * is sticky (status.h); the caller checks it after every buffer. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf[2];
    size_t len[2];
    bool full[2], done;
    int fd;
    const char *path;
    uint64_t off;
    sr_sticky err;
} shard_writer;

static void *writer_main(void *arg) {
    shard_writer *w = arg;
    for (int k = 0;; k ^= 1) {
        pthread_mutex_lock(&w->mu);
        while (!w->full[k] && !w->done)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->full[k]) {
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        pthread_mutex_unlock(&w->mu);
        if (sr_sticky_status(&w->err) == SR_OK) {
            if (sr_fsio_write_all(w->fd, w->buf[k], w->len[k]) != 0) {
                sr_status st = sr_fsio_write_error_ckpt(w->path, errno);
                sr_sticky_set(&w->err, st, "%s", sr_error_message());
            } else { /* a hint: a failure here changes nothing, fsync still decides */
                sync_file_range(w->fd, (off_t)w->off, (off_t)w->len[k], SYNC_FILE_RANGE_WRITE);
            }
        }
        w->off += w->len[k];
        pthread_mutex_lock(&w->mu);
        w->full[k] = false;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* Hands buffer k to the writer and waits until the other one is free. */
static void hand_over(shard_writer *w, int k, size_t len) {
    pthread_mutex_lock(&w->mu);
    w->len[k] = len;
    w->full[k] = true;
    pthread_cond_broadcast(&w->cv);
    while (w->full[k ^ 1])
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/* Copies the pieces (header first) through the staging buffers, hashing
 * each full buffer before handing it to the writer. */
static void stream_pieces(shard_writer *w, const sr_shardfile_piece *pieces, int npieces, unsigned char (*hashes)[32]) {
    size_t fill = 0;
    uint64_t chunk = 0;
    int k = 0;
    unsigned char *buf = w->buf[0];
    for (int i = 0; i < npieces; i++) {
        const unsigned char *p = pieces[i].data;
        size_t left = pieces[i].bytes;
        while (left > 0) {
            size_t n = left < BATCH_BYTES - fill ? left : BATCH_BYTES - fill;
            uint64_t at = pieces[i].at + (pieces[i].bytes - left);
            if (!pieces[i].get)
                memcpy(buf + fill, p, n);
            else if (pieces[i].get(pieces[i].ctx, at, buf + fill, n) != SR_OK) {
                sr_sticky_set(&w->err, SR_ERR_INTERNAL, "%s", sr_error_message());
                return;
            }
            fill += n;
            if (p)
                p += n;
            left -= n;
            bool last = i == npieces - 1 && left == 0;
            if (fill == BATCH_BYTES || last) {
                hash_chunks(buf, fill, hashes + chunk);
                chunk += (fill + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
                hand_over(w, k, fill);
                k ^= 1;
                buf = w->buf[k];
                fill = 0;
                if (sr_sticky_status(&w->err) != SR_OK)
                    return;
            }
        }
    }
}

sr_status sr_shardfile_write(const char *path, int shard, int shard_count, int nslices, int64_t step, uint64_t elements,
                             const sr_shardfile_piece *pieces, int npieces, unsigned char (*hashes)[32]) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, SR_FSIO_FILE_MODE);
    if (fd < 0)
        return sr_fsio_create_error_ckpt(path, errno);
    shard_writer w = {.fd = fd, .path = path};
    sr_sticky_init(&w.err);
    w.buf[0] = batch_alloc();
    w.buf[1] = w.buf[0] ? batch_alloc() : NULL;
    pthread_t thread;
    bool started = false;
    if (w.buf[0] && w.buf[1] && pthread_mutex_init(&w.mu, NULL) == 0) {
        if (pthread_cond_init(&w.cv, NULL) == 0)
            started = pthread_create(&thread, NULL, writer_main, &w) == 0;
        if (!started)
            pthread_mutex_destroy(&w.mu);
    }
    if (!started) {
        free(w.buf[0]);
        free(w.buf[1]);
        sr_sticky_destroy(&w.err);
        close(fd);
        return sr_error_oom("the checkpoint writer");
    }
    shard_header h = {.version = SR_SHARD_VERSION,
                      .shard_index = (uint32_t)shard,
                      .shard_count = (uint32_t)shard_count,
                      .nslices = (uint32_t)nslices,
                      .step = (uint64_t)step,
                      .elements = elements};
    memcpy(h.magic, shard_magic, 8);
    sr_shardfile_piece all[1 + 3 * 64];
    sr_shardfile_piece *list = npieces + 1 <= (int)(sizeof all / sizeof all[0]) ? all : NULL;
    if (!list)
        list = sr_malloc(sizeof *list * (size_t)(npieces + 1));
    if (list) {
        list[0] = (sr_shardfile_piece){&h, sizeof h, NULL, NULL, 0};
        memcpy(list + 1, pieces, sizeof *pieces * (size_t)npieces);
        stream_pieces(&w, list, npieces + 1, hashes);
        if (list != all)
            free(list);
    }
    pthread_mutex_lock(&w.mu);
    w.done = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(thread, NULL);
    sr_status st = list ? sr_sticky_raise(&w.err) : sr_error_oom("the checkpoint writer's pieces");
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    sr_sticky_destroy(&w.err);
    free(w.buf[0]);
    free(w.buf[1]);
    if (st == SR_OK && fsync(fd) != 0)
        st = sr_fsio_write_error_ckpt(path, errno);
    if (close(fd) != 0 && st == SR_OK)
        st = sr_fsio_write_error_ckpt(path, errno);
    return st;
}

/* ------------------------------------------------------------------------ */
/* reading */

static int cmp_range(const void *a, const void *b) {
    const sr_shardfile_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* A problem: reported and counted in verify mode, returned otherwise. */
typedef struct {
    const char *path;
    sr_shardfile_problem report;
    void *ctx;
    int count;
} problems_t;

static sr_status problem(problems_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static sr_status problem(problems_t *p, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    sr_status st = sr_error(SR_ERR_DATA, "%s: %s", p->path, what);
    p->count++;
    if (p->report)
        p->report(p->ctx, p->path, what);
    return st;
}

/* Opens and checks size and header; -1 (problem reported) when the file
 * cannot be used at all; else the fd, with *header_ok false when only the
 * header disagrees. */
static int open_checked(int dirfd, const char *name, const sr_shardfile_expect *x, problems_t *p, bool *header_ok) {
    *header_ok = true;
    struct stat sb;
    int fd = sr_fsio_open_file(dirfd, name, false, &sb);
    if (fd < 0) {
        if (errno == EINVAL)
            problem(p, "%s, not a regular file (a shard file named in the manifest)", sr_fsio_kind(sb.st_mode));
        else if (errno == ELOOP)
            problem(p, "a symbolic link; the files of a checkpoint must be regular files");
        else
            problem(p, "%s (a shard file named in the manifest is missing or unreadable)", strerror(errno));
        return -1;
    }
    if ((uint64_t)sb.st_size != x->bytes) {
        problem(p, "%lld bytes on disk, the manifest says %" PRIu64 " (truncated or replaced)", (long long)sb.st_size,
                x->bytes);
        close(fd);
        return -1;
    }
    shard_header h;
    if (sr_fsio_pread_all(fd, &h, sizeof h, 0) != 0 || memcmp(h.magic, shard_magic, 8) != 0 ||
        h.version != SR_SHARD_VERSION || (int)h.shard_index != x->shard || h.elements != x->elements ||
        (int64_t)h.step != x->step) {
        problem(p, "header does not match the manifest (magic, version, shard, step or size)");
        *header_ok = false;
    }
    return fd;
}

/* Copies the parts of ranges[r0..] that fall in [off, end) out of buf
 * (through `put` for ranges that have one).  SR_OK, or a failed upload. */
static sr_status copy_out(const sr_shardfile_range *ranges, size_t n, size_t r0, uint64_t off, uint64_t end,
                          const unsigned char *buf) {
    for (size_t r = r0; r < n && ranges[r].off < end; r++) {
        uint64_t a = ranges[r].off > off ? ranges[r].off : off;
        uint64_t z = ranges[r].off + ranges[r].bytes < end ? ranges[r].off + ranges[r].bytes : end;
        if (a >= z)
            continue;
        if (!ranges[r].put)
            memcpy((char *)ranges[r].dst + (a - ranges[r].off), buf + (a - off), (size_t)(z - a));
        else if (ranges[r].put(ranges[r].ctx, ranges[r].at + (a - ranges[r].off), buf + (a - off), (size_t)(z - a)) !=
                 SR_OK)
            return SR_ERR_INTERNAL;
    }
    return SR_OK;
}

/* The next run of at most one batch of chunks, [*first, returned last]:
 * from next_chunk on, the chunks the sorted requests ranges[0 .. n) need
 * (ranges NULL: every chunk, in batches). */
static uint64_t next_run(const sr_shardfile_expect *x, const sr_shardfile_range *ranges, size_t n, uint64_t next_chunk,
                         uint64_t *first) {
    bool all = ranges == NULL;
    uint64_t f = all ? next_chunk : ranges[0].off / SR_SHARD_CHUNK_BYTES, last = f;
    if (f < next_chunk)
        f = last = next_chunk;
    if (all)
        last = f + SR_SHARD_BATCH_CHUNKS - 1;
    for (size_t r = 0; !all && r < n; r++) {
        uint64_t a = ranges[r].off / SR_SHARD_CHUNK_BYTES,
                 z = (ranges[r].off + ranges[r].bytes - 1) / SR_SHARD_CHUNK_BYTES;
        if (a > last + 1)
            break;
        if (z > last)
            last = z;
    }
    if (last >= f + SR_SHARD_BATCH_CHUNKS)
        last = f + SR_SHARD_BATCH_CHUNKS - 1;
    if (last >= x->nchunks)
        last = x->nchunks - 1;
    *first = f;
    return last;
}

sr_status sr_shardfile_read(int dirfd, const char *name, const char *path, const sr_shardfile_expect *x,
                            sr_shardfile_range *ranges, size_t n, uint64_t *verified, sr_shardfile_problem report,
                            void *ctx, int *problems) {
    problems_t p = {path, report, ctx, 0};
    if (problems)
        *problems = 0;
    bool header_ok;
    int fd = open_checked(dirfd, name, x, &p, &header_ok);
    if (fd < 0 || (!header_ok && !report)) {
        if (fd >= 0)
            close(fd);
        if (problems)
            *problems = p.count;
        return report ? SR_OK : SR_ERR_DATA;
    }
    unsigned char *buf = batch_alloc();
    if (!buf) {
        close(fd);
        return sr_error_oom("a checkpoint read buffer");
    }
    bool all = ranges == NULL;
    if (!all)
        qsort(ranges, n, sizeof *ranges, cmp_range);
    sr_status st = SR_OK;
    bool verify = !sr_testhook()->bench_no_sha256;
    size_t r0 = 0;
    uint64_t next_chunk = 0;
    while (st == SR_OK && (all ? next_chunk < x->nchunks : r0 < n)) {
        uint64_t first, last = next_run(x, all ? NULL : ranges + r0, all ? 0 : n - r0, next_chunk, &first);
        uint64_t off = first * SR_SHARD_CHUNK_BYTES, end = (last + 1) * SR_SHARD_CHUNK_BYTES;
        if (end > x->bytes)
            end = x->bytes;
        if (sr_fsio_pread_all(fd, buf, (size_t)(end - off), off) != 0) {
            st = problem(&p, "read failed at byte %" PRIu64 ": %s", off, errno ? strerror(errno) : "file ended early");
            break;
        }
        unsigned char got[SR_SHARD_BATCH_CHUNKS][32];
        hash_chunks(buf, (size_t)(end - off), got);
        for (uint64_t c = first; c <= last && verify && st == SR_OK; c++)
            if (memcmp(got[c - first], x->sha[c], 32) != 0) {
                uint64_t cb = c * SR_SHARD_CHUNK_BYTES,
                         ce = cb + SR_SHARD_CHUNK_BYTES < x->bytes ? cb + SR_SHARD_CHUNK_BYTES : x->bytes;
                sr_status bad =
                    problem(&p, "chunk %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 "): SHA-256 mismatch", c, cb, ce - 1);
                if (!report)
                    st = bad;
            }
        if (st != SR_OK)
            break;
        *verified += end - off;
        if (!all) {
            st = copy_out(ranges, n, r0, off, end, buf);
            while (r0 < n && ranges[r0].off + ranges[r0].bytes <= end)
                r0++;
        }
        next_chunk = last + 1;
    }
    free(buf);
    close(fd);
    if (problems)
        *problems = p.count;
    return report ? (st == SR_ERR_INTERNAL ? st : SR_OK) : st;
}
