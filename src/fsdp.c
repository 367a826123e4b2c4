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
 * wait in between. */
#include "srconfig.h"

#include "fsdp.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

typedef struct {
    int first_layer, last_layer; /* inclusive; the root is L..L */
    bool root;
    size_t off, n; /* global offset and size (floats) */
    size_t P;      /* padded shard size: ceil(n / S) */
    size_t local;  /* offset of this unit's shard in the shard buffers */
    size_t accum_off;
    int64_t reshard;
    sr_group *ngroup; /* reshard N group, or NULL */
    /* parameters */
    void *full; /* S*P elements of the param dtype, or NULL */
    sr_req *ag_req;
    void *ag_send;
    size_t ag_send_bytes;
    void *kept; /* reshard N: this rank's 1/N of the full unit */
    size_t kept_bytes;
    bool kept_in_flight; /* kept is the send buffer of ag_req */
    /* gradients */
    float *gfull; /* per_micro_batch: transient full gradient (SR_MEM_COMM) */
    sr_req *rs_req, *ar_req;
    void *rs_send;
    size_t rs_send_bytes;
    void *rs_recv;
    size_t rs_recv_bytes;
    bool rs_pending;
} unit;

struct sr_fsdp {
    sr_model *m;
    const sr_config *cfg;
    sr_world *w;
    sr_transport *tp;
    int S, R, shard_idx, rep_idx;
    sr_group *world_g, *shard_g, *rep_g;
    int nunits;
    unit *units;
    int *unit_of_layer;
    float *pshard, *gshard;
    size_t local_size;
    sr_optim opt;
    bool opt_ok;
    float *accum;
    size_t accum_n;
    float *stage;
    size_t stage_n;
    int staged_unit;
    sr_dtype pdt, rdt;
    bool per_step;
    int *order, norder, pos;
    bool backward, last_mb;
    int inflight[8], ninflight; /* units with a pending reduction, oldest first (per_micro_batch) */
    sr_param_source src;
    sr_status err;
    char err_msg[512];
    float *poison;
    size_t poison_n;
};

static size_t esize(sr_dtype dt) { return sr_dtype_size(dt); }

static void fail(sr_fsdp *f, sr_status st) {
    if (f->err == SR_OK) {
        f->err = st;
        snprintf(f->err_msg, sizeof f->err_msg, "%s", sr_error_message());
    }
}

/* When a collective failed inside a hook the model still needs a buffer to
 * run to the end of its pass; it gets zeros and the pass reports the error. */
static float *poison(sr_fsdp *f, size_t n) {
    if (f->poison_n < n) {
        free(f->poison);
        f->poison = calloc(n, sizeof(float));
        f->poison_n = f->poison ? n : 0;
    }
    return f->poison;
}

/* ------------------------------------------------------------------------ */
/* parameters */

static void issue_gather(sr_fsdp *f, unit *u) {
    if (u->full || f->err != SR_OK)
        return;
    size_t es = esize(f->pdt), full_bytes = (size_t)f->S * u->P * es;
    u->full = sr_mem_alloc(SR_MEM_FULL_UNITS, full_bytes);
    if (!u->full) {
        fail(f, SR_ERR_INTERNAL);
        return;
    }
    sr_status st;
    if (u->kept) {
        int N = sr_group_size(u->ngroup);
        st = sr_allgather(u->ngroup, u->full, u->kept, (size_t)f->S * u->P / (size_t)N, f->pdt, &u->ag_req);
        u->kept_in_flight = true;
    } else if (f->pdt == SR_DT_F32) {
        st = sr_allgather(f->shard_g, u->full, f->pshard + u->local, u->P, SR_DT_F32, &u->ag_req);
    } else {
        u->ag_send_bytes = u->P * 2;
        u->ag_send = sr_mem_alloc(SR_MEM_COMM, u->ag_send_bytes);
        if (!u->ag_send) {
            fail(f, SR_ERR_INTERNAL);
            return;
        }
        sr_f32_to_bf16_n(u->ag_send, f->pshard + u->local, u->P);
        st = sr_allgather(f->shard_g, u->full, u->ag_send, u->P, SR_DT_BF16, &u->ag_req);
    }
    if (st != SR_OK)
        fail(f, st);
}

