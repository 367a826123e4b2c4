/* provenance.c — the data record of a run: shard hashes from index.json or
 * the caches (trusted while size and modification time match), the rest
 * hashed over the ranks, the caches written back, and the comparison with
 * a checkpoint's record; see provenance.h. */
#include "srconfig.h"

#include "provenance.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"
#include "mem.h"

#define CACHE_NAME ".shardrun-sha256.json"
#define CKPT_CACHE_NAME "data-sha256.json"

static const char *base_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The hint files a warning was given for (each path once). */
static char **warned;
static size_t nwarned;

/* One warning per path: a hint that is not a regular file is skipped. */
static void skip_hint(const char *path, mode_t mode, const char *what) {
    for (size_t i = 0; i < nwarned; i++)
        if (strcmp(warned[i], path) == 0)
            return;
    char **more = sr_realloc(warned, (nwarned + 1) * sizeof *more);
    char *copy = sr_strdup(path);
    if (more)
        warned = more;
    if (more && copy)
        warned[nwarned++] = copy;
    else
        free(copy);
    char e[600];
    sr_log_warn("%s: %s is there, not a regular file: %s skipped (shardrun never reads or writes the files it names "
                "itself through a link)",
                sr_escape(path, e, sizeof e), sr_fsio_kind(mode), what);
}

/* A hint file (a hash cache, index.json) read whole, or NULL: missing,
 * unreadable or malformed (a hint only); anything but a regular file is
 * skipped with one warning (never followed, never a blocking open). */
static json_t *load_json(const char *path, const char *what) {
    struct stat sb;
    int fd = sr_fsio_open_own(path, &sb);
    if (fd < 0) {
        if (errno == EINVAL)
            skip_hint(path, sb.st_mode, what);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
    close(fd);
    return j;
}

/* An entry {bytes, mtime_ns, sha256} that matches. */
static bool entry_matches(json_t *e, uint64_t bytes, int64_t mtime_ns, char sha[65]) {
    json_t *b = json_object_get(e, "bytes"), *m = json_object_get(e, "mtime_ns"), *h = json_object_get(e, "sha256");
    const char *hs = json_string_value(h);
    if (!json_is_integer(b) || !json_is_integer(m) || !hs || strlen(hs) != 64 ||
        (uint64_t)json_integer_value(b) != bytes || json_integer_value(m) != mtime_ns)
        return false;
    sr_fmt(sha, 65, "%s", hs);
    return true;
}

/* The recorded SHA-256 of the shard at `path` (size and mtime as opened):
 * from the cache beside it, its directory's index.json, or the checkpoint
 * directory's cache. */
static bool cached(const char *path, uint64_t bytes, int64_t mtime_ns, const char *ckpt_dir, char sha[65]) {
    char dir[PATH_MAX], f[PATH_MAX + 64];
    sr_fsio_parent(path, dir, sizeof dir);
    const char *base = base_of(path);
    bool found = false;
    sr_fmt(f, sizeof f, "%s/" CACHE_NAME, dir);
    json_t *c = load_json(f, "the hash cache");
    found = c && entry_matches(json_object_get(json_object_get(c, "shards"), base), bytes, mtime_ns, sha);
    json_decref(c);
    if (!found) {
        sr_fmt(f, sizeof f, "%s/index.json", dir);
        json_t *ix = load_json(f, "the data index");
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(ix, "shards"), i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (!found && name && strcmp(name, base) == 0)
                found = entry_matches(e, bytes, mtime_ns, sha);
        }
        json_decref(ix);
    }
    if (!found && ckpt_dir && *ckpt_dir) {
        char real[PATH_MAX];
        sr_fmt(f, sizeof f, "%s/" CKPT_CACHE_NAME, ckpt_dir);
        json_t *k = realpath(path, real) ? load_json(f, "the hash cache") : NULL;
        found = k && entry_matches(json_object_get(json_object_get(k, "shards"), real), bytes, mtime_ns, sha);
        json_decref(k);
    }
    return found;
}

/* The cache entries of freshly hashed shards, merged into the file at
 * `cache` keyed by `key(i)`. */
typedef struct {
    const char *cache;
    json_t *root;
} cache_write;

static sr_status write_cache(int fd, const char *name, void *arg) {
    cache_write *cw = arg;
    char *text = json_dumps(cw->root, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!text)
        return sr_error_oom("a hash cache");
    size_t n = strlen(text);
    int rc = sr_fsio_write_all(fd, text, n);
    free(text);
    return rc == 0 ? SR_OK : sr_fsio_write_error(name, errno);
}

