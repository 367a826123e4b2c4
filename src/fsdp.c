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
 * Failures inside the model's hooks (which cannot return a status) are
 * kept in a sticky error (status.h) and returned by the pass. */
#include "srconfig.h"

#include "fsdp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fsio.h"
#include "mem.h"
#include "vec.h"

typedef struct {
    const sr_unit_plan *p;
    int64_t reshard;
    sr_group *ngroup; /* reshard N group, or NULL */
    /* parameters */
    void *full;          /* S*P elements of the param dtype, or NULL */
    sr_event ready;      /* the gather into full (a transport event on the cpu tables) */
    bool ag_pending;     /* `ready` not yet waited for */
    void *ag_send;       /* bf16 send buffer of the gather (SR_MEM_COMM) */
    void *kept;          /* reshard N: this rank's 1/N of the full unit */
    bool kept_in_flight; /* kept is the send buffer of the pending gather */
    /* gradients */
    float *gfull; /* per_micro_batch: transient full gradient (SR_MEM_COMM) */
    sr_event rs_done, ar_done;
    void *rs_send, *rs_recv;
    bool rs_pending;
} unit;

struct sr_fsdp {
    sr_model *m;
    sr_dev *dev;
    sr_fsdp_opts o;
    sr_mesh mesh;
    sr_shardplan plan;
    int S, R;
    sr_group *shard_g, *rep_g;
    int nunits;
    unit *units;
    float *pshard, *gshard;
    size_t local_size;
    sr_optim opt;
    bool opt_ok;
    float *accum;
    size_t accum_n;
    float *stage; /* the ops compute in another dtype than the gathered units: one unit widened */
    int staged_unit;
    double *sumsq; /* the gradient shard's sum of squares, in the table's memory */
    sr_dtype pdt, rdt;
    bool per_step;
    int *order, norder, pos;
    bool backward, last_mb;
    int inflight[8], ninflight; /* units with a pending reduction, oldest first (per_micro_batch) */
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

static void dfree(sr_fsdp *f, void **p) {
    f->dev->free(f->dev, *p);
    *p = NULL;
}

/* The gather of a unit: on the comm stream, cast the shard (bf16), then
 * the all-gather; `ready` is its completion. */
static void issue_gather(sr_fsdp *f, unit *u) {
    if (u->full || failed(f))
        return;
    sr_dev *d = f->dev;
    size_t P = u->p->P, es = sr_dtype_size(f->pdt);
    u->full = dalloc(f, SR_MEM_FULL_UNITS, (size_t)f->S * P * es);
    if (!u->full)
        return;
    sr_status st;
    sr_req *req = NULL;
    if (u->kept) {
        int N = sr_group_size(u->ngroup);
        st = sr_allgather(u->ngroup, u->full, u->kept, (size_t)f->S * P / (size_t)N, f->pdt, &req);
        u->kept_in_flight = true;
    } else if (f->pdt == SR_DT_F32) {
        st = sr_allgather(f->shard_g, u->full, f->pshard + u->p->local, P, SR_DT_F32, &req);
    } else {
        u->ag_send = dalloc(f, SR_MEM_COMM, P * 2);
        if (!u->ag_send)
            return;
        d->cast_f32_bf16(d, SR_STREAM_COMM, u->ag_send, f->pshard + u->p->local, P);
        st = sr_allgather(f->shard_g, u->full, u->ag_send, P, SR_DT_BF16, &req);
    }
    sr_event_from_req(&u->ready, req);
    u->ag_pending = true;
    if (st != SR_OK)
        fail(f, st);
}

/* Makes stream s wait for the unit's gather and releases its send
 * buffers. */
static void wait_gather(sr_fsdp *f, unit *u, sr_stream s) {
    if (!u->ag_pending)
        return;
    u->ag_pending = false;
    sr_status st = f->dev->wait(f->dev, s, &u->ready);
    if (st != SR_OK)
        fail(f, st);
    dfree(f, &u->ag_send);
    if (u->kept_in_flight) {
        dfree(f, &u->kept);
        u->kept_in_flight = false;
    }
}

static void free_full(sr_fsdp *f, unit *u) {
    wait_gather(f, u, SR_STREAM_COMPUTE);
    dfree(f, &u->full);
    dfree(f, &u->kept);
    if (f->staged_unit == (int)(u - f->units))
        f->staged_unit = -1;
}

/* After the forward of a unit: free it, keep it, or keep an N-way shard. */
static void reshard_after_forward(sr_fsdp *f, unit *u) {
    if (u->reshard == SR_RESHARD_FALSE || !u->full)
        return;
    if (u->reshard == SR_RESHARD_TRUE) {
        free_full(f, u);
        return;
    }
    int N = sr_group_size(u->ngroup), j = sr_group_rank(u->ngroup);
    size_t es = sr_dtype_size(f->pdt), part = (size_t)f->S * u->p->P / (size_t)N;
    wait_gather(f, u, SR_STREAM_COMPUTE);
    u->kept = dalloc(f, SR_MEM_FULL_UNITS, part * es);
    if (!u->kept)
        return;
    f->dev->copy(f->dev, SR_STREAM_COMPUTE, u->kept, (char *)u->full + (size_t)j * part * es, part * es);
    dfree(f, &u->full);
    if (f->staged_unit == (int)(u - f->units))
        f->staged_unit = -1;
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
    issue_gather(f, u);
    wait_gather(f, u, SR_STREAM_COMPUTE);
    int ahead = f->backward ? f->o.prefetch_backward : f->o.prefetch_forward;
    for (int k = f->pos + 1; k < f->norder && k <= f->pos + ahead; k++)
        if (f->order[k] != ui)
            issue_gather(f, &f->units[f->order[k]]);
    size_t rel = f->m->layer_offset[layer] - u->p->off;
    if (failed(f) || !u->full)
        return (sr_param_view){NULL, f->pdt}; /* the pass ends; check() reports why */
    if (f->pdt == f->m->ops->act)
        return (sr_param_view){(char *)u->full + rel * sr_dtype_size(f->pdt), f->pdt};
    if (f->staged_unit != ui) {
        /* the ops compute in fp32 (the CPU): widen the bf16 unit once */
        f->dev->fold_bf16(f->dev, SR_STREAM_COMPUTE, f->stage, u->full, u->p->n, false);
        f->staged_unit = ui;
    }
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
 * gradient shard there, and releases its buffers. */
static void finish_reduce(sr_fsdp *f, unit *u) {
    if (!u->rs_pending)
        return;
    sr_dev *d = f->dev;
    sr_status st = d->wait(d, SR_STREAM_COMM, &u->rs_done);
    sr_status st2 = d->wait(d, SR_STREAM_COMM, &u->ar_done);
    if (st == SR_OK)
        st = st2;
    if (st != SR_OK)
        fail(f, st);
    float *g = f->gshard + u->p->local;
    size_t P = u->p->P;
    if (st == SR_OK && u->rs_recv) {
        if (f->rdt == SR_DT_BF16)
            d->fold_bf16(d, SR_STREAM_COMM, g, u->rs_recv, P, !f->per_step);
        else
            d->add_f32(d, SR_STREAM_COMM, g, u->rs_recv, P);
    }
    dfree(f, &u->rs_send);
    dfree(f, &u->rs_recv);
    dfree(f, (void **)&u->gfull);
    u->rs_pending = false;
}

static void issue_reduce(sr_fsdp *f, unit *u) {
    if (failed(f))
        return;
    sr_dev *d = f->dev;
    size_t P = u->p->P;
    const float *full = f->per_step ? f->accum + u->p->accum_off : u->gfull;
    size_t total = (size_t)f->S * P;
    const void *send = full;
    if (f->rdt == SR_DT_BF16) {
        u->rs_send = dalloc(f, SR_MEM_COMM, total * 2);
        if (!u->rs_send)
            return;
        d->cast_f32_bf16(d, SR_STREAM_COMM, u->rs_send, full, total);
        send = u->rs_send;
    }
    void *recv;
    if (f->per_step && f->rdt == SR_DT_F32) {
        recv = f->gshard + u->p->local; /* written whole: one reduction per step */
    } else {
        u->rs_recv = dalloc(f, SR_MEM_COMM, P * sr_dtype_size(f->rdt));
        if (!u->rs_recv)
            return;
        recv = u->rs_recv;
    }
    sr_req *rs = NULL, *ar = NULL;
    sr_status st = sr_reduce_scatter(f->shard_g, recv, send, P, f->rdt, SR_OP_SUM, &rs);
    if (st == SR_OK && f->R > 1)
        st = sr_allreduce(f->rep_g, recv, P, f->rdt, SR_OP_SUM, &ar);
    sr_event_from_req(&u->rs_done, rs);
    sr_event_from_req(&u->ar_done, ar);
    if (st != SR_OK)
        fail(f, st);
    u->rs_pending = true;
    if (!f->per_step) {
        /* keep at most two reductions in flight: bounds transient memory */
        if (f->ninflight == 2) {
            finish_reduce(f, &f->units[f->inflight[0]]);
            f->inflight[0] = f->inflight[1];
            f->ninflight = 1;
        }
        f->inflight[f->ninflight++] = (int)(u - f->units);
    }
}

static float *hook_grads(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->plan.unit_of_layer[layer]];
    size_t rel = f->m->layer_offset[layer] - u->p->off;
    if (f->per_step)
        return f->accum + u->p->accum_off + rel;
    if (u->rs_pending)
        finish_reduce(f, u); /* the previous micro-batch's reduction of this unit */
    if (!u->gfull) {
        size_t bytes = (size_t)f->S * u->p->P * sizeof(float);
        u->gfull = dalloc(f, SR_MEM_COMM, bytes);
        if (!u->gfull)
            return NULL;
        f->dev->memset(f->dev, SR_STREAM_COMPUTE, u->gfull, 0, bytes);
    }
    return u->gfull + rel;
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
        f->dev->wait(f->dev, SR_STREAM_COMM, &grads_ready);
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
    if (st == SR_OK)
        st = sr_group_create(tp, ranks, sr_mesh_replicate_group(&f->mesh, ranks), &f->rep_g);
    int64_t N[2] = {f->o.reshard_blocks, f->o.reshard_root};
    for (int i = 0; i < 2 && st == SR_OK; i++) {
        if (N[i] < 2)
            continue;
        if (i == 1 && N[1] == N[0]) {
            ngroups[1] = ngroups[0];
            continue;
        }
        st = sr_group_create(tp, ranks, sr_mesh_reshard_group(&f->mesh, (int)N[i], ranks), &ngroups[i]);
    }
    free(ranks);
    return st;
}

/* Shard buffers, the accumulation buffer, the staging buffer and the
 * sum-of-squares scalar, on the device table. */
static sr_status alloc_buffers(sr_fsdp *f) {
    size_t local = f->plan.local_size;
    f->local_size = local;
    f->pshard = dalloc(f, SR_MEM_PARAM_SHARD, local * sizeof(float));
    f->gshard = f->pshard ? dalloc(f, SR_MEM_GRAD_SHARD, local * sizeof(float)) : NULL;
    if (!f->pshard || !f->gshard)
        return SR_ERR_INTERNAL;
    /* the padding between slices is gathered and summed: keep it zero */
    f->dev->memset(f->dev, SR_STREAM_COMPUTE, f->pshard, 0, local * sizeof(float));
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
    f->sumsq = dalloc(f, SR_MEM_OTHER, sizeof(double));
    return f->sumsq ? SR_OK : SR_ERR_INTERNAL;
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
            sr_model_init_params(f->m, f->o.seed, piece, b, e);
            st = sr_dev_upload(f->dev, f->pshard + slices[i].local + (b - slices[i].begin), piece,
                               (e - b) * sizeof(float));
        }
    free(piece);
    if (st == SR_OK) {
        st = sr_optim_init_slices(&f->opt, f->m, f->dev, slices, ns, f->local_size);
        f->opt_ok = true;
    }
    free(slices);
    return st;
}

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
    }
    if (f->opt_ok)
        sr_optim_free(&f->opt);
    if (f->dev) {
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
    set_order(f, true);
    f->last_mb = last_micro_batch;
    sr_status st = sr_model_backward(f->m, &f->src, dloss);
    return check(f, st);
}

