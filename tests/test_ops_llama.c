/* test_ops_llama.c — the Llama family's CPU ops against mathematics.
 *
 * For RMSNorm, RoPE, SwiGLU and grouped-query attention: J = sum(out * R)
 * for a fixed random R, evaluated in double; every coordinate of every
 * differentiable input is perturbed by +-h and the central difference is
 * compared with the op's backward (dout = R, zeroed gradients).  Each
 * forward is also compared with a naive double-precision formula (the
 * definitions Hugging Face's LlamaRMSNorm, apply_rotary_pos_emb and
 * LlamaMLP compute), and: backward accumulates, RoPE's backward inverts
 * its forward and keeps each pair's norm, grouped-query attention equals
 * multi-head attention on expanded key/value heads (and, with NKV == NH,
 * GPT-2's attention op bitwise), the encoder without positions is a
 * lookup.  test_ops.c holds the GPT-2 ops' cases and the back-end
 * comparisons. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fdcheck.h"
#include "model.h"
#include "ops.h"
#include "rng.h"
#include "tap.h"

static const sr_ops *o = &sr_ops_cpu;

static double max_diff(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, fabs((double)a[i] - b[i]));
    return e;
}

/* ---- RMSNorm ----------------------------------------------------------------- */
typedef struct {
    int N, C;
    float eps;
    float *inp, *w, *out, *rstd, *R;
} rms_ctx;
static double rms_J(void *p) {
    rms_ctx *c = p;
    o->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->eps, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_rmsnorm(void) {
    rms_ctx c = {5, 40, 1e-5f, NULL, NULL, NULL, NULL, NULL}; /* 40: more than one 16-column block per thread */
    size_t NC = (size_t)c.N * c.C;
    c.inp = fnew(NC), c.w = fnew(c.C), c.out = fnew(NC), c.rstd = fnew(c.N), c.R = fnew(NC);
    fill(c.inp, NC, 1, 1);
    fill(c.w, c.C, 2, 1);
    fill(c.R, NC, 3, 1);
    rms_J(&c);
    double e = 0;
    for (int n = 0; n < c.N; n++) {
        double ss = 0;
        for (int k = 0; k < c.C; k++)
            ss += (double)c.inp[n * c.C + k] * c.inp[n * c.C + k];
        double r = 1.0 / sqrt(ss / c.C + c.eps);
        for (int k = 0; k < c.C; k++)
            e = fmax(e, fabs(c.inp[n * c.C + k] * r * c.w[k] - c.out[n * c.C + k]));
    }
    tap_ok(e < 1e-5, "rmsnorm: forward is x / sqrt(mean(x^2) + eps) * w (err %.2g)", e);
    /* the overwrite forms (beta, gbeta 0) into NaN: nothing of them read */
    float *di = fnan(NC), *dw = fnan(c.C);
    o->rmsnorm_backward(di, dw, c.R, c.inp, c.w, c.rstd, c.N, c.C, 0.0f, 0.0f);
    tap_ok(fd_check("rmsnorm dinp", c.inp, NC, di, rms_J, &c, 1e-2f) < 2e-3,
           "rmsnorm: dinp (beta 0, written into NaN) matches finite differences");
    tap_ok(fd_check("rmsnorm dw", c.w, c.C, dw, rms_J, &c, 1e-2f) < 2e-3,
           "rmsnorm: dw (gbeta 0, written into NaN) matches finite differences");
    /* the += forms onto prior values: what finite differences say */
    float *dip, *pri = fprior(NC, 5, &dip), *dwp, *prw = fprior((size_t)c.C, 6, &dwp);
    rms_J(&c);
    o->rmsnorm_backward(dip, dwp, c.R, c.inp, c.w, c.rstd, c.N, c.C, 1.0f, 1.0f);
    tap_ok(fd_check("rmsnorm dinp", c.inp, NC, fminus(dip, pri, NC), rms_J, &c, 1e-2f) < 2e-3 &&
               fd_check("rmsnorm dw", c.w, c.C, fminus(dwp, prw, (size_t)c.C), rms_J, &c, 1e-2f) < 2e-3,
           "rmsnorm: the += forms (beta, gbeta 1) add what finite differences say");
    free(dip), free(pri), free(dwp), free(prw);
    float *di2 = fnew(NC), *dw2 = fnew(c.C);
    rms_J(&c);
    o->rmsnorm_backward(di2, dw2, c.R, c.inp, c.w, c.rstd, c.N, c.C, 1.0f, 1.0f);
    o->rmsnorm_backward(di2, dw2, c.R, c.inp, c.w, c.rstd, c.N, c.C, 1.0f, 1.0f);
    double acc = 0;
    for (size_t i = 0; i < NC; i++)
        acc = fmax(acc, fabs(di2[i] - 2 * di[i]));
    for (int i = 0; i < c.C; i++)
        acc = fmax(acc, fabs(dw2[i] - 2 * dw[i]));
    tap_ok(acc < 1e-5, "rmsnorm: backward accumulates into gradients (err %.2g)", acc);
    /* the weight gradient's sum does not depend on the thread count */
    float *dw1 = fnew(c.C), *di1 = fnew(NC);
    sr_ops_set_threads(1);
    o->rmsnorm_backward(di1, dw1, c.R, c.inp, c.w, c.rstd, c.N, c.C, 0.0f, 0.0f);
    sr_ops_set_threads(2);
    tap_ok(memcmp(dw1, dw, sizeof(float) * c.C) == 0 && memcmp(di1, di, sizeof(float) * NC) == 0,
           "rmsnorm: gradients are bitwise the same on 1 and 2 threads");
    free(c.inp), free(c.w), free(c.out), free(c.rstd), free(c.R), free(di), free(dw), free(di2), free(dw2), free(dw1),
        free(di1);
}

/* ---- RoPE -------------------------------------------------------------------------- */
typedef struct {
    int B, T, NH, NKV, hs;
    const float *cs;
    float *x, *work, *R;
} rope_ctx;
static size_t rope_n(const rope_ctx *c) { return (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->hs; }
static double rope_J(void *p) {
    rope_ctx *c = p;
    memcpy(c->work, c->x, rope_n(c) * sizeof(float));
    o->rope_forward(c->work, c->cs, c->B, c->T, c->NH, c->NKV, c->hs);
    return dot(c->work, c->R, rope_n(c));
}
static void test_rope(void) {
    sr_model_dims d = {
        .L = 1, .NH = 4, .C = 32, .V = 8, .T = 5, .arch = SR_ARCH_LLAMA, .NKV = 2, .F = 8, .rope_theta = 100};
    rope_ctx c = {2, d.T, d.NH, d.NKV, d.C / d.NH, NULL, NULL, NULL, NULL};
    size_t n = rope_n(&c), W = (size_t)(c.NH + 2 * c.NKV) * c.hs;
    float *cs = fnew((size_t)d.T * c.hs);
    sr_model_rope_table(&d, cs);
    c.cs = cs;
    c.x = fnew(n), c.work = fnew(n), c.R = fnew(n);
    fill(c.x, n, 4, 1);
    fill(c.R, n, 5, 1);
    rope_J(&c);
    /* against the definition: q * cos + rotate_half(q) * sin in double */
    double e = 0, vals = 0;
    int half = c.hs / 2;
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++)
            for (int h = 0; h < c.NH + 2 * c.NKV; h++)
                for (int i = 0; i < c.hs; i++) {
                    size_t at = ((size_t)b * c.T + t) * W + (size_t)h * c.hs;
                    if (h >= c.NH + c.NKV) { /* values pass through */
                        vals = fmax(vals, fabs(c.work[at + i] - c.x[at + i]));
                        continue;
                    }
                    int k = i % half;
                    double f = pow(100.0, -2.0 * k / c.hs), co = cos(t * f), si = sin(t * f);
                    double rot = i < half ? -c.x[at + i + half] : c.x[at + i - half];
                    e = fmax(e, fabs(c.x[at + i] * co + rot * si - c.work[at + i]));
                }
    tap_ok(e < 1e-5 && vals == 0.0,
           "rope: queries and keys are q cos + rotate_half(q) sin, values untouched (err %.2g)", e);
    /* backward: the transpose, by finite differences; and it inverts the forward */
    float *g = fnew(n);
    memcpy(g, c.R, n * sizeof(float));
    o->rope_backward(g, c.cs, c.B, c.T, c.NH, c.NKV, c.hs);
    tap_ok(fd_check("rope dx", c.x, n, g, rope_J, &c, 1e-2f) < 1e-3, "rope: backward matches finite differences");
    memcpy(c.work, c.x, n * sizeof(float));
    o->rope_forward(c.work, c.cs, c.B, c.T, c.NH, c.NKV, c.hs);
    o->rope_backward(c.work, c.cs, c.B, c.T, c.NH, c.NKV, c.hs);
    tap_ok(max_diff(c.work, c.x, n) < 1e-6, "rope: backward undoes forward (a rotation's inverse, err %.2g)",
           max_diff(c.work, c.x, n));
    free(cs), free(c.x), free(c.work), free(c.R), free(g);
}

/* ---- SwiGLU ------------------------------------------------------------------------ */
typedef struct {
    int N, F;
    float *gu, *out, *R;
} sw_ctx;
static double sw_J(void *p) {
    sw_ctx *c = p;
    o->swiglu_forward(c->out, c->gu, c->N, c->F);
    return dot(c->out, c->R, (size_t)c->N * c->F);
}
static void test_swiglu(void) {
    sw_ctx c = {3, 37, NULL, NULL, NULL};
    size_t NF = (size_t)c.N * c.F;
    c.gu = fnew(2 * NF), c.out = fnew(NF), c.R = fnew(NF);
    fill(c.gu, 2 * NF, 6, 2);
    fill(c.R, NF, 7, 1);
    sw_J(&c);
    double e = 0;
    for (int n = 0; n < c.N; n++)
        for (int f = 0; f < c.F; f++) {
            double a = c.gu[(size_t)n * 2 * c.F + f], u = c.gu[(size_t)n * 2 * c.F + c.F + f];
            e = fmax(e, fabs(a / (1 + exp(-a)) * u - c.out[(size_t)n * c.F + f]));
        }
    tap_ok(e < 1e-5, "swiglu: forward is silu(gate) * up (err %.2g)", e);
    float *dgu = fnan(2 * NF), *dgu2 = fnew(2 * NF);
    o->swiglu_backward(dgu, c.R, c.gu, c.N, c.F, 0.0f);
    tap_ok(fd_check("swiglu dgu", c.gu, 2 * NF, dgu, sw_J, &c, 1e-2f) < 1e-3,
           "swiglu: dgate and dup (beta 0, written into NaN) match finite differences");
    float *dgu1, *pr = fprior(2 * NF, 8, &dgu1);
    o->swiglu_backward(dgu1, c.R, c.gu, c.N, c.F, 1.0f);
    tap_ok(fd_check("swiglu dgu +=", c.gu, 2 * NF, fminus(dgu1, pr, 2 * NF), sw_J, &c, 1e-2f) < 1e-3,
           "swiglu: the += form (beta 1) adds what finite differences say");
    free(dgu1), free(pr);
    o->swiglu_backward(dgu2, c.R, c.gu, c.N, c.F, 0.0f);
    o->swiglu_backward(dgu2, c.R, c.gu, c.N, c.F, 1.0f);
    double acc = 0;
    for (size_t i = 0; i < 2 * NF; i++)
        acc = fmax(acc, fabs(dgu2[i] - 2 * dgu[i]));
    tap_ok(acc < 1e-5, "swiglu: beta 0 then beta 1 is twice the gradient (err %.2g)", acc);
    /* saturation: silu of large |x| is x or 0, finite */
    float big[4] = {-200.0f, 200.0f, 1.0f, 1.0f}, out[2];
    o->swiglu_forward(out, big, 1, 2);
    tap_ok(out[0] == 0.0f && out[1] == 200.0f, "swiglu: silu(-200) = 0 and silu(200) = 200 (%g, %g)", out[0], out[1]);
    free(c.gu), free(c.out), free(c.R), free(dgu), free(dgu2);
}

/* ---- grouped-query attention ------------------------------------------------------- */
typedef struct {
    int B, T, NH, NKV, hs;
    float *qkv, *out, *att, *R;
} gq_ctx;
static double gq_J(void *p) {
    gq_ctx *c = p;
    o->gqa_attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->NH, c->NKV, c->hs);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->hs);
}
static void test_gqa(void) {
    gq_ctx c = {2, 6, 4, 2, 4, NULL, NULL, NULL, NULL};
    int W = (c.NH + 2 * c.NKV) * c.hs, C = c.NH * c.hs;
    size_t n = (size_t)c.B * c.T * W, nout = (size_t)c.B * c.T * C;
    c.qkv = fnew(n), c.out = fnew(nout), c.R = fnew(nout);
    c.att = fnew(o->attention_save_bytes(c.B, c.T, c.NH) / sizeof(float));
    fill(c.qkv, n, 8, 1);
    fill(c.R, nout, 9, 1);
    gq_J(&c);
    /* against multi-head attention on expanded key/value heads (each
     * group's key and value copied to its query heads) */
    float *x = fnew((size_t)c.B * c.T * 3 * C), *xo = fnew(nout);
    float *xatt = fnew(o->attention_save_bytes(c.B, c.T, c.NH) / sizeof(float));
    int per = c.NH / c.NKV;
    for (int bt = 0; bt < c.B * c.T; bt++)
        for (int h = 0; h < c.NH; h++)
            for (int i = 0; i < c.hs; i++) {
                const float *row = c.qkv + (size_t)bt * W;
                float *xr = x + (size_t)bt * 3 * C;
                xr[h * c.hs + i] = row[h * c.hs + i];
                xr[C + h * c.hs + i] = row[(c.NH + h / per) * c.hs + i];
                xr[2 * C + h * c.hs + i] = row[(c.NH + c.NKV + h / per) * c.hs + i];
            }
    o->attention_forward(xo, xatt, x, c.B, c.T, C, c.NH);
    tap_ok(max_diff(xo, c.out, nout) < 1e-6, "gqa: equals multi-head attention on expanded key/value heads (%.2g)",
           max_diff(xo, c.out, nout));
    float *dqkv = fnew(n);
    o->gqa_attention_backward(dqkv, c.R, NULL, c.qkv, c.att, c.B, c.T, c.NH, c.NKV, c.hs);
    tap_ok(fd_check("gqa dqkv", c.qkv, n, dqkv, gq_J, &c, 1e-2f) < 2e-3,
           "gqa: dq, dk, dv match finite differences (key/value heads summed over their groups)");
    /* NKV == NH is GPT-2's attention, bitwise */
    gq_ctx m = {2, 6, 4, 4, 4, NULL, NULL, NULL, NULL};
    size_t nm = (size_t)m.B * m.T * 3 * C;
    float *q = fnew(nm), *o1 = fnew(nout), *o2 = fnew(nout), *d1 = fnew(nm), *d2 = fnew(nm);
    fill(q, nm, 10, 1);
    o->gqa_attention_forward(o1, xatt, q, m.B, m.T, m.NH, m.NKV, m.hs);
    o->gqa_attention_backward(d1, c.R, NULL, q, xatt, m.B, m.T, m.NH, m.NKV, m.hs);
    o->attention_forward(o2, xatt, q, m.B, m.T, C, m.NH);
    o->attention_backward(d2, c.R, NULL, q, xatt, m.B, m.T, C, m.NH, NULL, 0.0f);
    tap_ok(memcmp(o1, o2, nout * sizeof(float)) == 0 && memcmp(d1, d2, nm * sizeof(float)) == 0,
           "gqa: with n_kv_head = n_head it is GPT-2's attention op, bitwise");
    free(c.qkv), free(c.out), free(c.att), free(c.R), free(x), free(xo), free(xatt), free(dqkv);
    free(q), free(o1), free(o2), free(d1), free(d2);
}