/* Merges one entry into the cache at `cache`, written through a temporary
 * renamed onto that name itself (never through a link).  false when it
 * cannot be written there (a read-only directory, a link or FIFO of that
 * name). */
static bool save_entry(const char *cache, const char *key, uint64_t bytes, int64_t mtime_ns, const char *sha) {
    struct stat sb;
    if (lstat(cache, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        skip_hint(cache, sb.st_mode, "the hash cache");
        return false;
    }
    json_t *root = load_json(cache, "the hash cache");
    if (!json_is_object(root)) {
        json_decref(root);
        root = json_pack("{s:s, s:{}}", "format", "shardrun sha256 cache 1", "shards");
    }
    json_t *shards = json_object_get(root, "shards");
    if (!json_is_object(shards)) {
        shards = json_object();
        json_object_set_new(root, "shards", shards);
    }
    json_object_set_new(
        shards, key,
        json_pack("{s:I, s:I, s:s}", "bytes", (json_int_t)bytes, "mtime_ns", (json_int_t)mtime_ns, "sha256", sha));
    cache_write cw = {cache, root};
    bool ok = sr_fsio_atomic_write_own(cache, write_cache, &cw) == SR_OK;
    json_decref(root);
    return ok;
}

/* Rank 0: the hashes it or its peers computed, into the cache beside each
 * shard, else the checkpoint directory's. */
static void remember(const sr_data_shard_info *info, const char *sha, const char *ckpt_dir) {
    char dir[PATH_MAX], cache[PATH_MAX + 64];
    sr_fsio_parent(info->path, dir, sizeof dir);
    sr_fmt(cache, sizeof cache, "%s/" CACHE_NAME, dir);
    if (save_entry(cache, base_of(info->path), info->len, info->mtime_ns, sha))
        return;
    char real[PATH_MAX];
    if (ckpt_dir && *ckpt_dir && realpath(info->path, real)) {
        sr_fmt(cache, sizeof cache, "%s/" CKPT_CACHE_NAME, ckpt_dir);
        save_entry(cache, real, info->len, info->mtime_ns, sha);
    }
}

static void sha256_hex(const void *p, size_t n, char out[65]) {
    unsigned char d[32];
    unsigned int dl = 32;
    EVP_Digest(p, n, d, &dl, EVP_sha256(), NULL);
    sr_hex(d, 32, out);
}

/* One entry per shard in the exchange: its digest as hex and whether the
 * assigned rank hashed it (then rank 0 caches it). */
typedef struct {
    char sha[65];
    char hashed;
    char pad[6];
} digest_slot;

/* A shard's line in the fingerprints: "split bytes sha256", a mixture's
 * train shard "train:SOURCE bytes sha256" (data.train's lines, and so
 * their fingerprints, are what they were before mixtures). */
static int shard_line(const sr_data_shard_record *r, char *line, size_t n) {
    return snprintf(line, n, "%s%s%s %llu %s\n", r->split, r->source[0] ? ":" : "", r->source,
                    (unsigned long long)r->bytes, r->sha256);
}

void sr_provenance_free(sr_data_record *rec) {
    free(rec->shards);
    memset(rec, 0, sizeof *rec);
}

sr_status sr_provenance_collect(sr_data_record *rec, const sr_prov_source *train, int ntrain, sr_data *const *val,
                                int nval, const sr_tokenizer *tok, const char *ckpt_dir, sr_ctl *ctl) {
    memset(rec, 0, sizeof *rec);
    int nt = 0, nv = 0;
    for (int k = 0; k < nval; k++)
        nv += sr_data_nshards(val[k]);
    for (int k = 0; k < ntrain; k++)
        nt += sr_data_nshards(train[k].data);
    int n = nt + nv;
    int world = sr_ctl_size(ctl), rank = sr_ctl_rank(ctl);
    rec->shards = sr_calloc((size_t)n + 1, sizeof *rec->shards);
    sr_data_shard_info *info = sr_calloc((size_t)n + 1, sizeof *info);
    digest_slot *mine = sr_calloc((size_t)n + 1, sizeof *mine);
    digest_slot *all = sr_calloc((size_t)n * (size_t)world + 1, sizeof *all);
    sr_status st = rec->shards && info && mine && all ? SR_OK : sr_error_oom("the data record");
    /* the shards in reading order: each source's train shards, then each
     * validation set's */
    for (int k = 0, i = 0; st == SR_OK && k < ntrain + nval; k++) {
        const sr_data *d = k < ntrain ? train[k].data : val[k - ntrain];
        const char *name = k < ntrain && train[k].name ? train[k].name : "";
        for (int j = 0; j < sr_data_nshards(d); j++, i++) {
            sr_data_shard(d, j, &info[i]);
            sr_fmt(rec->shards[i].split, sizeof rec->shards[i].split, "%s", k < ntrain ? "train" : "val");
            sr_fmt(rec->shards[i].source, sizeof rec->shards[i].source, "%s", name);
        }
        if (k < ntrain && name[0] && rec->nsources < SR_MIX_MAX_SOURCES)
            sr_fmt(rec->sources[rec->nsources++].name, sizeof rec->sources[0].name, "%s", name);
    }
    if (tok) {
        sr_fmt(rec->tokenizer, sizeof rec->tokenizer, "%s", sr_tokenizer_spec(tok));
        sr_fmt(rec->tokenizer_sha256, sizeof rec->tokenizer_sha256, "%s", sr_tokenizer_fingerprint(tok));
        sr_fmt(rec->tokenizer_pattern, sizeof rec->tokenizer_pattern, "%s", sr_tokenizer_pattern(tok));
    }
    /* which shards no record covers (every rank sees the same files) */
    int unrecorded = 0;
    uint64_t unrecorded_bytes = 0;
    for (int i = 0; st == SR_OK && i < n; i++) {
        sr_data_shard_record *r = &rec->shards[i];
        sr_fmt(r->path, sizeof r->path, "%s", info[i].path);
        r->bytes = info[i].len;
        if (i % world != rank)
            continue;
        if (info[i].embedded) {
            sha256_hex(info[i].bytes, info[i].len, mine[i].sha);
        } else if (!cached(info[i].path, info[i].len, info[i].mtime_ns, ckpt_dir, mine[i].sha)) {
            mine[i].hashed = 1;
            unrecorded++;
            unrecorded_bytes += info[i].len;
        }
    }
    if (st == SR_OK && unrecorded > 0 && rank == 0)
        sr_log_info("data provenance: hashing %d shard%s (%.1f MB) that no index.json or cache records as they "
                    "are now%s",
                    unrecorded, unrecorded == 1 ? "" : "s", (double)unrecorded_bytes / 1e6,
                    world > 1 ? " on this rank; the other ranks hash their share" : "");
    int done = 0;
    bool tty = rank == 0 && isatty(STDERR_FILENO);
    for (int i = 0; st == SR_OK && i < n; i++) {
        if (i % world != rank || !mine[i].hashed)
            continue;
        sha256_hex(info[i].bytes, info[i].len, mine[i].sha);
        done++;
        if (tty)
            fprintf(stderr, "\rshardrun: data provenance: hashed %d of %d shards%s", done, unrecorded,
                    done == unrecorded ? "\n" : "");
    }
    /* every rank's share to every rank */
    if (st == SR_OK)
        st = sr_ctl_allgather(ctl, all, mine, (size_t)n * sizeof *mine);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (st == SR_OK && (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)))
        st = sr_error_oom("SHA-256");
    if (st == SR_OK) {
        char line[1400];
        int k = snprintf(line, sizeof line, "tokenizer %s %s\n", rec->tokenizer_sha256, rec->tokenizer_pattern);
        EVP_DigestUpdate(md, line, (size_t)k);
        for (int i = 0; i < n; i++) {
            const digest_slot *d = &all[(size_t)(i % world) * (size_t)n + (size_t)i];
            sr_fmt(rec->shards[i].sha256, sizeof rec->shards[i].sha256, "%s", d->sha);
            k = shard_line(&rec->shards[i], line, sizeof line);
            EVP_DigestUpdate(md, line, (size_t)k);
            if (rank == 0 && d->hashed)
                remember(&info[i], d->sha, ckpt_dir);
        }
        unsigned char fp[32];
        unsigned int dl = 32;
        EVP_DigestFinal_ex(md, fp, &dl);
        sr_hex(fp, 32, rec->fingerprint);
        rec->n = n;
        /* each source's own: its shards' lines */
        for (int j = 0; j < rec->nsources; j++) {
            EVP_DigestInit_ex(md, EVP_sha256(), NULL);
            for (int i = 0; i < n; i++)
                if (strcmp(rec->shards[i].source, rec->sources[j].name) == 0) {
                    k = shard_line(&rec->shards[i], line, sizeof line);
                    EVP_DigestUpdate(md, line, (size_t)k);
                }
            EVP_DigestFinal_ex(md, fp, &dl);
            sr_hex(fp, 32, rec->sources[j].fingerprint);
        }
    }
    EVP_MD_CTX_free(md);
    free(info);
    free(mine);
    free(all);
    if (st != SR_OK)
        sr_provenance_free(rec);
    return st;
}

