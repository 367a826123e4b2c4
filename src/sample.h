/* sample.h — text generation: `shardrun sample` and the training log's
 * samples (log.sample_every).
 *
 * sample owns generation from a full fp32 model in host memory over the
 * model's decode step (model.h sr_decoder: one token at a time over a
 * key/value cache on the CPU op table), the choice of the next token (temperature, top-k, a counter-based draw from
 * (seed, position): the same seed gives the same text), and how tokens
 * are shown (bytes for the byte-level vocabulary of 256, a tokenizer's
 * bytes (tokenizer.h: --tokenizer, or the job's data.tokenizer), else
 * token ids).  Beyond the decoder's window (seq_len, or the family's
 * limit) the cache restarts from the newest half of its tokens. */
#ifndef SR_SAMPLE_H
#define SR_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl.h"
#include "fsdp.h"
#include "manifest.h"
#include "status.h"
#include "tokenizer.h"
#include "world.h"

/* The command: generation on the CPU from the checkpoint at `ckpt` (any
 * world size; verified as it is read). */
typedef struct {
    const char *prompt;        /* text (bytes, or encoded by the tokenizer), or NULL */
    const char *prompt_tokens; /* "1,2,3", or NULL */
    long tokens;               /* to generate */
    double temperature;
    int top_k;
    uint64_t seed;
    const char *tokenizer; /* --tokenizer, or NULL: the job's data.tokenizer, if any */
    int threads;           /* compute threads; 0: the job's, else OMP_NUM_THREADS or all cores */
    bool no_echo;          /* --no-echo: the continuation only, without the prompt before it */
} sr_sample_opts;

/* The command: `ckpt` is a checkpoint, a checkpoint.dir (its newest
 * checkpoint that verifies, sr_ckpt_tool_read_model) or a Hugging Face
 * GPT-2 directory (config.json + model.safetensors, sr_modelfile_hf_dir).
 * Threads: o->threads, else the checkpoint's `threads` key when above 0,
 * else OMP_NUM_THREADS, else every core.  A given prompt (--prompt or
 * --prompt-tokens) goes to `out` first unless o->no_echo, decoded as the
 * generated tokens are; a prompt longer than the decoder's window
 * (sr_decoder_window) is cut to its last tokens, with a warning, and
 * only those are read and echoed.  Generated tokens go to `out` as they
 * are drawn, one summary line to `log`.
 * SR_ERR_USAGE for a prompt the vocabulary cannot take (text with a
 * non-byte vocabulary: "use --prompt-tokens"; ids out of range), the
 * model's and tokenizer's statuses otherwise. */
sr_status sr_sample_run(const char *ckpt, const sr_sample_opts *o, FILE *out, FILE *log);

struct sr_model;
/* The offline commands' pieces (sample, eval).  The tokenizer for a model
 * of vocabulary V into *tok (freed first; NULL: none): `opt` (the
 * --tokenizer given; its failure is returned), else `job_tok` (may be
 * NULL or empty: none; a warning naming it as `what` when it cannot be
 * read), checked against
 * V: an encoding tokenizer with more ids than V, or a decoding one (llm.c's
 * file) with fewer, is SR_ERR_DATA. */
sr_status sr_sample_tokenizer(const char *opt, const char *job_tok, const char *what, int V, sr_tokenizer **tok);
/* The tokenizer a checkpoint names: the data record's (its absolute path,
 * when it has a fingerprint), else the data.tokenizer key as the job gave
 * it, into job_tok[n] ("" for none). */
void sr_sample_job_tokenizer(const sr_manifest *mf, char *job_tok, size_t n);
/* A warning when `tok` (loaded from job_tok) is not the tokenizer the
 * checkpoint's data record fingerprinted. */
void sr_sample_tokenizer_warn(const sr_manifest *mf, const sr_tokenizer *tok, const char *job_tok);
/* The threads of an offline command: o->threads, else the checkpoint's
 * `threads` key when above 0 (mf may be NULL), else OMP_NUM_THREADS, else
 * 0 (every core); *how names the source. */
int sr_sample_threads(const sr_sample_opts *o, const sr_manifest *mf, const char **how);
/* A Hugging Face directory (GPT-2 or Llama): its dims (the model's tensor
 * table in *model, no activations), `check` (may be NULL; its failure is
 * returned before any weight is read) told the vocabulary, then the
 * weights read whole into *all (malloc'd).  On failure nothing is left. */
typedef sr_status (*sr_sample_hf_check)(void *ctx, int V, const char *dir);
sr_status sr_sample_read_hf(const char *dir, struct sr_model *model, float **all, sr_sample_hf_check check, void *ctx);
/* log.sample_every's sample at `step` (collective: every rank calls it
 * between steps): the text `shardrun sample` draws from that step's
 * checkpoint with --tokens 64 --seed (seed + step), generated on rank 0
 * with `threads` threads and logged there.  When the full model and its
 * key/value cache do not fit sr_mem_side_copy_cap on some rank, every rank
 * skips it (a warning the first time: *warned).  SR_ERR_PEER, SR_ERR_INTERNAL. */
sr_status sr_sample_during_training(sr_fsdp *f, const struct sr_model *m, sr_ctl *ctl, const sr_world *w, int64_t step,
                                    uint64_t seed, int threads, const sr_tokenizer *tok, bool *warned);

#endif
