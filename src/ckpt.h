/* ckpt.h — sharded checkpoints of a run: the directory and its lock, resume
 * with fallback, the commit protocol, retention.
 *
 * ckpt owns <checkpoint.dir> (ARCHITECTURE.md §5, shardrun-checkpoint(5)):
 * step_<8 digits>/ directories each holding one shard file per shard index
 * (shardfile.h) and manifest.yaml (manifest.h), written last; dot-named
 * temporary directories of saves in progress; the `latest` symlink; the
 * .lock file.  A save is four phases, each ended by an agreement of every
 * rank (ctl.h): begin (rank 0 makes the temporary directory), shards
 * (replica 0 of every shard index writes and fsyncs its file; the chunk
 * digests are gathered), commit (rank 0 writes and fsyncs the manifest,
 * renames the directory into place, fsyncs the parent, swaps `latest`,
 * applies retention), finish (nobody exits before the commit is known).
 *
 * The in-run functions are collectives: every rank calls them in the same
 * order; a failure on any rank fails the call on all ranks with the same
 * status. */
#ifndef SR_CKPT_H
#define SR_CKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "ctl.h"
#include "fsdp.h"
#include "manifest.h"
#include "model.h"
#include "optim.h"
#include "status.h"
#include "world.h"

typedef struct sr_ckpt sr_ckpt;

/* The checkpoint policy (checkpoint.* keys) and what a manifest records
 * about the job beyond the shards. */
typedef struct {
    const char *dir;    /* "" or NULL: no checkpoints */
    const char *resume; /* auto | never | PATH */
    int64_t keep, keep_every;
    bool async;           /* checkpoint.async */
    int64_t async_max_mb; /* checkpoint.async_max_mb (0: 25 % of the node's memory / its ranks) */
    uint64_t seed;
    const char *schedule_name; /* train.schedule as written in the job */
    sr_lr_schedule schedule;
    const char *isa;     /* the ISA level the ranks agreed on */
    int64_t mem_every;   /* checkpoint.memory.every_steps (0: no memory tier) */
    const char *mem_dir; /* checkpoint.memory.dir, before expansion */
    int mem_replicas;    /* checkpoint.memory.replicas: -1 auto, 0, 1 */
    int nkeys;           /* the job's key = value list, as `config show` prints it */
    const char *const *keys;
    const char *const *values;
} sr_ckpt_opts;

/* Where a run stands: optimizer steps done, the global data cursor
 * (sequences consumed) and, with data.mixture, each source's (mix.n = 0
 * without one, or from a checkpoint written before version 4). */
typedef struct {
    int64_t step;
    uint64_t cursor;
    sr_mix_state mix;
} sr_ckpt_progress;

/* Opens checkpointing for a run (collective).  With a dir, rank 0 creates
 * it, takes the fcntl lock on <dir>/.lock for the life of the returned
 * object (SR_ERR_CANTCREAT naming the holder when another process has it)
 * and removes temporary directories left by crashed saves.  Without one,
 * saves do nothing.  `o` and everything it points to must outlive the
 * object.  *out is set even on failure; close with sr_ckpt_close. */
sr_status sr_ckpt_open(sr_ckpt **out, const sr_ckpt_opts *o, const sr_world *w, sr_ctl *ctl, const sr_model *m,
                       sr_fsdp *f);
/* What the resume policy (checkpoint.resume: auto, never or PATH) allows
 * before the directory is opened: whether the run may resume (not never;
 * a PATH, or auto with a checkpoint.dir), and whether it will certainly
 * start fresh (never, or auto with no step_* entry in checkpoint.dir or no
 * directory).  The metrics file and model.init ask these. */
bool sr_ckpt_may_resume(const sr_ckpt_opts *o);
bool sr_ckpt_fresh_for_sure(const sr_ckpt_opts *o);
/* Releases the lock and frees.  NULL is fine. */
void sr_ckpt_close(sr_ckpt *c);
/* Marks a checkpoint's step directory (it holds the manifest) as one no
 * output of this process is written into (sr_fsio_guard_marker): its
 * files are deleted with it by retention.  main() calls it first. */
void sr_ckpt_guard_outputs(void);
bool sr_ckpt_enabled(const sr_ckpt *c);
/* Records the weights file a fresh run started from (model.init: its
 * path and SHA-256) for every later manifest; a resume takes them from
 * the checkpoint it loads. */
void sr_ckpt_set_init(sr_ckpt *c, const char *path, const char *sha256);
/* The data this run trains on (provenance.h; borrowed, must outlive c):
 * recorded in every manifest, and compared at resume with the record of
 * the checkpoint tried (before its weights are read): a difference is
 * SR_ERR_CONFIG naming the first one and data.allow_changed, or with
 * `allow_changed` a warning.  A checkpoint without a record resumes with a
 * notice. */
