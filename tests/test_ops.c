/* test_ops.c — the back-end op test (after ggml's test-backend-ops).
 *
 * Part 1, the CPU ops against mathematics: for each op, J = sum(out * R)
 * for a fixed random R, evaluated in double; every coordinate of every
 * differentiable input is perturbed by +-h and the central difference is
 * compared with the op's backward (called with dout = R, into zeroed
 * gradients).  Also: backward accumulates (+=), GEMM splitting across
 * threads does not change results, the classifier's contract.
 *
 * Part 2, every available table against the CPU table: every op and every
 * device-table primitive (device.h) runs on each back end (cpu, fake; the
 * cuda f32 and bf16 tables in a CUDA build with a GPU or in an emulator
 * tree), inputs uploaded into that table's memory and outputs downloaded,
 * and is compared with the CPU table's result under a per-op tolerance
 * (a bf16 table: on the same bf16-rounded inputs, bf16 tolerances).
 *
 * Part 3, the CPU table's primitives against independent references
 * (sums in double, a table of bf16 round-to-nearest-even cases, the
 * previous release's AdamW step), so the test can fail with one table; and
 * a deliberately perturbed table must be reported failing. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SR_HAVE_CUDA
#include "cuda_backend.h"
#endif
#include "device.h"
#include "dtype.h"
#include "fdcheck.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"
#include "tap.h"

static const sr_ops *o = &sr_ops_cpu;

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
    /* dwpe's overwrite form (gbeta 0) into NaN; dwte always adds */
    float *dwte = fnew((size_t)c.V * c.C), *dwpe = fnan((size_t)c.T * c.C);
    o->encoder_backward(dwte, dwpe, c.R, c.inp, c.B, c.T, c.C, 0.0f);
    tap_ok(fd_check("encoder dwte", c.wte, (size_t)c.V * c.C, dwte, enc_J, &c, 1e-2f) < 1e-3,
           "encoder: dwte matches finite differences");
    tap_ok(fd_check("encoder dwpe", c.wpe, (size_t)c.T * c.C, dwpe, enc_J, &c, 1e-2f) < 1e-3,
           "encoder: dwpe (gbeta 0, written into NaN) matches finite differences");
    /* the += form (gbeta 1) adds onto what both held */
    size_t VC = (size_t)c.V * c.C, TC = (size_t)c.T * c.C;
    float *dwte1, *prte = fprior(VC, 6, &dwte1), *dwpe1, *prpe = fprior(TC, 7, &dwpe1);
    o->encoder_backward(dwte1, dwpe1, c.R, c.inp, c.B, c.T, c.C, 1.0f);
    tap_ok(fd_check("encoder dwte", c.wte, VC, fminus(dwte1, prte, VC), enc_J, &c, 1e-2f) < 1e-3 &&
               fd_check("encoder dwpe", c.wpe, TC, fminus(dwpe1, prpe, TC), enc_J, &c, 1e-2f) < 1e-3,
           "encoder: the += form (gbeta 1) adds what finite differences say to dwte and dwpe");
    free(dwte1), free(prte), free(dwpe1), free(prpe);
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
/* J of the norm's input x0 + bias (the bias broadcast over rows) */
typedef struct {
    ln_ctx *c;
    const float *x0;
    float *bias;
} lnb_ctx;
static double lnb_J(void *p) {
    lnb_ctx *b = p;
    for (int r = 0; r < b->c->N; r++)
        for (int j = 0; j < b->c->C; j++)
            b->c->inp[(size_t)r * b->c->C + j] = b->x0[(size_t)r * b->c->C + j] + b->bias[j];
    return ln_J(b->c);
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
    /* the overwrite forms (beta, gbeta 0) into NaN: nothing of them read */
    float *di = fnan(NC), *dw = fnan(c.C), *db = fnan(c.C);
    ln_J(&c);
    o->layernorm_backward(di, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 0.0f, 0.0f, NULL, NULL, 0.0f);
    tap_ok(fd_check("layernorm dinp", c.inp, NC, di, ln_J, &c, 1e-2f) < 2e-3,
           "layernorm: dinp (beta 0, written into NaN) matches finite differences");
    tap_ok(fd_check("layernorm dw", c.w, c.C, dw, ln_J, &c, 1e-2f) < 2e-3,
           "layernorm: dw (gbeta 0, written into NaN) matches finite differences");
    tap_ok(fd_check("layernorm db", c.b, c.C, db, ln_J, &c, 1e-2f) < 2e-3,
           "layernorm: db (gbeta 0, written into NaN) matches finite differences");
    /* the += forms: onto prior values, what finite differences say */
    float *dip, *pri = fprior(NC, 5, &dip), *dwp, *prw = fprior((size_t)c.C, 6, &dwp), *dbp,
                *prb = fprior((size_t)c.C, 7, &dbp);
    ln_J(&c);
    o->layernorm_backward(dip, dwp, dbp, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 1.0f, 1.0f, NULL, NULL, 0.0f);
    tap_ok(fd_check("layernorm dinp", c.inp, NC, fminus(dip, pri, NC), ln_J, &c, 1e-2f) < 2e-3 &&
               fd_check("layernorm dw", c.w, c.C, fminus(dwp, prw, (size_t)c.C), ln_J, &c, 1e-2f) < 2e-3 &&
               fd_check("layernorm db", c.b, c.C, fminus(dbp, prb, (size_t)c.C), ln_J, &c, 1e-2f) < 2e-3,
           "layernorm: the += forms (beta, gbeta 1) add what finite differences say");
    free(dip), free(pri), free(dwp), free(prw), free(dbp), free(prb);
    /* accumulation: a second backward doubles the gradients */
    float *di2 = fnew(NC), *dw2 = fnew(c.C), *db2 = fnew(c.C);
    ln_J(&c);
    o->layernorm_backward(di2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 1.0f, 1.0f, NULL, NULL, 0.0f);
    o->layernorm_backward(di2, dw2, db2, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 1.0f, 1.0f, NULL, NULL, 0.0f);
    double e = 0;
    for (int i = 0; i < c.C; i++)
        e = fmax(e, fabs(dw2[i] - 2 * dw[i]) + fabs(db2[i] - 2 * db[i]));
    for (size_t i = 0; i < NC; i++)
        e = fmax(e, fabs(di2[i] - 2 * di[i]));
    tap_ok(e < 1e-5, "layernorm: backward accumulates into gradients (err %.2g)", e);
    /* dsum: the gradient of a bias added to the norm's input (the layer
     * before it in the residual stream), by finite differences of that
     * bias, written into NaN (sbeta 0); added (sbeta 1) it is exactly the
     * column sums of the input gradient the op leaves (beta 1: the prior
     * included), rows in order */
    {
        float *bias = fnew(c.C), *x0 = fnew(NC), *ds = fnan(c.C), *dd = fnan(NC), *dwx = fnan(c.C), *dbx = fnan(c.C);
        memcpy(x0, c.inp, NC * 4);
        ln_J(&c);
        float *si0 = fnan(c.C);
        o->layernorm_backward(dd, dwx, dbx, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 0.0f, 0.0f, si0, ds, 0.0f);
        lnb_ctx bc = {&c, x0, bias};
        tap_ok(fd_check("layernorm sum_out", bias, (size_t)c.C, ds, lnb_J, &bc, 1e-2f) < 2e-3,
               "layernorm: sum_out (sbeta 0, into NaN) is the gradient of a bias on its input (finite differences)");
        bool zero = true;
        for (int j = 0; j < c.C; j++)
            zero = zero && si0[j] == 0.0f;
        tap_ok(zero, "layernorm: sum_in with beta 0 reads no dinp: zeros (sbeta 0, into NaN)");
        memcpy(c.inp, x0, NC * 4);
        float *ddp, *prd = fprior(NC, 8, &ddp), *dsp, *prs = fprior((size_t)c.C, 9, &dsp), *dip,
                    *pri = fprior((size_t)c.C, 10, &dip);
        float *came = fnew(NC);
        memcpy(came, ddp, NC * 4);
        ln_J(&c);
        o->layernorm_backward(ddp, dwx, dbx, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C, 1.0f, 1.0f, dip, dsp, 1.0f);
        bool exact = true;
        for (int j = 0; j < c.C; j++) {
            float out = prs[j], in = pri[j]; /* (the CPU's order: onto the prior, row by row) */
            for (int r = 0; r < c.N; r++) {
                out += ddp[(size_t)r * c.C + j];
                in += came[(size_t)r * c.C + j];
            }
            exact = exact && dsp[j] == out && dip[j] == in;
        }
        tap_ok(exact, "layernorm: the += forms (sbeta 1) add the column sums of dinp as it came in (sum_in) and as "
                      "left (sum_out, beta 1), rows in order");
        free(bias), free(x0), free(ds), free(dd), free(dwx), free(dbx), free(ddp), free(prd), free(dsp), free(prs);
        free(si0), free(dip), free(pri), free(came);
    }
    /* the residual form: bitwise residual_forward then layernorm_forward */
    {
        float *a = fnew(NC), *res = fnan(NC), *y2 = fnan(NC), *m2 = fnan(c.N), *r2 = fnan(c.N), *res1 = fnew(NC);
        fill(a, NC, 11, 1);
        o->residual_forward(res1, a, c.inp, NC);
        o->layernorm_forward(c.out, c.mean, c.rstd, res1, c.w, c.b, c.N, c.C);
        o->residual_layernorm_forward(res, y2, m2, r2, a, c.inp, c.w, c.b, c.N, c.C);
        tap_ok(memcmp(res, res1, NC * 4) == 0 && memcmp(y2, c.out, NC * 4) == 0 && memcmp(m2, c.mean, c.N * 4) == 0 &&
                   memcmp(r2, c.rstd, c.N * 4) == 0,
               "layernorm: residual_layernorm_forward is bitwise residual_forward then layernorm_forward");
        o->residual_layernorm_forward(a, y2, m2, r2, a, c.inp, c.w, c.b, c.N, c.C);
        tap_ok(memcmp(a, res1, NC * 4) == 0 && memcmp(y2, c.out, NC * 4) == 0,
               "layernorm: ... and in place (res the same buffer as a)");
        free(a), free(res), free(y2), free(m2), free(r2), free(res1);
    }
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
    /* the overwrite forms (beta, gbeta 0) into NaN: nothing of them read */
    float *di = fnan(NCs), *dw = fnan(OCC), *db = fnan(OC);
    o->matmul_backward(di, dw, db, c.R, c.inp, c.w, N, C, OC, 0.0f, 0.0f);
    char what[64];
    snprintf(what, sizeof what, "matmul %dx%dx%d", N, C, OC);
    tap_ok(fd_check(what, c.inp, NCs, di, mm_J, &c, 1e-2f) < 1e-3,
           "%s: dinp (beta 0, written into NaN) matches finite differences", what);
    /* the += forms (beta, gbeta 1) add the same onto what the buffers held */
    float *di1, *pr = fprior(NCs, 5, &di1), *dw1, *prw = fprior(OCC, 6, &dw1), *db1, *prb = fprior(OC, 7, &db1);
    o->matmul_backward(di1, dw1, db1, c.R, c.inp, c.w, N, C, OC, 1.0f, 1.0f);
    tap_ok(fd_check(what, c.inp, NCs, fminus(di1, pr, NCs), mm_J, &c, 1e-2f) < 1e-3,
           "%s: dinp's += form (beta 1) adds what finite differences say", what);
    tap_ok(fd_check(what, c.w, OCC, fminus(dw1, prw, OCC), mm_J, &c, 1e-2f) < 1e-3 &&
               fd_check(what, c.bias, OC, fminus(db1, prb, OC), mm_J, &c, 1e-2f) < 1e-3,
           "%s: dweight's and dbias's += form (gbeta 1) adds what finite differences say", what);
    free(di1), free(pr), free(dw1), free(prw), free(db1), free(prb);
    tap_ok(fd_check(what, c.w, OCC, dw, mm_J, &c, 1e-2f) < 1e-3,
           "%s: dweight (gbeta 0, written into NaN) matches finite differences", what);
    tap_ok(fd_check(what, c.bias, OC, db, mm_J, &c, 1e-2f) < 1e-3,
           "%s: dbias (gbeta 0, written into NaN) matches finite differences", what);
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
    o->attention_backward(dqkv, c.R, NULL, c.qkv, c.att, c.B, c.T, c.C, c.NH, NULL, 0.0f);
    tap_ok(fd_check("attention dqkv", c.qkv, 3 * BTC, dqkv, at_J, &c, 1e-2f) < 2e-3,
           "attention: dqkv matches finite differences");
    {
        /* dbias: the column sums of dqkv as left (the qkv projection's bias
         * gradient: a bias on qkv moves every row), rows in order onto the
         * prior (gbeta 1) or from zero into NaN (gbeta 0) */
        float *d2 = fnew(3 * BTC), *bias = fnan(3 * (size_t)c.C), *bias1 = fnew(3 * (size_t)c.C);
        fill(bias1, 3 * (size_t)c.C, 12, 1);
        float *prior = fnew(3 * (size_t)c.C);
        memcpy(prior, bias1, 3 * (size_t)c.C * 4);
        o->attention_backward(d2, c.R, NULL, c.qkv, c.att, c.B, c.T, c.C, c.NH, bias, 0.0f);
        o->attention_backward(d2, c.R, NULL, c.qkv, c.att, c.B, c.T, c.C, c.NH, bias1, 1.0f);
        bool exact = true;
        for (int j = 0; j < 3 * c.C; j++) {
            float s0 = 0.0f, s1 = prior[j];
            for (int r = 0; r < c.B * c.T; r++) {
                s0 += dqkv[(size_t)r * 3 * c.C + j];
                s1 += d2[(size_t)r * 3 * c.C + j];
            }
            exact = exact && bias[j] == s0 && bias1[j] == s1;
        }
        tap_ok(exact, "attention: dbias is the column sums of dqkv as left, written (gbeta 0) or added (gbeta 1)");
        free(d2), free(bias), free(bias1), free(prior);
    }
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
typedef struct {
    ge_ctx *c;
    const float *x0;
    float *bias;
    int OC;
} geb_ctx;
static double geb_J(void *p) {
    geb_ctx *b = p;
    for (size_t i = 0; i < b->c->n; i++)
        b->c->inp[i] = b->x0[i] + b->bias[i % (size_t)b->OC];
    return ge_J(b->c);
}
static void test_gelu(void) {
    ge_ctx c = {64, NULL, NULL, NULL};
    c.inp = fnew(c.n), c.out = fnew(c.n), c.R = fnew(c.n);
    fill(c.inp, c.n, 1, 2);
    fill(c.R, c.n, 2, 1);
    float *d = fnan(c.n);
    o->gelu_backward(d, c.inp, c.R, c.n, 0.0f, NULL, 0, 0.0f);
    tap_ok(fd_check("gelu", c.inp, c.n, d, ge_J, &c, 1e-2f) < 1e-3,
           "gelu: dinp (beta 0, written into NaN) matches finite differences");
    float *d1, *pr = fprior(c.n, 5, &d1);
    o->gelu_backward(d1, c.inp, c.R, c.n, 1.0f, NULL, 0, 0.0f);
    tap_ok(fd_check("gelu +=", c.inp, c.n, fminus(d1, pr, c.n), ge_J, &c, 1e-2f) < 1e-3,
           "gelu: the += form (beta 1) adds what finite differences say");
    free(d1), free(pr);
    ge_J(&c);
    double e = 0;
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        double ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        e = fmax(e, fabs(ref - c.out[i]));
    }
    tap_ok(e < 1e-6, "gelu: forward is the tanh approximation (err %.2g)", e);
    /* dbias: the gradient of a bias on GELU's input (rows of OC 16: the
     * projection before it), by finite differences; gbeta 1 adds the
     * column sums of dinp as left, bitwise */
    {
        const int OC = 16, rows = (int)(c.n / OC);
        float *bias = fnew(OC), *x0 = fnew(c.n), *db = fnan(OC), *dd = fnan(c.n);
        memcpy(x0, c.inp, c.n * 4);
        o->gelu_backward(dd, c.inp, c.R, c.n, 0.0f, db, OC, 0.0f);
        geb_ctx bc = {&c, x0, bias, OC};
        tap_ok(fd_check("gelu dbias", bias, OC, db, geb_J, &bc, 1e-2f) < 1e-3,
               "gelu: dbias (gbeta 0, into NaN) is the gradient of a bias on its input (finite differences)");
        memcpy(c.inp, x0, c.n * 4);
        float *ddp, *prd = fprior(c.n, 8, &ddp), *dbp, *prb = fprior(OC, 9, &dbp);
        o->gelu_backward(ddp, c.inp, c.R, c.n, 1.0f, dbp, OC, 1.0f);
        bool exact = true;
        for (int j = 0; j < OC; j++) {
            float sum = prb[j]; /* (the CPU's order: onto the prior, row by row) */
            for (int r = 0; r < rows; r++)
                sum += ddp[(size_t)r * OC + j];
            exact = exact && dbp[j] == sum;
        }
        tap_ok(exact, "gelu: dbias's += form (gbeta 1) adds the column sums of dinp as left (beta 1), rows in order");
        free(bias), free(x0), free(db), free(dd), free(ddp), free(prd), free(dbp), free(prb);
    }
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
    float *logits, *losses, *lse, dloss;
    int *targets;
} ce_ctx;
static double ce_J(void *p) {
    ce_ctx *c = p;
    o->crossentropy_forward(c->losses, c->lse, c->logits, c->targets, c->N, c->V, c->Vp);
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
    c.logits = fnew(NV), c.losses = fnew(c.N), c.lse = fnew(c.N);
    fill(c.logits, NV, 1, 2);
    /* huge padded logits must not leak into the loss */
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++)
            c.logits[(size_t)n * c.Vp + v] = 50.0f;
    float *keep = fnew(NV);
    memcpy(keep, c.logits, NV * sizeof(float));
    double J0 = ce_J(&c);
    tap_ok(memcmp(keep, c.logits, NV * sizeof(float)) == 0, "crossentropy: the forward leaves the logits intact");
    double ref = 0, lse_err = 0;
    for (int n = 0; n < c.N; n++) {
        double mx = -1e30, s = 0;
        for (int v = 0; v < c.V; v++)
            mx = fmax(mx, c.logits[(size_t)n * c.Vp + v]);
        for (int v = 0; v < c.V; v++)
            s += exp(c.logits[(size_t)n * c.Vp + v] - mx);
        ref += log(s) + mx - c.logits[(size_t)n * c.Vp + targets[n]];
        lse_err = fmax(lse_err, fabs(log(s) + mx - c.lse[n]) / fabs(log(s) + mx));
    }
    tap_ok(fabs(J0 - ref * c.dloss) < 1e-5, "crossentropy: loss equals log-sum-exp over the real vocabulary only");
    tap_ok(lse_err < 1e-6, "crossentropy: the saved per-row log-sum-exp is the real vocabulary's (rel err %.2g)",
           lse_err);
    float *grad = fnew(NV);
    memcpy(grad, c.logits, NV * sizeof(float));
    o->crossentropy_backward(grad, c.lse, c.targets, c.dloss, c.N, c.V, c.Vp);
    double pad = 0;
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++)
            pad = fmax(pad, fabs(grad[(size_t)n * c.Vp + v]));
    tap_ok(pad == 0.0, "crossentropy: padded logits get zero gradient");
    tap_ok(fd_check("crossentropy dlogits", c.logits, NV, grad, ce_J, &c, 1e-2f) < 1e-3,
           "crossentropy: dlogits (logits turned into dlogits in place) match finite differences");
    /* the fused form (the training forward's): the two ops' losses, lse
     * and dlogits, bitwise, in one pass (so finite differences hold too) */
    ce_J(&c); /* (the losses and lse of the unperturbed logits again) */
    float *fg = fnew(NV), *fl = fnan((size_t)c.N), *fs = fnan((size_t)c.N);
    memcpy(fg, c.logits, NV * sizeof(float));
    o->crossentropy_fused(fl, fs, fg, c.targets, c.dloss, c.N, c.V, c.Vp);
    tap_ok(memcmp(fl, c.losses, (size_t)c.N * sizeof(float)) == 0 &&
               memcmp(fs, c.lse, (size_t)c.N * sizeof(float)) == 0 && memcmp(fg, grad, NV * sizeof(float)) == 0,
           "crossentropy_fused: the losses, lse and dlogits of forward then backward, bitwise");
    free(fg), free(fl), free(fs);
    /* p -> 1: a row whose target dominates.  The gradient at the target,
     * (p - 1) * dloss, must keep its precision (it is ~1e-6, far below the
     * spacing of probabilities stored in bf16 near 1) */
    float row[16] = {0};
    for (int v = 0; v < 7; v++)
        row[v] = v == 2 ? 14.0f : 0.0f;
    float l1, lse1;
    int t2 = 2;
    o->crossentropy_forward(&l1, &lse1, row, &t2, 1, 7, 16);
    o->crossentropy_backward(row, &lse1, &t2, 1.0f, 1, 7, 16);
    double p_other = exp(-14.0) / (1.0 + 6.0 * exp(-14.0)), want = -6.0 * p_other;
    tap_ok(fabs(row[2] - want) < 1e-3 * fabs(want),
           "crossentropy: p - 1 at p = 1 - %.2g keeps its precision (%.4g vs %.4g)", -want, row[2], want);
    free(c.logits), free(c.losses), free(c.lse), free(grad), free(keep);
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

