/* tokenizer.c — byte-level BPE tokenizers: the four file formats, the
 * pre-tokenizer patterns, the merge loop, the piece cache and decoding;
 * see tokenizer.h.
 *
 * Libraries: jansson parses the JSON files, PCRE2 (JIT, UTF, Unicode
 * properties, PCRE2_MATCH_INVALID_UTF) matches the pre-tokenizer
 * patterns, OpenSSL's EVP decodes tiktoken's base64 and computes the
 * fingerprint.  Written here because no library on Debian does it in C:
 * the BPE merge loop (a heap over a linked list of symbols) and GPT-2's
 * byte-to-character map, a few lines each. */
#include "srconfig.h"

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pcre2.h>
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

typedef struct {
    const char *name;
    const char *pcre;    /* what PCRE2 compiles */
    const char *text[3]; /* the pattern as tokenizer.json files and tiktoken spell it (recognised textually) */
} pattern_def;

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

static const pattern_def *pattern_named(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++)
        if (strlen(patterns[i].name) == len && memcmp(patterns[i].name, name, len) == 0)
            return &patterns[i];
    return NULL;
}

static const pattern_def *pattern_of_text(const char *text) {
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++)
        for (int k = 0; k < 3 && patterns[i].text[k]; k++)
            if (strcmp(patterns[i].text[k], text) == 0)
                return &patterns[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the tokenizer */

#define NONE UINT32_MAX

typedef struct {
    char *text;
    uint32_t id;
} special_tok;

struct sr_tokenizer {
    sr_tok_format format;
    char path[1200];
    char spec[4200];
    char describe[1600];
    char fingerprint[65];
    const pattern_def *pattern;
    pcre2_code *re;
    bool whole_piece_first; /* tiktoken, or tokenizer.json's ignore_merges */
    uint32_t vocab;         /* largest id + 1 */
    /* token bytes by id: blob[off[id] .. off[id] + len[id]); has[id] */
    unsigned char *blob;
    size_t blob_n, blob_cap;
    uint64_t *off;
    uint32_t *len;
    bool *has;
    uint32_t byte_id[256];
    /* bytes -> id (ordinary tokens only; open addressing, NONE empty) */
    uint32_t *map;
    size_t map_cap;
    /* pair (left << 32 | right) -> rank, merged id */
    uint64_t *pk;
    uint32_t *prank, *pid;
    size_t pair_cap, pairs;
    special_tok *special;
    size_t nspecial;
    int64_t eot;
};

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

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* Makes room for ids below n. */
static sr_status grow_ids(sr_tokenizer *t, uint32_t n) {
    if (n <= t->vocab)
        return SR_OK;
    uint64_t *off = sr_realloc(t->off, (size_t)n * sizeof *off);
    if (off)
        t->off = off;
    uint32_t *len = sr_realloc(t->len, (size_t)n * sizeof *len);
    if (len)
        t->len = len;
    bool *has = sr_realloc(t->has, (size_t)n * sizeof *has);
    if (has)
        t->has = has;
    if (!off || !len || !has)
        return sr_error_oom("the tokenizer's tokens");
    memset(t->has + t->vocab, 0, (size_t)(n - t->vocab) * sizeof *has);
    t->vocab = n;
    return SR_OK;
}

/* Sets token id's bytes.  Returns SR_ERR_DATA for a second token with that
 * id (the caller names where). */
static sr_status set_token(sr_tokenizer *t, uint32_t id, const unsigned char *b, size_t n) {
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

static uint32_t lookup(const sr_tokenizer *t, const unsigned char *b, size_t n) {
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
    t->map_cap = pow2_at_least(2 * n + 1);
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

static sr_status pairs_reserve(sr_tokenizer *t, size_t n) {
    t->pair_cap = pow2_at_least(2 * n + 1);
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
static void pair_add(sr_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = t->pair_cap - 1;
    size_t i = hash_u64(key) & mask;
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
    for (size_t i = hash_u64(key) & mask; t->pk[i] != UINT64_MAX; i = (i + 1) & mask)
        if (t->pk[i] == key) {
            *rank = t->prank[i];
            *merged = t->pid[i];
            return true;
        }
    return false;
}

static sr_status add_special(sr_tokenizer *t, const char *text, uint32_t id) {
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
/* reading files */

/* Reads a whole tokenizer file (at most SR_TOK_MAX_FILE_BYTES) into a
 * NUL-terminated buffer, adding its bytes to the fingerprint. */
static sr_status read_file(const char *path, const char *what, char **buf, size_t *n, EVP_MD_CTX *md) {
    FILE *f;
    sr_status st = sr_fsio_open_input_file(path, what, NULL, &f);
    if (st != SR_OK)
        return st;
    size_t cap = 1 << 16, len = 0;
    char *b = sr_malloc(cap + 1);
    for (;;) {
        if (!b) {
            fclose(f);
            return sr_error_oom("the tokenizer file");
        }
        size_t got = fread(b + len, 1, cap - len, f);
        len += got;
        if (len > (size_t)SR_TOK_MAX_FILE_BYTES) {
            fclose(f);
            free(b);
            return sr_error(SR_ERR_DATA,
                            "%s: %s is larger than %ld MiB: not a tokenizer (hint: tokenizer.json files of real "
                            "vocabularies are a few MiB)",
                            path, what, SR_TOK_MAX_FILE_BYTES >> 20);
        }
        if (got == 0)
            break;
        if (len == cap) {
            cap *= 2;
            char *nb = sr_realloc(b, cap + 1);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(b);
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read %s: %s", path, what, strerror(err));
    }
    b[len] = '\0';
    EVP_DigestUpdate(md, b, len);
    *buf = b;
    *n = len;
    return SR_OK;
}

/* GPT-2's byte-level map: every byte is a printable character; a token's
 * text in vocab.json and tokenizer.json is its bytes so mapped.
 * unmap[cp] is the byte of code point cp (< 324), -1 for none. */
static void byte_unmap(int unmap[324]) {
    for (int i = 0; i < 324; i++)
        unmap[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unmap[printable ? b : 256 + extra++] = b;
    }
}

/* Decodes one UTF-8 character of s (NUL-terminated); -1 when invalid. */
static long utf8_next(const unsigned char **s) {
    const unsigned char *p = *s;
    long c;
    int more;
    if (p[0] < 0x80)
        c = p[0], more = 0;
    else if ((p[0] & 0xE0) == 0xC0)
        c = p[0] & 0x1F, more = 1;
    else if ((p[0] & 0xF0) == 0xE0)
        c = p[0] & 0x0F, more = 2;
    else if ((p[0] & 0xF8) == 0xF0)
        c = p[0] & 0x07, more = 3;
    else
        return -1;
    for (int i = 1; i <= more; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return -1;
        c = c << 6 | (p[i] & 0x3F);
    }
    *s = p + 1 + more;
    return c;
}

/* A byte-level token text to its bytes (out holds strlen(text) bytes).
 * false when a character is outside the map. */
static bool unmap_text(const int unmap[324], const char *text, unsigned char *out, size_t *n) {
    const unsigned char *p = (const unsigned char *)text;
    *n = 0;
    while (*p) {
        long c = utf8_next(&p);
        if (c < 0 || c >= 324 || unmap[c] < 0)
            return false;
        out[(*n)++] = (unsigned char)unmap[c];
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* tokenizer.json and vocab.json + merges.txt */

/* One merge "a b" (or ["a", "b"]): the pair's ids and the merged id, from
 * the byte-level texts.  false with *why when it names an unknown token. */
static bool merge_ids(const sr_tokenizer *t, const int unmap[324], const char *a, const char *b, uint32_t ids[3],
                      const char **why) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char *buf = sr_malloc(la + lb + 1);
    if (!buf) {
        *why = "out of memory";
        return false;
    }
    size_t na, nb;
    bool ok = unmap_text(unmap, a, buf, &na) && unmap_text(unmap, b, buf + na, &nb);
    if (!ok) {
        *why = "a character outside GPT-2's byte-level alphabet";
    } else if ((ids[0] = lookup(t, buf, na)) == NONE) {
        *why = "its left token is not in the vocabulary";
        ok = false;
    } else if ((ids[1] = lookup(t, buf + na, nb)) == NONE) {
        *why = "its right token is not in the vocabulary";
        ok = false;
    } else if ((ids[2] = lookup(t, buf, na + nb)) == NONE) {
        *why = "the merged token is not in the vocabulary";
        ok = false;
    }
    free(buf);
    return ok;
}

/* vocab: a JSON object token text -> id.  `where` names it in messages. */
static sr_status load_vocab(sr_tokenizer *t, const int unmap[324], json_t *vocab, const char *where) {
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return sr_error(SR_ERR_DATA, "%s: expected an object of token text to id", where);
    const char *key;
    json_t *v;
    unsigned char *buf = NULL;
    size_t cap = 0;
    sr_status st = SR_OK;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SR_TOK_MAX_ID) {
            st = sr_error(SR_ERR_DATA, "%s: token \"%.80s\": expected an id from 0 to %d", where, key, SR_TOK_MAX_ID);
            break;
        }
        size_t kl = strlen(key), n;
        if (kl + 1 > cap) {
            cap = 2 * kl + 64;
            unsigned char *nb = sr_realloc(buf, cap);
            if (!nb) {
                st = sr_error_oom("the tokenizer");
                break;
            }
            buf = nb;
        }
        if (!unmap_text(unmap, key, buf, &n)) {
            st = sr_error(SR_ERR_DATA,
                          "%s: token \"%.80s\" has a character outside GPT-2's byte-level alphabet (hint: only "
                          "byte-level BPE vocabularies are supported)",
                          where, key);
            break;
        }
        if (n > SR_TOK_MAX_TOKEN_BYTES) {
            st = sr_error(SR_ERR_DATA, "%s: token \"%.40s...\": a token of %zu bytes (at most %d)", where, key, n,
                          SR_TOK_MAX_TOKEN_BYTES);
            break;
        }
        uint32_t id = (uint32_t)json_integer_value(v);
        if ((st = set_token(t, id, buf, n)) == SR_ERR_DATA) {
            st = sr_error(SR_ERR_DATA, "%s: token \"%.80s\" has id %u, as another token has (duplicate id)", where, key,
                          id);
            break;
        }
        if (st != SR_OK)
            break;
    }
    free(buf);
    return st;
}

typedef struct {
    char *buf;
    size_t cap;
} scratch_buf;

static sr_status load_merges_into(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where,
                                  scratch_buf *sc);

/* merges: a JSON array of "a b" or ["a", "b"] (tokenizer.json), or the
 * lines of merges.txt (`text`: then `merges` is NULL).  The bytes -> id
 * map must be built. */
static sr_status load_merges(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where) {
    scratch_buf sc = {NULL, 0};
    sr_status st = load_merges_into(t, unmap, merges, text, where, &sc);
    free(sc.buf);
    return st;
}

static sr_status load_merges_into(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where,
                                  scratch_buf *sc) {
    size_t n = 0;
    if (merges)
        n = json_array_size(merges);
    else
        for (const char *p = text; *p; p++)
            n += *p == '\n';
    sr_status st = pairs_reserve(t, n + 1);
    if (st != SR_OK)
        return st;
    uint32_t rank = 0;
    char *line = text;
    for (size_t i = 0, lineno = 1;; i++, lineno++) {
        const char *a, *b;
        char *sp = NULL, *next = NULL;
        if (merges) {
            if (i >= n)
                break;
            json_t *m = json_array_get(merges, i);
            if (json_is_string(m)) {
                const char *ms = json_string_value(m);
                const char *msp = strchr(ms, ' ');
                size_t ml = strlen(ms);
                if (!msp || msp == ms || !msp[1] || strchr(msp + 1, ' '))
                    return sr_error(SR_ERR_DATA, "%s: merge %zu: expected \"LEFT RIGHT\" (two tokens, one space)",
                                    where, i);
                if (ml + 1 > sc->cap) {
                    free(sc->buf);
                    sc->cap = 2 * ml + 64;
                    if (!(sc->buf = sr_malloc(sc->cap)))
                        return sr_error_oom("the tokenizer's merges");
                }
                memcpy(sc->buf, ms, ml + 1);
                sc->buf[msp - ms] = '\0';
                a = sc->buf;
                b = sc->buf + (msp - ms) + 1;
            } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                       json_is_string(json_array_get(m, 1))) {
                a = json_string_value(json_array_get(m, 0));
                b = json_string_value(json_array_get(m, 1));
            } else {
                return sr_error(SR_ERR_DATA, "%s: merge %zu: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]", where,
                                i);
            }
        } else {
            if (!line || !*line)
                break;
            next = strchr(line, '\n');
            if (next)
                *next = '\0';
            size_t ll = strlen(line);
            if (ll && line[ll - 1] == '\r')
                line[--ll] = '\0';
            if ((lineno == 1 && strncmp(line, "#version", 8) == 0) || ll == 0) {
                line = next ? next + 1 : NULL;
                continue;
            }
            sp = strchr(line, ' ');
            if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
                return sr_error(SR_ERR_DATA, "%s:%zu: expected \"LEFT RIGHT\" (two tokens, one space)", where, lineno);
            *sp = '\0';
            a = line;
            b = sp + 1;
        }
        uint32_t ids[3];
        const char *why;
        if (!merge_ids(t, unmap, a, b, ids, &why)) {
            if (merges)
                return sr_error(SR_ERR_DATA, "%s: merge %zu (\"%.60s\" \"%.60s\"): %s", where, i, a, b, why);
            return sr_error(SR_ERR_DATA, "%s:%zu: merge \"%.60s\" \"%.60s\": %s", where, lineno, a, b, why);
        }
        pair_add(t, ids[0], ids[1], rank++, ids[2]);
        if (!merges)
            line = next ? next + 1 : NULL;
    }
    if (rank == 0)
        return sr_error(SR_ERR_DATA, "%s: no merges (hint: a BPE tokenizer needs its merges)", where);
    return SR_OK;
}

/* The checks every loaded tokenizer passes: every byte has a token. */
static sr_status check_bytes(const sr_tokenizer *t) {
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] == NONE)
            return sr_error(SR_ERR_DATA,
                            "%s: no token for the byte 0x%02x: a byte-level BPE has one for each of the 256 bytes",
                            t->path, b);
    return SR_OK;
}

/* Reads one pre-tokenizer of tokenizer.json: ByteLevel (its use_regex:
 * the GPT-2 pattern) or Split with a recognised pattern.  *pat is set by
 * the first that names one. */
static sr_status pretok_one(sr_tokenizer *t, json_t *p, const pattern_def **pat) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return sr_error(SR_ERR_DATA, "%s: pre_tokenizer: expected an object with a \"type\"", t->path);
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            return sr_error(SR_ERR_DATA,
                            "%s: pre_tokenizer ByteLevel with add_prefix_space: true is not supported (hint: GPT-2's "
                            "and Llama 3's tokenizers set it false)",
                            t->path);
        json_t *ur = json_object_get(p, "use_regex");
        if ((!ur || json_is_true(ur)) && !*pat)
            *pat = pattern_named("gpt2", 4);
        return SR_OK;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *pt = json_object_get(p, "pattern");
        const char *re = json_string_value(json_object_get(pt, "Regex"));
        if (!re)
            re = json_string_value(json_object_get(pt, "String"));
        const pattern_def *d = re ? pattern_of_text(re) : NULL;
        if (!d)
            return sr_error(SR_ERR_DATA,
                            "%s: pre_tokenizer Split with the pattern \"%.200s\": neither GPT-2's nor Llama 3's (hint: "
                            "only those two byte-level patterns are supported)",
                            t->path, re ? re : "(none)");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (beh && strcmp(beh, "Isolated") != 0)
            return sr_error(SR_ERR_DATA, "%s: pre_tokenizer Split with behavior %s: expected Isolated", t->path, beh);
        if (json_is_true(json_object_get(p, "invert")))
            return sr_error(SR_ERR_DATA, "%s: pre_tokenizer Split with invert: true is not supported", t->path);
        if (!*pat)
            *pat = d;
        return SR_OK;
    }
    return sr_error(SR_ERR_DATA,
                    "%s: pre_tokenizer %s is not supported (hint: byte-level BPE tokenizers use ByteLevel, or Split "
                    "with GPT-2's or Llama 3's pattern)",
                    t->path, type);
}

