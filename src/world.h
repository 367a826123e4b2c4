/* world.h — who this process is in the job: the bootstrap (PMIx, else
 * Slurm's PMI2) and the key-value all-gather the transports use to
 * exchange addresses and secrets.
 *
 * world owns the bootstrap's connection and the choice between the two:
 * PMIx when its server answers, else PMI2 when its environment is present
 * (srun --mpi=pmi2; pmi2.h owns that library), else one process.  PMI2
 * gives rank, size and, from PMI_process_mapping, the placement; its
 * fences have no timeout, so a watchdog ends a fence that outlives
 * comm.timeout_s with 69.  PMIx rules (ARCHITECTURE.md §1; the Slurm facts are in shardrun(1), SLURM):
 * PMIx_Init succeeds -> rank from the returned proc, job and local size with
 * the wildcard rank, local rank, node id and host name with the own rank,
 * integers read by their actual type.  PMIx_Init fails -> inside a
 * multi-task srun step (SLURM_STEP_ID set, more than one task) without
 * PMI2's environment it is a launch error (srun without --mpi=pmix or
 * --mpi=pmi2, SR_ERR_CONFIG); otherwise one process.  PMIx_Init that does not return within SHARDRUN_PMIX_INIT_TIMEOUT
 * seconds (default 300) ends the process with 69 from a watchdog thread:
 * the one place outside main() that exits, because nothing can interrupt
 * PMIx_Init and nothing is held yet. */
#ifndef SR_WORLD_H
#define SR_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct {
    int rank, size;             /* in the job */
    int local_rank, local_size; /* on this node */
    int node_id;
    int num_nodes; /* nodes of the job (PMIX_NUM_NODES; 1 when not given) */
    char host[256];
    char job_id[300]; /* SLURM_JOB_ID, else the PMIx job id, else "-" */
    char nspace[256];
    long long restart; /* SLURM_RESTART_COUNT: how often Slurm requeued the job (0 when unset) */
    bool pmix;         /* true when a PMIx server answered */
    bool pmi2;         /* true when bootstrapped through Slurm's PMI2 */
} sr_world;

/* Bootstraps.  Returns SR_OK (single process when no PMIx server and not in
 * a multi-task srun step), or SR_ERR_CONFIG for srun without --mpi=pmix or
 * a bad SHARDRUN_PMIX_INIT_TIMEOUT, or SR_ERR_PEER when the PMIx server
 * fails.  Exits 69 itself when PMIx_Init outlives its limit (see above).
 * Close with sr_world_close. */
sr_status sr_world_init(sr_world *w);
void sr_world_close(sr_world *w);

/* "pmix", "pmi2" or "none": the bootstrap the start line names. */
const char *sr_world_bootstrap(const sr_world *w);

/* Whether this rank's launcher is gone (waiting up to grace_s for a
 * witness to see it), asked before a rank blames a peer:
 * when the launcher dies, the ranks on its node notice at slightly
 * different moments, and the first to exit closes its connections, so a
 * slower sibling sees that peer go before its own PMIx event fires.  The
 * witnesses are synchronous: this process's parent, when the parent was
 * the PMIx server, has changed, or the server's listening TCP socket found
 * at start is no longer open.  On true, msg holds the launcher message
 * (the same words as the asynchronous witnesses).  False when no witness
 * was found at start (a single process, a server without a TCP socket). */
bool sr_world_launcher_gone(char *msg, size_t size, double grace_s);

/* The launch decision without PMIx, from the environment (exposed for
 * tests): true when the environment is a multi-task srun step. */
bool sr_world_in_multitask_srun(void);

/* All-gather of one small blob per rank through PMIx Put/Commit/Fence
 * (collect data)/Get under `key` (PMI2: Put/Fence/Get of hex chunks).  `out` receives size * len bytes, rank r's
 * blob at r * len.  Every rank must pass the same len.  The fence gives up
 * after timeout_s (PMIX_TIMEOUT), so a rank that died before it cannot
 * hang the others.  Single process: a copy.  Returns SR_ERR_PEER naming
 * the PMIx error. */
sr_status sr_world_allgather(sr_world *w, const char *key, const void *blob, size_t len, void *out, double timeout_s);

/* A verdict every rank gives (0 = fine) through the same Put/Fence/Get,
 * without allocating: *rank and *value are the lowest rank with a non-zero
 * verdict and that verdict, or -1 and 0.  Single process: its own. */
sr_status sr_world_first_nonzero(sr_world *w, const char *key, int32_t mine, int *rank, int32_t *value,
                                 double timeout_s);

#endif
