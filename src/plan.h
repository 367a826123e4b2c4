/* plan.h — `shardrun plan`: what a job will need, before it queues.
 *
 * plan owns the sizing of a job without running it: per rank and per
 * memory space every category the run accounts (by the run's own planned
 * peak, memplan.h, so the persistent categories are exact), whether that
 * fits the given host and device memory and, if not, the cheapest change
 * that does (reshard, micro_batch, recompute, offload); the FLOPs per step
 * and tokens/s at a given sustained throughput; the checkpoint's size per
 * rank and in total, its save time at a given disk speed, and the
 * `#SBATCH --signal=USR1@N` lead that covers a step and a save. */
#ifndef SR_PLAN_H
#define SR_PLAN_H

#include <stdio.h>

#include "config.h"
#include "status.h"

/* The plausible ranges of --disk-mbps (MB/s of the checkpoint file
 * system, one rank's share) and --tflops (sustained TFLOP/s of one rank);
 * a number outside is SR_ERR_CONFIG.  The longest --signal lead sbatch
 * accepts, s (a 16-bit field): a longer one is flagged, never printed as
 * an #SBATCH line. */
#define SR_PLAN_DISK_MBPS_MIN 1.0
#define SR_PLAN_DISK_MBPS_MAX 1e7
#define SR_PLAN_TFLOPS_MIN 0.01
#define SR_PLAN_TFLOPS_MAX 1e5
#define SR_PLAN_SIGNAL_MAX_S 65535

typedef struct {
    int ranks_lo, ranks_hi;                                 /* --ranks N or A-B (0: 1) */
    int gpus_per_node;                                      /* > 0: a GPU plan with this many ranks per node */
    double device_mem_gib, host_mem_gib, disk_mbps, tflops; /* 0: the defaults the output names */
    bool ledger, json;                                      /* --ledger (ledgerplan.h), --json */
    double gemm_tflops, hbm_tbps;                           /* the roofline's rates (0: defaults) */
    const char *calibration;                                /* --calibration FILE, or NULL */
} sr_plan_opts;

/* Plans cfg (finalized) and prints it on `out`: one rank count in full,
 * a range as a table of every count in it (invalid ones with the reason).
 * SR_ERR_CONFIG when a single rank count breaks the world-size rules or a
 * GPU plan is asked of a build without CUDA; SR_ERR_INTERNAL out of
 * memory. */
sr_status sr_plan_run(const sr_config *cfg, const char *job, const sr_plan_opts *o, FILE *out);

#endif
