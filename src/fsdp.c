/* fsdp.c — the sharding engine; see fsdp.h for what it owns.
 *
 * Unit life cycle in one micro-batch (FSDP2):
 *   forward  order: root, block units 0..U-1, root again (the head)
 *   backward order: root (head), block units U-1..0, root (embeddings)
 * A unit is gathered when the model first asks for its parameters; the
 * next sharding.prefetch.{forward,backward} units in that order are gathered
 * ahead on the progress thread.  After its forward a block unit is freed
 * (reshard true), kept (false) or kept as an N-way shard (N); the root stays
 * gathered through the forward.  After its backward every unit is freed and
 * its gradient reduce-scattered into the gradient shard (every micro-batch,
 * or once per step into the accumulation buffer's reduction), then
 * all-reduced across replicas (HSDP).  The progress thread runs operations
 * in queue order, so a reduce-scatter and the all-reduce after it need no
 * wait in between.
 *
 * Streams (ARCHITECTURE.md §3b): collectives and their casts and folds on
 * the comm stream, the model on compute, every hand-off an event and a
 * named wait (device.h), proven by the happens-before checker.  Buffers
 * come from fixed pools allocated at set-up (alloc_pools); nothing is
 * allocated on the step path, and the host waits for the device once per
 * step (sr_fsdp_finish_grads).
 *
 * Collectives travel as the data plane decides (plane.h); the engine's
 * other parts are offload.c (the host state and optimizer thread of
 * sharding.offload: here each unit's reduction is copied to the host as it
 * ends, and a gather waits for its unit's update), fsdp_state.c (the
 * persistent state's traffic to and from host memory) and fsdp_plan.c (the
 * sizes alloc_buffers and alloc_pools allocate).
 *
 * Failures inside the model's hooks (which cannot return a status) are
 * kept in a sticky error (status.h) and returned by the pass. */
#include "srconfig.h"

#include "fsdp.h"
#include "fsdp_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mem.h"
#include "testhook.h"
#include "trace.h"
#include "vec.h"

/* ------------------------------------------------------------------------ */
/* parameters */

/* The gather of a unit: into its own buffer or a free slot of the pool
 * (none free: a prefetch is skipped; the unit the model asks for always
 * finds one, by the pool's size); on the comm stream, once the buffer's
 * last reader is done, the all-gather (bf16: from the bf16 copy; aliased
 * units are their part of it, fsdp_impl.h); `ready` is its completion. */
static void issue_gather(sr_fsdp *f, unit *u, bool prefetch) {
    if (u->full || sr_fsdp_failed(f))
        return;
    /* offload: the host optimizer updates the units in forward order while
     * the device computes; a gather waits for its unit (a prefetch skips) */
    if (u->update_pending && !sr_offload_wait_unit(f, (int)(u - f->units), !prefetch))
        return;
    sr_dev *d = f->dev;
    size_t P = u->p->P, es = sr_dtype_size(f->pdt);
    if (f->alias) { /* no gather; compute orders after comm's past as a gather's wait would (fsdp_impl.h) */
        u->full = (uint16_t *)f->pshard16 + u->p->local;
        d->record(d, &u->ready, SR_STREAM_COMM);
        u->ag_pending = true;
        return;
    }
    sr_event *released = NULL;
    if (u->own) {
        u->full = u->own;
        released = u->own_ever ? &u->own_released : NULL;
    } else {
        int k = 0;
        while (k < f->npool && f->pool[k].unit >= 0)
            k++;
        if (k == f->npool) {
            if (!prefetch)
                sr_fsdp_fail(f, sr_error(SR_ERR_INTERNAL, "no free slot in the full-unit pool for unit %d",
                                         (int)(u - f->units)));
            return;
        }
        slot *sl = &f->pool[k];
        sl->unit = (int)(u - f->units);
        u->slot = k;
        u->full = sl->buf;
        released = sl->ever ? &sl->released : NULL;
    }
    if (released)
        sr_dev_wait(d, SR_STREAM_COMM, released, "slot_free");
    if (u->copy_stale && !u->has_kept) { /* offload: the unit's updated master to the device copy, just in time */
        d->copy(d, SR_STREAM_COMM, f->pshard + u->p->local, f->hparams + u->p->local, u->p->P * sizeof(float));
        u->copy_stale = false;
    }
    sr_status st;
    size_t full_bytes = (size_t)f->S * P * es;
    if (u->has_kept) {
        int N = sr_group_size(u->ngroup);
        size_t part = (size_t)f->S * P / (size_t)N;
        sr_dev_wait(d, SR_STREAM_COMM, &u->kept_ready, "kept_ready");
        st = sr_plane_collective(f->plane, SR_COLL_ALLGATHER, "all-gather (reshard N)", u->ngroup, u->full, full_bytes,
                                 u->kept, part * es, part, f->pdt, &u->ready);
        u->has_kept = false; /* consumed: the next forward gathers the shard again */
    } else if (f->offp) {
        /* no device copy of the shard: this rank's part is uploaded just in
         * time into its place in the full buffer, gathered in place */
        void *mine = (char *)u->full + (size_t)sr_group_rank(f->shard_g) * P * es;
        const void *host = f->pdt == SR_DT_F32 ? (const void *)(f->hparams + u->p->local)
                                               : (const void *)((const uint16_t *)f->hparams16 + u->p->local);
        d->copy(d, SR_STREAM_COMM, mine, host, P * es);
        st = sr_plane_collective(f->plane, SR_COLL_ALLGATHER, "all-gather (offloaded parameters)", f->shard_g, u->full,
                                 full_bytes, mine, P * es, P, f->pdt, &u->ready);
    } else if (f->pdt == SR_DT_F32) {
        st = sr_plane_collective(f->plane, SR_COLL_ALLGATHER, "all-gather", f->shard_g, u->full, full_bytes,
                                 f->pshard + u->p->local, P * 4, P, SR_DT_F32, &u->ready);
    } else {
        /* from the bf16 copy AdamW wrote with the update (no cast); with
         * offload, cast from the device's f32 copy into this rank's part */
        void *mine = f->pshard16 ? (void *)((uint16_t *)f->pshard16 + u->p->local)
                                 : (char *)u->full + (size_t)sr_group_rank(f->shard_g) * P * 2;
        if (!f->pshard16)
            d->cast_f32_bf16(d, SR_STREAM_COMM, mine, f->pshard + u->p->local, P);
        st = sr_plane_collective(f->plane, SR_COLL_ALLGATHER, "all-gather (bf16)", f->shard_g, u->full, full_bytes,
                                 mine, P * 2, P, SR_DT_BF16, &u->ready);
    }
    u->ag_pending = true;
    if (st != SR_OK)
        sr_fsdp_fail(f, st);
}

