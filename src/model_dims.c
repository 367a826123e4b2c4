/* model_dims.c — a model's arithmetic from its dims alone, read from the
 * family's traits (family.h): the completed dims and their text, the
 * parameter count, the fused projections' widths, the rotary table, the
 * FLOPs per token and the bytes outside the tensors.  No family is named
 * here; the tensors and the blocks are model.c's.  See model.h. */
#include "srconfig.h"

#include "model.h"

#include <math.h>
#include <stdio.h>

#include "line.h"

int sr_model_padded_vocab(int V) { return (V + 63) / 64 * 64; }

void sr_model_dims_complete(sr_model_dims *d) {
    d->Vp = sr_model_padded_vocab(d->V);
    d->arch = sr_family_index(d->arch);
    const sr_family *f = sr_family_get(d->arch);
    if (!(f->keys & SR_FKEY_N_KV_HEAD) || d->NKV <= 0)
        d->NKV = d->NH;
    if (!(f->keys & SR_FKEY_FFN_DIM))
        d->F = f->ffn_num * d->C / f->ffn_den;
    if (!(f->keys & SR_FKEY_TIE))
        d->untied = false;
}

bool sr_model_dims_same(const sr_model_dims *a0, const sr_model_dims *b0) {
    sr_model_dims a = *a0, b = *b0;
    sr_model_dims_complete(&a);
    sr_model_dims_complete(&b);
    bool same = a.arch == b.arch && a.L == b.L && a.NH == b.NH && a.C == b.C && a.V == b.V && a.T == b.T &&
                a.NKV == b.NKV && a.F == b.F && a.untied == b.untied;
    unsigned keys = sr_family_get(a.arch)->keys;
    if (same && (keys & SR_FKEY_NORM_EPS))
        same = a.norm_eps == b.norm_eps;
    if (same && (keys & SR_FKEY_ROPE))
        same = a.rope_theta == b.rope_theta && a.rope.factor == b.rope.factor &&
               (a.rope.factor == 0 || (a.rope.low_freq_factor == b.rope.low_freq_factor &&
                                       a.rope.high_freq_factor == b.rope.high_freq_factor &&
                                       a.rope.original_max_position == b.rope.original_max_position));
    return same;
}

const char *sr_model_dims_text(const sr_model_dims *d0, char *buf, size_t n) {
    sr_model_dims d = *d0;
    sr_model_dims_complete(&d);
    const sr_family *f = sr_family_get(d.arch);
    sr_line l = sr_line_on(buf, n);
    sr_line_add(&l, "%s, n_layer %d, n_head %d, n_embd %d, vocab_size %d, seq_len %d", f->name, d.L, d.NH, d.C, d.V,
                d.T);
    if (f->keys & SR_FKEY_N_KV_HEAD)
        sr_line_add(&l, ", n_kv_head %d", d.NKV);
    if (f->keys & SR_FKEY_FFN_DIM)
        sr_line_add(&l, ", ffn_dim %d", d.F);
    if (f->keys & SR_FKEY_TIE)
        sr_line_add(&l, ", %s", d.untied ? "untied" : "tied");
    if (f->keys & SR_FKEY_NORM_EPS)
        sr_line_add(&l, ", norm_eps %g", d.norm_eps);
    if (f->keys & SR_FKEY_ROPE) {
        sr_line_add(&l, ", rope_theta %g", d.rope_theta);
        if (d.rope.factor > 0)
            sr_line_add(&l, ", rope_scaling %g/%g/%g/%d", d.rope.factor, d.rope.low_freq_factor,
                        d.rope.high_freq_factor, d.rope.original_max_position);
    }
    return buf;
}

/* In float, as transformers' LlamaRotaryEmbedding computes it (its
 * _compute_default_rope_parameters and _compute_llama3_parameters): the
 * inverse frequencies base^(-2i/hs) in float, scaled; then the angle t f
 * as one float product and its cosine and sine.  Computing in double
 * instead would differ by up to about 1e-4 at t in the thousands (the
 * float rounding of t f), enough to fail an import's comparison. */
void sr_model_rope_table(const sr_model_dims *d, float *out) {
    int hs = d->C / d->NH, half = hs / 2;
    const sr_rope_scaling *r = &d->rope;
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf((float)d->rope_theta, (float)(2 * i) / (float)hs);
        if (r->factor > 0) {
            float old = (float)r->original_max_position;
            float low_wl = old / (float)r->low_freq_factor, high_wl = old / (float)r->high_freq_factor;
            float wl = 2.0f * (float)M_PI / inv;
            float scaled = wl > low_wl ? inv / (float)r->factor : inv;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float smooth =
                    (old / wl - (float)r->low_freq_factor) / (float)(r->high_freq_factor - r->low_freq_factor);
                scaled = (1.0f - smooth) * scaled / (float)r->factor + smooth * scaled;
            }
            inv = scaled;
        }
        for (int t = 0; t < d->T; t++) {
            float ang = (float)t * inv;
            out[(size_t)t * hs + i] = (float)cos((double)ang);
            out[(size_t)t * hs + half + i] = (float)sin((double)ang);
        }
    }
}

size_t sr_model_qkv_rows(const sr_model_dims *d) { return (size_t)(d->NH + 2 * d->NKV) * (size_t)(d->C / d->NH); }

size_t sr_model_mlp_rows(const sr_model_dims *d) { return (sr_family_get(d->arch)->gated_mlp ? 2 : 1) * (size_t)d->F; }

size_t sr_model_n_params(const sr_model_dims *d0) {
    sr_model_dims d = *d0;
    sr_model_dims_complete(&d);
    const sr_family *f = sr_family_get(d.arch);
    size_t C = (size_t)d.C, Vp = (size_t)d.Vp, F = (size_t)d.F, QKV = sr_model_qkv_rows(&d);
    size_t norm = f->rms_norm ? C : 2 * C; /* a LayerNorm's weight and bias */
    size_t block = 2 * norm + QKV * C + C * C + sr_model_mlp_rows(&d) * C + F * C;
    if (f->biases)
        block += QKV + C + sr_model_mlp_rows(&d) + C;
    return (size_t)d.L * block + Vp * C * (d.untied ? 2 : 1) + (f->learned_positions ? (size_t)d.T * C : 0) + norm;
}

double sr_model_flops_per_token(const sr_model *m) {
    /* every parameter the GEMMs read: not the positions (GPT-2) nor an
     * untied embedding (a lookup; a tied one is the head's GEMM) */
    double not_gemm = sr_family_get(m->d.arch)->learned_positions ? (double)m->d.T * m->d.C
                      : m->d.untied                               ? (double)m->d.V * m->d.C
                                                                  : 0;
    double N = (double)m->n_params_real - not_gemm;
    return 6.0 * N + 12.0 * m->d.L * m->d.C * m->d.T;
}

size_t sr_model_other_bytes(const sr_model_dims *d) {
    return sizeof(double) + sr_model_rope_bytes(d); /* the loss accumulator, the rotary table */
}

size_t sr_model_rope_bytes(const sr_model_dims *d) {
    if (sr_family_get(d->arch)->learned_positions)
        return 0;
    return (size_t)d->T * (size_t)(d->C / d->NH) * sizeof(float);
}
