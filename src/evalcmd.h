/* evalcmd.h — `shardrun eval`: multiple-choice tasks (evaltask.h) scored
 * by a checkpoint's or a Hugging Face directory's model, batched, on the
 * CPU or a GPU.
 *
 * evalcmd owns the command's model: the whole fp32 model read as
 * `shardrun sample` reads it (sample.h, ckpt_tools.h), put on the device
 * the command opens (device.h: --device, auto by default) in the table's
 * compute dtype (fp32 on the CPU, bf16 on a GPU), and forwards of up to
 * `batch` sequences whose per-token losses give each ending's
 * log-likelihood. */
#ifndef SR_EVALCMD_H
#define SR_EVALCMD_H

#include <stdbool.h>
#include <stdio.h>

#include "device.h"
#include "sample.h"
#include "status.h"

#define SR_EVAL_MAX_TASKS 32

typedef struct {
    const char *tasks[SR_EVAL_MAX_TASKS]; /* --task FILE, in order */
    int ntasks;
    bool json;             /* --json: one object a task instead of one line */
    int batch;             /* --batch: sequences per forward; 0: as many as fit SR_EVAL_ACT_BYTES (at most 64) */
    sr_device_want device; /* --device */
    sr_sample_opts s;      /* --tokenizer, --threads (as `sample` takes them) */
} sr_eval_opts;

/* The activations a default batch may take. */
#define SR_EVAL_ACT_BYTES ((size_t)1 << 30)

/* The command: every task file read and checked first (SR_ERR_DATA
 * naming FILE:LINE, SR_ERR_NOINPUT), then the model of `ckpt` (a step
 * directory, a checkpoint.dir's newest that verifies, or a Hugging Face
 * directory) and its tokenizer (--tokenizer; else the checkpoint's
 * recorded one, or the Hugging Face directory's tokenizer.json; none and
 * a byte-level vocabulary of 256: the UTF-8 bytes; none otherwise:
 * SR_ERR_USAGE), then each task's scores to `out` (sr_task_write) and one
 * summary line to `log`.  Nothing is written to disk. */
sr_status sr_eval_run(const char *ckpt, const sr_eval_opts *o, FILE *out, FILE *log);

#endif
