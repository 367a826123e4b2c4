/* train_impl.h — the state of one rank's training run, shared by the files
 * of the run: train.c (setup, the step, what follows a step, teardown),
 * runlog.c (the banner, the metrics file's events and step records) and
 * oracle.c (SHARDRUN_TEST_ORACLE).  Nothing outside the run includes it. */
#ifndef SR_TRAIN_IMPL_H
#define SR_TRAIN_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "ctl.h"
#include "data.h"
#include "device.h"
#include "evalcmd.h"
#include "evaltask.h"
#include "fsdp.h"
#include "job.h"
#include "memplan.h"
#include "metrics.h"
#include "mixture.h"
#include "model.h"
#include "modelinit.h"
#include "ops.h"
#include "plane.h"
#include "provenance.h"
#include "startup.h"
#include "tokenizer.h"
#include "train.h"

/* Everything one run holds. */
typedef struct {
    const sr_config *cfg; /* = &resolved */
    sr_config resolved;   /* the job with sharding.mixed_precision's auto resolved for the device */
    bool param_auto;      /* param_dtype was auto */
    sr_world *w;
    sr_job job;
    sr_mesh mesh;
    sr_dev *dev;
    const sr_ops *ops; /* the op table computing on dev (sr_device_ops) */
    bool flash;        /* attention is flash attention (sr_job_attention) */
    int threads, mb, accum, T;
    sr_mix *mix; /* the training data (mixture.h) */
    /* the evaluations (train_eval.c): data.val's sets, train.eval_tasks'
     * tasks, and the newest evaluation's scores */
    sr_data *val[SR_VAL_MAX_SETS];
    int nval;
    sr_task *tasks;
    sr_task_enc *tenc;
    int ntasks;
    float *task_losses; /* [mb, T], sr_dev_io_alloc */
    double *task_lp;    /* the largest task's logprobs */
    const char *set_name[SR_VAL_MAX_SETS], *task_name[SR_EVAL_MAX_TASKS];
    double set_loss[SR_VAL_MAX_SETS], task_acc[SR_EVAL_MAX_TASKS], task_acc_norm[SR_EVAL_MAX_TASKS];
    sr_eval_scores scores;   /* points at the above (named sets only) */
    sr_tokenizer *tok;       /* data.tokenizer, or NULL */
    sr_data_record data_rec; /* what it trains on (provenance.h), when it checkpoints */
    sr_model model;
    bool model_ok;
    sr_transport *tp;
    sr_ctl *ctl;
    sr_fsdp *fsdp;
    sr_plane *plane; /* how the engine's collectives travel (plane.h) */
    sr_ckpt *ck;
    sr_ckpt *mem; /* the memory tier (checkpoint.memory) */
    sr_metrics *metrics;
    int *in, *tg;
    sr_ckpt_progress start; /* where this run starts (a resume point or 0) */
    sr_memplan plan;
    char resumed[64];
    char weights[1400]; /* where the weights came from, for the banner */
    sr_modelinit init;  /* model.init, when read into the shard */
    double peak, flops_tok;
    char peak_how[256];
    bool sample_skipped; /* log.sample_every skipped once already (warned) */
    /* the straggler report (train.c gathers, runlog.c reports) */
    char *hosts;               /* every rank's host name, RANK_HOST_LEN bytes each */
    double *busy_ms, *wait_ms; /* [world size]: the last interval's, ms per step */
    int *streak;               /* [world size]: intervals in a row over log.straggler_pct */
    double iv_busy, iv_wait;   /* this rank's seconds in the current interval */
    int64_t iv_steps;          /* steps in the current interval */
    sr_rank_times times;       /* the last gathered interval (times.n = 0: none) */
    /* log.prometheus (runlog.c) */
    char prom_path[4096];   /* expanded; "" = off */
    bool prom_warned;       /* a failed write warned once */
    int64_t ckpt_seen_step; /* the newest committed checkpoint seen, and when it was committed */
    double ckpt_seen_time;
    /* the Slurm job (deadline.c; rank 0 only) */
    struct sr_slurmjob *slurm;     /* NULL: not under Slurm, or nothing to ask */
    struct sr_profile *prof;       /* SHARDRUN_CUDA_PROFILE (profile.h), or NULL */
    double slurm_t0;               /* wall time at open (the comment's ETA) */
    double slurm_tick;             /* the last step agreement's wall time */
    double comment_next;           /* when the next job comment is due */
    double save_s;                 /* the newest committed save's duration (0: none yet) */
    double end_left_s, end_lead_s; /* rank 0: time left and the lead when it said "stop" */
    /* loop state */
    double first_loss, last_loss, last_val, t_start, last_save;
    sr_startup startup; /* the seconds to the first step, per phase (read when training begins) */
    /* the log interval (runlog.c): the steps' losses since the last record,
     * and where and when the last log line was */
    double iv_loss_sum;
    int64_t iv_loss_steps;
    int64_t log_step; /* steps done at the last log line (at start: the resume step) */
    double log_time;  /* its monotonic time */
    bool progress;    /* the \r progress line: stderr a terminal, one rank on this node */
    double progress_time;
    uint64_t cursor;
    long long hb_steps, hb_step_waits; /* the happens-before checker's count of host waits in steps */
    int *oracle_in, *oracle_tg;        /* SHARDRUN_TEST_ORACLE: the first step's whole batch */
} sr_run;