/* Waits for *req (if any), clears it, and records a failure; returns its status. */
static sr_status wait_req(sr_fsdp *f, sr_req **req) {
    if (!*req)
        return SR_OK;
    sr_status st = sr_wait(*req);
    *req = NULL;
    if (st != SR_OK)
        fail(f, st);
    return st;
}

static void wait_gather(sr_fsdp *f, unit *u) {
    if (!u->ag_req)
        return;
    wait_req(f, &u->ag_req);
    if (u->ag_send) {
        sr_mem_free(SR_MEM_COMM, u->ag_send, u->ag_send_bytes);
        u->ag_send = NULL;
    }
    if (u->kept_in_flight) {
        sr_mem_free(SR_MEM_FULL_UNITS, u->kept, u->kept_bytes);
        u->kept = NULL;
        u->kept_in_flight = false;
    }
}

static void free_full(sr_fsdp *f, unit *u) {
    wait_gather(f, u);
    if (u->full) {
        sr_mem_free(SR_MEM_FULL_UNITS, u->full, (size_t)f->S * u->P * esize(f->pdt));
        u->full = NULL;
    }
    if (u->kept) {
        sr_mem_free(SR_MEM_FULL_UNITS, u->kept, u->kept_bytes);
        u->kept = NULL;
    }
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
    size_t es = esize(f->pdt), part = (size_t)f->S * u->P / (size_t)N;
    wait_gather(f, u);
    u->kept_bytes = part * es;
    u->kept = sr_mem_alloc(SR_MEM_FULL_UNITS, u->kept_bytes);
    if (!u->kept) {
        fail(f, SR_ERR_INTERNAL);
        return;
    }
    memcpy(u->kept, (char *)u->full + (size_t)j * part * es, part * es);
    sr_mem_free(SR_MEM_FULL_UNITS, u->full, (size_t)f->S * u->P * es);
    u->full = NULL;
    if (f->staged_unit == (int)(u - f->units))
        f->staged_unit = -1;
}

static float *hook_params(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    int ui = f->unit_of_layer[layer];
    unit *u = &f->units[ui];
    /* advance the position in the order to this unit */
    for (int k = f->pos; k < f->norder; k++)
        if (f->order[k] == ui) {
            f->pos = k;
            break;
        }
    issue_gather(f, u);
    wait_gather(f, u);
    int ahead = (int)(f->backward ? f->cfg->prefetch_backward : f->cfg->prefetch_forward);
    for (int k = f->pos + 1; k < f->norder && k <= f->pos + ahead; k++)
        if (f->order[k] != ui)
            issue_gather(f, &f->units[f->order[k]]);
    size_t rel = f->m->layer_offset[layer] - u->off;
    if (f->err != SR_OK || !u->full)
        return poison(f, u->n) + rel;
    if (f->pdt == SR_DT_F32)
        return (float *)u->full + rel;
    if (f->staged_unit != ui) {
        /* the CPU back end computes in fp32: widen the bf16 unit once */
        sr_bf16_to_f32_n(f->stage, u->full, u->n);
        f->staged_unit = ui;
    }
    return f->stage + rel;
}

static void hook_done_forward(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->unit_of_layer[layer]];
    if (layer == u->last_layer && !f->backward)
        reshard_after_forward(f, u);
}

/* ------------------------------------------------------------------------ */
/* gradients */

/* Waits for a unit's reduction and folds it into the gradient shard. */
static void finish_reduce(sr_fsdp *f, unit *u) {
    if (!u->rs_pending)
        return;
    sr_status st = wait_req(f, &u->rs_req);
    sr_status st2 = wait_req(f, &u->ar_req);
    if (st == SR_OK)
        st = st2;
    float *g = f->gshard + u->local;
    if (st == SR_OK && u->rs_recv) {
        if (f->rdt == SR_DT_BF16) {
            const uint16_t *r = u->rs_recv;
            if (f->per_step)
                for (size_t i = 0; i < u->P; i++)
                    g[i] = sr_bf16_to_f32(r[i]);
            else
                for (size_t i = 0; i < u->P; i++)
                    g[i] += sr_bf16_to_f32(r[i]);
        } else {
            const float *r = u->rs_recv;
            for (size_t i = 0; i < u->P; i++)
                g[i] += r[i];
        }
    }
    if (u->rs_send) {
        sr_mem_free(SR_MEM_COMM, u->rs_send, u->rs_send_bytes);
        u->rs_send = NULL;
    }
    if (u->rs_recv) {
        sr_mem_free(SR_MEM_COMM, u->rs_recv, u->rs_recv_bytes);
        u->rs_recv = NULL;
    }
    if (u->gfull) {
        sr_mem_free(SR_MEM_COMM, u->gfull, (size_t)f->S * u->P * sizeof(float));
        u->gfull = NULL;
    }
    u->rs_pending = false;
}

