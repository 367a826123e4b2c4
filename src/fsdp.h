/* fsdp.h — the fully sharded data-parallel engine (FSDP2 / ZeRO-3 semantics).
 *
 * fsdp owns what each rank keeps of the model — for every unit of the
 * shard plan (shardplan.h) a contiguous, padded 1/S shard of the fp32
 * master parameters, gradients and (through sr_optim) Adam moments — and
 * the transient full-unit buffers: gathered before a unit computes
 * (prefetched sharding.prefetch units ahead on the progress thread), freed
 * or kept per sharding.reshard_after_forward, gradients reduce-scattered as
 * soon as a unit's backward ends (overlapping the next unit's backward),
 * HSDP all-reduce across replicas (mesh.h), mixed precision (param dtype
 * for gathered parameters, reduce dtype for reductions).  It feeds the
 * model's forward and backward through an sr_param_source.  Its
 * collectives travel as the data plane decides (plane.h); checkpoints,
 * model.init and dumps reach its state only through the calls below
 * (fsdp_state.c), and it reports its own memory by category (fsdp_plan.c)
 * for the plan. */
#ifndef SR_FSDP_H
#define SR_FSDP_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "mem.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "plane.h"
#include "shardplan.h"

typedef struct sr_fsdp sr_fsdp;

/* What the engine needs from the job (sharding.* keys and the seed). */
typedef struct {
    int blocks_per_unit;
    int64_t reshard_blocks, reshard_root; /* SR_RESHARD_TRUE, SR_RESHARD_FALSE or N >= 2 (config.h) */
    sr_dtype param_dtype, reduce_dtype;   /* SR_DT_F32 or SR_DT_BF16 */
    int prefetch_forward, prefetch_backward;
    bool grad_sync_per_step; /* false: reduce-scatter every micro-batch */
    uint64_t seed;           /* initialisation of the master shard */
    /* sharding.offload.* (device tables with separate memory only):
     * optimizer keeps the fp32 master, Adam m, v and the gradient shard in
     * host memory (pinned unless !pin_memory) and runs AdamW on the host;
     * params also drops the device copy of the parameter shard */
    bool offload_optimizer, offload_params, pin_memory;
} sr_fsdp_opts;

/* Declares the engine's groups through the data plane (shard, replicate,
 * reshard-N; call before sr_transport_connect and sr_plane_start), plans
 * the units, allocates the shard buffers and initialises the master shard
 * from the seed.  The mesh must be valid and every reshard N must divide S
 * (checked by the caller).  The engine's collectives travel as `plane`
 * decides.  SR_ERR_INTERNAL when out of memory.  *out is set even on
 * failure; free with sr_fsdp_free. */
sr_status sr_fsdp_init(sr_fsdp **out, sr_model *model, const sr_mesh *mesh, const sr_fsdp_opts *o, sr_plane *plane);
void sr_fsdp_free(sr_fsdp *f);

/* Step protocol: begin_step starts a step (nothing is zeroed: the
 * step's first writes overwrite); for each micro-batch
 * sr_fsdp_forward then sr_fsdp_backward (last = the step's last
 * micro-batch); finish_grads waits for every reduction and returns the
 * global gradient norm and this rank's summed per-token losses since the
 * last take, read back together (the step's one host wait);
 * take_loss_sum reads the loss sum alone (evaluation); optimizer_step
 * applies AdamW to the shards (or ends a step finish_grads enqueued it
 * for).  Failures of a collective (SR_ERR_PEER) or
 * an allocation (SR_ERR_INTERNAL) are returned by the pass they happened
 * in.  The engine's buffers live on the model's device table. */
void sr_fsdp_begin_step(sr_fsdp *f);
/* dloss: the training forward's (sr_model_forward_train: the fused
 * classifier where the table has one); 0 keeps the logits intact */
sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B, float dloss);
sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch);
sr_status sr_fsdp_take_loss_sum(sr_fsdp *f, double *loss_sum);
/* The optimizer step finish_grads may enqueue ahead of its host wait:
 * AdamW's step (1-based), learning rate and constants, and the clipping
 * threshold (train.grad_clip; 0: none). */
typedef struct {
    int64_t step;
    double lr;
    const sr_adamw_opts *adamw;
    double clip;
} sr_fsdp_update;
/* `early` (may be NULL): where the whole norm is this rank's (a shard
 * group of one) and the shard is on the device (no offload), the step's
 * AdamW is enqueued before the host wait, its clipping scale computed on
 * the device from the sum of squares (bitwise the host's), so the device
 * does not drain while the host reads the scalars; optimizer_step then
 * only ends the step.  The caller checks the loss and the norm before the
 * next forward (a non-finite step has updated the parameters it then
 * refuses to use). */
sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *loss_sum, double *grad_norm, const sr_fsdp_update *early);
void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale);
/* Evaluation forward (no gradients); frees every gathered unit afterwards.
 * The losses join the sum that take_loss_sum reads. */
sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B);

/* ---- where the persistent state lives (fsdp_state.c).  Checkpoints,
 * model.init, samples and dumps reach the state only through these: the
 * engine stages, copies its offloaded host state and declares the accesses
 * to the happens-before checker. */

/* This rank's slices of the global parameter vector (real elements, no
 * padding) and where they sit in the local state buffers (`local`
 * offsets, local_size floats per state); the plan of every shard index,
 * the mesh.  Replicas (HSDP) hold identical state.  No side effect. */
typedef struct {
    const sr_slice *slices;
    int nslices;
    size_t local_size;
    const sr_shardplan *plan;
    const sr_mesh *mesh;
} sr_fsdp_layout;
void sr_fsdp_layout_get(const sr_fsdp *f, sr_fsdp_layout *out);

/* The states: the fp32 master, Adam's m and v (manifest.h SR_NSTATE). */
enum { SR_STATE_PARAMS, SR_STATE_M, SR_STATE_V, SR_STATE_COUNT };

/* Orders the reads that follow after the last optimizer step (the host
 * optimizer's job, the device's update; on the CPU tables one host wait).
 * Call outside a step, before a series of sr_fsdp_state_read. */
sr_status sr_fsdp_state_sync(sr_fsdp *f);
/* n floats of state k from local offset `local` into host memory, or from
 * host memory into the state (outside a step; a load ends with
 * sr_fsdp_state_loaded).  SR_ERR_INTERNAL on a failed device copy. */
sr_status sr_fsdp_state_read(sr_fsdp *f, int k, size_t local, size_t n, float *host);
sr_status sr_fsdp_state_write(sr_fsdp *f, int k, size_t local, size_t n, const float *host);
/* Host memory that state copies are fastest into (pinned where the state
 * is device memory), accounted in `cat`; NULL when out of memory.  Free
 * with sr_fsdp_host_free (before sr_fsdp_free). */
void *sr_fsdp_host_alloc(sr_fsdp *f, sr_mem_cat cat, size_t bytes);
void sr_fsdp_host_free(sr_fsdp *f, void *p);
/* After state was written: refreshes what derives from the master shard
 * (with offload, the device copy of the parameters; with bf16 parameters,
 * the bf16 copy the gathers read). */
sr_status sr_fsdp_state_loaded(sr_fsdp *f);

/* The full model (n_params floats, unit-major) into `full` on every rank:
 * collectives over the shard group, so every rank calls it, outside a step. */
sr_status sr_fsdp_gather_params(sr_fsdp *f, float *full);
/* The step's full gradient into `full` (n_params floats), after
 * sr_fsdp_finish_grads and before the optimizer step: one rank without
 * offload only, else SR_ERR_CONFIG. */
sr_status sr_fsdp_gather_grads(sr_fsdp *f, float *full);

/* ---- the engine's memory (fsdp_plan.c): what sr_fsdp_init allocates for
 * one rank, per category of mem.h, from the sizing functions its
 * allocations use — on the device table (`device`: its state space) and,
 * with offload on a table with separate memory, in host memory (`host`:
 * pinned unless sharding.offload.pin_memory is false; Adam's m and v
 * plain).  R: the mesh's replicas (one rank, S and R 1, with fp32
 * reductions writes its gradients straight into the gradient shard: no
 * accumulation buffer or reduction pool; not offload per_step, whose
 * shard is on the host).  act: the dtype the ops compute in (a gathered unit of
 * another dtype is widened into a stage).  state_shard: one fp32 state of
 * the shard (the checkpoint snapshot holds three). */
typedef struct {
    size_t device[SR_MEM_NCAT], host[SR_MEM_NCAT];
    size_t state_shard;
} sr_fsdp_bytes;
sr_status sr_fsdp_plan(const sr_shardplan *pl, const sr_fsdp_opts *o, int R, sr_dtype act, bool separate_memory,
                       sr_fsdp_bytes *out);

/* Units (block units + the root) for logs. */
int sr_fsdp_units(const sr_fsdp *f);

#endif
