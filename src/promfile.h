/* promfile.h — the Prometheus textfile (log.prometheus).
 *
 * promfile owns the file's format: node_exporter's textfile-collector
 * exposition (HELP and TYPE lines, one gauge family per fact, samples
 * labelled slurm_job, rank and host), its path template (%h the host
 * name, %j the job id, %% a percent sign), and how it is replaced: a
 * temporary file in the same directory renamed over it (fsio.h), as the
 * collector requires, so a scrape never reads half a file.  Which rank
 * writes and what it gathers first is the run's (runlog.c): local rank 0
 * of each node, for its node's ranks. */
#ifndef SR_PROMFILE_H
#define SR_PROMFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem.h"
#include "status.h"

/* One rank's sample. */
typedef struct {
    int rank;
    const char *host;
    double mem_bytes[SR_NSPACE]; /* accounted memory by space, now */
    double comm_exposed_s;       /* the logged step's exposed communication */
} sr_prom_rank;

/* The newest evaluation's named results (the run's; metrics.h writes them
 * too): each named data.val set's loss, each train.eval_tasks task's
 * accuracies (acc, acc_norm: ratios). */
typedef struct {
    int nsets;
    const char *const *set;
    const double *set_loss;
    int ntasks;
    const char *const *task;
    const double *acc, *acc_norm;
} sr_eval_scores;

/* What one write says; the run-wide facts are the same for every rank. */
typedef struct {
    const char *job;     /* the Slurm job id, or "-" */
    int64_t step, steps; /* steps done, steps planned */
    double loss, tokens_per_s;
    double mfu;                  /* a ratio; NaN when no peak is known (no sample) */
    double val_loss;             /* the newest evaluation's loss; NaN before the first (no sample) */
    const sr_eval_scores *evals; /* its named sets and tasks (samples labelled set=, task=); NULL: none */
    int64_t ckpt_step;           /* the newest committed checkpoint; -1 none (no samples) */
    double ckpt_age_s;           /* seconds since it was committed */
    double time_s;               /* the write's wall time (shardrun_last_update_timestamp_seconds) */
    int n;
    const sr_prom_rank *ranks;
} sr_prom_sample;

/* Expands `tmpl` (%h, %j, %%) into out[n]; a substituted host name or job
 * id keeps only [A-Za-z0-9._-], others become '_'.  SR_ERR_CONFIG naming
 * log.prometheus for another % sequence or a result that does not fit. */
sr_status sr_prom_path(const char *tmpl, const char *host, const char *job, char *out, size_t n);
/* Replaces `path` with the sample (SR_ERR_CANTCREAT / SR_ERR_IO as
 * sr_fsio_atomic_write). */
sr_status sr_prom_write(const char *path, const sr_prom_sample *s);

#endif