static void issue_reduce(sr_fsdp *f, unit *u) {
    if (f->err != SR_OK)
        return;
    const float *full = f->per_step ? f->accum + u->accum_off : u->gfull;
    size_t total = (size_t)f->S * u->P;
    const void *send = full;
    if (f->rdt == SR_DT_BF16) {
        u->rs_send_bytes = total * 2;
        u->rs_send = sr_mem_alloc(SR_MEM_COMM, u->rs_send_bytes);
        if (!u->rs_send) {
            fail(f, SR_ERR_INTERNAL);
            return;
        }
        sr_f32_to_bf16_n(u->rs_send, full, total);
        send = u->rs_send;
    }
    void *recv;
    if (f->per_step && f->rdt == SR_DT_F32) {
        recv = f->gshard + u->local; /* written whole: one reduction per step */
    } else {
        u->rs_recv_bytes = u->P * esize(f->rdt);
        u->rs_recv = sr_mem_alloc(SR_MEM_COMM, u->rs_recv_bytes);
        if (!u->rs_recv) {
            fail(f, SR_ERR_INTERNAL);
            return;
        }
        recv = u->rs_recv;
    }
    sr_status st = sr_reduce_scatter(f->shard_g, recv, send, u->P, f->rdt, SR_OP_SUM, &u->rs_req);
    if (st == SR_OK && f->R > 1)
        st = sr_allreduce(f->rep_g, recv, u->P, f->rdt, SR_OP_SUM, &u->ar_req);
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
    unit *u = &f->units[f->unit_of_layer[layer]];
    size_t rel = f->m->layer_offset[layer] - u->off;
    if (f->per_step)
        return f->accum + u->accum_off + rel;
    if (u->rs_pending)
        finish_reduce(f, u); /* the previous micro-batch's reduction of this unit */
    if (!u->gfull) {
        u->gfull = sr_mem_alloc(SR_MEM_COMM, (size_t)f->S * u->P * sizeof(float));
        if (!u->gfull) {
            fail(f, SR_ERR_INTERNAL);
            return poison(f, u->n) + rel;
        }
    }
    return u->gfull + rel;
}

static void hook_done_backward(void *ctx, int layer) {
    sr_fsdp *f = ctx;
    unit *u = &f->units[f->unit_of_layer[layer]];
    if (layer != u->first_layer)
        return;
    free_full(f, u);
    if (!f->per_step || f->last_mb)
        issue_reduce(f, u);
}

/* ------------------------------------------------------------------------ */

