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
 * Offload (sharding.offload.optimizer): the master shard, Adam m and v and
 * the gradient shard live in host memory.  Each unit's reduction lands in
 * a reduction slot and is copied to the host on the comm stream as its
 * reduce-scatter ends (per_step; per_micro_batch folds on the device and
 * copies the shard once per step); the host sums squares and runs AdamW
 * (the CPU table's, the same code as a CPU run, so results are bitwise
 * those without offload on the fake device), then uploads the updated
 * shard to the device copy the gathers read — or, with offload.params,
 * each gather uploads its unit's part just in time.
 *
 * Failures inside the model's hooks (which cannot return a status) are
 * kept in a sticky error (status.h) and returned by the pass. */
#include "srconfig.h"

#include "fsdp.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fsio.h"
#include "hbcheck.h"
#include "mem.h"
#include "testhook.h"
#include "vec.h"

/* A buffer that units take turns in: the full-unit pool's slots and the
 * reduction pool's.  Full-unit slots: `released` is recorded where the last
 * user let go (compute, after its last read), so the next gather into the
 * slot waits for it: no buffer is reused while a stream still reads it.
 * (Reduction slots need no event: see take_rslot.) */
typedef struct {
    void *buf;         /* full pool: the largest block unit in the param dtype */
    float *grad;       /* reduction pool, per_micro_batch: the full gradient (S*P fp32) */
    void *send, *recv; /* reduction pool: the bf16 cast (S*P), the reduced shard (P of the reduce dtype) */
    int unit;          /* the unit in it, or -1 */
    sr_event released;
    bool ever; /* released was recorded */
} slot;

typedef struct {
    const sr_unit_plan *p;
    int64_t reshard;
    sr_group *ngroup; /* reshard N group, or NULL */
    /* parameters */
    void *own; /* the root and units kept gathered: their own full buffer; else NULL */
    sr_event own_released;
    bool own_ever;
    void *full;          /* where the gathered unit is (own, or a pool slot's), or NULL */
    int slot;            /* its full-pool slot, or -1 */
    sr_event ready;      /* the gather into full (a transport event on the cpu tables) */
    bool ag_pending;     /* `ready` not yet waited for */
    void *kept;          /* reshard N: this rank's 1/N of the full unit (own buffer) */
    sr_event kept_ready; /* ...copied on the compute stream */
    bool has_kept;       /* kept holds this step's share */
    bool update_pending; /* offload: the host optimizer has not yet updated this unit's master this step */
    bool copy_stale;     /* offload (not params): the device copy of the unit's shard awaits its upload */
    /* gradients */
    int rslot; /* its reduction-pool slot, or -1 */
    sr_event rs_done, ar_done;
    bool rs_pending;
} unit;

/* The reduction pool: slot 0 for the root, the others for blocks. */
enum { RS_SLOTS = 3 };

struct sr_fsdp {
    sr_model *m;
    sr_dev *dev;
    sr_fsdp_opts o;
    sr_mesh mesh;
    sr_shardplan plan;
    int S, R;
    sr_group *shard_g, *rep_g;
    sr_group *groups[4]; /* every group this engine declared, in order (the NCCL splits) */
    int ngroups;
    sr_nccl *nccl; /* the device data plane of multi-GPU runs, or NULL */
    void *hstage;  /* host staging of virtual ranks on one GPU (staged_collective) */
    size_t hstage_bytes;
    int nunits;
    unit *units;
    float *pshard, *gshard; /* device: the parameter shard (with offload: its copy, or NULL), the gradient shard */
    size_t local_size;
    /* sharding.offload: the fp32 master and the gradient shard in host
     * memory (hspace), AdamW on the host table hdev; hrecv lands bf16
     * reductions; hparams16 is the bf16 copy each gather uploads when the
     * device keeps no parameter shard (offload.params) */
    bool off, offp;
    sr_mem_space hspace;
    float *hparams, *hgrads;
    void *hrecv, *hparams16;
    double *hscalars; /* the step's loss sum, copied to the host */
    sr_dev *hdev;
    /* offload: the host optimizer thread.  optimizer_step posts a job (a
     * generation); the thread updates the units in forward order and
     * counts them in `updated`; a gather waits for its unit's count */
    pthread_t hopt;
    bool hopt_started, hopt_quit;
    pthread_mutex_t hopt_mu;
    pthread_cond_t hopt_cv;
    uint64_t hopt_job, hopt_done; /* posted and finished generations */
    int hopt_updated;             /* units of the posted job updated, in forward order */
    sr_adamw_launch hopt_launch;  /* the posted job's AdamW (every segment) */
    sr_mem_ctx *mem;              /* the accounting the thread binds (virtual ranks) */
    int hopt_threads;             /* its OpenMP team (the rank's threads) */
    sr_optim opt;
    bool opt_ok;
    float *accum;
    size_t accum_n;
    float *stage; /* the ops compute in another dtype than the gathered units: one unit widened */
    int staged_unit;
    double *sumsq; /* the gradient shard's sum of squares and the loss sum, in the table's memory */
    sr_dtype pdt, rdt;
    bool per_step;
    slot *pool; /* full-unit pool: 1 + max prefetch slots (none when every block is kept) */
    int npool;
    slot rpool[RS_SLOTS]; /* reduction pool (unused with fp32 per_step reductions) */
    bool use_rpool;
    int *order, norder, pos;
    bool backward, last_mb;
    int inflight[RS_SLOTS], ninflight; /* units holding a reduction slot with a pending reduction, oldest first */
    sr_param_source src;
    sr_sticky err;
};

/* Records the failure whose message was just recorded on this thread. */
static void fail(sr_fsdp *f, sr_status st) { sr_sticky_set(&f->err, st, "%s", sr_error_message()); }

static bool failed(sr_fsdp *f) { return sr_sticky_status(&f->err) != SR_OK; }

/* ------------------------------------------------------------------------ */
/* parameters */

/* Device memory of the engine, in the state space of the table. */
static void *dalloc(sr_fsdp *f, sr_mem_cat cat, size_t bytes) {
    void *p = f->dev->alloc(f->dev, f->dev->state_space, cat, bytes);
    if (!p)
        fail(f, SR_ERR_INTERNAL);
    return p;
}