/* One row (a one-token forward) splits the output columns, 64 at a time:
 * with 3 threads the work lands on more than one of them, and 1, 2 and 3
 * threads give bitwise the same row (each column is one fixed dot
 * product). */
static int omp_threads_used(void) {
    int used = 0;
#pragma omp parallel reduction(+ : used)
    used += 1;
    return used;
}
static void test_one_row(void) {
    int C = 200, OC = 300;
    float *inp = fnew(C), *w = fnew((size_t)OC * C), *b = fnew(OC), *out[3];
    fill(inp, C, 5, 1), fill(w, (size_t)OC * C, 6, 1), fill(b, OC, 7, 1);
    for (int t = 0; t < 3; t++) {
        out[t] = fnew(OC);
        sr_ops_set_threads(t + 1);
        o->matmul_forward(out[t], inp, w, b, 1, C, OC);
    }
    tap_ok(omp_threads_used() == 3, "one-row matmul: the team has 3 threads (%d)", omp_threads_used());
    tap_ok(memcmp(out[0], out[1], sizeof(float) * OC) == 0 && memcmp(out[0], out[2], sizeof(float) * OC) == 0,
           "one-row matmul: 1, 2 and 3 threads give bitwise the same row");
    float *nob = fnew(OC);
    o->matmul_forward(nob, inp, w, NULL, 1, C, OC);
    double e = 0, en = 0;
    for (int oc = 0; oc < OC; oc++) {
        double s = 0;
        for (int k = 0; k < C; k++)
            s += (double)inp[k] * w[(size_t)oc * C + k];
        e = fmax(e, fabs(s + b[oc] - out[2][oc]));
        en = fmax(en, fabs(s - nob[oc]));
    }
    tap_ok(e < 1e-4 && en < 1e-4,
           "one-row matmul equals a naive double-precision product, with and without bias "
           "(err %.2g, %.2g)",
           e, en);
    sr_ops_set_threads(2);
    free(inp), free(w), free(b), free(nob);
    for (int t = 0; t < 3; t++)
        free(out[t]);
}

