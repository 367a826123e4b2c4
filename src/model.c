/* model.c — each family's tensor table, the unit-major layout, the
 * activations, and each family's blocks in both forms: the training
 * forward and backward, and the decode step with its key/value cache that
 * sampling runs.  The one file besides the family table (family.c) and
 * the Hugging Face forms (hfnames.c) that names a family; the arithmetic
 * of dims alone is model_dims.c's.  See model.h for the contracts. */
#include "srconfig.h"

#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "rng.h"

/* SR_OK when `ops` implements every op the family needs; else
 * SR_ERR_CONFIG naming what is missing ("not implemented yet"). */
static sr_status ops_support(const sr_model_dims *d, const sr_ops *ops) {
    if (d->arch != SR_ARCH_LLAMA)
        return SR_OK;
    if (!ops->rmsnorm_forward || !ops->rmsnorm_backward || !ops->residual_rmsnorm_forward || !ops->rope_forward ||
        !ops->rope_backward || !ops->swiglu_forward || !ops->swiglu_backward || !ops->gqa_attention_forward ||
        !ops->gqa_attention_backward)
        return sr_error(SR_ERR_CONFIG,
                        "model.arch llama on the %s ops: not implemented yet: the Llama kernels (RMSNorm, RoPE, "
                        "SwiGLU, grouped-query attention) (hint: device: cpu, or model.arch: gpt2)",
                        ops->name);
    return SR_OK;
}

#define MAX_ACT_BUFS 32

/* The activation buffers of one micro-batch of B sequences: one row per
 * buffer, used by init and free alike, so no buffer is allocated without
 * being checked or freed. */
typedef struct {
    void **ptr;
    size_t bytes;
} act_buf;

/* Sizes in double, saturated: absurd dims from outside (a job file that
 * config check accepts, a manifest) must give a huge size, never a wrapped
 * small one; below 2^53 bytes the value is exact. */
static size_t sat(double x) { return x >= 1.8e19 ? SIZE_MAX : (size_t)x; }

/* One row of the table: where the pointer goes, its bytes, and what it is
 * for the split (model.h sr_act_split). */
enum { ACT_ROOT, ACT_BLOCK, ACT_INPUTS };

static int act_table_split(sr_model *m, size_t B, act_buf *out, int *kind, const char **names) {
    double L = m->d.L, T = m->d.T, C = m->d.C, NH = m->d.NH, Vp = m->d.Vp;
    double BT = (double)B * T, BTC = BT * C, f = sizeof(float), e = (double)sr_dtype_size(m->ops->act);
    /* the fused projections' widths (GPT-2: 3C and 4C; Llama: the
     * query/key/value rows, and the SwiGLU's gate+up 2F and output F),
     * and whether LayerNorm means are kept (RMSNorm has none) */
    double QKV = (double)sr_model_qkv_rows(&m->d), FH = (double)sr_model_mlp_rows(&m->d), FO = m->d.F;
    double mean = sr_family_get(m->d.arch)->rms_norm ? 0 : 1;
    /* what attention saves is the op's business (ops.h) */
    double att = (double)m->ops->attention_save_bytes((int)(B < INT32_MAX ? B : INT32_MAX), m->d.T, m->d.NH);
    if ((double)B * NH * T * T * f > 1e18)
        att = (double)B * NH * T * T * f; /* absurd dims: saturate, do not trust int arguments */
    /* recompute: the per-block rows hold one block; the block outputs
     * (residual3) stay L deep, as they are the next blocks' inputs */
    double Lb = m->d.recompute == SR_RECOMPUTE_BLOCKS ? 1 : L;
    const struct {
        act_buf b;
        int kind;
        const char *name;
    } t[] = {
        {{(void **)&m->inputs, sat(BT * sizeof(int))}, ACT_ROOT, "inputs"},
        {{(void **)&m->targets, sat(BT * sizeof(int))}, ACT_ROOT, "targets"},
        {{(void **)&m->encoded, sat(BTC * e)}, ACT_INPUTS, "encoded"},
        {{(void **)&m->ln1, sat(Lb * BTC * e)}, ACT_BLOCK, "ln1"},
        {{(void **)&m->ln1_mean, sat(mean * Lb * BT * f)}, ACT_BLOCK, "ln1_mean"},
        {{(void **)&m->ln1_rstd, sat(Lb * BT * f)}, ACT_BLOCK, "ln1_rstd"},
        {{(void **)&m->qkv, sat(Lb * BT * QKV * e)}, ACT_BLOCK, "qkv"},
        {{(void **)&m->atty, sat(Lb * BTC * e)}, ACT_BLOCK, "atty"},
        {{(void **)&m->att, sat(Lb * att)}, ACT_BLOCK, "att"},
        {{(void **)&m->residual2, sat(Lb * BTC * e)}, ACT_BLOCK, "residual2"},
        {{(void **)&m->ln2, sat(Lb * BTC * e)}, ACT_BLOCK, "ln2"},
        {{(void **)&m->ln2_mean, sat(mean * Lb * BT * f)}, ACT_BLOCK, "ln2_mean"},
        {{(void **)&m->ln2_rstd, sat(Lb * BT * f)}, ACT_BLOCK, "ln2_rstd"},
        {{(void **)&m->fch, sat(Lb * BT * FH * e)}, ACT_BLOCK, "fch"},
        {{(void **)&m->fch_gelu, sat(Lb * BT * FO * e)}, ACT_BLOCK, "fch_gelu"},
        /* L outputs: the last block's is its own (ACT_BLOCK), the
         * others are inputs of the next block */
        {{(void **)&m->residual3, sat(L * BTC * e)}, ACT_INPUTS, "residual3"},
        {{(void **)&m->lnf, sat(BTC * e)}, ACT_ROOT, "lnf"},
        {{(void **)&m->lnf_mean, sat(mean * BT * f)}, ACT_ROOT, "lnf_mean"},
        {{(void **)&m->lnf_rstd, sat(BT * f)}, ACT_ROOT, "lnf_rstd"},
        {{(void **)&m->logits, sat(BT * Vp * e)}, ACT_ROOT, "logits"},
        {{(void **)&m->losses, sat(BT * f)}, ACT_ROOT, "losses"},
        {{(void **)&m->lse, sat(BT * f)}, ACT_ROOT, "lse"},
        {{(void **)&m->scratch, sat(BTC * e)}, ACT_ROOT, "scratch"},
        {{(void **)&m->dresidual, sat(BTC * e)}, ACT_ROOT, "dresidual"},
        {{(void **)&m->dln, sat(BTC * e)}, ACT_ROOT, "dln"},
        {{(void **)&m->dqkv, sat(BT * QKV * e)}, ACT_ROOT, "dqkv"},
        {{(void **)&m->datty, sat(BTC * e)}, ACT_ROOT, "datty"},
        {{(void **)&m->dfch, sat(BT * FH * e)}, ACT_ROOT, "dfch"},
        {{(void **)&m->dfch_gelu, sat(BT * FO * e)}, ACT_ROOT, "dfch_gelu"},
        /* the ops' scratch (CUDA: attention backward, column sums, the
         * encoder's sort); none on the CPU */
        {{(void **)&m->op_ws, m->ops->workspace_bytes && B > 0 && B <= INT32_MAX
                                  ? m->ops->workspace_bytes((int)B, m->d.T, m->d.C, m->d.NH)
                                  : 0},
         ACT_ROOT,
         "op_ws"},
    };
    _Static_assert(sizeof t / sizeof t[0] <= MAX_ACT_BUFS, "MAX_ACT_BUFS is too small");
    int n = (int)(sizeof t / sizeof t[0]);
    for (int i = 0; i < n; i++) {
        if (out)
            out[i] = t[i].b;
        if (kind)
            kind[i] = t[i].kind;
        if (names)
            names[i] = t[i].name;
    }
    return n;
}