/* Offloaded state: the device table's pinned (or plain host) memory. */
static void *halloc(sr_fsdp *f, sr_mem_cat cat, size_t bytes) {
    void *p = f->dev->alloc(f->dev, f->hspace, cat, bytes);
    if (!p)
        fail(f, SR_ERR_INTERNAL);
    return p;
}

static void dfree(sr_fsdp *f, void **p) {
    f->dev->free(f->dev, *p);
    *p = NULL;
}

typedef enum { COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_ALLREDUCE } coll_kind;

/* Virtual ranks on one GPU (tests/test_vranks --device cuda, the GPU
 * check's proof of the multi-rank engine where NCCL cannot run two ranks):
 * their loop plane moves host memory, so the collective is staged — the
 * host waits for the comm stream, downloads the send buffer, runs the
 * transport's collective and uploads the result.  Synchronous, and only
 * for ranks without NCCL communicators (a real multi-GPU run has them). */
static sr_status staged_collective(sr_fsdp *f, coll_kind kind, sr_group *g, void *recv, const void *send, size_t count,
                                   sr_dtype dt, sr_event *ev) {
    sr_dev *d = f->dev;
    size_t es = sr_dtype_size(dt), n = (size_t)sr_group_size(g);
    size_t sb = (kind == COLL_REDUCE_SCATTER ? n : 1) * count * es, rb = (kind == COLL_ALLGATHER ? n : 1) * count * es;
    if (f->hstage_bytes < sb + rb) {
        void *p = sr_realloc(f->hstage, sb + rb);
        if (!p)
            return sr_error_oom("the staging buffer of a virtual rank's collective");
        f->hstage = p;
        f->hstage_bytes = sb + rb;
    }
    /* pageable staging: a synchronous path (virtual ranks are a test of the
     * engine on one GPU, not a production step), so its downloads block
     * inside the driver and are not sr_dev_download_step's */
    char *hs = f->hstage, *hr = hs + sb;
    sr_event before = {0};
    d->record(d, &before, SR_STREAM_COMM);
    sr_status st = sr_dev_host_wait(d, &before, "download");
    if (st == SR_OK)
        st = sr_dev_download(d, hs, send, sb, "download");
    if (st == SR_OK)
        st = kind == COLL_ALLGATHER        ? sr_allgather(g, hr, hs, count, dt, NULL)
             : kind == COLL_REDUCE_SCATTER ? sr_reduce_scatter(g, hr, hs, count, dt, SR_OP_SUM, NULL)
                                           : sr_allreduce(g, hs, count, dt, SR_OP_SUM, NULL);
    if (st == SR_OK)
        st = sr_dev_upload(d, recv, kind == COLL_ALLREDUCE ? hs : hr, rb, "upload");
    d->record(d, ev, SR_STREAM_COMM);
    return st;
}

/* One collective of the engine on device buffers, on the comm stream, in
 * comm.h's shapes; *ev completes with it.  The data plane: the group's
 * NCCL communicator when it has one; on a device table other than the
 * cpu one, a group of one rank is a copy on the comm stream (or nothing,
 * in place), since the host transport cannot read device memory; on a GPU
 * without a communicator (virtual ranks), the staging above; else the host
 * transport's request (cpu and fake tables, whose memory the host reads).
 * sbytes and rbytes are the buffers' sizes, which the NCCL wrappers check
 * the count against; `what` names the collective for the happens-before
 * checker. */
static sr_status collective(sr_fsdp *f, coll_kind kind, const char *what, sr_group *g, void *recv, size_t rbytes,
                            const void *send, size_t sbytes, size_t count, sr_dtype dt, sr_event *ev) {
    sr_dev *d = f->dev;
    *ev = (sr_event){0};
    size_t es = sr_dtype_size(dt);
    if (f->nccl && sr_group_device_comm(g)) {
        sr_dev_declare(d, SR_STREAM_COMM, send, sbytes, false, what);
        sr_dev_declare(d, SR_STREAM_COMM, recv, rbytes, true, what);
        sr_status st = sr_nccl_collective(f->nccl, (sr_nccl_kind)kind, g, recv, rbytes, send, sbytes, count, dt);
        d->record(d, ev, SR_STREAM_COMM);
        return st;
    }
    if (sr_group_size(g) == 1 && d->kind != SR_DEV_CPU) {
        if (kind != COLL_ALLREDUCE && recv != send)
            d->copy(d, SR_STREAM_COMM, recv, send, count * es);
        d->record(d, ev, SR_STREAM_COMM);
        return SR_OK;
    }
    if (d->kind == SR_DEV_CUDA || (d->kind == SR_DEV_FAKE && sr_testhook()->staged))
        return staged_collective(f, kind, g, recv, send, count, dt, ev);
    sr_dev_collective(d, SR_STREAM_COMM, send, sbytes, recv, rbytes, what);
    sr_req *req = NULL;
    sr_status st = kind == COLL_ALLGATHER        ? sr_allgather(g, recv, send, count, dt, &req)
                   : kind == COLL_REDUCE_SCATTER ? sr_reduce_scatter(g, recv, send, count, dt, SR_OP_SUM, &req)
                                                 : sr_allreduce(g, recv, count, dt, SR_OP_SUM, &req);
    sr_dev_collective_event(d, ev);
    sr_event_from_req(ev, req);
    return st;
}

/* the host optimizer thread (offload), below */
static bool hopt_wait_unit(sr_fsdp *f, int ui, bool block);
static void hopt_wait_all(sr_fsdp *f);
static sr_status hopt_start(sr_fsdp *f);
static void hopt_stop(sr_fsdp *f);
static void hopt_pin(sr_fsdp *f);

/* The gather of a unit: into its own buffer or a free slot of the pool
 * (none free: a prefetch is skipped; the unit the model asks for always
 * finds one, by the pool's size); on the comm stream, once the buffer's
 * last reader is done, cast the shard into this rank's part (bf16), then
 * the all-gather; `ready` is its completion. */