/* Makes stream s wait for the unit's gather. */
static void wait_gather(sr_fsdp *f, unit *u, sr_stream s) {
    if (!u->ag_pending)
        return;
    u->ag_pending = false;
    sr_status st = sr_dev_wait(f->dev, s, &u->ready, "gather_ready");
    if (st != SR_OK)
        sr_fsdp_fail(f, st);
}

/* The unit's full buffer is let go: compute's last use is recorded on it
 * (the next gather into it waits for that), and a pool slot is free. */
static void free_full(sr_fsdp *f, unit *u) {
    if (!u->full)
        return;
    wait_gather(f, u, SR_STREAM_COMPUTE);
    sr_dev *d = f->dev;
    if (u->slot >= 0) { /* (an aliased unit has no slot: its own_released is recorded, never waited for) */
        slot *sl = &f->pool[u->slot];
        d->record(d, &sl->released, SR_STREAM_COMPUTE);
        sl->ever = true;
        sl->unit = -1;
        u->slot = -1;
    } else {
        d->record(d, &u->own_released, SR_STREAM_COMPUTE);
        u->own_ever = true;
    }
    u->full = NULL;
    if (f->staged_unit == (int)(u - f->units))
        f->staged_unit = -1;
}

/* After the forward of a unit: free it, keep it, or keep an N-way share. */
static void reshard_after_forward(sr_fsdp *f, unit *u) {
    if (u->reshard == SR_RESHARD_FALSE || !u->full)
        return;
    if (u->reshard >= 2) {
        int N = sr_group_size(u->ngroup), j = sr_group_rank(u->ngroup);
        size_t es = sr_dtype_size(f->pdt), part = (size_t)f->S * u->p->P / (size_t)N;
        wait_gather(f, u, SR_STREAM_COMPUTE);
        f->dev->copy(f->dev, SR_STREAM_COMPUTE, u->kept, (char *)u->full + (size_t)j * part * es, part * es);
        f->dev->record(f->dev, &u->kept_ready, SR_STREAM_COMPUTE);
        u->has_kept = true;
    }
    free_full(f, u);
}

/* log.trace_steps: the layer's compute on the compute stream's lane (the
 * host's execution on the cpu tables, the stream's on a GPU). */
static void trace_layer(sr_fsdp *f) {
    if (f->layer_span) {
        char name[40];
        snprintf(name, sizeof name, "%s layer %d", f->backward ? "backward" : "forward", f->span_layer);
        sr_dev_trace_end(f->dev, f->layer_span, SR_TRACE_COMPUTE, name);
        f->layer_span = 0;
    }
}