/* ==== part 2: back ends against the CPU table ================================ */

typedef struct {
    const char *name;
    const sr_ops *ops;
    sr_dev *dev;
} backend;

static backend cpu_backend;

/* Whether the case inputs are rounded to bf16 (a bf16 table is compared
 * with the CPU op on the same bf16-rounded inputs: doc/ARCHITECTURE.md's
 * tolerances). */
static bool bf16_inputs;

static float *hrand(size_t n, uint64_t stream, float scale) {
    float *x = fnew(n);
    fill(x, n, stream, scale);
    if (bf16_inputs)
        for (size_t i = 0; i < n; i++)
            x[i] = sr_bf16_to_f32(sr_f32_to_bf16(x[i]));
    return x;
}

/* Table memory holding n elements of dt from the host floats h (cast to
 * bf16 when dt is bf16); NULL h leaves it as allocated (poisoned under
 * SHARDRUN_TEST_POISON). */
static void *up(const backend *b, const float *h, size_t n, sr_dtype dt) {
    sr_dev *d = b->dev;
    void *p = d->alloc(d, d->state_space, SR_MEM_OTHER, n * sr_dtype_size(dt));
    if (!p || !h)
        return p;
    if (dt == SR_DT_F32) {
        sr_dev_upload(d, p, h, n * sizeof(float), "upload");
    } else {
        float *tmp = d->alloc(d, d->state_space, SR_MEM_OTHER, n * sizeof(float));
        sr_dev_upload(d, tmp, h, n * sizeof(float), "upload");
        d->cast_f32_bf16(d, SR_STREAM_COMPUTE, p, tmp, n);
        d->free(d, tmp);
    }
    return p;
}
static void *up_act(const backend *b, const float *h, size_t n) { return up(b, h, n, b->ops->act); }
static float *up_f32(const backend *b, const float *h, size_t n) { return up(b, h, n, SR_DT_F32); }
static float *zeros_f32(const backend *b, size_t n) {
    float *p = up_f32(b, NULL, n);
    b->dev->memset(b->dev, SR_STREAM_COMPUTE, p, 0, n * sizeof(float));
    return p;
}
static void *zeros_act(const backend *b, size_t n) {
    void *p = up_act(b, NULL, n);
    b->dev->memset(b->dev, SR_STREAM_COMPUTE, p, 0, n * sr_dtype_size(b->ops->act));
    return p;
}