static void issue_gather(sr_fsdp *f, unit *u, bool prefetch) {
    if (u->full || failed(f))
        return;
    /* offload: the host optimizer updates the units in forward order while
     * the device computes; a gather waits for its unit (a prefetch skips) */
    if (u->update_pending && !hopt_wait_unit(f, (int)(u - f->units), !prefetch))
        return;
    sr_dev *d = f->dev;
    size_t P = u->p->P, es = sr_dtype_size(f->pdt);
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
                fail(f,
                     sr_error(SR_ERR_INTERNAL, "no free slot in the full-unit pool for unit %d", (int)(u - f->units)));
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
        st = collective(f, COLL_ALLGATHER, "all-gather (reshard N)", u->ngroup, u->full, full_bytes, u->kept, part * es,
                        part, f->pdt, &u->ready);
        u->has_kept = false; /* consumed: the next forward gathers the shard again */
    } else if (f->offp) {
        /* no device copy of the shard: this rank's part is uploaded just in
         * time into its place in the full buffer, gathered in place */
        void *mine = (char *)u->full + (size_t)sr_group_rank(f->shard_g) * P * es;
        const void *host = f->pdt == SR_DT_F32 ? (const void *)(f->hparams + u->p->local)
                                               : (const void *)((const uint16_t *)f->hparams16 + u->p->local);
        d->copy(d, SR_STREAM_COMM, mine, host, P * es);
        st = collective(f, COLL_ALLGATHER, "all-gather (offloaded parameters)", f->shard_g, u->full, full_bytes, mine,
                        P * es, P, f->pdt, &u->ready);
    } else if (f->pdt == SR_DT_F32) {
        st = collective(f, COLL_ALLGATHER, "all-gather", f->shard_g, u->full, full_bytes, f->pshard + u->p->local,
                        P * 4, P, SR_DT_F32, &u->ready);
    } else {
        /* in place: this rank's part of the full buffer is the send buffer */
        void *mine = (char *)u->full + (size_t)sr_group_rank(f->shard_g) * P * 2;
        d->cast_f32_bf16(d, SR_STREAM_COMM, mine, f->pshard + u->p->local, P);
        st = collective(f, COLL_ALLGATHER, "all-gather (bf16)", f->shard_g, u->full, full_bytes, mine, P * 2, P,
                        SR_DT_BF16, &u->ready);
    }
    u->ag_pending = true;
    if (st != SR_OK)
        fail(f, st);
}

/* Makes stream s wait for the unit's gather. */
static void wait_gather(sr_fsdp *f, unit *u, sr_stream s) {
    if (!u->ag_pending)
        return;
    u->ag_pending = false;
    sr_status st = sr_dev_wait(f->dev, s, &u->ready, "gather_ready");
    if (st != SR_OK)
        fail(f, st);
}

/* The unit's full buffer is let go: compute's last use is recorded on it
 * (the next gather into it waits for that), and a pool slot is free. */
static void free_full(sr_fsdp *f, unit *u) {
    if (!u->full)
        return;
    wait_gather(f, u, SR_STREAM_COMPUTE);
    sr_dev *d = f->dev;
    if (u->slot >= 0) {
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

static sr_param_view hook_params(void *ctx, int layer) {
    sr_fsdp *f = ctx;
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
    if (failed(f) || !u->full)
        return (sr_param_view){NULL, f->pdt}; /* the pass ends; check() reports why */
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
        fail(f, st);
    float *g = f->gshard ? f->gshard + u->p->local : NULL;
    size_t P = u->p->P;
    slot *sl = u->rslot >= 0 ? &f->rpool[u->rslot] : NULL;
    if (st == SR_OK && sl && f->off && f->per_step) {
        /* the reduced shard goes to the host as its reduction ends (comm
         * stream: the slot's next reduction is ordered after the copy) */
        void *to =
            f->rdt == SR_DT_F32 ? (void *)(f->hgrads + u->p->local) : (void *)((uint16_t *)f->hrecv + u->p->local);
        d->copy(d, SR_STREAM_COMM, to, sl->recv, P * sr_dtype_size(f->rdt));
    } else if (st == SR_OK && sl && (!f->per_step || f->rdt == SR_DT_BF16)) {
        if (f->rdt == SR_DT_BF16)
            d->fold_bf16(d, SR_STREAM_COMM, g, sl->recv, P, !f->per_step);
        else
            d->add_f32(d, SR_STREAM_COMM, g, sl->recv, P);
    }
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
            fail(f, sr_error(SR_ERR_INTERNAL, "no free slot in the reduction pool for unit %d", (int)(u - f->units)));
            return NULL;
        }
    }
    slot *sl = &f->rpool[k];
    sl->unit = (int)(u - f->units);
    u->rslot = k;
    return sl;
}

static void issue_reduce(sr_fsdp *f, unit *u) {
    if (failed(f))
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
    /* fp32 once per step: straight into the gradient shard, written whole */
    void *recv = f->per_step && f->rdt == SR_DT_F32 && !f->off ? (void *)(f->gshard + u->p->local) : sl->recv;
    size_t res = sr_dtype_size(f->rdt);
    sr_status st = collective(f, COLL_REDUCE_SCATTER, "reduce-scatter", f->shard_g, recv, P * res, send, total * res, P,
                              f->rdt, &u->rs_done);
    u->ar_done = (sr_event){0};
    /* one replica needs no all-reduce; SHARDRUN_TEST_NCCL_SIZE1 runs it
     * anyway (a sum over one rank: the identity) to prove the call */
    if (st == SR_OK && (f->R > 1 || (f->nccl && sr_group_device_comm(f->rep_g)))) {
        st = collective(f, COLL_ALLREDUCE, "all-reduce (replicas)", f->rep_g, recv, P * res, recv, P * res, P, f->rdt,
                        &u->ar_done);
    }
    if (st != SR_OK)
        fail(f, st);
    u->rs_pending = true;
    if (sl)
        f->inflight[f->ninflight++] = (int)(u - f->units);
}

