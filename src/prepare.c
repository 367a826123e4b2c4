/* prepare.c — `shardrun data prepare`: reading documents (text, JSON Lines,
 * gzip through zlib), encoding them in parallel, and writing shards and
 * index.json; see prepare.h.
 *
 * The pipeline is a loop over batches: the main thread reads up to
 * SR_PREPARE_BATCH_BYTES of documents per thread into items (a document,
 * or a piece of a long text file cut where pre-tokenization splits
 * anyway), the threads encode the items (each its own encoder), the main
 * thread writes their ids in item order.  So the output is the same for
 * any number of threads. */
#include "srconfig.h"

#include "prepare.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "clock.h"
#include "data.h"
#include "fsio.h"
#include "mem.h"
#include "tokenizer.h"

/* ------------------------------------------------------------------------ */
/* inputs */

typedef struct {
    const char *path;
    gzFile gz;
    long line; /* JSON Lines: the line last read */
    bool eof;
    /* bytes read and not yet handed out (text files: the tail after the
     * last safe cut) */
    unsigned char *pend;
    size_t pn, pcap;
} input;

/* Opens an input as zlib reads it: gzip streams decompressed, anything else
 * read as it is. */
static sr_status input_open(input *in, const char *path) {
    memset(in, 0, sizeof *in);
    in->path = path;
    int fd;
    struct stat sb;
    sr_status st = sr_fsio_open_input(path, "the input", true, "a text or JSON Lines file, gzip or not", &fd, &sb);
    if (st != SR_OK)
        return st;
    in->gz = gzdopen(fd, "rb");
    if (!in->gz) {
        close(fd);
        return sr_error_oom("a gzip stream");
    }
    gzbuffer(in->gz, 1 << 18);
    return SR_OK;
}

static void input_close(input *in) {
    if (in->gz)
        gzclose(in->gz);
    in->gz = NULL;
    free(in->pend);
    in->pend = NULL;
    in->pn = in->pcap = 0;
}

/* Reads up to `want` more bytes onto in->pend.  SR_ERR_DATA for a broken
 * gzip stream, SR_ERR_NOINPUT for a read error. */
static sr_status input_read(input *in, size_t want) {
    if (!sr_grow((void **)&in->pend, &in->pcap, in->pn + want, 1, 1 << 20))
        return sr_error_oom("an input buffer");
    int got = gzread(in->gz, in->pend + in->pn, (unsigned)want);
    if (got < 0) {
        int zerr;
        const char *msg = gzerror(in->gz, &zerr);
        if (zerr == Z_ERRNO)
            return sr_error(SR_ERR_NOINPUT, "%s: read error: %s", in->path, strerror(errno));
        return sr_error(SR_ERR_DATA, "%s: a broken gzip stream (%s) near compressed byte %lld", in->path, msg,
                        (long long)gzoffset(in->gz));
    }
    if (got == 0) {
        int zerr;
        const char *msg = gzerror(in->gz, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END)
            return sr_error(SR_ERR_DATA, "%s: a broken gzip stream (%s) near compressed byte %lld", in->path, msg,
                            (long long)gzoffset(in->gz));
        in->eof = true;
    }
    in->pn += (size_t)got;
    return SR_OK;
}