/* Host floats of n elements of dt at table memory p; frees p.  The d2h
 * stream first waits for everything issued on compute (the op). */
static float *down(const backend *b, void *p, size_t n, sr_dtype dt) {
    sr_dev *d = b->dev;
    float *h = fnew(n);
    sr_event computed = {0};
    d->record(d, &computed, SR_STREAM_COMPUTE);
    if (dt == SR_DT_F32) {
        d->wait(d, SR_STREAM_D2H, &computed);
        sr_dev_download(d, h, p, n * sizeof(float), "download");
    } else {
        float *tmp = d->alloc(d, d->state_space, SR_MEM_OTHER, n * sizeof(float));
        d->fold_bf16(d, SR_STREAM_COMPUTE, tmp, p, n, false);
        d->record(d, &computed, SR_STREAM_COMPUTE);
        d->wait(d, SR_STREAM_D2H, &computed);
        sr_dev_download(d, h, tmp, n * sizeof(float), "download");
        d->free(d, tmp);
    }
    d->free(d, p);
    return h;
}
static float *down_act(const backend *b, void *p, size_t n) { return down(b, p, n, b->ops->act); }
static float *down_f32(const backend *b, void *p, size_t n) { return down(b, p, n, SR_DT_F32); }

#define MAX_OUT 6
/* One case: runs an op (or primitive) on back end b from fixed inputs and
 * returns its outputs as host floats (out[k] of n[k] elements); returns
 * how many. */
