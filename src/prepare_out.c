/* prepare_out.c — where `data prepare` writes: the training and the
 * validation streams of shards (each its own open shard and write
 * buffer), which of them a document goes to (--val-fraction: whole
 * documents by a hash of the seed and their index; --val-tokens: the
 * first tokens), the shards' headers and SHA-256, and index.json.  Part
 * of the prepare module (prepare_impl.h). */
#include "srconfig.h"

#include "prepare_impl.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "line.h"
#include "mem.h"

#define WBUF_BYTES (1u << 20)

/* Whether document `index` (among the non-empty documents, in input
 * order) goes to validation under --val-fraction f and --seed seed: a
 * SplitMix64 hash of (seed, index), its top 53 bits as a fraction of 1,
 * below f.  Each document is chosen on its own, so the realised fraction
 * is f only on average. */
static bool val_doc(uint64_t seed, uint64_t index, double f) {
    /* SplitMix64 (Steele, Lea, Flood 2014) of the pair, finalised twice */
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + index;
    for (int k = 0; k < 2; k++) {
        z += 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
    }
    return (double)(z >> 11) * 0x1.0p-53 < f;
}

bool prep_out_init(prep_run *x) {
    for (int k = 0; k < PREP_NSTREAMS; k++) {
        x->out[k] = (prep_stream){.open = -1, .number = k == PREP_VAL ? 0 : 1};
        if (k == PREP_TRAIN || x->o->val_tokens || x->o->val_fraction > 0)
            if (!(x->out[k].wbuf = sr_malloc(WBUF_BYTES)))
                return false;
    }
    x->cur = PREP_TRAIN;
    return true;
}

void prep_doc_begin(prep_run *x, uint64_t index) {
    x->cur = x->o->val_fraction > 0 && val_doc(x->o->seed, index, x->o->val_fraction) ? PREP_VAL : PREP_TRAIN;
    if (x->o->val_tokens)
        x->cur = x->out[PREP_VAL].tokens < x->o->val_tokens ? PREP_VAL : PREP_TRAIN;
    x->out[x->cur].documents++;
}

static sr_status shard_flush(prep_run *x, prep_stream *s) {
    sr_fsio_staged *f = &x->staged[s->open];
    if (s->wn && sr_fsio_write_all(f->fd, s->wbuf, s->wn) != 0)
        return sr_fsio_write_error(f->path, errno);
    s->wn = 0;
    return SR_OK;
}

/* Closes the stream's open shard: its header's count, its SHA-256 (read
 * back), sync. */
static sr_status shard_close(prep_run *x, prep_stream *s) {
    if (s->open < 0)
        return SR_OK;
    int i = s->open;
    sr_fsio_staged *f = &x->staged[i];
    sr_status st = shard_flush(x, s);
    int32_t header[SR_DATA_HEADER_INTS] = {x->tok_bytes == 2 ? SR_DATA_MAGIC_U16 : SR_DATA_MAGIC_U32,
                                           x->tok_bytes == 2 ? 1 : 7, (int32_t)x->counts[i]};
    if (st == SR_OK && pwrite(f->fd, header, sizeof header, 0) != (ssize_t)sizeof header)
        st = sr_fsio_write_error(f->path, errno ? errno : EIO);
    x->sizes[i] = sizeof header + x->counts[i] * (uint64_t)x->tok_bytes;
    EVP_MD_CTX *md = st == SR_OK ? EVP_MD_CTX_new() : NULL;
    if (st == SR_OK && (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)))
        st = sr_error_oom("SHA-256");
    for (uint64_t off = 0; st == SR_OK && off < x->sizes[i]; off += WBUF_BYTES) {
        size_t n = x->sizes[i] - off < WBUF_BYTES ? (size_t)(x->sizes[i] - off) : WBUF_BYTES;
        if (sr_fsio_pread_all(f->fd, s->wbuf, n, off) != 0)
            st = sr_error(SR_ERR_IO, "%s: cannot read the shard back to hash it: %s", f->path,
                          errno ? strerror(errno) : "it is shorter than written");
        else
            EVP_DigestUpdate(md, s->wbuf, n);
    }
    unsigned int dl = 32;
    if (st == SR_OK)
        EVP_DigestFinal_ex(md, x->sha[i], &dl);
    EVP_MD_CTX_free(md);
    if (st == SR_OK)
        st = sr_fsio_stage_finish(f);
    s->open = -1;
    return st;
}

/* Room for one more shard in the arrays. */
static sr_status shard_room(prep_run *x) {
    if (x->nshards < x->scap)
        return SR_OK;
    int cap = x->scap ? 2 * x->scap : 16;
    sr_fsio_staged *s = sr_realloc(x->staged, (size_t)cap * sizeof *s);
    if (s)
        x->staged = s;
    char(*n)[4200] = sr_realloc(x->names, (size_t)cap * sizeof *n);
    if (n)
        x->names = n;
    uint64_t *c = sr_realloc(x->counts, (size_t)cap * sizeof *c);
    if (c)
        x->counts = c;
    unsigned char(*h)[32] = sr_realloc(x->sha, (size_t)cap * sizeof *h);
    if (h)
        x->sha = h;
    uint64_t *z = sr_realloc(x->sizes, (size_t)cap * sizeof *z);
    if (z)
        x->sizes = z;
    bool *v = sr_realloc(x->val, (size_t)cap * sizeof *v);
    if (v)
        x->val = v;
    if (!s || !n || !c || !h || !z || !v)
        return sr_error_oom("the list of shards");
    x->scap = cap;
    return SR_OK;
}

