/* optim.h — AdamW on a shard, the learning-rate schedule, gradient norms.
 *
 * optim owns the Adam moment buffers (m, v) of the slices of the parameter
 * vector a rank holds.  The optimizer touches only those slices; which
 * elements decay comes from the model's tensor table (rule: tensors with two
 * or more dimensions decay — matrices and the embeddings — biases and
 * LayerNorm parameters do not; nanoGPT's rule).  The learning rate at step s
 * depends only on s and the current schedule (ARCHITECTURE.md §3). */
#ifndef SR_OPTIM_H
#define SR_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "model.h"
#include "shardplan.h"
#include "status.h"

/* The learning-rate schedule (train.* keys). */
typedef struct {
    int schedule; /* SR_SCHED_COSINE, SR_SCHED_LINEAR, SR_SCHED_CONSTANT (config.h) */
    double lr, min_lr;
    int64_t warmup_steps, steps;
} sr_lr_schedule;

/* AdamW's constants (train.* keys). */
typedef struct {
    double beta1, beta2, eps, weight_decay;
} sr_adamw_opts;

typedef struct {
    sr_slice *slices; /* what this rank owns */
    int nslices;
    size_t local_size;      /* floats in the shard buffers (with padding) */
    float *m, *v;           /* Adam moments, laid out like the shard (SR_MEM_OPTIM_SHARD, on dev) */
    sr_adamw_segment *segs; /* the slices cut at tensor boundaries, with each tensor's decay rule */
    int nsegs;
    sr_adamw_segment *dsegs; /* the same in the table's memory (SR_MEM_OPTIM_SHARD): what a device's launch reads */
    void *params16;          /* the parameters' bf16 copy each step writes too (device.h), or NULL: the owner sets it */
    const sr_model *model;
    sr_dev *dev;
} sr_optim;

/* Allocates zeroed moments on `dev` for a shard of `local_size` floats
 * made of the given slices (copied), and the segment list in its memory
 * (sr_optim_table_bytes of the model's tensors and the slices: what one
 * AdamW launch on a device reads).  sr_optim_init is the one-slice form
 * for [begin, end).  Returns SR_ERR_INTERNAL when out of memory.  Free
 * with sr_optim_free (also after a failed init). */
sr_status sr_optim_init_slices(sr_optim *opt, const sr_model *model, sr_dev *dev, const sr_slice *slices, int n,
                               size_t local_size);
sr_status sr_optim_init(sr_optim *opt, const sr_model *model, sr_dev *dev, size_t begin, size_t end);
/* The bytes of the device's segment list for a model of n_tensors tensors
 * and a shard of nslices slices (the list's capacity; the memory plan
 * counts the same, SR_MEM_OPTIM_SHARD on a device). */
size_t sr_optim_table_bytes(int n_tensors, int nslices);
void sr_optim_free(sr_optim *opt);

/* One AdamW step (1-based `step` for bias correction) at learning rate lr
 * on the shard buffers params/grads (memory of the optimizer's table),
 * launched on its compute stream; grads are multiplied by `grad_scale`
 * first (clipping).  Decoupled weight decay: p -= lr * wd * p for decaying
 * tensors.  Padding between slices is not touched. */
void sr_optim_step(sr_optim *opt, float *params, const float *grads, int64_t step, double lr, const sr_adamw_opts *o,
                   float grad_scale);

/* sr_optim_step with the clipping scale computed where the step runs
 * (device.h sr_adamw_launch.sumsq): from the sum of squares *sumsq, a
 * double in the optimizer table's memory written earlier on its compute
 * stream, and the clipping threshold `clip` (0: none). */
void sr_optim_step_clipped(sr_optim *opt, float *params, const float *grads, int64_t step, double lr,
                           const sr_adamw_opts *o, const double *sumsq, double clip);

/* The launch sr_optim_step makes (every segment), for a caller that runs
 * it in parts (the offload pipeline: a unit's segments at a time). */
sr_adamw_launch sr_optim_launch(const sr_optim *opt, float *params, const float *grads, int64_t step, double lr,
                                const sr_adamw_opts *o, float grad_scale);

/* Learning rate for 0-based optimizer step `s`: linear warmup over
 * warmup_steps to lr, then cosine/linear decay to min_lr at the last step,
 * or constant. */
double sr_lr_at(const sr_lr_schedule *sch, int64_t s);

#endif