typedef int (*case_fn)(const backend *b, float **out, size_t *n);

/* Shapes of the cases: small, but with more rows than one thread block. */
enum { CB = 2, CT = 16, CC = 32, CNH = 4, CV = 50, CVP = 64, CN = CB * CT };

static int case_encoder(const backend *b, float **out, size_t *n) {
    int inp[CN];
    for (int i = 0; i < CN; i++)
        inp[i] = (int)(sr_rng_u64(9, 1, (uint64_t)i) % CV);
    float *wte = hrand((size_t)CVP * CC, 1, 1), *wpe = hrand((size_t)CT * CC, 2, 1), *R = hrand((size_t)CN * CC, 3, 1);
    int *dinp = up(b, NULL, CN, SR_DT_F32); /* ints: 4 bytes each */
    sr_dev_upload(b->dev, dinp, inp, sizeof inp, "upload");
    void *dwte = up_act(b, wte, (size_t)CVP * CC), *dwpe = up_act(b, wpe, (size_t)CT * CC);
    void *o1 = up_act(b, NULL, (size_t)CN * CC), *dR = up_act(b, R, (size_t)CN * CC);
    float *gwte = zeros_f32(b, (size_t)CVP * CC), *gwpe = zeros_f32(b, (size_t)CT * CC);
    b->ops->encoder_forward(o1, dinp, dwte, dwpe, CB, CT, CC);
    b->ops->encoder_backward(gwte, gwpe, dR, dinp, CB, CT, CC, 1.0f);
    out[0] = down_act(b, o1, (size_t)CN * CC), n[0] = (size_t)CN * CC;
    out[1] = down_f32(b, gwte, (size_t)CVP * CC), n[1] = (size_t)CVP * CC;
    out[2] = down_f32(b, gwpe, (size_t)CT * CC), n[2] = (size_t)CT * CC;
    b->dev->free(b->dev, dinp), b->dev->free(b->dev, dwte), b->dev->free(b->dev, dwpe), b->dev->free(b->dev, dR);
    free(wte), free(wpe), free(R);
    return 3;
}

static int case_layernorm(const backend *b, float **out, size_t *n) {
    size_t NC = (size_t)CN * CC;
    float *x = hrand(NC, 1, 2), *w = hrand(CC, 2, 1), *bb = hrand(CC, 3, 1), *R = hrand(NC, 4, 1);
    void *dx = up_act(b, x, NC), *dw = up_act(b, w, CC), *db = up_act(b, bb, CC), *dR = up_act(b, R, NC);
    void *y = up_act(b, NULL, NC), *dxg = zeros_act(b, NC);
    float *mean = up_f32(b, NULL, CN), *rstd = up_f32(b, NULL, CN), *gw = zeros_f32(b, CC), *gb = zeros_f32(b, CC);
    float *gs = zeros_f32(b, CC);
    void *res = up_act(b, NULL, NC);
    /* the residual form's output: the norm of x + R; the input gradient's
     * column sums as it came in (dxg starts as x) and as left */
    b->dev->copy(b->dev, SR_STREAM_COMPUTE, dxg, dx, NC * sr_dtype_size(b->ops->act));
    b->ops->residual_layernorm_forward(res, y, mean, rstd, dx, dR, dw, db, CN, CC);
    float *gi = zeros_f32(b, CC);
    b->ops->layernorm_backward(dxg, gw, gb, dR, res, dw, mean, rstd, CN, CC, 1.0f, 1.0f, gi, gs, 1.0f);
    out[0] = down_act(b, y, NC), n[0] = NC;
    out[1] = down_act(b, dxg, NC), n[1] = NC;
    out[2] = down_f32(b, gw, CC), n[2] = CC;
    out[3] = down_f32(b, gb, CC), n[3] = CC;
    out[4] = down_f32(b, gs, CC), n[4] = CC;
    out[5] = down_f32(b, gi, CC), n[5] = CC;
    b->dev->free(b->dev, dx), b->dev->free(b->dev, dw), b->dev->free(b->dev, db), b->dev->free(b->dev, dR);
    b->dev->free(b->dev, mean), b->dev->free(b->dev, rstd), b->dev->free(b->dev, res);
    free(x), free(w), free(bb), free(R);
    return 6;
}

static int case_matmul(const backend *b, float **out, size_t *n) {
    const int N = CN, C = CC, OC = 3 * CC;
    float *x = hrand((size_t)N * C, 1, 1), *w = hrand((size_t)OC * C, 2, 1), *bias = hrand(OC, 3, 1);
    float *R = hrand((size_t)N * OC, 4, 1);
    void *dx = up_act(b, x, (size_t)N * C), *dw = up_act(b, w, (size_t)OC * C), *dbias = up_act(b, bias, OC);
    void *dR = up_act(b, R, (size_t)N * OC), *y = up_act(b, NULL, (size_t)N * OC), *gx = zeros_act(b, (size_t)N * C);
    float *gw = zeros_f32(b, (size_t)OC * C), *gb = zeros_f32(b, OC);
    b->ops->matmul_forward(y, dx, dw, dbias, N, C, OC);
    b->ops->matmul_backward(gx, gw, gb, dR, dx, dw, N, C, OC, 1.0f, 1.0f);
    out[0] = down_act(b, y, (size_t)N * OC), n[0] = (size_t)N * OC;
    out[1] = down_act(b, gx, (size_t)N * C), n[1] = (size_t)N * C;
    out[2] = down_f32(b, gw, (size_t)OC * C), n[2] = (size_t)OC * C;
    out[3] = down_f32(b, gb, OC), n[3] = OC;
    b->dev->free(b->dev, dx), b->dev->free(b->dev, dw), b->dev->free(b->dev, dbias), b->dev->free(b->dev, dR);
    free(x), free(w), free(bias), free(R);
    return 4;
}

static int case_attention(const backend *b, float **out, size_t *n) {
    size_t BTC = (size_t)CN * CC;
    float *qkv = hrand(3 * BTC, 1, 1), *R = hrand(BTC, 2, 1);
    void *dq = up_act(b, qkv, 3 * BTC), *dR = up_act(b, R, BTC), *y = up_act(b, NULL, BTC);
    void *att = b->dev->alloc(b->dev, b->dev->state_space, SR_MEM_OTHER, b->ops->attention_save_bytes(CB, CT, CNH));
    void *g = zeros_act(b, 3 * BTC);
    b->ops->attention_forward(y, att, dq, CB, CT, CC, CNH);
    b->ops->attention_backward(g, dR, NULL, dq, att, CB, CT, CC, CNH, NULL, 0.0f);
    out[0] = down_act(b, y, BTC), n[0] = BTC;
    out[1] = down_act(b, g, 3 * BTC), n[1] = 3 * BTC;
    b->dev->free(b->dev, dq), b->dev->free(b->dev, dR), b->dev->free(b->dev, att);
    free(qkv), free(R);
    return 2;
}

