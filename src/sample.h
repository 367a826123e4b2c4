/* sample.h — text generation: `shardrun sample` and the training log's
 * samples (log.sample_every).
 *
 * sample owns generation from a full fp32 model in host memory with a
 * key/value cache (one token at a time through the CPU op table's
 * LayerNorm, matmul and GELU, attention over the cache written here), the
 * choice of the next token (temperature, top-k, a counter-based draw from
 * (seed, position): the same seed gives the same text), llm.c's tokenizer
 * file (decoding only), and how tokens are shown (bytes for the byte-level
 * vocabulary of 256, a tokenizer's pieces, else token ids).  Beyond
 * seq_len tokens of context the window slides: the cache restarts from the
 * newest seq_len/2 tokens. */
#ifndef SR_SAMPLE_H
#define SR_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

/* The next token from logits[0 .. V): argmax when temperature is 0 or
 * top_k is 1 (the lowest id among equals); else softmax(logits /
 * temperature) over the top_k largest (all when top_k is 0 or >= V),
 * drawn with sr_rng_uniform(seed, SR_SAMPLE_STREAM, index).  `scratch`
 * holds 2 V floats. */
#define SR_SAMPLE_STREAM 0x53414d50u
int sr_sample_pick(const float *logits, int V, double temperature, int top_k, uint64_t seed, uint64_t index,
                   float *scratch);

/* Writes tokens as text: with a tokenizer (llm.c's format: a header of 256
 * uint32 {20240328, version 1 or 2, vocab_size, eot (version 2)}, then per
 * token a length byte and the bytes; NULL for none) its pieces, for V == 256 the
 * bytes, else the ids separated by spaces (a space before each id when
 * `first` is false).  `escape` shows control bytes and non-ASCII as C
 * escapes (for one-line logs).  Returns 0 or -1 on a write error. */
struct sr_tokenizer;
int sr_sample_write(FILE *out, const int *tok, int n, int V, const struct sr_tokenizer *t, bool escape, bool first);

/* The command: generation on the CPU from the checkpoint at `ckpt` (any
 * world size; verified as it is read). */
typedef struct {
    const char *prompt;        /* text (byte-level vocabulary only), or NULL */
    const char *prompt_tokens; /* "1,2,3", or NULL */
    long tokens;               /* to generate */
    double temperature;
    int top_k;
    uint64_t seed;
    const char *tokenizer; /* or NULL */
    int threads;           /* compute threads; 0: the job's, else OMP_NUM_THREADS or all cores */
} sr_sample_opts;

/* Generated tokens go to `out` (only them: the prompt is not echoed), one
 * summary line to `log`.  SR_ERR_USAGE for a prompt the vocabulary cannot
 * take (text with a non-byte vocabulary: "use --prompt-tokens"; ids out of
 * range), the checkpoint's and tokenizer's statuses otherwise. */
sr_status sr_sample_run(const char *ckpt, const sr_sample_opts *o, FILE *out, FILE *log);

#endif