static int act_table(sr_model *m, size_t B, act_buf *out) { return act_table_split(m, B, out, NULL, NULL); }

/* The bytes of the row of `ptr` in a table. */
static size_t row_bytes(const act_buf *bufs, int nb, void **ptr) {
    for (int i = 0; i < nb; i++)
        if (bufs[i].ptr == ptr)
            return bufs[i].bytes;
    return 0;
}

sr_act_split sr_model_activation_split(const sr_model_dims *d, const sr_ops *ops, int max_B) {
    sr_model m = {.d = *d, .ops = ops};
    sr_model_dims_complete(&m.d);
    m.d.recompute = SR_RECOMPUTE_BLOCKS; /* the rows of one block */
    act_buf bufs[MAX_ACT_BUFS];
    int kind[MAX_ACT_BUFS];
    int nb = act_table_split(&m, (size_t)max_B, bufs, kind, NULL);
    sr_act_split s = {0};
    size_t btc = sat((double)max_B * d->T * d->C * (double)sr_dtype_size(ops->act));
    for (int i = 0; i < nb; i++) {
        size_t *to = kind[i] == ACT_BLOCK ? &s.block : kind[i] == ACT_INPUTS ? &s.inputs : &s.root;
        *to = *to + bufs[i].bytes < *to ? SIZE_MAX : *to + bufs[i].bytes;
    }
    /* of the embedding output and the L block outputs, the last output
     * belongs to its block's set */
    if (s.inputs != SIZE_MAX && btc != SIZE_MAX) {
        s.inputs -= btc;
        s.block = s.block + btc < s.block ? SIZE_MAX : s.block + btc;
    }
    return s;
}

size_t sr_model_largest_saved(const sr_model_dims *d, const sr_ops *ops, int max_B, const char **name) {
    sr_model m = {.d = *d, .ops = ops};
    sr_model_dims_complete(&m.d);
    m.d.recompute = SR_RECOMPUTE_BLOCKS; /* the per-block rows hold one block */
    act_buf bufs[MAX_ACT_BUFS];
    int kind[MAX_ACT_BUFS];
    const char *names[MAX_ACT_BUFS];
    int nb = act_table_split(&m, (size_t)max_B, bufs, kind, names);
    size_t best = 0;
    *name = "";
    for (int i = 0; i < nb; i++) {
        /* the block outputs' row is L deep: one of them */
        size_t b = bufs[i].ptr == (void **)&m.residual3 && m.d.L > 0 ? bufs[i].bytes / (size_t)m.d.L : bufs[i].bytes;
        if (kind[i] != ACT_ROOT && b > best) {
            best = b;
            *name = names[i];
        }
    }
    return best;
}

size_t sr_model_activation_bytes(const sr_model_dims *d, const sr_ops *ops, int max_B) {
    sr_model m = {.d = *d, .ops = ops};
    sr_model_dims_complete(&m.d);
    act_buf bufs[MAX_ACT_BUFS];
    int nb = act_table(&m, (size_t)max_B, bufs);
    size_t total = 0;
    for (int i = 0; i < nb; i++)
        total = total + bufs[i].bytes < total ? SIZE_MAX : total + bufs[i].bytes;
    return total;
}

/* The tensor table: one row per tensor of each block, then the root's,
 * laid out in that order in the flat parameter vector (names, shapes,
 * init and decay from model.h's X-macros); m->layer_offset[unit] is where
 * each unit starts. */
static sr_status tensor_table(sr_model *m) {
    const sr_model_dims d = m->d;
    bool llama = d.arch == SR_ARCH_LLAMA;
    int L = d.L, C = d.C, Vp = d.Vp, F = d.F, QKV = (int)sr_model_qkv_rows(&d);
    m->n_block = llama ? SR_LL_NBLOCK_TENSORS : SR_NBLOCK_TENSORS;
    m->n_root = llama ? SR_LL_NROOT_TENSORS_UNTIED - (d.untied ? 0 : 1) : SR_NROOT_TENSORS;
    m->n_tensors = L * m->n_block + m->n_root;
    m->tensors = sr_calloc((size_t)m->n_tensors, sizeof *m->tensors);
    m->layer_offset = sr_calloc((size_t)L + 2, sizeof *m->layer_offset);
    if (!m->tensors || !m->layer_offset)
        return sr_error_oom("the tensor table");
    struct desc {
        const char *name;
        int rows, cols, init;
        bool decay;
    };
#define SR_DESC(e, name, r, c, init, decay) {name, r, c, init, decay},
    const int T = d.T;
    const struct desc gpt2_block[] = {SR_BLOCK_TENSORS(SR_DESC)}, gpt2_root[] = {SR_ROOT_TENSORS(SR_DESC)};
    const struct desc llama_block[] = {SR_LLAMA_BLOCK_TENSORS(SR_DESC)},
                      llama_root[] = {SR_LLAMA_ROOT_TENSORS(SR_DESC)};
#undef SR_DESC
    (void)F, (void)QKV, (void)T; /* each family's macros use some of them */
    const struct desc *block_desc = llama ? llama_block : gpt2_block, *root_desc = llama ? llama_root : gpt2_root;
    const char *prefix = llama ? "layers" : "h";
    size_t off = 0;
    int ti = 0;
    for (int unit = 0; unit <= L; unit++) {
        m->layer_offset[unit] = off;
        bool root = unit == L;
        const struct desc *dd = root ? root_desc : block_desc;
        int n = root ? m->n_root : m->n_block;
        for (int k = 0; k < n; k++, ti++) {
            sr_tensor *t = &m->tensors[ti];
            if (root)
                snprintf(t->name, sizeof t->name, "%s", dd[k].name);
            else
                snprintf(t->name, sizeof t->name, "%s.%d.%s", prefix, unit, dd[k].name);
            t->unit = unit;
            t->rows = dd[k].rows;
            t->cols = dd[k].cols;
            t->ndim = dd[k].rows == 1 ? 1 : 2;
            t->init = dd[k].init;
            t->decay = dd[k].decay;
            t->offset = off;
            t->numel = (size_t)dd[k].rows * dd[k].cols;
            t->vocab = root && (llama ? k == SR_LL_WTE || k == SR_LL_HEAD : k == SR_WTE);
            off += t->numel;
        }
    }
    m->layer_offset[L + 1] = off;
    m->n_params = off;
    m->n_params_real = off - (size_t)(Vp - d.V) * C * (d.untied ? 2 : 1);
    return SR_OK;
}