static int case_gelu_residual(const backend *b, float **out, size_t *n) {
    size_t N = (size_t)CN * CC;
    float *x = hrand(N, 1, 2), *R = hrand(N, 2, 1);
    void *dx = up_act(b, x, N), *dR = up_act(b, R, N), *y = up_act(b, NULL, N), *g = zeros_act(b, N);
    void *r = up_act(b, NULL, N);
    b->ops->gelu_forward(y, dx, N);
    float *gbias = zeros_f32(b, CC);
    b->ops->gelu_backward(g, dx, dR, N, 1.0f, gbias, CC, 1.0f);
    b->ops->residual_forward(r, dx, dR, N);
    out[0] = down_act(b, y, N), n[0] = N;
    out[1] = down_act(b, g, N), n[1] = N;
    out[2] = down_act(b, r, N), n[2] = N;
    out[3] = down_f32(b, gbias, CC), n[3] = CC;
    b->dev->free(b->dev, dx), b->dev->free(b->dev, dR);
    free(x), free(R);
    return 4;
}

static int case_crossentropy(const backend *b, float **out, size_t *n) {
    size_t NV = (size_t)CN * CVP;
    int tg[CN];
    for (int i = 0; i < CN; i++)
        tg[i] = (int)(sr_rng_u64(9, 2, (uint64_t)i) % CV);
    float *l = hrand(NV, 1, 3);
    int *dtg = up(b, NULL, CN, SR_DT_F32);
    sr_dev_upload(b->dev, dtg, tg, sizeof tg, "upload");
    void *dl = up_act(b, l, NV);
    float *loss = up_f32(b, NULL, CN), *lse = up_f32(b, NULL, CN);
    b->ops->crossentropy_forward(loss, lse, dl, dtg, CN, CV, CVP);
    b->ops->crossentropy_backward(dl, lse, dtg, 1.0f / CN, CN, CV, CVP);
    out[0] = down_f32(b, loss, CN), n[0] = CN;
    out[1] = down_f32(b, lse, CN), n[1] = CN;
    out[2] = down_act(b, dl, NV), n[2] = NV;
    b->dev->free(b->dev, dtg);
    free(l);
    return 3;
}

/* The primitives: memset, copy, casts, folds, sums, AdamW, events. */
static int case_primitives(const backend *b, float **out, size_t *n) {
    sr_dev *d = b->dev;
    const size_t N = 5000;
    float *x = hrand(N, 1, 1), *y = hrand(N, 2, 1);
    float *dx = up_f32(b, x, N), *dy = up_f32(b, y, N), *acc = up_f32(b, y, N), *cp = up_f32(b, NULL, N);
    void *h = up(b, NULL, N, SR_DT_BF16);
    sr_event e = {0};
    d->copy(d, SR_STREAM_COMM, cp, dx, N * sizeof(float));
    d->record(d, &e, SR_STREAM_COMM);
    d->wait(d, SR_STREAM_COMPUTE, &e);
    d->cast_f32_bf16(d, SR_STREAM_COMPUTE, h, cp, N);
    d->fold_bf16(d, SR_STREAM_COMPUTE, acc, h, N, true); /* acc = y + bf16(x) */
    d->add_f32(d, SR_STREAM_COMPUTE, acc, dx, N);        /* ... + x */
    float *widened = up_f32(b, NULL, N);
    d->fold_bf16(d, SR_STREAM_COMPUTE, widened, h, N, false);
    d->memset(d, SR_STREAM_COMPUTE, widened + 10, 0, 7 * sizeof(float));
    double *sums = up(b, NULL, 2, SR_DT_F64);
    d->memset(d, SR_STREAM_COMPUTE, sums, 0, 2 * sizeof(double));
    d->sum_squares(d, SR_STREAM_COMPUTE, &sums[0], dx, N);
    d->loss_sum(d, SR_STREAM_COMPUTE, &sums[1], dy, N, true);
    d->loss_sum(d, SR_STREAM_COMPUTE, &sums[1], dx, 100, true); /* += */
    sr_event done = {0};
    d->record(d, &done, SR_STREAM_COMPUTE);
    bool events_ok = d->host_wait(d, &done) == SR_OK && d->sync(d, SR_STREAM_COMPUTE) == SR_OK;
    double hs[2];
    sr_dev_download(d, hs, sums, sizeof hs, "download");
    d->free(d, sums);
    /* AdamW over two segments (one decaying), padding between them untouched */
    float *p = hrand(N, 3, 1), *g = hrand(N, 4, 1), *m = hrand(N, 5, 0.1f), *v = hrand(N, 6, 0.1f);
    for (size_t i = 0; i < N; i++)
        v[i] = v[i] * v[i];
    float *dp = up_f32(b, p, N), *dg = up_f32(b, g, N), *dm = up_f32(b, m, N), *dv = up_f32(b, v, N);
    sr_adamw_segment segs[2] = {{0, 3000, 0, true}, {3100, 1900, 3000, false}};
    sr_adamw_segment *dsegs = (sr_adamw_segment *)up(b, NULL, sizeof segs, SR_DT_BYTE);
    sr_dev_upload(d, dsegs, segs, sizeof segs, "upload");
    void *p16 = up(b, NULL, N, SR_DT_BF16);
    d->memset(d, SR_STREAM_COMPUTE, p16, 0, N * 2);
    sr_adamw_launch l = {.params = dp,
                         .grads = dg,
                         .m = dm,
                         .v = dv,
                         .segs = segs,
                         .dsegs = dsegs,
                         .nsegs = 2,
                         .params16 = p16,
                         .a = {0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 3e-4f, 0.0f, 0.5f},
                         .weight_decay = 0.1f};
    d->adamw(d, SR_STREAM_COMPUTE, &l);
    out[0] = down_f32(b, acc, N), n[0] = N;
    out[1] = down_f32(b, widened, N), n[1] = N;
    out[2] = fnew(3), n[2] = 3; /* the sums, and whether the waits completed */
    out[2][0] = (float)hs[0], out[2][1] = (float)hs[1], out[2][2] = events_ok ? 1.0f : 0.0f;
    out[3] = down_f32(b, dp, N), n[3] = N;
    /* the bf16 copy AdamW writes: each updated parameter's cast, the padding's zero untouched */
    uint16_t *c16 = malloc(N * 2);
    sr_dev_download(d, c16, p16, N * 2, "download");
    out[4] = fnew(N), n[4] = N;
    for (size_t i = 0; i < N; i++)
        out[4][i] =
            (i >= 3000 && i < 3100) ? (c16[i] == 0 ? 0.0f : 1.0f) : (c16[i] == sr_f32_to_bf16(out[3][i]) ? 0.0f : 1.0f);
    free(c16);
    d->free(d, dx), d->free(d, dy), d->free(d, cp), d->free(d, h), d->free(d, dg), d->free(d, dm), d->free(d, dv);
    d->free(d, dsegs), d->free(d, p16);
    free(x), free(y), free(p), free(g), free(m), free(v);
    return 5;
}