sr_status sr_fsdp_take_loss_sum(sr_fsdp *f, double *loss_sum) { return sr_model_take_loss_sum(f->m, loss_sum); }

static void free_all_full(sr_fsdp *f) {
    for (int ui = 0; ui < f->nunits; ui++)
        free_full(f, &f->units[ui]);
    f->staged_unit = -1;
}

sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B) {
    set_order(f, false);
    sr_status st = sr_model_forward(f->m, &f->src, inputs, targets, B);
    free_all_full(f);
    return check(f, st);
}

sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *grad_norm) {
    for (int ui = 0; ui < f->nunits; ui++)
        finish_reduce(f, &f->units[ui]);
    f->ninflight = 0;
    sr_status st = check(f, SR_OK);
    if (st != SR_OK)
        return st;
    /* every reduction folded (comm) and every gradient written (compute)
     * before the sum of squares, read back once */
    sr_dev *d = f->dev;
    sr_event comm_done = {0}, sum_done = {0};
    d->record(d, &comm_done, SR_STREAM_COMM);
    d->wait(d, SR_STREAM_COMPUTE, &comm_done);
    d->sum_squares(d, SR_STREAM_COMPUTE, f->sumsq, f->gshard, f->local_size);
    d->record(d, &sum_done, SR_STREAM_COMPUTE);
    d->wait(d, SR_STREAM_D2H, &sum_done);
    double ss = 0.0;
    st = sr_dev_download(d, &ss, f->sumsq, sizeof ss);
    /* replicas hold equal shards: sum squares over the shard group only */
    if (st == SR_OK)
        st = sr_allreduce(f->shard_g, &ss, 1, SR_DT_F64, SR_OP_SUM, NULL);
    *grad_norm = sqrt(ss);
    return st;
}

