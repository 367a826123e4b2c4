/* hfnames.c — the Hugging Face names of each family's tensors; see
 * hfnames.h. */
#include "srconfig.h"

#include "hfnames.h"

#include <stdio.h>
#include <string.h>

static sr_hf_piece *piece(sr_hf_piece *p, const char *prefix, const char *name, int tensor, int64_t row0, int64_t rows,
                          int64_t cols, bool vector) {
    snprintf(p->name, sizeof p->name, "%s%s", prefix, name);
    p->prefix_len = (int)strlen(prefix);
    p->tensor = tensor;
    p->row0 = row0;
    p->rows = rows;
    p->transposed = false;
    p->ndim = vector ? 1 : 2;
    p->shape[0] = vector ? cols : rows;
    p->shape[1] = vector ? 0 : cols;
    return p + 1;
}

static int gpt2_pieces(const sr_model *m, sr_hf_piece *out) {
    int root = m->d.L * m->n_block;
    for (int i = 0; i < m->n_tensors; i++) {
        const sr_tensor *t = &m->tensors[i];
        sr_hf_piece *p = &out[i];
        int64_t rows = t->vocab ? m->d.V : t->rows;
        piece(p, "transformer.", t->name, i, 0, rows, t->cols, t->ndim == 1);
        if (t->ndim == 2 && i < root) { /* Conv1D: [in, out] */
            p->transposed = true;
            p->shape[0] = t->cols;
            p->shape[1] = t->rows;
        }
    }
    return m->n_tensors;
}

static int llama_pieces(const sr_model *m, sr_hf_piece *out) {
    const sr_model_dims *d = &m->d;
    int64_t C = d->C, hs = d->C / d->NH, q = (int64_t)d->NH * hs, kv = (int64_t)d->NKV * hs, F = d->F;
    sr_hf_piece *p = out;
    char n[96];
    for (int l = 0; l < d->L; l++) {
        int b = l * m->n_block;
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        p = piece(p, "model.", NAME("input_layernorm.weight"), b + SR_LL_ATTN_NORM, 0, 1, C, true);
        p = piece(p, "model.", NAME("self_attn.q_proj.weight"), b + SR_LL_QKV, 0, q, C, false);
        p = piece(p, "model.", NAME("self_attn.k_proj.weight"), b + SR_LL_QKV, q, kv, C, false);
        p = piece(p, "model.", NAME("self_attn.v_proj.weight"), b + SR_LL_QKV, q + kv, kv, C, false);
        p = piece(p, "model.", NAME("self_attn.o_proj.weight"), b + SR_LL_O, 0, C, C, false);
        p = piece(p, "model.", NAME("post_attention_layernorm.weight"), b + SR_LL_MLP_NORM, 0, 1, C, true);
        p = piece(p, "model.", NAME("mlp.gate_proj.weight"), b + SR_LL_GATE_UP, 0, F, C, false);
        p = piece(p, "model.", NAME("mlp.up_proj.weight"), b + SR_LL_GATE_UP, F, F, C, false);
        p = piece(p, "model.", NAME("mlp.down_proj.weight"), b + SR_LL_DOWN, 0, C, F, false);
#undef NAME
    }
    int root = d->L * m->n_block;
    p = piece(p, "model.", "embed_tokens.weight", root + SR_LL_WTE, 0, d->V, C, false);
    p = piece(p, "model.", "norm.weight", root + SR_LL_NORM, 0, 1, C, true);
    if (d->untied)
        p = piece(p, "", "lm_head.weight", root + SR_LL_HEAD, 0, d->V, C, false);
    return (int)(p - out);
}

int sr_hf_pieces(const sr_model *m, sr_hf_piece *out) {
    return m->d.arch == SR_ARCH_LLAMA ? llama_pieces(m, out) : gpt2_pieces(m, out);
}