/* Per-op tolerances: max|got - ref| / max|ref| per output (doc/ARCHITECTURE.md §3c, exact
 * and bf16 mode; the cpu and fake tables run the same code and must agree to 0). */
static const struct {
    const char *name;
    case_fn run;
    double tol, tol_bf16;
} cases[] = {
    {"encoder forward/backward", case_encoder, 2e-6, 1e-2},
    {"layernorm (residual form) forward/backward (the input gradient's sums)", case_layernorm, 1e-5, 2e-2},
    {"matmul forward/backward", case_matmul, 1e-5, 1e-2},
    {"attention forward/backward", case_attention, 1e-5, 2e-2},
    {"gelu forward/backward (dbias), residual", case_gelu_residual, 2e-6, 1e-2},
    {"crossentropy forward/backward", case_crossentropy, 1e-5, 2e-2},
    {"primitives (copy, memset, casts, folds, sums, AdamW, events)", case_primitives, 1e-6, 1e-6},
};

/* Every case on `b` against the CPU table; a TAP line per case when
 * `report`.  Returns the number of cases that failed. */
static int compare_backend(const backend *b, bool report) {
    int failed = 0;
    bool bf16 = b->ops->act == SR_DT_BF16;
    bf16_inputs = bf16;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double tol = bf16 ? cases[c].tol_bf16 : cases[c].tol;
        float *ref[MAX_OUT] = {0}, *got[MAX_OUT] = {0};
        size_t nr[MAX_OUT] = {0}, ng[MAX_OUT] = {0};
        int kr = cases[c].run(&cpu_backend, ref, nr), kg = cases[c].run(b, got, ng);
        double worst = kr == kg ? 0.0 : INFINITY;
        for (int k = 0; k < kr && k < kg; k++) {
            double e = 0.0, mx = 0.0;
            for (size_t i = 0; i < nr[k] && nr[k] == ng[k]; i++) {
                e = fmax(e, fabs((double)got[k][i] - ref[k][i]));
                mx = fmax(mx, fabs(ref[k][i]));
                if (isnan(got[k][i]) != isnan(ref[k][i]))
                    e = INFINITY;
            }
            worst = fmax(worst, nr[k] == ng[k] ? e / (mx > 0 ? mx : 1) : INFINITY);
        }
        bool ok = worst <= tol;
        failed += !ok;
        if (report)
            tap_ok(ok, "%s: %s matches the cpu table (max rel err %.2g <= %.0e)", b->name, cases[c].name, worst, tol);
        for (int k = 0; k < MAX_OUT; k++)
            free(ref[k]), free(got[k]);
    }
    bf16_inputs = false;
    return failed;
}

/* ---- a deliberately perturbed table ---------------------------------------- */

static void gelu_perturbed(void *out, const void *inp, size_t n) {
    sr_ops_cpu.gelu_forward(out, inp, n);
    ((float *)out)[n / 2] += 1e-3f;
}
static void sum_squares_perturbed(sr_dev *d, sr_stream s, double *out, const float *x, size_t n) {
    (void)d, (void)s;
    *out = sr_vec_sum_squares(x, n) * (1.0 + 1e-5);
}

static void test_perturbed(void) {
    sr_ops ops = sr_ops_cpu;
    ops.gelu_forward = gelu_perturbed;
    backend bad_op = {"perturbed gelu", &ops, cpu_backend.dev};
    int f1 = compare_backend(&bad_op, false);
    tap_ok(f1 == 1, "a table with one perturbed op (gelu, one element + 1e-3) is reported failing (%d case)", f1);
    sr_dev *d = sr_dev_cpu_open();
    d->sum_squares = sum_squares_perturbed;
    backend bad_prim = {"perturbed sum_squares", &sr_ops_cpu, d};
    int f2 = compare_backend(&bad_prim, false);
    tap_ok(f2 == 1, "a table with one perturbed primitive (sum_squares x (1 + 1e-5)) is reported failing (%d case)",
           f2);
    sr_device_close(d);
}

/* ==== part 3: the CPU table's primitives against independent references ====== */

/* The previous release's AdamW step (optim.c before the device table), kept
 * here as the reference the table's adamw must reproduce. */
static void adamw_previous(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2, float eps,
                           float bc1, float bc2, float lr, float decay, float gs) {
    for (size_t i = 0; i < n; i++) {
        float gg = g[i] * gs;
        float mm = b1 * m[i] + (1.0f - b1) * gg;
        float vv = b2 * v[i] + (1.0f - b2) * gg * gg;
        m[i] = mm;
        v[i] = vv;
        float mhat = mm / bc1, vhat = vv / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + decay * p[i]);
    }
}

