/* trace.h — the timeline trace of a window of steps (log.trace_steps).
 *
 * trace owns the window (steps A to B, 1-based, from sr_config's
 * log_trace_first and log_trace_last), the per-rank buffer of spans, the
 * lanes (one Chrome "thread" each: host phases, the four streams, the
 * checkpoint writer, and one per collective plane) and the file's format
 * (the directory is the run's to resolve: log.trace_dir, default
 * <checkpoint.dir>/trace/<job id>.<restart>/ beside the flight recorder's
 * directory, sr_flight_run_dir): Chrome trace-event JSON (a "traceEvents"
 * array of complete "X" events, microseconds since the epoch, pid = rank,
 * tid = lane, with process and thread names), plus "otherData" {"format":
 * "shardrun-trace 1", rank, world_size, job, host, restart, first, last}
 * that `shardrun debug trace` (tracecheck.h) checks before it merges.
 *
 * The window opens at step A's start and closes at step B+1's (so a step's
 * evaluation and checkpoint are in it); the file is written then (once a
 * checkpoint write begun in the window has ended), or when the run ends.  Spans are recorded only while the window
 * is open: outside it a record costs one relaxed load.  Inside, a mutex
 * guards the buffer (the main thread, the transport's progress thread, the
 * checkpoint writer and the NCCL watchdog all record); the buffer is plain
 * malloc, outside the accounting like the flight recorder's ring, and a
 * full or unallocatable buffer drops spans with one warning. */
#ifndef SR_TRACE_H
#define SR_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

typedef enum {
    SR_TRACE_HOST,    /* host phases of the step (data, forward, backward, ...) */
    SR_TRACE_COMPUTE, /* the compute stream: blocks' forward and backward, its waits */
    SR_TRACE_COMM,    /* the comm stream's waits */
    SR_TRACE_H2D,
    SR_TRACE_D2H,
    SR_TRACE_CKPT,         /* the checkpoint's snapshot and write */
    SR_TRACE_COLL_HOST,    /* collectives on the host transport */
    SR_TRACE_COLL_NCCL,    /* ... on NCCL */
    SR_TRACE_COLL_COPY,    /* ... one-rank groups as device copies */
    SR_TRACE_COLL_STAGING, /* ... host staging of virtual ranks */
    SR_TRACE_NLANES
} sr_trace_lane;

typedef struct {
    int64_t first, last; /* the window; 0 = off */
    const char *dir;     /* where the files go (log.trace_dir, or the default the run resolved) */
    int rank, world_size;
    const char *host, *job; /* the job as the files name it */
    long long restart;
} sr_trace_opts;

/* Sets the window up (nothing is allocated or written until it opens). */
void sr_trace_init(const sr_trace_opts *o);
/* Step `step` (1-based) begins: opens the window at A, closes it (writing
 * the file) at B+1. */
void sr_trace_step_begin(int64_t step);
/* The run ends: writes the file when the window is open. */
void sr_trace_finish(void);
/* Whether spans are being recorded now. */
bool sr_trace_on(void);
/* One span [t0, t1] on `lane`.  `name` and `detail` are copied (detail:
 * NULL or a short note, shown as args.detail); bytes >= 0 adds
 * args.bytes. */
void sr_trace_span(sr_trace_lane lane, const char *name, int64_t t0, int64_t t1, int64_t bytes, const char *detail);
/* A collective as the flight recorder saw it (flight.c calls this at its
 * end): on the plane's lane, named by its operation, with its group,
 * group size, sequence number, bytes and enqueue time in args. */
void sr_trace_collective(int plane, const char *op, const char *group, int group_size, int64_t seq, int64_t bytes,
                         int64_t t_enq, int64_t t_start, int64_t t_end, bool ok);
/* A span that may end after the window closes (the checkpoint's
 * background write): begun while the window is open (returns its start,
 * else 0, and then late_end does nothing), the file waits for its end
 * (checked at each later step's start; the run's end writes it
 * regardless). */
int64_t sr_trace_late_begin(void);
void sr_trace_late_end(sr_trace_lane lane, const char *name, int64_t t0, const char *detail);
/* The end of a late span begun with sr_trace_late_begin whose times were
 * measured elsewhere (a GPU's events: device.h's trace_begin). */
void sr_trace_late_span(sr_trace_lane lane, const char *name, int64_t t0, int64_t t1);

/* A host phase: `stmt` runs, and its span is recorded while the window
 * is open. */
#define SR_TRACE_PHASE(name, stmt)                                                                                     \
    do {                                                                                                               \
        int64_t sr_t0_ = sr_trace_on() ? sr_clock_wall_ns() : 0;                                                       \
        stmt;                                                                                                          \
        if (sr_t0_)                                                                                                    \
            sr_trace_span(SR_TRACE_HOST, (name), sr_t0_, sr_clock_wall_ns(), -1, NULL);                                \
    } while (0)

#endif
