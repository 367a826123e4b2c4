/* export_hf.h — `shardrun ckpt export`: a checkpoint's model for Hugging Face
 * (safetensors + config.json) or llm.c, the format chosen from -o or
 * --format.
 *
 * export_hf owns the Hugging Face side: model.safetensors holding the full
 * fp32 model under GPT2LMHeadModel's names and layouts (the
 * `transformer.` prefix, Conv1D weights [in, out], the unpadded
 * vocabulary, no lm_head: it is tied), "__metadata__": {"format": "pt"},
 * and config.json (model_type gpt2, the dims, gelu_new, layer_norm_epsilon
 * 1e-5, tied embeddings; bos/eos 50256 only for GPT-2's 50257-token
 * vocabulary; a "shardrun_export" entry that marks it as ours).  Every file
 * is written atomically; a config.json shardrun did not write is never
 * replaced. */
#ifndef SR_EXPORT_HF_H
#define SR_EXPORT_HF_H

#include <stdio.h>

#include "model.h"
#include "status.h"

typedef enum { SR_EXPORT_AUTO, SR_EXPORT_HF, SR_EXPORT_SAFETENSORS, SR_EXPORT_LLMC } sr_export_format;

/* The format named by --format ("hf", "safetensors", "llmc"); -1 when the
 * name is none of them. */
int sr_export_format_parse(const char *name);

/* Verifies the checkpoint at `path` and writes its model to `dest` in
 * `fmt`; with SR_EXPORT_AUTO the format follows from dest: a directory (a
 * trailing '/' or an existing directory) is hf, *.safetensors
 * safetensors, *.bin llmc, anything else SR_ERR_USAGE with a hint.  One
 * line on `out` when done.
 * SR_ERR_DATA / SR_ERR_NOINPUT for the checkpoint, SR_ERR_CANTCREAT for
 * dest (a config.json not written by shardrun among them, checked before
 * anything is written), SR_ERR_IO while writing. */
sr_status sr_export(const char *path, const char *dest, sr_export_format fmt, FILE *out);

/* The model's full parameters `all` (unit-major, n_params floats) as one
 * safetensors file at `path` under the Hugging Face names and layouts
 * above, written atomically (the oracle's initial weights: train.c).
 * SR_ERR_CANTCREAT / SR_ERR_IO naming path. */
sr_status sr_export_safetensors(const sr_model *m, const float *all, const char *path);

#endif