/* The shards of one split and source in a record: their indices in
 * out[], the count. */
static int of_group(const sr_data_record *r, const char *split, const char *source, int *out) {
    int k = 0;
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->shards[i].split, split) == 0 && strcmp(r->shards[i].source, source) == 0)
            out[k++] = i;
    return k;
}

/* The first train source of `a` that `b` lacks, or NULL. */
static const char *source_missing(const sr_data_record *a, const sr_data_record *b) {
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->shards[i].split, "train") != 0)
            continue;
        bool found = false;
        for (int j = 0; j < b->n && !found; j++)
            found = strcmp(b->shards[j].split, "train") == 0 && strcmp(b->shards[j].source, a->shards[i].source) == 0;
        if (!found)
            return a->shards[i].source;
    }
    return NULL;
}

/* One group's shards compared in order: the first difference into msg. */
static bool group_differs(const sr_data_record *now, const sr_data_record *then, const char *split, const char *src,
                          int *a_idx, int *b_idx, char *msg, size_t n) {
    int na = of_group(now, split, src, a_idx), nb = of_group(then, split, src, b_idx);
    int k = na < nb ? na : nb;
    char who[SR_MIX_NAME_MAX + 16] = "";
    if (src[0])
        sr_fmt(who, sizeof who, "source %s: ", src);
    for (int i = 0; i < k; i++) {
        const sr_data_shard_record *a = &now->shards[a_idx[i]], *b = &then->shards[b_idx[i]];
        if (a->bytes != b->bytes || strcmp(a->sha256, b->sha256) != 0) {
            char was[1100] = "";
            if (strcmp(a->path, b->path) != 0)
                sr_fmt(was, sizeof was, " (then %s)", b->path);
            sr_fmt(msg, n, "%s%s shard %s changed: now %llu bytes, SHA-256 %.12s...; recorded%s: %llu bytes, %.12s...",
                   who, a->split, a->path, (unsigned long long)a->bytes, a->sha256, was, (unsigned long long)b->bytes,
                   b->sha256);
            return true;
        }
    }
    if (na > nb)
        sr_fmt(msg, n, "%sa %s shard was added: %s (the checkpoint recorded %d %s shards, there are %d)", who, split,
               now->shards[a_idx[k]].path, nb, split, na);
    else if (na < nb)
        sr_fmt(msg, n, "%sa %s shard was removed: %s (the checkpoint recorded %d %s shards, there are %d)", who, split,
               then->shards[b_idx[k]].path, nb, split, na);
    return na != nb;
}

