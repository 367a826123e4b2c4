/* tokenizer_files.c — the four tokenizer file formats, read into the
 * tokenizer's maps: Hugging Face's tokenizer.json, GPT-2's vocab.json +
 * merges.txt, tiktoken rank files (the merge pairs derived from the ranks)
 * and llm.c's tokenizer file (decoding only); and reading a file whole,
 * with its fingerprint.  Part of the tokenizer module (tokenizer.h,
 * tokenizer_impl.h).
 *
 * Libraries: jansson parses the JSON files, OpenSSL's EVP decodes
 * tiktoken's base64.  Written here because no library on Debian does it in
 * C: GPT-2's byte-to-character map and the derivation of tiktoken's pairs,
 * a few lines each. */
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

#include "clock.h"
#include "fsio.h"
#include "mem.h"

/* ------------------------------------------------------------------------ */
/* reading files */

/* Reads a whole tokenizer file (at most SR_TOK_MAX_FILE_BYTES) into a
 * NUL-terminated buffer, adding its bytes to the fingerprint. */
sr_status tok_read_file(const char *path, const char *what, char **buf, size_t *n, EVP_MD_CTX *md) {
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
void tok_byte_unmap(int unmap[324]) {
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
    } else if ((ids[0] = tok_lookup(t, buf, na)) == NONE) {
        *why = "its left token is not in the vocabulary";
        ok = false;
    } else if ((ids[1] = tok_lookup(t, buf + na, nb)) == NONE) {
        *why = "its right token is not in the vocabulary";
        ok = false;
    } else if ((ids[2] = tok_lookup(t, buf, na + nb)) == NONE) {
        *why = "the merged token is not in the vocabulary";
        ok = false;
    }
    free(buf);
    return ok;
}

/* vocab: a JSON object token text -> id.  `where` names it in messages. */
sr_status tok_load_vocab(sr_tokenizer *t, const int unmap[324], json_t *vocab, const char *where) {
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
        if ((st = tok_set_token(t, id, buf, n)) == SR_ERR_DATA) {
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

/* Merge i of tokenizer.json's "merges", "LEFT RIGHT" (split in sc's
 * buffer) or ["LEFT", "RIGHT"], into *a and *b. */
static sr_status json_merge(json_t *m, size_t i, const char *where, scratch_buf *sc, const char **a, const char **b) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        return SR_OK;
    }
    if (!json_is_string(m))
        return sr_error(SR_ERR_DATA, "%s: merge %zu: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]", where, i);
    const char *ms = json_string_value(m);
    const char *msp = strchr(ms, ' ');
    size_t ml = strlen(ms);
    if (!msp || msp == ms || !msp[1] || strchr(msp + 1, ' '))
        return sr_error(SR_ERR_DATA, "%s: merge %zu: expected \"LEFT RIGHT\" (two tokens, one space)", where, i);
    if (ml + 1 > sc->cap) {
        free(sc->buf);
        sc->cap = 2 * ml + 64;
        if (!(sc->buf = sr_malloc(sc->cap)))
            return sr_error_oom("the tokenizer's merges");
    }
    memcpy(sc->buf, ms, ml + 1);
    sc->buf[msp - ms] = '\0';
    *a = sc->buf;
    *b = sc->buf + (msp - ms) + 1;
    return SR_OK;
}

static sr_status load_merges_into(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where,
                                  scratch_buf *sc);

/* merges: a JSON array of "a b" or ["a", "b"] (tokenizer.json), or the
 * lines of merges.txt (`text`: then `merges` is NULL).  The bytes -> id
 * map must be built. */
