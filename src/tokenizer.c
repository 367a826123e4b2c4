/* tokenizer.c — byte-level BPE tokenizers: the pre-tokenizer patterns, the
 * token and pair maps, loading (which format a file is, the fingerprint,
 * the checks), the merge loop, the piece cache and decoding; see
 * tokenizer.h.  The four file formats are tokenizer_files.c's;
 * tokenizer_impl.h is what the two share.
 *
 * Libraries: jansson parses the JSON files, PCRE2 (JIT, UTF, Unicode
 * properties, PCRE2_MATCH_INVALID_UTF) matches the pre-tokenizer
 * patterns, OpenSSL's EVP computes the fingerprint.  Written here because
 * no library on Debian does it in C: the BPE merge loop (a heap over a
 * linked list of symbols). */
#include "srconfig.h"

#include "tokenizer_impl.h"

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

/* ------------------------------------------------------------------------ */
/* patterns */

/* \s as Unicode's White_Space (what tiktoken's Rust regex and tokenizers'
 * Oniguruma mean by \s; PCRE2's \s leaves out U+0085), spelled out so
 * every engine agrees. */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static const pattern_def patterns[] = {
    {"gpt2",
     "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+",
     {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
      "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL}},
    {"llama3",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS
     "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+",
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+",
      NULL, NULL}},
};

const pattern_def *tok_pattern_named(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++)
        if (strlen(patterns[i].name) == len && memcmp(patterns[i].name, name, len) == 0)
            return &patterns[i];
    return NULL;
}

const pattern_def *tok_pattern_of_text(const char *text) {
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++)
        for (int k = 0; k < 3 && patterns[i].text[k]; k++)
            if (strcmp(patterns[i].text[k], text) == 0)
                return &patterns[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the tokenizer */

int64_t sr_tokenizer_vocab(const sr_tokenizer *t) { return t->vocab; }
sr_tok_format sr_tokenizer_format(const sr_tokenizer *t) { return t->format; }
bool sr_tokenizer_can_encode(const sr_tokenizer *t) { return t->format != SR_TOK_LLMC; }
const char *sr_tokenizer_fingerprint(const sr_tokenizer *t) { return t->fingerprint; }
const char *sr_tokenizer_describe(const sr_tokenizer *t) { return t->describe; }
const char *sr_tokenizer_spec(const sr_tokenizer *t) { return t->spec; }
const char *sr_tokenizer_pattern(const sr_tokenizer *t) { return t->pattern ? t->pattern->name : ""; }
int64_t sr_tokenizer_eot(const sr_tokenizer *t) { return t->eot; }

int64_t sr_tokenizer_special(const sr_tokenizer *t, const char *name) {
    for (size_t i = 0; i < t->nspecial; i++)
        if (strcmp(t->special[i].text, name) == 0)
            return t->special[i].id;
    return -1;
}

const unsigned char *sr_tokenizer_bytes(const sr_tokenizer *t, int64_t id, size_t *len) {
    if (id < 0 || id >= t->vocab || !t->has[id]) {
        *len = 0;
        return NULL;
    }
    *len = t->len[id];
    return t->blob + t->off[id];
}

void sr_tokenizer_free(sr_tokenizer *t) {
    if (!t)
        return;
    pcre2_code_free(t->re);
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->has);
    free(t->map);
    free(t->pk);
    free(t->prank);
    free(t->pid);
    for (size_t i = 0; i < t->nspecial; i++)
        free(t->special[i].text);
    free(t->special);
    free(t);
}

/* FNV-1a, 64 bits. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

uint64_t tok_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

size_t tok_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* Makes room for ids below n.  The arrays grow geometrically: a file
 * listing ids one above the other near SR_TOK_MAX_ID would otherwise copy
 * them once per line (a hostile 4 KB rank file took over 10 s). */