static sr_status config_error(const sr_config *cfg, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static sr_status config_error(const sr_config *cfg, const char *key, const char *fmt, ...) {
    char where[1200], msg[1024];
    sr_config_where(cfg, key, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sr_error(SR_ERR_CONFIG, "%s: %s", where, msg);
}

sr_status sr_fsdp_init(sr_fsdp **out, sr_model *m, const sr_config *cfg, sr_world *w, sr_transport *tp) {
    *out = NULL;
    int W = w->size, R = (int)cfg->mesh_replicate;
    int S = cfg->mesh_shard ? (int)cfg->mesh_shard : (W % R == 0 ? W / R : 0);
    if (S < 1 || (long long)S * R != W)
        return config_error(cfg, cfg->mesh_shard ? "sharding.mesh.shard" : "sharding.mesh.replicate",
                            "sharding.mesh: shard %lld x replicate %d must equal the %d ranks of the job (hint: "
                            "shard: 0 takes ranks / replicate)",
                            (long long)cfg->mesh_shard, R, W);
    const char *rkeys[2] = {"sharding.reshard_after_forward.blocks", "sharding.reshard_after_forward.root"};
    int64_t rvals[2] = {cfg->reshard_blocks, cfg->reshard_root};
    for (int i = 0; i < 2; i++)
        if (rvals[i] >= 2 && (rvals[i] > S || S % rvals[i] != 0))
            return config_error(cfg, rkeys[i],
                                "%s: %lld must divide the shard group size %d (hint: true, false, or a divisor "
                                "of %d such as the ranks per node)",
                                rkeys[i], (long long)rvals[i], S, S);
    if (cfg->offload_params || cfg->offload_grads || cfg->offload_optimizer)
        return config_error(cfg,
                            cfg->offload_params ? "sharding.offload.params"
                                                : (cfg->offload_grads ? "sharding.offload.grads"
                                                                      : "sharding.offload.optimizer"),
                            "offload needs a GPU run: this is a CPU run, where everything already lives in host "
                            "memory (hint: set sharding.offload.* to false)");
    if (cfg->comm_backend == SR_BACKEND_NCCL)
        return config_error(cfg, "comm.backend",
                            "comm.backend nccl needs a GPU run; this is a CPU run (hint: tcp or auto)");

    sr_fsdp *f = calloc(1, sizeof *f);
    if (!f)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    *out = f;
    f->m = m;
    f->cfg = cfg;
    f->w = w;
    f->tp = tp;
    f->S = S;
    f->R = R;
    f->shard_idx = w->rank % S;
    f->rep_idx = w->rank / S;
    f->pdt = cfg->param_dtype == SR_DTYPE_BF16 ? SR_DT_BF16 : SR_DT_F32;
    f->rdt = cfg->reduce_dtype == SR_DTYPE_BF16 ? SR_DT_BF16 : SR_DT_F32;
    f->per_step = cfg->grad_sync == SR_GRADSYNC_PER_STEP;
    f->staged_unit = -1;

    /* groups: world, shard, replicate, reshard-N */
    int *ranks = calloc((size_t)W + 1, sizeof(int));
    if (!ranks)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < W; i++)
        ranks[i] = i;
    sr_status st = sr_group_create(tp, ranks, W, &f->world_g);
    for (int i = 0; i < S; i++)
        ranks[i] = f->rep_idx * S + i;
    if (st == SR_OK)
        st = sr_group_create(tp, ranks, S, &f->shard_g);
    for (int i = 0; i < R; i++)
        ranks[i] = i * S + f->shard_idx;
    if (st == SR_OK)
        st = sr_group_create(tp, ranks, R, &f->rep_g);
    sr_group *ng[2] = {NULL, NULL};
    for (int i = 0; i < 2 && st == SR_OK; i++) {
        if (rvals[i] < 2)
            continue;
        if (i == 1 && rvals[1] == rvals[0]) {
            ng[1] = ng[0];
            continue;
        }
        int N = (int)rvals[i], base = f->rep_idx * S + (f->shard_idx / N) * N;
        for (int k = 0; k < N; k++)
            ranks[k] = base + k;
        st = sr_group_create(tp, ranks, N, &ng[i]);
    }
    free(ranks);
    if (st != SR_OK)
        return st;

    /* units */
    int L = m->d.L, bpu = (int)cfg->blocks_per_unit;
    int nblock_units = (L + bpu - 1) / bpu;
    f->nunits = nblock_units + 1;
    f->units = calloc((size_t)f->nunits, sizeof(unit));
    f->unit_of_layer = malloc(sizeof(int) * (size_t)(L + 1));
    f->order = malloc(sizeof(int) * (size_t)(2 * f->nunits + 2));
    if (!f->units || !f->unit_of_layer || !f->order)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    size_t local = 0, accum = 0, largest = 0;
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        u->root = ui == nblock_units;
        u->first_layer = u->root ? L : ui * bpu;
        u->last_layer = u->root ? L : (ui * bpu + bpu - 1 < L - 1 ? ui * bpu + bpu - 1 : L - 1);
        u->off = m->layer_offset[u->first_layer];
        u->n = m->layer_offset[u->last_layer + 1] - u->off;
        u->P = (u->n + (size_t)S - 1) / (size_t)S;
        u->local = local;
        u->accum_off = accum;
        u->reshard = u->root ? cfg->reshard_root : cfg->reshard_blocks;
        u->ngroup = u->reshard >= 2 ? ng[u->root ? 1 : 0] : NULL;
        local += u->P;
        accum += (size_t)S * u->P;
        if (u->n > largest)
            largest = u->n;
        for (int l = u->first_layer; l <= u->last_layer; l++)
            f->unit_of_layer[l] = ui;
    }
    f->local_size = local;
    f->pshard = sr_mem_alloc(SR_MEM_PARAM_SHARD, local * sizeof(float));
    f->gshard = sr_mem_alloc(SR_MEM_GRAD_SHARD, local * sizeof(float));
    if (!f->pshard || !f->gshard)
        return SR_ERR_INTERNAL;
    if (f->per_step) {
        f->accum_n = accum;
        f->accum = sr_mem_alloc(SR_MEM_ACCUM, accum * sizeof(float));
        if (!f->accum)
            return SR_ERR_INTERNAL;
    }
    if (f->pdt == SR_DT_BF16) {
        f->stage_n = largest;
        f->stage = sr_mem_alloc(SR_MEM_OTHER, largest * sizeof(float));
        if (!f->stage)
            return SR_ERR_INTERNAL;
    }
    /* master shard from the seed, slices, optimizer */
    sr_slice *slices = malloc(sizeof(sr_slice) * (size_t)f->nunits);
    if (!slices)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    int ns = 0;
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        size_t b = u->off + (size_t)f->shard_idx * u->P;
        size_t e = b + u->P < u->off + u->n ? b + u->P : u->off + u->n;
        if (b >= e)
            continue;
        sr_model_init_params(m, (uint64_t)cfg->seed, f->pshard + u->local, b, e);
        slices[ns++] = (sr_slice){b, e, u->local};
    }
    st = sr_optim_init_slices(&f->opt, m, slices, ns, local);
    free(slices);
    f->opt_ok = true;
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
    sr_mem_free(SR_MEM_PARAM_SHARD, f->pshard, f->local_size * sizeof(float));
    sr_mem_free(SR_MEM_GRAD_SHARD, f->gshard, f->local_size * sizeof(float));
    sr_mem_free(SR_MEM_ACCUM, f->accum, f->accum_n * sizeof(float));
    sr_mem_free(SR_MEM_OTHER, f->stage, f->stage_n * sizeof(float));
    free(f->poison);
    free(f->units);
    free(f->unit_of_layer);
    free(f->order);
    free(f);
}

