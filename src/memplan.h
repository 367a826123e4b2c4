/* memplan.h — how much memory a run will need, known before it allocates.
 *
 * memplan owns the planned peak of one rank, per accounting category
 * (mem.h), computed from the job alone — model dims, micro-batch, mesh,
 * engine options — by the same arithmetic the run's allocations follow:
 * shards from the shard plan, activations from the model's own table, full
 * units and reduction buffers from the engine's rules.  A run checks the
 * plan against the hard limits of its process (RLIMIT_AS, RLIMIT_DATA, the
 * cgroup's memory.max shared by the node's ranks) before it allocates
 * anything the model sizes, so a job that cannot fit is refused at once
 * (78) instead of dying to the kernel's OOM killer an hour later. */
#ifndef SR_MEMPLAN_H
#define SR_MEMPLAN_H

#include <stddef.h>

#include "config.h"
#include "device.h"
#include "fsdp.h"
#include "job.h"
#include "mem.h"
#include "mesh.h"
#include "model.h"
#include "status.h"

/* Fixed overhead assumed on top of the categories: code, libraries,
 * OpenBLAS's and glibc's own buffers.  Thread stacks and per-thread arenas
 * are added per thread (SR_MEMPLAN_PER_THREAD). */
#define SR_MEMPLAN_OVERHEAD ((size_t)256 << 20)
#define SR_MEMPLAN_PER_THREAD ((size_t)80 << 20)

typedef struct {
    size_t bytes[SR_MEM_NCAT]; /* planned peak per category (saturating) */
    size_t total;              /* their sum */
    size_t overhead;           /* fixed + per thread */
    size_t state_shard;        /* one fp32 state (params, m or v) of this rank's shard */
    size_t comm_transport;     /* of comm: the TCP transport's chunk buffers (host memory) */
} sr_memplan;

/* The plan a run of this job makes (sr_memplan_run before it allocates,
 * and `shardrun plan`): one rank of a run computing with `ops` (NULL: the
 * CPU ops; the activations, the ops' workspace and the widening stage
 * depend on them), from the job's dims and engine options, plus the
 * asynchronous checkpoint's snapshot (ckpt_staging) where the plan is host
 * memory and it fits checkpoint.async_max_mb, and with the offloaded
 * categories taken out of a device's plan (`separate_memory`: a GPU or
 * the fake device).  `offloaded` (may be NULL) receives the host memory
 * offload adds (the master, the gradient shard and landing buffers in
 * pinned memory unless sharding.offload.pin_memory is false; Adam's m and
 * v in plain host memory).  A table of `kind` in a world of `world_size`
 * whose data plane is NCCL (plane.h sr_plane_needs_nccl) allocates no TCP
 * chunk buffers.  SR_ERR_INTERNAL when out of memory for the (small)
 * tables it builds. */
sr_status sr_memplan_job(sr_memplan *p, sr_memplan *offloaded, const sr_config *cfg, const sr_job *job,
                         const sr_mesh *mesh, int micro_batch, int threads, const sr_ops *ops, sr_dev_kind kind,
                         bool separate_memory, int local_size, int world_size);

/* A run's plan on its table `dev` in world `w`, checked before anything
 * sized by the model is allocated: sr_memplan_job, then, where the plan is
 * host memory, the process's hard limits (RLIMIT_AS, RLIMIT_DATA, the
 * cgroup's memory.max shared by the node's ranks: SR_ERR_CONFIG naming the
 * limit, the largest categories and the cheapest fix; a warning above
 * MemAvailable divided by the local ranks), and where the table has memory
 * of its own its free memory (SR_ERR_CONFIG naming both sizes). */
sr_status sr_memplan_run(sr_memplan *p, const sr_config *cfg, const sr_job *job, const sr_mesh *mesh, int micro_batch,
                         int threads, const sr_ops *ops, const sr_dev *dev, const sr_world *w);

/* "1.5 GiB", "320.0 MiB", for messages (buf of 32 bytes or more). */
const char *sr_memplan_size(size_t bytes, char *buf, size_t n);

#endif