static sr_param_view hook_params(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    trace_layer(f); /* one open span at a time (a layer the model ends with no done hook), before this one's waits */
    int ui = f->plan.unit_of_layer[layer];
    unit *u = &f->units[ui];
    /* advance the position in the order to this unit */
    for (int k = f->pos; k < f->norder; k++)
        if (f->order[k] == ui) {
            f->pos = k;
            break;
        }
    issue_gather(f, u, false);
    wait_gather(f, u, SR_STREAM_COMPUTE);
    int ahead = f->backward ? f->o.prefetch_backward : f->o.prefetch_forward;
    for (int k = f->pos + 1; k < f->norder && k <= f->pos + ahead; k++)
        if (f->order[k] != ui)
            issue_gather(f, &f->units[f->order[k]], true);
    size_t rel = f->m->layer_offset[layer] - u->p->off;
    if (sr_fsdp_failed(f) || !u->full)
        return (sr_param_view){NULL, f->pdt}; /* the pass ends; check() reports why */
    trace_layer(f);                           /* one open span at a time: a layer the model ends with no done hook */
    f->layer_span = sr_dev_trace_begin(f->dev, SR_STREAM_COMPUTE); /* the layer's compute, after its gather's wait */
    f->span_layer = layer;
    if (f->pdt == f->m->ops->act) {
        /* the model's kernels of this layer read the gathered unit */
        sr_dev_declare(f->dev, SR_STREAM_COMPUTE, u->full, u->p->n * sr_dtype_size(f->pdt), false,
                       "the model's kernels (parameters)");
        return (sr_param_view){(char *)u->full + rel * sr_dtype_size(f->pdt), f->pdt};
    }
    if (f->staged_unit != ui) {
        /* the ops compute in fp32 (the CPU): widen the bf16 unit once */
        f->dev->fold_bf16(f->dev, SR_STREAM_COMPUTE, f->stage, u->full, u->p->n, false);
        f->staged_unit = ui;
    }
    sr_dev_declare(f->dev, SR_STREAM_COMPUTE, f->stage, u->p->n * sizeof(float), false,
                   "the model's kernels (widened parameters)");
    return (sr_param_view){f->stage + rel, SR_DT_F32};
}

static void hook_done_forward(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    trace_layer(f);
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    if (layer == u->p->last_layer && !f->backward)
        reshard_after_forward(f, u);
}

/* ------------------------------------------------------------------------ */
/* gradients */

/* Makes the comm stream wait for a unit's reduction, folds it into the
 * gradient shard there, and releases its reduction slot. */
static void finish_reduce(sr_fsdp *f, unit *u) {
    if (!u->rs_pending)
        return;
    sr_dev *d = f->dev;
    /* the reduction's last collective (the replicas' all-reduce with HSDP);
     * then the reduce-scatter's request, complete by then, is released */
    sr_status st = sr_dev_wait(d, SR_STREAM_COMM, f->R > 1 ? &u->ar_done : &u->rs_done, "reduce_done");
    sr_status st2 = d->wait(d, SR_STREAM_COMM, f->R > 1 ? &u->rs_done : &u->ar_done);
    if (st == SR_OK)
        st = st2;
    if (st != SR_OK)
        sr_fsdp_fail(f, st);
    float *g = f->gshard ? f->gshard + u->p->local : NULL;
    size_t P = u->p->P;
    slot *sl = u->rslot >= 0 ? &f->rpool[u->rslot] : NULL;
    if (st == SR_OK && sl && f->off && f->per_step) {
        /* the reduced shard goes to the host as its reduction ends (comm
         * stream: the slot's next reduction is ordered after the copy) */
        void *to =
            f->rdt == SR_DT_F32 ? (void *)(f->hgrads + u->p->local) : (void *)((uint16_t *)f->hrecv + u->p->local);
        d->copy(d, SR_STREAM_COMM, to, sl->recv, P * sr_dtype_size(f->rdt));
    } else if (st == SR_OK && sl && !u->rs_into_shard) {
        /* the step's first reduction of the unit overwrites its part of
         * the shard (nothing zeroed it), later ones add */
        if (f->rdt == SR_DT_BF16)
            d->fold_bf16(d, SR_STREAM_COMM, g, sl->recv, P, !u->gfresh);
        else
            d->add_f32(d, SR_STREAM_COMM, g, sl->recv, P);
    }
    u->gfresh = false;
    if (sl) {
        sl->unit = -1;
        u->rslot = -1;
    }
    u->rs_pending = false;
    for (int k = 0; k < f->ninflight; k++)
        if (f->inflight[k] == (int)(u - f->units)) {
            memmove(f->inflight + k, f->inflight + k + 1, sizeof(int) * (size_t)(f->ninflight - k - 1));
            f->ninflight--;
            break;
        }
}

