/* tboard.c — TensorBoard event files; see tboard.h.
 *
 * Written by hand: the format is a handful of protocol-buffer fields in
 * TFRecord framing, and the libraries that write it (TensorFlow, the
 * tensorboard Python package, tensorboardX) are Python; Debian's
 * libprotobuf-c would need the event.proto sources compiled into the
 * build for five fields, and no library here computes CRC32C (zlib's and
 * OpenSSL's CRCs are CRC-32).  The encoding below follows
 * tensorflow/core/util/event.proto and framework/summary.proto; the test
 * (tests/observe.sh) reads the files with tensorboard's own
 * EventAccumulator. */
#include "srconfig.h"

#include "tboard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fsio.h"
#include "mem.h"

struct sr_tb {
    char *dir;
    int fd; /* -1 until sr_tb_begin */
    int err;
};

/* ---- CRC32C and TFRecord framing ---------------------------------------- */

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of it. */
static uint32_t crc32c(const void *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* Castagnoli, reflected */
            table[i] = c;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc(const void *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protocol-buffer encoding ------------------------------------------ */

/* A growing byte buffer; `bad` after a failed allocation (the record is
 * then dropped). */
typedef struct {
    unsigned char *b;
    size_t n, cap;
    bool bad;
} buf;

static void put(buf *o, const void *p, size_t n) {
    if (o->bad || n == 0)
        return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n)
            cap *= 2;
        unsigned char *nb = realloc(o->b, cap);
        if (!nb) {
            o->bad = true;
            return;
        }
        o->b = nb;
        o->cap = cap;
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void varint(buf *o, uint64_t v) {
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(o, t, k);
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };
static void key(buf *o, int field, int wt) { varint(o, (uint64_t)field << 3 | (uint64_t)wt); }

static void put_le(buf *o, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    put(o, t, (size_t)bytes);
}

static void f_double(buf *o, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    key(o, field, WT_I64);
    put_le(o, u, 8);
}
static void f_float(buf *o, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    key(o, field, WT_I32);
    put_le(o, u, 4);
}
static void f_int(buf *o, int field, int64_t v) {
    key(o, field, WT_VARINT);
    varint(o, (uint64_t)v);
}
static void f_bytes(buf *o, int field, const void *p, size_t n) {
    key(o, field, WT_LEN);
    varint(o, n);
    put(o, p, n);
}
static void f_str(buf *o, int field, const char *s) { f_bytes(o, field, s, strlen(s)); }
static void f_msg(buf *o, int field, const buf *m) { f_bytes(o, field, m->b, m->n); }

/* Event fields (event.proto) */
enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5, EV_SESSION_LOG = 7 };
/* Summary.value = 1; Summary.Value: tag 1, simple_value 2, tensor 8,
 * metadata 9; SummaryMetadata.plugin_data 1, PluginData.plugin_name 1;
 * TensorProto: dtype 1 (DT_STRING = 7), tensor_shape 2, string_val 8;
 * SessionLog.status 1 (START = 1) */

/* Frames one Event and writes it with one write(2), so a crash leaves
 * whole records. */
static void emit(sr_tb *tb, const buf *ev) {
    if (tb->fd < 0 || ev->bad || tb->err)
        return;
    buf rec = {0};
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    put(&rec, len, 8);
    put_le(&rec, masked_crc(len, 8), 4);
    put(&rec, ev->b, ev->n);
    put_le(&rec, masked_crc(ev->b, ev->n), 4);
    if (rec.bad)
        tb->err = ENOMEM;
    else if (sr_fsio_write_all(tb->fd, rec.b, rec.n) != 0)
        tb->err = errno ? errno : EIO;
    if (tb->err)
        sr_log_warn("%s: write failed: %s; training goes on without TensorBoard events", tb->dir, strerror(tb->err));
    free(rec.b);
}

/* An Event's head: wall time and step. */
static void event_head(buf *ev, int64_t step) {
    f_double(ev, EV_WALL_TIME, sr_clock_wall_s());
    f_int(ev, EV_STEP, step);
}

/* ---- the file ----------------------------------------------------------- */

sr_status sr_tb_prepare(sr_tb **out, const char *dir) {
    *out = NULL;
    if (sr_fsio_mkdir_p(dir) != 0) {
        int err = errno;
        struct stat sb;
        if (err == ENOTDIR && stat(dir, &sb) == 0)
            return sr_error(SR_ERR_CANTCREAT,
                            "log.tensorboard: %s is %s; expected a directory for the event files (hint: name a "
                            "directory, or leave log.tensorboard empty)",
                            dir, sr_fsio_kind(sb.st_mode));
        return sr_error_wrap(sr_fsio_create_error(dir, err), "log.tensorboard");
    }
    if (access(dir, W_OK | X_OK) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot write TensorBoard event files there (log.tensorboard): %s", dir,
                        strerror(errno));
    sr_tb *tb = sr_calloc(1, sizeof *tb);
    char *d = sr_strdup(dir);
    if (!tb || !d) {
        free(tb);
        free(d);
        return sr_error_oom("the TensorBoard writer");
    }
    tb->dir = d;
    tb->fd = -1;
    *out = tb;
    return SR_OK;
}

/* The newest seconds field of the directory's event files
 * (events.out.tfevents.<seconds>.), 0 when none. */
static long long newest_seconds(const char *dir) {
    long long newest = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    static const char prefix[] = "events.out.tfevents.";
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, prefix, sizeof prefix - 1) == 0) {
            long long s = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
            if (s > newest)
                newest = s;
        }
    closedir(d);
    return newest;
}