/* The activation buffers for micro-batches of up to max_B sequences, the
 * ops' workspace, the loss accumulator and (Llama) the rotary table. */
static sr_status alloc_activations(sr_model *m, int max_B) {
    sr_dev *dev = m->dev;
    act_buf bufs[MAX_ACT_BUFS];
    int nb = act_table(m, (size_t)max_B, bufs);
    for (int i = 0; i < nb; i++) {
        if (bufs[i].bytes == 0)
            continue; /* the ops need no scratch */
        *bufs[i].ptr = dev->alloc(dev, dev->state_space, SR_MEM_ACTIVATIONS, bufs[i].bytes);
        if (!*bufs[i].ptr)
            return SR_ERR_INTERNAL;
        m->act_bytes += bufs[i].bytes;
    }
    if (m->ops->bind_workspace)
        m->ops->bind_workspace(m->op_ws, row_bytes(bufs, nb, (void **)&m->op_ws));
    m->loss_acc = dev->alloc(dev, dev->state_space, SR_MEM_OTHER, sizeof(double));
    if (!m->loss_acc)
        return SR_ERR_INTERNAL;
    dev->memset(dev, SR_STREAM_COMPUTE, m->loss_acc, 0, sizeof(double)); /* a take before any forward reads 0 */
    if (sr_family_get(m->d.arch)->learned_positions)
        return SR_OK;
    /* the rotary table, built on the host once and uploaded */
    size_t bytes = sr_model_rope_bytes(&m->d);
    float *host = sr_malloc(bytes);
    m->rope_cs = host ? dev->alloc(dev, dev->state_space, SR_MEM_OTHER, bytes) : NULL;
    if (!m->rope_cs) {
        free(host);
        return host ? SR_ERR_INTERNAL : sr_error_oom("the rotary table");
    }
    sr_model_rope_table(&m->d, host);
    sr_status st = sr_dev_upload(dev, m->rope_cs, host, bytes, "upload");
    free(host);
    return st;
}

sr_status sr_model_init(sr_model *m, sr_model_dims d, const sr_ops *ops, sr_dev *dev, int max_B, bool own_params) {
    *m = (sr_model){0};
    sr_model_dims_complete(&d);
    m->d = d;
    m->ops = ops;
    m->dev = dev;
    sr_status st = tensor_table(m);
    if (st != SR_OK)
        return st;
    if (max_B > 0 && (st = ops_support(&d, ops)) != SR_OK)
        return st;
    size_t off = m->n_params;
    if (own_params) {
        m->params = dev->alloc(dev, dev->state_space, SR_MEM_PARAM_SHARD, off * sizeof(float));
        m->grads = m->params ? dev->alloc(dev, dev->state_space, SR_MEM_GRAD_SHARD, off * sizeof(float)) : NULL;
        if (!m->params || !m->grads)
            return SR_ERR_INTERNAL;
        dev->memset(dev, SR_STREAM_COMPUTE, m->grads, 0, off * sizeof(float));
    }
    m->max_B = max_B;
    return max_B == 0 ? SR_OK : alloc_activations(m, max_B);
}

void sr_model_free(sr_model *m) {
    if (m->dev) {
        m->dev->free(m->dev, m->params);
        m->dev->free(m->dev, m->grads);
        m->dev->free(m->dev, m->loss_acc);
        m->dev->free(m->dev, m->rope_cs);
    }
    if (m->max_B > 0) {
        act_buf bufs[MAX_ACT_BUFS];
        int nb = act_table(m, (size_t)m->max_B, bufs);
        for (int i = 0; i < nb; i++)
            m->dev->free(m->dev, *bufs[i].ptr);
    }
    free(m->tensors);
    free(m->layer_offset);
    *m = (sr_model){0};
}

void sr_model_init_params(const sr_model *m, uint64_t seed, float *dst, size_t begin, size_t end) {
    const double std = 0.02, resid_std = 0.02 / sqrt(2.0 * m->d.L);
    for (int ti = 0; ti < m->n_tensors; ti++) {
        const sr_tensor *t = &m->tensors[ti];
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (lo >= hi)
            continue;
        /* Rows of the padded vocabulary stay zero: no token uses them. */
        size_t real = t->vocab ? (size_t)m->d.V * m->d.C : t->numel;
#pragma omp parallel for
        for (size_t i = lo; i < hi; i++) {
            size_t local = i - t->offset;
            float v;
            switch (t->init) {
            case SR_INIT_ONE:
                v = 1.0f;
                break;
            case SR_INIT_NORMAL:
                v = local < real ? (float)(std * sr_rng_normal(seed, 1, i)) : 0.0f;
                break;
            case SR_INIT_NORMAL_RESID:
                v = (float)(resid_std * sr_rng_normal(seed, 1, i));
                break;
            default:
                v = 0.0f;
            }
            dst[i - begin] = v;
        }
    }
}

/* A pointer `elems` elements of `dt` past base. */
static void *at(const void *base, size_t elems, sr_dtype dt) { return (char *)base + elems * sr_dtype_size(dt); }

/* The ops' activation dtype, the element type of every `void *` activation. */
#define ACT(p, elems) at((p), (elems), o->act)

static sr_param_view layer_params(sr_model *m, const sr_param_source *src, int l) {
    if (src)
        return src->params(src->ctx, l);
    return (sr_param_view){m->params + m->layer_offset[l], SR_DT_F32};
}

/* The layer's gradients, and in *gbeta the parameter gradients' beta
 * (ops.h): 0 when the source says the buffer held nothing when this pass
 * began (the tensor's first write overwrites), else 1 (m->grads: the
 * caller zeroes and the pass adds). */
static float *layer_grads(sr_model *m, const sr_param_source *src, int l, float *gbeta) {
    bool fresh = false;
    float *g = src ? src->grads(src->ctx, l, &fresh) : m->grads + m->layer_offset[l];
    *gbeta = fresh ? 0.0f : 1.0f;
    return g;
}

static void done_forward(const sr_param_source *src, int l) {
    if (src && src->done_forward)
        src->done_forward(src->ctx, l);
}

static void done_backward(const sr_param_source *src, int l) {
    if (src && src->done_backward)
        src->done_backward(src->ctx, l);
}

/* A parameter source that cannot deliver a layer (a failed gather or
 * allocation; the source keeps the reason and reports it) ends the pass;
 * so does a view of another dtype than the ops compute in (a bug). */
static sr_status source_failed(const sr_ops *o) {
    if (o->take_error)
        o->take_error();
    return sr_error(SR_ERR_INTERNAL, "the parameter source could not deliver a layer");
}
#define NEED(ok)                                                                                                       \
    do {                                                                                                               \
        if (!(ok))                                                                                                     \
            return source_failed(o);                                                                                   \
    } while (0)
#define NEED_VIEW(v) NEED((v).ptr && (v).dt == o->act)

/* Pointers to a block's (the root's) tensors inside its parameter or
 * gradient slice, indexed by the family's enum (model.h). */