/* Takes a reduction slot for the unit (the root's, or a block slot; when
 * both block slots are busy the oldest pending reduction is finished
 * first).  Compute, writing the slot's gradient next, needs no wait of its
 * own: it has waited for this unit's gather, which the comm stream issued
 * after the slot's last reduction and fold (the checker proves it). */
static slot *take_rslot(sr_fsdp *f, unit *u) {
    int k = 0;
    if (!u->p->root) {
        for (;;) {
            for (k = 1; k < RS_SLOTS && f->rpool[k].unit >= 0; k++)
                ;
            if (k < RS_SLOTS || f->ninflight == 0)
                break;
            finish_reduce(f, &f->units[f->inflight[0]]);
        }
        if (k == RS_SLOTS) {
            sr_fsdp_fail(
                f, sr_error(SR_ERR_INTERNAL, "no free slot in the reduction pool for unit %d", (int)(u - f->units)));
            return NULL;
        }
    }
    slot *sl = &f->rpool[k];
    sl->unit = (int)(u - f->units);
    u->rslot = k;
    return sl;
}

static void issue_reduce(sr_fsdp *f, unit *u) {
    if (sr_fsdp_failed(f))
        return;
    sr_dev *d = f->dev;
    size_t P = u->p->P;
    slot *sl = NULL;
    if (f->use_rpool) {
        sl = u->rslot >= 0 ? &f->rpool[u->rslot] : take_rslot(f, u);
        if (!sl)
            return;
    }
    const float *full = f->per_step ? f->accum + u->p->accum_off : sl->grad;
    size_t total = (size_t)f->S * P;
    const void *send = full;
    if (f->rdt == SR_DT_BF16) {
        d->cast_f32_bf16(d, SR_STREAM_COMM, sl->send, full, total);
        send = sl->send;
    }
    /* fp32 once per step, or the step's first fp32 reduction of the unit:
     * straight into the gradient shard, written whole */
    u->rs_into_shard = f->gshard && f->rdt == SR_DT_F32 && (f->per_step || u->gfresh);
    void *recv = u->rs_into_shard ? (void *)(f->gshard + u->p->local) : sl->recv;
    size_t res = sr_dtype_size(f->rdt);
    sr_status st = sr_plane_collective(f->plane, SR_COLL_REDUCE_SCATTER, "reduce-scatter", f->shard_g, recv, P * res,
                                       send, total * res, P, f->rdt, &u->rs_done);
    u->ar_done = (sr_event){0};
    /* one replica needs no all-reduce; SHARDRUN_TEST_NCCL_SIZE1 runs it
     * anyway (a sum over one rank: the identity) to prove the call */
    if (st == SR_OK && (f->R > 1 || sr_plane_on_nccl(f->plane, f->rep_g))) {
        st = sr_plane_collective(f->plane, SR_COLL_ALLREDUCE, "all-reduce (replicas)", f->rep_g, recv, P * res, recv,
                                 P * res, P, f->rdt, &u->ar_done);
    }
    if (st != SR_OK)
        sr_fsdp_fail(f, st);
    u->rs_pending = true;
    if (sl)
        f->inflight[f->ninflight++] = (int)(u - f->units);
}

/* The unit's gradient buffer: the gradient shard itself (direct), the
 * accumulation buffer (per_step) — fresh in the step's first backward —
 * or a reduction slot taken for this micro-batch (fresh).  A fresh buffer
 * is not zeroed: the model's first writes overwrite (model.h). */
static float *hook_grads(void *ctx, int layer, bool *fresh) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    size_t rel = f->m->layer_offset[layer] - u->p->off;
    float *g;
    *fresh = f->backwards == 0;
    if (f->direct) {
        g = f->gshard + u->p->local;
    } else if (f->per_step) {
        g = f->accum + u->p->accum_off;
    } else {
        if (u->rs_pending)
            finish_reduce(f, u); /* the previous micro-batch's reduction of this unit */
        if (u->rslot < 0) {
            slot *sl = take_rslot(f, u);
            if (!sl)
                return NULL;
            /* the model writes the unit's n elements; the padding to S*P is
             * reduced too and must be zero: only a larger unit's earlier
             * gradients there need clearing (units of one size: never) */
            if (sl->grad_dirty > u->p->n)
                f->dev->memset(f->dev, SR_STREAM_COMPUTE, sl->grad + u->p->n, 0,
                               (sl->grad_dirty - u->p->n) * sizeof(float));
            sl->grad_dirty = u->p->n;
        }
        g = f->rpool[u->rslot].grad;
        *fresh = true;
    }
    /* the model's kernels write and accumulate into the unit's gradients */
    sr_dev_declare(f->dev, SR_STREAM_COMPUTE, g, u->p->n * sizeof(float), false, "the model's kernels (gradients)");
    sr_dev_declare(f->dev, SR_STREAM_COMPUTE, g, u->p->n * sizeof(float), true, "the model's kernels (gradients)");
    return g + rel;
}