static sr_status grow_ids(sr_tokenizer *t, uint32_t n) {
    if (n <= t->vocab)
        return SR_OK;
    if (n > t->id_cap) {
        /* doubled up to SR_TOK_MAX_ID + 1 (2^24), at least n; past it only
         * n itself (the specials tiktoken adds after the ranks) */
        uint32_t cap = t->id_cap < 1024 ? 1024 : t->id_cap;
        while (cap < n && cap <= (SR_TOK_MAX_ID + 1u) / 2)
            cap *= 2;
        if (cap < n)
            cap = n;
        uint64_t *off = sr_realloc(t->off, (size_t)cap * sizeof *off);
        if (off)
            t->off = off;
        uint32_t *len = sr_realloc(t->len, (size_t)cap * sizeof *len);
        if (len)
            t->len = len;
        bool *has = sr_realloc(t->has, (size_t)cap * sizeof *has);
        if (has)
            t->has = has;
        if (!off || !len || !has)
            return sr_error_oom("the tokenizer's tokens");
        memset(t->has + t->id_cap, 0, (size_t)(cap - t->id_cap) * sizeof *has);
        t->id_cap = cap;
    }
    t->vocab = n;
    return SR_OK;
}

/* Sets token id's bytes.  Returns SR_ERR_DATA for a second token with that
 * id (the caller names where). */
sr_status tok_set_token(sr_tokenizer *t, uint32_t id, const unsigned char *b, size_t n) {
    sr_status st = grow_ids(t, id + 1);
    if (st != SR_OK)
        return st;
    if (t->has[id])
        return SR_ERR_DATA;
    if (!sr_grow((void **)&t->blob, &t->blob_cap, t->blob_n + n, 1, 1 << 16))
        return sr_error_oom("the tokenizer's tokens");
    memcpy(t->blob + t->blob_n, b, n);
    t->off[id] = t->blob_n;
    t->len[id] = (uint32_t)n;
    t->has[id] = true;
    t->blob_n += n;
    return SR_OK;
}

uint32_t tok_lookup(const sr_tokenizer *t, const unsigned char *b, size_t n) {
    if (n == 1)
        return t->byte_id[b[0]];
    if (!t->map_cap)
        return NONE;
    size_t mask = t->map_cap - 1;
    for (size_t i = hash_bytes(b, n) & mask;; i = (i + 1) & mask) {
        uint32_t id = t->map[i];
        if (id == NONE)
            return NONE;
        if (t->len[id] == n && memcmp(t->blob + t->off[id], b, n) == 0)
            return id;
    }
}

/* The bytes -> id map over every ordinary token (not the special ones).
 * SR_ERR_DATA when two tokens have the same bytes: *dup_a and *dup_b. */
static sr_status build_map(sr_tokenizer *t, const bool *is_special, uint32_t *dup_a, uint32_t *dup_b) {
    size_t n = 0;
    for (uint32_t id = 0; id < t->vocab; id++)
        n += t->has[id] && !(is_special && is_special[id]);
    t->map_cap = tok_pow2_at_least(2 * n + 1);
    t->map = sr_malloc(t->map_cap * sizeof *t->map);
    if (!t->map)
        return sr_error_oom("the tokenizer's map");
    memset(t->map, 0xff, t->map_cap * sizeof *t->map);
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = NONE;
    size_t mask = t->map_cap - 1;
    for (uint32_t id = 0; id < t->vocab; id++) {
        if (!t->has[id] || (is_special && is_special[id]))
            continue;
        const unsigned char *b = t->blob + t->off[id];
        size_t len = t->len[id];
        if (len == 1) {
            if (t->byte_id[b[0]] != NONE) {
                *dup_a = t->byte_id[b[0]], *dup_b = id;
                return SR_ERR_DATA;
            }
            t->byte_id[b[0]] = id;
        }
        size_t i = hash_bytes(b, len) & mask;
        for (; t->map[i] != NONE; i = (i + 1) & mask) {
            uint32_t o = t->map[i];
            if (t->len[o] == len && memcmp(t->blob + t->off[o], b, len) == 0) {
                *dup_a = o, *dup_b = id;
                return SR_ERR_DATA;
            }
        }
        t->map[i] = id;
    }
    return SR_OK;
}

