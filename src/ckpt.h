/* ckpt.h — sharded checkpoints: format, commit protocol, verification,
 * load with resharding, retention, the directory lock, and the offline
 * tools behind `shardrun ckpt` (list, verify, inspect, export).
 *
 * On disk (DESIGN §7, shardrun-checkpoint(5)): <checkpoint.dir>/step_<8
 * digits>/ holds one shard file per shard index (shard_<5 digits>.bin: a
 * 64-byte header, then the rank's real elements of the fp32 master
 * parameters, Adam m and Adam v, slice after slice) and manifest.yaml,
 * written last, which records the run's progress (step, tokens, data
 * cursor, seed, LR schedule), world size and mesh, model dims and their
 * hash, the job's key values, every tensor, and for every shard file its
 * slices of the global parameter vector and one SHA-256 per 4 MiB chunk.
 * The manifest's last line is the SHA-256 of everything before it.
 *
 * The in-run functions are collectives: every rank calls them in the same
 * order; they agree on success through the world group, so a failure on
 * any rank fails the call on all ranks with the same status. */
#ifndef SR_CKPT_H
#define SR_CKPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "fsdp.h"
#include "model.h"
#include "status.h"
#include "world.h"

typedef struct sr_ckpt sr_ckpt;

/* Where a run stands: optimizer steps done and the global data cursor
 * (sequences consumed). */
typedef struct {
    int64_t step;
    uint64_t cursor;
} sr_ckpt_progress;

/* Opens checkpointing for a run (collective).  With checkpoint.dir set,
 * rank 0 creates the directory, takes the fcntl lock on <dir>/.lock for the
 * life of the returned object (SR_ERR_CANTCREAT naming the holder when
 * another process has it) and removes temporary directories left by
 * crashed saves.  Without checkpoint.dir saves do nothing. */
sr_status sr_ckpt_open(sr_ckpt **out, const sr_config *cfg, sr_world *w, const sr_model *m, sr_fsdp *f);
/* Releases the lock and frees.  NULL is fine. */
void sr_ckpt_close(sr_ckpt *c);
bool sr_ckpt_enabled(const sr_ckpt *c);

/* Applies checkpoint.resume (collective): auto loads the newest step_*
 * that parses and verifies (falling back to older ones, each failure
 * logged), never and "no checkpoint" start fresh, a PATH loads exactly
 * that checkpoint.  On success *p holds the progress to continue from
 * ({0, 0} when fresh) and `how` says "fresh" or the step.  SR_ERR_DATA when
 * checkpoints exist but none verifies or the model shape differs,
 * SR_ERR_NOINPUT when PATH is missing. */
sr_status sr_ckpt_resume(sr_ckpt *c, sr_ckpt_progress *p, char *how, size_t how_len);

/* Saves the current shard state at progress *p with the commit protocol
 * (collective): shards into a dot-named temporary directory, fsynced; all
 * ranks report; rank 0 writes and fsyncs the manifest, renames the
 * directory into place, fsyncs the parent, updates `latest`, applies
 * retention; a final agreement.  Any failure removes the temporary
 * directory and leaves earlier checkpoints untouched (SR_ERR_IO,
 * SR_ERR_CANTCREAT).  *bytes_out (may be NULL) gets the bytes written. */
sr_status sr_ckpt_save(sr_ckpt *c, const sr_ckpt_progress *p, uint64_t *bytes_out);
/* Step of the newest checkpoint this run saved or resumed from; -1 none. */
int64_t sr_ckpt_last_step(const sr_ckpt *c);

/* Offline tools (single process; print to `out`).
 *   list:    every step_* of DIR with step, ranks, size, date; temporaries
 *   verify:  every chunk of every file of PATH (a step_* directory, or a
 *            checkpoint.dir: all of its checkpoints); SR_ERR_DATA naming the
 *            file and chunk of each failure
 *   inspect: manifest summary: progress, world, model, files, tensors
 *   export:  verifies and writes the fp32 model in llm.c's model-file
 *            format (version 3) to `dest`, atomically */
sr_status sr_ckpt_list(const char *dir, FILE *out);
sr_status sr_ckpt_verify(const char *path, FILE *out);
sr_status sr_ckpt_inspect(const char *path, FILE *out);
sr_status sr_ckpt_export(const char *path, const char *dest, FILE *out);

#endif
