/* slurmjob.h — what rank 0 asks of and tells Slurm's controller about its
 * own job while it trains: the time left before the job's limit, and the
 * job's comment.
 *
 * slurmjob owns the commands (`squeue -h -j JOB -o %L`, `scontrol update
 * JobId=JOB Comment=...`, and for `ckpt list`'s goodput `sacct ... -o
 * JobIDRaw,Eligible,Start`) and their answers.  Slurm's libraries belong to
 * the site's Slurm version, so shardrun never links them: the client
 * commands are the stable interface.  A command runs as a child process
 * that is never waited for on the step path: it is started, polled without
 * blocking at each step, and killed (by its PID) when it outlives 30 s.
 * slurmctld is shared by the whole cluster, so only rank 0 asks, at
 * start and then at most every SR_SLURMJOB_REREAD_S. */
#ifndef SR_SLURMJOB_H
#define SR_SLURMJOB_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#define SR_SLURMJOB_REREAD_S 300.0

typedef struct sr_slurmjob sr_slurmjob;

/* Opens the job `job_id` (SLURM_JOB_ID).  With `want_end`, reads the time
 * left now (waiting up to 10 s): sr_slurmjob_end then gives the end time
 * (CLOCK_REALTIME seconds), or 0 with *why set (the job has no limit, or
 * the query failed: the caller warns once).  NULL only when out of
 * memory. */
sr_slurmjob *sr_slurmjob_open(const char *job_id, bool want_end, char *why, size_t why_size);
double sr_slurmjob_end(const sr_slurmjob *j);

/* At most one query and one update in flight.  Polls them (never blocks):
 * a finished re-read updates the end time; a failed one, or a failed
 * comment update, is described in *warn (once per kind; "" otherwise).
 * Starts a re-read when the last began SR_SLURMJOB_REREAD_S ago. */
void sr_slurmjob_poll(sr_slurmjob *j, double now, char *warn, size_t warn_size);

/* Starts `scontrol update JobId=... Comment=<text>` unless one is still
 * running (then this text is dropped: the next one comes).  False when it
 * could not be started (*warn set, once). */
bool sr_slurmjob_set_comment(sr_slurmjob *j, const char *text, char *warn, size_t warn_size);

/* Waits up to 5 s for commands in flight (a last comment), then kills
 * what is left by its PID; frees.  A failure not yet warned about is
 * described in *warn ("" otherwise). */
void sr_slurmjob_close(sr_slurmjob *j, char *warn, size_t warn_size);

/* The queue waits of the jobs `ids` (comma-separated, oldest first):
 * `sacct -n -P -X --duplicates -j IDS -o JobIDRaw,Eligible,Start` (every
 * incarnation of a requeued job), waiting up to 10 s.  *first_s: the first
 * incarnation's wait (Start - Eligible; before the run's first start),
 * *rest_s: the sum of the others' (requeues, resubmissions), *lines: the
 * incarnations read.  False with *why set when sacct cannot run, fails
 * (no accounting: "Slurm accounting storage is disabled") or answers
 * nothing that parses. */
bool sr_slurmjob_queue_waits(const char *ids, double *first_s, double *rest_s, int *lines, char *why, size_t why_size);

/* Slurm's time format of squeue %L ("M:SS", "H:MM:SS", "D-HH:MM:SS",
 * also "MM", "D-HH", "D-HH:MM"), in seconds; -1 for an unlimited or
 * unset limit or a string that does not parse, and for a value out of
 * bounds (each field at most 9 digits, days <= 365, hours < 24 after a
 * day field, minutes and seconds < 60, the total <= 366 days): another
 * program's answer is bounded before the run trusts it (exposed for
 * tests). */
double sr_slurmjob_parse_left(const char *s);

#endif