sr_status tok_pairs_reserve(sr_tokenizer *t, size_t n) {
    t->pair_cap = tok_pow2_at_least(2 * n + 1);
    t->pk = sr_malloc(t->pair_cap * sizeof *t->pk);
    t->prank = sr_malloc(t->pair_cap * sizeof *t->prank);
    t->pid = sr_malloc(t->pair_cap * sizeof *t->pid);
    if (!t->pk || !t->prank || !t->pid)
        return sr_error_oom("the tokenizer's merges");
    memset(t->pk, 0xff, t->pair_cap * sizeof *t->pk);
    return SR_OK;
}

/* Adds pair (a, b) -> merged at rank; a pair already there keeps its
 * lower rank (tokenizers and tiktoken use the first). */
void tok_pair_add(sr_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = t->pair_cap - 1;
    size_t i = tok_hash_u64(key) & mask;
    for (; t->pk[i] != UINT64_MAX; i = (i + 1) & mask)
        if (t->pk[i] == key)
            return;
    t->pk[i] = key;
    t->prank[i] = rank;
    t->pid[i] = merged;
    t->pairs++;
}

static bool pair_get(const sr_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *merged) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = t->pair_cap - 1;
    for (size_t i = tok_hash_u64(key) & mask; t->pk[i] != UINT64_MAX; i = (i + 1) & mask)
        if (t->pk[i] == key) {
            *rank = t->prank[i];
            *merged = t->pid[i];
            return true;
        }
    return false;
}