/* train_eval.c: data.val's sets (each its own sr_data) and
 * train.eval_tasks' tasks (read, checked and encoded for the run's
 * context and tokenizer: SR_ERR_DATA naming FILE:LINE), at setup; closed
 * at teardown (safe on a partly opened run). */
sr_status sr_run_open_evals(sr_run *r);
/* Collective, once the control plane is up: every rank read the same
 * tasks (each task's items, sequences and tokens alike), else
 * SR_ERR_CONFIG naming the file on every rank that differs. */
sr_status sr_run_agree_evals(sr_run *r);
void sr_run_close_evals(sr_run *r);
/* One evaluation after step s (collective): each set's loss over
 * train.eval_batches global batches, each task's accuracies (every rank
 * scores its share of the items), r->last_val the first set's loss, the
 * log line and the metrics event.  A preemption signal seen between
 * micro-batches stops it on every rank (*interrupted). */
sr_status sr_run_evaluate(sr_run *r, int64_t s, bool *interrupted);

/* Bytes of one rank's host name in sr_run.hosts. */
#define RANK_HOST_LEN 64

/* What one step produced, and what the ranks agreed on with it. */
typedef struct {
    double loss, norm, lr, seconds, comm_exposed_ms;
    bool stop;       /* some rank saw a preemption signal */
    int signalled;   /* how many ranks */
    bool clock_due;  /* rank 0's checkpoint.every_minutes clock ran out */
    bool end_near;   /* rank 0: less than the lead is left before the job's end (preemption.before_end) */
    double end_time; /* the job's end time as rank 0 read it (0: unknown) */
} sr_step_out;

/* The step's agreement: its slots, each summed over the ranks. */
enum {
    SR_AGREE_LOSS,      /* this rank's loss sum over its tokens */
    SR_AGREE_SIGNALLED, /* 1 on a rank that saw a preemption signal */
    SR_AGREE_CLOCK_DUE, /* rank 0: checkpoint.every_minutes has passed */
    SR_AGREE_END_NEAR,  /* rank 0: the job's end is within the lead (preemption.before_end) */
    SR_AGREE_END_TIME,  /* rank 0: the job's end time (0: unknown) */
    SR_RUN_AGREE_N
};

/* deadline.c: rank 0's Slurm job (preemption.before_end and the job
 * comment).  Open reads the end time at start (and says it, or warns once
 * that only signals will save); step, before the agreement, fills
 * red[SR_AGREE_END_NEAR] and red[SR_AGREE_END_TIME] on rank 0 (zeros elsewhere) and updates the comment when due;
 * close waits briefly for a last command. */
void sr_run_slurm_open(sr_run *r);
void sr_run_slurm_step(sr_run *r, int64_t s, double red[SR_RUN_AGREE_N]);
void sr_run_slurm_close(sr_run *r);
/* deadline.c: before the first step of a start, the ranks agree whether a
 * preemption signal arrived during set-up; if one did, nothing trained
 * needs saving: "preemption: SIGTERM before step N: nothing to save",
 * *exit_code per preemption.requeue, SR_PREEMPTED.  SR_OK otherwise (or
 * the agreement's failure). */
sr_status sr_run_signalled_in_setup(sr_run *r, int *exit_code);

/* runlog.c: the banner; the start (and resume) events; the checkpoint
 * events of the saves committed since the last call. */
void sr_run_banner(sr_run *r);

void sr_run_start_events(sr_run *r);
void sr_run_checkpoint_events(sr_run *r);
/* A logged step s (every rank calls it; `evaluated`: a validation loss was
 * measured this step), on a logged step or the step a preemption stops
 * at (every rank calls it): the straggler report of the interval
 * gathered with its agreement on a logged step (r->times; a warning and a
 * metrics event naming a rank over log.straggler_pct for 3 intervals in a
 * row), the step's line (with the interval's mean loss, the time since
 * the start, steps per second over the interval and the estimate of the
 * rest) and record (loss_mean and loss_steps: the mean of the steps'
 * losses since the last record, and their number), and log.prometheus's
 * sample (every rank's gathered with one all-gather, written by local
 * rank 0 of each node for its node's ranks; a failed write warns once and
 * never fails the run).  The gather's status. */