static float *hook_grads(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    size_t rel = f->m->layer_offset[layer] - u->p->off;
    float *g;
    if (f->per_step) {
        g = f->accum + u->p->accum_off;
    } else {
        if (u->rs_pending)
            finish_reduce(f, u); /* the previous micro-batch's reduction of this unit */
        if (u->rslot < 0) {
            slot *sl = take_rslot(f, u);
            if (!sl)
                return NULL;
            f->dev->memset(f->dev, SR_STREAM_COMPUTE, sl->grad, 0, (size_t)f->S * u->p->P * sizeof(float));
        }
        g = f->rpool[u->rslot].grad;
    }
    /* the model's kernels accumulate into the unit's gradients */
    sr_dev_declare(f->dev, SR_STREAM_COMPUTE, g, u->p->n * sizeof(float), false, "the model's kernels (gradients)");
    sr_dev_declare(f->dev, SR_STREAM_COMPUTE, g, u->p->n * sizeof(float), true, "the model's kernels (gradients)");
    return g + rel;
}

static void hook_done_backward(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    if (layer != u->p->first_layer)
        return;
    free_full(f, u);
    if (!f->per_step || f->last_mb) {
        /* the comm stream waits for the unit's gradients */
        sr_event grads_ready = {0};
        f->dev->record(f->dev, &grads_ready, SR_STREAM_COMPUTE);
        sr_dev_wait(f->dev, SR_STREAM_COMM, &grads_ready, "grads_ready");
        issue_reduce(f, u);
    }
}

/* ------------------------------------------------------------------------ */
/* set-up */

/* The shard, replicate and reshard-N groups, in that order on every rank. */
static sr_status create_groups(sr_fsdp *f, sr_transport *tp, sr_group *ngroups[2]) {
    int *ranks = sr_calloc((size_t)f->mesh.world + 1, sizeof(int));
    if (!ranks)
        return sr_error_oom("a group list");
    sr_status st = sr_group_create(tp, ranks, sr_mesh_shard_group(&f->mesh, ranks), &f->shard_g);
    if (st == SR_OK) {
        sr_group_set_name(f->shard_g, "shard");
        st = sr_group_create(tp, ranks, sr_mesh_replicate_group(&f->mesh, ranks), &f->rep_g);
    }
    if (st == SR_OK)
        sr_group_set_name(f->rep_g, "replicate");
    int64_t N[2] = {f->o.reshard_blocks, f->o.reshard_root};
    for (int i = 0; i < 2 && st == SR_OK; i++) {
        if (N[i] < 2)
            continue;
        if (i == 1 && N[1] == N[0]) {
            ngroups[1] = ngroups[0];
            continue;
        }
        st = sr_group_create(tp, ranks, sr_mesh_reshard_group(&f->mesh, (int)N[i], ranks), &ngroups[i]);
        if (st == SR_OK)
            sr_group_set_name(ngroups[i], i == 0 ? "reshard (blocks)" : "reshard (root)");
    }
    free(ranks);
    if (st == SR_OK) {
        f->groups[f->ngroups++] = f->shard_g;
        f->groups[f->ngroups++] = f->rep_g;
        for (int i = 0; i < 2; i++)
            if (ngroups[i] && (i == 0 || ngroups[1] != ngroups[0]))
                f->groups[f->ngroups++] = ngroups[i];
    }
    return st;
}

/* The full-unit buffers (ARCHITECTURE.md §3b has the table): the root's and every kept
 * unit's own, the N-way shares of reshard N, and the pool of 1 + max
 * prefetch slots of the largest block unit that is not kept (none when
 * all are) — exactly the memory contract's bound; and the reduction pool:
 * a root slot and two block slots, each the full gradient
 * (per_micro_batch), the bf16 cast (bf16 reductions) and the reduced
 * shard (unless fp32 per_step reductions, which need none).  Nothing is
 * allocated on the step path. */
static sr_status alloc_pools(sr_fsdp *f) {
    size_t es = sr_dtype_size(f->pdt), largest = 0, Pblk = 0, Proot = 0;
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        size_t P = u->p->P, full = (size_t)f->S * P * es;
        u->slot = u->rslot = -1;
        if (u->p->root)
            Proot = P;
        else
            Pblk = P > Pblk ? P : Pblk;
        if (u->p->root || u->reshard == SR_RESHARD_FALSE) {
            if (!(u->own = dalloc(f, SR_MEM_FULL_UNITS, full)))
                return SR_ERR_INTERNAL;
        } else if (full > largest) {
            largest = full;
        }
        if (u->reshard >= 2 && !(u->kept = dalloc(f, SR_MEM_FULL_UNITS, full / (size_t)u->reshard)))
            return SR_ERR_INTERNAL;
    }
    int ahead = f->o.prefetch_forward > f->o.prefetch_backward ? f->o.prefetch_forward : f->o.prefetch_backward;
    f->npool = largest ? 1 + ahead : 0;
    f->pool = sr_calloc((size_t)(f->npool ? f->npool : 1), sizeof(slot));
    if (!f->pool)
        return sr_error_oom("the full-unit pool");
    for (int k = 0; k < f->npool; k++) {
        f->pool[k].unit = -1;
        if (!(f->pool[k].buf = dalloc(f, SR_MEM_FULL_UNITS, largest)))
            return SR_ERR_INTERNAL;
    }
    f->use_rpool = !f->per_step || f->rdt == SR_DT_BF16 || f->off;
    size_t res = sr_dtype_size(f->rdt);
    for (int k = 0; k < RS_SLOTS; k++) {
        slot *sl = &f->rpool[k];
        sl->unit = -1;
        if (!f->use_rpool)
            continue;
        size_t P = k == 0 ? Proot : Pblk, total = (size_t)f->S * P;
        if (!f->per_step && !(sl->grad = dalloc(f, SR_MEM_COMM, total * sizeof(float))))
            return SR_ERR_INTERNAL;
        if (f->rdt == SR_DT_BF16 && !(sl->send = dalloc(f, SR_MEM_COMM, total * 2)))
            return SR_ERR_INTERNAL;
        if (!(sl->recv = dalloc(f, SR_MEM_COMM, P * res)))
            return SR_ERR_INTERNAL;
    }
    return SR_OK;
}

/* Shard buffers, the accumulation buffer, the staging buffer, the
 * step's scalars and the pools, on the device table. */
