/* train.h — the training loop of one rank.
 *
 * train owns the loop: the global data cursor and this rank's slice of every
 * global batch, micro-batch accumulation, global-norm clipping, the
 * learning-rate schedule, periodic evaluation, the per-rank start line, the
 * progress line on stderr and the JSON-lines metrics file (rank 0).  The
 * sharding (gathers, reductions, optimizer on shards) is fsdp's. */
#ifndef SR_TRAIN_H
#define SR_TRAIN_H

#include <stdint.h>

#include "config.h"
#include "status.h"
#include "world.h"

typedef struct {
    int64_t steps_done;
    double first_loss, last_loss, last_val_loss;
    int exit_code; /* with SR_PREEMPTED: the exit status per preemption.* */
} sr_train_result;

/* Trains per `cfg` (already finalized), resuming per checkpoint.resume and
 * saving per checkpoint.*.  Returns SR_PREEMPTED after a preemption signal
 * once the ranks agreed on a step and the checkpoint is committed
 * (res->exit_code: preemption.exit_status, or 0 after scontrol requeue),
 * SR_OK, SR_ERR_TRAIN on a
 * non-finite loss or gradient norm, SR_ERR_DATA / SR_ERR_NOINPUT for data
 * problems, SR_ERR_CANTCREAT when the metrics file cannot be created,
 * SR_ERR_PEER when a peer fails or times out, SR_ERR_CONFIG for sharding
 * settings that do not fit the world, SR_ERR_IO / SR_ERR_CANTCREAT when a
 * checkpoint cannot be written (earlier ones stay usable), SR_ERR_DATA when
 * no checkpoint verifies.  `res` may be NULL. */
sr_status sr_train_run(const sr_config *cfg, sr_world *w, sr_train_result *res);

/* Nominal peak FLOP/s of `threads` cores, used for MFU: cores x clock x
 * FLOP/cycle of the widest FMA unit found (AVX-512: 64, AVX2+FMA: 32,
 * else 8); SHARDRUN_PEAK_GFLOPS overrides.  `how` describes the figure. */
double sr_train_peak_flops(int threads, char *how, size_t how_len);

#endif