void sr_ckpt_set_data(sr_ckpt *c, const sr_data_record *data, bool allow_changed);

/* Applies the resume policy (collective): auto loads the newest step_* that
 * parses and verifies (falling back to older ones, each failure logged),
 * never and "no checkpoint" start fresh, a PATH loads exactly that
 * checkpoint.  On success *p holds the progress to continue from ({0, 0}
 * when fresh) and `how` says "fresh" or the step.  SR_ERR_DATA when
 * checkpoints exist but none verifies or the model shape differs,
 * SR_ERR_NOINPUT when PATH is missing. */
sr_status sr_ckpt_resume(sr_ckpt *c, sr_ckpt_progress *p, char *how, size_t how_len);

/* Saves the current shard state at progress *p with the commit protocol
 * (collective).  Any failure removes the temporary directory and leaves
 * earlier checkpoints untouched (SR_ERR_IO, SR_ERR_CANTCREAT).
 * *bytes_out (may be NULL) gets the bytes written. */
sr_status sr_ckpt_save(sr_ckpt *c, const sr_ckpt_progress *p, uint64_t *bytes_out);
/* An asynchronous save (checkpoint.async; collective).  Begins the save of
 * the current state at *p — the temporary directory, then a snapshot of
 * this rank's shard into the host buffers allocated at open (a download on
 * a device, a copy on the CPU) — and hands the file to a writer thread
 * that writes and hashes it; training goes on.  The writer issues no
 * collective: sr_ckpt_poll commits at a later step boundary.  A save still
 * in flight is waited for and committed first (*waited_for, may be NULL,
 * gets its step; -1 when none), and logged with the wait.  Without
 * async (off, or the snapshot did not fit) it is sr_ckpt_save. */
sr_status sr_ckpt_save_async(sr_ckpt *c, const sr_ckpt_progress *p, int64_t *waited_for);
/* At a step boundary (collective; `now_step` the steps done): asks every
 * rank whether its writer is done and, when all are, runs the commit
 * agreement (manifest last, rename, parent fsync, retention) exactly as a
 * synchronous save; the log line names the step the save started at and
 * the one it committed at.  `wait` joins this rank's writer first, so the
 * save commits now.  A failed write (a full disk: SR_ERR_IO) fails the
 * save on every rank, removes its temporary directory and leaves earlier
 * checkpoints untouched.  No save in flight: SR_OK at once, no message. */
sr_status sr_ckpt_poll(sr_ckpt *c, int64_t now_step, bool wait);
/* The one rule of the asynchronous snapshot: whether it fits, for a shard
 * whose one state takes `state_bytes` (the snapshot holds params, m and v:
 * *snapshot_bytes), on a node of `local_size` ranks — checkpoint.dir set,
 * checkpoint.async on, at most checkpoint.async_max_mb (0: 25 % of the
 * node's memory divided by its ranks).  The run's set-up,
 * the memory plan and `shardrun plan` all ask it. */
bool sr_ckpt_snapshot_fits(const sr_ckpt_opts *o, uint64_t state_bytes, int local_size, uint64_t *snapshot_bytes);
/* Whether saves are asynchronous; the step of the save in flight (-1 none). */
bool sr_ckpt_async(const sr_ckpt *c);
int64_t sr_ckpt_pending_step(const sr_ckpt *c);
/* The bytes one checkpoint of a job with this shard plan over a shard
 * group of S takes on disk: every shard file (header and three fp32
 * states per element) and a generous bound for the manifest (64 KiB for
 * the job's keys and the model, 100 bytes per chunk digest);
 * *largest_file (may be NULL) gets the largest shard file, the most one
 * rank writes. */
uint64_t sr_ckpt_planned_bytes(const sr_shardplan *plan, int S, uint64_t *largest_file);