static sr_status alloc_buffers(sr_fsdp *f) {
    size_t local = f->plan.local_size;
    f->local_size = local;
    if (f->off) {
        /* host: the master, the gradient shard (and the landing of bf16
         * reductions, or the bf16 copy the gathers upload); zeroed padding */
        f->hparams = halloc(f, SR_MEM_PARAM_SHARD, local * sizeof(float));
        f->hgrads = f->hparams ? halloc(f, SR_MEM_GRAD_SHARD, local * sizeof(float)) : NULL;
        if (!f->hgrads)
            return SR_ERR_INTERNAL;
        memset(f->hparams, 0, local * sizeof(float));
        memset(f->hgrads, 0, local * sizeof(float));
        if (!(f->hscalars = halloc(f, SR_MEM_OTHER, sizeof(double))))
            return SR_ERR_INTERNAL;
        if (f->per_step && f->rdt == SR_DT_BF16) {
            if (!(f->hrecv = halloc(f, SR_MEM_COMM, local * 2)))
                return SR_ERR_INTERNAL;
            memset(f->hrecv, 0, local * 2);
        }
        if (f->offp && f->pdt == SR_DT_BF16) {
            if (!(f->hparams16 = halloc(f, SR_MEM_PARAM_SHARD, local * 2)))
                return SR_ERR_INTERNAL;
            memset(f->hparams16, 0, local * 2);
        }
    }
    /* the device's parameter shard (with offload: the copy the gathers
     * read; none with offload.params) and gradient shard (none with
     * offload per_step: reductions land in slots) */
    if (!f->offp && !(f->pshard = dalloc(f, SR_MEM_PARAM_SHARD, local * sizeof(float))))
        return SR_ERR_INTERNAL;
    if (!(f->off && f->per_step) && !(f->gshard = dalloc(f, SR_MEM_GRAD_SHARD, local * sizeof(float))))
        return SR_ERR_INTERNAL;
    /* the padding between slices is gathered and summed: keep it zero
     * (the master shard on the stream of its uploads) */
    if (f->pshard)
        f->dev->memset(f->dev, SR_STREAM_H2D, f->pshard, 0, local * sizeof(float));
    if (f->gshard)
        f->dev->memset(f->dev, SR_STREAM_COMPUTE, f->gshard, 0, local * sizeof(float));
    if (f->per_step) {
        f->accum = dalloc(f, SR_MEM_ACCUM, f->plan.accum_size * sizeof(float));
        if (!f->accum)
            return SR_ERR_INTERNAL;
        f->accum_n = f->plan.accum_size;
    }
    if (f->pdt != f->m->ops->act) {
        size_t largest = 0;
        for (int ui = 0; ui < f->nunits; ui++)
            largest = f->plan.units[ui].n > largest ? f->plan.units[ui].n : largest;
        f->stage = dalloc(f, SR_MEM_OTHER, largest * sizeof(float));
        if (!f->stage)
            return SR_ERR_INTERNAL;
    }
    f->sumsq = dalloc(f, SR_MEM_OTHER, 2 * sizeof(double)); /* sum of squares, loss sum */
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
    for (int i = 0; i < ns && st == SR_OK; i++)
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
        f->opt_ok = true;
    }
    if (st == SR_OK && f->off) {
        /* the device copy, and the host waits for it: a resume writes
         * the master next */
        st = sr_fsdp_state_loaded(f);
        sr_event up = {0};
        f->dev->record(f->dev, &up, SR_STREAM_H2D);
        if (st == SR_OK)
            st = sr_dev_host_wait(f->dev, &up, "upload");
    }
    free(slices);
    return st;
}

int sr_fsdp_groups(const sr_fsdp *f, sr_group **out, int max) {
    int n = 0;
    for (int i = 0; i < f->ngroups && n < max; i++)
        out[n++] = f->groups[i];
    return n;
}

void sr_fsdp_set_nccl(sr_fsdp *f, sr_nccl *n) { f->nccl = n; }

sr_status sr_fsdp_init(sr_fsdp **out, sr_model *m, const sr_mesh *mesh, const sr_fsdp_opts *o, sr_transport *tp) {
    *out = NULL;
    sr_fsdp *f = sr_calloc(1, sizeof *f);
    if (!f)
        return sr_error_oom("the sharding engine");
    sr_sticky_init(&f->err);
    *out = f;
    f->m = m;
    f->dev = m->dev;
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
    f->hspace = o->pin_memory ? SR_SPACE_PINNED : SR_SPACE_HOST;
    if (f->off && !(f->hdev = sr_dev_cpu_open()))
        return sr_error_oom("the host optimizer's table");
    sr_group *ngroups[2] = {NULL, NULL};
    sr_status st = create_groups(f, tp, ngroups);
    if (st == SR_OK)
        st = sr_shardplan_init(&f->plan, m->layer_offset, m->d.L, o->blocks_per_unit, f->S);
    if (st != SR_OK)
        return st;
    f->nunits = f->plan.nunits;
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
    st = alloc_buffers(f);
    if (st == SR_OK)
        st = init_master(f);
    if (st == SR_OK && f->off)
        st = hopt_start(f);
    if (st != SR_OK)
        return st;
    f->src = (sr_param_source){hook_params, hook_grads, hook_done_forward, hook_done_backward, f};
    return SR_OK;
}

