/* tokenizer_impl.h — what the tokenizer module's two files share
 * (tokenizer.c: patterns, maps, loading, encoding; tokenizer_files.c: the
 * file formats): the tokenizer's state and the functions across them.
 * Internal to the module. */
#ifndef SR_TOKENIZER_IMPL_H
#define SR_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <openssl/evp.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tokenizer.h"

/* the magic of llm.c's tokenizer file (its first word) */
#define LLMC_MAGIC 20240328u

/* A pre-tokenizer pattern a file may name (tokenizer.c's table). */
typedef struct {
    const char *name;
    const char *pcre;    /* what PCRE2 compiles */
    const char *text[3]; /* the pattern as tokenizer.json files and tiktoken spell it (recognised textually) */
} pattern_def;

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
    uint32_t id_cap;        /* ids off, len and has have room for (>= vocab) */
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

const pattern_def *tok_pattern_named(const char *name, size_t len);
const pattern_def *tok_pattern_of_text(const char *text);
uint64_t tok_hash_u64(uint64_t x);
size_t tok_pow2_at_least(size_t n);
/* Sets token id's bytes.  Returns SR_ERR_DATA for a second token with that
 * id (the caller names where). */
sr_status tok_set_token(sr_tokenizer *t, uint32_t id, const unsigned char *b, size_t n);
uint32_t tok_lookup(const sr_tokenizer *t, const unsigned char *b, size_t n);
sr_status tok_pairs_reserve(sr_tokenizer *t, size_t n);
/* Adds pair (a, b) -> merged at rank; a pair already there keeps its
 * lower rank (tokenizers and tiktoken use the first). */
void tok_pair_add(sr_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
sr_status tok_add_special(sr_tokenizer *t, const char *text, uint32_t id);
/* Reads a whole tokenizer file (at most SR_TOK_MAX_FILE_BYTES) into a
 * NUL-terminated buffer, adding its bytes to the fingerprint. */
sr_status tok_read_file(const char *path, const char *what, char **buf, size_t *n, EVP_MD_CTX *md);
/* GPT-2's byte-level map: every byte is a printable character; a token's
 * text in vocab.json and tokenizer.json is its bytes so mapped.
 * unmap[cp] is the byte of code point cp (< 324), -1 for none. */
void tok_byte_unmap(int unmap[324]);
/* vocab: a JSON object token text -> id.  `where` names it in messages. */
sr_status tok_load_vocab(sr_tokenizer *t, const int unmap[324], json_t *vocab, const char *where);
/* merges: a JSON array of "a b" or ["a", "b"] (tokenizer.json), or the
 * lines of merges.txt (`text`: then `merges` is NULL).  The bytes -> id
 * map must be built. */
sr_status tok_load_merges(sr_tokenizer *t, const int unmap[324], json_t *merges, char *text, const char *where);
/* The checks every loaded tokenizer passes: every byte has a token. */
sr_status tok_check_bytes(const sr_tokenizer *t);
sr_status tok_load_hf_json(sr_tokenizer *t, json_t *root, const int unmap[324], bool **is_special);
/* The first line of a rank file: base64, one space, digits. */
bool tok_looks_like_ranks(const char *text);
sr_status tok_load_tiktoken(sr_tokenizer *t, char *text);
sr_status tok_tiktoken_pairs(sr_tokenizer *t);
/* tiktoken leaves its special tokens out of the file: those of the
 * pattern's family, from the first id after the ranks. */
sr_status tok_tiktoken_specials(sr_tokenizer *t);
sr_status tok_load_llmc(sr_tokenizer *t, const unsigned char *b, size_t n);

#endif
