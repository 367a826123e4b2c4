/* starts.h — the start history of a checkpoint directory and the
 * crash-loop guard.
 *
 * starts owns <checkpoint.dir>/starts.jsonl: one line per start of a run
 * in the directory (time, job id, Slurm restart count, world size, the step
 * it resumed from, and for a start the job template reran after a failure
 * its cause, the host it blamed and the seconds from that failure to this
 * start: SHARDRUN_RESTART_CAUSE, SHARDRUN_RESTART_BLAMED and
 * SHARDRUN_RESTART_AT, the failure's time in seconds since the epoch), one
 * when it reaches its first step (its start-up split, startup.h), and one
 * when it ends by completing or by a preemption whose checkpoint
 * committed.  It owns the rule: when the last
 * preemption.max_stalled_restarts starts resumed from the step this start
 * would resume from, and none of them ended that way, restarts stall (the
 * job crashes at the same point every time, and Slurm would requeue it
 * forever): the start refuses with SR_ERR_STALLED (76).  Only rank 0,
 * which holds the directory's lock, reads and writes the file; the verdict
 * reaches the others through the control plane.  The file is state: a
 * line that does not parse is skipped (with one warning), but a link,
 * FIFO or directory of its name refuses the start (73; `ckpt list` warns
 * and lists the checkpoints). */
#ifndef SR_STARTS_H
#define SR_STARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl.h"
#include "startup.h"
#include "status.h"
#include "world.h"

#define SR_STARTS_FILE "starts.jsonl"

typedef struct {
    char time[32];       /* UTC, ISO 8601 */
    char job_id[64];     /* the job id (or "-") */
    long long restart;   /* SLURM_RESTART_COUNT */
    int world_size;      /* ranks */
    int64_t resume_step; /* 0 = fresh */
    char ended[16];      /* "" (crashed or still running), "done" or "preempted" */
    int64_t ended_step;  /* the step it ended at (when ended) */
    char cause[32];      /* SHARDRUN_RESTART_CAUSE ("" when none) */
    char blamed[256];    /* SHARDRUN_RESTART_BLAMED ("" when none) */
    double lost_s;       /* the failure to this start, seconds (< 0: not known) */
    bool ready;          /* it reached its first step: startup holds its split */
    sr_startup startup;
} sr_start_rec;

/* Reads the history of `dir` (oldest first) into a malloc'd array (*n
 * records; NULL and 0 when there is none).  The file is opened without
 * following a link or blocking (fsio.h's rule for names the program
 * chooses): SR_ERR_CANTCREAT when something other than a regular file is
 * there (a link, a FIFO, a directory), SR_ERR_NOINPUT when it exists and
 * cannot be read. */
sr_status sr_starts_read(const char *dir, sr_start_rec **recs, size_t *n);

/* The guard and the record, collective over ctl: rank 0 reads the
 * history, refuses when the last max_stalled (> 0) starts stall at
 * resume_step, else appends this start (with the metrics file, when one
 * is written: `metrics`, log.metrics); every rank returns the verdict:
 * SR_OK, SR_ERR_STALLED with the message naming the step and the starts
 * (and the hint to fix the cause, then run once with
 * preemption.max_stalled_restarts: 0), or SR_ERR_CANTCREAT when the
 * history is not a regular file (the guard is never off unnoticed).  A
 * failure to append warns. */
sr_status sr_starts_begin(const char *dir, int64_t resume_step, int64_t max_stalled, const char *metrics,
                          const sr_world *w, sr_ctl *ctl);

/* The metrics file (log.metrics, as an absolute path) the newest start of
 * dir that had one named, into out; false when none did. */
bool sr_starts_metrics(const char *dir, char *out, size_t size);

/* Rank 0 records that this start reached its first step, with its
 * start-up split.  A failure warns. */
void sr_starts_ready(const char *dir, const sr_world *w, const sr_startup *s);

/* Rank 0 records how this start ended: `how` "done" or "preempted" at
 * `step`.  A failure warns. */
void sr_starts_end(const char *dir, const sr_world *w, const char *how, int64_t step);

/* The decision alone (exposed for tests): how many of the newest records
 * resumed from resume_step without ending, counted back to the first that
 * resumed elsewhere (records that ended are skipped). */
int sr_starts_stalled(const sr_start_rec *recs, size_t n, int64_t resume_step);

#endif