static sr_status load_hf_json(sr_tokenizer *t, json_t *root, const int unmap[324], bool **is_special) {
    json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0)
        return sr_error(SR_ERR_DATA, "%s: model type %s: expected BPE", t->path, type);
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm))
        return sr_error(SR_ERR_DATA,
                        "%s: a normalizer (%s) is not supported: byte-level BPE tokenizers (GPT-2, Llama 3) have "
                        "none",
                        t->path, json_string_value(json_object_get(norm, "type")) ?: "?");
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return sr_error(SR_ERR_DATA, "%s: model.byte_fallback: true is not supported (byte-level BPE only)", t->path);
    const char *sfx[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(model, sfx[i]));
        if (s && *s)
            return sr_error(SR_ERR_DATA, "%s: model.%s \"%s\" is not supported (byte-level BPE only)", t->path, sfx[i],
                            s);
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0)
        return sr_error(SR_ERR_DATA, "%s: model.dropout is set: BPE dropout is for training a tokenizer, not here",
                        t->path);
    t->whole_piece_first = json_is_true(json_object_get(model, "ignore_merges"));
    json_t *pre = json_object_get(root, "pre_tokenizer");
    const pattern_def *pat = NULL;
    sr_status st = SR_OK;
    if (!pre || json_is_null(pre))
        return sr_error(SR_ERR_DATA,
                        "%s: no pre_tokenizer: expected ByteLevel or a Split with GPT-2's or Llama 3's pattern",
                        t->path);
    const char *ptype = json_string_value(json_object_get(pre, "type"));
    if (ptype && strcmp(ptype, "Sequence") == 0) {
        json_t *list = json_object_get(pre, "pretokenizers");
        size_t i;
        json_t *p;
        json_array_foreach(list, i, p) {
            if ((st = pretok_one(t, p, &pat)) != SR_OK)
                return st;
        }
    } else if ((st = pretok_one(t, pre, &pat)) != SR_OK) {
        return st;
    }
    if (!pat)
        return sr_error(SR_ERR_DATA, "%s: the pre_tokenizer splits nothing (ByteLevel with use_regex: false alone)",
                        t->path);
    t->pattern = pat;
    char where[1100];
    sr_fmt(where, sizeof where, "%s: model.vocab", t->path);
    if ((st = load_vocab(t, unmap, json_object_get(model, "vocab"), where)) != SR_OK)
        return st;
    /* added tokens: their text is their bytes (not byte-level mapped) */
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        return sr_error(SR_ERR_DATA, "%s: added_tokens: expected a list of {\"id\", \"content\"} objects, not %s",
                        t->path, json_is_object(added) ? "an object" : "a scalar");
    size_t i;
    json_t *a;
    *is_special = sr_calloc(SR_TOK_MAX_ID + 1u, sizeof **is_special);
    if (!*is_special)
        return sr_error_oom("the tokenizer");
    json_array_foreach(added, i, a) {
        const char *content = json_string_value(json_object_get(a, "content"));
        json_t *idj = json_object_get(a, "id");
        if (!content || !json_is_integer(idj) || json_integer_value(idj) < 0 || json_integer_value(idj) > SR_TOK_MAX_ID)
            return sr_error(SR_ERR_DATA, "%s: added_tokens[%zu]: expected {\"id\": 0..%d, \"content\": \"...\"}",
                            t->path, i, SR_TOK_MAX_ID);
        if (strlen(content) > SR_TOK_MAX_TOKEN_BYTES)
            return sr_error(SR_ERR_DATA, "%s: added_tokens[%zu]: a token of %zu bytes (at most %d)", t->path, i,
                            strlen(content), SR_TOK_MAX_TOKEN_BYTES);
        uint32_t id = (uint32_t)json_integer_value(idj);
        size_t n;
        const unsigned char *have = sr_tokenizer_bytes(t, id, &n);
        bool same = have && n == strlen(content) && memcmp(have, content, n) == 0;
        if (have && !same) {
            /* the vocabulary's own entry for that id, byte-level mapped */
            unsigned char *tmp = sr_malloc(strlen(content) + 1);
            size_t m;
            bool mapped = tmp && unmap_text(unmap, content, tmp, &m) && m == n && memcmp(tmp, have, n) == 0;
            free(tmp);
            if (!mapped)
                return sr_error(SR_ERR_DATA, "%s: added_tokens[%zu] \"%.80s\" has id %u, a vocabulary token's", t->path,
                                i, content, id);
        }
        if (!have && (st = set_token(t, id, (const unsigned char *)content, strlen(content))) != SR_OK)
            return st;
        if (!have)
            (*is_special)[id] = true; /* an added token outside model.vocab: never produced by the merges */
        if ((st = add_special(t, content, id)) != SR_OK)
            return st;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* tiktoken rank files */

/* The first line of a rank file: base64, one space, digits. */
static bool looks_like_ranks(const char *text) {
    size_t b = strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");
    return b > 0 && text[b] == ' ' && text[b + 1] >= '0' && text[b + 1] <= '9';
}

static sr_status load_tiktoken(sr_tokenizer *t, char *text) {
    char *line = text;
    size_t lineno = 0, n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    unsigned char *buf = NULL;
    size_t cap = 0;
    sr_status st = SR_OK;
    while (line && *line) {
        lineno++;
        char *next = strchr(line, '\n');
        if (next)
            *next = '\0';
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        if (ll == 0) {
            line = next ? next + 1 : NULL;
            continue;
        }
        char *sp = strchr(line, ' ');
        char *end = NULL;
        long rank = -1;
        if (sp) {
            errno = 0;
            rank = strtol(sp + 1, &end, 10);
        }
        size_t b64 = sp ? (size_t)(sp - line) : 0;
        if (!sp || b64 == 0 || b64 % 4 || b64 > INT32_MAX || !*(sp + 1) || *end || errno || rank < 0 ||
            rank > SR_TOK_MAX_ID) {
            st = sr_error(SR_ERR_DATA, "%s:%zu: expected \"BASE64 RANK\" with a rank from 0 to %d", t->path, lineno,
                          SR_TOK_MAX_ID);
            break;
        }
        if (b64 / 4 * 3 + 1 > cap) {
            free(buf);
            cap = b64 / 4 * 3 + 64;
            if (!(buf = sr_malloc(cap))) {
                st = sr_error_oom("the tokenizer");
                break;
            }
        }
        int got = EVP_DecodeBlock(buf, (const unsigned char *)line, (int)b64);
        if (got < 0) {
            st = sr_error(SR_ERR_DATA, "%s:%zu: the token is not base64", t->path, lineno);
            break;
        }
        got -= (line[b64 - 1] == '=') + (line[b64 - 2] == '=');
        if (got <= 0) {
            st = sr_error(SR_ERR_DATA, "%s:%zu: an empty token", t->path, lineno);
            break;
        }
        if (got > SR_TOK_MAX_TOKEN_BYTES) {
            st = sr_error(SR_ERR_DATA, "%s:%zu: a token of %d bytes (at most %d)", t->path, lineno, got,
                          SR_TOK_MAX_TOKEN_BYTES);
            break;
        }
        st = set_token(t, (uint32_t)rank, buf, (size_t)got);
        if (st == SR_ERR_DATA)
            st = sr_error(SR_ERR_DATA, "%s:%zu: rank %ld is given twice (duplicate id)", t->path, lineno, rank);
        if (st != SR_OK)
            break;
        line = next ? next + 1 : NULL;
    }
    free(buf);
    (void)n;
    if (st == SR_OK && lineno == 0)
        st = sr_error(SR_ERR_DATA, "%s: no ranks", t->path);
    return st;
}

/* A rank file's pairs: every split of every token into two tokens, at the
 * rank of the whole (tiktoken merges the adjacent pair whose concatenation
 * has the lowest rank).
 *
 * Linear in each token's length: hashing each split's halves anew would
 * cost O(L^2) per token of L bytes (a hostile 100 KB token took 16 s).
 * Instead every token gets two polynomial hashes modulo 2^61 - 1 with
 * bases drawn at random for this load; a token's prefix hashes are
 * computed once, and any split's halves then hash in O(1).  Two different
 * strings of equal length <= SR_TOK_MAX_TOKEN_BYTES collide under both
 * with probability below (65536 / 2^61)^2 ~ 1e-27 per comparison, so no
 * byte comparison is needed (and none could be linear). */
#define M61 ((1ull << 61) - 1)

static uint64_t mul61(uint64_t a, uint64_t b) {
    unsigned __int128 p = (unsigned __int128)a * b;
    uint64_t r = (uint64_t)(p & M61) + (uint64_t)(p >> 61);
    return r >= M61 ? r - M61 : r;
}

static uint64_t sub61(uint64_t a, uint64_t b) { return a >= b ? a - b : a + M61 - b; }

/* A random base in [2^40, 2^61 - 2^40): urandom, else the clock. */
static uint64_t random_base(unsigned salt) {
    uint64_t r = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = hash_u64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ salt);
    }
    if (f)
        fclose(f);
    return (1ull << 40) + r % (M61 - (2ull << 40));
}

