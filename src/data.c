/* data.c — shard reading (mmap), validation, the seeded global order and
 * `data prepare`.  See data.h for the formats and the order contract. */
#include "srconfig.h"

#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "mem.h"
#include "rng.h"

typedef struct {
    char *path;
    void *map; /* whole file mapping (NULL for the embedded corpus) */
    size_t map_len;
    const void *tokens; /* first token */
    int tok_bytes;      /* 1 (embedded bytes), 2 or 4 */
    uint64_t ntok;
    uint64_t nwin;      /* windows of T+1 tokens: (ntok - 1) / T */
    uint64_t first_win; /* global index of this shard's first window */
    int64_t mtime_ns;   /* when opened (-1: the embedded corpus) */
} shard;

struct sr_data {
    shard *shards;
    int nshards;
    int T;
    uint64_t nwin, ntok;
    char desc[512];
};

static void data_free(sr_data *d) {
    if (!d)
        return;
    for (int i = 0; i < d->nshards; i++) {
        if (d->shards[i].map)
            munmap(d->shards[i].map, d->shards[i].map_len);
        free(d->shards[i].path);
    }
    free(d->shards);
    free(d);
}

void sr_data_close(sr_data *d) { data_free(d); }

int sr_data_nshards(const sr_data *d) { return d ? d->nshards : 0; }

void sr_data_shard(const sr_data *d, int i, sr_data_shard_info *out) {
    const shard *s = &d->shards[i];
    out->path = s->path;
    out->embedded = s->map == NULL;
    out->bytes = s->map ? s->map : s->tokens;
    out->len = s->map ? s->map_len : (size_t)s->ntok;
    out->mtime_ns = s->mtime_ns;
}

sr_status sr_data_check_shard(const char *path, const void *bytes, size_t len, int64_t vocab, int *tok_bytes_out,
                              uint64_t *ntok_out) {
    const size_t header_bytes = SR_DATA_HEADER_INTS * sizeof(int32_t);
    if (len < header_bytes)
        return sr_error(SR_ERR_DATA,
                        "%s: %zu bytes is shorter than the 1024-byte llm.c header (truncated?) (hint: make shards with "
                        "shardrun data prepare)",
                        path, len);
    int32_t h[3];
    memcpy(h, bytes, sizeof h);
    int tok_bytes = 0;
    if (h[0] == SR_DATA_MAGIC_U16 && h[1] == 1)
        tok_bytes = 2;
    else if (h[0] == SR_DATA_MAGIC_U32 && (h[1] == 7 || h[1] == 1))
        tok_bytes = 4;
    const int32_t magic = h[0], version = h[1], count = h[2];
    if (!tok_bytes) {
        if (magic == SR_DATA_MAGIC_U16 || magic == SR_DATA_MAGIC_U32)
            return sr_error(SR_ERR_DATA, "%s: unsupported version %d for magic %d; expected version %s", path, version,
                            magic, magic == SR_DATA_MAGIC_U16 ? "1" : "7");
        return sr_error(SR_ERR_DATA,
                        "%s: bad magic %d; expected %d (uint16 tokens) or %d (uint32 tokens), the llm.c shard "
                        "formats (hint: make shards with shardrun data prepare)",
                        path, magic, SR_DATA_MAGIC_U16, SR_DATA_MAGIC_U32);
    }
    if (count < 0)
        return sr_error(SR_ERR_DATA, "%s: negative token count %d in the header", path, count);
    uint64_t ntok = (uint64_t)(uint32_t)count;
    uint64_t want = header_bytes + ntok * (uint64_t)tok_bytes;
    if ((uint64_t)len != want)
        return sr_error(SR_ERR_DATA, "%s: header says %llu tokens (%llu bytes) but the file has %zu bytes%s", path,
                        (unsigned long long)ntok, (unsigned long long)want, len,
                        (uint64_t)len < want ? " (truncated)" : " (trailing bytes)");
    const unsigned char *toks = (const unsigned char *)bytes + header_bytes;
    /* Check every token once, here, so a bad token can never reach training
     * (a negative vocab: the header and size alone, `config check`'s) */
    for (uint64_t i = 0; vocab >= 0 && i < ntok; i++) {
        uint32_t t;
        if (tok_bytes == 2) {
            uint16_t v;
            memcpy(&v, toks + 2 * i, 2);
            t = v;
        } else {
            memcpy(&t, toks + 4 * i, 4);
        }
        if ((int64_t)t >= vocab)
            return sr_error(SR_ERR_DATA,
                            "%s: token %u at position %llu is >= model.vocab_size %lld (hint: the shard was made for "
                            "a larger vocabulary; set model.vocab_size or use matching shards)",
                            path, t, (unsigned long long)i, (long long)vocab);
    }
    *tok_bytes_out = tok_bytes;
    *ntok_out = ntok;
    return SR_OK;
}