static void test_cpu_primitives(void) {
    sr_dev *d = cpu_backend.dev;
    /* bf16 round to nearest even: hand-computed cases */
    static const struct {
        uint32_t f32;
        uint16_t bf16;
        const char *why;
    } rne[] = {
        {0x3f800000u, 0x3f80, "1.0 exact"},
        {0x3f808000u, 0x3f80, "halfway, even below: down"},
        {0x3f818000u, 0x3f82, "halfway, odd below: up"},
        {0x3f808001u, 0x3f81, "above halfway: up"},
        {0x3f807fffu, 0x3f80, "below halfway: down"},
        {0xbf818000u, 0xbf82, "negative halfway, odd: away from zero"},
        {0x7f7fffffu, 0x7f80, "largest float rounds to infinity"},
        {0x7f800000u, 0x7f80, "infinity stays"},
        {0x00000001u, 0x0000, "smallest subnormal rounds to zero"},
    };
    int n_rne = (int)(sizeof rne / sizeof rne[0]), bad = 0;
    float src[16];
    uint16_t dst[16];
    for (int i = 0; i < n_rne; i++)
        memcpy(&src[i], &rne[i].f32, 4);
    d->cast_f32_bf16(d, SR_STREAM_COMPUTE, dst, src, (size_t)n_rne);
    for (int i = 0; i < n_rne; i++)
        if (dst[i] != rne[i].bf16) {
            bad++;
            tap_diag("bf16(%08x) = %04x, expected %04x (%s)", rne[i].f32, dst[i], rne[i].bf16, rne[i].why);
        }
    uint32_t nan_bits = 0x7fc00001u;
    float nan_f;
    memcpy(&nan_f, &nan_bits, 4);
    d->cast_f32_bf16(d, SR_STREAM_COMPUTE, dst, &nan_f, 1);
    tap_ok(bad == 0 && (dst[0] & 0x7f80) == 0x7f80 && (dst[0] & 0x7f) != 0,
           "cpu table: f32 -> bf16 rounds to nearest even (%d hand-computed cases) and keeps NaN a NaN", n_rne);
    /* fold and sums against double */
    const size_t N = 100003;
    float *x = hrand(N, 7, 1);
    uint16_t *h = malloc(N * 2);
    float *acc = fnew(N);
    d->cast_f32_bf16(d, SR_STREAM_COMPUTE, h, x, N);
    for (size_t i = 0; i < N; i++)
        acc[i] = 1.0f;
    d->fold_bf16(d, SR_STREAM_COMPUTE, acc, h, N, true);
    double e = 0;
    for (size_t i = 0; i < N; i++)
        e = fmax(e, fabs(acc[i] - (1.0f + sr_bf16_to_f32(h[i]))));
    tap_ok(e == 0.0, "cpu table: bf16 fold += is exact f32 addition");
    double ss = 0, ls = 0.5, ref_ss = 0, ref_ls = 0.5;
    d->sum_squares(d, SR_STREAM_COMPUTE, &ss, x, N);
    d->loss_sum(d, SR_STREAM_COMPUTE, &ls, x, N, true);
    double lw = NAN;
    d->loss_sum(d, SR_STREAM_COMPUTE, &lw, x, N, false); /* the overwrite form: NaN not read */
    for (size_t i = 0; i < N; i++)
        ref_ss += (double)x[i] * x[i], ref_ls += x[i];
    tap_ok(fabs(ss - ref_ss) <= 1e-12 * ref_ss && fabs(ls - ref_ls) <= 1e-9 * (1 + fabs(ref_ls)) &&
               fabs(lw + 0.5 - ref_ls) <= 1e-9 * (1 + fabs(ref_ls)),
           "cpu table: sum of squares and loss sum (+=, and written over NaN) equal double-precision sums (%.3g, %.3g)",
           ss - ref_ss, ls - ref_ls);
    /* AdamW against the previous release's loop */
    float *p = hrand(N, 8, 1), *g = hrand(N, 9, 1), *m = hrand(N, 10, 0.1f), *v = hrand(N, 11, 0.1f);
    for (size_t i = 0; i < N; i++)
        v[i] *= v[i];
    float *p2 = fnew(N), *m2 = fnew(N), *v2 = fnew(N);
    memcpy(p2, p, N * 4), memcpy(m2, m, N * 4), memcpy(v2, v, N * 4);
    sr_adamw_segment segs[2] = {{0, 60000, 0, true}, {60000, N - 60000, 60000, false}};
    sr_adamw_launch l = {.params = p,
                         .grads = g,
                         .m = m,
                         .v = v,
                         .segs = segs,
                         .nsegs = 2,
                         .a = {0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f, 6e-4f, 0.0f, 0.8f},
                         .weight_decay = 0.1f};
    d->adamw(d, SR_STREAM_COMPUTE, &l);
    adamw_previous(p2, g, m2, v2, 60000, 0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f, 6e-4f, 0.1f * 1.0f, 0.8f);
    adamw_previous(p2 + 60000, g + 60000, m2 + 60000, v2 + 60000, N - 60000, 0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f,
                   6e-4f, 0.0f, 0.8f);
    double ep = 0, mp = 0;
    for (size_t i = 0; i < N; i++) {
        ep = fmax(ep, fabs(p[i] - p2[i]) + fabs(m[i] - m2[i]) + fabs(v[i] - v2[i]));
        mp = fmax(mp, fabs(p2[i]));
    }
    tap_ok(ep <= 1e-6 * mp, "cpu table: AdamW over segments equals the previous release's step (%.2g)", ep);
    free(x), free(h), free(acc), free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

/* The cuda tables (f32 and bf16 activations) against the cpu table: on a
 * GPU, or on the CUDA emulator in an emulator tree; a SKIP with
 * cudaGetDeviceCount's answer elsewhere (a failure when
 * SHARDRUN_TEST_REQUIRE has gpu). */
static void test_cuda_tables(void) {
#ifdef SR_HAVE_CUDA
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        char why[200];
        snprintf(why, sizeof why, "no GPU: cudaGetDeviceCount says %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        tap_skip("gpu", "cuda f32 and bf16 tables against the cpu table", why);
        return;
    }
    sr_dev *dev = NULL;
    if (!tap_ok(sr_dev_cuda_open(&dev, 0, "0") == SR_OK, "the cuda table opens on GPU 0%s",
                dev ? "" : sr_error_message()))
        return;
    dev->timeout_s = 60;
    /* the ops' workspace at the cases' shapes, as the model binds it (the
     * emulator found this test running the encoder's sort without one) */
    size_t wsb = sr_ops_cuda_f32.workspace_bytes(CB, CT, CC, CNH);
    void *ws = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_ACTIVATIONS, wsb);
    sr_ops_cuda_f32.bind_workspace(ws, wsb);
    backend f32 = {"cuda f32", &sr_ops_cuda_f32, dev}, bf16 = {"cuda bf16", &sr_ops_cuda_bf16, dev};
    tap_ok(compare_backend(&f32, true) == 0, "cuda f32: every op and primitive matches the cpu table");
    tap_ok(compare_backend(&bf16, true) == 0,
           "cuda bf16: every op and primitive matches the cpu table on bf16-rounded inputs");
    sr_ops_cuda_f32.bind_workspace(NULL, 0);
    dev->free(dev, ws);
    sr_dev_cuda_close(dev);
#else
    tap_skip(NULL, "cuda f32 and bf16 tables against the cpu table", "this build has no CUDA back end");
#endif
}

static void test_backends(void) {
    cpu_backend = (backend){"cpu", &sr_ops_cpu, sr_dev_cpu_open()};
    backend fake = {"fake", &sr_ops_cpu, sr_dev_fake_open()};
    tap_ok(compare_backend(&cpu_backend, true) == 0, "cpu: every case agrees with itself (deterministic)");
    size_t before = sr_mem_space_peak(SR_SPACE_DEVICE);
    tap_ok(compare_backend(&fake, true) == 0, "fake: every op and primitive matches the cpu table");
    tap_ok(sr_mem_space_peak(SR_SPACE_DEVICE) > before && sr_mem_space_current(SR_SPACE_DEVICE) == 0,
           "fake: its memory is accounted in the device space (and all of it freed)");
    test_perturbed();
    test_cpu_primitives();
    test_cuda_tables();
    sr_device_close(fake.dev);
    sr_device_close(cpu_backend.dev);
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
    test_one_row();
    test_matmul(1, 70, 130); /* one row: the column split, its gradients by finite differences */
    test_backends();
    return tap_done();
}
