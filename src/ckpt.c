/* ckpt.c — sharded checkpoints; see ckpt.h for what this file owns and
 * shardrun-checkpoint(5) for the format.
 *
 * Written by hand because no library here does it: the shard file layout,
 * the commit protocol (temporary directory, fsync, rename, parent fsync,
 * `latest` symlink) and the resharding reader.  SHA-256 is OpenSSL EVP,
 * the manifest is emitted and parsed with libyaml.
 *
 * Crash sites for the test suite: SHARDRUN_TEST_CRASH_AT=SITE[:STEP][@RANK]
 * kills the process with SIGKILL when it reaches SITE (after_shard_write,
 * before_manifest, after_manifest, before_rename, after_rename,
 * before_latest, after_latest), optionally only in the save of STEP and
 * only on world rank RANK. */
#include "srconfig.h"

#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <yaml.h>

#include "comm.h"
#include "mem.h"
#include "optim.h"

#define CKPT_FORMAT "shardrun-checkpoint"
#define CKPT_VERSION 1
#define CHUNK_BYTES ((uint64_t)4 << 20)
#define BATCH_CHUNKS 8
#define HEADER_BYTES 64
#define MANIFEST "manifest.yaml"
#define MANIFEST_MAX ((size_t)256 << 20)
#define NSTATE 3
#define MAX_CANDIDATES 2048
/* Modes before the umask: never world-writable, even under umask 000. */
#define FILE_MODE 0664
#define DIR_MODE 0775

static const char *const state_names[NSTATE] = {"params", "adam_m", "adam_v"};

/* The 64-byte header at the start of every shard file (little-endian, as
 * written by the x86-64 / aarch64 hosts this runs on). */
typedef struct {
    char magic[8]; /* "SRSHARD" NUL */
    uint32_t version, shard_index, shard_count, nslices;
    uint64_t step, elements;
    uint8_t reserved[24];
} shard_header;
_Static_assert(sizeof(shard_header) == HEADER_BYTES, "shard header is 64 bytes");
static const char shard_magic[8] = "SRSHARD";

/* Formats into a buffer, truncating silently: paths are bounded by
 * PATH_MAX, messages by their buffers (a function, not snprintf, so that
 * deliberate truncation does not warn). */
#define FMT(buf, ...) whyf(buf, sizeof buf, __VA_ARGS__)