/* Opens the stream's next shard.  llm.c's numbering: validation shards
 * from 0, training shards from 1. */
static sr_status shard_open(prep_run *x, int k) {
    sr_status st = shard_room(x);
    if (st != SR_OK)
        return st;
    prep_stream *s = &x->out[k];
    int i = x->nshards;
    bool val = k == PREP_VAL;
    if (x->dir)
        sr_fmt(x->names[i], sizeof x->names[i], "%s/%s_%s_%06d.bin", x->outdir, x->prefix, val ? "val" : "train",
               s->number);
    else
        sr_fmt(x->names[i], sizeof x->names[i], "%s", x->outdir);
    uint64_t per = x->o->shard_tokens ? x->o->shard_tokens : SR_PREPARE_DEFAULT_SHARD_TOKENS;
    s->quota = !x->dir ? (uint64_t)INT32_MAX : val && x->o->val_tokens ? x->o->val_tokens : per;
    /* in a directory the names are the program's (never through a link);
     * a single -o FILE is the user's */
    st = x->dir ? sr_fsio_stage_own(x->names[i], &x->staged[i]) : sr_fsio_stage(x->names[i], &x->staged[i]);
    if (st != SR_OK)
        return st;
    x->counts[i] = 0;
    x->val[i] = val;
    x->nshards++;
    s->open = i;
    s->number++;
    s->shards++;
    int32_t header[SR_DATA_HEADER_INTS] = {0};
    if (sr_fsio_write_all(x->staged[i].fd, header, sizeof header) != 0)
        return sr_fsio_write_error(x->names[i], errno);
    return SR_OK;
}