typedef struct {
    uint64_t b[2];          /* the bases */
    uint64_t *pw[2], *h[2]; /* powers, and one token's prefix hashes */
    uint64_t *th[2];        /* each token's full hashes */
    uint32_t *slot;         /* open addressing over ids */
    size_t cap;
} poly_index;

static void poly_hash(const poly_index *x, const unsigned char *p, size_t n, uint64_t out[2]) {
    for (int k = 0; k < 2; k++) {
        uint64_t h = 0;
        for (size_t i = 0; i < n; i++)
            h = mul61(h, x->b[k]) + p[i] + 1u, h = h >= M61 ? h - M61 : h;
        out[k] = h;
    }
}

static size_t poly_slot(const poly_index *x, uint64_t h0, size_t len) {
    return hash_u64(h0 ^ (uint64_t)len * 0x9e3779b97f4a7c15ull) & (x->cap - 1);
}

/* The ordinary token of `len` bytes with hashes h, or NONE. */
static uint32_t poly_find(const sr_tokenizer *t, const poly_index *x, size_t len, uint64_t h0, uint64_t h1) {
    for (size_t i = poly_slot(x, h0, len);; i = (i + 1) & (x->cap - 1)) {
        uint32_t id = x->slot[i];
        if (id == NONE)
            return NONE;
        if (t->len[id] == len && x->th[0][id] == h0 && x->th[1][id] == h1)
            return id;
    }
}

