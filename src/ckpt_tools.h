/* ckpt_tools.h — the offline tools behind `shardrun ckpt`: list, verify,
 * inspect, and the start every offline tool shares.
 *
 * ckpt_tools owns what a person sees of checkpoints without running a job:
 * one process, no PMIx, output on the stream given.  The exporters
 * (export_llmc.h, export_hf.h) and sample (sample.h) start from
 * sr_ckpt_tool_read_model. */
#ifndef SR_CKPT_TOOLS_H
#define SR_CKPT_TOOLS_H

#include <stdio.h>

#include "manifest.h"
#include "model.h"
#include "status.h"

/*   list:    every step_* of DIR with step, ranks, size, date; temporaries
 *   verify:  every chunk of every file of PATH (a step_* directory, or a
 *            checkpoint.dir: all of its checkpoints); SR_ERR_DATA naming the
 *            file and chunk of the first failure, every failure on `out`
 *   inspect: manifest summary: progress, world, model, files, tensors
 * SR_ERR_NOINPUT when PATH is not a directory. */
sr_status sr_ckpt_list(const char *dir, FILE *out);
sr_status sr_ckpt_verify(const char *path, FILE *out);
sr_status sr_ckpt_inspect(const char *path, FILE *out);

/* The offline tools' start: PATH is a checkpoint directory whose manifest
 * parses (SR_ERR_DATA, or SR_ERR_NOINPUT when it is not a checkpoint at
 * all), or a checkpoint.dir, whose newest checkpoint that verifies is
 * used (a notice names it on stderr; one that does not verify is warned
 * about and the next older tried; none: SR_ERR_DATA); `used` (may be
 * NULL) receives the checkpoint directory read.  Then the
 * model's tensor table (no activations) for its dims, and the whole fp32
 * model (the unit-major parameter vector, padded vocabulary rows zero)
 * read and verified from every shard into *all (malloc'd).  `before`
 * (may be NULL) sees the parsed manifest before any shard is read; what
 * it returns other than SR_OK is returned at once.  On success free all
 * three (free, sr_model_free, sr_manifest_free); on failure nothing is
 * left. */
typedef sr_status (*sr_ckpt_tool_check)(const sr_manifest *mf, void *ctx);
sr_status sr_ckpt_tool_read_model(const char *path, sr_manifest *mf, sr_model *model, float **all,
                                  sr_ckpt_tool_check before, void *ctx, char *used, size_t used_len);

#endif
