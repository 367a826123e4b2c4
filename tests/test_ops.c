/* test_ops.c — finite-difference gradient checks for every CPU op.
 *
 * For each op, J = sum(out * R) for a fixed random R, evaluated in double.
 * Every coordinate of every differentiable input is perturbed by +-h and
 * the central difference is compared with the op's backward (called with
 * dout = R, into zeroed gradients).  Also checks that backward accumulates
 * (+=) and that GEMM splitting across threads does not change results. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "rng.h"
#include "tap.h"

static const sr_ops *o = &sr_ops_cpu;

static void fill(float *x, size_t n, uint64_t stream, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * sr_rng_normal(42, stream, i));
}

static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

typedef double (*objective)(void *ctx);

/* Central differences over every coordinate of x; returns the largest error
 * relative to max|analytic| (floored at 1e-3). */
static double fd_check(const char *what, float *x, size_t n, const float *analytic, objective J, void *ctx, float h) {
    double max_err = 0.0, max_an = 0.0;
    for (size_t i = 0; i < n; i++)
        max_an = fmax(max_an, fabs(analytic[i]));
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double jp = J(ctx);
        x[i] = keep - h;
        double jm = J(ctx);
        x[i] = keep;
        double fd = (jp - jm) / (2.0 * (double)h);
        max_err = fmax(max_err, fabs(fd - analytic[i]));
    }
    double rel = max_err / fmax(max_an, 1e-3);
    tap_diag("%s: %zu coordinates, max|fd-an| %.3g, max|an| %.3g, relative %.3g", what, n, max_err, max_an, rel);
    return rel;
}