static void poly_free(poly_index *x) {
    for (int k = 0; k < 2; k++) {
        free(x->pw[k]);
        free(x->h[k]);
        free(x->th[k]);
    }
    free(x->slot);
}

static sr_status tiktoken_pairs(sr_tokenizer *t) {
    size_t n = 0, ntok = 0, maxlen = 1;
    for (uint32_t id = 0; id < t->vocab; id++)
        if (t->has[id]) {
            ntok++;
            maxlen = t->len[id] > maxlen ? t->len[id] : maxlen;
            if (t->len[id] > 1)
                n += t->len[id] - 1;
        }
    sr_status st = pairs_reserve(t, n + 1);
    if (st != SR_OK)
        return st;
    poly_index x = {.b = {random_base(1), random_base(2)}, .cap = pow2_at_least(2 * ntok + 1)};
    x.slot = sr_malloc(x.cap * sizeof *x.slot);
    for (int k = 0; k < 2; k++) {
        x.pw[k] = sr_malloc((maxlen + 1) * sizeof *x.pw[k]);
        x.h[k] = sr_malloc((maxlen + 1) * sizeof *x.h[k]);
        x.th[k] = sr_calloc(t->vocab, sizeof *x.th[k]);
    }
    if (!x.slot || !x.pw[0] || !x.pw[1] || !x.h[0] || !x.h[1] || !x.th[0] || !x.th[1]) {
        poly_free(&x);
        return sr_error_oom("the tokenizer's merges");
    }
    memset(x.slot, 0xff, x.cap * sizeof *x.slot);
    for (int k = 0; k < 2; k++) {
        x.pw[k][0] = 1;
        for (size_t i = 1; i <= maxlen; i++)
            x.pw[k][i] = mul61(x.pw[k][i - 1], x.b[k]);
    }
    for (uint32_t id = 0; id < t->vocab; id++) {
        if (!t->has[id])
            continue;
        uint64_t h[2];
        poly_hash(&x, t->blob + t->off[id], t->len[id], h);
        x.th[0][id] = h[0];
        x.th[1][id] = h[1];
        size_t i = poly_slot(&x, h[0], t->len[id]);
        while (x.slot[i] != NONE)
            i = (i + 1) & (x.cap - 1);
        x.slot[i] = id;
    }
    for (uint32_t id = 0; id < t->vocab; id++) {
        if (!t->has[id] || t->len[id] < 2)
            continue;
        const unsigned char *b = t->blob + t->off[id];
        size_t L = t->len[id];
        for (int k = 0; k < 2; k++) {
            x.h[k][0] = 0;
            for (size_t i = 0; i < L; i++) {
                uint64_t v = mul61(x.h[k][i], x.b[k]) + b[i] + 1u;
                x.h[k][i + 1] = v >= M61 ? v - M61 : v;
            }
        }
        for (size_t s = 1; s < L; s++) {
            uint32_t l = poly_find(t, &x, s, x.h[0][s], x.h[1][s]);
            if (l == NONE)
                continue;
            uint64_t r0 = sub61(x.h[0][L], mul61(x.h[0][s], x.pw[0][L - s]));
            uint64_t r1 = sub61(x.h[1][L], mul61(x.h[1][s], x.pw[1][L - s]));
            uint32_t r = poly_find(t, &x, L - s, r0, r1);
            if (r != NONE)
                pair_add(t, l, r, id, id);
        }
    }
    poly_free(&x);
    return SR_OK;
}