sr_status prep_emit(prep_run *x, uint32_t id) {
    sr_status st;
    if (x->o->val_tokens && x->cur == PREP_VAL && x->out[PREP_VAL].tokens >= x->o->val_tokens)
        x->cur = PREP_TRAIN; /* --val-tokens: the first tokens, a document cut where they end */
    prep_stream *s = &x->out[x->cur];
    if (s->open < 0 && (st = shard_open(x, x->cur)) != SR_OK)
        return st;
    if (x->counts[s->open] >= s->quota) {
        if (!x->dir)
            return sr_error(SR_ERR_DATA,
                            "the inputs hold more than %d tokens, what one shard holds (hint: -o DIR/ writes "
                            "shards of --shard-tokens each)",
                            INT32_MAX);
        if ((st = shard_close(x, s)) != SR_OK || (st = shard_open(x, x->cur)) != SR_OK)
            return st;
    }
    if (s->wn + 4 > WBUF_BYTES && (st = shard_flush(x, s)) != SR_OK)
        return st;
    if (x->tok_bytes == 2) {
        uint16_t v = (uint16_t)id;
        memcpy(s->wbuf + s->wn, &v, 2);
    } else {
        memcpy(s->wbuf + s->wn, &id, 4);
    }
    s->wn += (size_t)x->tok_bytes;
    x->counts[s->open]++;
    s->tokens++;
    x->r->tokens++;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* index.json */

#define PREP_INDEX_FORMAT "shardrun data prepare 2"

/* --name: this run's source joins the sources of the index it found
 * (x->prior): their shards first, the "sources" list ({name, documents,
 * tokens, val_tokens} each), the documents and tokens summed. */
static void add_source(prep_run *x, json_t *root) {
    json_t *mine = json_pack("{ss sI sI sI}", "name", x->o->name, "documents", (json_int_t)x->r->documents, "tokens",
                             (json_int_t)x->r->tokens, "val_tokens", (json_int_t)x->out[PREP_VAL].tokens);
    json_t *sources = x->prior ? json_deep_copy(json_object_get(x->prior, "sources")) : json_array();
    json_array_append_new(sources, mine);
    json_object_set_new(root, "sources", sources);
    if (!x->prior)
        return;
    json_t *shards = json_deep_copy(json_object_get(x->prior, "shards")),
           *mine_shards = json_object_get(root, "shards");
    json_array_extend(shards, mine_shards);
    json_object_set_new(root, "shards", shards);
    const char *keys[] = {"documents", "empty_documents", "tokens"};
    for (int k = 0; k < 3; k++)
        json_object_set_new(root, keys[k],
                            json_integer(json_integer_value(json_object_get(root, keys[k])) +
                                         json_integer_value(json_object_get(x->prior, keys[k]))));
}

static json_t *index_json(prep_run *x) {
    const sr_prepare_opts *o = x->o;
    json_t *root = json_object();
    json_t *shards = json_array();
    json_t *tok = x->tok ? json_object() : json_null();
    if (x->tok) {
        json_object_set_new(tok, "describe", json_string(sr_tokenizer_describe(x->tok)));
        json_object_set_new(tok, "path", json_string(sr_tokenizer_spec(x->tok)));
        json_object_set_new(tok, "sha256", json_string(sr_tokenizer_fingerprint(x->tok)));
        json_object_set_new(tok, "pattern", json_string(sr_tokenizer_pattern(x->tok)));
        json_object_set_new(tok, "vocab", json_integer(sr_tokenizer_vocab(x->tok)));
    }
    json_object_set_new(root, "format", json_string(PREP_INDEX_FORMAT));
    json_object_set_new(root, "tokenizer", tok);
    json_object_set_new(root, "vocab", json_integer(x->vocab));
    json_object_set_new(root, "token_bytes", json_integer(x->tok_bytes));
    json_object_set_new(root, "documents", json_integer((json_int_t)x->r->documents));
    json_object_set_new(root, "empty_documents", json_integer((json_int_t)x->r->empty));
    json_object_set_new(root, "tokens", json_integer((json_int_t)x->r->tokens));
    json_t *split = json_object();
    if (o->val_fraction > 0) {
        json_object_set_new(split, "val_fraction", json_real(o->val_fraction));
        json_object_set_new(split, "seed", json_integer((json_int_t)o->seed));
    } else if (o->val_tokens) {
        json_object_set_new(split, "val_tokens", json_integer((json_int_t)o->val_tokens));
    }
    json_object_set_new(split, "val_documents", json_integer((json_int_t)x->out[PREP_VAL].documents));
    json_object_set_new(split, "val_tokens_written", json_integer((json_int_t)x->out[PREP_VAL].tokens));
    json_object_set_new(root, "split", split);
    for (int k = 0; k < 2 * x->nshards; k++) { /* the validation shards first */
        int i = k % x->nshards;
        if (x->val[i] != (k < x->nshards))
            continue;
        json_t *s = json_object();
        const char *base = strrchr(x->names[i], '/') ? strrchr(x->names[i], '/') + 1 : x->names[i];
        char hex[65];
        sr_hex(x->sha[i], 32, hex);
        json_object_set_new(s, "name", json_string(base));
        json_object_set_new(s, "split", json_string(x->val[i] ? "val" : "train"));
        json_object_set_new(s, "tokens", json_integer((json_int_t)x->counts[i]));
        json_object_set_new(s, "bytes", json_integer((json_int_t)x->sizes[i]));
        /* what a run trusts the digest by (provenance.h): the file as renamed into place */
        struct stat sb;
        if (stat(x->names[i], &sb) == 0)
            json_object_set_new(s, "mtime_ns",
                                json_integer((json_int_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec));
        json_object_set_new(s, "sha256", json_string(hex));
        if (o->name)
            json_object_set_new(s, "source", json_string(o->name));
        json_array_append_new(shards, s);
    }
    json_object_set_new(root, "shards", shards);
    if (o->name)
        add_source(x, root);
    return root;
}

static sr_status write_index(int fd, const char *name, void *arg) {
    json_t *root = index_json(arg);
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text)
        return sr_error_oom("index.json");
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL: replaced, n + 1 bytes written */
    int rc = sr_fsio_write_all(fd, text, n + 1);
    free(text);
    return rc == 0 ? SR_OK : sr_fsio_write_error(name, errno);
}

sr_status prep_commit(prep_run *x, sr_status st) {
    for (int k = 0; st == SR_OK && k < PREP_NSTREAMS; k++)
        st = shard_close(x, &x->out[k]);
    for (int i = 0; st == SR_OK && i < x->nshards; i++)
        st = sr_fsio_stage_commit(&x->staged[i]);
    if (st == SR_OK && x->dir) {
        char index[4200];
        sr_fmt(index, sizeof index, "%s/index.json", x->outdir);
        st = sr_fsio_atomic_write_own(index, write_index, x);
    }
    if (st != SR_OK)
        for (int i = 0; i < x->nshards; i++)
            sr_fsio_stage_abort(&x->staged[i]);
    if (st == SR_OK && x->o->name) { /* every source the index lists, for the summary's data.mixture */
        sr_line l = SR_LINE(x->r->sources);
        size_t i;
        json_t *e;
        json_array_foreach(x->prior ? json_object_get(x->prior, "sources") : NULL, i, e)
            sr_line_add(&l, "%s%s", l.len ? " " : "", json_string_value(json_object_get(e, "name")));
        sr_line_add(&l, "%s%s", l.len ? " " : "", x->o->name);
    }
    x->r->val_shards = x->out[PREP_VAL].shards;
    x->r->val_tokens = x->out[PREP_VAL].tokens;
    x->r->val_documents = x->out[PREP_VAL].documents;
    return st;
}

void prep_out_free(prep_run *x) {
    json_decref(x->prior);
    for (int k = 0; k < PREP_NSTREAMS; k++)
        free(x->out[k].wbuf);
    free(x->staged);
    free(x->names);
    free(x->counts);
    free(x->sha);
    free(x->sizes);
    free(x->val);
}
