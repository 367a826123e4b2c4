/* prepare.c — `shardrun data prepare`: reading documents (text, JSON Lines,
 * gzip through zlib) and encoding them in parallel; see prepare.h (the
 * shards they are written to and index.json: prepare_out.c).
 *
 * The pipeline is a loop over batches: the main thread reads up to
 * SR_PREPARE_BATCH_BYTES of documents per thread into items (a document,
 * or a piece of a long text file cut where pre-tokenization splits
 * anyway), the threads encode the items (each its own encoder), the main
 * thread writes their ids in item order.  So the output is the same for
 * any number of threads. */
#include "srconfig.h"

#include "prepare_impl.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
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

/* Opens an input as zlib reads it: gzip streams decompressed, anything else
 * read as it is. */
static sr_status input_open(prep_input *in, const char *path) {
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

static void input_close(prep_input *in) {
    if (in->gz)
        gzclose(in->gz);
    in->gz = NULL;
    free(in->pend);
    in->pend = NULL;
    in->pn = in->pcap = 0;
}

/* Reads up to `want` more bytes onto in->pend.  SR_ERR_DATA for a broken
 * gzip stream, SR_ERR_NOINPUT for a read error. */
static sr_status input_read(prep_input *in, size_t want) {
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

static sr_status batch_add(prep_batch *b, const unsigned char *p, size_t n, bool doc_start) {
    if (!sr_grow((void **)&b->text, &b->cap, b->n + n, 1, 1 << 20))
        return sr_error_oom("a batch of text");
    if (b->nitems == b->icap) {
        size_t cap = b->icap ? 2 * b->icap : 256;
        prep_item *it = sr_realloc(b->items, cap * sizeof *it);
        if (!it)
            return sr_error_oom("a batch of documents");
        memset(it + b->icap, 0, (cap - b->icap) * sizeof *it);
        b->items = it;
        b->icap = cap;
    }
    memcpy(b->text + b->n, p, n);
    prep_item *it = &b->items[b->nitems++];
    it->off = b->n;
    it->len = n;
    it->doc_start = doc_start;
    it->ids.n = 0;
    b->n += n;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* reading documents into a batch */

/* JSON Lines: reads one line into in->pend[0 .. *len) (without its
 * newline).  false at the end of the input. */
static sr_status read_line(prep_input *in, size_t *len, bool *got) {
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
static void consume(prep_input *in, size_t n) {
    if (n < in->pn && in->pend[n] == '\n')
        n++;
    memmove(in->pend, in->pend + n, in->pn - n);
    in->pn -= n;
}

/* A JSON Lines line in->pend[0 .. len): its document becomes x->doc (cut
 * into items by drain_doc, as a text file's is). */
static sr_status jsonl_document(prep_run *x, size_t len) {
    prep_input *in = &x->in;
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
    else if (json_string_length(f) == 0)
        x->r->empty++; /* dropped, counted */
    else {
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
static void warn_cut(prep_run *x, const char *path) {
    if (x->warned_cut)
        return;
    sr_log_warn("%s: no space or tab in %u MiB of text: cut there, so the tokens around the cut may differ from what "
                "a tokenizer given the whole document makes",
                path, SR_PREPARE_MAX_PIECE >> 20);
    x->warned_cut = true;
}

/* Items of the JSON Lines document in x->doc into b, up to `budget` bytes
 * of the batch; the document is released when all of it is handed out. */
static sr_status drain_doc(prep_run *x, prep_batch *b, size_t budget) {
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
static sr_status fill_batch(prep_run *x, prep_batch *b, size_t budget, bool *more) {
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
        prep_input *in = &x->in;
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
            if (!x->in_doc)
                x->r->empty++; /* an empty text file: dropped, counted */
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
    prep_run *x;
    prep_batch *b;
    sr_tok_encoder *enc;
    atomic_size_t *next;
    sr_status st;
    char msg[512];
} worker;

static void *encode_items(void *arg) {
    worker *w = arg;
    prep_batch *b = w->b;
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= b->nitems)
            break;
        prep_item *it = &b->items[i];
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

static sr_status encode_batch(prep_run *x, prep_batch *b, worker *ws, int nw) {
    if (!x->tok) {
        for (size_t i = 0; i < b->nitems; i++) {
            prep_item *it = &b->items[i];
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

static sr_status write_batch(prep_run *x, const prep_batch *b) {
    for (size_t i = 0; i < b->nitems; i++) {
        const prep_item *it = &b->items[i];
        sr_status st;
        if (it->doc_start)
            prep_doc_begin(x, x->out[PREP_TRAIN].documents + x->out[PREP_VAL].documents);
        if (it->doc_start && x->doc_id >= 0 && (st = prep_emit(x, (uint32_t)x->doc_id)) != SR_OK)
            return st;
        for (size_t k = 0; k < it->ids.n; k++)
            if ((st = prep_emit(x, it->ids.ids[k])) != SR_OK)
                return st;
    }
    return SR_OK;
}

static void progress(prep_run *x, bool final) {
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

/* A directory that already holds index.json (unless `joining`: a set of
 * named sources this one joins) or this prefix's shards. */
static bool holds_data_set(const char *dir, const char *prefix, bool joining, char *what, size_t n) {
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *e;
    size_t pl = strlen(prefix);
    bool found = false;
    while (!found && (e = readdir(d)) != NULL) {
        if ((!joining && strcmp(e->d_name, "index.json") == 0) ||
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
static sr_status resolve_output(prep_run *x) {
    const sr_prepare_opts *o = x->o;
    if (o->name && !sr_config_mixture_name_ok(o->name))
        return sr_error(
            SR_ERR_USAGE,
            "--name %s: expected 1 to %d letters, digits, '_', '.' or '-' (it names the data.mixture source "
            "and, without --prefix, its shards)",
            o->name, SR_MIX_NAME_MAX);
    x->prefix = o->prefix ? o->prefix : o->name ? o->name : "data";
    if (!*x->prefix || strchr(x->prefix, '/') || x->prefix[0] == '.')
        return sr_error(SR_ERR_USAGE,
                        "--prefix %s: expected a file-name prefix without '/' that does not start with '.' (a dot "
                        "file looks like a temporary and is hidden)",
                        x->prefix);
    const char *out = o->out;
    size_t ol = out ? strlen(out) : 0;
    if (o->val_tokens && o->val_fraction > 0)
        return sr_error(SR_ERR_USAGE,
                        "--val-tokens and --val-fraction both choose the validation set: give one (--val-fraction "
                        "takes whole documents, --val-tokens the first tokens)");
    x->dir = o->tokenizer || o->shard_tokens || o->val_tokens || o->val_fraction > 0 || o->name ||
             (ol && out[ol - 1] == '/');
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
static sr_status check_inputs(prep_run *x) {
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
static sr_status load_tokenizer(prep_run *x) {
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

/* --name: the output directory's index.json, when it lists sources
 * (x->prior), and whether this one may join them: a name it lacks, the
 * same tokenizer. */
static sr_status prior_sources(prep_run *x, bool *joined) {
    char path[4200];
    sr_fmt(path, sizeof path, "%s/index.json", x->outdir);
    *joined = false;
    if (access(path, F_OK) != 0)
        return SR_OK;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    json_t *srcs = root ? json_object_get(root, "sources") : NULL;
    if (!json_is_array(srcs)) {
        json_decref(root);
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: holds a data set that is not a set of named sources (no \"sources\" list) (hint: "
                        "another -o for --name %s)",
                        path, x->o->name);
    }
    if (json_array_size(srcs) >= SR_MIX_MAX_SOURCES) {
        json_decref(root);
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: already lists %d sources, the most a data.mixture takes (hint: another -o)", path,
                        SR_MIX_MAX_SOURCES);
    }
    size_t i;
    json_t *e;
    json_array_foreach(srcs, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && strcmp(n, x->o->name) == 0) {
            json_decref(root);
            return sr_error(SR_ERR_CANTCREAT,
                            "%s: already lists the source %s (hint: another --name, or remove its shards and the "
                            "directory's index.json first)",
                            path, x->o->name);
        }
    }
    json_t *tok = json_object_get(root, "tokenizer");
    const char *had = json_string_value(json_object_get(tok, "sha256"));
    const char *now = x->tok ? sr_tokenizer_fingerprint(x->tok) : NULL;
    if ((had || now) && (!had || !now || strcmp(had, now) != 0)) {
        char was[300];
        sr_fmt(was, sizeof was, "%s", had ? json_string_value(json_object_get(tok, "path")) : "none (bytes)");
        json_decref(root);
        return sr_error(SR_ERR_USAGE,
                        "--name %s: %s/index.json's sources were prepared with the tokenizer %s, this one with %s: "
                        "one mixture needs one tokenizer (hint: the same --tokenizer, or another -o)",
                        x->o->name, x->outdir, was, now ? x->o->tokenizer : "none (bytes)");
    }
    x->prior = root;
    *joined = true;
    return SR_OK;
}

/* The output directory exists and holds no data set of this prefix (with
 * --name, its index.json may list other sources). */
static sr_status check_outdir(prep_run *x, bool create) {
    char what[300];
    if (!create && access(x->outdir, F_OK) != 0)
        return SR_OK; /* (to be created) */
    if (create && sr_fsio_mkdir_p(x->outdir) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create the output directory: %s", x->outdir, strerror(errno));
    bool joined = false;
    sr_status st = x->o->name ? prior_sources(x, &joined) : SR_OK;
    if (st != SR_OK)
        return st;
    if (holds_data_set(x->outdir, x->prefix, joined, what, sizeof what))
        return sr_error(SR_ERR_CANTCREAT,
                        "%s: already holds a prepared data set (%s) (hint: another -o or --prefix, or remove it "
                        "first)",
                        x->outdir, what);
    return SR_OK;
}

sr_status sr_prepare_check(const sr_prepare_opts *o, char *const *files, int nfiles) {
    sr_prepare_result r;
    memset(&r, 0, sizeof r);
    prep_run x = {.o = o, .files = files, .nfiles = nfiles, .r = &r, .doc_id = -1, .tok_bytes = 2, .vocab = 256};
    sr_status st = nfiles < 1 ? sr_error(SR_ERR_USAGE, "data prepare: expected at least one input FILE") : SR_OK;
    if (st == SR_OK)
        st = resolve_output(&x);
    if (st == SR_OK)
        st = check_inputs(&x);
    if (st == SR_OK && o->tokenizer)
        st = load_tokenizer(&x);
    if (st == SR_OK && x.dir)
        st = check_outdir(&x, false);
    json_decref(x.prior);
    sr_tokenizer_free(x.tok);
    return st;
}

/* Reads, encodes (nw workers) and writes batch after batch to the end. */
static sr_status run_batches(prep_run *x, prep_batch *b, worker *ws, int nw) {
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
        st = sr_error(SR_ERR_DATA, "the inputs hold no text: nothing to write%s",
                      x->r->empty ? " (every document is empty)" : "");
    const prep_stream *val = &x->out[PREP_VAL], *train = &x->out[PREP_TRAIN];
    uint64_t docs = val->documents + train->documents;
    char few[160] = ""; /* --val-fraction draws whole documents: with few, a fraction is coarse */
    if (x->o->val_fraction > 0 && docs < 100)
        sr_fmt(few, sizeof few, "; with %llu document%s%s, --val-tokens N cuts the first N tokens instead",
               (unsigned long long)docs, docs == 1 ? "" : "s", x->o->field ? "" : " (each text file is one)");
    if (st == SR_OK && x->dir && (x->o->val_tokens || x->o->val_fraction > 0) && train->tokens == 0)
        sr_log_warn("all %llu tokens went to validation (%s): there is no training shard (hint: a smaller %s%s)",
                    (unsigned long long)x->r->tokens, x->o->val_tokens ? "--val-tokens" : "--val-fraction",
                    x->o->val_tokens ? "--val-tokens" : "--val-fraction", few);
    if (st == SR_OK && x->o->val_fraction > 0 && val->documents == 0)
        sr_log_warn("no document was chosen for validation (%llu document%s, --val-fraction %g, --seed %llu): there "
                    "is no validation shard (hint: a larger --val-fraction%s)",
                    (unsigned long long)train->documents, train->documents == 1 ? "" : "s", x->o->val_fraction,
                    (unsigned long long)x->o->seed, few[0] ? few : ", or --val-tokens N");
    return st;
}

static void run_free(prep_run *x, prep_batch *b, worker *ws, int nw) {
    input_close(&x->in);
    json_decref(x->doc_obj);
    for (size_t i = 0; i < b->icap; i++)
        sr_tok_ids_free(&b->items[i].ids);
    free(b->items);
    free(b->text);
    for (int k = 0; ws && k < nw; k++)
        sr_tok_encoder_free(ws[k].enc);
    free(ws);
    prep_out_free(x);
    sr_tokenizer_free(x->tok);
}

sr_status sr_prepare(const sr_prepare_opts *o, char *const *files, int nfiles, sr_prepare_result *r) {
    memset(r, 0, sizeof *r);
    if (nfiles < 1)
        return sr_error(SR_ERR_USAGE, "data prepare: expected at least one input FILE");
    prep_run x = {.o = o, .files = files, .nfiles = nfiles, .r = r, .doc_id = -1, .tok_bytes = 2, .vocab = 256};
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
        st = check_outdir(&x, true);
    int nw = o->threads > 0 ? o->threads : default_threads();
    if (nw > 256)
        nw = 256;
    worker *ws = sr_calloc((size_t)nw, sizeof *ws);
    prep_batch b = {0};
    if (!prep_out_init(&x) && st == SR_OK)
        st = sr_error_oom("data prepare");
    if (st == SR_OK && !ws)
        st = sr_error_oom("data prepare");
    if (st == SR_OK)
        st = run_batches(&x, &b, ws, nw);
    st = prep_commit(&x, st);
    if (st == SR_OK)
        progress(&x, true);
    r->shards = st == SR_OK ? x.nshards : 0;
    sr_fmt(r->out, sizeof r->out, "%s", x.outdir);
    if (x.tok)
        sr_fmt(r->tokenizer, sizeof r->tokenizer, "%s", sr_tokenizer_spec(x.tok));
    run_free(&x, &b, ws, nw);
    return st;
}