sr_status sr_run_log_step(sr_run *r, int64_t s, const sr_step_out *o, bool evaluated);
/* After step s's agreement: its loss into the interval's mean, and on a
 * step that is not logged the \r progress line (r->progress: stderr a
 * terminal and one rank on this node), at most four times a second. */
void sr_run_step_done(sr_run *r, int64_t s, const sr_step_out *o);
/* An evaluation at a step that is not logged: log.prometheus's sample
 * (its val_loss gauge) as sr_run_log_step writes it (every rank calls
 * it). */
sr_status sr_run_log_eval(sr_run *r, int64_t s, const sr_step_out *o);

/* train_stop.c: *out = where the run stands after `step` steps (the
 * global cursor, the mixture's state) for a checkpoint. */
void sr_run_progress(const sr_run *r, int64_t step, sr_ckpt_progress *out);
/* With data.mixture_end: stop, whether the batch of step s + 1 needs a
 * sequence a source no longer has: then rank 0 says "source NAME exhausted
 * at step S" (and a metrics event) and the run ends after step s (every
 * rank decides the same from the same state). */
bool sr_run_mixture_ends(sr_run *r, int64_t s);
/* The agreed preemption stop after step s: an asynchronous save in flight
 * finishes, the checkpoint of step s + 1 is saved (unless it is the one
 * just committed), the flight recorder dumps; *exit_code the status to
 * exit with (sr_preempt_exit_status).  Returns SR_PREEMPTED, or the
 * save's error. */
sr_status sr_run_preempt_stop(sr_run *r, int64_t s, const sr_step_out *o, int *exit_code);
/* What watches the run, before the planes start: the flight recorder
 * (flight.h) and its SIGQUIT handler, log.trace_steps' window (trace.h),
 * and log.prometheus's path with %h and %j expanded (SR_ERR_CONFIG naming
 * the key for a bad template); the flight recorder's line at the end
 * (done). */
sr_status sr_run_start_observers(sr_run *r);
/* The end of a finished run (its last step `end`): the done line (steps, `seconds`, first and
 * last loss), the memory at end, the flight recorder's line (records per
 * step, the history its ring holds) and the happens-before checker's
 * verdict.  Also (SHARDRUN_BENCH_COUNTS, testhook.h) runlog appends this
 * rank's traffic counters after start-up and at every logged step to
 * DIR/rank<N>.tsv for bench/scale.sh. */
void sr_run_done_lines(const sr_run *r, int64_t end, double seconds);
/* Every rank's host name into r->hosts (one all-gather, after connect)
 * and the straggler report's per-rank arrays. */
sr_status sr_run_gather_hosts(sr_run *r);
/* The step's clocks: its start, the device's host waits and the time
 * spent waiting on communication at its start and after the agreement. */
typedef struct {
    double t0, ta, tb;
    long long waits0;
    uint64_t comm0, comm1;
} sr_step_clock;
/* runlog.c: the step's agreement (SR_AGREE_*) after its micro-batches
 * ended in `st`: the loss sum, preemption signals, rank 0's checkpoint
 * clock and the job's end, summed over the ranks into o (loss, stop,
 * signalled, clock_due, end_near, end_time); this rank's busy and waiting
 * time of the log interval gathered with it (c->ta, c->tb, c->comm1 set).
 * A non-finite loss or gradient norm is SR_ERR_TRAIN. */
sr_status sr_run_step_agree(sr_run *r, int64_t s, double loss_sum, sr_step_clock *c, sr_step_out *o, sr_status st);
/* runlog.c: after the first step of a start, the device's own view of its
 * memory against the accounting (CUDA loads modules lazily, cuBLASLt
 * sizes itself on first use). */
void sr_run_first_step_memory(const sr_run *r);
/* Whether step s (0-based) is logged: a progress line, a metrics record
 * and the straggler report's gather (log.every, the first and the last). */
bool sr_run_log_due(const sr_run *r, int64_t s);

/* oracle.c (SHARDRUN_TEST_ORACLE): whether step s is the one laid out;
 * before it, after micro-batch a's forward, after its gradients. */
bool sr_oracle_on(const sr_run *r, int64_t s);
sr_status sr_oracle_init(sr_run *r);
sr_status sr_oracle_forward(sr_run *r, int a);
sr_status sr_oracle_step(sr_run *r, const sr_step_out *o);

#endif