static sr_status add_shard(sr_data *d, const char *path, int64_t vocab) {
    /* never blocking: a FIFO or device named as a shard is refused at once */
    struct stat st;
    int fd = sr_fsio_open_file(AT_FDCWD, path, true, &st);
    if (fd < 0 && errno == EINVAL)
        return sr_error(SR_ERR_NOINPUT, "%s: %s, not a regular file; expected an llm.c token shard", path,
                        sr_fsio_kind(st.st_mode));
    if (fd < 0)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot open data file: %s", path, strerror(errno));
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int err = errno;
    close(fd);
    if (map == MAP_FAILED)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot map data file: %s", path, strerror(err));
    int tok_bytes;
    uint64_t ntok;
    sr_status cs = sr_data_check_shard(path, map ? map : "", len, vocab, &tok_bytes, &ntok);
    if (cs != SR_OK) {
        if (map)
            munmap(map, len);
        return cs;
    }
    const unsigned char *toks = (const unsigned char *)map + SR_DATA_HEADER_INTS * sizeof(int32_t);
    shard *ns = sr_realloc(d->shards, ((size_t)d->nshards + 1) * sizeof *ns);
    char *name = ns ? sr_strdup(path) : NULL;
    if (!ns || !name) {
        if (ns)
            d->shards = ns;
        munmap(map, len);
        return sr_error_oom("the data set");
    }
    d->shards = ns;
    shard *s = &d->shards[d->nshards++];
    memset(s, 0, sizeof *s);
    s->path = name;
    s->map = map;
    s->map_len = len;
    s->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    s->tokens = toks;
    s->tok_bytes = tok_bytes;
    s->ntok = ntok;
    return SR_OK;
}

static sr_status finish(sr_data *d, const char *what) {
    uint64_t w = 0, n = 0;
    for (int i = 0; i < d->nshards; i++) {
        shard *s = &d->shards[i];
        s->nwin = s->ntok > 0 ? (s->ntok - 1) / (uint64_t)d->T : 0;
        s->first_win = w;
        w += s->nwin;
        n += s->ntok;
    }
    d->nwin = w;
    d->ntok = n;
    if (w == 0)
        return sr_error(SR_ERR_DATA,
                        "%s: %llu tokens in all is fewer than model.seq_len + 1 = %d; expected at least one "
                        "sequence (hint: use more data or a smaller seq_len)",
                        what, (unsigned long long)n, d->T + 1);
    snprintf(d->desc, sizeof d->desc, "%s: %d shard%s, %llu token%s, %llu sequence%s of %d", what, d->nshards,
             d->nshards == 1 ? "" : "s", (unsigned long long)n, n == 1 ? "" : "s", (unsigned long long)w,
             w == 1 ? "" : "s", d->T);
    return SR_OK;
}

sr_status sr_data_open(sr_data **out, const sr_strlist *paths, int T, int64_t vocab) {
    *out = NULL;
    sr_data *d = sr_calloc(1, sizeof *d);
    if (!d)
        return sr_error_oom("the data set");
    d->T = T;
    for (int i = 0; i < paths->count; i++) {
        const char *p = paths->items[i];
        glob_t g;
        int rc = glob(p, GLOB_ERR, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            data_free(d);
            return sr_error(SR_ERR_NOINPUT, "%s: no such data file (no file matches)", p);
        }
        if (rc != 0) {
            data_free(d);
            return sr_error(SR_ERR_NOINPUT, "%s: cannot read: %s", p, strerror(errno));
        }
        for (size_t j = 0; j < g.gl_pathc; j++) {
            sr_status st = add_shard(d, g.gl_pathv[j], vocab);
            if (st != SR_OK) {
                globfree(&g);
                data_free(d);
                return st;
            }
        }
        globfree(&g);
    }
    char what[256];
    snprintf(what, sizeof what, "%s%s", paths->count ? paths->items[0] : "data", paths->count > 1 ? ", ..." : "");
    sr_status st = finish(d, what);
    if (st != SR_OK) {
        data_free(d);
        return st;
    }
    *out = d;
    return SR_OK;
}