sr_status sr_tb_begin(sr_tb *tb, int64_t first_step) {
    /* TensorBoard reads a directory's files in name order: a name's
     * seconds never go below an existing file's (two starts in the same
     * second, a clock stepped back) */
    long long secs = (long long)sr_clock_wall_s(), newest = newest_seconds(tb->dir);
    if (secs <= newest)
        secs = newest + 1;
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == '/')
            *c = '_';
    size_t len = strlen(tb->dir) + strlen(host) + 96;
    char *path = sr_malloc(len);
    if (!path)
        return sr_error_oom("the TensorBoard file name");
    snprintf(path, len, "%s/events.out.tfevents.%010lld.%s.%ld.shardrun", tb->dir, secs, host, (long)getpid());
    tb->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, SR_FSIO_FILE_MODE);
    sr_status st = tb->fd < 0 ? sr_fsio_create_error(path, errno) : SR_OK;
    free(path);
    if (st != SR_OK)
        return st;
    buf ev = {0};
    event_head(&ev, 0);
    f_str(&ev, EV_FILE_VERSION, "brain.Event:2");
    emit(tb, &ev);
    ev.n = 0;
    buf session = {0};
    f_int(&session, 1, 1); /* status: START */
    event_head(&ev, first_step);
    f_msg(&ev, EV_SESSION_LOG, &session);
    emit(tb, &ev);
    free(session.b);
    free(ev.b);
    return SR_OK;
}

void sr_tb_scalars(sr_tb *tb, int64_t step, int n, const char *const *tags, const double *values) {
    if (!tb || n <= 0)
        return;
    buf summary = {0}, value = {0}, ev = {0};
    for (int i = 0; i < n; i++) {
        value.n = 0;
        f_str(&value, 1, tags[i]);
        f_float(&value, 2, (float)values[i]);
        f_msg(&summary, 1, &value);
    }
    event_head(&ev, step);
    f_msg(&ev, EV_SUMMARY, &summary);
    emit(tb, &ev);
    free(summary.b);
    free(value.b);
    free(ev.b);
}

void sr_tb_text(sr_tb *tb, int64_t step, const char *tag, const char *text) {
    if (!tb)
        return;
    buf plugin = {0}, meta = {0}, shape = {0}, tensor = {0}, value = {0}, summary = {0}, ev = {0};
    f_str(&plugin, 1, "text");
    f_msg(&meta, 1, &plugin);
    f_int(&tensor, 1, 7);      /* DT_STRING */
    f_msg(&tensor, 2, &shape); /* a scalar: no dimensions */
    f_str(&tensor, 8, text);
    f_str(&value, 1, tag);
    f_msg(&value, 9, &meta);
    f_msg(&value, 8, &tensor);
    f_msg(&summary, 1, &value);
    event_head(&ev, step);
    f_msg(&ev, EV_SUMMARY, &summary);
    emit(tb, &ev);
    free(plugin.b);
    free(meta.b);
    free(tensor.b);
    free(value.b);
    free(summary.b);
    free(ev.b);
}

void sr_tb_close(sr_tb *tb) {
    if (!tb)
        return;
    if (tb->fd >= 0 && close(tb->fd) != 0 && !tb->err)
        tb->err = errno;
    free(tb->dir);
    free(tb);
}
