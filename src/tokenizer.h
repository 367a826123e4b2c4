/* tokenizer.h — byte-level BPE tokenizers as GPT-2 defines them: loading
 * (Hugging Face tokenizer.json, a vocab.json + merges.txt pair, tiktoken
 * rank files, llm.c's tokenizer file for decoding only), encoding text to
 * ids and decoding ids to the exact bytes.
 *
 * The format is detected by content, never by name.  Encoding is
 * pre-tokenization by a pattern (GPT-2's or Llama 3's, compiled by PCRE2
 * with JIT, Unicode properties on), then byte-level BPE on each piece: the
 * adjacent pair with the lowest merge rank merges first, the leftmost among
 * equals (a heap over a linked list: O(n log n) in the piece length).
 * Text is encoded as ordinary text: the strings of special tokens are not
 * special inside it (tiktoken's encode_ordinary).
 *
 * Invalid UTF-8: the pattern matches valid characters only
 * (PCRE2_MATCH_INVALID_UTF); every maximal run of bytes it leaves
 * unmatched — bytes that are not part of a valid UTF-8 sequence — is a
 * piece of its own, encoded by the same BPE.  So decode(encode(x)) == x
 * for every byte string x, and valid text is encoded as the references
 * encode it. */
#ifndef SR_TOKENIZER_H
#define SR_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct sr_tokenizer sr_tokenizer;
typedef struct sr_tok_encoder sr_tok_encoder;

/* The largest tokenizer file read (a hostile 100 MB JSON is refused before
 * it is parsed; Llama 3's tokenizer.json is 9 MB). */
#define SR_TOK_MAX_FILE_BYTES (64L << 20)
/* The largest token id accepted. */
#define SR_TOK_MAX_ID 16777215
/* The longest token accepted, in bytes, in every format (real vocabularies
 * stay below a few hundred bytes; loading is linear in a token's length). */
#define SR_TOK_MAX_TOKEN_BYTES 65536

/* Loads the tokenizer `spec`: a path, or for a tiktoken rank file
 * PATTERN:PATH with PATTERN gpt2 or llama3 (default gpt2; a path that
 * exists as given is always a path).  A directory is read as its
 * tokenizer.json, else its vocab.json + merges.txt; a vocab.json given
 * alone takes the merges.txt beside it.  Returns SR_ERR_NOINPUT when a
 * file is missing or unreadable, SR_ERR_DATA for a malformed, hostile or
 * unsupported file (naming the file, the line where there is one, and what
 * was expected), SR_ERR_INTERNAL when out of memory.  `what` names the
 * option or key in messages ("--tokenizer", "data.tokenizer"). */
sr_status sr_tokenizer_load(sr_tokenizer **out, const char *spec, const char *what);
/* The same from memory: bytes[0 .. n) as one file named `name` in
 * messages, `pattern` (gpt2, llama3, or NULL: gpt2) for a rank file; a
 * vocab.json is refused (its merges.txt is a second file).  The fuzz
 * harness's entry. */
sr_status sr_tokenizer_parse(sr_tokenizer **out, const void *bytes, size_t n, const char *name, const char *pattern);
void sr_tokenizer_free(sr_tokenizer *t);

/* Ids 0 .. vocab-1 (the largest id + 1, special tokens included). */
int64_t sr_tokenizer_vocab(const sr_tokenizer *t);
/* The formats, as detected. */
typedef enum {
    SR_TOK_HF_JSON,      /* tokenizer.json */
    SR_TOK_VOCAB_MERGES, /* vocab.json + merges.txt beside it */
    SR_TOK_TIKTOKEN,     /* base64 token, rank per line */
    SR_TOK_LLMC,         /* llm.c's tokenizer file: decoding only */
} sr_tok_format;
sr_tok_format sr_tokenizer_format(const sr_tokenizer *t);
/* Whether it can encode (every format but llm.c's). */
bool sr_tokenizer_can_encode(const sr_tokenizer *t);
/* The SHA-256 of the tokenizer's file bytes (a vocab.json + merges.txt
 * pair: of the two files' bytes in that order), as 64 lowercase hex
 * digits, and the pre-tokenizer pattern's name ("gpt2", "llama3"; "" for
 * llm.c's file): together what a checkpoint and index.json record (a rank
 * file means other tokens under another pattern). */
const char *sr_tokenizer_fingerprint(const sr_tokenizer *t);
const char *sr_tokenizer_pattern(const sr_tokenizer *t);
/* What names this tokenizer from anywhere: its file's absolute path
 * (a vocab.json + merges.txt pair: the vocab.json; a rank file:
 * PATTERN:PATH), as checkpoints record it; the path as given when it
 * cannot be resolved or was parsed from memory. */
const char *sr_tokenizer_spec(const sr_tokenizer *t);
/* One line: format, file, tokens, pattern. */
const char *sr_tokenizer_describe(const sr_tokenizer *t);
/* The id of the special (or added) token whose text is `name`, -1 when
 * there is none. */
int64_t sr_tokenizer_special(const sr_tokenizer *t, const char *name);
/* The end-of-text token: <|endoftext|>, else <|end_of_text|>, else llm.c's
 * header's; -1 when none. */
int64_t sr_tokenizer_eot(const sr_tokenizer *t);

/* The bytes of token `id` (*len 0 and NULL for an id outside the
 * vocabulary or without a token). */
const unsigned char *sr_tokenizer_bytes(const sr_tokenizer *t, int64_t id, size_t *len);

/* An encoder: the per-thread state (PCRE2 match data, a cache of frequent
 * pieces); any number of them share one tokenizer, which must outlive
 * them.  SR_ERR_INTERNAL when out of memory. */
sr_status sr_tok_encoder_new(const sr_tokenizer *t, sr_tok_encoder **out);
void sr_tok_encoder_free(sr_tok_encoder *e);

/* A growing list of ids. */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} sr_tok_ids;
void sr_tok_ids_free(sr_tok_ids *v);
/* Appends one id; SR_ERR_INTERNAL when out of memory. */
sr_status sr_tok_ids_push(sr_tok_ids *v, uint32_t id);

/* Appends the ids of text[0 .. len) (any bytes) to *out, as ordinary text.
 * SR_ERR_INTERNAL when out of memory or when PCRE2 fails (its message
 * named). */
sr_status sr_tok_encode(sr_tok_encoder *e, const unsigned char *text, size_t len, sr_tok_ids *out);

#endif