/* ---- the encoder without positions ------------------------------------------------- */
static void test_encoder_no_positions(void) {
    enum { B = 2, T = 3, C = 5, V = 7 };
    int inp[B * T] = {1, 6, 1, 0, 3, 6};
    float wte[V * C], out[B * T * C], dwte[V * C] = {0}, dout[B * T * C];
    fill(wte, V * C, 11, 1);
    fill(dout, B * T * C, 12, 1);
    o->encoder_forward(out, inp, wte, NULL, B, T, C);
    bool same = true;
    for (int i = 0; i < B * T; i++)
        same = same && memcmp(out + i * C, wte + inp[i] * C, sizeof(float) * C) == 0;
    tap_ok(same, "encoder: without positions it is the embedding lookup");
    o->encoder_backward(dwte, NULL, dout, inp, B, T, C, 0.0f); /* (gbeta: dwpe alone) */
    double e = 0;
    for (int v = 0; v < V; v++)
        for (int k = 0; k < C; k++) {
            double s = 0;
            for (int i = 0; i < B * T; i++)
                if (inp[i] == v)
                    s += dout[i * C + k];
            e = fmax(e, fabs(s - dwte[v * C + k]));
        }
    tap_ok(e < 1e-6, "encoder: without positions dwte[v] sums the gradients of v's tokens (err %.2g)", e);
}

int main(void) {
    sr_ops_set_threads(2);
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_gqa();
    test_encoder_no_positions();
    return tap_done();
}