void sr_fsdp_free(sr_fsdp *f) {
    if (!f)
        return;
    free(f->hstage);
    for (int ui = 0; f->units && ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        finish_reduce(f, u);
        free_full(f, u);
        dfree(f, &u->own);
        dfree(f, &u->kept);
    }
    for (int k = 0; f->pool && k < f->npool; k++)
        dfree(f, &f->pool[k].buf);
    free(f->pool);
    for (int k = 0; k < RS_SLOTS; k++) {
        dfree(f, (void **)&f->rpool[k].grad);
        dfree(f, &f->rpool[k].send);
        dfree(f, &f->rpool[k].recv);
    }
    hopt_stop(f);
    if (f->opt_ok)
        sr_optim_free(&f->opt);
    if (f->hdev)
        sr_device_close(f->hdev);
    if (f->dev) {
        dfree(f, (void **)&f->hparams);
        dfree(f, (void **)&f->hgrads);
        dfree(f, &f->hrecv);
        dfree(f, &f->hparams16);
        dfree(f, (void **)&f->hscalars);
        dfree(f, (void **)&f->pshard);
        dfree(f, (void **)&f->gshard);
        dfree(f, (void **)&f->accum);
        dfree(f, (void **)&f->stage);
        dfree(f, (void **)&f->sumsq);
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
    sr_status st = sr_sticky_raise(&f->err);
    return st != SR_OK ? st : model_st;
}

void sr_fsdp_begin_step(sr_fsdp *f) {
    sr_dev *d = f->dev;
    if (f->accum)
        d->memset(d, SR_STREAM_COMPUTE, f->accum, 0, f->accum_n * sizeof(float));
    if (f->gshard) /* none with offload per_step: the reductions are copied to the host whole */
        d->memset(d, SR_STREAM_COMPUTE, f->gshard, 0, f->local_size * sizeof(float));
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

sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B) {
    set_order(f, false);
    sr_status st = sr_model_forward(f->m, &f->src, inputs, targets, B);
    return check(f, st);
}

sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch) {
    hopt_wait_all(f); /* done by now (forward waited for every unit): the gradients' copies may land */
    set_order(f, true);
    f->last_mb = last_micro_batch;
    sr_status st = sr_model_backward(f->m, &f->src, dloss);
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

/* ------------------------------------------------------------------------ */
/* the host optimizer thread (offload) */

/* Forward order: the root, then the block units. */
static int unit_at_forward(const sr_fsdp *f, int pos) { return pos == 0 ? f->nunits - 1 : pos - 1; }
static int forward_pos(const sr_fsdp *f, int ui) { return ui == f->nunits - 1 ? 0 : ui + 1; }

/* AdamW on one unit's segments of the host master (the segments of a
 * unit are consecutive: sr_optim cuts the unit-ordered slices at tensor
 * boundaries), and the bf16 copy the gathers upload with offload.params. */
static void update_unit(sr_fsdp *f, const sr_adamw_launch *all, int ui) {
    const unit *u = &f->units[ui];
    size_t lo = u->p->local, hi = lo + u->p->P;
    int a = 0, b;
    while (a < all->nsegs && all->segs[a].off < lo)
        a++;
    for (b = a; b < all->nsegs && all->segs[b].off < hi; b++)
        ;
    sr_adamw_launch l = *all;
    l.segs = all->segs + a;
    l.nsegs = b - a;
    f->hdev->adamw(f->hdev, SR_STREAM_COMPUTE, &l);
    if (f->hparams16)
        sr_vec_f32_to_bf16_par((uint16_t *)f->hparams16 + lo, f->hparams + lo, u->p->P);
}

static void *hopt_main(void *arg) {
    sr_fsdp *f = arg;
    sr_mem_bind(f->mem);
#ifdef _OPENMP
    omp_set_num_threads(f->hopt_threads); /* the rank's threads, as a CPU run's AdamW */
#endif
    pthread_mutex_lock(&f->hopt_mu);
    for (;;) {
        while (!f->hopt_quit && f->hopt_done == f->hopt_job)
            pthread_cond_wait(&f->hopt_cv, &f->hopt_mu);
        if (f->hopt_quit)
            break;
        sr_adamw_launch l = f->hopt_launch;
        pthread_mutex_unlock(&f->hopt_mu);
        for (int pos = 0; pos < f->nunits; pos++) {
            update_unit(f, &l, unit_at_forward(f, pos));
            pthread_mutex_lock(&f->hopt_mu);
            f->hopt_updated = pos + 1;
            pthread_cond_broadcast(&f->hopt_cv);
            pthread_mutex_unlock(&f->hopt_mu);
        }
        pthread_mutex_lock(&f->hopt_mu);
        f->hopt_done = f->hopt_job;
        pthread_cond_broadcast(&f->hopt_cv);
    }
    pthread_mutex_unlock(&f->hopt_mu);
    return NULL;
}

/* Whether unit ui's master is updated for this step; `block` waits for it
 * (a prefetch does not: it skips the unit instead).  The host then owns
 * the unit's master again (declared to the checker). */
static bool hopt_wait_unit(sr_fsdp *f, int ui, bool block) {
    unit *u = &f->units[ui];
    if (!u->update_pending)
        return true;
    int need = forward_pos(f, ui) + 1;
    pthread_mutex_lock(&f->hopt_mu);
    while (f->hopt_done != f->hopt_job && f->hopt_updated < need) {
        if (!block) {
            pthread_mutex_unlock(&f->hopt_mu);
            return false;
        }
        pthread_cond_wait(&f->hopt_cv, &f->hopt_mu);
    }
    pthread_mutex_unlock(&f->hopt_mu);
    u->update_pending = false;
    if (f->dev->hb)
        sr_hb_access(f->dev->hb, SR_HB_HOST, f->hparams + u->p->local, u->p->P * sizeof(float), true,
                     "the host optimizer's AdamW (offload) writes the unit's master");
    return true;
}

/* Waits for the whole posted job (checkpoints, the dump, the next
 * gradients' copies to the host). */
static void hopt_wait_all(sr_fsdp *f) {
    if (!f->hopt_started)
        return;
    for (int ui = 0; ui < f->nunits; ui++)
        hopt_wait_unit(f, ui, true);
}

static sr_status hopt_start(sr_fsdp *f) {
    if (pthread_mutex_init(&f->hopt_mu, NULL) != 0)
        return sr_error_oom("the host optimizer's mutex");
    if (pthread_cond_init(&f->hopt_cv, NULL) != 0) {
        pthread_mutex_destroy(&f->hopt_mu);
        return sr_error_oom("the host optimizer's condition");
    }
    f->mem = sr_mem_bound();
#ifdef _OPENMP
    f->hopt_threads = omp_get_max_threads();
#endif
    if (pthread_create(&f->hopt, NULL, hopt_main, f) != 0) {
        pthread_cond_destroy(&f->hopt_cv);
        pthread_mutex_destroy(&f->hopt_mu);
        return sr_error(SR_ERR_INTERNAL, "cannot start the host optimizer thread: %s", strerror(errno));
    }
    f->hopt_started = true;
    hopt_pin(f);
    return SR_OK;
}

/* The optimizer thread on the cores of the GPU's NUMA node (sysfs
 * local_cpulist of its PCI device; written by hand: no library here reads
 * it), logged; unpinned, and said why, where that is unknown. */
static void hopt_pin(sr_fsdp *f) {
    const char *bus = f->dev->pci_bus;
    char path[128], list[1024] = "", why[160] = "";
    if (!bus[0]) {
        snprintf(why, sizeof why, "the %s device has no PCI bus id", f->dev->name);
    } else {
        char lower[32];
        size_t i = 0;
        for (; bus[i] && i + 1 < sizeof lower; i++)
            lower[i] = (char)(bus[i] >= 'A' && bus[i] <= 'F' ? bus[i] - 'A' + 'a' : bus[i]);
        lower[i] = '\0';
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/local_cpulist", lower);
        FILE *fp = fopen(path, "r");
        if (!fp || !fgets(list, sizeof list, fp))
            snprintf(why, sizeof why, "%s: %s", path, fp ? "empty" : strerror(errno));
        if (fp)
            fclose(fp);
        list[strcspn(list, "\n")] = '\0';
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = 0;
    for (char *p = list; !why[0] && *p;) { /* "0-15,32-47" */
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p)
            break;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++, n++)
            CPU_SET((int)c, &set);
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            break;
    }
    if (!why[0] && n == 0)
        snprintf(why, sizeof why, "cannot parse \"%s\"", list);
    if (!why[0] && pthread_setaffinity_np(f->hopt, sizeof set, &set) != 0)
        snprintf(why, sizeof why, "pthread_setaffinity_np failed");
    if (why[0])
        sr_log_info_all("offload: the host optimizer thread is unpinned (%s)", why);
    else
        sr_log_info_all("offload: the host optimizer thread runs on cores %s, the NUMA node of GPU bus %s", list, bus);
}

