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
 * model's forward and backward through an sr_param_source. */
#ifndef SR_FSDP_H
#define SR_FSDP_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "comm_nccl.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
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

/* Declares the engine's groups on the transport (shard, replicate,
 * reshard-N; call before sr_transport_connect), plans the units, allocates
 * the shard buffers and initialises the master shard from the seed.  The
 * mesh must be valid and every reshard N must divide S (checked by the
 * caller).  SR_ERR_INTERNAL when out of memory.  *out is set even on
 * failure; free with sr_fsdp_free. */
sr_status sr_fsdp_init(sr_fsdp **out, sr_model *model, const sr_mesh *mesh, const sr_fsdp_opts *o, sr_transport *tp);
/* The groups the engine declared, in declaration order (shard, replicate,
 * then the reshard-N groups): at most `max` into out; returns the count. */
int sr_fsdp_groups(const sr_fsdp *f, sr_group **out, int max);
/* Routes the engine's collectives over groups that have a device
 * communicator through the NCCL plane `n` (comm_nccl.h; NULL: none). */
void sr_fsdp_set_nccl(sr_fsdp *f, sr_nccl *n);
void sr_fsdp_free(sr_fsdp *f);

/* Step protocol: begin_step zeroes gradients; for each micro-batch
 * sr_fsdp_forward then sr_fsdp_backward (last = the step's last
 * micro-batch); finish_grads waits for every reduction and returns the
 * global gradient norm and this rank's summed per-token losses since the
 * last take, read back together (the step's one host wait);
 * take_loss_sum reads the loss sum alone (evaluation); optimizer_step
 * applies AdamW to the shards.  Failures of a collective (SR_ERR_PEER) or
 * an allocation (SR_ERR_INTERNAL) are returned by the pass they happened
 * in.  The engine's buffers live on the model's device table. */
void sr_fsdp_begin_step(sr_fsdp *f);
sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B);
sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch);
sr_status sr_fsdp_take_loss_sum(sr_fsdp *f, double *loss_sum);
sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *loss_sum, double *grad_norm);
void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale);
/* Evaluation forward (no gradients); frees every gathered unit afterwards.
 * The losses join the sum that take_loss_sum reads. */
sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B);

/* This rank's persistent state, for checkpoints: the slices of the global
 * parameter vector it owns (real elements, no padding) and where they sit
 * in the local buffers of master parameters and Adam moments — memory of
 * `dev` (device memory when dev->separate_memory: reach it by copies; NULL
 * with offload: host memory).
 * Replicas (HSDP) hold identical state.  Taking the view orders the d2h
 * stream after the last AdamW, so the state can be downloaded. */
typedef struct {
    sr_dev *dev;
    const sr_slice *slices;
    int nslices;
    float *params, *m, *v; /* local_size floats each */
    size_t local_size;
    const sr_shardplan *plan; /* every shard index's slices */
    const sr_mesh *mesh;
} sr_fsdp_shard_state;
void sr_fsdp_shard_state_view(sr_fsdp *f, sr_fsdp_shard_state *out);

/* After a checkpoint loaded the state into the view's buffers: refreshes
 * what derives from the master shard (with offload, the device copy of the
 * parameters; nothing otherwise). */
sr_status sr_fsdp_state_loaded(sr_fsdp *f);

/* Units (block units + the root) for logs. */
int sr_fsdp_units(const sr_fsdp *f);

/* Writes the full fp32 model (unit-major, padding stripped) to `path` on
 * world rank 0, atomically; every rank must call it (it gathers).  Format:
 * "SRPARAMS", int32 n_tensors, then per tensor {char name[64], int64
 * numel}, then the floats of every tensor in table order.
 * SR_ERR_CANTCREAT / SR_ERR_IO on rank 0, SR_ERR_PEER anywhere. */
sr_status sr_fsdp_dump_params(sr_fsdp *f, const char *path);
/* The full model (n_params floats, unit-major) into `full` on every rank:
 * collectives over the shard group, so every rank calls it, outside a step. */
sr_status sr_fsdp_gather_params(sr_fsdp *f, float *full);
/* The full gradient of the step (mean loss, before clipping) in the same
 * format, after sr_fsdp_finish_grads and before the optimizer step: one
 * rank without offload only (SHARDRUN_TEST_ORACLE), else SR_ERR_CONFIG. */
sr_status sr_fsdp_dump_grads(sr_fsdp *f, const char *path);

#endif