typedef struct {
    void *t[SR_MAX_UNIT_TENSORS];
} block_view;
typedef block_view root_view;
_Static_assert(SR_NBLOCK_TENSORS <= SR_MAX_UNIT_TENSORS && SR_LL_NBLOCK_TENSORS <= SR_MAX_UNIT_TENSORS &&
                   SR_LL_NROOT_TENSORS_UNTIED <= SR_MAX_UNIT_TENSORS,
               "SR_MAX_UNIT_TENSORS is too small");

static block_view view_block(const sr_model *m, void *base, sr_dtype dt) {
    block_view v = {{0}};
    const sr_tensor *t0 = &m->tensors[0];
    for (int k = 0; k < m->n_block; k++)
        v.t[k] = at(base, t0[k].offset - t0[0].offset, dt);
    return v;
}

static root_view view_root(const sr_model *m, void *base, sr_dtype dt) {
    root_view v = {{0}};
    const sr_tensor *r0 = &m->tensors[m->d.L * m->n_block];
    for (int k = 0; k < m->n_root; k++)
        v.t[k] = at(base, r0[k].offset - r0[0].offset, dt);
    /* a tied head is the embedding */
    if (m->d.arch == SR_ARCH_LLAMA && !m->d.untied)
        v.t[SR_LL_HEAD] = v.t[SR_LL_WTE];
    return v;
}

/* Pointers to block l's activations: slot l of each per-block row, or
 * slot 0 when the model recomputes blocks (the rows hold one block). */
typedef struct {
    void *residual; /* the block's input (written by its first norm when the block before left its add pending) */
    void *ln1, *qkv, *atty, *att, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
} block_acts;

static block_acts acts_of(const sr_model *m, int l, int B) {
    const sr_ops *o = m->ops;
    size_t BT = (size_t)B * m->d.T, BTC = BT * m->d.C, att_l = o->attention_save_bytes(B, m->d.T, m->d.NH);
    size_t k = m->d.recompute == SR_RECOMPUTE_BLOCKS ? 0 : (size_t)l;
    bool mean = !sr_family_get(m->d.arch)->rms_norm; /* LayerNorm keeps its means for backward */
    size_t qkv = BT * sr_model_qkv_rows(&m->d), fh = BT * sr_model_mlp_rows(&m->d), fo = BT * (size_t)m->d.F;
    return (block_acts){
        .residual = l == 0 ? m->encoded : ACT(m->residual3, (size_t)(l - 1) * BTC),
        .ln1 = ACT(m->ln1, k * BTC),
        .qkv = ACT(m->qkv, k * qkv),
        .atty = ACT(m->atty, k * BTC),
        .att = (char *)m->att + k * att_l,
        .res2 = ACT(m->residual2, k * BTC),
        .ln2 = ACT(m->ln2, k * BTC),
        .fch = ACT(m->fch, k * fh),
        .fchg = ACT(m->fch_gelu, k * fo),
        .res3 = ACT(m->residual3, (size_t)l * BTC),
        .ln1_mean = mean ? m->ln1_mean + k * BT : NULL,
        .ln1_rstd = m->ln1_rstd + k * BT,
        .ln2_mean = mean ? m->ln2_mean + k * BT : NULL,
        .ln2_rstd = m->ln2_rstd + k * BT,
    };
}

/* Block l's forward from its input.  `output` false stops before the last
 * projection: what backward needs of the block, without its output (the
 * recomputation before backward; the output, the next block's input, is
 * still in residual3).  The ops are deterministic, so a recomputation
 * writes the same bits the forward wrote. */
static void llama_block_forward(sr_model *m, const block_view *p, int l, int B, bool output, bool pending) {
    const sr_ops *o = m->ops;
    const sr_model_dims *d = &m->d;
    int C = d->C, NH = d->NH, NKV = d->NKV, T = d->T, F = d->F, hs = C / NH;
    int BT = B * T;
    block_acts a = acts_of(m, l, B);
    float eps = (float)d->norm_eps;
    if (pending) /* the previous block's output, res2 + its down projection, written as this norm reads it */
        o->residual_rmsnorm_forward(a.residual, a.ln1, a.ln1_rstd, acts_of(m, l - 1, B).res2, m->scratch,
                                    p->t[SR_LL_ATTN_NORM], eps, BT, C);
    else
        o->rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, p->t[SR_LL_ATTN_NORM], eps, BT, C);
    o->matmul_forward(a.qkv, a.ln1, p->t[SR_LL_QKV], NULL, BT, C, (int)sr_model_qkv_rows(d));
    o->rope_forward(a.qkv, m->rope_cs, B, T, NH, NKV, hs);
    o->gqa_attention_forward(a.atty, a.att, a.qkv, B, T, NH, NKV, hs);
    o->matmul_forward(m->scratch, a.atty, p->t[SR_LL_O], NULL, BT, C, C);
    o->residual_rmsnorm_forward(a.res2, a.ln2, a.ln2_rstd, a.residual, m->scratch, p->t[SR_LL_MLP_NORM], eps, BT, C);
    o->matmul_forward(a.fch, a.ln2, p->t[SR_LL_GATE_UP], NULL, BT, C, 2 * F);
    o->swiglu_forward(a.fchg, a.fch, BT, F);
    if (!output)
        return;
    /* res3 = res2 + this, written by the norm that reads it next */
    o->matmul_forward(m->scratch, a.fchg, p->t[SR_LL_DOWN], NULL, BT, F, C);
}

/* Block l's backward: dresidual holds the gradient of its output and
 * becomes the gradient of its input. */
static void llama_block_backward(sr_model *m, const block_view *p, const block_view *g, int l, int B, float gb) {
    const sr_ops *o = m->ops;
    sr_dev *dev = m->dev;
    const sr_model_dims *d = &m->d;
    int C = d->C, NH = d->NH, NKV = d->NKV, T = d->T, F = d->F, hs = C / NH, QKV = (int)sr_model_qkv_rows(d);
    int BT = B * T;
    size_t es = sr_dtype_size(o->act);
    const sr_stream cs = SR_STREAM_COMPUTE;
    block_acts a = acts_of(m, l, B);
    /* MLP: dresidual is the gradient of both res3's inputs (res2 and the
     * down projection).  Each input gradient below is its buffer's first
     * and only contribution: written in the overwrite form (beta 0), no
     * memset first; the norms' += into dresidual stays (the residual
     * stream's two branches meet there).  Each parameter gradient is
     * written once per pass: gb (0 for a fresh buffer) */
    o->matmul_backward(m->dfch_gelu, g->t[SR_LL_DOWN], NULL, m->dresidual, a.fchg, p->t[SR_LL_DOWN], BT, F, C, 0.0f,
                       gb);
    o->swiglu_backward(m->dfch, m->dfch_gelu, a.fch, BT, F, 0.0f);
    o->matmul_backward(m->dln, g->t[SR_LL_GATE_UP], NULL, m->dfch, a.ln2, p->t[SR_LL_GATE_UP], BT, C, 2 * F, 0.0f, gb);
    o->rmsnorm_backward(m->dresidual, g->t[SR_LL_MLP_NORM], m->dln, a.res2, p->t[SR_LL_MLP_NORM], a.ln2_rstd, BT, C,
                        1.0f, gb);
    /* attention: dresidual is now the gradient of res2's inputs */
    o->matmul_backward(m->datty, g->t[SR_LL_O], NULL, m->dresidual, a.atty, p->t[SR_LL_O], BT, C, C, 0.0f, gb);
    if (!o->attention_backward_assigns)
        dev->memset(dev, cs, m->dqkv, 0, (size_t)BT * QKV * es);
    o->gqa_attention_backward(m->dqkv, m->datty, a.atty, a.qkv, a.att, B, T, NH, NKV, hs);
    o->rope_backward(m->dqkv, m->rope_cs, B, T, NH, NKV, hs);
    o->matmul_backward(m->dln, g->t[SR_LL_QKV], NULL, m->dqkv, a.ln1, p->t[SR_LL_QKV], BT, C, QKV, 0.0f, gb);
    o->rmsnorm_backward(m->dresidual, g->t[SR_LL_ATTN_NORM], m->dln, a.residual, p->t[SR_LL_ATTN_NORM], a.ln1_rstd, BT,
                        C, 1.0f, gb);
}