/* Unicode's White_Space (the pre-tokenizer patterns' \s). */
static bool is_space_cp(long c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The valid UTF-8 character ending just before p[c] (its code point), or
 * -1 when the bytes there are not one. */
static long char_before(const unsigned char *p, size_t c) {
    if (c == 0)
        return -1;
    if (p[c - 1] < 0x80)
        return p[c - 1];
    for (size_t k = 2; k <= 4 && k <= c; k++) {
        unsigned char b = p[c - k];
        if ((b & 0xC0) == 0x80)
            continue;
        size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (need != k)
            return -1;
        long v = b & (0x7F >> k);
        for (size_t i = 1; i < k; i++)
            v = v << 6 | (p[c - k + i] & 0x3F);
        return v;
    }
    return -1;
}

/* The last place in p[0 .. n) where pre-tokenization splits whatever
 * follows: after a valid non-space character, before a space or tab (no
 * alternative of either pattern runs from a non-space character into a
 * space; only newlines may join a piece of punctuation).  0 when none. */
static size_t safe_cut(const unsigned char *p, size_t n) {
    for (size_t c = n; c-- > 1;) {
        if (p[c] != ' ' && p[c] != '\t')
            continue;
        long prev = char_before(p, c);
        if (prev >= 0 && !is_space_cp(prev))
            return c;
    }
    return 0;
}

/* The last UTF-8 character boundary at or before n (a forced cut; p[n]
 * must be readable). */
static size_t char_boundary(const unsigned char *p, size_t n) {
    size_t c = n;
    while (c > 0 && n - c < 4 && (p[c] & 0xC0) == 0x80)
        c--;
    return c > 0 ? c : n;
}

/* The length of the next item of a document's text p[0 .. n) (`end`: the
 * document ends at n; else more may follow): at most SR_PREPARE_MAX_PIECE
 * bytes, ended where pre-tokenization splits anyway, so no pre-token (and
 * no BPE working set) outgrows the cap; 0 when more text is needed first.
 * *forced when the first SR_PREPARE_MAX_PIECE + 1 bytes hold no such place:
 * then the cut is at a character boundary, and the tokens around it may
 * differ from a tokenizer's given the whole document (within one
 * pre-token BPE depends on position, so no window can be exact). */
static size_t next_cut(const unsigned char *p, size_t n, bool end, bool *forced) {
    *forced = false;
    if (end && n <= SR_PREPARE_MAX_PIECE)
        return n;
    size_t c = safe_cut(p, n <= SR_PREPARE_MAX_PIECE ? n : SR_PREPARE_MAX_PIECE + 1);
    if (c > 0)
        return c;
    if (n <= SR_PREPARE_MAX_PIECE)
        return 0; /* (not the end: read more) */
    *forced = true;
    return char_boundary(p, SR_PREPARE_MAX_PIECE);
}

/* ------------------------------------------------------------------------ */
/* batches */

typedef struct {
    size_t off, len; /* in the batch's text */
    bool doc_start;
    sr_tok_ids ids;
} item;

typedef struct {
    unsigned char *text;
    size_t n, cap;
    item *items;
    size_t nitems, icap;
} batch;

static sr_status batch_add(batch *b, const unsigned char *p, size_t n, bool doc_start) {
    if (!sr_grow((void **)&b->text, &b->cap, b->n + n, 1, 1 << 20))
        return sr_error_oom("a batch of text");
    if (b->nitems == b->icap) {
        size_t cap = b->icap ? 2 * b->icap : 256;
        item *it = sr_realloc(b->items, cap * sizeof *it);
        if (!it)
            return sr_error_oom("a batch of documents");
        memset(it + b->icap, 0, (cap - b->icap) * sizeof *it);
        b->items = it;
        b->icap = cap;
    }
    memcpy(b->text + b->n, p, n);
    item *it = &b->items[b->nitems++];
    it->off = b->n;
    it->len = n;
    it->doc_start = doc_start;
    it->ids.n = 0;
    b->n += n;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* the state of a run */

typedef struct {
    const sr_prepare_opts *o;
    char *const *files;
    int nfiles;
    sr_prepare_result *r;
    sr_tokenizer *tok;
    int64_t doc_id; /* the separator, -1: none */
    int tok_bytes;  /* 2 or 4 */
    int64_t vocab;
    bool dir;
    char outdir[4096];
    const char *prefix;
    /* reading */
    int file; /* the input being read */
    input in;
    bool in_doc; /* a text file's document started (its first item written) */
    bool warned_cut;
    /* JSON Lines: the document being cut into items (its string inside
     * doc_obj), and how much of it is handed out */
    json_t *doc_obj;
    const unsigned char *doc;
    size_t doc_n, doc_off;
    uint64_t total_in, done_in; /* compressed bytes: progress */
    /* the shards */
    sr_fsio_staged *staged;
    char (*names)[4200];
    uint64_t *counts;
    unsigned char (*sha)[32];
    uint64_t *sizes;
    int nshards, scap;
    bool open;      /* staged[nshards - 1] is being written */
    uint64_t quota; /* of the open shard */
    unsigned char *wbuf;
    size_t wn;
    /* progress */
    double t0, last_print;
    bool tty;
} run;

#define WBUF_BYTES (1u << 20)

static sr_status shard_flush(run *x) {
    sr_fsio_staged *s = &x->staged[x->nshards - 1];
    if (x->wn && sr_fsio_write_all(s->fd, x->wbuf, x->wn) != 0)
        return sr_fsio_write_error(s->path, errno);
    x->wn = 0;
    return SR_OK;
}

/* Closes the open shard: its header's count, its SHA-256 (read back), sync. */
static sr_status shard_close(run *x) {
    if (!x->open)
        return SR_OK;
    int i = x->nshards - 1;
    sr_fsio_staged *s = &x->staged[i];
    sr_status st = shard_flush(x);
    int32_t header[SR_DATA_HEADER_INTS] = {x->tok_bytes == 2 ? SR_DATA_MAGIC_U16 : SR_DATA_MAGIC_U32,
                                           x->tok_bytes == 2 ? 1 : 7, (int32_t)x->counts[i]};
    if (st == SR_OK && pwrite(s->fd, header, sizeof header, 0) != (ssize_t)sizeof header)
        st = sr_fsio_write_error(s->path, errno ? errno : EIO);
    x->sizes[i] = sizeof header + x->counts[i] * (uint64_t)x->tok_bytes;
    EVP_MD_CTX *md = st == SR_OK ? EVP_MD_CTX_new() : NULL;
    if (st == SR_OK && (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)))
        st = sr_error_oom("SHA-256");
    for (uint64_t off = 0; st == SR_OK && off < x->sizes[i]; off += WBUF_BYTES) {
        size_t n = x->sizes[i] - off < WBUF_BYTES ? (size_t)(x->sizes[i] - off) : WBUF_BYTES;
        if (sr_fsio_pread_all(s->fd, x->wbuf, n, off) != 0)
            st = sr_error(SR_ERR_IO, "%s: cannot read the shard back to hash it: %s", s->path,
                          errno ? strerror(errno) : "it is shorter than written");
        else
            EVP_DigestUpdate(md, x->wbuf, n);
    }
    unsigned int dl = 32;
    if (st == SR_OK)
        EVP_DigestFinal_ex(md, x->sha[i], &dl);
    EVP_MD_CTX_free(md);
    if (st == SR_OK)
        st = sr_fsio_stage_finish(s);
    x->open = false;
    return st;
}

/* Opens the next shard: the validation shard first when asked for. */
static sr_status shard_open(run *x) {
    if (x->nshards == x->scap) {
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
        if (!s || !n || !c || !h || !z)
            return sr_error_oom("the list of shards");
        x->scap = cap;
    }
    int i = x->nshards;
    bool val = x->dir && i == 0 && x->o->val_tokens > 0;
    if (x->dir)
        /* llm.c's numbering: 0 is the validation shard's, training shards from 1 */
        sr_fmt(x->names[i], sizeof x->names[i], "%s/%s_%s_%06d.bin", x->outdir, x->prefix, val ? "val" : "train",
               x->o->val_tokens > 0 ? i : i + 1);
    else
        sr_fmt(x->names[i], sizeof x->names[i], "%s", x->outdir);
    x->quota = !x->dir ? (uint64_t)INT32_MAX
               : val   ? x->o->val_tokens
                       : (x->o->shard_tokens ? x->o->shard_tokens : SR_PREPARE_DEFAULT_SHARD_TOKENS);
    /* in a directory the names are the program's (never through a link);
     * a single -o FILE is the user's */
    sr_status st = x->dir ? sr_fsio_stage_own(x->names[i], &x->staged[i]) : sr_fsio_stage(x->names[i], &x->staged[i]);
    if (st != SR_OK)
        return st;
    x->counts[i] = 0;
    x->nshards++;
    x->open = true;
    int32_t header[SR_DATA_HEADER_INTS] = {0};
    if (sr_fsio_write_all(x->staged[i].fd, header, sizeof header) != 0)
        return sr_fsio_write_error(x->names[i], errno);
    return SR_OK;
}

static sr_status emit(run *x, uint32_t id) {
    sr_status st;
    if (!x->open && (st = shard_open(x)) != SR_OK)
        return st;
    int i = x->nshards - 1;
    if (x->counts[i] >= x->quota) {
        if (!x->dir)
            return sr_error(SR_ERR_DATA,
                            "the inputs hold more than %d tokens, what one shard holds (hint: -o DIR/ writes "
                            "shards of --shard-tokens each)",
                            INT32_MAX);
        if ((st = shard_close(x)) != SR_OK || (st = shard_open(x)) != SR_OK)
            return st;
        i = x->nshards - 1;
    }
    if (x->wn + 4 > WBUF_BYTES && (st = shard_flush(x)) != SR_OK)
        return st;
    if (x->tok_bytes == 2) {
        uint16_t v = (uint16_t)id;
        memcpy(x->wbuf + x->wn, &v, 2);
    } else {
        memcpy(x->wbuf + x->wn, &id, 4);
    }
    x->wn += (size_t)x->tok_bytes;
    x->counts[i]++;
    x->r->tokens++;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* reading documents into a batch */

/* JSON Lines: reads one line into in->pend[0 .. *len) (without its
 * newline).  false at the end of the input. */
static sr_status read_line(input *in, size_t *len, bool *got) {
    *got = false;
    size_t scanned = 0;
    for (;;) {
        unsigned char *nl = in->pn > scanned ? memchr(in->pend + scanned, '\n', in->pn - scanned) : NULL;
        if (nl) {
            *len = (size_t)(nl - in->pend);
            *got = true;
            in->line++;
            return SR_OK;
        }
        scanned = in->pn;
        if (in->eof) {
            *len = in->pn;
            *got = in->pn > 0;
            in->line += *got;
            return SR_OK;
        }
        if (in->pn > SR_PREPARE_MAX_LINE)
            return sr_error(SR_ERR_DATA, "%s:%ld: a line longer than %u MiB (hint: one JSON object per line)", in->path,
                            in->line + 1, SR_PREPARE_MAX_LINE >> 20);
        sr_status st = input_read(in, 1 << 20);
        if (st != SR_OK)
            return st;
    }
}

/* Drops in->pend[0 .. n) (and a newline after it). */
static void consume(input *in, size_t n) {
    if (n < in->pn && in->pend[n] == '\n')
        n++;
    memmove(in->pend, in->pend + n, in->pn - n);
    in->pn -= n;
}

/* A JSON Lines line in->pend[0 .. len): its document becomes x->doc (cut
 * into items by drain_doc, as a text file's is). */
static sr_status jsonl_document(run *x, size_t len) {
    input *in = &x->in;
    size_t lead = 0;
    while (lead < len && (in->pend[lead] == ' ' || in->pend[lead] == '\t' || in->pend[lead] == '\r'))
        lead++;
    if (lead == len) /* a blank line */
        return SR_OK;
    json_error_t je;
    json_t *o = json_loadb((const char *)in->pend, len, JSON_ALLOW_NUL, &je);
    if (!o)
        return sr_error(SR_ERR_DATA, "%s:%ld:%d: not JSON: %s (hint: JSON Lines, one object per line)", in->path,
                        in->line, je.column, je.text);
    json_t *f = json_object_get(o, x->o->field);
    sr_status st = SR_OK;
    if (!json_is_object(o))
        st = sr_error(SR_ERR_DATA, "%s:%ld: expected a JSON object with the field \"%s\"", in->path, in->line,
                      x->o->field);
    else if (!f)
        st = sr_error(SR_ERR_DATA, "%s:%ld: no field \"%s\" (hint: --field names the document's text field)", in->path,
                      in->line, x->o->field);
    else if (!json_is_string(f))
        st = sr_error(SR_ERR_DATA, "%s:%ld: the field \"%s\" is %s, expected a string", in->path, in->line, x->o->field,
                      json_is_null(f)     ? "null"
                      : json_is_number(f) ? "a number"
                      : json_is_array(f)  ? "an array"
                      : json_is_object(f) ? "an object"
                                          : "a boolean");
    else if (json_string_length(f) > 0) {
        x->doc_obj = o; /* kept until drained */
        x->doc = (const unsigned char *)json_string_value(f);
        x->doc_n = json_string_length(f);
        x->doc_off = 0;
        x->r->documents++;
        x->r->bytes += x->doc_n;
        return SR_OK;
    }
    json_decref(o);
    return st;
}

/* One forced cut's warning, once per run. */
static void warn_cut(run *x, const char *path) {
    if (x->warned_cut)
        return;
    sr_log_warn("%s: no space or tab in %u MiB of text: cut there, so the tokens around the cut may differ from what "
                "a tokenizer given the whole document makes",
                path, SR_PREPARE_MAX_PIECE >> 20);
    x->warned_cut = true;
}

/* Items of the JSON Lines document in x->doc into b, up to `budget` bytes
 * of the batch; the document is released when all of it is handed out. */
static sr_status drain_doc(run *x, batch *b, size_t budget) {
    while (x->doc_obj && b->n < budget) {
        bool forced;
        size_t cut = next_cut(x->doc + x->doc_off, x->doc_n - x->doc_off, true, &forced);
        if (forced)
            warn_cut(x, x->in.path);
        sr_status st = batch_add(b, x->doc + x->doc_off, cut, x->doc_off == 0);
        if (st != SR_OK)
            return st;
        x->doc_off += cut;
        if (x->doc_off == x->doc_n) {
            json_decref(x->doc_obj);
            x->doc_obj = NULL;
        }
    }
    return SR_OK;
}

/* Fills batch b with up to `budget` bytes of documents.  *more false when
 * every input is read. */
static sr_status fill_batch(run *x, batch *b, size_t budget, bool *more) {
    b->n = 0;
    b->nitems = 0;
    *more = true;
    sr_status st = SR_OK;
    while (b->n < budget) {
        if (x->doc_obj) {
            if ((st = drain_doc(x, b, budget)) != SR_OK)
                return st;
            continue;
        }
        if (!x->in.gz) {
            if (x->file == x->nfiles) {
                *more = false;
                return SR_OK;
            }
            if ((st = input_open(&x->in, x->files[x->file])) != SR_OK)
                return st;
            x->in_doc = false;
        }
        input *in = &x->in;
        if (x->o->field) {
            size_t len;
            bool got;
            if ((st = read_line(in, &len, &got)) != SR_OK)
                return st;
            if (got) {
                if ((st = jsonl_document(x, len)) != SR_OK)
                    return st;
                consume(in, len);
                continue;
            }
        } else {
            if (in->pn <= SR_PREPARE_MAX_PIECE && !in->eof && (st = input_read(in, 1 << 20)) != SR_OK)
                return st;
            if (in->pn > 0) {
                bool forced;
                size_t cut = next_cut(in->pend, in->pn, in->eof, &forced);
                if (cut == 0)
                    continue; /* more text first */
                if (forced)
                    warn_cut(x, in->path);
                if ((st = batch_add(b, in->pend, cut, !x->in_doc)) != SR_OK)
                    return st;
                if (!x->in_doc)
                    x->r->documents++;
                x->in_doc = true;
                x->r->bytes += cut;
                memmove(in->pend, in->pend + cut, in->pn - cut);
                in->pn -= cut;
                continue;
            }
            if (!in->eof)
                continue;
        }
        x->done_in += (uint64_t)gzoffset(in->gz) > 0 ? (uint64_t)gzoffset(in->gz) : 0;
        input_close(in);
        x->file++;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* encoding a batch */

typedef struct {
    run *x;
    batch *b;
    sr_tok_encoder *enc;
    atomic_size_t *next;
    sr_status st;
    char msg[512];
} worker;

static void *encode_items(void *arg) {
    worker *w = arg;
    batch *b = w->b;
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= b->nitems)
            break;
        item *it = &b->items[i];
        it->ids.n = 0;
        sr_status st = sr_tok_encode(w->enc, b->text + it->off, it->len, &it->ids);
        if (st != SR_OK) {
            w->st = st;
            snprintf(w->msg, sizeof w->msg, "%s", sr_error_message());
            break;
        }
    }
    return NULL;
}

static sr_status encode_batch(run *x, batch *b, worker *ws, int nw) {
    if (!x->tok) {
        for (size_t i = 0; i < b->nitems; i++) {
            item *it = &b->items[i];
            it->ids.n = 0;
            for (size_t k = 0; k < it->len; k++) {
                sr_status st = sr_tok_ids_push(&it->ids, b->text[it->off + k]);
                if (st != SR_OK)
                    return st;
            }
        }
        return SR_OK;
    }
    atomic_size_t next = 0;
    pthread_t th[256];
    int started = 0;
    for (int k = 0; k < nw; k++) {
        ws[k].b = b;
        ws[k].next = &next;
        ws[k].st = SR_OK;
    }
    for (int k = 1; k < nw; k++)
        if (pthread_create(&th[k], NULL, encode_items, &ws[k]) == 0)
            started = k;
        else
            break;
    encode_items(&ws[0]);
    for (int k = 1; k <= started; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < nw; k++)
        if (ws[k].st != SR_OK)
            return sr_error(ws[k].st, "%s", ws[k].msg);
    return SR_OK;
}

static sr_status write_batch(run *x, const batch *b) {
    for (size_t i = 0; i < b->nitems; i++) {
        const item *it = &b->items[i];
        sr_status st;
        if (it->doc_start && x->doc_id >= 0 && (st = emit(x, (uint32_t)x->doc_id)) != SR_OK)
            return st;
        for (size_t k = 0; k < it->ids.n; k++)
            if ((st = emit(x, it->ids.ids[k])) != SR_OK)
                return st;
    }
    return SR_OK;
}

static void progress(run *x, bool final) {
    double t = sr_clock_mono_s();
    if (!x->tty || (!final && t - x->last_print < 0.5))
        return;
    x->last_print = t;
    double dt = t - x->t0 > 1e-6 ? t - x->t0 : 1e-6;
    uint64_t done = x->done_in + (x->in.gz && gzoffset(x->in.gz) > 0 ? (uint64_t)gzoffset(x->in.gz) : 0);
    char eta[64] = "";
    if (x->total_in > 0 && done > 0 && done < x->total_in) {
        double left = dt * (double)(x->total_in - done) / (double)done;
        snprintf(eta, sizeof eta, ", ETA %d:%02d", (int)(left / 60), (int)left % 60);
    }
    fprintf(stderr, "\rshardrun: data prepare: %.1f MB read (%.0f%%), %.1f MB/s, %.2f M tokens/s%s   ",
            (double)x->r->bytes / 1e6, x->total_in ? 100.0 * (double)done / (double)x->total_in : 0.0,
            (double)x->r->bytes / 1e6 / dt, (double)x->r->tokens / 1e6 / dt, eta);
    if (final)
        fputc('\n', stderr);
}

/* ------------------------------------------------------------------------ */
/* index.json */

static sr_status write_index(int fd, const char *name, void *arg) {
    run *x = arg;
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
    json_object_set_new(root, "format", json_string("shardrun data prepare 1"));
    json_object_set_new(root, "tokenizer", tok);
    json_object_set_new(root, "vocab", json_integer(x->vocab));
    json_object_set_new(root, "token_bytes", json_integer(x->tok_bytes));
    json_object_set_new(root, "documents", json_integer((json_int_t)x->r->documents));
    json_object_set_new(root, "tokens", json_integer((json_int_t)x->r->tokens));
    for (int i = 0; i < x->nshards; i++) {
        json_t *s = json_object();
        const char *base = strrchr(x->names[i], '/') ? strrchr(x->names[i], '/') + 1 : x->names[i];
        char hex[65];
        sr_hex(x->sha[i], 32, hex);
        json_object_set_new(s, "name", json_string(base));
        json_object_set_new(s, "split", json_string(i == 0 && x->o->val_tokens > 0 ? "val" : "train"));
        json_object_set_new(s, "tokens", json_integer((json_int_t)x->counts[i]));
        json_object_set_new(s, "bytes", json_integer((json_int_t)x->sizes[i]));
        /* what a run trusts the digest by (provenance.h): the file as renamed into place */
        struct stat sb;
        if (stat(x->names[i], &sb) == 0)
            json_object_set_new(s, "mtime_ns",
                                json_integer((json_int_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec));
        json_object_set_new(s, "sha256", json_string(hex));
        json_array_append_new(shards, s);
    }
    json_object_set_new(root, "shards", shards);
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

/* ------------------------------------------------------------------------ */

/* A directory that already holds index.json or this prefix's shards. */
static bool holds_data_set(const char *dir, const char *prefix, char *what, size_t n) {
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *e;
    size_t pl = strlen(prefix);
    bool found = false;
    while (!found && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, "index.json") == 0 ||
            (strncmp(e->d_name, prefix, pl) == 0 &&
             (strncmp(e->d_name + pl, "_train_", 7) == 0 || strncmp(e->d_name + pl, "_val_", 5) == 0))) {
            sr_fmt(what, n, "%s", e->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* The prefix, the output (a file, or a directory when any sharding option
 * or a trailing '/' says so) and --doc-token's precondition. */
static sr_status resolve_output(run *x) {
    const sr_prepare_opts *o = x->o;
    x->prefix = o->prefix ? o->prefix : "data";
    if (!*x->prefix || strchr(x->prefix, '/') || x->prefix[0] == '.')
        return sr_error(SR_ERR_USAGE,
                        "--prefix %s: expected a file-name prefix without '/' that does not start with '.' (a dot "
                        "file looks like a temporary and is hidden)",
                        x->prefix);
    const char *out = o->out;
    size_t ol = out ? strlen(out) : 0;
    x->dir = o->tokenizer || o->shard_tokens || o->val_tokens || (ol && out[ol - 1] == '/');
    x->r->directory = x->dir;
    if (!out)
        out = x->dir ? "." : "data.bin";
    sr_fmt(x->outdir, sizeof x->outdir, "%s", out);
    if (x->dir)
        while (strlen(x->outdir) > 1 && x->outdir[strlen(x->outdir) - 1] == '/')
            x->outdir[strlen(x->outdir) - 1] = '\0';
    if (o->doc_token && !o->tokenizer)
        return sr_error(SR_ERR_USAGE,
                        "--doc-token %s: byte-level shards have no separator token (hint: give "
                        "--tokenizer)",
                        o->doc_token);
    return SR_OK;
}

/* Every input opens (a FIFO is read as it comes), before anything is
 * written; their total size feeds the progress line. */
static sr_status check_inputs(run *x) {
    for (int i = 0; i < x->nfiles; i++) {
        struct stat sb;
        if (stat(x->files[i], &sb) == 0 && S_ISFIFO(sb.st_mode))
            continue;
        int fd;
        sr_status os =
            sr_fsio_open_input(x->files[i], "the input", true, "a text or JSON Lines file, gzip or not", &fd, &sb);
        if (os != SR_OK)
            return os;
        close(fd);
        if ((os = sr_fsio_guard_input(x->files[i])) != SR_OK)
            return os;
        if (S_ISREG(sb.st_mode))
            x->total_in += (uint64_t)sb.st_size;
    }
    return SR_OK;
}

/* --tokenizer: one that encodes, its token width and the separator id. */
static sr_status load_tokenizer(run *x) {
    const sr_prepare_opts *o = x->o;
    sr_status st = sr_tokenizer_load(&x->tok, o->tokenizer, "--tokenizer");
    if (st != SR_OK)
        return st;
    if (!sr_tokenizer_can_encode(x->tok))
        return sr_error(SR_ERR_USAGE,
                        "--tokenizer %s: an llm.c tokenizer file decodes only (hint: give the tokenizer.json, or "
                        "vocab.json + merges.txt, or a tiktoken rank file)",
                        o->tokenizer);
    x->vocab = sr_tokenizer_vocab(x->tok);
    x->tok_bytes = x->vocab > 65535 ? 4 : 2;
    const char *name = o->doc_token ? o->doc_token : "<|endoftext|>";
    if (strcmp(name, "none") != 0) {
        x->doc_id = sr_tokenizer_special(x->tok, name);
        if (x->doc_id < 0)
            return sr_error(SR_ERR_USAGE,
                            "%s%s: not a special token of the tokenizer %s (hint: --doc-token NAME names the "
                            "separator before each document; --doc-token none writes none)",
                            o->doc_token ? "--doc-token " : "the default separator ", name, o->tokenizer);
    }
    return SR_OK;
}

/* The output directory exists and holds no data set of this prefix. */
static sr_status check_outdir(const run *x) {
    char what[300];
    if (sr_fsio_mkdir_p(x->outdir) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create the output directory: %s", x->outdir, strerror(errno));
    if (holds_data_set(x->outdir, x->prefix, what, sizeof what))
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: already holds a prepared data set (%s) (hint: another -o or --prefix, or remove it "
                        "first)",
                        x->outdir, what);
    return SR_OK;
}

/* Reads, encodes (nw workers) and writes batch after batch to the end. */
static sr_status run_batches(run *x, batch *b, worker *ws, int nw) {
    sr_status st = SR_OK;
    for (int k = 0; st == SR_OK && x->tok && k < nw; k++) {
        ws[k].x = x;
        st = sr_tok_encoder_new(x->tok, &ws[k].enc);
    }
    x->t0 = sr_clock_mono_s();
    x->tty = isatty(STDERR_FILENO);
    bool more = true;
    while (st == SR_OK && more) {
        st = fill_batch(x, b, (size_t)SR_PREPARE_BATCH_BYTES * (size_t)(x->tok ? nw : 1), &more);
        if (st == SR_OK)
            st = encode_batch(x, b, ws, nw);
        if (st == SR_OK)
            st = write_batch(x, b);
        progress(x, false);
    }
    if (st == SR_OK && x->r->tokens == 0)
        st = sr_error(SR_ERR_DATA, "the inputs hold no text: nothing to write");
    if (st == SR_OK && x->dir && x->o->val_tokens && x->nshards == 1)
        sr_log_warn("all %llu tokens went to the validation shard (--val-tokens %llu): there is no training shard "
                    "(hint: a smaller --val-tokens)",
                    (unsigned long long)x->r->tokens, (unsigned long long)x->o->val_tokens);
    return st;
}

/* Every shard complete: now they appear, then the index; on failure none. */
static sr_status commit_shards(run *x, sr_status st) {
    if (st == SR_OK)
        st = shard_close(x);
    for (int i = 0; st == SR_OK && i < x->nshards; i++)
        st = sr_fsio_stage_commit(&x->staged[i]);
    if (st == SR_OK && x->dir) {
        char index[4200];
        sr_fmt(index, sizeof index, "%s/index.json", x->outdir);
        st = sr_fsio_atomic_write_own(index, write_index, x);
    }
    if (st == SR_OK)
        progress(x, true);
    if (st != SR_OK)
        for (int i = 0; i < x->nshards; i++)
            sr_fsio_stage_abort(&x->staged[i]);
    return st;
}

static void run_free(run *x, batch *b, worker *ws, int nw) {
    input_close(&x->in);
    json_decref(x->doc_obj);
    for (size_t i = 0; i < b->icap; i++)
        sr_tok_ids_free(&b->items[i].ids);
    free(b->items);
    free(b->text);
    for (int k = 0; ws && k < nw; k++)
        sr_tok_encoder_free(ws[k].enc);
    free(ws);
    free(x->wbuf);
    free(x->staged);
    free(x->names);
    free(x->counts);
    free(x->sha);
    free(x->sizes);
    sr_tokenizer_free(x->tok);
}

sr_status sr_prepare(const sr_prepare_opts *o, char *const *files, int nfiles, sr_prepare_result *r) {
    memset(r, 0, sizeof *r);
    if (nfiles < 1)
        return sr_error(SR_ERR_USAGE, "data prepare: expected at least one input FILE");
    run x = {.o = o, .files = files, .nfiles = nfiles, .r = r, .doc_id = -1, .tok_bytes = 2, .vocab = 256};
    sr_status st = resolve_output(&x);
    if (st == SR_OK)
        st = check_inputs(&x);
    if (st != SR_OK)
        return st;
    if (o->tokenizer && (st = load_tokenizer(&x)) != SR_OK) {
        sr_tokenizer_free(x.tok);
        return st;
    }
    if (x.dir)
        st = check_outdir(&x);
    int nw = o->threads > 0 ? o->threads : default_threads();
    if (nw > 256)
        nw = 256;
    worker *ws = sr_calloc((size_t)nw, sizeof *ws);
    batch b = {0};
    x.wbuf = sr_malloc(WBUF_BYTES);
    if (st == SR_OK && (!ws || !x.wbuf))
        st = sr_error_oom("data prepare");
    if (st == SR_OK)
        st = run_batches(&x, &b, ws, nw);
    st = commit_shards(&x, st);
    r->shards = st == SR_OK ? x.nshards : 0;
    sr_fmt(r->out, sizeof r->out, "%s", x.outdir);
    run_free(&x, &b, ws, nw);
    return st;
}
