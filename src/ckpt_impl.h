/* ckpt_impl.h — what the files of the ckpt module share (ckpt.c: load and
 * resume; ckpt_dir.c: open, lock, retention; ckpt_save.c: the save phases
 * and the commit; ckpt_async.c: the asynchronous writer): the directory's
 * state and the module-wide helpers.  Internal to the module. */
#ifndef SR_CKPT_IMPL_H
#define SR_CKPT_IMPL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "fsio.h"
#include "manifest.h"
#include "status.h"

#define MAX_CANDIDATES SR_CKPT_MAX_CANDIDATES

struct sr_ckpt {
    const sr_ckpt_opts *o;
    const sr_world *w;
    sr_ctl *ctl;
    const sr_model *model;
    sr_fsdp *f;
    char *dir; /* NULL: no checkpoint.dir; else the path it resolved to at open */
    int dirfd; /* that directory, opened once: entries are opened relative to it */
    int lock_fd;
    int64_t last_step;
    bool async;             /* saves are asynchronous (checkpoint.async, and the snapshot fits) */
    float *snap[SR_NSTATE]; /* the snapshot: params, m, v of this rank's slices, end to end */
    uint64_t snap_elements; /* per state (0: this rank writes no file) */
    struct pending *pend;   /* the save in flight, or NULL */
    /* model.init of this lineage (sr_ckpt_set_init, or the resumed
     * manifest's), recorded in every manifest */
    char init_path[1024], init_sha256[65];
    const sr_data_record *data; /* what this run trains on (sr_ckpt_set_data), or NULL */
    bool data_allow_changed;
    char resumed_from[PATH_MAX]; /* the checkpoint sr_ckpt_resume loaded, or "" */
    sr_ckpt_commit commit;       /* the newest commit not yet taken (sr_ckpt_take_commit) */
    bool have_commit;
    /* the memory tier (ckpt_mem.c): a checkpointer of its own whose dir is
     * this node's memory directory; `lead` commits there (the first rank of
     * each node, where the persistent one commits on rank 0) */
    struct ckpt_tier *tier; /* NULL: the persistent checkpointer */
    bool lead;
    sr_ckpt *memtier; /* the persistent checkpointer's memory tier (closed with it), or NULL */
};

/* The rank that makes the temporary directory and commits: rank 0 of the
 * persistent checkpointer, the lead of each node in the memory tier. */
static inline bool ckpt_committer(const sr_ckpt *c) { return c->tier ? c->lead : sr_ctl_rank(c->ctl) == 0; }

/* Paths are bounded by PATH_MAX, messages by their buffers. */
#define FMT(buf, ...) sr_fmt(buf, sizeof buf, __VA_ARGS__)

/* The engine's state k as shard-file bytes: `at` is the byte offset in
 * its local buffer (fsdp.h: the engine copies, stages and declares). */
typedef struct {
    sr_fsdp *f;
    int k;
} state_io;

/* One rank's record in the shards phase: its word, then its chunk digests. */
typedef struct {
    size_t bytes;     /* per record */
    uint64_t nchunks; /* room for digests */
    unsigned char *all;
} records;

void ckpt_crash_site(const char *site, int64_t step);
sr_status ckpt_state_get(void *ctx, uint64_t at, void *dst, size_t bytes);
/* Names a save writes into a step directory (a leftover's files). */
bool ckpt_written_by_save(const char *name, void *ctx);
/* Names a committed checkpoint's manifest lists, and the manifest. */
bool ckpt_named_by_manifest(const char *name, void *ctx);
/* Removes step directory `name` of the checkpoint directory: the files
 * `owned` accepts, then the directory; what else is there stays, named in a
 * warning.  Returns sr_fsio_remove_dir_at's result (0: gone). */
int ckpt_remove_step_dir(const sr_ckpt *c, const char *name, sr_fsio_owned owned, void *ctx);
/* "12.3 MiB" or "4.56 GiB" into buf. */
const char *ckpt_size_str(char *buf, size_t n, double bytes);
/* Phase 1: rank 0 makes the temporary directory. */
sr_status ckpt_save_begin(sr_ckpt *c, const char *tmp);
/* The records of a save: room for every rank's word and digests, and this
 * rank's own record (*mine, freed by the caller). */
sr_status ckpt_records_alloc(sr_ckpt *c, const sr_manifest *proto, records *rec, unsigned char **mine);
/* Every rank's (status, bytes, digests) gathered to every rank; the first
 * failing rank's status and message. */
sr_status ckpt_gather_records(sr_ckpt *c, records *rec, const unsigned char *mine, uint64_t *total,
                              bool *transport_failed);
/* write_mine as a span of log.trace_steps' window (a background write
 * begun in the window may end after it: the trace file waits for it). */
void ckpt_traced_write(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                       unsigned char *mine, float *const *snap, const char *what, int64_t t0);
/* Phase 3: rank 0 commits; on failure the temporary directory goes. */
sr_status ckpt_save_commit(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const char *final,
                           const records *rec, sr_status st);
void ckpt_pending_free(sr_ckpt *c);
/* The snapshot of this rank's state (replica 0 ranks: params, m, v of its
 * slices) in host memory allocated and touched now, when every rank's fits
 * checkpoint.async_max_mb; otherwise saves stay synchronous and rank 0
 * says why.  Collective. */
sr_status ckpt_setup_async(sr_ckpt *c);
/* Retention (rank 0, after a commit): keep the newest checkpoint.keep, the
 * multiples of checkpoint.keep_every and the one just committed; delete the
 * rest by renaming each to a dot name first (a crash mid-delete leaves a
 * name the loader ignores and the next run removes). */
void ckpt_retain(sr_ckpt *c, int64_t committed);
/* One rank's part of loading the checkpoint in `path` (dirfd, or -1 with
 * errno), then the agreement of every rank: on success *p, `how`, the
 * resumed-from path and the lineage are set; *any_shape says whether some
 * rank found another model shape (no fallback then).  The agreed status;
 * the caller then calls sr_fsdp_state_loaded. */
sr_status ckpt_load_agreed(sr_ckpt *c, const char *path, int dirfd, sr_ckpt_progress *p, char *how, size_t how_len,
                           bool *any_shape);
/* The memory tier's writer, after this rank's own file (ckpt_mem.c): the
 * replica exchange with the buddies; a failure goes into *mine. */
void ckpt_tier_replicate(sr_ckpt *c, int64_t step, const char *tmp, int64_t nchunks, unsigned char *mine);
/* Stops the memory tier's links, joins its writer, frees the tier. */
void ckpt_tier_free(sr_ckpt *c);
/* The memory tier's log line of a commit (ckpt_mem.c). */
void ckpt_tier_committed(sr_ckpt *c, int64_t step, int64_t now_step, uint64_t total, double snap, double write,
                         double took);

#endif