static void whyf(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void whyf(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* test crash sites */

static void crash_site(const char *site, int64_t step) {
    const char *e = getenv("SHARDRUN_TEST_CRASH_AT");
    if (!e || !*e)
        return;
    size_t n = strcspn(e, ":@");
    if (strlen(site) != n || strncmp(e, site, n) != 0)
        return;
    const char *colon = strchr(e, ':'), *at = strchr(e, '@');
    if (colon && strtoll(colon + 1, NULL, 10) != step)
        return;
    if (at && atoi(at + 1) != sr_log_rank())
        return;
    fprintf(stderr, "shardrun: test: SHARDRUN_TEST_CRASH_AT=%s: killing rank %d at %s (step %lld)\n", e, sr_log_rank(),
            site, (long long)step);
    kill(getpid(), SIGKILL);
}

/* ------------------------------------------------------------------------ */
/* small I/O helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The status of a failed write: a full disk or file-size limit is an I/O
 * error (74) with a hint. */
static sr_status write_error(const char *path, int err) {
    const char *hint = err == ENOSPC || err == EDQUOT ? " (hint: the file system is full or over quota; free space "
                                                        "or lower checkpoint.keep)"
                       : err == EFBIG                 ? " (hint: a file-size limit applies; see ulimit -f)"
                                                      : "";
    return sr_error(SR_ERR_IO, "%s: write failed: %s%s", path, strerror(err), hint);
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads exactly n bytes at off; returns 0, or -1 with errno (0 = short file). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* Removes a flat directory (ours hold only regular files). */
static int remove_flat_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    int dfd = dirfd(d), rc = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            if (unlinkat(dfd, de->d_name, 0) != 0 && errno != ENOENT)
                rc = -1;
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT)
        rc = -1;
    return rc;
}

static void sha256(const void *p, size_t n, unsigned char out[32]) {
    unsigned int len = 32;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static void hex32(const unsigned char h[32], char out[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[64] = '\0';
}

static bool unhex32(const char *s, unsigned char out[32]) {
    if (strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return false;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(v << 4);
        else
            out[i / 2] |= (unsigned char)v;
    }
    return true;
}

/* The staging buffer of BATCH_CHUNKS chunks for reads and writes.  Page
 * aligned: the kernel copies to and from page-aligned user buffers several
 * times faster than from malloc's 16-byte-aligned ones (measured 1.8 vs
 * 12 GB/s for cached reads on the development VM). */
static unsigned char *batch_alloc(void) { return aligned_alloc(4096, BATCH_CHUNKS * CHUNK_BYTES); }

/* SHARDRUN_BENCH_NO_SHA256=1 (bench/run_ckpt.sh only) measures the I/O path
 * without hashing: chunks get all-zero digests and reads are not verified,
 * so such checkpoints do not verify.  Never for real runs. */
static bool bench_no_sha(void) {
    const char *e = getenv("SHARDRUN_BENCH_NO_SHA256");
    return e && strcmp(e, "1") == 0;
}

/* Hashes the chunks of buf[0..n) (n <= BATCH_CHUNKS chunks) in parallel. */
static void hash_chunks(const unsigned char *buf, size_t n, unsigned char (*out)[32]) {
    int nc = (int)((n + CHUNK_BYTES - 1) / CHUNK_BYTES);
    if (bench_no_sha()) {
        memset(out, 0, (size_t)nc * 32);
        return;
    }
#pragma omp parallel for schedule(static, 1)
    for (int i = 0; i < nc; i++) {
        size_t off = (size_t)i * CHUNK_BYTES, len = n - off < CHUNK_BYTES ? n - off : CHUNK_BYTES;
        sha256(buf + off, len, out[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* the manifest in memory */

typedef struct {
    char name[32];
    uint64_t bytes, elements, nchunks;
    int shard;
    int nslices;
    uint64_t (*slices)[2]; /* global begin, count */
    unsigned char (*sha)[32];
} mf_file;

typedef struct {
    int64_t step;
    uint64_t cursor, tokens, seed;
    int world, mesh_shard, mesh_replicate;
    sr_model_dims dims;
    uint64_t n_params;
    char model_hash[65];
    char created[64], job[128], host[128];
    uint64_t chunk_bytes;
    int nfiles;
    mf_file *files;
    int nconfig;
    char **ckeys, **cvals;
    uint64_t total_bytes;
} manifest;

static void manifest_free(manifest *m) {
    for (int i = 0; i < m->nfiles; i++) {
        free(m->files[i].slices);
        free(m->files[i].sha);
    }
    free(m->files);
    for (int i = 0; i < m->nconfig; i++) {
        free(m->ckeys[i]);
        free(m->cvals[i]);
    }
    free(m->ckeys);
    free(m->cvals);
    memset(m, 0, sizeof *m);
}

static void model_hash(const sr_model_dims *d, char out[65]) {
    char text[256];
    int n = snprintf(text, sizeof text,
                     "shardrun gpt2 n_layer=%d n_head=%d n_embd=%d vocab_size=%d padded_vocab=%d seq_len=%d "
                     "dtype=f32 layout=unit-major-v1",
                     d->L, d->NH, d->C, d->V, d->Vp, d->T);
    unsigned char h[32];
    sha256(text, (size_t)n, h);
    hex32(h, out);
}

static uint64_t model_params(const sr_model_dims *d) {
    uint64_t C = (uint64_t)d->C;
    return (uint64_t)d->L * (12 * C * C + 13 * C) + (uint64_t)d->Vp * C + (uint64_t)d->T * C + 2 * C;
}

static bool safe_shard_name(const char *s) {
    /* exactly shard_NNNNN.bin: never a path, never a dot file */
    if (strlen(s) != 15 || strncmp(s, "shard_", 6) != 0 || strcmp(s + 11, ".bin") != 0)
        return false;
    for (int i = 6; i < 11; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* ---- emitting (libyaml) ---- */

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} membuf;

static int membuf_write(void *data, unsigned char *buffer, size_t size) {
    membuf *b = data;
    if (b->len + size + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (b->len + size + 1 > cap)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = true;
            return 0;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, buffer, size);
    b->len += size;
    b->buf[b->len] = '\0';
    return 1;
}

typedef struct {
    yaml_emitter_t em;
    bool ok;
} emitter;

static void emit(emitter *e, yaml_event_t *ev) {
    if (!e->ok) {
        yaml_event_delete(ev);
        return;
    }
    if (!yaml_emitter_emit(&e->em, ev))
        e->ok = false;
}

static void e_str(emitter *e, const char *s) {
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1, YAML_ANY_SCALAR_STYLE);
    emit(e, &ev);
}

static void e_u64(emitter *e, uint64_t v) {
    char b[32];
    FMT(b, "%" PRIu64, v);
    e_str(e, b);
}

static void e_map(emitter *e, bool start, bool flow) {
    yaml_event_t ev;
    if (start)
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                            flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
    else
        yaml_mapping_end_event_initialize(&ev);
    emit(e, &ev);
}

static void e_seq(emitter *e, bool start, bool flow) {
    yaml_event_t ev;
    if (start)
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                             flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
    else
        yaml_sequence_end_event_initialize(&ev);
    emit(e, &ev);
}

static void kv_str(emitter *e, const char *k, const char *v) {
    e_str(e, k);
    e_str(e, v);
}

static void kv_u64(emitter *e, const char *k, uint64_t v) {
    e_str(e, k);
    e_u64(e, v);
}

static void kv_dbl(emitter *e, const char *k, double v) {
    char b[40];
    FMT(b, "%.17g", v);
    kv_str(e, k, b);
}

/* What the writer knows beyond the manifest struct. */
typedef struct {
    const sr_config *cfg;
    const sr_model *model;
    int units_blocks; /* blocks per unit */
} emit_ctx;

/* Renders the manifest as YAML into *out (malloc'd), ending with the
 * manifest_sha256 line over everything before it. */
static sr_status manifest_render(const manifest *mf, const emit_ctx *x, char **out, size_t *out_len) {
    membuf mb = {0};
    emitter e = {.ok = true};
    if (!yaml_emitter_initialize(&e.em))
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    yaml_emitter_set_output(&e.em, membuf_write, &mb);
    yaml_emitter_set_width(&e.em, 120);
    yaml_emitter_set_unicode(&e.em, 1);
    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    emit(&e, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    emit(&e, &ev);
    e_map(&e, true, false);
    kv_str(&e, "format", CKPT_FORMAT);
    kv_u64(&e, "version", CKPT_VERSION);
    kv_str(&e, "created", mf->created);
    kv_str(&e, "job", mf->job);
    kv_str(&e, "host", mf->host);
    kv_u64(&e, "step", (uint64_t)mf->step);
    kv_u64(&e, "tokens", mf->tokens);
    e_str(&e, "data");
    e_map(&e, true, false);
    kv_u64(&e, "cursor", mf->cursor);
    kv_str(&e, "cursor_unit", "sequences of the global seeded order consumed; step s+1 starts here");
    e_map(&e, false, false);
    e_str(&e, "rng");
    e_map(&e, true, false);
    kv_u64(&e, "seed", mf->seed);
    kv_str(&e, "kind", "counter-based: init and data order are functions of (seed, index); no other state");
    e_map(&e, false, false);
    const sr_config *cfg = x->cfg;
    e_str(&e, "lr_schedule");
    e_map(&e, true, false);
    kv_str(&e, "schedule", sr_config_enum_name("train.schedule", cfg->schedule));
    kv_dbl(&e, "lr", cfg->lr);
    kv_dbl(&e, "min_lr", cfg->min_lr);
    kv_u64(&e, "warmup_steps", (uint64_t)cfg->warmup_steps);
    kv_u64(&e, "steps", (uint64_t)cfg->steps);
    kv_dbl(&e, "next_lr", sr_lr_at(cfg, mf->step));
    e_map(&e, false, false);
    e_str(&e, "world");
    e_map(&e, true, false);
    kv_u64(&e, "size", (uint64_t)mf->world);
    e_str(&e, "mesh");
    e_map(&e, true, true);
    kv_u64(&e, "shard", (uint64_t)mf->mesh_shard);
    kv_u64(&e, "replicate", (uint64_t)mf->mesh_replicate);
    e_map(&e, false, true);
    e_map(&e, false, false);
    e_str(&e, "model");
    e_map(&e, true, false);
    kv_u64(&e, "n_layer", (uint64_t)mf->dims.L);
    kv_u64(&e, "n_head", (uint64_t)mf->dims.NH);
    kv_u64(&e, "n_embd", (uint64_t)mf->dims.C);
    kv_u64(&e, "vocab_size", (uint64_t)mf->dims.V);
    kv_u64(&e, "padded_vocab_size", (uint64_t)mf->dims.Vp);
    kv_u64(&e, "seq_len", (uint64_t)mf->dims.T);
    kv_u64(&e, "parameters", mf->n_params);
    kv_str(&e, "hash", mf->model_hash);
    e_map(&e, false, false);
    e_str(&e, "config");
    e_map(&e, true, false);
    for (int i = 0; i < sr_config_nkeys(); i++) {
        char v[8192];
        sr_config_value_text(cfg, i, v, sizeof v);
        kv_str(&e, sr_config_key_name(i), v);
    }
    e_map(&e, false, false);
    e_str(&e, "tensors");
    e_seq(&e, true, false);
    for (int i = 0; i < x->model->n_tensors; i++) {
        const sr_tensor *t = &x->model->tensors[i];
        e_map(&e, true, true);
        kv_str(&e, "name", t->name);
        e_str(&e, "shape");
        e_seq(&e, true, true);
        if (t->ndim == 2)
            e_u64(&e, (uint64_t)t->rows);
        e_u64(&e, (uint64_t)t->cols);
        e_seq(&e, false, true);
        kv_str(&e, "dtype", "f32");
        kv_u64(&e, "unit",
               (uint64_t)(t->unit == x->model->d.L ? (x->model->d.L + x->units_blocks - 1) / x->units_blocks
                                                   : t->unit / x->units_blocks));
        kv_u64(&e, "offset", t->offset);
        e_map(&e, false, true);
    }
    e_seq(&e, false, false);
    kv_u64(&e, "chunk_bytes", mf->chunk_bytes);
    e_str(&e, "state");
    e_seq(&e, true, true);
    for (int k = 0; k < NSTATE; k++)
        e_str(&e, state_names[k]);
    e_seq(&e, false, true);
    e_str(&e, "files");
    e_seq(&e, true, false);
    for (int i = 0; i < mf->nfiles; i++) {
        const mf_file *f = &mf->files[i];
        e_map(&e, true, false);
        kv_str(&e, "name", f->name);
        kv_u64(&e, "shard", (uint64_t)f->shard);
        kv_u64(&e, "bytes", f->bytes);
        kv_u64(&e, "elements", f->elements);
        e_str(&e, "sections");
        e_map(&e, true, true);
        for (int k = 0; k < NSTATE; k++)
            kv_u64(&e, state_names[k], HEADER_BYTES + (uint64_t)k * 4 * f->elements);
        e_map(&e, false, true);
        e_str(&e, "slices");
        e_seq(&e, true, true);
        for (int s = 0; s < f->nslices; s++) {
            e_seq(&e, true, true);
            e_u64(&e, f->slices[s][0]);
            e_u64(&e, f->slices[s][1]);
            e_seq(&e, false, true);
        }
        e_seq(&e, false, true);
        e_str(&e, "sha256");
        e_seq(&e, true, false);
        for (uint64_t c = 0; c < f->nchunks; c++) {
            char h[65];
            hex32(f->sha[c], h);
            e_str(&e, h);
        }
        e_seq(&e, false, false);
        e_map(&e, false, false);
    }
    e_seq(&e, false, false);
    e_map(&e, false, false);
    yaml_document_end_event_initialize(&ev, 1);
    emit(&e, &ev);
    yaml_stream_end_event_initialize(&ev);
    emit(&e, &ev);
    bool ok = e.ok && !mb.oom && yaml_emitter_flush(&e.em);
    yaml_emitter_delete(&e.em);
    if (!ok) {
        free(mb.buf);
        return sr_error(SR_ERR_INTERNAL, "cannot render the checkpoint manifest");
    }
    unsigned char h[32];
    char hx[65], line[128];
    sha256(mb.buf, mb.len, h);
    hex32(h, hx);
    int n = snprintf(line, sizeof line, "manifest_sha256: %s\n", hx);
    membuf_write(&mb, (unsigned char *)line, (size_t)n);
    if (mb.oom) {
        free(mb.buf);
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    }
    *out = mb.buf;
    *out_len = mb.len;
    return SR_OK;
}

/* ---- parsing ---- */

typedef struct {
    yaml_document_t doc;
    const char *path;
    char *why;
    size_t why_len;
} pctx;

static bool perr(pctx *p, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr(pctx *p, const yaml_node_t *n, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        whyf(p->why, p->why_len, "%s:%zu:%zu: %s", p->path, n->start_mark.line + 1, n->start_mark.column + 1, msg);
    else
        whyf(p->why, p->why_len, "%s: %s", p->path, msg);
    return false;
}

static yaml_node_t *mget(pctx *p, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&p->doc, pr->value);
    }
    return NULL;
}

static const char *sval(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool get_u64(pctx *p, yaml_node_t *map, const char *key, uint64_t max, uint64_t *out) {
    yaml_node_t *n = mget(p, map, key);
    const char *s = sval(n);
    if (!s)
        return perr(p, n ? n : map, "expected key '%s' with a number", key);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || errno || v > max)
        return perr(p, n, "%s: expected an integer 0..%" PRIu64 ", got '%s'", key, max, s);
    *out = v;
    return true;
}

static bool get_int(pctx *p, yaml_node_t *map, const char *key, int max, int *out) {
    uint64_t v;
    if (!get_u64(p, map, key, (uint64_t)max, &v))
        return false;
    *out = (int)v;
    return true;
}

static bool get_str(pctx *p, yaml_node_t *map, const char *key, char *out, size_t n) {
    yaml_node_t *node = mget(p, map, key);
    const char *s = sval(node);
    if (!s)
        return perr(p, node ? node : map, "expected key '%s' with a string", key);
    snprintf(out, n, "%s", s);
    return true;
}

static int cmp_slice(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Reads <dir>/manifest.yaml, checks its self-checksum, parses and validates
 * it (names, sizes, chunk counts, slices tiling [0, parameters)).  On
 * failure returns false with the reason in why. */
static bool manifest_load(const char *dir, manifest *mf, char *why, size_t why_len) {
    memset(mf, 0, sizeof *mf);
    char path[PATH_MAX];
    FMT(path, "%s/%s", dir, MANIFEST);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        whyf(why, why_len, "%s: %s%s", path, strerror(errno),
             errno == ENOENT ? " (no manifest: not a complete checkpoint)" : "");
        return false;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > MANIFEST_MAX) {
        whyf(why, why_len, "%s: not a regular file of at most %zu MiB", path, MANIFEST_MAX >> 20);
        close(fd);
        return false;
    }
    size_t len = (size_t)sb.st_size;
    char *text = malloc(len + 1);
    if (!text || pread_all(fd, text, len, 0) != 0) {
        whyf(why, why_len, "%s: cannot read: %s", path, text ? strerror(errno ? errno : EIO) : "out of memory");
        free(text);
        close(fd);
        return false;
    }
    close(fd);
    text[len] = '\0';
    /* self-checksum: the last line covers every byte before it */
    static const char tag[] = "manifest_sha256: ";
    char *last = len >= 2 ? text + len - 2 : text;
    while (last > text && last[-1] != '\n')
        last--;
    unsigned char want[32], got[32];
    char hx[65] = {0};
    if (len < 2 || text[len - 1] != '\n' || strncmp(last, tag, sizeof tag - 1) != 0 ||
        (size_t)(text + len - 1 - (last + sizeof tag - 1)) != 64) {
        whyf(why, why_len,
             "%s: the last line is not 'manifest_sha256: <64 hex digits>' (truncated, edited or "
             "not a shardrun manifest)",
             path);
        free(text);
        return false;
    }
    memcpy(hx, last + sizeof tag - 1, 64);
    sha256(text, (size_t)(last - text), got);
    if (!unhex32(hx, want) || memcmp(want, got, 32) != 0) {
        whyf(why, why_len,
             "%s: SHA-256 of the manifest does not match its manifest_sha256 line (the manifest "
             "was altered or damaged)",
             path);
        free(text);
        return false;
    }

    pctx p = {.path = path, .why = why, .why_len = why_len};
    yaml_parser_t parser;
    bool ok = false;
    if (!yaml_parser_initialize(&parser)) {
        whyf(why, why_len, "out of memory");
        free(text);
        return false;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &p.doc)) {
        whyf(why, why_len, "%s:%zu:%zu: YAML error: %s", path, parser.problem_mark.line + 1,
             parser.problem_mark.column + 1, parser.problem ? parser.problem : "?");
        yaml_parser_delete(&parser);
        free(text);
        return false;
    }
    yaml_parser_delete(&parser);
    free(text);
    yaml_node_t *root = yaml_document_get_root_node(&p.doc);
    char fmt[64];
    uint64_t u, ver;
    yaml_node_t *n;
    if (!root || root->type != YAML_MAPPING_NODE) {
        perr(&p, root, "expected a mapping at the top");
        goto out;
    }
    if (!get_str(&p, root, "format", fmt, sizeof fmt))
        goto out;
    if (strcmp(fmt, CKPT_FORMAT) != 0) {
        perr(&p, mget(&p, root, "format"), "format: expected '%s', got '%s'", CKPT_FORMAT, fmt);
        goto out;
    }
    if (!get_u64(&p, root, "version", 1000, &ver))
        goto out;
    if (ver != CKPT_VERSION) {
        perr(&p, mget(&p, root, "version"), "version %" PRIu64 " is not supported (this shardrun reads %d)", ver,
             CKPT_VERSION);
        goto out;
    }
    if (!get_u64(&p, root, "step", (uint64_t)INT64_MAX, &u))
        goto out;
    mf->step = (int64_t)u;
    if (!get_u64(&p, root, "tokens", UINT64_MAX, &mf->tokens))
        goto out;
    get_str(&p, root, "created", mf->created, sizeof mf->created);
    get_str(&p, root, "job", mf->job, sizeof mf->job);
    get_str(&p, root, "host", mf->host, sizeof mf->host);
    if (!get_u64(&p, mget(&p, root, "data"), "cursor", UINT64_MAX, &mf->cursor) ||
        !get_u64(&p, mget(&p, root, "rng"), "seed", UINT64_MAX, &mf->seed))
        goto out;
    yaml_node_t *world = mget(&p, root, "world"), *mesh = mget(&p, world, "mesh");
    if (!get_int(&p, world, "size", 1 << 24, &mf->world) || !get_int(&p, mesh, "shard", 1 << 24, &mf->mesh_shard) ||
        !get_int(&p, mesh, "replicate", 1 << 24, &mf->mesh_replicate))
        goto out;
    yaml_node_t *model = mget(&p, root, "model");
    if (!get_int(&p, model, "n_layer", 1 << 20, &mf->dims.L) || !get_int(&p, model, "n_head", 1 << 20, &mf->dims.NH) ||
        !get_int(&p, model, "n_embd", 1 << 20, &mf->dims.C) ||
        !get_int(&p, model, "vocab_size", 1 << 24, &mf->dims.V) ||
        !get_int(&p, model, "padded_vocab_size", 1 << 24, &mf->dims.Vp) ||
        !get_int(&p, model, "seq_len", 1 << 24, &mf->dims.T) ||
        !get_u64(&p, model, "parameters", UINT64_MAX / 16, &mf->n_params) ||
        !get_str(&p, model, "hash", mf->model_hash, sizeof mf->model_hash))
        goto out;
    {
        char h[65];
        model_hash(&mf->dims, h);
        if (strcmp(h, mf->model_hash) != 0 || model_params(&mf->dims) != mf->n_params) {
            perr(&p, model, "model: hash or parameter count does not match its dims");
            goto out;
        }
    }
    if (!get_u64(&p, root, "chunk_bytes", (uint64_t)1 << 30, &mf->chunk_bytes))
        goto out;
    if (mf->chunk_bytes != CHUNK_BYTES) {
        perr(&p, mget(&p, root, "chunk_bytes"), "chunk_bytes: expected %" PRIu64, CHUNK_BYTES);
        goto out;
    }
    n = mget(&p, root, "config");
    if (n && n->type == YAML_MAPPING_NODE) {
        size_t np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
        mf->ckeys = calloc(np + 1, sizeof(char *));
        mf->cvals = calloc(np + 1, sizeof(char *));
        for (size_t i = 0; mf->ckeys && mf->cvals && i < np; i++) {
            yaml_node_pair_t *pr = &n->data.mapping.pairs.start[i];
            const char *k = sval(yaml_document_get_node(&p.doc, pr->key)),
                       *v = sval(yaml_document_get_node(&p.doc, pr->value));
            if (k && v) {
                mf->ckeys[mf->nconfig] = strdup(k);
                mf->cvals[mf->nconfig++] = strdup(v);
            }
        }
    }
    n = mget(&p, root, "files");
    if (!n || n->type != YAML_SEQUENCE_NODE || n->data.sequence.items.top == n->data.sequence.items.start) {
        perr(&p, n ? n : root, "expected key 'files' with a list of shard files");
        goto out;
    }
    mf->nfiles = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    mf->files = calloc((size_t)mf->nfiles, sizeof(mf_file));
    if (!mf->files) {
        perr(&p, NULL, "out of memory");
        goto out;
    }
    uint64_t total_slices = 0;
    for (int i = 0; i < mf->nfiles; i++) {
        mf_file *f = &mf->files[i];
        yaml_node_t *fn = yaml_document_get_node(&p.doc, n->data.sequence.items.start[i]);
        if (!get_str(&p, fn, "name", f->name, sizeof f->name))
            goto out;
        if (!safe_shard_name(f->name)) {
            perr(&p, mget(&p, fn, "name"),
                 "files: name '%s' is not a shard file name (shard_NNNNN.bin); a manifest may not name paths "
                 "outside its checkpoint directory",
                 f->name);
            goto out;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(mf->files[j].name, f->name) == 0) {
                perr(&p, mget(&p, fn, "name"), "files: '%s' is listed twice", f->name);
                goto out;
            }
        if (!get_int(&p, fn, "shard", 1 << 24, &f->shard) || !get_u64(&p, fn, "bytes", UINT64_MAX / 2, &f->bytes) ||
            !get_u64(&p, fn, "elements", UINT64_MAX / 64, &f->elements))
            goto out;
        if (f->bytes != HEADER_BYTES + 4 * NSTATE * f->elements) {
            perr(&p, mget(&p, fn, "bytes"),
                 "%s: bytes %" PRIu64 " disagree with elements %" PRIu64 " (expected %" PRIu64 ")", f->name, f->bytes,
                 f->elements, HEADER_BYTES + 4 * NSTATE * f->elements);
            goto out;
        }
        yaml_node_t *sec = mget(&p, fn, "sections");
        for (int k = 0; k < NSTATE; k++) {
            uint64_t off;
            if (!get_u64(&p, sec, state_names[k], UINT64_MAX, &off))
                goto out;
            if (off != HEADER_BYTES + (uint64_t)k * 4 * f->elements) {
                perr(&p, sec, "%s: section %s at %" PRIu64 " disagrees with the layout", f->name, state_names[k], off);
                goto out;
            }
        }
        yaml_node_t *sl = mget(&p, fn, "slices");
        if (!sl || sl->type != YAML_SEQUENCE_NODE) {
            perr(&p, sl ? sl : fn, "%s: expected 'slices' as a list of [begin, count]", f->name);
            goto out;
        }
        f->nslices = (int)(sl->data.sequence.items.top - sl->data.sequence.items.start);
        f->slices = calloc((size_t)f->nslices + 1, sizeof *f->slices);
        if (!f->slices) {
            perr(&p, NULL, "out of memory");
            goto out;
        }
        uint64_t sum = 0;
        for (int s = 0; s < f->nslices; s++) {
            yaml_node_t *pair = yaml_document_get_node(&p.doc, sl->data.sequence.items.start[s]);
            if (!pair || pair->type != YAML_SEQUENCE_NODE ||
                pair->data.sequence.items.top - pair->data.sequence.items.start != 2) {
                perr(&p, pair ? pair : sl, "%s: slice %d: expected [begin, count]", f->name, s);
                goto out;
            }
            for (int q = 0; q < 2; q++) {
                const char *v = sval(yaml_document_get_node(&p.doc, pair->data.sequence.items.start[q]));
                char *end;
                if (!v || !*v || *v == '-' || (f->slices[s][q] = strtoull(v, &end, 10), *end)) {
                    perr(&p, pair, "%s: slice %d: expected two integers", f->name, s);
                    goto out;
                }
            }
            if (f->slices[s][1] == 0 || f->slices[s][0] > mf->n_params ||
                f->slices[s][1] > mf->n_params - f->slices[s][0]) {
                perr(&p, pair, "%s: slice %d lies outside the %" PRIu64 " parameters", f->name, s, mf->n_params);
                goto out;
            }
            sum += f->slices[s][1];
        }
        if (sum != f->elements) {
            perr(&p, sl, "%s: slices hold %" PRIu64 " elements, elements says %" PRIu64, f->name, sum, f->elements);
            goto out;
        }
        total_slices += (uint64_t)f->nslices;
        yaml_node_t *sh = mget(&p, fn, "sha256");
        f->nchunks = (f->bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
        if (!sh || sh->type != YAML_SEQUENCE_NODE ||
            (uint64_t)(sh->data.sequence.items.top - sh->data.sequence.items.start) != f->nchunks) {
            perr(&p, sh ? sh : fn, "%s: expected 'sha256' with %" PRIu64 " chunk checksums (one per %" PRIu64 " bytes)",
                 f->name, f->nchunks, CHUNK_BYTES);
            goto out;
        }
        f->sha = malloc((size_t)f->nchunks * 32 + 1);
        if (!f->sha) {
            perr(&p, NULL, "out of memory");
            goto out;
        }
        for (uint64_t c = 0; c < f->nchunks; c++) {
            yaml_node_t *hn = yaml_document_get_node(&p.doc, sh->data.sequence.items.start[c]);
            const char *hv = sval(hn);
            if (!hv || !unhex32(hv, f->sha[c])) {
                perr(&p, hn ? hn : sh, "%s: chunk %" PRIu64 ": expected 64 lowercase hex digits", f->name, c);
                goto out;
            }
        }
        mf->total_bytes += f->bytes;
    }
    {
        /* the slices of all files tile [0, parameters) exactly */
        uint64_t(*all)[2] = malloc(sizeof *all * (size_t)(total_slices + 1));
        if (!all) {
            perr(&p, NULL, "out of memory");
            goto out;
        }
        size_t k = 0;
        for (int i = 0; i < mf->nfiles; i++)
            for (int s = 0; s < mf->files[i].nslices; s++) {
                all[k][0] = mf->files[i].slices[s][0];
                all[k++][1] = mf->files[i].slices[s][1];
            }
        qsort(all, k, sizeof *all, cmp_slice);
        uint64_t at = 0;
        bool tiled = true;
        for (size_t i = 0; i < k && tiled; i++) {
            tiled = all[i][0] == at;
            at += all[i][1];
        }
        free(all);
        if (!tiled || at != mf->n_params) {
            perr(&p, n, "files: the slices do not cover the %" PRIu64 " parameters exactly once", mf->n_params);
            goto out;
        }
    }
    ok = true;
out:
    yaml_document_delete(&p.doc);
    if (!ok)
        manifest_free(mf);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* reading shard state */

typedef struct {
    uint64_t off, bytes; /* in the file */
    float *dst;
} read_req;

static int cmp_req(const void *a, const void *b) {
    const read_req *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Reads the elements of `slices` (global [begin, end) at local offsets)
 * from the checkpoint in dir into dst[k] + local (k = params, m, v; a NULL
 * dst[k] is skipped), reading and verifying only the chunks that hold them.
 * *verified counts the bytes verified.  On failure: false with the file and
 * chunk in why. */
static bool read_state(const char *dir, const manifest *mf, const sr_slice *slices, int nslices, float *dst[NSTATE],
                       uint64_t *verified, char *why, size_t why_len) {
    unsigned char *buf = NULL;
    read_req *reqs = NULL;
    bool ok = false;
    int fd = -1;
    for (int fi = 0; fi < mf->nfiles; fi++) {
        const mf_file *f = &mf->files[fi];
        size_t nreq = 0, cap = 0;
        uint64_t e = 0; /* element offset in the file's sections */
        for (int s = 0; s < f->nslices; s++) {
            uint64_t b = f->slices[s][0], c = f->slices[s][1];
            for (int q = 0; q < nslices; q++) {
                uint64_t lo = b > slices[q].begin ? b : slices[q].begin;
                uint64_t hi = b + c < slices[q].end ? b + c : slices[q].end;
                if (lo >= hi)
                    continue;
                for (int k = 0; k < NSTATE; k++) {
                    if (!dst[k])
                        continue;
                    if (nreq == cap) {
                        cap = cap ? 2 * cap : 64;
                        read_req *nr = realloc(reqs, cap * sizeof *nr);
                        if (!nr) {
                            whyf(why, why_len, "out of memory");
                            goto out;
                        }
                        reqs = nr;
                    }
                    reqs[nreq++] = (read_req){HEADER_BYTES + (uint64_t)k * 4 * f->elements + 4 * (e + lo - b),
                                              4 * (hi - lo), dst[k] + slices[q].local + (lo - slices[q].begin)};
                }
            }
            e += c;
        }
        if (nreq == 0)
            continue;
        qsort(reqs, nreq, sizeof *reqs, cmp_req);
        char path[PATH_MAX];
        FMT(path, "%s/%s", dir, f->name);
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            whyf(why, why_len, "%s: %s (a shard file named in the manifest is missing or unreadable)", path,
                 strerror(errno));
            goto out;
        }
        struct stat sb;
        if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != f->bytes) {
            whyf(why, why_len, "%s: %lld bytes on disk, the manifest says %" PRIu64 " (truncated or replaced)", path,
                 (long long)sb.st_size, f->bytes);
            goto out;
        }
        shard_header h;
        if (pread_all(fd, &h, sizeof h, 0) != 0 || memcmp(h.magic, shard_magic, 8) != 0 || h.version != CKPT_VERSION ||
            (int)h.shard_index != f->shard || h.elements != f->elements || (int64_t)h.step != mf->step) {
            whyf(why, why_len, "%s: header does not match the manifest (magic, version, shard, step or size)", path);
            goto out;
        }
        if (!buf && !(buf = batch_alloc())) {
            whyf(why, why_len, "out of memory");
            goto out;
        }
        /* walk the needed chunks in runs of at most BATCH_CHUNKS */
        size_t r0 = 0;
        uint64_t next_chunk = 0;
        while (r0 < nreq) {
            uint64_t first = reqs[r0].off / CHUNK_BYTES;
            if (first < next_chunk)
                first = next_chunk;
            /* extend the run while requests keep needing the next chunks */
            uint64_t last = first;
            for (size_t r = r0; r < nreq; r++) {
                uint64_t a = reqs[r].off / CHUNK_BYTES, z = (reqs[r].off + reqs[r].bytes - 1) / CHUNK_BYTES;
                if (a > last + 1)
                    break;
                if (z > last)
                    last = z;
            }
            if (last >= first + BATCH_CHUNKS)
                last = first + BATCH_CHUNKS - 1;
            uint64_t off = first * CHUNK_BYTES, end = (last + 1) * CHUNK_BYTES;
            if (end > f->bytes)
                end = f->bytes;
            if (pread_all(fd, buf, (size_t)(end - off), off) != 0) {
                whyf(why, why_len, "%s: read failed at byte %" PRIu64 ": %s", path, off,
                     errno ? strerror(errno) : "file ended early");
                goto out;
            }
            unsigned char got[BATCH_CHUNKS][32];
            hash_chunks(buf, (size_t)(end - off), got);
            for (uint64_t c = first; c <= last && !bench_no_sha(); c++)
                if (memcmp(got[c - first], f->sha[c], 32) != 0) {
                    uint64_t cb = c * CHUNK_BYTES, ce = cb + CHUNK_BYTES < f->bytes ? cb + CHUNK_BYTES : f->bytes;
                    whyf(why, why_len, "%s: chunk %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 "): SHA-256 mismatch", path,
                         c, cb, ce - 1);
                    goto out;
                }
            *verified += end - off;
            /* copy the parts of requests inside [off, end) */
            for (size_t r = r0; r < nreq && reqs[r].off < end; r++) {
                uint64_t a = reqs[r].off > off ? reqs[r].off : off;
                uint64_t z = reqs[r].off + reqs[r].bytes < end ? reqs[r].off + reqs[r].bytes : end;
                if (a < z)
                    memcpy((char *)reqs[r].dst + (a - reqs[r].off), buf + (a - off), (size_t)(z - a));
            }
            while (r0 < nreq && reqs[r0].off + reqs[r0].bytes <= end)
                r0++;
            next_chunk = last + 1;
        }
        close(fd);
        fd = -1;
    }
    ok = true;
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    free(reqs);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* the run's checkpoint object */

struct sr_ckpt {
    const sr_config *cfg;
    sr_world *w;
    const sr_model *model;
    sr_fsdp *f;
    sr_group *g;
    char *dir; /* NULL: no checkpoint.dir */
    int lock_fd;
    int64_t last_step;
};

/* One rank's word in an agreement. */
typedef struct {
    int32_t status;
    int32_t flag;
    uint64_t value;
    char msg[1008];
} agree_msg;
_Static_assert(sizeof(agree_msg) % 4 == 0, "agree_msg is whole floats");

/* All ranks exchange (status, flag, value, message).  Returns the status
 * of the lowest failing rank (its message recorded, prefixed with the rank
 * when it is not this one) or SR_OK; all[] (may be NULL) receives every
 * rank's word. */
static sr_status agree(sr_ckpt *c, sr_status mine, int flag, uint64_t value, const char *msg, agree_msg **all_out) {
    int W = c->w->size;
    agree_msg me = {(int32_t)mine, flag, value, {0}};
    if (msg)
        FMT(me.msg, "%s", msg);
    agree_msg *all = calloc((size_t)W, sizeof *all);
    if (!all)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    sr_status st = sr_allgather(c->g, all, &me, sizeof me / 4, SR_DT_F32, NULL);
    if (st != SR_OK) {
        free(all);
        return st;
    }
    for (int r = 0; r < W; r++)
        if (all[r].status != SR_OK) {
            st = (sr_status)all[r].status;
            if (r == c->w->rank)
                sr_error(st, "%s", all[r].msg);
            else
                sr_error(st, "rank %d: %s", r, all[r].msg);
            break;
        }
    if (all_out)
        *all_out = all;
    else
        free(all);
    return st;
}

bool sr_ckpt_enabled(const sr_ckpt *c) { return c && c->dir; }
int64_t sr_ckpt_last_step(const sr_ckpt *c) { return c ? c->last_step : -1; }

static int mkdir_p(const char *path) {
    char tmp[PATH_MAX];
    FMT(tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, DIR_MODE) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, DIR_MODE) != 0 && errno != EEXIST)
        return -1;
    struct stat sb;
    if (stat(tmp, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* Rank 0: create the directory, lock it, remove leftovers of crashed saves. */
static sr_status open_dir_rank0(sr_ckpt *c) {
    const char *dir = c->dir;
    if (mkdir_p(dir) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create checkpoint.dir: %s", dir, strerror(errno));
    char path[PATH_MAX];
    FMT(path, "%s/.lock", dir);
    c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, FILE_MODE);
    if (c->lock_fd < 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create the checkpoint lock: %s", path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(c->lock_fd, F_SETLK, &fl) != 0) {
        int err = errno;
        char holder[512] = {0};
        ssize_t n = pread(c->lock_fd, holder, sizeof holder - 1, 0);
        if (n > 0) {
            holder[n] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
        }
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(c->lock_fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK && !holder[0])
            FMT(holder, "pid %d", (int)q.l_pid);
        close(c->lock_fd);
        c->lock_fd = -1;
        if (err == EACCES || err == EAGAIN)
            return sr_error(SR_ERR_CANTCREAT,
                            "%s: checkpoint.dir is in use by another job (%s holds %s) (hint: wait for that job, "
                            "or give this one its own checkpoint.dir)",
                            dir, holder[0] ? holder : "unknown holder", path);
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot lock: %s", path, strerror(err));
    }
    char info[768];
    time_t t = time(NULL);
    struct tm tm;
    char when[64];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n =
        snprintf(info, sizeof info, "host %s pid %d job %s since %s\n", c->w->host, (int)getpid(), c->w->job_id, when);
    if (ftruncate(c->lock_fd, 0) != 0 || pwrite(c->lock_fd, info, (size_t)n, 0) != n)
        sr_log_warn("%s: cannot record the lock holder: %s", path, strerror(errno));
    /* leftovers of interrupted saves and deletions */
    DIR *d = opendir(dir);
    if (!d)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read checkpoint.dir: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, ".step_", 6) == 0 || strcmp(de->d_name, ".latest.tmp") == 0) {
            FMT(path, "%s/%s", dir, de->d_name);
            struct stat sb;
            if (lstat(path, &sb) != 0)
                continue;
            int rc = S_ISDIR(sb.st_mode) ? remove_flat_dir(path) : unlink(path);
            if (rc == 0)
                sr_log_info("checkpoint: removed %s left by an interrupted save", path);
            else
                sr_log_warn("checkpoint: cannot remove %s left by an interrupted save: %s", path, strerror(errno));
        }
    closedir(d);
    return SR_OK;
}

sr_status sr_ckpt_open(sr_ckpt **out, const sr_config *cfg, sr_world *w, const sr_model *m, sr_fsdp *f) {
    *out = NULL;
    sr_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    c->cfg = cfg;
    c->w = w;
    c->model = m;
    c->f = f;
    c->g = sr_fsdp_world_group(f);
    c->lock_fd = -1;
    c->last_step = -1;
    *out = c;
    if (!cfg->ckpt_dir || !cfg->ckpt_dir[0])
        return SR_OK;
    c->dir = strdup(cfg->ckpt_dir);
    if (!c->dir)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    size_t n = strlen(c->dir);
    while (n > 1 && c->dir[n - 1] == '/')
        c->dir[--n] = '\0';
    sr_status st = SR_OK;
    if (w->rank == 0)
        st = open_dir_rank0(c);
    return agree(c, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
}

void sr_ckpt_close(sr_ckpt *c) {
    if (!c)
        return;
    if (c->lock_fd >= 0)
        close(c->lock_fd); /* releases the fcntl lock */
    free(c->dir);
    free(c);
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

static bool step_dir_name(const char *name, int64_t *step) {
    if (strlen(name) != 13 || strncmp(name, "step_", 5) != 0)
        return false;
    int64_t v = 0;
    for (int i = 5; i < 13; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return true;
}

/* step_* directories of dir, newest first; returns the count (at most max). */
static int scan_steps(const char *dir, int64_t *steps, int max) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    int64_t s;
    while ((de = readdir(d)))
        if (step_dir_name(de->d_name, &s) && n < max)
            steps[n++] = s;
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    return n;
}

static void log_config_changes(const sr_ckpt *c, const manifest *mf, const char *path) {
    for (int i = 0; i < sr_config_nkeys(); i++) {
        const char *k = sr_config_key_name(i);
        if (strcmp(k, "checkpoint.resume") == 0)
            continue;
        char v[8192];
        sr_config_value_text(c->cfg, i, v, sizeof v);
        for (int j = 0; j < mf->nconfig; j++)
            if (strcmp(mf->ckeys[j], k) == 0 && strcmp(mf->cvals[j], v) != 0)
                sr_log_warn("resume: %s changed since %s: %s -> %s (the new value takes effect)", k, path, mf->cvals[j],
                            v);
    }
}

/* One rank's attempt at loading a checkpoint.  *shape is set when the
 * model shape differs (a hard refusal, no fallback). */
static sr_status load_one(sr_ckpt *c, const char *path, manifest *mf, bool *shape, uint64_t *verified, char *why,
                          size_t why_len) {
    *shape = false;
    if (!manifest_load(path, mf, why, why_len))
        return SR_ERR_DATA;
    sr_model_dims d = c->model->d;
    if (mf->dims.L != d.L || mf->dims.NH != d.NH || mf->dims.C != d.C || mf->dims.V != d.V || mf->dims.T != d.T) {
        *shape = true;
        whyf(why, why_len,
             "%s was written for a different model (n_layer %d, n_head %d, n_embd %d, vocab_size %d, seq_len "
             "%d); this job has n_layer %d, n_head %d, n_embd %d, vocab_size %d, seq_len %d (hint: a new "
             "checkpoint.dir, or checkpoint.resume: never)",
             path, mf->dims.L, mf->dims.NH, mf->dims.C, mf->dims.V, mf->dims.T, d.L, d.NH, d.C, d.V, d.T);
        manifest_free(mf);
        return SR_ERR_DATA;
    }
    sr_fsdp_shard_state s;
    sr_fsdp_shard_state_view(c->f, &s);
    float *dst[NSTATE] = {s.params, s.m, s.v};
    if (!read_state(path, mf, s.slices, s.nslices, dst, verified, why, why_len)) {
        manifest_free(mf);
        return SR_ERR_DATA;
    }
    return SR_OK;
}

sr_status sr_ckpt_resume(sr_ckpt *c, sr_ckpt_progress *p, char *how, size_t how_len) {
    *p = (sr_ckpt_progress){0, 0};
    snprintf(how, how_len, "fresh");
    const char *mode = c->cfg->ckpt_resume ? c->cfg->ckpt_resume : "auto";
    if (strcmp(mode, "never") == 0) {
        sr_log_info("resume: checkpoint.resume is never: starting fresh");
        return SR_OK;
    }
    bool explicit_path = strcmp(mode, "auto") != 0;
    if (!explicit_path && !c->dir)
        return SR_OK;

    /* candidates: rank 0's scan, shared so every rank tries the same ones */
    int64_t *steps = calloc(MAX_CANDIDATES + 1, sizeof *steps);
    if (!steps)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    int n = 1;
    if (explicit_path) {
        struct stat sb;
        sr_status st = SR_OK;
        if (c->w->rank == 0 && stat(mode, &sb) != 0)
            st = sr_error(SR_ERR_NOINPUT, "checkpoint.resume: %s: %s (hint: a step_* directory, auto or never)", mode,
                          strerror(errno));
        st = agree(c, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
        if (st != SR_OK) {
            free(steps);
            return st;
        }
    } else {
        steps[0] = c->w->rank == 0 ? scan_steps(c->dir, steps + 1, MAX_CANDIDATES) : 0;
        sr_status st = sr_broadcast(c->g, steps, (MAX_CANDIDATES + 1) * 2, SR_DT_F32, 0, NULL);
        if (st != SR_OK) {
            free(steps);
            return st;
        }
        n = (int)steps[0];
        if (n == 0) {
            sr_log_info("resume: no checkpoint in %s: starting fresh", c->dir);
            free(steps);
            return SR_OK;
        }
    }
    char *report = calloc(1, 16384);
    size_t used = 0;
    sr_status result = SR_ERR_DATA;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (explicit_path)
            FMT(path, "%s", mode);
        else
            FMT(path, "%s/step_%08lld", c->dir, (long long)steps[1 + i]);
        manifest mf;
        bool shape = false;
        uint64_t verified = 0;
        char why[1000] = "";
        double t0 = now_s();
        sr_status mine = load_one(c, path, &mf, &shape, &verified, why, sizeof why);
        agree_msg *all = NULL;
        sr_status st = agree(c, mine, shape, verified, mine == SR_OK ? NULL : why, &all);
        if (st == SR_OK) {
            uint64_t total = 0;
            for (int r = 0; r < c->w->size; r++)
                total += all[r].value;
            double dt = now_s() - t0;
            sr_log_info("resume: loaded %s: step %lld, %llu sequences consumed, written by %d rank%s (mesh shard %d x "
                        "replicate %d) on %s; %.1f MB read and verified in %.2f s (%.0f MB/s)",
                        path, (long long)mf.step, (unsigned long long)mf.cursor, mf.world, mf.world == 1 ? "" : "s",
                        mf.mesh_shard, mf.mesh_replicate, mf.created, (double)total / 1e6, dt,
                        (double)total / 1e6 / (dt > 0 ? dt : 1e-9));
            sr_fsdp_shard_state s;
            sr_fsdp_shard_state_view(c->f, &s);
            if (mf.world != c->w->size || mf.mesh_shard != s.shard_count)
                sr_log_info("resume: resharded from %d rank%s (shard %d x replicate "
                            "%d) to %d (shard %d x replicate %d)",
                            mf.world, mf.world == 1 ? "" : "s", mf.mesh_shard, mf.mesh_replicate, c->w->size,
                            s.shard_count, s.replica_count);
            if (c->w->rank == 0)
                log_config_changes(c, &mf, path);
            p->step = mf.step;
            p->cursor = mf.cursor;
            c->last_step = mf.step;
            snprintf(how, how_len, "%lld", (long long)mf.step);
            manifest_free(&mf);
            free(all);
            result = SR_OK;
            break;
        }
        if (mine == SR_OK)
            manifest_free(&mf);
        if (st == SR_ERR_PEER || st == SR_ERR_INTERNAL) {
            free(all);
            result = st;
            break;
        }
        /* the first failing rank's reason */
        char reason[1100];
        FMT(reason, "%s", sr_error_message());
        bool any_shape = false;
        for (int r = 0; all && r < c->w->size; r++)
            any_shape = any_shape || all[r].flag;
        free(all);
        if (report && used < 16383) { /* the list of reasons, truncated at 16 KiB */
            int k = snprintf(report + used, 16384 - used, "%s  %s: %s", used ? "\n" : "", path, reason);
            used = k < 0 ? used : (used + (size_t)k < 16383 ? used + (size_t)k : 16383);
        }
        if (any_shape || explicit_path) {
            result = sr_error(SR_ERR_DATA, "checkpoint refused: %s", reason);
            break;
        }
        sr_log_warn("resume: %s is unusable: %s%s", path, reason,
                    i + 1 < n ? "; trying the next older checkpoint" : "");
        if (i + 1 == n)
            result = sr_error(SR_ERR_DATA,
                              "none of the %d checkpoint%s in %s verifies; not starting from scratch:\n%s\n(hint: "
                              "`shardrun ckpt verify %s` for details; set checkpoint.resume: never, or move them "
                              "away, to start fresh)",
                              n, n == 1 ? "" : "s", c->dir, report ? report : "", c->dir);
    }
    free(report);
    free(steps);
    return result;
}

/* ------------------------------------------------------------------------ */
/* saving */

/* The writer thread of write_shard: writes full staging buffers in order
 * while the caller fills and hashes the other one, and starts writeback of
 * each written range at once (sync_file_range), so the final fsync has
 * little left to do and the page cache never holds the whole shard dirty. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *buf[2];
    size_t len[2];
    bool full[2], done;
    int fd, err;
    uint64_t off;
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
        int err = 0;
        if (write_all(w->fd, w->buf[k], w->len[k]) != 0)
            err = errno;
        else /* a hint: a failure here changes nothing, fsync still decides */
            sync_file_range(w->fd, (off_t)w->off, (off_t)w->len[k], SYNC_FILE_RANGE_WRITE);
        w->off += w->len[k];
        pthread_mutex_lock(&w->mu);
        if (err && !w->err)
            w->err = err;
        w->full[k] = false;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* Streams this rank's shard (header, params, m, v) to path in staging
 * buffers of BATCH_CHUNKS chunks: the caller copies and hashes one buffer
 * (chunks in parallel) while the writer thread writes the other; fsyncs.
 * hashes receives one digest per chunk. */
static sr_status write_shard(const char *path, const sr_fsdp_shard_state *s, int64_t step, uint64_t elements,
                             unsigned char (*hashes)[32]) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, FILE_MODE);
    if (fd < 0)
        return errno == ENOSPC || errno == EDQUOT
                   ? write_error(path, errno)
                   : sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(errno));
    shard_writer w = {.fd = fd};
    w.buf[0] = batch_alloc();
    w.buf[1] = batch_alloc();
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
        close(fd);
        return sr_error(SR_ERR_INTERNAL, "out of memory for the checkpoint writer");
    }
    shard_header h = {.version = CKPT_VERSION,
                      .shard_index = (uint32_t)s->shard_index,
                      .shard_count = (uint32_t)s->shard_count,
                      .nslices = (uint32_t)s->nslices,
                      .step = (uint64_t)step,
                      .elements = elements};
    memcpy(h.magic, shard_magic, 8);
    const size_t cap = BATCH_CHUNKS * CHUNK_BYTES;
    size_t fill = 0;
    uint64_t chunk = 0;
    int k = 0, err = 0;
    /* pieces: header, then for each state each slice */
    const float *src[NSTATE] = {s->params, s->m, s->v};
    int piece = -1;
    const unsigned char *pp = (const unsigned char *)&h;
    size_t left = sizeof h;
    unsigned char *buf = w.buf[0];
    for (;;) {
        while (left > 0 && fill < cap) {
            size_t n = left < cap - fill ? left : cap - fill;
            memcpy(buf + fill, pp, n);
            fill += n;
            pp += n;
            left -= n;
        }
        bool done = false;
        if (left == 0) {
            piece++;
            if (piece < NSTATE * s->nslices) {
                const sr_slice *sl = &s->slices[piece % s->nslices];
                pp = (const unsigned char *)(src[piece / s->nslices] + sl->local);
                left = (sl->end - sl->begin) * sizeof(float);
                continue;
            }
            done = true;
        }
        if (fill == cap || (done && fill > 0)) {
            hash_chunks(buf, fill, hashes + chunk);
            chunk += (fill + CHUNK_BYTES - 1) / CHUNK_BYTES;
            pthread_mutex_lock(&w.mu);
            w.len[k] = fill;
            w.full[k] = true;
            pthread_cond_broadcast(&w.cv);
            k ^= 1; /* wait until the writer has emptied the other buffer */
            while (w.full[k])
                pthread_cond_wait(&w.cv, &w.mu);
            err = w.err;
            pthread_mutex_unlock(&w.mu);
            buf = w.buf[k];
            fill = 0;
            if (err)
                break;
        }
        if (done)
            break;
    }
    pthread_mutex_lock(&w.mu);
    w.done = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(thread, NULL);
    err = err ? err : w.err;
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    free(w.buf[0]);
    free(w.buf[1]);
    sr_status st = err ? write_error(path, err) : SR_OK;
    if (st == SR_OK && fsync(fd) != 0)
        st = write_error(path, errno);
    if (close(fd) != 0 && st == SR_OK)
        st = write_error(path, errno);
    return st;
}

static void write_file_all(const char *path, const char *text, size_t len, sr_status *st) {
    if (*st != SR_OK)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, FILE_MODE);
    if (fd < 0) {
        *st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(errno));
        return;
    }
    if (write_all(fd, text, len) != 0 || fsync(fd) != 0) {
        *st = write_error(path, errno);
        close(fd);
        return;
    }
    if (close(fd) != 0)
        *st = write_error(path, errno);
}

/* Retention (rank 0, after a commit): keep the newest checkpoint.keep, the
 * multiples of checkpoint.keep_every and the one just committed; delete the
 * rest by renaming each to a dot name first (a crash mid-delete leaves a
 * name the loader ignores and the next run removes). */
static void retain(sr_ckpt *c, int64_t committed) {
    int64_t *steps = calloc(MAX_CANDIDATES, sizeof *steps);
    if (!steps)
        return;
    int n = scan_steps(c->dir, steps, MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        bool keep = i < c->cfg->ckpt_keep || steps[i] == committed ||
                    (c->cfg->ckpt_keep_every > 0 && steps[i] % c->cfg->ckpt_keep_every == 0);
        if (keep)
            continue;
        char from[PATH_MAX], to[PATH_MAX];
        FMT(from, "%s/step_%08lld", c->dir, (long long)steps[i]);
        FMT(to, "%s/.step_%08lld.del", c->dir, (long long)steps[i]);
        if (rename(from, to) != 0 || remove_flat_dir(to) != 0)
            sr_log_warn("checkpoint: cannot remove %s: %s", from, strerror(errno));
        else
            sr_log_info("checkpoint: removed %s (checkpoint.keep %lld%s)", from, (long long)c->cfg->ckpt_keep,
                        c->cfg->ckpt_keep_every ? ", keep_every" : "");
    }
    fsync_path(c->dir);
    free(steps);
}

/* Rank 0's half of the commit: manifest, rename, parent fsync, latest. */
static sr_status commit_rank0(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const char *final, manifest *mf) {
    emit_ctx x = {c->cfg, c->model, (int)c->cfg->blocks_per_unit};
    char *text = NULL;
    size_t len = 0;
    sr_status st = manifest_render(mf, &x, &text, &len);
    if (st != SR_OK)
        return st;
    crash_site("before_manifest", p->step);
    char path[PATH_MAX];
    FMT(path, "%s/%s", tmp, MANIFEST);
    write_file_all(path, text, len, &st);
    free(text);
    if (st != SR_OK)
        return st;
    crash_site("after_manifest", p->step);
    if (fsync_path(tmp) != 0)
        return write_error(tmp, errno);
    crash_site("before_rename", p->step);
    /* an older run's checkpoint of the same step is replaced */
    char old[PATH_MAX];
    FMT(old, "%s/.step_%08lld.old", c->dir, (long long)p->step);
    struct stat sb;
    bool replaced = false;
    if (lstat(final, &sb) == 0) {
        if (rename(final, old) != 0)
            return sr_error(SR_ERR_CANTCREAT, "%s: cannot move the existing checkpoint aside: %s", final,
                            strerror(errno));
        replaced = true;
    }
    if (rename(tmp, final) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot rename into place: %s", final, strerror(errno));
    if (fsync_path(c->dir) != 0)
        return write_error(c->dir, errno);
    crash_site("after_rename", p->step);
    if (replaced && remove_flat_dir(old) != 0)
        sr_log_warn("checkpoint: cannot remove %s: %s", old, strerror(errno));
    crash_site("before_latest", p->step);
    char link_tmp[PATH_MAX], link[PATH_MAX], target[32];
    FMT(link_tmp, "%s/.latest.tmp", c->dir);
    FMT(link, "%s/latest", c->dir);
    FMT(target, "step_%08lld", (long long)p->step);
    unlink(link_tmp);
    if (symlink(target, link_tmp) != 0 || rename(link_tmp, link) != 0)
        sr_log_warn("checkpoint: cannot update %s: %s (the checkpoint itself is committed)", link, strerror(errno));
    else if (fsync_path(c->dir) != 0)
        return write_error(c->dir, errno);
    crash_site("after_latest", p->step);
    retain(c, p->step);
    return SR_OK;
}

sr_status sr_ckpt_save(sr_ckpt *c, const sr_ckpt_progress *p, uint64_t *bytes_out) {
    if (bytes_out)
        *bytes_out = 0;
    if (!c->dir)
        return SR_OK;
    double t0 = now_s();
    sr_fsdp_shard_state s;
    sr_fsdp_shard_state_view(c->f, &s);
    char tmp[PATH_MAX], final[PATH_MAX];
    FMT(tmp, "%s/.step_%08lld.tmp", c->dir, (long long)p->step);
    FMT(final, "%s/step_%08lld", c->dir, (long long)p->step);
    sr_log_info("checkpoint: saving step %lld to %s", (long long)p->step, final);

    /* 1. rank 0 makes the temporary directory */
    sr_status st = SR_OK;
    if (c->w->rank == 0) {
        remove_flat_dir(tmp);
        if (mkdir(tmp, DIR_MODE) != 0)
            st = errno == ENOSPC || errno == EDQUOT
                     ? write_error(tmp, errno)
                     : sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", tmp, strerror(errno));
    }
    st = agree(c, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st != SR_OK)
        return st;

    /* 2. replica 0 of every shard index writes its file */
    uint64_t elements = 0;
    for (int i = 0; i < s.nslices; i++)
        elements += s.slices[i].end - s.slices[i].begin;
    uint64_t max_bytes = HEADER_BYTES + 4 * NSTATE * (uint64_t)s.max_shard_elements;
    uint64_t max_chunks = (max_bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    /* one record per rank: status word + hashes, gathered to everyone */
    size_t rec = sizeof(agree_msg) + (size_t)max_chunks * 32;
    unsigned char *mine = calloc(1, rec), *all = calloc((size_t)c->w->size, rec);
    if (!mine || !all) {
        free(mine);
        free(all);
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    }
    agree_msg *me = (agree_msg *)mine;
    bool writer = s.replica_index == 0;
    if (writer) {
        char path[PATH_MAX];
        FMT(path, "%s/shard_%05d.bin", tmp, s.shard_index);
        sr_status ws = write_shard(path, &s, p->step, elements, (unsigned char(*)[32])(mine + sizeof(agree_msg)));
        me->status = (int32_t)ws;
        me->value = HEADER_BYTES + 4 * NSTATE * elements;
        if (ws != SR_OK)
            snprintf(me->msg, sizeof me->msg, "%s", sr_error_message());
        else
            crash_site("after_shard_write", p->step);
    }
    st = sr_allgather(c->g, all, mine, rec / 4, SR_DT_F32, NULL);
    free(mine);
    if (st != SR_OK) {
        free(all);
        return st;
    }
    uint64_t total = 0;
    for (int r = 0; r < c->w->size && st == SR_OK; r++) {
        agree_msg *a = (agree_msg *)(all + (size_t)r * rec);
        total += a->value;
        if (a->status != SR_OK)
            st = r == c->w->rank ? sr_error((sr_status)a->status, "%s", a->msg)
                                 : sr_error((sr_status)a->status, "rank %d: %s", r, a->msg);
    }

    /* 3. rank 0 commits */
    if (c->w->rank == 0) {
        if (st == SR_OK) {
            manifest mf = {0};
            mf.step = p->step;
            mf.cursor = p->cursor;
            mf.tokens = p->cursor * (uint64_t)c->model->d.T;
            mf.seed = (uint64_t)c->cfg->seed;
            mf.world = c->w->size;
            mf.mesh_shard = s.shard_count;
            mf.mesh_replicate = s.replica_count;
            mf.dims = c->model->d;
            mf.n_params = c->model->n_params;
            model_hash(&mf.dims, mf.model_hash);
            mf.chunk_bytes = CHUNK_BYTES;
            time_t t = time(NULL);
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(mf.created, sizeof mf.created, "%Y-%m-%dT%H:%M:%SZ", &tm);
            FMT(mf.job, "%s", c->w->job_id);
            FMT(mf.host, "%s", c->w->host);
            mf.nfiles = s.shard_count;
            mf.files = calloc((size_t)mf.nfiles, sizeof(mf_file));
            if (!mf.files)
                st = sr_error(SR_ERR_INTERNAL, "out of memory");
            /* the ranks of replica 0 are world ranks 0..S-1 */
            for (int i = 0; st == SR_OK && i < mf.nfiles; i++) {
                mf_file *f = &mf.files[i];
                agree_msg *a = (agree_msg *)(all + (size_t)i * rec);
                snprintf(f->name, sizeof f->name, "shard_%05d.bin", i);
                f->shard = i;
                f->bytes = a->value;
                f->elements = (f->bytes - HEADER_BYTES) / (4 * NSTATE);
                f->nchunks = (f->bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
                f->sha = (unsigned char(*)[32])((unsigned char *)a + sizeof(agree_msg));
                f->slices = NULL;
            }
            /* each shard index's slices: the same unit walk fsdp does */
            int nu = sr_fsdp_units(c->f);
            sr_slice *sl = malloc(sizeof *sl * (size_t)(nu + 1));
            if (!sl && st == SR_OK)
                st = sr_error(SR_ERR_INTERNAL, "out of memory");
            for (int i = 0; st == SR_OK && i < mf.nfiles; i++) {
                mf_file *f = &mf.files[i];
                f->slices = calloc((size_t)nu + 1, sizeof *f->slices);
                if (!f->slices) {
                    st = sr_error(SR_ERR_INTERNAL, "out of memory");
                    break;
                }
                f->nslices = sr_fsdp_shard_slices(c->f, i, sl, nu + 1);
                for (int q = 0; q < f->nslices; q++) {
                    f->slices[q][0] = sl[q].begin;
                    f->slices[q][1] = sl[q].end - sl[q].begin;
                }
            }
            free(sl);
            if (st == SR_OK)
                st = commit_rank0(c, p, tmp, final, &mf);
            for (int i = 0; i < mf.nfiles; i++) {
                free(mf.files[i].slices);
                mf.files[i].sha = NULL;
            }
            free(mf.files);
        }
        if (st != SR_OK) {
            char keep[1024];
            FMT(keep, "%s", sr_error_message());
            remove_flat_dir(tmp);
            sr_error(st, "%s", keep);
        }
    }
    free(all);
    /* 4. the final agreement: nobody exits before the commit is known */
    sr_status fin = agree(c, c->w->rank == 0 ? st : SR_OK, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = fin;
    if (st != SR_OK) {
        char keep[1024];
        FMT(keep, "%s", sr_error_message());
        return sr_error(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched): %s",
                        (long long)p->step, keep);
    }
    double dt = now_s() - t0;
    c->last_step = p->step;
    if (bytes_out)
        *bytes_out = total;
    sr_log_info("checkpoint: step %lld saved: %.1f MB in %.2f s (%.0f MB/s, SHA-256 per 4 MiB chunk)",
                (long long)p->step, (double)total / 1e6, dt, (double)total / 1e6 / (dt > 0 ? dt : 1e-9));
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* offline tools */

/* Prints one verification failure (fmt ends with a newline) and keeps the
 * first one, without the newline, in first[] for the final error message. */
static void failed(FILE *out, char *first, size_t first_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void failed(FILE *out, char *first, size_t first_len, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fputs(line, out);
    if (!first[0]) {
        whyf(first, first_len, "%s", line);
        first[strcspn(first, "\n")] = '\0';
    }
}

/* Verifies every chunk of every file of one checkpoint; prints a line per
 * file and per failure.  Returns the number of problems (0 = verified). */
static int verify_all(const char *path, FILE *out, uint64_t *bytes, char *first, size_t first_len) {
    manifest mf;
    char why[1200];
    if (!manifest_load(path, &mf, why, sizeof why)) {
        failed(out, first, first_len, "%s: FAILED: %s\n", path, why);
        return 1;
    }
    int bad = 0;
    unsigned char *buf = batch_alloc();
    for (int fi = 0; buf && fi < mf.nfiles; fi++) {
        const mf_file *f = &mf.files[fi];
        char fp[PATH_MAX];
        FMT(fp, "%s/%s", path, f->name);
        int fd = open(fp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb;
        if (fd < 0) {
            failed(out, first, first_len, "%s: FAILED: %s (named in the manifest)\n", fp, strerror(errno));
            bad++;
            continue;
        }
        if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != f->bytes) {
            failed(out, first, first_len,
                   "%s: FAILED: %lld bytes on disk, the manifest says %" PRIu64 " (truncated or replaced)\n", fp,
                   (long long)sb.st_size, f->bytes);
            close(fd);
            bad++;
            continue;
        }
        shard_header h;
        int fbad = 0;
        if (pread_all(fd, &h, sizeof h, 0) != 0 || memcmp(h.magic, shard_magic, 8) != 0 || h.version != CKPT_VERSION ||
            (int)h.shard_index != f->shard || h.elements != f->elements || (int64_t)h.step != mf.step) {
            failed(out, first, first_len, "%s: FAILED: header does not match the manifest\n", fp);
            fbad++;
        }
        for (uint64_t c0 = 0; c0 < f->nchunks; c0 += BATCH_CHUNKS) {
            uint64_t off = c0 * CHUNK_BYTES, end = off + BATCH_CHUNKS * CHUNK_BYTES;
            if (end > f->bytes)
                end = f->bytes;
            if (pread_all(fd, buf, (size_t)(end - off), off) != 0) {
                failed(out, first, first_len, "%s: FAILED: read error at byte %" PRIu64 ": %s\n", fp, off,
                       errno ? strerror(errno) : "file ended early");
                fbad++;
                break;
            }
            unsigned char got[BATCH_CHUNKS][32];
            hash_chunks(buf, (size_t)(end - off), got);
            for (uint64_t c = c0; c < f->nchunks && c < c0 + BATCH_CHUNKS; c++)
                if (memcmp(got[c - c0], f->sha[c], 32) != 0) {
                    uint64_t cb = c * CHUNK_BYTES, ce = cb + CHUNK_BYTES < f->bytes ? cb + CHUNK_BYTES : f->bytes;
                    failed(out, first, first_len,
                           "%s: FAILED: chunk %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64 "): SHA-256 mismatch\n", fp, c,
                           cb, ce - 1);
                    fbad++;
                }
            *bytes += end - off;
        }
        close(fd);
        if (!fbad)
            fprintf(out, "%s: OK (%" PRIu64 " bytes, %" PRIu64 " chunk%s)\n", fp, f->bytes, f->nchunks,
                    f->nchunks == 1 ? "" : "s");
        bad += fbad;
    }
    if (!buf) {
        failed(out, first, first_len, "%s: FAILED: out of memory\n", path);
        bad++;
    }
    free(buf);
    manifest_free(&mf);
    return bad;
}

/* A checkpoint directory (as opposed to a checkpoint.dir): it has a
 * manifest, or is named step_<8 digits>. */
static bool has_manifest(const char *path) {
    char m[PATH_MAX];
    struct stat sb;
    FMT(m, "%s/%s", path, MANIFEST);
    if (lstat(m, &sb) == 0)
        return true;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    char base[64];
    int64_t step;
    if (n - b >= sizeof base)
        return false;
    memcpy(base, path + b, n - b);
    base[n - b] = '\0';
    return step_dir_name(base, &step);
}

static sr_status need_dir(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return sr_error(SR_ERR_NOINPUT, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return sr_error(SR_ERR_NOINPUT, "%s: not a directory (hint: a checkpoint.dir or one of its step_* directories)",
                        path);
    return SR_OK;
}

sr_status sr_ckpt_verify(const char *path, FILE *out) {
    sr_status st = need_dir(path);
    if (st != SR_OK)
        return st;
    uint64_t bytes = 0;
    int bad = 0, n = 1;
    char first[1200] = "";
    double t0 = now_s();
    if (has_manifest(path)) {
        bad = verify_all(path, out, &bytes, first, sizeof first);
    } else {
        int64_t *steps = calloc(MAX_CANDIDATES, sizeof *steps);
        if (!steps)
            return sr_error(SR_ERR_INTERNAL, "out of memory");
        n = scan_steps(path, steps, MAX_CANDIDATES);
        if (n == 0) {
            free(steps);
            return sr_error(SR_ERR_NOINPUT,
                            "%s: no manifest.yaml and no step_* checkpoints (hint: shardrun ckpt list DIR)", path);
        }
        for (int i = 0; i < n; i++) {
            char p[PATH_MAX];
            FMT(p, "%s/step_%08lld", path, (long long)steps[i]);
            bad += verify_all(p, out, &bytes, first, sizeof first) ? 1 : 0;
        }
        free(steps);
    }
    double dt = now_s() - t0;
    if (bad)
        return sr_error(SR_ERR_DATA, "%s: verification failed, %d problem%s; the first: %s", path, bad,
                        bad == 1 ? "" : "s", first);
    fprintf(out, "%s: OK: %d checkpoint%s, %.1f MB verified in %.2f s\n", path, n, n == 1 ? "" : "s",
            (double)bytes / 1e6, dt);
    return SR_OK;
}

sr_status sr_ckpt_list(const char *dir, FILE *out) {
    sr_status st = need_dir(dir);
    if (st != SR_OK)
        return st;
    char latest[64] = "";
    char lp[PATH_MAX];
    FMT(lp, "%s/latest", dir);
    ssize_t ln = readlink(lp, latest, sizeof latest - 1);
    latest[ln > 0 ? ln : 0] = '\0';
    int64_t *steps = calloc(MAX_CANDIDATES, sizeof *steps);
    if (!steps)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    int n = scan_steps(dir, steps, MAX_CANDIDATES);
    fprintf(out, "%-15s %10s %6s %12s %-20s %s\n", "checkpoint", "step", "ranks", "MB", "created", "state");
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX], name[32], why[1200];
        FMT(name, "step_%08lld", (long long)steps[i]);
        FMT(p, "%s/%s", dir, name);
        manifest mf;
        if (manifest_load(p, &mf, why, sizeof why)) {
            fprintf(out, "%-15s %10lld %6d %12.1f %-20s manifest ok%s\n", name, (long long)mf.step, mf.world,
                    (double)mf.total_bytes / 1e6, mf.created, strcmp(latest, name) == 0 ? ", latest" : "");
            manifest_free(&mf);
        } else {
            fprintf(out, "%-15s %10lld %6s %12s %-20s unusable: %s\n", name, (long long)steps[i], "-", "-", "-", why);
        }
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, ".step_", 6) == 0)
            fprintf(out, "%-15s %10s %6s %12s %-20s incomplete (interrupted save; ignored, removed by the next run)\n",
                    de->d_name, "-", "-", "-", "-");
    if (d)
        closedir(d);
    if (n == 0)
        fprintf(out, "(no checkpoints in %s)\n", dir);
    free(steps);
    return SR_OK;
}

/* The offline tools' start: PATH is a directory whose manifest parses; the
 * model's tensor table (no activations) for its dims.  On failure nothing is
 * left to free. */
static sr_status open_offline(const char *path, manifest *mf, sr_model *model) {
    sr_status st = need_dir(path);
    if (st != SR_OK)
        return st;
    char why[1200];
    if (!manifest_load(path, mf, why, sizeof why))
        return sr_error(has_manifest(path) ? SR_ERR_DATA : SR_ERR_NOINPUT, "%s", why);
    st = sr_model_init(model, mf->dims, &sr_ops_cpu, 0, false);
    if (st != SR_OK) {
        sr_model_free(model);
        manifest_free(mf);
    }
    return st;
}

sr_status sr_ckpt_inspect(const char *path, FILE *out) {
    manifest mf;
    sr_model model;
    sr_status st = open_offline(path, &mf, &model);
    if (st != SR_OK)
        return st;
    fprintf(out, "checkpoint   %s\n", path);
    fprintf(out, "format       %s version %d, created %s on %s (job %s)\n", CKPT_FORMAT, CKPT_VERSION, mf.created,
            mf.host, mf.job);
    fprintf(out, "step         %lld\n", (long long)mf.step);
    fprintf(out, "tokens       %llu (data cursor %llu sequences, seed %llu)\n", (unsigned long long)mf.tokens,
            (unsigned long long)mf.cursor, (unsigned long long)mf.seed);
    fprintf(out, "world size   %d (mesh shard %d x replicate %d)\n", mf.world, mf.mesh_shard, mf.mesh_replicate);
    fprintf(out,
            "model        n_layer %d, n_head %d, n_embd %d, vocab_size %d (padded %d), seq_len %d; %llu "
            "parameters; hash %.16s\n",
            mf.dims.L, mf.dims.NH, mf.dims.C, mf.dims.V, mf.dims.Vp, mf.dims.T, (unsigned long long)mf.n_params,
            mf.model_hash);
    fprintf(
        out, "state        fp32 master parameters, Adam m, Adam v: %.1f MB in %d file%s, SHA-256 per %llu MiB chunk\n",
        (double)mf.total_bytes / 1e6, mf.nfiles, mf.nfiles == 1 ? "" : "s", (unsigned long long)(CHUNK_BYTES >> 20));
    fprintf(out, "files:\n");
    for (int i = 0; i < mf.nfiles; i++)
        fprintf(out, "  %-16s shard %d, %llu bytes, %llu elements in %d slice%s, %llu chunk%s\n", mf.files[i].name,
                mf.files[i].shard, (unsigned long long)mf.files[i].bytes, (unsigned long long)mf.files[i].elements,
                mf.files[i].nslices, mf.files[i].nslices == 1 ? "" : "s", (unsigned long long)mf.files[i].nchunks,
                mf.files[i].nchunks == 1 ? "" : "s");
    fprintf(out, "tensors (%d):\n", model.n_tensors);
    for (int i = 0; i < model.n_tensors; i++) {
        const sr_tensor *t = &model.tensors[i];
        char shape[64];
        if (t->ndim == 2)
            FMT(shape, "[%d, %d]", t->rows, t->cols);
        else
            FMT(shape, "[%d]", t->cols);
        fprintf(out, "  %-28s %-14s f32  offset %zu\n", t->name, shape, t->offset);
    }
    sr_model_free(&model);
    manifest_free(&mf);
    return SR_OK;
}

/* llm.c's model file (train_gpt2.c, version 3): 256 int32 header {20240326,
 * 3, max_seq_len, vocab_size, num_layers, num_heads, channels,
 * padded_vocab_size}, then the fp32 tensors in this order, each one
 * concatenated over the layers. */
sr_status sr_ckpt_export(const char *path, const char *dest, FILE *out) {
    manifest mf;
    sr_model model;
    sr_status st = open_offline(path, &mf, &model);
    if (st != SR_OK)
        return st;
    char why[1200];
    float *all = malloc(model.n_params * sizeof(float));
    if (!all)
        st = sr_error(SR_ERR_INTERNAL, "out of memory for %zu parameters", model.n_params);
    if (st == SR_OK) {
        sr_slice whole = {0, model.n_params, 0};
        float *dst[NSTATE] = {all, NULL, NULL};
        uint64_t verified = 0;
        if (!read_state(path, &mf, &whole, 1, dst, &verified, why, sizeof why))
            st = sr_error(SR_ERR_DATA, "%s", why);
    }
    char tmp[PATH_MAX];
    FMT(tmp, "%s.tmp%d", dest, (int)getpid());
    FILE *f = NULL;
    int fd = st == SR_OK ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, FILE_MODE) : -1;
    if (st == SR_OK && (fd < 0 || !(f = fdopen(fd, "wb")))) {
        st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (st == SR_OK) {
        const sr_model_dims *d = &mf.dims;
        int32_t header[256] = {20240326, 3, d->T, d->V, d->L, d->NH, d->C, d->Vp};
        bool ok = fwrite(header, sizeof header, 1, f) == 1;
        int L = d->L;
        /* root tensors first (wte, wpe), then each block tensor over layers,
         * then ln_f */
        const sr_tensor *T = model.tensors;
        int root = L * SR_NBLOCK_TENSORS;
        ok = ok &&
             fwrite(all + T[root + SR_WTE].offset, sizeof(float), T[root + SR_WTE].numel, f) == T[root + SR_WTE].numel;
        ok = ok &&
             fwrite(all + T[root + SR_WPE].offset, sizeof(float), T[root + SR_WPE].numel, f) == T[root + SR_WPE].numel;
        for (int k = 0; k < SR_NBLOCK_TENSORS && ok; k++)
            for (int l = 0; l < L && ok; l++) {
                const sr_tensor *t = &T[l * SR_NBLOCK_TENSORS + k];
                ok = fwrite(all + t->offset, sizeof(float), t->numel, f) == t->numel;
            }
        ok = ok && fwrite(all + T[root + SR_LNFW].offset, sizeof(float), T[root + SR_LNFW].numel, f) ==
                       T[root + SR_LNFW].numel;
        ok = ok && fwrite(all + T[root + SR_LNFB].offset, sizeof(float), T[root + SR_LNFB].numel, f) ==
                       T[root + SR_LNFB].numel;
        ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
        int err = errno;
        if (fclose(f) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok)
            st = write_error(dest, err);
        else if (rename(tmp, dest) != 0)
            st = sr_error(SR_ERR_CANTCREAT, "%s: cannot rename into place: %s", dest, strerror(errno));
        if (st != SR_OK)
            unlink(tmp);
    }
    if (st == SR_OK)
        fprintf(out,
                "shardrun: wrote %s: llm.c model file (version 3, fp32), step %lld, %zu parameters (%d layers, "
                "%d heads, %d channels, vocab %d padded to %d, seq_len %d)\n",
                dest, (long long)mf.step, model.n_params, mf.dims.L, mf.dims.NH, mf.dims.C, mf.dims.V, mf.dims.Vp,
                mf.dims.T);
    free(all);
    sr_model_free(&model);
    manifest_free(&mf);
    return st;
}
