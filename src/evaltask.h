/* evaltask.h — multiple-choice tasks: the task file (HellaSwag's JSON
 * Lines form), its sequences as a model reads them, and the scores.
 *
 * evaltask owns the task format (shardrun(1) EVALUATION TASKS): one JSON
 * object a line, "ctx" a string, "endings" a list of 2 to
 * SR_TASK_ENDINGS_MAX strings, "label" the index of the right one, other
 * keys ignored, blank lines skipped; a line longer than SR_TASK_LINE_MAX
 * bytes, bad JSON, an empty context or ending, or a label out of range is
 * SR_ERR_DATA (65) naming FILE:LINE.  Each ending is scored by its
 * log-likelihood given the context: the context's tokens, then the
 * tokens of " " + ending (the space llm.c's and lm-evaluation-harness's
 * HellaSwag put between them), encoded separately by the tokenizer (no
 * special token added; without a tokenizer the UTF-8 bytes, for a
 * byte-level model), the window cut from the left to the model's
 * context; logprob = the sum of the ending's tokens' log-probabilities.
 * The choice is the largest logprob (acc) and the largest logprob per
 * byte of the ending (acc_norm, lm-evaluation-harness's normalisation by
 * the ending's length, here in UTF-8 bytes, the space not counted); a tie
 * goes to the first ending.  Who computes the log-probabilities (the
 * command's model, the run's engine) is the caller's: this module fills
 * batches of [B, T] inputs and targets and reads back the per-token
 * losses (-log p(target)) the model's forward leaves (model.h m->losses). */
#ifndef SR_EVALTASK_H
#define SR_EVALTASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"
#include "tokenizer.h"

#define SR_TASK_LINE_MAX (1 << 20) /* bytes of one line (item), newline excluded */
#define SR_TASK_ENDINGS_MAX 64
#define SR_TASK_NAME_MAX 48
#define SR_TASK_ITEMS_MAX 10000000

typedef struct {
    char *ctx;
    char **endings;
    int nend, label;
    long line; /* 1-based line of the file */
} sr_task_item;

typedef struct {
    char *path;                      /* as given */
    char name[SR_TASK_NAME_MAX + 1]; /* the file's name without its directory and .jsonl / .json */
    sr_task_item *items;
    int n;
} sr_task;

/* Reads and checks the task file `path`.  SR_ERR_NOINPUT (66) when it
 * cannot be opened, SR_ERR_DATA (65) "PATH:LINE: ..." (":COL" where JSON
 * says) for the first bad item, or for a file without an item.  On
 * failure *t is left empty (sr_task_free is safe either way). */
sr_status sr_task_load(sr_task *t, const char *path);
/* The same from an open stream f (left open), named `path` in messages. */
sr_status sr_task_read(sr_task *t, const char *path, FILE *f);
void sr_task_free(sr_task *t);
/* The name a task's scores go by (metrics acc/NAME): the file's base name
 * without .jsonl or .json, cut to SR_TASK_NAME_MAX; characters other than
 * letters, digits, '_', '.', '-' become '_'. */
void sr_task_name(const char *path, char name[SR_TASK_NAME_MAX + 1]);

/* A task's sequences for a model of context T: one per (item, ending), in
 * item order.  Sequence s is ids[off[s] .. off[s] + len[s]) (len <= T + 1:
 * the context's last tokens, then the ending's nend[s] tokens); item[s]
 * and ending[s] say whose; first[i] is item i's first sequence (first[n]
 * = nseq).  T is the row length of the batches sr_task_fill writes; it
 * may be lowered to any value >= the longest len - 1 (a shorter forward). */
typedef struct {
    int T, nseq, nitems;
    int *item, *ending, *len, *nend, *first;
    size_t *off, *bytes; /* bytes: the ending's, in UTF-8 */
    int *ids;
    size_t nids;
} sr_task_enc;

/* Encodes `t` with `tok` (NULL: the UTF-8 bytes; then V must be >= 256)
 * for a model of vocabulary V and context T.  SR_ERR_DATA "PATH:LINE:
 * ..." when an ending's tokens do not fit the context with one token of
 * the context before them, or a token is >= V; SR_ERR_INTERNAL when out
 * of memory. */
sr_status sr_task_encode(const sr_task *t, const sr_tokenizer *tok, int V, int T, sr_task_enc *e);
void sr_task_enc_free(sr_task_enc *e);
/* Rows of a batch: sequences [s0, s0 + n) into inputs and targets [n, T]
 * (padding: token 0, whose losses are not read). */
void sr_task_fill(const sr_task_enc *e, int s0, int n, int *inputs, int *targets);
/* Adds the ending log-probabilities of sequences [s0, s0 + n) from the
 * forward's per-token losses [n, T] into logprob[s0 ..] (which the caller
 * zeroed). */
void sr_task_take(const sr_task_enc *e, int s0, int n, const float *losses, double *logprob);

/* Items [lo, hi) right by each measure (acc: the ending of the largest
 * logprob; acc_norm: of the largest logprob per byte; ties: the first), counted into c[0] (acc) and c[1]
 * (acc_norm). */
void sr_task_count(const sr_task *t, const sr_task_enc *e, const double *logprob, int lo, int hi, double c[2]);

/* The command's outputs: one line ("NAME: N items, acc A, acc_norm B"),
 * or with `json` one object {"task", "file", "n", "acc", "acc_norm",
 * "items": [{"label", "pred", "pred_norm", "logprobs": [...], "tokens":
 * [...]}]} (tokens: each ending's token count, its leading space's
 * included), on one line.  -1 on a write
 * error. */
int sr_task_write(FILE *out, const sr_task *t, const sr_task_enc *e, const double *logprob, bool json);

#endif
