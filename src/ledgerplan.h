/* ledgerplan.h — a job's GPU step counted without a GPU: `shardrun plan
 * --ledger`.
 *
 * ledgerplan owns running one optimizer step of a job on dry cuda tables
 * (device.h `dry`: the cuda table as the counting executor, every
 * operation recorded in a ledger, none issued, device memory addresses
 * that are never touched), one thread per rank on the loop transport,
 * with the run's own engine, model and op tables: the counts are the ones
 * a run issues, from the same code.  It reports rank 0's step per family
 * of ledger.h: launches, cuBLASLt calls, GFLOP, GB moved, the roofline
 * bound at the given rates and, with a calibration (the efficiency per
 * family a GPU check measured), a predicted time; and the largest
 * activation forward saves.  plan.c takes a GPU job's step time from
 * here. */
#ifndef SR_LEDGERPLAN_H
#define SR_LEDGERPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "config.h"
#include "ledger.h"
#include "status.h"

/* The roofline's rates when none is given: one H200's measured bf16 GEMM
 * rate (TFLOP/s) and copy rate (TB/s); tests/gpu/calibration/h200.json
 * records them with their source. */
#define SR_LEDGER_GEMM_TFLOPS 782.0
#define SR_LEDGER_HBM_TBPS 4.0
/* The most ranks a ledger is counted for (one thread and one dry table
 * each). */
#define SR_LEDGER_MAX_RANKS 1024

typedef struct {
    double gemm_tflops, hbm_tbps; /* > 0: the rates (--gemm-tflops, --hbm-tbps); 0: the calibration's or the defaults */
    const char *calibration;      /* a calibration file (tests/gpu/calibration/), or NULL */
} sr_ledgerplan_opts;

typedef struct {
    sr_ledger l; /* rank 0's optimizer step */
    int ranks, mb, accum, T;
    double gemm_tflops, hbm_tbps;
    char rates_how[600];
    double bound_s;                 /* the roofline bound of the step */
    bool calibrated;                /* a calibration gave efficiencies: predicted_s holds */
    double efficiency[SR_LF_COUNT]; /* bound / measured per family (0: none given) */
    double predicted_s;             /* sum of bound / efficiency (the bound where none is given) */
    char calibration[600];          /* the file, and its device */
    /* the largest activation forward saves for backward: one block's,
     * and at the peak (kept by every block, or one with recompute) */
    const char *saved_name;
    size_t saved_block_bytes, peak_saved_bytes;
    int saved_blocks;
    bool flash; /* attention is flash attention (job.h sr_job_attention) */
} sr_ledgerplan;

/* Counts one optimizer step (the second: the first sets up) of cfg
 * (finalized, its precision resolved for a cuda table) on `ranks` ranks
 * into *p.  SR_ERR_CONFIG (78) naming why for a job that does not run on a
 * GPU (device: cpu), sharding.offload.optimizer (its step runs on the
 * host), a build without CUDA, more than SR_LEDGER_MAX_RANKS ranks or a
 * rank count the job's rules refuse; the calibration's statuses
 * (SR_ERR_NOINPUT, SR_ERR_DATA with file:line:col); SR_ERR_INTERNAL out of
 * memory. */
sr_status sr_ledgerplan_run(const sr_config *cfg, int ranks, const sr_ledgerplan_opts *o, sr_ledgerplan *p);

/* The ledger's table on `out` (per family: launches, cuBLASLt calls,
 * GFLOP, GB, bound ms, share; the total; the rates, the prediction and
 * the largest saved activation). */
void sr_ledgerplan_print(const sr_ledgerplan *p, FILE *out);
/* The same as one JSON object: {"families": [{"name", "launches",
 * "gemm_calls", "gflop", "gb", "bound_ms"}, ...], "total": {...},
 * "peak_saved_bytes", ...}.  SR_ERR_INTERNAL out of memory. */
sr_status sr_ledgerplan_json(const sr_ledgerplan *p, FILE *out);
/* One row of a tally as JSON: {"name", "launches", "gemm_calls", "gflop",
 * "gb", "bound_ms"} and "ms" with `with_ms` (the profile's); NULL out of
 * memory. */
json_t *sr_ledgerplan_row_json(const char *name, const sr_ledger_row *r, bool with_ms);

#endif