static double dot(const float *a, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

/* ---- encoder --------------------------------------------------------------- */
typedef struct {
    int B, T, C, V;
    int *inp;
    float *wte, *wpe, *out, *R;
} enc_ctx;
static double enc_J(void *p) {
    enc_ctx *c = p;
    o->encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void test_encoder(void) {
    enc_ctx c = {2, 3, 20, 5, NULL, NULL, NULL, NULL, NULL};
    size_t BT = (size_t)c.B * c.T, BTC = BT * c.C;
    int inp[] = {1, 4, 1, 0, 1, 3};
    c.inp = inp;
    c.wte = fnew((size_t)c.V * c.C);
    c.wpe = fnew((size_t)c.T * c.C);
    c.out = fnew(BTC);
    c.R = fnew(BTC);
    fill(c.wte, (size_t)c.V * c.C, 1, 1);
    fill(c.wpe, (size_t)c.T * c.C, 2, 1);
    fill(c.R, BTC, 3, 1);
    float *dwte = fnew((size_t)c.V * c.C), *dwpe = fnew((size_t)c.T * c.C);
    o->encoder_backward(dwte, dwpe, c.R, c.inp, c.B, c.T, c.C);
    tap_ok(fd_check("encoder dwte", c.wte, (size_t)c.V * c.C, dwte, enc_J, &c, 1e-2f) < 1e-3,
           "encoder: dwte matches finite differences");
    tap_ok(fd_check("encoder dwpe", c.wpe, (size_t)c.T * c.C, dwpe, enc_J, &c, 1e-2f) < 1e-3,
           "encoder: dwpe matches finite differences");
    free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe);
}

/* ---- layernorm --------------------------------------------------------------- */
typedef struct {
    int N, C;
    float *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;
static double ln_J(void *p) {
    ln_ctx *c = p;
    o->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_layernorm(void) {
    ln_ctx c = {5, 24, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t NC = (size_t)c.N * c.C;
    c.inp = fnew(NC), c.w = fnew(c.C), c.b = fnew(c.C), c.out = fnew(NC), c.R = fnew(NC);
    c.mean = fnew(c.N), c.rstd = fnew(c.N);
    fill(c.inp, NC, 1, 1);
    fill(c.w, c.C, 2, 1);
    fill(c.b, c.C, 3, 1);
    fill(c.R, NC, 4, 1);
    float *di = fnew(NC), *dw = fnew(c.C), *db = fnew(c.C);
    ln_J(&c);
    o->layernorm_backward(di, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    tap_ok(fd_check("layernorm dinp", c.inp, NC, di, ln_J, &c, 1e-2f) < 2e-3,
           "layernorm: dinp matches finite differences");
    tap_ok(fd_check("layernorm dw", c.w, c.C, dw, ln_J, &c, 1e-2f) < 2e-3, "layernorm: dw matches finite differences");
    tap_ok(fd_check("layernorm db", c.b, c.C, db, ln_J, &c, 1e-2f) < 2e-3, "layernorm: db matches finite differences");
    /* accumulation: a second backward doubles the gradients */
    float *di2 = fnew(NC), *dw2 = fnew(c.C), *db2 = fnew(c.C);
    ln_J(&c);
    o->layernorm_backward(di2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    o->layernorm_backward(di2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    double e = 0;
    for (int i = 0; i < c.C; i++)
        e = fmax(e, fabs(dw2[i] - 2 * dw[i]) + fabs(db2[i] - 2 * db[i]));
    for (size_t i = 0; i < NC; i++)
        e = fmax(e, fabs(di2[i] - 2 * di[i]));
    tap_ok(e < 1e-5, "layernorm: backward accumulates into gradients (err %.2g)", e);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(c.mean), free(c.rstd);
    free(di), free(dw), free(db), free(di2), free(dw2), free(db2);
}

/* ---- matmul ------------------------------------------------------------------ */
typedef struct {
    int N, C, OC;
    float *inp, *w, *bias, *out, *R;
} mm_ctx;
static double mm_J(void *p) {
    mm_ctx *c = p;
    o->matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
static void test_matmul(int N, int C, int OC) {
    mm_ctx c = {N, C, OC, NULL, NULL, NULL, NULL, NULL};
    size_t NCs = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
    c.inp = fnew(NCs), c.w = fnew(OCC), c.bias = fnew(OC), c.out = fnew(NO), c.R = fnew(NO);
    fill(c.inp, NCs, 1, 1);
    fill(c.w, OCC, 2, 1);
    fill(c.bias, OC, 3, 1);
    fill(c.R, NO, 4, 1);
    float *di = fnew(NCs), *dw = fnew(OCC), *db = fnew(OC);
    o->matmul_backward(di, dw, db, c.R, c.inp, c.w, N, C, OC);
    char what[64];
    snprintf(what, sizeof what, "matmul %dx%dx%d", N, C, OC);
    tap_ok(fd_check(what, c.inp, NCs, di, mm_J, &c, 1e-2f) < 1e-3, "%s: dinp matches finite differences", what);
    tap_ok(fd_check(what, c.w, OCC, dw, mm_J, &c, 1e-2f) < 1e-3, "%s: dweight matches finite differences", what);
    tap_ok(fd_check(what, c.bias, OC, db, mm_J, &c, 1e-2f) < 1e-3, "%s: dbias matches finite differences", what);
    /* forward against a naive triple loop in double */
    mm_J(&c);
    double e = 0;
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++) {
            double s = c.bias[oc];
            for (int k = 0; k < C; k++)
                s += (double)c.inp[(size_t)n * C + k] * c.w[(size_t)oc * C + k];
            e = fmax(e, fabs(s - c.out[(size_t)n * OC + oc]));
        }
    tap_ok(e < 1e-4, "%s: forward equals a naive double-precision product (err %.2g)", what, e);
    free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.R), free(di), free(dw), free(db);
}

/* ---- attention ------------------------------------------------------------------ */
typedef struct {
    int B, T, C, NH;
    float *qkv, *out, *att, *R;
} at_ctx;
static double at_J(void *p) {
    at_ctx *c = p;
    o->attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void test_attention(void) {
    at_ctx c = {2, 6, 8, 2, NULL, NULL, NULL, NULL};
    size_t BTC = (size_t)c.B * c.T * c.C;
    c.qkv = fnew(3 * BTC), c.out = fnew(BTC), c.R = fnew(BTC);
    c.att = fnew((size_t)c.B * c.NH * c.T * c.T);
    fill(c.qkv, 3 * BTC, 1, 1);
    fill(c.R, BTC, 2, 1);
    at_J(&c);
    /* causality: row t of att sums to 1 and is zero beyond t */
    double e = 0;
    for (int bh = 0; bh < c.B * c.NH; bh++)
        for (int t = 0; t < c.T; t++) {
            double s = 0;
            for (int t2 = 0; t2 < c.T; t2++) {
                float a = c.att[((size_t)bh * c.T + t) * c.T + t2];
                s += a;
                if (t2 > t)
                    e = fmax(e, fabs(a));
            }
            e = fmax(e, fabs(s - 1.0));
        }
    tap_ok(e < 1e-6, "attention: causal softmax rows sum to 1 with nothing above the diagonal (err %.2g)", e);
    float *dqkv = fnew(3 * BTC);
    o->attention_backward(dqkv, c.R, c.qkv, c.att, c.B, c.T, c.C, c.NH);
    tap_ok(fd_check("attention dqkv", c.qkv, 3 * BTC, dqkv, at_J, &c, 1e-2f) < 2e-3,
           "attention: dqkv matches finite differences");
    /* future tokens do not influence the past: perturb the last position */
    float *out0 = fnew(BTC);
    at_J(&c);
    memcpy(out0, c.out, BTC * sizeof(float));
    for (int k = 0; k < 3 * c.C; k++)
        c.qkv[(size_t)(c.T - 1) * 3 * c.C + k] += 1.0f;
    at_J(&c);
    e = 0;
    for (int t = 0; t < c.T - 1; t++)
        for (int k = 0; k < c.C; k++)
            e = fmax(e, fabs(out0[(size_t)t * c.C + k] - c.out[(size_t)t * c.C + k]));
    tap_ok(e == 0.0, "attention: outputs before position T-1 ignore position T-1");
    free(c.qkv), free(c.out), free(c.att), free(c.R), free(dqkv), free(out0);
}

/* ---- gelu --------------------------------------------------------------------------- */
typedef struct {
    size_t n;
    float *inp, *out, *R;
} ge_ctx;
static double ge_J(void *p) {
    ge_ctx *c = p;
    o->gelu_forward(c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}
static void test_gelu(void) {
    ge_ctx c = {64, NULL, NULL, NULL};
    c.inp = fnew(c.n), c.out = fnew(c.n), c.R = fnew(c.n);
    fill(c.inp, c.n, 1, 2);
    fill(c.R, c.n, 2, 1);
    float *d = fnew(c.n);
    o->gelu_backward(d, c.inp, c.R, c.n);
    tap_ok(fd_check("gelu", c.inp, c.n, d, ge_J, &c, 1e-2f) < 1e-3, "gelu: dinp matches finite differences");
    ge_J(&c);
    double e = 0;
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        e = fmax(e, fabs(ref - c.out[i]));
    }
    tap_ok(e < 1e-6, "gelu: forward is the tanh approximation (err %.2g)", e);
    free(c.inp), free(c.out), free(c.R), free(d);
}

/* ---- residual ---------------------------------------------------------------------- */
typedef struct {
    size_t n;
    float *a, *b, *out, *R;
} rs_ctx;
static double rs_J(void *p) {
    rs_ctx *c = p;
    o->residual_forward(c->out, c->a, c->b, c->n);
    return dot(c->out, c->R, c->n);
}
static void test_residual(void) {
    rs_ctx c = {33, NULL, NULL, NULL, NULL};
    c.a = fnew(c.n), c.b = fnew(c.n), c.out = fnew(c.n), c.R = fnew(c.n);
    fill(c.a, c.n, 1, 1);
    fill(c.b, c.n, 2, 1);
    fill(c.R, c.n, 3, 1);
    /* d(a+b)/da = d(a+b)/db = dout */
    tap_ok(fd_check("residual da", c.a, c.n, c.R, rs_J, &c, 1e-2f) < 1e-3, "residual: da matches finite differences");
    tap_ok(fd_check("residual db", c.b, c.n, c.R, rs_J, &c, 1e-2f) < 1e-3, "residual: db matches finite differences");
    free(c.a), free(c.b), free(c.out), free(c.R);
}

/* ---- cross-entropy ---------------------------------------------------------------- */
typedef struct {
    int N, V, Vp;
    float *logits, *work, *losses, dloss;
    int *targets;
} ce_ctx;
static double ce_J(void *p) {
    ce_ctx *c = p;
    memcpy(c->work, c->logits, (size_t)c->N * c->Vp * sizeof(float));
    o->crossentropy_forward(c->losses, c->work, c->targets, c->N, c->V, c->Vp);
    double s = 0;
    for (int n = 0; n < c->N; n++)
        s += c->losses[n];
    return s * c->dloss;
}
static void test_crossentropy(void) {
    ce_ctx c = {4, 7, 16, NULL, NULL, NULL, 0.7f, NULL};
    size_t NV = (size_t)c.N * c.Vp;
    int targets[] = {0, 6, 3, 6};
    c.targets = targets;
    c.logits = fnew(NV), c.work = fnew(NV), c.losses = fnew(c.N);
    fill(c.logits, NV, 1, 2);
    /* huge padded logits must not leak into the loss */
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++)
            c.logits[(size_t)n * c.Vp + v] = 50.0f;
    double J0 = ce_J(&c);
    double ref = 0;
    for (int n = 0; n < c.N; n++) {
        double mx = -1e30, s = 0;
        for (int v = 0; v < c.V; v++)
            mx = fmax(mx, c.logits[(size_t)n * c.Vp + v]);
        for (int v = 0; v < c.V; v++)
            s += exp(c.logits[(size_t)n * c.Vp + v] - mx);
        ref += log(s) + mx - c.logits[(size_t)n * c.Vp + targets[n]];
    }
    tap_ok(fabs(J0 - ref * c.dloss) < 1e-5, "crossentropy: loss equals log-sum-exp over the real vocabulary only");
    o->crossentropy_backward(c.work, c.targets, c.dloss, c.N, c.V, c.Vp);
    float *grad = fnew(NV);
    memcpy(grad, c.work, NV * sizeof(float));
    double pad = 0;
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++)
            pad = fmax(pad, fabs(grad[(size_t)n * c.Vp + v]));
    tap_ok(pad == 0.0, "crossentropy: padded logits get zero gradient");
    tap_ok(fd_check("crossentropy dlogits", c.logits, NV, grad, ce_J, &c, 1e-2f) < 1e-3,
           "crossentropy: dlogits matches finite differences");
    free(c.logits), free(c.work), free(c.losses), free(grad);
}

/* GEMM splitting: 1 thread and 2 threads give the same matmul to rounding */
static void test_thread_split(void) {
    int N = 96, C = 40, OC = 72;
    float *inp = fnew((size_t)N * C), *w = fnew((size_t)OC * C), *b = fnew(OC);
    float *o1 = fnew((size_t)N * OC), *o2 = fnew((size_t)N * OC);
    fill(inp, (size_t)N * C, 1, 1), fill(w, (size_t)OC * C, 2, 1), fill(b, OC, 3, 1);
    sr_ops_set_threads(1);
    o->matmul_forward(o1, inp, w, b, N, C, OC);
    sr_ops_set_threads(2);
    o->matmul_forward(o2, inp, w, b, N, C, OC);
    double e = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++)
        e = fmax(e, fabs(o1[i] - o2[i]));
    tap_ok(e < 1e-4, "matmul: 1 and 2 threads agree (max diff %.2g)", e);
    free(inp), free(w), free(b), free(o1), free(o2);
}

int main(void) {
    sr_ops_set_threads(2);
    test_encoder();
    test_layernorm();
    test_matmul(5, 7, 6);
    test_matmul(40, 9, 33); /* more rows than one 16-row block: split across threads */
    test_attention();
    test_gelu();
    test_residual();
    test_crossentropy();
    test_thread_split();
    return tap_done();
}