void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale) {
    free_all_full(f); /* gathered copies are stale once the shard moves */
    sr_optim_step(&f->opt, f->pshard, f->gshard, step, lr, o, grad_scale);
}

void sr_fsdp_shard_state_view(sr_fsdp *f, sr_fsdp_shard_state *out) {
    *out = (sr_fsdp_shard_state){.dev = f->dev,
                                 .slices = f->opt.slices,
                                 .nslices = f->opt.nslices,
                                 .params = f->pshard,
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

sr_status sr_fsdp_dump_params(sr_fsdp *f, const char *path) {
    const sr_model *m = f->m;
    size_t biggest = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        biggest = f->plan.units[ui].P > biggest ? f->plan.units[ui].P : biggest;
    float *full = sr_malloc(m->n_params * sizeof(float));
    float *unit_buf = dalloc(f, SR_MEM_OTHER, (size_t)f->S * biggest * sizeof(float));
    if (!full || !unit_buf) {
        free(full);
        dfree(f, (void **)&unit_buf);
        return sr_error_oom("the parameter dump");
    }
    sr_status st = SR_OK;
    for (int ui = 0; ui < f->nunits && st == SR_OK; ui++) {
        const sr_unit_plan *u = &f->plan.units[ui];
        st = sr_allgather(f->shard_g, unit_buf, f->pshard + u->local, u->P, SR_DT_F32, NULL);
        if (st == SR_OK)
            st = sr_dev_download(f->dev, full + u->off, unit_buf, u->n * sizeof(float));
    }
    if (st == SR_OK && f->mesh.rank == 0) {
        dump_ctx d = {m, full};
        st = sr_fsio_atomic_write(path, write_dump, &d);
    }
    free(full);
    dfree(f, (void **)&unit_buf);
    return st;
}