static void hook_done_backward(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    trace_layer(f);
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    if (layer != u->p->first_layer)
        return;
    free_full(f, u);
    if (!f->direct && (!f->per_step || f->last_mb)) {
        /* the comm stream waits for the unit's gradients */
        sr_event grads_ready = {0};
        f->dev->record(f->dev, &grads_ready, SR_STREAM_COMPUTE);
        sr_dev_wait(f->dev, SR_STREAM_COMM, &grads_ready, "grads_ready");
        issue_reduce(f, u);
    }
}

/* ------------------------------------------------------------------------ */
/* set-up */

/* The shard, replicate and reshard-N groups, in that order on every rank,
 * declared through the data plane (which opens NCCL over them). */
static sr_status create_groups(sr_fsdp *f, sr_group *ngroups[2]) {
    int *ranks = sr_calloc((size_t)f->mesh.world + 1, sizeof(int));
    if (!ranks)
        return sr_error_oom("a group list");
    sr_status st = sr_plane_group(f->plane, ranks, sr_mesh_shard_group(&f->mesh, ranks), "shard", &f->shard_g);
    if (st == SR_OK)
        st = sr_plane_group(f->plane, ranks, sr_mesh_replicate_group(&f->mesh, ranks), "replicate", &f->rep_g);
    int64_t N[2] = {f->o.reshard_blocks, f->o.reshard_root};
    for (int i = 0; i < 2 && st == SR_OK; i++) {
        if (N[i] < 2)
            continue;
        if (i == 1 && N[1] == N[0]) {
            ngroups[1] = ngroups[0];
            continue;
        }
        st = sr_plane_group(f->plane, ranks, sr_mesh_reshard_group(&f->mesh, (int)N[i], ranks),
                            i == 0 ? "reshard (blocks)" : "reshard (root)", &ngroups[i]);
    }
    free(ranks);
    return st;
}

/* The full-unit buffers (ARCHITECTURE.md §3b has the table): the root's and every kept
 * unit's own, the N-way shares of reshard N, and the pool of 1 + max
 * prefetch slots of the largest block unit that is not kept (none when
 * all are) — exactly the memory contract's bound; and the reduction pool:
 * a root slot and two block slots, each the full gradient
 * (per_micro_batch), the bf16 cast (bf16 reductions) and the reduced
 * shard (unless fp32 per_step reductions, which need none; none at all in
 * direct mode).  Nothing is allocated on the step path. */
static sr_status alloc_pools(sr_fsdp *f) {
    size_t es = sr_dtype_size(f->pdt), largest;
    sr_fsdp_pool_shape(&f->plan, &f->o, es, &largest, &f->npool, NULL);
    f->npool = f->alias ? 0 : f->npool;
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        size_t full = (size_t)f->S * u->p->P * es;
        u->slot = u->rslot = -1;
        if (!f->alias && (u->p->root || u->reshard == SR_RESHARD_FALSE) &&
            !(u->own = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_FULL_UNITS, full)))
            return SR_ERR_INTERNAL;
        if (u->reshard >= 2 &&
            !(u->kept = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_FULL_UNITS, full / (size_t)u->reshard)))
            return SR_ERR_INTERNAL;
    }
    f->pool = sr_calloc((size_t)(f->npool ? f->npool : 1), sizeof(slot));
    if (!f->pool)
        return sr_error_oom("the full-unit pool");
    for (int k = 0; k < f->npool; k++) {
        f->pool[k].unit = -1;
        if (!(f->pool[k].buf = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_FULL_UNITS, largest)))
            return SR_ERR_INTERNAL;
    }
    f->use_rpool = sr_fsdp_uses_rpool(&f->o, f->off, f->direct);
    for (int k = 0; k < RS_SLOTS; k++) {
        slot *sl = &f->rpool[k];
        sl->unit = -1;
        size_t g, s, r;
        sr_fsdp_rslot_bytes(&f->plan, &f->o, k, &g, &s, &r);
        if (!f->use_rpool)
            continue;
        if (g && !(sl->grad = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_COMM, g)))
            return SR_ERR_INTERNAL;
        if (g) /* the padding past a unit's gradients is reduced with them: zero */
            f->dev->memset(f->dev, SR_STREAM_COMPUTE, sl->grad, 0, g);
        if (s && !(sl->send = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_COMM, s)))
            return SR_ERR_INTERNAL;
        if (!(sl->recv = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_COMM, r)))
            return SR_ERR_INTERNAL;
    }
    return SR_OK;
}