sr_status tok_add_special(sr_tokenizer *t, const char *text, uint32_t id) {
    special_tok *s = sr_realloc(t->special, (t->nspecial + 1) * sizeof *s);
    if (!s)
        return sr_error_oom("the tokenizer's special tokens");
    t->special = s;
    s[t->nspecial].text = sr_strdup(text);
    if (!s[t->nspecial].text)
        return sr_error_oom("the tokenizer's special tokens");
    s[t->nspecial++].id = id;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* load */

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The bytes -> id map of the ordinary tokens (is_special: ids left out,
 * may be NULL), before the merges are read. */
static sr_status map_tokens(sr_tokenizer *t, const bool *is_special) {
    uint32_t a = 0, b = 0;
    sr_status st = build_map(t, is_special, &a, &b);
    if (st == SR_ERR_DATA)
        return sr_error(SR_ERR_DATA, "%s: tokens %u and %u have the same bytes", t->path, a, b);
    return st;
}

/* Finishes a tokenizer that encodes: the byte check, the pattern. */
static sr_status finish(sr_tokenizer *t) {
    sr_status st = tok_check_bytes(t);
    if (st != SR_OK)
        return st;
    int err;
    PCRE2_SIZE off;
    t->re = pcre2_compile((PCRE2_SPTR)t->pattern->pcre, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return sr_error(SR_ERR_INTERNAL, "the %s pattern does not compile at %zu: %s", t->pattern->name, (size_t)off,
                        (char *)msg);
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* without JIT (an exotic CPU), the interpreter matches */
    for (size_t i = 0; i < t->nspecial && t->eot < 0; i++)
        if (strcmp(t->special[i].text, "<|endoftext|>") == 0 || strcmp(t->special[i].text, "<|end_of_text|>") == 0)
            t->eot = t->special[i].id;
    return SR_OK;
}

static const char *format_name(sr_tok_format f) {
    switch (f) {
    case SR_TOK_HF_JSON:
        return "tokenizer.json";
    case SR_TOK_VOCAB_MERGES:
        return "vocab.json + merges.txt";
    case SR_TOK_TIKTOKEN:
        return "tiktoken ranks";
    default:
        return "llm.c tokenizer (decoding only)";
    }
}

/* The state of one load: what the parse allocates, freed by load_end. */
typedef struct {
    EVP_MD_CTX *md;
    char *buf, *mbuf;
    size_t n, mn;
    bool *is_special;
    json_t *root;
} load_state;

/* A vocab.json's "<|endoftext|>": GPT-2's end-of-text token, special as
 * tokenizers' GPT2TokenizerFast makes it (never produced by the merges,
 * the default document separator of data prepare), at the id vocab.json
 * gives it.  Nothing when the vocabulary has none. */
static sr_status vocab_end_of_text(sr_tokenizer *t, json_t *vocab, bool **is_special) {
    json_t *id = json_object_get(vocab, "<|endoftext|>");
    if (!json_is_integer(id))
        return SR_OK;
    *is_special = sr_calloc(SR_TOK_MAX_ID + 1u, sizeof **is_special);
    if (!*is_special)
        return sr_error_oom("the tokenizer");
    (*is_special)[json_integer_value(id)] = true;
    return tok_add_special(t, "<|endoftext|>", (uint32_t)json_integer_value(id));
}

/* SR_ERR_DATA "PATH:LINE: a NUL byte (WHY)" for the first NUL in
 * text[0 .. n): lines are read as C strings, and a NUL would silently end
 * one (or the file). */
static sr_status refuse_nul(const char *text, size_t n, const char *path, const char *why) {
    const char *nul = memchr(text, '\0', n);
    if (!nul)
        return SR_OK;
    size_t line = 1;
    for (const char *p = text; p < nul; p++)
        line += *p == '\n';
    return sr_error(SR_ERR_DATA, "%s:%zu: a NUL byte (%s)", path, line, why);
}

/* Parses ls->buf[0 .. ls->n) (NUL-terminated) as the format its content
 * says; a vocab.json reads the merges at `merges_path` (NULL: refused). */
static sr_status parse_buffer(sr_tokenizer *t, load_state *ls, const pattern_def *named, const char *merges_path) {
    char *buf = ls->buf;
    size_t n = ls->n;
    int unmap[324];
    tok_byte_unmap(unmap);
    sr_status st;
    const unsigned char *u = (const unsigned char *)buf;
    size_t lead = 0;
    while (lead < n && (u[lead] == ' ' || u[lead] == '\n' || u[lead] == '\r' || u[lead] == '\t'))
        lead++;
    uint32_t magic = 0;
    if (n >= 4)
        memcpy(&magic, buf, 4);
    if (n >= 4 && magic == LLMC_MAGIC) {
        t->format = SR_TOK_LLMC;
        return tok_load_llmc(t, u, n);
    }
    if (lead < n && buf[lead] == '{') {
        json_error_t je;
        ls->root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
        if (!ls->root)
            return sr_error(SR_ERR_DATA, "%s:%d:%d: %s", t->path, je.line, je.column, je.text);
        if (json_object_get(ls->root, "model")) {
            t->format = SR_TOK_HF_JSON;
            st = tok_load_hf_json(t, ls->root, unmap, &ls->is_special);
            json_t *merges = json_object_get(json_object_get(ls->root, "model"), "merges");
            char where[1300];
            sr_fmt(where, sizeof where, "%s: model.merges", t->path);
            if (st == SR_OK && !json_is_array(merges))
                st = sr_error(SR_ERR_DATA, "%s: expected an array (hint: a BPE tokenizer needs its merges)", where);
            if (st == SR_OK)
                st = map_tokens(t, ls->is_special);
            if (st == SR_OK)
                st = tok_load_merges(t, unmap, merges, NULL, where);
            return st;
        }
        /* a tokenizer.json's own keys without its "model" is not a vocab.json */
        static const char *const tj_keys[] = {"added_tokens",   "pre_tokenizer", "normalizer", "decoder",
                                              "post_processor", "truncation",    "padding"};
        for (size_t k = 0; k < sizeof tj_keys / sizeof tj_keys[0]; k++)
            if (json_object_get(ls->root, tj_keys[k]))
                return sr_error(SR_ERR_DATA,
                                "%s: a tokenizer.json (it has \"%s\") without \"model\": expected the BPE model "
                                "with its vocab and merges",
                                t->path, tj_keys[k]);
        /* vocab.json: merges.txt beside it */
        t->format = SR_TOK_VOCAB_MERGES;
        t->pattern = tok_pattern_named("gpt2", 4);
        if (!merges_path)
            return sr_error(SR_ERR_DATA, "%s: a vocab.json without its merges.txt", t->path);
        st = tok_load_vocab(t, unmap, ls->root, t->path);
        if (st == SR_OK)
            st = vocab_end_of_text(t, ls->root, &ls->is_special);
        if (st == SR_OK)
            st = tok_read_file(merges_path, "the merges beside the vocabulary", &ls->mbuf, &ls->mn, ls->md);
        if (st == SR_OK)
            st = refuse_nul(ls->mbuf, ls->mn, merges_path, "merges.txt is text");
        if (st == SR_OK)
            st = map_tokens(t, ls->is_special);
        if (st == SR_OK)
            st = tok_load_merges(t, unmap, NULL, ls->mbuf, merges_path);
        return st;
    }
    if (n == 0)
        return sr_error(SR_ERR_DATA, "%s: an empty file is not a tokenizer", t->path);
    if (tok_looks_like_ranks(buf) && (st = refuse_nul(buf, n, t->path, "a tiktoken rank file is text")) != SR_OK)
        return st;
    if (memchr(buf, '\0', n) || !tok_looks_like_ranks(buf))
        return sr_error(SR_ERR_DATA,
                        "%s: not a tokenizer file: expected a tokenizer.json, a vocab.json (with merges.txt beside "
                        "it), a tiktoken rank file (\"BASE64 RANK\" per line) or an llm.c tokenizer file (magic "
                        "%u)",
                        t->path, LLMC_MAGIC);
    t->format = SR_TOK_TIKTOKEN;
    t->pattern = named ? named : tok_pattern_named("gpt2", 4);
    t->whole_piece_first = true;
    st = tok_load_tiktoken(t, buf);
    if (st == SR_OK)
        st = map_tokens(t, NULL);
    if (st == SR_OK)
        st = tok_tiktoken_pairs(t);
    /* the special tokens come after the map: never matched in text */
    if (st == SR_OK)
        st = tok_tiktoken_specials(t);
    return st;
}

/* Finishes a load: the pattern, the fingerprint (the bytes read, then the
 * pattern's name), the description; frees the state.  *out on success. */
static sr_status load_end(sr_tokenizer *t, load_state *ls, sr_status st, sr_tokenizer **out) {
    if (st == SR_OK && t->format != SR_TOK_LLMC)
        st = finish(t);
    if (st == SR_OK) {
        const char *pname = t->pattern ? t->pattern->name : "";
        unsigned char d[32];
        unsigned int dl = 32;
        EVP_DigestFinal_ex(ls->md, d, &dl);
        sr_hex(d, 32, t->fingerprint);
        sr_fmt(t->describe, sizeof t->describe, "%s %s (%u ids%s%s)", format_name(t->format), t->path, t->vocab,
               t->pattern ? ", pattern " : "", pname);
        char real[PATH_MAX];
        const char *file = realpath(t->path, real) ? real : t->path;
        if (t->format == SR_TOK_TIKTOKEN)
            sr_fmt(t->spec, sizeof t->spec, "%s:%s", pname, file);
        else
            sr_fmt(t->spec, sizeof t->spec, "%s", file);
    }
    json_decref(ls->root);
    free(ls->buf);
    free(ls->mbuf);
    free(ls->is_special);
    EVP_MD_CTX_free(ls->md);
    if (st != SR_OK) {
        sr_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SR_OK;
}

static sr_status load_begin(sr_tokenizer **t, load_state *ls) {
    memset(ls, 0, sizeof *ls);
    *t = sr_calloc(1, sizeof **t);
    ls->md = EVP_MD_CTX_new();
    if (!*t || !ls->md || !EVP_DigestInit_ex(ls->md, EVP_sha256(), NULL)) {
        free(*t);
        *t = NULL;
        EVP_MD_CTX_free(ls->md);
        return sr_error_oom("the tokenizer");
    }
    (*t)->eot = -1;
    return SR_OK;
}

sr_status sr_tokenizer_parse(sr_tokenizer **out, const void *bytes, size_t n, const char *name, const char *pattern) {
    *out = NULL;
    sr_tokenizer *t;
    load_state ls;
    sr_status st = load_begin(&t, &ls);
    if (st != SR_OK)
        return st;
    sr_fmt(t->path, sizeof t->path, "%s", name);
    const pattern_def *named = pattern ? tok_pattern_named(pattern, strlen(pattern)) : NULL;
    if (pattern && !named)
        st = sr_error(SR_ERR_USAGE, "%s: unknown pre-tokenizer pattern %s (gpt2 or llama3)", name, pattern);
    if (st == SR_OK && n > (size_t)SR_TOK_MAX_FILE_BYTES)
        st = sr_error(SR_ERR_DATA, "%s: larger than %ld MiB: not a tokenizer", name, SR_TOK_MAX_FILE_BYTES >> 20);
    if (st == SR_OK && !(ls.buf = sr_malloc(n + 1)))
        st = sr_error_oom("the tokenizer");
    if (st == SR_OK) {
        memcpy(ls.buf, bytes, n);
        ls.buf[n] = '\0';
        ls.n = n;
        EVP_DigestUpdate(ls.md, bytes, n);
        st = parse_buffer(t, &ls, named, NULL);
    }
    return load_end(t, &ls, st, out);
}

sr_status sr_tokenizer_load(sr_tokenizer **out, const char *spec, const char *what) {
    *out = NULL;
    sr_tokenizer *t;
    load_state ls;
    sr_status st = load_begin(&t, &ls);
    if (st != SR_OK)
        return st;
    const pattern_def *named = NULL;
    const char *colon = strchr(spec, ':');
    if (colon && !exists(spec) && (named = tok_pattern_named(spec, (size_t)(colon - spec))) != NULL)
        spec = colon + 1;
    char merges_path[1300] = "";
    sr_fmt(t->path, sizeof t->path, "%s", spec);
    if (is_dir(spec)) {
        char p[1300];
        sr_fmt(p, sizeof p, "%s/tokenizer.json", spec);
        if (exists(p)) {
            sr_fmt(t->path, sizeof t->path, "%s", p);
        } else {
            sr_fmt(t->path, sizeof t->path, "%s/vocab.json", spec);
            sr_fmt(merges_path, sizeof merges_path, "%s/merges.txt", spec);
            if (!exists(t->path) || !exists(merges_path))
                st = sr_error(SR_ERR_NOINPUT,
                              "%s: %s: the directory holds neither tokenizer.json nor vocab.json + merges.txt", spec,
                              what);
        }
    }
    if (!merges_path[0]) {
        const char *slash = strrchr(t->path, '/');
        sr_fmt(merges_path, sizeof merges_path, "%.*smerges.txt", slash ? (int)(slash - t->path + 1) : 0, t->path);
    }
    char whatbuf[200];
    snprintf(whatbuf, sizeof whatbuf, "the tokenizer (%s)", what);
    if (st == SR_OK)
        st = tok_read_file(t->path, whatbuf, &ls.buf, &ls.n, ls.md);
    if (st == SR_OK)
        st = parse_buffer(t, &ls, named, merges_path);
    return load_end(t, &ls, st, out);
}

/* ------------------------------------------------------------------------ */
/* encoding */

/* The piece cache: pieces of up to CACHE_PIECE bytes, their ids, in a hash
 * table emptied whenever it fills (bounded memory per encoder). */
#define CACHE_PIECE 48
#define CACHE_SLOTS 16384 /* power of two */
#define CACHE_IDS 16

typedef struct {
    uint64_t hash;
    uint8_t len, nids;
    unsigned char bytes[CACHE_PIECE];
    uint32_t ids[CACHE_IDS];
} cache_slot;

typedef struct {
    uint32_t rank, pos, left_id, right_id, merged;
} merge_cand;

struct sr_tok_encoder {
    const sr_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    cache_slot *cache;
    size_t cached;
    /* scratch of the merge loop, grown to the longest piece */
    uint32_t *sym, *prev, *next;
    merge_cand *heap;
    size_t scap, hcap;
};

void sr_tok_ids_free(sr_tok_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

sr_status sr_tok_ids_push(sr_tok_ids *v, uint32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 1024;
        uint32_t *ids = sr_realloc(v->ids, cap * sizeof *ids);
        if (!ids)
            return sr_error_oom("token ids");
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return SR_OK;
}

sr_status sr_tok_encoder_new(const sr_tokenizer *t, sr_tok_encoder **out) {
    *out = NULL;
    if (!sr_tokenizer_can_encode(t))
        return sr_error(SR_ERR_DATA, "%s: an llm.c tokenizer file decodes only (hint: give tokenizer.json)", t->path);
    sr_tok_encoder *e = sr_calloc(1, sizeof *e);
    if (!e)
        return sr_error_oom("the encoder");
    e->t = t;
    e->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    e->mctx = pcre2_match_context_create(NULL);
    e->jit = pcre2_jit_stack_create(32 << 10, 4 << 20, NULL);
    e->cache = sr_calloc(CACHE_SLOTS, sizeof *e->cache);
    if (!e->md || !e->mctx || !e->jit || !e->cache) {
        sr_tok_encoder_free(e);
        return sr_error_oom("the encoder");
    }
    pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
    *out = e;
    return SR_OK;
}

void sr_tok_encoder_free(sr_tok_encoder *e) {
    if (!e)
        return;
    pcre2_match_data_free(e->md);
    pcre2_match_context_free(e->mctx);
    pcre2_jit_stack_free(e->jit);
    free(e->cache);
    free(e->sym);
    free(e->prev);
    free(e->next);
    free(e->heap);
    free(e);
}

static bool cand_less(const merge_cand *a, const merge_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(merge_cand *h, size_t *n, merge_cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static merge_cand heap_pop(merge_cand *h, size_t *n) {
    merge_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
            c++;
        if (!cand_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void push_pair(sr_tok_encoder *e, size_t *hn, uint32_t left) {
    uint32_t right = e->next[left];
    uint32_t rank, merged;
    if (right != NONE && pair_get(e->t, e->sym[left], e->sym[right], &rank, &merged))
        heap_push(e->heap, hn, (merge_cand){rank, left, e->sym[left], e->sym[right], merged});
}

/* BPE over one piece p[0 .. n) (n >= 1), ids appended to out. */
static sr_status bpe(sr_tok_encoder *e, const unsigned char *p, size_t n, sr_tok_ids *out) {
    const sr_tokenizer *t = e->t;
    if (n == 1)
        return sr_tok_ids_push(out, t->byte_id[p[0]]);
    if (t->whole_piece_first) {
        uint32_t id = tok_lookup(t, p, n);
        if (id != NONE)
            return sr_tok_ids_push(out, id);
    }
    if (n > e->scap) {
        size_t cap = n < 256 ? 256 : n;
        free(e->sym), free(e->prev), free(e->next), free(e->heap);
        e->sym = sr_malloc(cap * sizeof *e->sym);
        e->prev = sr_malloc(cap * sizeof *e->prev);
        e->next = sr_malloc(cap * sizeof *e->next);
        e->heap = sr_malloc(2 * cap * sizeof *e->heap); /* at most n - 1 live + n - 1 pushed by merges */
        e->scap = e->sym && e->prev && e->next && e->heap ? cap : 0;
        if (!e->scap)
            return sr_error_oom("the encoder's scratch");
    }
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = t->byte_id[p[i]];
        e->prev[i] = i ? (uint32_t)i - 1 : NONE;
        e->next[i] = i + 1 < n ? (uint32_t)i + 1 : NONE;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(e, &hn, (uint32_t)i);
    while (hn) {
        merge_cand c = heap_pop(e->heap, &hn);
        uint32_t l = c.pos, r = e->next[l];
        /* stale: the left symbol merged away or changed, or its right
         * neighbour changed */
        if (e->sym[l] != c.left_id || r == NONE || e->sym[r] != c.right_id)
            continue;
        e->sym[l] = c.merged;
        e->sym[r] = NONE; /* no token has id NONE: a removed symbol is stale */
        e->next[l] = e->next[r];
        if (e->next[r] != NONE)
            e->prev[e->next[r]] = l;
        if (e->prev[l] != NONE)
            push_pair(e, &hn, e->prev[l]);
        push_pair(e, &hn, l);
    }
    for (uint32_t i = 0; i != NONE; i = e->next[i]) {
        sr_status st = sr_tok_ids_push(out, e->sym[i]);
        if (st != SR_OK)
            return st;
    }
    return SR_OK;
}

/* One piece, through the cache. */
static sr_status piece(sr_tok_encoder *e, const unsigned char *p, size_t n, sr_tok_ids *out) {
    if (n > CACHE_PIECE || n < 2)
        return bpe(e, p, n, out);
    uint64_t h = hash_bytes(p, n);
    cache_slot *s = &e->cache[h & (CACHE_SLOTS - 1)];
    if (s->len == n && s->hash == h && memcmp(s->bytes, p, n) == 0) {
        for (int i = 0; i < s->nids; i++) {
            sr_status st = sr_tok_ids_push(out, s->ids[i]);
            if (st != SR_OK)
                return st;
        }
        return SR_OK;
    }
    size_t first = out->n;
    sr_status st = bpe(e, p, n, out);
    if (st == SR_OK && out->n - first <= CACHE_IDS) {
        /* direct-mapped: a newer piece replaces the slot's */
        s->hash = h;
        s->len = (uint8_t)n;
        s->nids = (uint8_t)(out->n - first);
        memcpy(s->bytes, p, n);
        memcpy(s->ids, out->ids + first, s->nids * sizeof *s->ids);
    }
    return st;
}

sr_status sr_tok_encode(sr_tok_encoder *e, const unsigned char *text, size_t len, sr_tok_ids *out) {
    size_t at = 0;
    while (at < len) {
        int rc = pcre2_match(e->t->re, text, len, at, 0, e->md, e->mctx);
        size_t s = len, end = len;
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            s = ov[0];
            end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return sr_error(SR_ERR_INTERNAL, "the %s pre-tokenizer pattern failed at byte %zu: %s", e->t->pattern->name,
                            at, (char *)msg);
        }
        /* bytes the pattern skipped (not valid UTF-8): one piece */
        sr_status st = s > at ? piece(e, text + at, s - at, out) : SR_OK;
        if (st == SR_OK && end > s)
            st = piece(e, text + s, end - s, out);
        if (st != SR_OK)
            return st;
        if (end == s && s < len)
            end = s + 1; /* an empty match (no pattern here has one): step on */
        at = end;
    }
    return SR_OK;
}