/* tiktoken leaves its special tokens out of the file: those of the
 * pattern's family, from the first id after the ranks. */
static sr_status tiktoken_specials(sr_tokenizer *t) {
    uint32_t base = t->vocab;
    sr_status st;
    if (strcmp(t->pattern->name, "gpt2") == 0) {
        if ((st = set_token(t, base, (const unsigned char *)"<|endoftext|>", 13)) != SR_OK)
            return st;
        return add_special(t, "<|endoftext|>", base);
    }
    /* Llama 3's 256: as Meta's tokenizer.py lists them */
    const char *named[] = {"<|begin_of_text|>",
                           "<|end_of_text|>",
                           "<|reserved_special_token_0|>",
                           "<|reserved_special_token_1|>",
                           "<|finetune_right_pad_id|>",
                           "<|step_id|>",
                           "<|start_header_id|>",
                           "<|end_header_id|>",
                           "<|eom_id|>",
                           "<|eot_id|>",
                           "<|python_tag|>"};
    int nn = (int)(sizeof named / sizeof named[0]);
    for (int i = 0; i < 256; i++) {
        char name[64];
        if (i < nn)
            snprintf(name, sizeof name, "%s", named[i]);
        else
            snprintf(name, sizeof name, "<|reserved_special_token_%d|>", i - nn + 2);
        if ((st = set_token(t, base + (uint32_t)i, (const unsigned char *)name, strlen(name))) != SR_OK ||
            (st = add_special(t, name, base + (uint32_t)i)) != SR_OK)
            return st;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* llm.c's tokenizer file (decoding only) */

#define LLMC_MAGIC 20240328u

static sr_status load_llmc(sr_tokenizer *t, const unsigned char *b, size_t n) {
    const uint32_t *h = (const uint32_t *)b;
    if (n < 1024 || (h[1] != 1 && h[1] != 2) || h[2] == 0 || h[2] > SR_TOK_MAX_ID)
        return sr_error(SR_ERR_DATA, "%s: an llm.c tokenizer file with a bad header (version %u, %u tokens)", t->path,
                        n >= 12 ? h[1] : 0, n >= 12 ? h[2] : 0);
    t->eot = h[1] == 2 ? (int64_t)h[3] : -1;
    size_t at = 1024;
    for (uint32_t i = 0; i < h[2]; i++) {
        if (at >= n || at + 1 + b[at] > n || b[at] == 0)
            return sr_error(SR_ERR_DATA, "%s: token %u: %s", t->path, i,
                            at >= n || (at < n && at + 1 + b[at] > n) ? "truncated" : "empty");
        sr_status st = set_token(t, i, b + at + 1, b[at]);
        if (st != SR_OK)
            return st;
        at += 1 + b[at];
    }
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
    sr_status st = check_bytes(t);
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
    return add_special(t, "<|endoftext|>", (uint32_t)json_integer_value(id));
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
    byte_unmap(unmap);
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
        return load_llmc(t, u, n);
    }
    if (lead < n && buf[lead] == '{') {
        json_error_t je;
        ls->root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
        if (!ls->root)
            return sr_error(SR_ERR_DATA, "%s:%d:%d: %s", t->path, je.line, je.column, je.text);
        if (json_object_get(ls->root, "model")) {
            t->format = SR_TOK_HF_JSON;
            st = load_hf_json(t, ls->root, unmap, &ls->is_special);
            json_t *merges = json_object_get(json_object_get(ls->root, "model"), "merges");
            char where[1300];
            sr_fmt(where, sizeof where, "%s: model.merges", t->path);
            if (st == SR_OK && !json_is_array(merges))
                st = sr_error(SR_ERR_DATA, "%s: expected an array (hint: a BPE tokenizer needs its merges)", where);
            if (st == SR_OK)
                st = map_tokens(t, ls->is_special);
            if (st == SR_OK)
                st = load_merges(t, unmap, merges, NULL, where);
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
        t->pattern = pattern_named("gpt2", 4);
        if (!merges_path)
            return sr_error(SR_ERR_DATA, "%s: a vocab.json without its merges.txt", t->path);
        st = load_vocab(t, unmap, ls->root, t->path);
        if (st == SR_OK)
            st = vocab_end_of_text(t, ls->root, &ls->is_special);
        if (st == SR_OK)
            st = read_file(merges_path, "the merges beside the vocabulary", &ls->mbuf, &ls->mn, ls->md);
        if (st == SR_OK)
            st = refuse_nul(ls->mbuf, ls->mn, merges_path, "merges.txt is text");
        if (st == SR_OK)
            st = map_tokens(t, ls->is_special);
        if (st == SR_OK)
            st = load_merges(t, unmap, NULL, ls->mbuf, merges_path);
        return st;
    }
    if (n == 0)
        return sr_error(SR_ERR_DATA, "%s: an empty file is not a tokenizer", t->path);
    if (looks_like_ranks(buf) && (st = refuse_nul(buf, n, t->path, "a tiktoken rank file is text")) != SR_OK)
        return st;
    if (memchr(buf, '\0', n) || !looks_like_ranks(buf))
        return sr_error(SR_ERR_DATA,
                        "%s: not a tokenizer file: expected a tokenizer.json, a vocab.json (with merges.txt beside "
                        "it), a tiktoken rank file (\"BASE64 RANK\" per line) or an llm.c tokenizer file (magic "
                        "%u)",
                        t->path, LLMC_MAGIC);
    t->format = SR_TOK_TIKTOKEN;
    t->pattern = named ? named : pattern_named("gpt2", 4);
    t->whole_piece_first = true;
    st = load_tiktoken(t, buf);
    if (st == SR_OK)
        st = map_tokens(t, NULL);
    if (st == SR_OK)
        st = tiktoken_pairs(t);
    /* the special tokens come after the map: never matched in text */
    if (st == SR_OK)
        st = tiktoken_specials(t);
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
    const pattern_def *named = pattern ? pattern_named(pattern, strlen(pattern)) : NULL;
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
    if (colon && !exists(spec) && (named = pattern_named(spec, (size_t)(colon - spec))) != NULL)
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
        st = read_file(t->path, whatbuf, &ls.buf, &ls.n, ls.md);
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
        uint32_t id = lookup(t, p, n);
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
