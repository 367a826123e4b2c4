/* goodput.h — where a run's wall time went, over its whole chain of
 * starts (requeues, resubmissions, reruns inside the allocation), and the
 * goodput ratio: the share of it spent on steps the run kept.
 *
 * goodput owns the accounting; its input is the run's metrics file
 * (log.metrics: a resumed run appends, so one file holds every start) and
 * its output what `shardrun ckpt list` prints.  The file is split into
 * segments at its start records (runlog.c: each carries the start's
 * seconds to its first step, per phase, startup.h); a segment runs from its
 * start record to its last record.  Per segment:
 *   - start-up: its start record's split (bootstrap, device, model,
 *     checkpoint, other): the process start to the first step;
 *   - checkpoint stalls: the durations of its synchronous saves (an
 *     asynchronous save's write overlaps the steps);
 *   - its steps' time (the rest of the segment) is split between the steps
 *     kept (up to the step the next start resumed from) and the steps
 *     redone (past it: lost with the failure), in proportion to the steps
 *     (the furthest step its step, checkpoint and evaluation records name);
 *   - restarts: from its last record to the next start's process start
 *     (the step in flight when it failed, the failure's detection, the
 *     rerun's launch; for a requeue or resubmission also the queue wait,
 *     its own row when Slurm's accounting tells it: sr_goodput_set_queue).
 * The wall time is the first start's process start to the last record;
 * what no category holds is "other" (the last start's time when it has no
 * step record, such as a start with nothing left to train; negative when
 * rank 0's clocks of two nodes disagree).  The accounting needs no clock in common between the nodes:
 * every time is rank 0's. */
#ifndef SR_GOODPUT_H
#define SR_GOODPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "startup.h"
#include "status.h"

typedef struct {
    int starts;           /* start records */
    int64_t steps_kept;   /* the last step minus the first start's resume step */
    int64_t steps_redone; /* steps done twice (or more) */
    double wall_s;        /* the first start's process start to the last record */
    double kept_s, redone_s, stall_s, restart_s, queue_s, other_s;
    char queue_note[200];             /* how the queue wait was known, or why not */
    char job_ids[1024];               /* the Slurm jobs of the file's starts, each once, oldest first */
    double startup_s[SR_PHASE_COUNT]; /* summed over the starts */
    double ratio;                     /* kept_s / wall_s (0 when wall_s is 0) */
} sr_goodput;

/* The accounting as the records stream by (the report folds them with
 * its own reading): begin, add each record in file order (a record's
 * time and step, a start's split and job, a checkpoint's stall), end.
 * sr_goodput_end returns false, *g zeroed, when no start record came. */
typedef struct {
    int64_t resume, last_step; /* the open segment: the step it resumed from; its furthest record's */
    double first_t, last_t;    /* its start record's time; its newest record's */
    double stall_s;            /* its synchronous saves */
    bool open;                 /* a start record came */
    double first_process_t, last_t_all;
    int64_t first_resume;
    sr_goodput g;
} sr_goodput_acc;

void sr_goodput_begin(sr_goodput_acc *a);
void sr_goodput_add(sr_goodput_acc *a, const json_t *record);
int sr_goodput_end(sr_goodput_acc *a, sr_goodput *g);

/* Reads the metrics file at path (streamed: memory does not grow with
 * it) and computes.  SR_ERR_NOINPUT when it cannot be read, SR_ERR_DATA
 * when it holds no start record (a line that does not parse is skipped). */
sr_status sr_goodput_read(const char *path, sr_goodput *g);

/* The queue wait inside the wall time (Slurm's accounting: requeues and
 * resubmissions waiting between starts, slurmjob.h's sacct) moves from
 * the restarts into its own row, at most all of them; `note` says where
 * it came from or why it is not known (queue_s < 0). */
void sr_goodput_set_queue(sr_goodput *g, double queue_s, const char *note);

/* The goodput line alone (no newline) into out. */
void sr_goodput_line(const sr_goodput *g, char *out, size_t n);

/* The category i (0 .. SR_GOODPUT_ROWS - 1) of g: its name, seconds and
 * what it holds ("" when it needs no note), in the table's order. */
#define SR_GOODPUT_ROWS (6 + SR_PHASE_COUNT)
double sr_goodput_row(const sr_goodput *g, int i, const char **name, const char **note);

/* The goodput line and its table:
 *   goodput 0.82: 41.3 s of 50.4 s in steps kept (120 steps; 3 starts; 14 steps redone)
 * then one row per category (seconds, share of the wall time). */
void sr_goodput_print(const sr_goodput *g, FILE *out);

#endif