sr_status sr_data_open_embedded(sr_data **out, int part, int T, int64_t vocab) {
    *out = NULL;
    if (vocab < SR_DATA_EMBEDDED_VOCAB)
        return sr_error(SR_ERR_CONFIG,
                        "the embedded corpus is byte-level and needs model.vocab_size >= 256, not %lld (hint: set "
                        "data.train to shards for your vocabulary)",
                        (long long)vocab);
    sr_data *d = sr_calloc(1, sizeof *d);
    shard *s = sr_calloc(1, sizeof *s);
    if (!d || !s) {
        free(d);
        free(s);
        return sr_error_oom("the data set");
    }
    d->T = T;
    d->shards = s;
    d->nshards = 1;
    size_t split = sr_corpus_size / 10 * 9;
    s->path = sr_strdup(part == SR_DATA_TRAIN ? "<embedded corpus, train>" : "<embedded corpus, val>");
    if (!s->path) {
        data_free(d);
        return sr_error_oom("the data set");
    }
    s->tok_bytes = 1;
    s->mtime_ns = -1;
    s->tokens = part == SR_DATA_TRAIN ? sr_corpus_data : sr_corpus_data + split;
    s->ntok = part == SR_DATA_TRAIN ? split : sr_corpus_size - split;
    sr_status st = finish(d, s->path);
    if (st != SR_OK) {
        data_free(d);
        return st;
    }
    *out = d;
    return SR_OK;
}

uint64_t sr_data_windows(const sr_data *d) { return d->nwin; }
uint64_t sr_data_tokens(const sr_data *d) { return d->ntok; }
const char *sr_data_describe(const sr_data *d) { return d->desc; }

/* A seeded permutation of [0, n) evaluated per index: a 4-round Feistel
 * network on the smallest even-bit domain >= n, with cycle walking to stay
 * below n.  Hand-written because no library here offers index-addressable
 * permutations, which the global cursor needs (O(1) memory, any index). */
static uint64_t permute(uint64_t x, uint64_t n, uint64_t seed, uint64_t epoch) {
    if (n <= 1)
        return 0;
    int bits = 2;
    while (bits < 64 && ((uint64_t)1 << bits) < n)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t f = sr_rng_u64(seed, 0x5eed0000ULL + epoch * 8 + (uint64_t)round, r) & mask;
            uint64_t nl = r, nr = l ^ f;
            l = nl;
            r = nr;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

uint64_t sr_data_window_of(const sr_data *d, uint64_t i, bool shuffle, uint64_t seed) {
    uint64_t epoch = i / d->nwin, j = i % d->nwin;
    return shuffle ? permute(j, d->nwin, seed, epoch) : j;
}

static uint32_t token_at(const shard *s, uint64_t i) {
    switch (s->tok_bytes) {
    case 1:
        return ((const unsigned char *)s->tokens)[i];
    case 2: {
        uint16_t v;
        memcpy(&v, (const unsigned char *)s->tokens + 2 * i, 2);
        return v;
    }
    default: {
        uint32_t v;
        memcpy(&v, (const unsigned char *)s->tokens + 4 * i, 4);
        return v;
    }
    }
}

void sr_data_batch(const sr_data *d, uint64_t first, int count, bool shuffle, uint64_t seed, int *inputs,
                   int *targets) {
    int T = d->T;
    for (int b = 0; b < count; b++) {
        uint64_t w = sr_data_window_of(d, first + (uint64_t)b, shuffle, seed);
        /* binary search the shard holding window w */
        int lo = 0, hi = d->nshards - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (d->shards[mid].first_win <= w)
                lo = mid;
            else
                hi = mid - 1;
        }
        const shard *s = &d->shards[lo];
        uint64_t start = (w - s->first_win) * (uint64_t)T;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = (int)token_at(s, start + t);
            targets[(size_t)b * T + t] = (int)token_at(s, start + t + 1);
        }
    }
}
