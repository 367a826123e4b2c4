/* flight.h — the flight recorder: every rank's recent collectives and step
 * marks, kept in a fixed ring and dumped when the run goes wrong.
 *
 * flight owns the ring (log.flight_recorder entries, default 2,048; 0 = off),
 * what one entry holds (the plane's sequence number, operation, group name
 * and size, bytes, the plane, enqueue / start / end times, state, the step),
 * where the dumps go (log.flight_dir, default
 * <checkpoint.dir>/flight/<job id>.<restart>/, else
 * ./shardrun-flight.<job id or pid>/) and the dump format (rank<N>.json,
 * shardrun(1), DEBUGGING).  The planes record: comm.c (the host transport,
 * and the staging of virtual ranks on a GPU), plane.c (a device copy),
 * comm_nccl_cuda.c (NCCL), train.c (step marks).
 *
 * Recording takes no lock and allocates nothing: a slot is claimed with one
 * atomic add, its fields are written by the thread that owns the entry, and
 * an entry's id is published last, so a dump (which may run in a signal
 * handler, or in a thread that is about to _exit while another holds a
 * lock) skips a slot that is being rewritten.  The dump itself is
 * async-signal-safe: it formats with its own integer and string writers,
 * not stdio, and calls only mkdir, open, write, fsync, rename and close.
 * The dumps are read by `shardrun debug flight` (flightcheck.h). */
#ifndef SR_FLIGHT_H
#define SR_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The planes an entry can travel on (the names in a dump, in this order). */
typedef enum { SR_FLIGHT_HOST, SR_FLIGHT_NCCL, SR_FLIGHT_COPY, SR_FLIGHT_STAGING, SR_FLIGHT_STEP } sr_flight_plane;
#define SR_FLIGHT_PLANE_NAMES                                                                                          \
    { "host", "nccl", "copy", "staging", "step" }
/* An entry's state: queued (entered, not started), running, done, failed;
 * issued = handed to a device stream (NCCL, a copy), not yet seen done. */
typedef enum {
    SR_FLIGHT_QUEUED,
    SR_FLIGHT_RUNNING,
    SR_FLIGHT_DONE,
    SR_FLIGHT_FAILED,
    SR_FLIGHT_ISSUED
} sr_flight_state;
#define SR_FLIGHT_STATE_NAMES                                                                                          \
    { "queued", "running", "done", "failed", "issued" }

/* The default ring size (log.flight_recorder's default). */
#define SR_FLIGHT_DEFAULT_ENTRIES 2048
/* The dump format's name (its "format" key). */
#define SR_FLIGHT_FORMAT "shardrun-flight 1"

/* What the recorder needs from the run. */
typedef struct {
    int64_t entries;      /* ring size; 0 = off */
    const char *dir;      /* log.flight_dir; "" or NULL = the default */
    const char *ckpt_dir; /* checkpoint.dir ("" = none), for the default */
    int rank, world_size;
    const char *host;
    const char *job_id; /* world's job id ("-" = none) */
    long long restart;  /* SLURM_RESTART_COUNT (world.h) */
    double comm_timeout_s;
} sr_flight_opts;

/* A run's directory of per-rank diagnostics named `kind` ("flight", the
 * recorder's dumps; "trace", trace.h's files) into out[n]: `dir` when
 * given, else <ckpt_dir>/<kind>/<job>.<restart>, else
 * ./shardrun-<kind>.<job>, where <job> is the job id kept in
 * [A-Za-z0-9._-] (others become '_'), or the process id without one.  The
 * job id as given goes to job_out[job_n] (the pid's digits without one). */
void sr_flight_run_dir(char *out, size_t n, const char *kind, const char *dir, const char *ckpt_dir, const char *job_id,
                       long long restart, char *job_out, size_t job_n);

/* Starts recording (the ring allocated here, once; a second call changes
 * nothing but the directory and identity).  Returns false when out of
 * memory (the recorder then stays off; the caller warns).  Not
 * thread-safe: call before the planes start. */
bool sr_flight_init(const sr_flight_opts *o);
/* Stops recording and frees the ring (teardown; no dump may run). */
void sr_flight_shutdown(void);
/* The directory dumps go to ("" when the recorder is off). */
const char *sr_flight_dir(void);
/* Whether the recorder is on. */
bool sr_flight_on(void);

/* Records a new entry (state queued, enqueue time now, the current step)
 * and returns its id (0 when the recorder is off; every call below
 * accepts 0).  `op` and `group` are copied (truncated to 15 bytes). */
uint64_t sr_flight_enter(sr_flight_plane plane, int64_t seq, const char *op, const char *group, int group_size,
                         uint64_t bytes);
/* The entry starts (start time now; state running, or issued for a
 * device plane). */
void sr_flight_start(uint64_t id);
/* The entry ends (end time now) done or failed; inside log.trace_steps'
 * window the collective also becomes a span of the trace (trace.h). */
void sr_flight_end(uint64_t id, bool ok);
/* Step marks: step `step` begins (an entry of plane step, op "step",
 * running) and later ends (done).  The current step is what later
 * collectives record; the trace's window (trace.h) follows the marks. */
void sr_flight_step_begin(int64_t step);
void sr_flight_step_end(void);
/* Entries recorded since the first step mark (not only those in the
 * ring), and step marks begun: the cost figures of the done line and the
 * benchmark. */
uint64_t sr_flight_recorded(void);
int64_t sr_flight_steps(void);

/* The plane a host-transport collective this thread submits is recorded
 * on: SR_FLIGHT_HOST unless plane.c's staging set SR_FLIGHT_STAGING around
 * its call (thread-local).  Returns the previous value. */
sr_flight_plane sr_flight_set_host_plane(sr_flight_plane p);
sr_flight_plane sr_flight_host_plane(void);

/* The process's last dump, before it exits (69, 70, a preemption): writes
 * this rank's ring to <dir>/rank<N>.json (through a temporary file and a
 * rename), creating dir and its parents.  `reason` says why ("watchdog",
 * "exit 69", "preempt", ...) and `detail` (may be NULL) what the rank
 * knew (its error message).  Async-signal-safe, takes no lock.  The first
 * call writes; a call while it writes waits for it (up to 5 s) and, like
 * every later one, writes nothing: call it before the exit's message, and
 * no dump's line follows that message.  Returns whether this call wrote
 * the dump; says so on stderr either way (one line, also
 * async-signal-safe).  Nothing happens, false, when the recorder is off or
 * has recorded nothing yet.  SIGQUIT's and a terminating signal's dumps
 * (any number: signals.h calls the dump the recorder registers there at
 * init) are not final: they never wait for a dump in progress, and a
 * later dump replaces them. */
bool sr_flight_dump(const char *reason, const char *detail);

#endif