bool sr_provenance_differs(const sr_data_record *now, const sr_data_record *then, char *msg, size_t n) {
    if (strcmp(now->tokenizer_sha256, then->tokenizer_sha256) != 0 ||
        strcmp(now->tokenizer_pattern, then->tokenizer_pattern) != 0) {
        sr_fmt(msg, n, "another tokenizer: %s%s%.12s%s where the checkpoint's was %s%s%.12s%s",
               now->tokenizer_sha256[0] ? now->tokenizer : "none", now->tokenizer_sha256[0] ? " (" : "",
               now->tokenizer_sha256, now->tokenizer_sha256[0] ? "...)" : "",
               then->tokenizer_sha256[0] ? then->tokenizer : "none", then->tokenizer_sha256[0] ? " (" : "",
               then->tokenizer_sha256, then->tokenizer_sha256[0] ? "...)" : "");
        return true;
    }
    const char *added = source_missing(now, then), *removed = source_missing(then, now);
    if (added || removed) {
        const char *name = added ? added : removed;
        sr_fmt(msg, n, "a data.mixture source was %s: %s%s", added ? "added" : "removed", name[0] ? name : "data.train",
               name[0] ? "" : " (the one source of a run without data.mixture)");
        return true;
    }
    int *a_idx = sr_calloc((size_t)now->n + 1, sizeof *a_idx), *b_idx = sr_calloc((size_t)then->n + 1, sizeof *b_idx);
    if (!a_idx || !b_idx) {
        free(a_idx);
        free(b_idx);
        sr_fmt(msg, n, "out of memory comparing the data records");
        return true;
    }
    bool differs = false;
    for (int i = 0; i < now->n && !differs; i++) /* each train source, where it first appears */
        if (strcmp(now->shards[i].split, "train") == 0 &&
            (i == 0 || strcmp(now->shards[i - 1].source, now->shards[i].source) != 0))
            differs = group_differs(now, then, "train", now->shards[i].source, a_idx, b_idx, msg, n);
    if (!differs)
        differs = group_differs(now, then, "val", "", a_idx, b_idx, msg, n);
    free(a_idx);
    free(b_idx);
    return differs;
}
