/* fsdp.h — the fully sharded data-parallel engine (FSDP2 / ZeRO-3 semantics).
 *
 * fsdp owns what each rank keeps of the model — for every unit (a group of
 * sharding.blocks_per_unit transformer blocks, or the root: embeddings and
 * final LayerNorm) a contiguous, padded 1/S shard of the fp32 master
 * parameters, gradients and (through sr_optim) Adam moments — and the
 * transient full-unit buffers: gathered before a unit computes (prefetched
 * sharding.prefetch units ahead on the progress thread), freed or kept per
 * sharding.reshard_after_forward, gradients reduce-scattered as soon as a
 * unit's backward ends (overlapping the next unit's backward), HSDP
 * all-reduce across replicas, mixed precision (param_dtype for gathered
 * parameters, reduce_dtype for reductions).  It implements sr_param_source
 * for the model's forward and backward.
 *
 * Mesh: world rank = replica * S + shard index; shard groups are S
 * consecutive ranks, replicate groups the ranks with the same shard index. */
#ifndef SR_FSDP_H
#define SR_FSDP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "world.h"

typedef struct sr_fsdp sr_fsdp;

/* Builds the mesh and groups (declared on the transport; call before
 * sr_transport_connect), the units and the shard buffers, and initialises
 * the master shard from the seed.  Returns SR_ERR_CONFIG for a mesh or
 * reshard size that does not fit the world, SR_ERR_INTERNAL when out of
 * memory. */
sr_status sr_fsdp_init(sr_fsdp **out, sr_model *model, const sr_config *cfg, sr_world *w, sr_transport *tp);
void sr_fsdp_free(sr_fsdp *f);

/* The parameter source for sr_model_forward / sr_model_backward. */
const sr_param_source *sr_fsdp_source(sr_fsdp *f);

/* Step protocol: begin_step zeroes gradients; for each micro-batch
 * sr_fsdp_forward then sr_fsdp_backward (last = the step's last
 * micro-batch); finish_grads waits for every reduction and returns the
 * global gradient norm; optimizer_step applies AdamW to the shards. */
void sr_fsdp_begin_step(sr_fsdp *f);
sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B, double *loss_sum);
sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch);
sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *grad_norm);
void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_config *cfg, float grad_scale);
/* Evaluation forward (no gradients); frees every gathered unit afterwards. */
sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B, double *loss_sum);

/* Sum of a double over the world (losses); the _n form sums n doubles in
 * place (one collective). */
sr_status sr_fsdp_sum_world(sr_fsdp *f, double *value);
sr_status sr_fsdp_sum_world_n(sr_fsdp *f, double *values, int n);

/* The group of all ranks in world-rank order (checkpoint agreement). */
sr_group *sr_fsdp_world_group(sr_fsdp *f);

/* This rank's persistent state, for checkpoints: the slices of the global
 * parameter vector it owns (real elements, no padding) and where they sit
 * in the local buffers of master parameters and Adam moments.  Replicas
 * (HSDP) hold identical state; shard index 0 holds the most elements. */
typedef struct {
    const sr_slice *slices;
    int nslices;
    float *params, *m, *v; /* local_size floats each */
    size_t local_size;
    int shard_index, shard_count, replica_index, replica_count;
    size_t max_shard_elements; /* real elements held by shard index 0 */
} sr_fsdp_shard_state;
void sr_fsdp_shard_state_view(sr_fsdp *f, sr_fsdp_shard_state *out);
/* The slices (global [begin, end), local offset) that shard index `shard`
 * owns, in unit order; returns how many (at most max are written). */
int sr_fsdp_shard_slices(const sr_fsdp *f, int shard, sr_slice *out, int max);

/* Mesh figures for logs. */
int sr_fsdp_shard_size(const sr_fsdp *f);
int sr_fsdp_replicate_size(const sr_fsdp *f);
int sr_fsdp_units(const sr_fsdp *f);
size_t sr_fsdp_largest_block_unit_bytes(const sr_fsdp *f);
size_t sr_fsdp_kept_unit_bytes(const sr_fsdp *f);

/* Writes the full fp32 model (unit-major, padding stripped) to `path` on
 * world rank 0; every rank must call it (it gathers).  Format: "SRPARAMS",
 * int32 n_tensors, then per tensor {char name[64], int64 numel}, then the
 * floats of every tensor in table order.  SR_ERR_CANTCREAT / SR_ERR_IO. */
sr_status sr_fsdp_dump_params(sr_fsdp *f, const char *path);

#endif
