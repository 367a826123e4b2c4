/* metrics.h — the run's records: the JSON-lines metrics file and its
 * TensorBoard twin, memory lines, and the FLOP/s peak that MFU is measured
 * against.
 *
 * metrics owns log.metrics (written by rank 0; a resumed run appends) and
 * the format of its records (shardrun(1), METRICS): one JSON object per
 * logged step with step, loss, lr, grad_norm, tokens_per_s, mfu, step_ms,
 * comm_exposed_ms, tokens, ranks, val_loss after an evaluation, the ranks'
 * busy and wait times (busy_ms_min/median/max, wait_ms_min/median/max,
 * busy_ms_ranks, slowest_rank, slowest_host), and every memory category
 * current and peak from mem.h's accounting; and one event record per
 * start, resume, checkpoint commit, preemption and evaluation, with event,
 * step and time first (`shardrun report` reads both kinds).  With
 * log.tensorboard the same step records go to TensorBoard as scalars under
 * the file's keys (mfu and val_loss when known, busy_ms_min/median/max
 * when gathered, mem_total, mem_total_peak and mem_<space>_total), and
 * every event as a text summary "event/<kind>" holding its record. */
#ifndef SR_METRICS_H
#define SR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promfile.h"
#include "status.h"

typedef struct sr_metrics sr_metrics;

/* Every rank's busy and wait time over one log interval (the straggler
 * report): busy = step time - time waiting on collectives, in ms per step,
 * gathered at the interval's last step (train.c). */
typedef struct {
    int n;                 /* ranks; 0 = not gathered (no keys written) */
    const double *busy_ms; /* [n] */
    const double *wait_ms; /* [n] */
    double busy_min, busy_median, busy_max, wait_min, wait_median, wait_max;
    int slowest_rank;         /* the rank of busy_max (the lowest one on a tie) */
    const char *slowest_host; /* its host */
} sr_rank_times;

/* Fills t's statistics from its n, busy_ms and wait_ms; `hosts` holds n
 * host names of `host_len` bytes each (slowest_host points into it). */
void sr_rank_times_fill(sr_rank_times *t, const char *hosts, size_t host_len);

/* One logged step. */
typedef struct {
    int64_t step;
    double loss, lr, grad_norm, tokens_per_s, mfu, step_ms;
    double loss_mean;       /* the mean of the steps' losses since the last record */
    int64_t loss_steps;     /* how many steps that mean is over */
    double comm_exposed_ms; /* the step's time waiting on communication (device.h) */
    int64_t tokens;
    int ranks;
    bool has_val;
    double val_loss;
    const sr_eval_scores *evals;  /* with has_val: val_loss/NAME, acc/TASK, acc_norm/TASK keys; NULL: none */
    const char *nccl;             /* the NCCL version of a run over NCCL, or NULL (no key) */
    const char *tokens_by_source; /* data.mixture: {"NAME": tokens, ...} as JSON text, or NULL (no key) */
    const sr_rank_times *times;   /* the straggler report's fields, or NULL */
} sr_step_record;

/* Opens `path` for records and prepares the TensorBoard directory
 * `tensorboard` (tboard.h); "" or NULL for both: none, *out NULL.  The
 * file is appended to when `append` (a run that may resume), else
 * truncated.  SR_ERR_CANTCREAT. */
sr_status sr_metrics_open(sr_metrics **out, const char *path, const char *tensorboard, bool append);
/* Once the run knows where it starts (`start_step` steps done, 0 fresh):
 * a fresh start empties a file opened for appending (later records start
 * it anew), and the TensorBoard writer opens this start's event file with
 * its session-start record at step start_step + 1.  SR_ERR_IO when the
 * file cannot be emptied, SR_ERR_CANTCREAT when the event file cannot be
 * created.  NULL m is fine. */
sr_status sr_metrics_begin(sr_metrics *m, int64_t start_step);
/* Labels every later record with "device": `device` (a device name
 * without quotes or backslashes; NULL or "" none): an emulated device's
 * records say so.  NULL m is fine. */
void sr_metrics_label_device(sr_metrics *m, const char *device);
/* Writes one record and flushes it.  NULL is fine (no file). */
void sr_metrics_step(sr_metrics *m, const sr_step_record *r);
/* Writes one event record {"event": kind, "step": step, "time": now,
 * ...fields} and flushes it; `fields` (a JSON object or NULL) is consumed.
 * NULL m is fine (no file; fields still freed). */
struct json_t;
void sr_metrics_event(sr_metrics *m, const char *kind, int64_t step, struct json_t *fields);
/* Closes; SR_ERR_IO when buffered records could not be written.  NULL is
 * fine. */
sr_status sr_metrics_close(sr_metrics *m);

/* Logs every memory category, current and peak, on rank 0's stderr. */
void sr_metrics_log_memory(const char *when);

/* SHARDRUN_PEAK_GFLOPS, when set, must be a number of GFLOP/s from 1 to
 * 1e9: SR_ERR_CONFIG naming the value and the accepted form otherwise
 * (train and plan check it before they start). */
#define SR_PEAK_GFLOPS_MIN 1.0
#define SR_PEAK_GFLOPS_MAX 1e9
sr_status sr_metrics_check_env(void);
/* Nominal peak FLOP/s of `threads` cores, used for MFU: cores x clock x
 * FLOP/cycle of the widest FMA unit found (AVX-512: 64, AVX2+FMA: 32,
 * else 8); SHARDRUN_PEAK_GFLOPS overrides.  `how` describes the figure. */
double sr_metrics_peak_flops(int threads, char *how, size_t how_len);
/* The peak FLOP/s of the GPU a device line names (sr_dev.line): bf16
 * tensor-core or fp32 (exact mode) from a table by name (H100/H200 SXM,
 * H100 PCIe, A100), SHARDRUN_PEAK_GFLOPS overriding; `how` says which.
 * 0 for a GPU the table does not know (mfu is then null). */
double sr_metrics_gpu_peak_flops(const char *device, bool bf16, char *how, size_t how_len);
/* The peak of a run on table d (bf16: the ops compute in bf16): the GPU's
 * data-sheet peak for its device line on the cuda table (a warning when
 * none is known: MFU is then null), else the CPU's for `threads`. */
struct sr_dev;
double sr_metrics_device_peak(const struct sr_dev *d, bool bf16, int threads, char *how, size_t how_len);

#endif