static void hopt_stop(sr_fsdp *f) {
    if (!f->hopt_started)
        return;
    pthread_mutex_lock(&f->hopt_mu);
    f->hopt_quit = true;
    pthread_cond_broadcast(&f->hopt_cv);
    pthread_mutex_unlock(&f->hopt_mu);
    pthread_join(f->hopt, NULL);
    pthread_cond_destroy(&f->hopt_cv);
    pthread_mutex_destroy(&f->hopt_mu);
    f->hopt_started = false;
}

/* Offload: the gradient shard on the host once every reduction's copy is
 * there (one host wait for the comm stream), and the loss sum read back. */
static sr_status host_grads(sr_fsdp *f, double *loss_sum) {
    sr_dev *d = f->dev;
    sr_event loss_ready = {0}, comm_done = {0};
    d->copy(d, SR_STREAM_COMPUTE, f->sumsq + 1, f->m->loss_acc, sizeof(double));
    d->memset(d, SR_STREAM_COMPUTE, f->m->loss_acc, 0, sizeof(double));
    d->record(d, &loss_ready, SR_STREAM_COMPUTE);
    sr_dev_wait(d, SR_STREAM_COMM, &loss_ready, "offload_scalars");
    d->copy(d, SR_STREAM_COMM, f->hscalars, f->sumsq + 1, sizeof(double));
    if (!f->per_step) /* per_micro_batch: the shard was summed on the device */
        d->copy(d, SR_STREAM_COMM, f->hgrads, f->gshard, f->local_size * sizeof(float));
    d->record(d, &comm_done, SR_STREAM_COMM);
    sr_status st = sr_dev_host_wait(d, &comm_done, "grads_on_host");
    if (d->hb) { /* what the host reads next: the checker sees a missing wait */
        sr_hb_access(d->hb, SR_HB_HOST, f->hscalars, sizeof(double), false, "the host reads the step's loss (offload)");
        sr_hb_access(d->hb, SR_HB_HOST, f->per_step && f->rdt == SR_DT_BF16 ? f->hrecv : (void *)f->hgrads,
                     f->local_size * (f->per_step && f->rdt == SR_DT_BF16 ? 2 : 4), false,
                     "the host reads the gradient shard (offload)");
    }
    *loss_sum = f->hscalars[0];
    if (st == SR_OK && f->per_step && f->rdt == SR_DT_BF16) /* exact widening, as the device's fold */
        sr_vec_bf16_to_f32_par(f->hgrads, f->hrecv, f->local_size);
    return st;
}

sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *loss_sum, double *grad_norm) {
    hopt_wait_all(f);
    for (int ui = 0; ui < f->nunits; ui++)
        finish_reduce(f, &f->units[ui]);
    f->ninflight = 0;
    sr_status st = check(f, SR_OK);
    if (st != SR_OK)
        return st;
    sr_dev *d = f->dev;
    double ss = 0.0;
    if (f->off) {
        st = host_grads(f, loss_sum);
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
        d->memset(d, SR_STREAM_COMPUTE, f->m->loss_acc, 0, sizeof(double));
        d->record(d, &sum_done, SR_STREAM_COMPUTE);
        sr_dev_wait(d, SR_STREAM_D2H, &sum_done, "scalars_ready");
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

sr_status sr_fsdp_state_loaded(sr_fsdp *f) {
    if (!f->off)
        return SR_OK;
    hopt_wait_all(f);
    if (f->offp) {
        if (f->pdt == SR_DT_BF16) /* the copy each gather uploads */
            sr_vec_f32_to_bf16_par(f->hparams16, f->hparams, f->local_size);
        return SR_OK;
    }
    /* the device copy the gathers read.  Its last readers are done: this
     * runs after the step's host wait for the comm stream (whose last
     * reduction follows every gather on the transport), or before any
     * gather (initialisation, resume); the checker proves it */
    sr_dev *d = f->dev;
    sr_event uploaded = {0};
    if (d->hb)
        sr_hb_access(d->hb, SR_HB_HOST, f->hparams, f->local_size * sizeof(float), true,
                     "the host's AdamW (offload) writes the master shard");
    d->copy(d, SR_STREAM_H2D, f->pshard, f->hparams, f->local_size * sizeof(float));
    d->record(d, &uploaded, SR_STREAM_H2D);
    return sr_dev_wait(d, SR_STREAM_COMM, &uploaded, "params_updated");
}

void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale) {
    free_all_full(f); /* gathered copies are stale once the shard moves */
    if (f->off) {
        /* posted to the host optimizer thread; the next gathers wait for
         * their units (issue_gather) and upload them */
        hopt_wait_all(f);
        f->hopt_launch = sr_optim_launch(&f->opt, f->hparams, f->hgrads, step, lr, o, grad_scale);
        for (int ui = 0; ui < f->nunits; ui++) {
            f->units[ui].update_pending = true;
            f->units[ui].copy_stale = !f->offp;
        }
        pthread_mutex_lock(&f->hopt_mu);
        f->hopt_job++;
        f->hopt_updated = 0;
        pthread_cond_broadcast(&f->hopt_cv);
        pthread_mutex_unlock(&f->hopt_mu);
        return;
    }
    sr_optim_step(&f->opt, f->pshard, f->gshard, step, lr, o, grad_scale);
    /* the next gathers read the updated shard: the comm stream waits */
    sr_event updated = {0};
    f->dev->record(f->dev, &updated, SR_STREAM_COMPUTE);
    sr_dev_wait(f->dev, SR_STREAM_COMM, &updated, "params_updated");
}

void sr_fsdp_shard_state_view(sr_fsdp *f, sr_fsdp_shard_state *out) {
    hopt_wait_all(f); /* offload: the host optimizer's update is complete */
    /* the reader (a checkpoint's downloads) waits for the last AdamW */
    sr_event updated = {0};
    f->dev->record(f->dev, &updated, SR_STREAM_COMPUTE);
    sr_dev_wait(f->dev, SR_STREAM_D2H, &updated, "state_ready");
    *out = (sr_fsdp_shard_state){.dev = f->off ? NULL : f->dev,
                                 .slices = f->opt.slices,
                                 .nslices = f->opt.nslices,
                                 .params = f->off ? f->hparams : f->pshard,
                                 .m = f->opt.m,
                                 .v = f->opt.v,
                                 .local_size = f->local_size,
                                 .plan = &f->plan,
                                 .mesh = &f->mesh};
}

int sr_fsdp_units(const sr_fsdp *f) { return f->nunits; }

/* ------------------------------------------------------------------------ */
/* the parameter dump (test suite) */

typedef struct {
    const sr_model *m;
    const float *full; /* the whole unit-major vector */
} dump_ctx;

static sr_status write_dump(int fd, const char *tmp, void *arg) {
    const dump_ctx *d = arg;
    const sr_model *m = d->m;
    int32_t n = m->n_tensors;
    if (sr_fsio_write_all(fd, "SRPARAMS", 8) != 0 || sr_fsio_write_all(fd, &n, 4) != 0)
        return sr_fsio_write_error(tmp, errno);
    for (int i = 0; i < m->n_tensors; i++) {
        char name[64] = {0};
        snprintf(name, sizeof name, "%s", m->tensors[i].name);
        int64_t numel = (int64_t)m->tensors[i].numel;
        if (sr_fsio_write_all(fd, name, 64) != 0 || sr_fsio_write_all(fd, &numel, 8) != 0)
            return sr_fsio_write_error(tmp, errno);
    }
    if (sr_fsio_write_all(fd, d->full, m->n_params * sizeof(float)) != 0)
        return sr_fsio_write_error(tmp, errno);
    return SR_OK;
}

sr_status sr_fsdp_dump_grads(sr_fsdp *f, const char *path) {
    const sr_model *m = f->m;
    if (f->S != 1 || f->mesh.world != 1 || !f->gshard)
        return sr_error(SR_ERR_CONFIG, "the gradient dump (SHARDRUN_TEST_ORACLE) needs one rank and no offload");
    float *full = sr_malloc(m->n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the gradient dump");
    sr_status st = SR_OK;
    for (int ui = 0; ui < f->nunits && st == SR_OK; ui++) {
        const sr_unit_plan *u = &f->plan.units[ui];
        st = sr_dev_download(f->dev, full + u->off, f->gshard + u->local, u->n * sizeof(float), "download");
    }
    if (st == SR_OK) {
        dump_ctx d = {m, full};
        st = sr_fsio_atomic_write(path, write_dump, &d);
    }
    free(full);
    return st;
}

sr_status sr_fsdp_gather_params(sr_fsdp *f, float *full) {
    hopt_wait_all(f);
    size_t biggest = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        biggest = f->plan.units[ui].P > biggest ? f->plan.units[ui].P : biggest;
    float *unit_buf = dalloc(f, SR_MEM_OTHER, (size_t)f->S * biggest * sizeof(float));
    if (!unit_buf)
        return sr_error_oom("the parameter gather");
    sr_status st = SR_OK;
    for (int ui = 0; ui < f->nunits && st == SR_OK; ui++) {
        const sr_unit_plan *u = &f->plan.units[ui];
        sr_event gathered;
        const float *mine = f->off ? NULL : f->pshard + u->local;
        if (f->off) { /* the master is on the host: upload this rank's part in place */
            float *part = unit_buf + (size_t)sr_group_rank(f->shard_g) * u->P;
            f->dev->copy(f->dev, SR_STREAM_COMM, part, f->hparams + u->local, u->P * 4);
            mine = part;
        }
        st = collective(f, COLL_ALLGATHER, "all-gather (parameter dump)", f->shard_g, unit_buf, (size_t)f->S * u->P * 4,
                        mine, u->P * 4, u->P, SR_DT_F32, &gathered);
        sr_status wst = sr_dev_host_wait(f->dev, &gathered, "dump_gathered");
        if (st == SR_OK)
            st = wst;
        if (st == SR_OK)
            st = sr_dev_download(f->dev, full + u->off, unit_buf, u->n * sizeof(float), "download");
    }
    dfree(f, (void **)&unit_buf);
    return st;
}

sr_status sr_fsdp_dump_params(sr_fsdp *f, const char *path) {
    const sr_model *m = f->m;
    float *full = sr_malloc(m->n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the parameter dump");
    sr_status st = sr_fsdp_gather_params(f, full);
    if (st == SR_OK && f->mesh.rank == 0) {
        dump_ctx d = {m, full};
        st = sr_fsio_atomic_write(path, write_dump, &d);
    }
    free(full);
    return st;
}