/* Shard buffers, the accumulation buffer, the staging buffer, the
 * step's scalars and the pools, on the device table. */
static sr_status alloc_buffers(sr_fsdp *f) {
    size_t local = f->plan.local_size;
    f->local_size = local;
    /* the device's parameter shard (with offload: the copy the gathers
     * read; none with offload.params) and gradient shard (none with
     * offload per_step: reductions land in slots) */
    if (!f->offp && !(f->pshard = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_PARAM_SHARD, local * sizeof(float))))
        return SR_ERR_INTERNAL;
    if (sr_fsdp_copy16(&f->o, f->off) &&
        !(f->pshard16 = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_PARAM_SHARD, local * sr_dtype_size(SR_DT_BF16))))
        return SR_ERR_INTERNAL;
    if (!(f->off && f->per_step) &&
        !(f->gshard = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_GRAD_SHARD, local * sizeof(float))))
        return SR_ERR_INTERNAL;
    /* the padding between slices is gathered and summed: keep it zero
     * (the master shard on the stream of its uploads; the gradients'
     * padding, which no step writes, once here) */
    if (f->pshard)
        f->dev->memset(f->dev, SR_STREAM_H2D, f->pshard, 0, local * sizeof(float));
    if (f->gshard)
        f->dev->memset(f->dev, SR_STREAM_COMPUTE, f->gshard, 0, local * sizeof(float));
    if (f->per_step && !f->direct) { /* direct: the gradient shard accumulates */
        f->accum = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_ACCUM, f->plan.accum_size * sizeof(float));
        if (!f->accum)
            return SR_ERR_INTERNAL;
        f->accum_n = f->plan.accum_size;
        f->dev->memset(f->dev, SR_STREAM_COMPUTE, f->accum, 0, f->accum_n * sizeof(float));
    }
    size_t stage = sr_fsdp_stage_elements(&f->plan, &f->o, f->m->ops->act);
    if (stage && !(f->stage = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_OTHER, stage * sizeof(float))))
        return SR_ERR_INTERNAL;
    f->sumsq = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_OTHER, SR_FSDP_SCALARS * sizeof(double));
    return f->sumsq ? alloc_pools(f) : SR_ERR_INTERNAL;
}

/* The master shard from the seed, generated on the host in pieces and
 * uploaded, and the optimizer over this rank's slices. */
static sr_status init_master(sr_fsdp *f) {
    sr_slice *slices = sr_malloc(sizeof(sr_slice) * (size_t)f->nunits);
    enum { PIECE = 16384 };
    float *piece = sr_malloc(PIECE * sizeof(float));
    if (!slices || !piece) {
        free(slices);
        free(piece);
        return sr_error_oom("the shard's slices");
    }
    sr_status st = SR_OK;
    int ns = sr_shardplan_slices(&f->plan, f->mesh.shard_idx, slices);
    /* (a dry table computes nothing: no weights to generate) */
    for (int i = 0; i < ns && st == SR_OK && !f->dev->dry; i++)
        for (size_t b = slices[i].begin; b < slices[i].end && st == SR_OK; b += PIECE) {
            size_t e = b + PIECE < slices[i].end ? b + PIECE : slices[i].end;
            if (f->off) {
                sr_model_init_params(f->m, f->o.seed, f->hparams + slices[i].local + (b - slices[i].begin), b, e);
                continue;
            }
            sr_model_init_params(f->m, f->o.seed, piece, b, e);
            st = sr_dev_upload(f->dev, f->pshard + slices[i].local + (b - slices[i].begin), piece,
                               (e - b) * sizeof(float), "upload");
        }
    free(piece);
    if (st == SR_OK) {
        st = sr_optim_init_slices(&f->opt, f->m, f->off ? f->hdev : f->dev, slices, ns, f->local_size);
        f->opt.params16 = f->pshard16;
        f->opt_ok = true;
        sr_fsdp_refresh16(f);
    }
    if (st == SR_OK && f->off) {
        /* the device copy, and the host waits for it: a resume writes
         * the master next */
        st = sr_offload_refresh(f);
        sr_event up = {0};
        f->dev->record(f->dev, &up, SR_STREAM_H2D);
        if (st == SR_OK)
            st = sr_dev_host_wait(f->dev, &up, "upload");
    }
    free(slices);
    return st;
}