/* GPT-2's block l backward, as llama_block_backward (gb: the parameter
 * gradients' beta). */
static void gpt2_block_backward(sr_model *m, const block_view *p, const block_view *g, int l, int B, float gb) {
    const sr_ops *o = m->ops;
    sr_dev *dev = m->dev;
    int C = m->d.C, T = m->d.T, NH = m->d.NH;
    size_t BT = (size_t)B * T, BTC = BT * C, es = sr_dtype_size(o->act);
    const sr_stream cs = SR_STREAM_COMPUTE;
    block_acts a = acts_of(m, l, B);
    const void *residual = a.residual;
    void *ln1 = a.ln1, *qkv = a.qkv, *atty = a.atty, *att = a.att, *res2 = a.res2, *ln2 = a.ln2, *fch = a.fch,
         *fchg = a.fchg;
    /* MLP: dresidual is the gradient of both res3's inputs (res2 and
     * fcproj); the input and parameter gradients' forms as in the Llama
     * block.  Each bias gradient is summed by a kernel that reads or
     * writes its output's gradient anyway: fc's by GELU's backward,
     * fcproj's and attproj's by ln2's (dresidual as it comes in, and as it
     * leaves), qkv's by attention's */
    o->matmul_backward(m->dfch_gelu, g->t[SR_FCPROJW], NULL, m->dresidual, fchg, p->t[SR_FCPROJW], (int)BT, 4 * C, C,
                       0.0f, gb);
    o->gelu_backward(m->dfch, fch, m->dfch_gelu, 4 * BTC, 0.0f, g->t[SR_FCB], 4 * C, gb);
    o->matmul_backward(m->dln, g->t[SR_FCW], NULL, m->dfch, ln2, p->t[SR_FCW], (int)BT, C, 4 * C, 0.0f, gb);
    o->layernorm_backward(m->dresidual, g->t[SR_LN2W], g->t[SR_LN2B], m->dln, res2, p->t[SR_LN2W], a.ln2_mean,
                          a.ln2_rstd, (int)BT, C, 1.0f, gb, g->t[SR_FCPROJB], g->t[SR_ATTPROJB], gb);
    /* attention: dresidual is now the gradient of res2's inputs */
    o->matmul_backward(m->datty, g->t[SR_ATTPROJW], NULL, m->dresidual, atty, p->t[SR_ATTPROJW], (int)BT, C, C, 0.0f,
                       gb);
    if (!o->attention_backward_assigns)
        dev->memset(dev, cs, m->dqkv, 0, 3 * BTC * es);
    o->attention_backward(m->dqkv, m->datty, atty, qkv, att, B, T, C, NH, g->t[SR_QKVB], gb);
    o->matmul_backward(m->dln, g->t[SR_QKVW], NULL, m->dqkv, ln1, p->t[SR_QKVW], (int)BT, C, 3 * C, 0.0f, gb);
    /* The key bias adds q.b_k to every score of a row, which softmax
     * ignores: its gradient is exactly zero, and what the arithmetic
     * leaves is rounding noise that Adam would blow up to lr-sized steps
     * (differently on every world size).  Keep it the exact zero. */
    dev->memset(dev, cs, (float *)g->t[SR_QKVB] + C, 0, (size_t)C * sizeof(float));
    o->layernorm_backward(m->dresidual, g->t[SR_LN1W], g->t[SR_LN1B], m->dln, residual, p->t[SR_LN1W], a.ln1_mean,
                          a.ln1_rstd, (int)BT, C, 1.0f, gb, NULL, NULL, 0.0f);
}

/* Block l's forward.  The residual add that ends a block is fused into
 * the norm that reads its sum next (ops.h residual_*norm_forward): a
 * block with `output` leaves its last projection in m->scratch and its
 * output (res3) unwritten; with `pending` the block before did, and this
 * block's first norm writes that output as it normalises it (the final
 * norm does the last block's, sr_model_forward_train).  Either way each
 * norm's parameters are its own unit's.  The recomputation before
 * backward (no output, no pending) reads the stored res3. */
static void block_forward(sr_model *m, const block_view *p, int l, int B, bool output, bool pending) {
    const sr_ops *o = m->ops;
    if (m->d.arch == SR_ARCH_LLAMA) {
        llama_block_forward(m, p, l, B, output, pending);
        return;
    }
    int C = m->d.C, NH = m->d.NH, T = m->d.T;
    size_t BT = (size_t)B * T, BTC = BT * C;
    block_acts a = acts_of(m, l, B);
    if (pending)
        o->residual_layernorm_forward(a.residual, a.ln1, a.ln1_mean, a.ln1_rstd, acts_of(m, l - 1, B).res2, m->scratch,
                                      p->t[SR_LN1W], p->t[SR_LN1B], (int)BT, C);
    else
        o->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, p->t[SR_LN1W], p->t[SR_LN1B], (int)BT, C);
    o->matmul_forward(a.qkv, a.ln1, p->t[SR_QKVW], p->t[SR_QKVB], (int)BT, C, 3 * C);
    o->attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    o->matmul_forward(m->scratch, a.atty, p->t[SR_ATTPROJW], p->t[SR_ATTPROJB], (int)BT, C, C);
    o->residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual, m->scratch, p->t[SR_LN2W],
                                  p->t[SR_LN2B], (int)BT, C);
    o->matmul_forward(a.fch, a.ln2, p->t[SR_FCW], p->t[SR_FCB], (int)BT, C, 4 * C);
    o->gelu_forward(a.fchg, a.fch, 4 * BTC);
    if (!output)
        return;
    o->matmul_forward(m->scratch, a.fchg, p->t[SR_FCPROJW], p->t[SR_FCPROJB], (int)BT, 4 * C, C);
}

sr_status sr_model_forward(sr_model *m, const sr_param_source *src, const int *inputs, const int *targets, int B) {
    return sr_model_forward_train(m, src, inputs, targets, B, 0.0f);
}

