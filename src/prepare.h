/* prepare.h — `shardrun data prepare`: text to llm.c token shards.
 *
 * Inputs are text files (one document each) or JSON Lines (--field NAME:
 * one document per line, the named string field), each optionally gzip
 * compressed (detected by content, read through zlib).  Documents are
 * encoded by a tokenizer (tokenizer.h) as ordinary text, each preceded by
 * a separator token (--doc-token, default <|endoftext|>, as llm.c's data
 * scripts do), or without --tokenizer as bytes (vocabulary 256, no
 * separator).  Threads encode documents in parallel; the output does not
 * depend on their number.
 *
 * Outputs.  A file (the default without --tokenizer, --val-tokens or
 * --shard-tokens, when -o does not end in '/'): one shard.  Else a
 * directory: `<prefix>_val_000000.bin` holding the first --val-tokens
 * tokens when asked for, then `<prefix>_train_NNNNNN.bin` of --shard-tokens
 * tokens each (the last one shorter), numbered from 1 as llm.c's data
 * scripts do (0 is the validation shard's), and `index.json` (each shard's tokens, bytes and SHA-256, the
 * tokenizer's fingerprint).  uint16 shards (magic 20240520) up to a
 * vocabulary of 65,536, uint32 (magic 20240801, version 7) above.  Every
 * shard is written under a temporary name and synced; all are renamed into
 * place only when every input has been read: a failure leaves nothing
 * that looks complete.
 *
 * Memory is bounded independently of the corpus and of its documents: per
 * thread one batch of SR_PREPARE_BATCH_BYTES of text and its ids, cut into
 * items of at most SR_PREPARE_MAX_PIECE bytes (a text file's document, or
 * a JSON Lines document, is cut only where pre-tokenization is known to
 * split: after a non-space character and before a space or tab; a run of
 * more than SR_PREPARE_MAX_PIECE bytes without one is cut there, with one
 * warning, and the tokens around that cut may then differ from a
 * reference tokenizer's: within one pre-token BPE depends on position, so
 * no window can be exact), and the BPE working set of one item (about 52
 * bytes per byte of its longest pre-token); the reading thread also holds
 * one JSON Lines line (at most SR_PREPARE_MAX_LINE bytes) and its decoded
 * document, and every thread the tokenizer.  shardrun(1) states the
 * measured figure (make bench: bench/run_tokenizer.sh). */
#ifndef SR_PREPARE_H
#define SR_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "status.h"

#define SR_PREPARE_BATCH_BYTES (4u << 20)
#define SR_PREPARE_MAX_PIECE (1u << 20)
#define SR_PREPARE_MAX_LINE (64u << 20)
#define SR_PREPARE_DEFAULT_SHARD_TOKENS 100000000ull

typedef struct {
    const char *out;       /* -o; NULL: data.bin, or "." in directory mode */
    const char *tokenizer; /* --tokenizer; NULL: bytes */
    const char *field;     /* --field: JSON Lines inputs; NULL: text files */
    const char *doc_token; /* --doc-token; NULL: <|endoftext|> ("none": no separator) */
    const char *prefix;    /* --prefix; NULL: data, or --name */
    const char *name;      /* --name: the data.mixture source these inputs are; NULL: none */
    uint64_t val_tokens;   /* --val-tokens; 0: none */
    double val_fraction;   /* --val-fraction; 0: none */
    uint64_t seed;         /* --seed: of --val-fraction's choice */
    uint64_t shard_tokens; /* --shard-tokens; 0: not given (the default) */
    int threads;           /* --threads; 0: every core */
} sr_prepare_opts;

typedef struct {
    bool directory;                     /* the output is a directory */
    int shards;                         /* shards written */
    uint64_t tokens;                    /* tokens written, separators included */
    uint64_t documents;                 /* documents read */
    uint64_t bytes;                     /* bytes of text read (after decompression) */
    uint64_t empty;                     /* empty documents (no text), dropped */
    int val_shards;                     /* of shards, the validation shards */
    uint64_t val_tokens, val_documents; /* in them (a document --val-tokens cuts counts as validation's) */
    char out[4096];                     /* the output file or directory (no trailing '/') */
    char tokenizer[4200];               /* what names the tokenizer from anywhere (sr_tokenizer_spec); "": bytes */
    char sources[SR_MIX_MAX_SOURCES * (SR_MIX_NAME_MAX + 1)]; /* --name: every source index.json lists, ' '-separated */
} sr_prepare_result;

/* Prepares `files` per `o`.  Every input is checked before anything is
 * written: SR_ERR_NOINPUT (66) for a missing or unreadable one,
 * SR_ERR_USAGE (64) for inconsistent options, SR_ERR_DATA (65) for a
 * malformed input (a broken gzip stream, a JSON Lines line that is not an
 * object with the string field: file and line named) or tokenizer,
 * SR_ERR_CANTCREAT (73) when the output cannot be created or the
 * directory already holds a prepared data set, SR_ERR_IO (74) for a
 * failed write.  On failure nothing new is left under an output's name.
 * A progress line on a terminal (stderr), and a summary line at the end. */
sr_status sr_prepare(const sr_prepare_opts *o, char *const *files, int nfiles, sr_prepare_result *r);

/* What sr_prepare checks before it writes anything (the options, every
 * input, the tokenizer, the output directory and, with o->name, the sources
 * its index.json lists), writing nothing and creating no directory: data
 * prepare's --name groups check every group first. */
sr_status sr_prepare_check(const sr_prepare_opts *o, char *const *files, int nfiles);

#endif