/* The memory tier (ckpt_mem.c; checkpoint.memory.*): a second
 * checkpointer whose directory is each node's memory directory
 * (checkpoint.memory.dir expanded with %u %j %n %h, made 0700 by the
 * first rank of each node).  Every checkpoint.memory.every_steps steps
 * each rank snapshots its shard and a writer thread writes it there in the
 * persistent format and sends it to its buddy (the same position on the
 * next node) over the tier's own links; the buddy verifies it chunk by
 * chunk and keeps it in its own node's directory; the leads commit once
 * every file and replica is written and verified; at most 2 are kept.
 *
 * sr_ckpt_mem_open: collective, beside the persistent checkpointer
 *   `persist` (its options, and every memory manifest records its lineage
 *   and data; closed with it); off without
 *   mem_every or checkpoint.dir; a directory it may not use (another
 *   user's, not a directory) or a snapshot that does not fit turns the
 *   tier off with one warning; SR_ERR_PEER when its links fail, or the
 *   template's SR_ERR_CONFIG.  Closed with sr_ckpt_close.
 * sr_ckpt_mem_step: at a step boundary but the last (collective): the
 *   save in flight commits once every writer is done; when p->step is a
 *   multiple of checkpoint.memory.every_steps a save begins, after waiting
 *   for one still in flight (said, with the wait).  A failed save is a
 *   warning, never the run's end: SR_OK, except SR_ERR_PEER (a lost rank).
 * sr_ckpt_mem_remove: the job's last step is done: the leads remove their
 *   node's directory (collective).
 * sr_ckpt_resume_tiers: checkpoint.resume auto with the tier on: every
 *   node's lead verifies its directory's newest steps; the newest step
 *   newer than checkpoint.dir's newest that is complete across the nodes
 *   (own files and replicas, of the same save) is loaded after each node
 *   fetched the manifest and the files its ranks read from the node that
 *   holds them (rank 0 names each file's node); an incomplete or failing
 *   step falls back to the next, the last fallback being sr_ckpt_resume
 *   on `c`.  Otherwise exactly sr_ckpt_resume. */
sr_status sr_ckpt_mem_open(sr_ckpt **out, sr_ckpt *persist, const sr_transport_opts *tp);
sr_status sr_ckpt_mem_step(sr_ckpt *c, const sr_ckpt_progress *p);
sr_status sr_ckpt_mem_remove(sr_ckpt *c);
/* The host memory one rank's memory tier takes, for a shard whose one
 * state takes `state_bytes` on a node of `local_size` ranks in a job of
 * `nodes` nodes: the returned snapshot (params, m and v, under
 * sr_ckpt_snapshot_fits's rule, or 0: the tier would turn itself off) and
 * *tmpfs, its pages in the memory directory (charged to the job's cgroup):
 * 3 steps of its shard file (2 kept and the one being written) and, with
 * a replica, its buddy's.  0 and
 * 0 when the tier is off.  The run's memory plan and `shardrun plan` ask
 * it. */
uint64_t sr_ckpt_mem_host_bytes(const sr_ckpt_opts *o, uint64_t state_bytes, int local_size, int nodes,
                                uint64_t *tmpfs);
sr_status sr_ckpt_resume_tiers(sr_ckpt *c, sr_ckpt *m, sr_ckpt_progress *p, char *how, size_t how_len);

/* A committed save: the step it holds, the step at which it committed
 * (later than the first for an asynchronous save), the seconds from its
 * start to the commit, the bytes of its shard files (all ranks). */
typedef struct {
    int64_t started_step, committed_step;
    double duration_s;
    uint64_t bytes;
    bool async;
} sr_ckpt_commit;
/* The newest commit since the last call (each is handed out once), for
 * the metrics file's checkpoint events: true with *out set, false when
 * none. */
bool sr_ckpt_take_commit(sr_ckpt *c, sr_ckpt_commit *out);
/* The checkpoint directory sr_ckpt_resume loaded, or NULL (fresh). */
const char *sr_ckpt_resumed_from(const sr_ckpt *c);
/* Step of the newest checkpoint this run saved or resumed from; -1 none. */
int64_t sr_ckpt_last_step(const sr_ckpt *c);

/* step_<8 digits>: true with *step set. */
bool sr_ckpt_parse_step_name(const char *name, int64_t *step);
/* The step_* entries of the directory dirfd that are real directories,
 * newest first, at most max (0 when it cannot be read); returns the count.
 * The first step_* entry that is anything else (a symbolic link, a file)
 * is described in odd ("" when none); it is never followed. */
#define SR_CKPT_MAX_CANDIDATES 2048
int sr_ckpt_scan(int dirfd, int64_t *steps, int max, char *odd, size_t odd_len);

/* Reads the elements of `slices` (global [begin, end) at local offsets) of
 * the checkpoint directory dirfd (named `dir` in messages) described by mf
 * into host memory dst[k] + local (k = params, adam_m, adam_v; a NULL
 * dst[k] is skipped) or, with `into`, every state into the engine's state
 * at the slices' local offsets (sr_fsdp_state_write; the caller ends the
 * load with sr_fsdp_state_loaded), reading and verifying only the chunks that hold
 * them; *verified (may be NULL) counts the bytes verified.  SR_ERR_DATA
 * naming the file and chunk. */
sr_status sr_ckpt_read_slices(int dirfd, const char *dir, const sr_manifest *mf, const sr_slice *slices, int nslices,
                              float *dst[SR_NSTATE], sr_fsdp *into, uint64_t *verified);

#endif
