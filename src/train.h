/* train.h — the training run of one rank.
 *
 * train owns the run: setup (data, model, transport, control plane, engine,
 * the agreed ISA level, checkpoint directory and resume), the start line and
 * banner, the step loop (the global data cursor and this rank's slice of
 * every global batch, micro-batch accumulation, global-norm clipping, the
 * learning-rate schedule), and what follows a step (evaluation, the
 * progress line and metrics record, preemption, periodic checkpoints).  The
 * sharding is fsdp's, the records metrics', the checkpoints ckpt's. */
#ifndef SR_TRAIN_H
#define SR_TRAIN_H

#include <stdint.h>

#include "config.h"
#include "status.h"
#include "world.h"

typedef struct {
    int64_t steps_done; /* trained by this run (not before its resume) */
    double first_loss, last_loss, last_val_loss;
    int exit_code; /* with SR_PREEMPTED: the exit status per preemption.* */
} sr_train_result;

/* Trains per `cfg` (finalized; the world-size rules are checked here),
 * resuming per checkpoint.resume and saving per checkpoint.*.  Returns
 * SR_PREEMPTED after a preemption signal once the ranks agreed on a step
 * and the checkpoint is committed (res->exit_code: preemption.exit_status,
 * or 0 after scontrol requeue), SR_OK, SR_ERR_TRAIN on a non-finite loss or
 * gradient norm, SR_ERR_DATA / SR_ERR_NOINPUT for data problems,
 * SR_ERR_CANTCREAT when the metrics file cannot be created, SR_ERR_PEER when
 * a peer fails or times out, SR_ERR_CONFIG for settings that do not fit the
 * world or a CPU run, SR_ERR_IO / SR_ERR_CANTCREAT when a checkpoint cannot
 * be written (earlier ones stay usable), SR_ERR_DATA when no checkpoint
 * verifies, SR_ERR_INTERNAL when out of memory.  `res` may be NULL. */
sr_status sr_train_run(const sr_config *cfg, sr_world *w, sr_train_result *res);

/* The token buffers a run allocates (inputs and targets: a slot per
 * micro-batch of a step), pinned on the cuda table (sr_dev_io_alloc). */
size_t sr_train_io_bytes(int accum, int micro_batch, int T);

#endif