const sr_param_source *sr_fsdp_source(sr_fsdp *f) { return &f->src; }

static sr_status check(sr_fsdp *f) {
    if (f->err != SR_OK)
        return sr_error(f->err, "%s", f->err_msg);
    return SR_OK;
}

void sr_fsdp_begin_step(sr_fsdp *f) {
    if (f->accum)
        memset(f->accum, 0, f->accum_n * sizeof(float));
    memset(f->gshard, 0, f->local_size * sizeof(float));
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

sr_status sr_fsdp_forward(sr_fsdp *f, const int *inputs, const int *targets, int B, double *loss_sum) {
    set_order(f, false);
    float mean = sr_model_forward(f->m, &f->src, inputs, targets, B);
    *loss_sum += (double)mean * B;
    return check(f);
}

sr_status sr_fsdp_backward(sr_fsdp *f, float dloss, bool last_micro_batch) {
    set_order(f, true);
    f->last_mb = last_micro_batch;
    sr_model_backward(f->m, &f->src, dloss);
    return check(f);
}

static void free_all_full(sr_fsdp *f) {
    for (int ui = 0; ui < f->nunits; ui++)
        free_full(f, &f->units[ui]);
    f->staged_unit = -1;
}

sr_status sr_fsdp_eval(sr_fsdp *f, const int *inputs, const int *targets, int B, double *loss_sum) {
    set_order(f, false);
    float mean = sr_model_forward(f->m, &f->src, inputs, targets, B);
    *loss_sum += (double)mean * B;
    free_all_full(f);
    return check(f);
}

sr_status sr_fsdp_finish_grads(sr_fsdp *f, double *grad_norm) {
    for (int ui = 0; ui < f->nunits; ui++)
        finish_reduce(f, &f->units[ui]);
    f->ninflight = 0;
    sr_status st = check(f);
    if (st != SR_OK)
        return st;
    /* replicas hold equal shards: sum squares over the shard group only */
    double ss = sr_sum_squares(f->gshard, f->local_size);
    st = sr_allreduce(f->shard_g, &ss, 1, SR_DT_F64, SR_OP_SUM, NULL);
    *grad_norm = sqrt(ss);
    return st;
}

void sr_fsdp_optimizer_step(sr_fsdp *f, int64_t step, double lr, const sr_config *cfg, float grad_scale) {
    free_all_full(f); /* gathered copies are stale once the shard moves */
    sr_optim_step(&f->opt, f->pshard, f->gshard, step, lr, cfg, grad_scale);
}

sr_status sr_fsdp_sum_world(sr_fsdp *f, double *value) {
    return sr_allreduce(f->world_g, value, 1, SR_DT_F64, SR_OP_SUM, NULL);
}

sr_status sr_fsdp_sum_world_n(sr_fsdp *f, double *values, int n) {
    return sr_allreduce(f->world_g, values, (size_t)n, SR_DT_F64, SR_OP_SUM, NULL);
}

sr_group *sr_fsdp_world_group(sr_fsdp *f) { return f->world_g; }

void sr_fsdp_shard_state_view(sr_fsdp *f, sr_fsdp_shard_state *out) {
    size_t max = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        max += f->units[ui].P < f->units[ui].n ? f->units[ui].P : f->units[ui].n;
    *out = (sr_fsdp_shard_state){f->opt.slices, f->opt.nslices, f->pshard,  f->opt.m, f->opt.v, f->local_size,
                                 f->shard_idx,  f->S,           f->rep_idx, f->R,     max};
}

int sr_fsdp_shard_slices(const sr_fsdp *f, int shard, sr_slice *out, int max) {
    int n = 0;
    for (int ui = 0; ui < f->nunits; ui++) {
        const unit *u = &f->units[ui];
        size_t b = u->off + (size_t)shard * u->P;
        size_t e = b + u->P < u->off + u->n ? b + u->P : u->off + u->n;
        if (b >= e)
            continue;
        if (n < max)
            out[n] = (sr_slice){b, e, u->local};
        n++;
    }
    return n < max ? n : max;
}

int sr_fsdp_shard_size(const sr_fsdp *f) { return f->S; }
int sr_fsdp_replicate_size(const sr_fsdp *f) { return f->R; }
int sr_fsdp_units(const sr_fsdp *f) { return f->nunits; }

size_t sr_fsdp_largest_block_unit_bytes(const sr_fsdp *f) {
    size_t b = 0;
    for (int ui = 0; ui < f->nunits - 1; ui++) {
        size_t x = (size_t)f->S * f->units[ui].P * esize(f->pdt);
        b = x > b ? x : b;
    }
    return b;
}

size_t sr_fsdp_kept_unit_bytes(const sr_fsdp *f) {
    size_t b = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        if (f->units[ui].reshard == SR_RESHARD_FALSE)
            b += (size_t)f->S * f->units[ui].P * esize(f->pdt);
    return b;
}

sr_status sr_fsdp_dump_params(sr_fsdp *f, const char *path) {
    const sr_model *m = f->m;
    FILE *out = NULL;
    sr_status st = SR_OK;
    if (f->w->rank == 0) {
        out = fopen(path, "wb");
        if (!out)
            st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create: %s", path, strerror(errno));
    }
    if (out) {
        int32_t n = m->n_tensors;
        fwrite("SRPARAMS", 1, 8, out);
        fwrite(&n, 4, 1, out);
        for (int i = 0; i < m->n_tensors; i++) {
            char name[64] = {0};
            snprintf(name, sizeof name, "%s", m->tensors[i].name);
            int64_t numel = (int64_t)m->tensors[i].numel;
            fwrite(name, 1, 64, out);
            fwrite(&numel, 8, 1, out);
        }
    }
    for (int ui = 0; ui < f->nunits; ui++) {
        unit *u = &f->units[ui];
        float *full = malloc((size_t)f->S * u->P * sizeof(float));
        if (!full)
            return sr_error(SR_ERR_INTERNAL, "out of memory");
        sr_status s2 = sr_allgather(f->shard_g, full, f->pshard + u->local, u->P, SR_DT_F32, NULL);
        if (s2 != SR_OK) {
            free(full);
            if (out)
                fclose(out);
            return s2;
        }
        if (out && fwrite(full, sizeof(float), u->n, out) != u->n && st == SR_OK)
            st = sr_error(SR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        free(full);
    }
    if (out && fclose(out) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return st;
}