sr_status tok_load_merges(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where) {
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
    sr_status st = tok_pairs_reserve(t, n + 1);
    if (st != SR_OK)
        return st;
    uint32_t rank = 0;
    char *line = text;
    for (size_t i = 0, lineno = 1;; i++, lineno++) {
        const char *a = NULL, *b = NULL;
        char *sp = NULL, *next = NULL;
        if (merges) {
            if (i >= n)
                break;
            st = json_merge(json_array_get(merges, i), i, where, sc, &a, &b);
            if (st != SR_OK)
                return st;
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
        tok_pair_add(t, ids[0], ids[1], rank++, ids[2]);
        if (!merges)
            line = next ? next + 1 : NULL;
    }
    if (rank == 0)
        return sr_error(SR_ERR_DATA, "%s: no merges (hint: a BPE tokenizer needs its merges)", where);
    return SR_OK;
}

/* The checks every loaded tokenizer passes: every byte has a token. */
sr_status tok_check_bytes(const sr_tokenizer *t) {
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
            *pat = tok_pattern_named("gpt2", 4);
        return SR_OK;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *pt = json_object_get(p, "pattern");
        const char *re = json_string_value(json_object_get(pt, "Regex"));
        if (!re)
            re = json_string_value(json_object_get(pt, "String"));
        const pattern_def *d = re ? tok_pattern_of_text(re) : NULL;
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

/* tokenizer.json's model: BPE without a normalizer, byte fallback,
 * subword affixes or dropout (what byte-level BPE never has). */
static sr_status check_model(const sr_tokenizer *t, json_t *root, json_t *model) {
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
    return SR_OK;
}

/* The pre_tokenizer (one, or a Sequence of them) into t->pattern. */
static sr_status load_pretokenizer(sr_tokenizer *t, json_t *root) {
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
    return SR_OK;
}

/* added_tokens[i] = a: its text is its bytes (not byte-level mapped); an
 * id the vocabulary holds must be that token, one it lacks is a special
 * token outside the merges (is_special). */
static sr_status added_token(sr_tokenizer *t, const int unmap[324], size_t i, json_t *a, bool *is_special) {
    const char *content = json_string_value(json_object_get(a, "content"));
    json_t *idj = json_object_get(a, "id");
    if (!content || !json_is_integer(idj) || json_integer_value(idj) < 0 || json_integer_value(idj) > SR_TOK_MAX_ID)
        return sr_error(SR_ERR_DATA, "%s: added_tokens[%zu]: expected {\"id\": 0..%d, \"content\": \"...\"}", t->path,
                        i, SR_TOK_MAX_ID);
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
            return sr_error(SR_ERR_DATA, "%s: added_tokens[%zu] \"%.80s\" has id %u, a vocabulary token's", t->path, i,
                            content, id);
    }
    sr_status st;
    if (!have && (st = tok_set_token(t, id, (const unsigned char *)content, strlen(content))) != SR_OK)
        return st;
    if (!have)
        is_special[id] = true; /* an added token outside model.vocab: never produced by the merges */
    return tok_add_special(t, content, id);
}

sr_status tok_load_hf_json(sr_tokenizer *t, json_t *root, const int unmap[324], bool **is_special) {
    json_t *model = json_object_get(root, "model");
    sr_status st = check_model(t, root, model);
    if (st != SR_OK)
        return st;
    t->whole_piece_first = json_is_true(json_object_get(model, "ignore_merges"));
    if ((st = load_pretokenizer(t, root)) != SR_OK)
        return st;
    char where[1100];
    sr_fmt(where, sizeof where, "%s: model.vocab", t->path);
    if ((st = tok_load_vocab(t, unmap, json_object_get(model, "vocab"), where)) != SR_OK)
        return st;
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        return sr_error(SR_ERR_DATA, "%s: added_tokens: expected a list of {\"id\", \"content\"} objects, not %s",
                        t->path, json_is_object(added) ? "an object" : "a scalar");
    *is_special = sr_calloc(SR_TOK_MAX_ID + 1u, sizeof **is_special);
    if (!*is_special)
        return sr_error_oom("the tokenizer");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        if ((st = added_token(t, unmap, i, a, *is_special)) != SR_OK)
            return st;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* tiktoken rank files */

/* The first line of a rank file: base64, one space, digits. */
bool tok_looks_like_ranks(const char *text) {
    size_t b = strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=");
    return b > 0 && text[b] == ' ' && text[b + 1] >= '0' && text[b + 1] <= '9';
}

sr_status tok_load_tiktoken(sr_tokenizer *t, char *text) {
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
        st = tok_set_token(t, (uint32_t)rank, buf, (size_t)got);
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
        r = tok_hash_u64((uint64_t)sr_clock_mono_ns() ^ salt);
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
    return tok_hash_u64(h0 ^ (uint64_t)len * 0x9e3779b97f4a7c15ull) & (x->cap - 1);
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

sr_status tok_tiktoken_pairs(sr_tokenizer *t) {
    size_t n = 0, ntok = 0, maxlen = 1;
    for (uint32_t id = 0; id < t->vocab; id++)
        if (t->has[id]) {
            ntok++;
            maxlen = t->len[id] > maxlen ? t->len[id] : maxlen;
            if (t->len[id] > 1)
                n += t->len[id] - 1;
        }
    sr_status st = tok_pairs_reserve(t, n + 1);
    if (st != SR_OK)
        return st;
    poly_index x = {.b = {random_base(1), random_base(2)}, .cap = tok_pow2_at_least(2 * ntok + 1)};
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
                tok_pair_add(t, l, r, id, id);
        }
    }
    poly_free(&x);
    return SR_OK;
}

/* tiktoken leaves its special tokens out of the file: those of the
 * pattern's family, from the first id after the ranks. */
sr_status tok_tiktoken_specials(sr_tokenizer *t) {
    uint32_t base = t->vocab;
    sr_status st;
    if (strcmp(t->pattern->name, "gpt2") == 0) {
        if ((st = tok_set_token(t, base, (const unsigned char *)"<|endoftext|>", 13)) != SR_OK)
            return st;
        return tok_add_special(t, "<|endoftext|>", base);
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
        if ((st = tok_set_token(t, base + (uint32_t)i, (const unsigned char *)name, strlen(name))) != SR_OK ||
            (st = tok_add_special(t, name, base + (uint32_t)i)) != SR_OK)
            return st;
    }
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* llm.c's tokenizer file (decoding only) */

sr_status tok_load_llmc(sr_tokenizer *t, const unsigned char *b, size_t n) {
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
        sr_status st = tok_set_token(t, i, b + at + 1, b[at]);
        if (st != SR_OK)
            return st;
        at += 1 + b[at];
    }
    return SR_OK;
}