sr_status sr_model_forward_train(sr_model *m, const sr_param_source *src, const int *inputs, const int *targets, int B,
                                 float dloss) {
    const sr_ops *o = m->ops;
    sr_dev *dev = m->dev;
    int L = m->d.L, C = m->d.C, T = m->d.T, V = m->d.V, Vp = m->d.Vp;
    size_t BT = (size_t)B * T, BTC = BT * C;
    m->B = B;
    /* the inputs to the device, once compute is done with the previous
     * ones; the compute stream waits for them */
    sr_event in_free = {0}, in_ready = {0};
    dev->record(dev, &in_free, SR_STREAM_COMPUTE);
    sr_dev_wait(dev, SR_STREAM_H2D, &in_free, "inputs_free");
    dev->copy(dev, SR_STREAM_H2D, m->inputs, inputs, BT * sizeof(int));
    dev->copy(dev, SR_STREAM_H2D, m->targets, targets, BT * sizeof(int));
    dev->record(dev, &in_ready, SR_STREAM_H2D);
    sr_dev_wait(dev, SR_STREAM_COMPUTE, &in_ready, "inputs_ready");
    sr_dev_declare(dev, SR_STREAM_COMPUTE, m->inputs, BT * sizeof(int), false, "the encoder (inputs)");
    sr_dev_declare(dev, SR_STREAM_COMPUTE, m->targets, BT * sizeof(int), false, "the classifier (targets)");

    sr_param_view lp = layer_params(m, src, L);
    NEED_VIEW(lp);
    root_view root = view_root(m, lp.ptr, lp.dt);
    bool llama = m->d.arch == SR_ARCH_LLAMA;
    /* the two families' root tensors: embedding, positions (GPT-2), final
     * norm, LM head */
    const int wte = llama ? SR_LL_WTE : SR_WTE, norm = llama ? SR_LL_NORM : SR_LNFW, head = llama ? SR_LL_HEAD : SR_WTE;
    o->encoder_forward(m->encoded, m->inputs, root.t[wte], llama ? NULL : root.t[SR_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        lp = layer_params(m, src, l);
        NEED_VIEW(lp);
        block_view p = view_block(m, lp.ptr, lp.dt);
        block_forward(m, &p, l, B, true, l > 0);
        done_forward(src, l);
    }
    lp = layer_params(m, src, L);
    NEED_VIEW(lp);
    root = view_root(m, lp.ptr, lp.dt);
    /* the last block's output, res2 + its last projection, written as the final norm reads it */
    void *out = ACT(m->residual3, (size_t)(L - 1) * BTC), *res2 = acts_of(m, L - 1, B).res2;
    if (llama)
        o->residual_rmsnorm_forward(out, m->lnf, m->lnf_rstd, res2, m->scratch, root.t[norm], (float)m->d.norm_eps,
                                    (int)BT, C);
    else
        o->residual_layernorm_forward(out, m->lnf, m->lnf_mean, m->lnf_rstd, res2, m->scratch, root.t[norm],
                                      root.t[SR_LNFB], (int)BT, C);
    o->matmul_forward(m->logits, m->lnf, root.t[head], NULL, (int)BT, C, Vp);
    /* the training forward's classifier in one op where the table has it:
     * the logits become dlogits here, and the backward starts past them */
    m->fused_dloss = dloss != 0.0f && o->crossentropy_fused ? dloss : 0.0f;
    if (m->fused_dloss != 0.0f)
        o->crossentropy_fused(m->losses, m->lse, m->logits, m->targets, dloss, (int)BT, V, Vp);
    else
        o->crossentropy_forward(m->losses, m->lse, m->logits, m->targets, (int)BT, V, Vp);
    /* the first forward since the last take writes the sum: no memset */
    dev->loss_sum(dev, SR_STREAM_COMPUTE, m->loss_acc, m->losses, BT, !m->loss_taken);
    m->loss_taken = false;
    done_forward(src, L);
    return o->take_error ? o->take_error() : SR_OK;
}

sr_status sr_model_take_loss_sum(sr_model *m, double *sum) {
    if (m->loss_taken) { /* no forward since the last take: the sum restarted at zero */
        *sum = 0.0;
        return SR_OK;
    }
    sr_dev *dev = m->dev;
    sr_event done = {0};
    dev->record(dev, &done, SR_STREAM_COMPUTE);
    sr_dev_wait(dev, SR_STREAM_D2H, &done, "loss_ready");
    sr_status st = sr_dev_download_step(dev, sum, m->loss_acc, sizeof(double), "eval_loss");
    m->loss_taken = true; /* (the host waited for the read: the next forward may write) */
    return st;
}

sr_status sr_model_read_losses(sr_model *m, float *dst, int B) {
    sr_dev *dev = m->dev;
    sr_event done = {0};
    dev->record(dev, &done, SR_STREAM_COMPUTE);
    sr_dev_wait(dev, SR_STREAM_D2H, &done, "loss_ready");
    return sr_dev_download(dev, dst, m->losses, (size_t)B * (size_t)m->d.T * sizeof(float), "task_losses");
}

sr_status sr_model_backward(sr_model *m, const sr_param_source *src, float dloss) {
    const sr_ops *o = m->ops;
    sr_dev *dev = m->dev;
    int B = m->B, L = m->d.L, C = m->d.C, T = m->d.T, V = m->d.V, Vp = m->d.Vp;
    size_t BT = (size_t)B * T, BTC = BT * C;
    const sr_stream cs = SR_STREAM_COMPUTE;

    float rgb = 1.0f, gb = 1.0f; /* the root's and a block's parameter-gradient beta (layer_grads) */
    sr_param_view lp = layer_params(m, src, L);
    float *lg = lp.ptr ? layer_grads(m, src, L, &rgb) : NULL;
    NEED_VIEW(lp);
    NEED(lg);
    root_view rp = view_root(m, lp.ptr, lp.dt), rg = view_root(m, lg, SR_DT_F32);
    bool llama = m->d.arch == SR_ARCH_LLAMA;
    const int wte = llama ? SR_LL_WTE : SR_WTE, norm = llama ? SR_LL_NORM : SR_LNFW, head = llama ? SR_LL_HEAD : SR_WTE;
    if (m->fused_dloss == 0.0f)
        o->crossentropy_backward(m->logits, m->lse, m->targets, dloss, (int)BT, V, Vp);
    else if (m->fused_dloss != dloss)
        return sr_error(SR_ERR_INTERNAL,
                        "the backward's dloss %g is not the %g the fused classifier wrote dlogits with", (double)dloss,
                        (double)m->fused_dloss);
    m->fused_dloss = 0.0f;
    o->matmul_backward(m->dln, rg.t[head], NULL, m->logits, m->lnf, rp.t[head], (int)BT, C, Vp, 0.0f, rgb);
    /* the final norm's input gradient starts the residual stream's: written (beta 0) */
    if (llama)
        o->rmsnorm_backward(m->dresidual, rg.t[norm], m->dln, ACT(m->residual3, (size_t)(L - 1) * BTC), rp.t[norm],
                            m->lnf_rstd, (int)BT, C, 0.0f, rgb);
    else
        o->layernorm_backward(m->dresidual, rg.t[norm], rg.t[SR_LNFB], m->dln, ACT(m->residual3, (size_t)(L - 1) * BTC),
                              rp.t[norm], m->lnf_mean, m->lnf_rstd, (int)BT, C, 0.0f, rgb, NULL, NULL, 0.0f);

    for (int l = L - 1; l >= 0; l--) {
        lp = layer_params(m, src, l);
        lg = lp.ptr ? layer_grads(m, src, l, &gb) : NULL;
        NEED_VIEW(lp);
        NEED(lg);
        block_view p = view_block(m, lp.ptr, lp.dt), g = view_block(m, lg, SR_DT_F32);
        if (m->d.recompute == SR_RECOMPUTE_BLOCKS)
            block_forward(m, &p, l, B, false, false);
        if (llama)
            llama_block_backward(m, &p, &g, l, B, gb);
        else
            gpt2_block_backward(m, &p, &g, l, B, gb);
        done_backward(src, l);
    }
    float again;
    lg = layer_grads(m, src, L, &again); /* (the pass's beta is the one its first call gave) */
    NEED(lg);
    rg = view_root(m, lg, SR_DT_F32);
    /* a tied embedding holds the head's gradient: the tokens' rows add to
     * it; an untied one in a fresh buffer is zeroed first (a scatter over
     * token ids has no overwrite form: absent tokens' rows stay zero) */
    if (rgb == 0.0f && rg.t[wte] != rg.t[head])
        dev->memset(dev, cs, rg.t[wte], 0, (size_t)Vp * C * sizeof(float));
    o->encoder_backward(rg.t[wte], llama ? NULL : rg.t[SR_WPE], m->dresidual, m->inputs, B, T, C, rgb);
    done_backward(src, L);
    return o->take_error ? o->take_error() : SR_OK;
}

/* ------------------------------------------------------------------------ */
/* the decode step: each block's forward for one token over a key/value
 * cache (sampling's form of the blocks above; model.h sr_decoder) */

struct sr_decoder {
    const sr_model *m;
    const float *p;
    const sr_ops *o;
    int W;     /* the window: positions the cache holds */
    int KV;    /* one position's keys (or values) in the cache: NKV hs (GPT-2: C) */
    int pos;   /* tokens in the cache */
    int *hist; /* the cache's tokens (for the window's restart) */
    float *kc; /* [L][W][KV] keys */
    float *vc; /* [L][W][KV] values */
    float *cs; /* Llama: the rotary table of W positions */
    float *x, *ln, *qkv, *y, *o_, *h, *hg, *logits, *att, *mean, *rstd;
};

int sr_decoder_window(const sr_model_dims *d) {
    int max = sr_family_get(d->arch)->decode_window_max;
    return max > 0 && d->T > max ? max : d->T;
}

/* One position's keys (or values) in the cache: NKV hs. */
static size_t decode_kv(const sr_model_dims *d) { return (size_t)d->NKV * (size_t)(d->C / d->NH); }

size_t sr_decoder_bytes(const sr_model_dims *d) {
    size_t C = (size_t)d->C, W = (size_t)sr_decoder_window(d), hs = C / (size_t)d->NH;
    return sizeof(float) * 2 * (size_t)d->L * W * decode_kv(d) +                      /* keys and values */
           sizeof(float) * (4 * C + sr_model_qkv_rows(d) + 2 * sr_model_mlp_rows(d) + /* the buffers, */
                            (size_t)d->Vp + (size_t)d->NH * W) +                      /* logits, attention */
           (sr_family_get(d->arch)->learned_positions ? 0 : sizeof(float) * W * hs) + /* the rotary table */
           sizeof(int) * W;
}

void sr_decoder_free(sr_decoder *g) {
    if (!g)
        return;
    free(g->hist);
    free(g->kc);
    free(g->vc);
    free(g->cs);
    free(g->x);
    free(g->ln);
    free(g->qkv);
    free(g->y);
    free(g->o_);
    free(g->h);
    free(g->hg);
    free(g->logits);
    free(g->att);
    free(g->mean);
    free(g->rstd);
    free(g);
}

sr_status sr_decoder_new(sr_decoder **out, const sr_model *m, const float *params) {
    const sr_model_dims *d = &m->d;
    sr_decoder *g = sr_calloc(1, sizeof *g);
    *out = NULL;
    if (!g)
        return sr_error_oom("the generator");
    g->W = sr_decoder_window(d);
    g->KV = (int)decode_kv(d);
    size_t cache = (size_t)d->L * (size_t)g->W * (size_t)g->KV, hs = (size_t)(d->C / d->NH);
    g->m = m;
    g->p = params;
    g->o = &sr_ops_cpu;
    g->hist = sr_malloc(sizeof(int) * (size_t)g->W);
    g->kc = sr_malloc(sizeof(float) * cache);
    g->vc = sr_malloc(sizeof(float) * cache);
    bool rope = !sr_family_get(d->arch)->learned_positions;
    g->cs = rope ? sr_malloc(sizeof(float) * (size_t)g->W * hs) : NULL;
    g->x = sr_malloc(sizeof(float) * (size_t)d->C);
    g->ln = sr_malloc(sizeof(float) * (size_t)d->C);
    g->qkv = sr_malloc(sizeof(float) * sr_model_qkv_rows(d));
    g->y = sr_malloc(sizeof(float) * (size_t)d->C);
    g->o_ = sr_malloc(sizeof(float) * (size_t)d->C);
    g->h = sr_malloc(sizeof(float) * sr_model_mlp_rows(d));
    g->hg = sr_malloc(sizeof(float) * sr_model_mlp_rows(d));
    g->logits = sr_malloc(sizeof(float) * (size_t)d->Vp);
    g->att = sr_malloc(sizeof(float) * (size_t)d->NH * (size_t)g->W); /* one row per head */
    g->mean = sr_malloc(sizeof(float));
    g->rstd = sr_malloc(sizeof(float));
    if (!g->hist || !g->kc || !g->vc || (rope && !g->cs) || !g->x || !g->ln || !g->qkv || !g->y || !g->o_ || !g->h ||
        !g->hg || !g->logits || !g->att || !g->mean || !g->rstd) {
        sr_decoder_free(g);
        return sr_error_oom("the generator's key/value cache");
    }
    if (rope) {
        sr_model_dims w = *d;
        w.T = g->W;
        sr_model_rope_table(&w, g->cs); /* the model's own table, its first W rows */
    }
    *out = g;
    return SR_OK;
}

static const float *decode_tensor(const sr_decoder *g, int layer, int k) {
    const sr_model *m = g->m;
    int i = layer < m->d.L ? layer * m->n_block + k : m->d.L * m->n_block + k;
    return g->p + m->tensors[i].offset;
}

/* Causal attention of the token at pos over the cache of layer l: query
 * head h reads key/value head h / (NH / NKV). */
static void decode_attend(sr_decoder *g, const float *kc, const float *vc, int pos) {
    const sr_model_dims *d = &g->m->d;
    int NH = d->NH, hs = d->C / NH, per = NH / (g->KV / hs), KV = g->KV;
    float scale = 1.0f / sqrtf((float)hs);
    /* the heads are independent: one per thread, each with its own row */
#pragma omp parallel for
    for (int h = 0; h < NH; h++) {
        const float *q = g->qkv + h * hs;
        int kvh = h / per;
        float *att = g->att + (size_t)h * g->W;
        float mx = -INFINITY;
        for (int t = 0; t <= pos; t++) {
            const float *k = kc + (size_t)t * KV + kvh * hs;
            float s = 0.0f;
            for (int i = 0; i < hs; i++)
                s += q[i] * k[i];
            att[t] = s * scale;
            mx = att[t] > mx ? att[t] : mx;
        }
        float sum = 0.0f;
        for (int t = 0; t <= pos; t++) {
            att[t] = expf(att[t] - mx);
            sum += att[t];
        }
        float *y = g->y + h * hs;
        for (int i = 0; i < hs; i++)
            y[i] = 0.0f;
        for (int t = 0; t <= pos; t++) {
            const float *v = vc + (size_t)t * KV + kvh * hs;
            float w = att[t] / sum;
            for (int i = 0; i < hs; i++)
                y[i] += w * v[i];
        }
    }
}

/* One Llama token at position pos (the same ops as training's forward). */
static void decode_llama(sr_decoder *g, int token, int pos) {
    const sr_model_dims *d = &g->m->d;
    const sr_ops *o = g->o;
    int C = d->C, NH = d->NH, NKV = d->NKV, hs = C / NH, L = d->L, F = d->F, KV = g->KV;
    float eps = (float)d->norm_eps;
    memcpy(g->x, decode_tensor(g, L, SR_LL_WTE) + (size_t)token * C, sizeof(float) * (size_t)C);
    for (int l = 0; l < L; l++) {
        o->rmsnorm_forward(g->ln, g->rstd, g->x, decode_tensor(g, l, SR_LL_ATTN_NORM), eps, 1, C);
        o->matmul_forward(g->qkv, g->ln, decode_tensor(g, l, SR_LL_QKV), NULL, 1, C, (int)sr_model_qkv_rows(d));
        o->rope_forward(g->qkv, g->cs + (size_t)pos * hs, 1, 1, NH, NKV, hs);
        float *kc = g->kc + (size_t)l * g->W * KV, *vc = g->vc + (size_t)l * g->W * KV;
        memcpy(kc + (size_t)pos * KV, g->qkv + C, sizeof(float) * (size_t)KV);
        memcpy(vc + (size_t)pos * KV, g->qkv + C + KV, sizeof(float) * (size_t)KV);
        decode_attend(g, kc, vc, pos);
        o->matmul_forward(g->o_, g->y, decode_tensor(g, l, SR_LL_O), NULL, 1, C, C);
        o->residual_forward(g->x, g->x, g->o_, (size_t)C);
        o->rmsnorm_forward(g->ln, g->rstd, g->x, decode_tensor(g, l, SR_LL_MLP_NORM), eps, 1, C);
        o->matmul_forward(g->h, g->ln, decode_tensor(g, l, SR_LL_GATE_UP), NULL, 1, C, 2 * F);
        o->swiglu_forward(g->hg, g->h, 1, F);
        o->matmul_forward(g->o_, g->hg, decode_tensor(g, l, SR_LL_DOWN), NULL, 1, F, C);
        o->residual_forward(g->x, g->x, g->o_, (size_t)C);
    }
}

/* One token at position pos: the cache gains its keys and values, g->x
 * ends as the final norm's input. */
static void decode_step(sr_decoder *g, int token, int pos) {
    const sr_model_dims *d = &g->m->d;
    if (d->arch == SR_ARCH_LLAMA) {
        decode_llama(g, token, pos);
        return;
    }
    const sr_ops *o = g->o;
    int C = d->C, L = d->L;
    const float *wte = decode_tensor(g, L, SR_WTE), *wpe = decode_tensor(g, L, SR_WPE);
    for (int c = 0; c < C; c++)
        g->x[c] = wte[(size_t)token * C + c] + wpe[(size_t)pos * C + c];
    for (int l = 0; l < L; l++) {
        o->layernorm_forward(g->ln, g->mean, g->rstd, g->x, decode_tensor(g, l, SR_LN1W), decode_tensor(g, l, SR_LN1B),
                             1, C);
        o->matmul_forward(g->qkv, g->ln, decode_tensor(g, l, SR_QKVW), decode_tensor(g, l, SR_QKVB), 1, C, 3 * C);
        float *kc = g->kc + ((size_t)l * g->W) * C, *vc = g->vc + ((size_t)l * g->W) * C;
        memcpy(kc + (size_t)pos * C, g->qkv + C, sizeof(float) * (size_t)C);
        memcpy(vc + (size_t)pos * C, g->qkv + 2 * C, sizeof(float) * (size_t)C);
        decode_attend(g, kc, vc, pos);
        o->matmul_forward(g->o_, g->y, decode_tensor(g, l, SR_ATTPROJW), decode_tensor(g, l, SR_ATTPROJB), 1, C, C);
        o->residual_forward(g->x, g->x, g->o_, (size_t)C);
        o->layernorm_forward(g->ln, g->mean, g->rstd, g->x, decode_tensor(g, l, SR_LN2W), decode_tensor(g, l, SR_LN2B),
                             1, C);
        o->matmul_forward(g->h, g->ln, decode_tensor(g, l, SR_FCW), decode_tensor(g, l, SR_FCB), 1, C, 4 * C);
        o->gelu_forward(g->hg, g->h, (size_t)4 * C);
        o->matmul_forward(g->o_, g->hg, decode_tensor(g, l, SR_FCPROJW), decode_tensor(g, l, SR_FCPROJB), 1, 4 * C, C);
        o->residual_forward(g->x, g->x, g->o_, (size_t)C);
    }
}

const float *sr_decoder_feed(sr_decoder *g, int token) {
    const sr_model_dims *d = &g->m->d;
    if (g->pos == g->W) {
        /* the window is full: restart the cache from the newest W/2 tokens */
        int keep = g->W / 2;
        memmove(g->hist, g->hist + g->W - keep, sizeof(int) * (size_t)keep);
        g->pos = 0;
        for (int i = 0; i < keep; i++)
            decode_step(g, g->hist[i], g->pos++);
    }
    g->hist[g->pos] = token;
    decode_step(g, token, g->pos++);
    int L = d->L;
    /* the final norm and the head over the real vocabulary */
    if (d->arch == SR_ARCH_LLAMA) {
        g->o->rmsnorm_forward(g->ln, g->rstd, g->x, decode_tensor(g, L, SR_LL_NORM), (float)d->norm_eps, 1, d->C);
        g->o->matmul_forward(g->logits, g->ln, decode_tensor(g, L, d->untied ? SR_LL_HEAD : SR_LL_WTE), NULL, 1, d->C,
                             d->V);
    } else {
        g->o->layernorm_forward(g->ln, g->mean, g->rstd, g->x, decode_tensor(g, L, SR_LNFW),
                                decode_tensor(g, L, SR_LNFB), 1, d->C);
        g->o->matmul_forward(g->logits, g->ln, decode_tensor(g, L, SR_WTE), NULL, 1, d->C, d->V);
    }
    return g->logits;
}
