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

/* The command: `ckpt` is a checkpoint, a checkpoint.dir (its newest
 * checkpoint that verifies, sr_ckpt_tool_read_model) or a Hugging Face
 * GPT-2 directory (config.json + model.safetensors, sr_modelfile_hf_dir).
 * Threads: o->threads, else the checkpoint's `threads` key when above 0,
 * else OMP_NUM_THREADS, else every core.  Generated tokens go to `out`
 * (only them: the prompt is not echoed), one summary line to `log`.
 * SR_ERR_USAGE for a prompt the vocabulary cannot take (text with a
 * non-byte vocabulary: "use --prompt-tokens"; ids out of range), the
 * model's and tokenizer's statuses otherwise. */
sr_status sr_sample_run(const char *ckpt, const sr_sample_opts *o, FILE *out, FILE *log);

struct sr_model;
/* Host bytes sr_sample_generate needs for model m: its full fp32
 * parameters (the caller's) and the generator's cache and buffers. */
size_t sr_sample_host_bytes(const struct sr_model *m);

/* The start token without a prompt: GPT-2's <|endoftext|> (50256) for a
 * vocabulary of 50257, a newline for bytes, else 0. */
int sr_sample_start_token(int V);

/* The one generator behind `shardrun sample` and the training log's
 * samples: the model `m` (its tensor table) with its full unit-major fp32
 * parameters `params` in host memory, on the CPU op table with the threads
 * set (sr_ops_set_threads; the result does not depend on their number),
 * fed prompt[0 .. n) (n >= 1), then o->tokens tokens drawn, each handed to
 * emit(ctx, token, i) (a status other than SR_OK stops it and is
 * returned).  The i-th draw: argmax when o->temperature is 0 or o->top_k
 * is 1 (the lowest id among equals); else softmax(logits / temperature)
 * over the top_k largest (all when top_k is 0 or >= V), drawn with
 * sr_rng_uniform(o->seed, SR_SAMPLE_STREAM, i): the same seed gives the
 * same text. */
#define SR_SAMPLE_STREAM 0x53414d50u
typedef sr_status (*sr_sample_emit)(void *ctx, int token, long i);
sr_status sr_sample_generate(const struct sr_model *m, const float *params, const int *prompt, int n,
                             const sr_sample_opts *o, sr_sample_emit emit, void *ctx);

#endif