sr_status sr_fsdp_init(sr_fsdp **out, sr_model *m, const sr_mesh *mesh, const sr_fsdp_opts *o, sr_plane *plane) {
    *out = NULL;
    sr_fsdp *f = sr_calloc(1, sizeof *f);
    if (!f)
        return sr_error_oom("the sharding engine");
    sr_sticky_init(&f->err);
    *out = f;
    f->m = m;
    f->dev = m->dev;
    f->plane = plane;
    f->o = *o;
    f->mesh = *mesh;
    f->S = mesh->S;
    f->R = mesh->R;
    f->pdt = o->param_dtype;
    f->rdt = o->reduce_dtype;
    f->per_step = o->grad_sync_per_step;
    f->staged_unit = -1;
    f->off = o->offload_optimizer && m->dev->separate_memory;
    f->offp = f->off && o->offload_params;
    sr_group *ngroups[2] = {NULL, NULL};
    sr_status st = create_groups(f, ngroups);
    if (st == SR_OK)
        st = sr_shardplan_init(&f->plan, m->layer_offset, m->d.L, o->blocks_per_unit, f->S);
    if (st != SR_OK)
        return st;
    f->nunits = f->plan.nunits;
    f->direct = sr_fsdp_direct(&f->plan, &f->o, f->off, f->R);
    f->alias = sr_fsdp_alias(&f->plan, &f->o, f->off);
    f->units = sr_calloc((size_t)f->nunits, sizeof(unit));
    f->order = sr_malloc(sizeof(int) * (size_t)(2 * f->nunits + 2));
    if (!f->units || !f->order)
        return sr_error_oom("the unit table");
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        u->p = &f->plan.units[ui];
        u->reshard = u->p->root ? o->reshard_root : o->reshard_blocks;
        u->ngroup = u->reshard >= 2 ? ngroups[u->p->root ? 1 : 0] : NULL;
    }
    st = f->off ? sr_offload_start(f) : SR_OK;
    if (st == SR_OK)
        st = alloc_buffers(f);
    if (st == SR_OK)
        st = init_master(f);
    if (st != SR_OK)
        return st;
    f->src = (sr_param_source){hook_params, hook_grads, hook_done_forward, hook_done_backward, f};
    return SR_OK;
}

void sr_fsdp_free(sr_fsdp *f) {
    if (!f)
        return;
    for (int ui = 0; f->units && ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        finish_reduce(f, u);
        free_full(f, u);
        sr_fsdp_release(f, &u->own);
        sr_fsdp_release(f, &u->kept);
    }
    for (int k = 0; f->pool && k < f->npool; k++)
        sr_fsdp_release(f, &f->pool[k].buf);
    free(f->pool);
    for (int k = 0; k < RS_SLOTS; k++) {
        sr_fsdp_release(f, (void **)&f->rpool[k].grad);
        sr_fsdp_release(f, &f->rpool[k].send);
        sr_fsdp_release(f, &f->rpool[k].recv);
    }
    sr_offload_stop(f);
    if (f->opt_ok)
        sr_optim_free(&f->opt);
    if (f->hdev)
        sr_device_close(f->hdev);
    if (f->dev) {
        sr_fsdp_release(f, (void **)&f->hparams);
        sr_fsdp_release(f, (void **)&f->hgrads);
        sr_fsdp_release(f, &f->hrecv);
        sr_fsdp_release(f, &f->hparams16);
        sr_fsdp_release(f, (void **)&f->hscalars);
        sr_fsdp_release(f, (void **)&f->pshard);
        sr_fsdp_release(f, &f->pshard16);
        sr_fsdp_release(f, (void **)&f->gshard);
        sr_fsdp_release(f, (void **)&f->accum);
        sr_fsdp_release(f, (void **)&f->stage);
        sr_fsdp_release(f, (void **)&f->sumsq);
    }
    sr_shardplan_free(&f->plan);
    sr_sticky_destroy(&f->err);
    free(f->units);
    free(f->order);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* the step */

static sr_status check(sr_fsdp *f, sr_status model_st) {
    trace_layer(f); /* the pass's last span */
    sr_status st = sr_sticky_raise(&f->err);
    return st != SR_OK ? st : model_st;
}

/* Nothing is zeroed: the step's first backward writes the accumulation
 * buffer (or, direct, the gradient shard) fresh, and each unit's first
 * reduction overwrites its part of the gradient shard. */
void sr_fsdp_begin_step(sr_fsdp *f) {
    f->backwards = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        f->units[ui].gfresh = true;
    f->staged_unit = -1;
}

static void set_order(sr_fsdp *f, bool backward) {
    int U = f->nunits - 1, k = 0;
    f->order[k++] = U; /* the root first in both passes */
    if (!backward) {
        for (int i = 0; i < U; i++)
            f->order[k++] = i;
        f->order[k++] = U;
    } else {
        for (int i = U - 1; i >= 0; i--)
            f->order[k++] = i;
    }
    f->norder = k;
    f->pos = 0;
    f->backward = backward;
}

sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B, float dloss) {
    set_order(f, false);
    sr_status st = sr_model_forward_train(f->m, &f->src, inputs, targets, B, dloss);
    return check(f, st);
}

sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch) {
    sr_offload_wait_all(f); /* done by now (forward waited for every unit): the gradients' copies may land */
    set_order(f, true);
    f->last_mb = last_micro_batch;
    sr_status st = sr_model_backward(f->m, &f->src, dloss);
    f->backwards++;
    return check(f, st);
}

sr_status sr_fsdp_take_loss_sum(sr_fsdp *f, double *loss_sum) { return sr_model_take_loss_sum(f->m, loss_sum); }

static void free_all_full(sr_fsdp *f) {
    for (int ui = 0; ui < f->nunits; ui++) {
        free_full(f, &f->units[ui]);
        f->units[ui].has_kept = false;
    }
    f->staged_unit = -1;
}

sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B) {
    set_order(f, false);
    sr_status st = sr_model_forward(f->m, &f->src, inputs, targets, B);
    free_all_full(f);
    return check(f, st);
}

/* AdamW on the compute stream, after the gradients and their sum of
 * squares; the next gathers (comm stream) wait for the updated shard. */
static void update_shard(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale,
                         const sr_fsdp_update *early) {
    free_all_full(f); /* gathered copies are stale once the shard moves */
    if (early)
        sr_optim_step_clipped(&f->opt, f->pshard, f->gshard, early->step, early->lr, early->adamw, f->sumsq,
                              early->clip);
    else
        sr_optim_step(&f->opt, f->pshard, f->gshard, step, lr, o, grad_scale);
    sr_event updated = {0};
    f->dev->record(f->dev, &updated, SR_STREAM_COMPUTE);
    sr_dev_wait(f->dev, SR_STREAM_COMM, &updated, "params_updated");
}

sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *loss_sum, double *grad_norm, const sr_fsdp_update *early) {
    sr_offload_wait_all(f);
    for (int ui = 0; ui < f->nunits; ui++)
        finish_reduce(f, &f->units[ui]);
    f->ninflight = 0;
    sr_status st = check(f, SR_OK);
    if (st != SR_OK)
        return st;
    sr_dev *d = f->dev;
    double ss = 0.0;
    if (f->off) {
        st = sr_offload_grads(f, loss_sum);
        if (st == SR_OK)
            ss = sr_vec_sum_squares(f->hgrads, f->local_size); /* the CPU table's sum, same order */
    } else {
        /* every reduction folded (comm) and every gradient written (compute)
         * before the sum of squares, read back once */
        sr_event comm_done = {0}, sum_done = {0};
        d->record(d, &comm_done, SR_STREAM_COMM);
        sr_dev_wait(d, SR_STREAM_COMPUTE, &comm_done, "reductions_folded");
        d->sum_squares(d, SR_STREAM_COMPUTE, f->sumsq, f->gshard, f->local_size);
        /* the loss sum rides along: one read-back for both */
        d->copy(d, SR_STREAM_COMPUTE, f->sumsq + 1, f->m->loss_acc, sizeof(double));
        f->m->loss_taken = true; /* the next forward writes it (after this copy, on the same stream) */
        d->record(d, &sum_done, SR_STREAM_COMPUTE);
        sr_dev_wait(d, SR_STREAM_D2H, &sum_done, "scalars_ready");
        /* one rank's sum of squares is the whole norm's: AdamW goes now,
         * its clipping scale from the device's sum, while the scalars travel */
        f->stepped = early && f->S == 1;
        if (f->stepped)
            update_shard(f, 0, 0.0, NULL, 1.0f, early);
        double both[2] = {0.0, 0.0};
        st = sr_dev_download_step(d, both, f->sumsq, sizeof both, "step_scalars");
        ss = both[0];
        *loss_sum = both[1];
    }
    /* replicas hold equal shards: sum squares over the shard group only */
    if (st == SR_OK)
        st = sr_allreduce(f->shard_g, &ss, 1, SR_DT_F64, SR_OP_SUM, NULL);
    *grad_norm = sqrt(ss);
    return st;
}

void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale) {
    if (f->stepped) { /* enqueued by finish_grads, with this scale computed on the device */
        f->stepped = false;
        return;
    }
    if (f->off) {
        free_all_full(f); /* gathered copies are stale once the shard moves */
        sr_offload_post(f, step, lr, o, grad_scale);
        return;
    }
    update_shard(f, step, lr, o, grad_scale, NULL);
}

int sr_fsdp_units(const sr_fsdp *f) { return f->nunits; }
