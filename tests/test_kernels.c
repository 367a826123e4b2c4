/* test_kernels.c — every CUDA op and device-table primitive against the CPU
 * op, in both modes (exact f32, bf16), and the launcher call-count table.
 *
 * Needs a GPU (or the CUDA emulator): without one the whole test is a
 * SKIP carrying cudaGetDeviceCount's answer (a failure when
 * SHARDRUN_TEST_REQUIRE names gpu, as tests/gpu/check.sh sets).  Shapes:
 * small ones always (a vocabulary of 300 padded to 320; the Llama ops with
 * two query heads per key/value head and with one key/value head); with
 * SHARDRUN_TEST_REAL_SHAPES=1 also GPT-2's B=8, T=1024, C=768, V=50257
 * and the Llama ops at llama-125m's and Llama-3.2-1B's dimensions at B=1,
 * T=256; with SHARDRUN_TEST_REAL_SHAPES=llama (an emulator tree's
 * default: they take seconds there) only the Llama ones.
 *
 * A test that can fail: every output an op writes is filled with NaN (all
 * ones bytes) before the op and compared after it, statistics (mean, rstd,
 * lse) and losses included; CPU results are uploaded only where they are
 * a later op's input, into buffers of their own.  Outputs an op adds to
 * (+=) start from random values and are compared by what the op added.
 * SHARDRUN_TEST_KERNEL_SKIP=<launcher> makes that launcher return without
 * launching: every forward launcher skipped must fail this test.
 * Tolerances are those of doc/ARCHITECTURE.md (the CUDA back end):
 * max|gpu - ref| / max|ref| per tensor, where in bf16 mode the reference
 * is the CPU op on the same bf16-rounded inputs.  AdamW must be bitwise
 * equal to the host's. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "model.h"
#include "ops.h"
#include "tap.h"

#include "primitives.h"

static sr_dev *dev;

/* n uniform values in [-scale, scale) from `seed`: a 64-bit LCG's top 24
 * bits (rand() takes a lock per call, seconds for the real shapes'
 * half-billion logits) */
static float *rnd(size_t n, unsigned seed, float scale) {
    float *x = malloc(n * sizeof *x);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(st >> 40) / 16777216.0f - 0.5f) * 2.0f * scale;
    }
    return x;
}

/* The ops' workspace for B x T x C x NH, bound to the tables, filled with
 * NaN: a kernel that reads scratch it did not write first poisons its
 * output, and compute-sanitizer's initcheck (tests/gpu/check.sh) sees
 * it initialized: it does not see the stores of cuBLASLt's bf16 kernels
 * on sm_90, so the score gradient they write there read as uninitialized
 * on an H200 while the values were right (the comparisons passed). */
static void bind_ws(const sr_ops *o, int B, int T, int C, int NH) {
    size_t wsb = o->workspace_bytes(B, T, C, NH);
    void *ws = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_ACTIVATIONS, wsb);
    dev->memset(dev, SR_STREAM_COMPUTE, ws, 0xff, wsb);
    o->bind_workspace(ws, wsb);
}

/* rounds x to bf16 in place when bf16 (the reference sees what the GPU sees) */
static void round_to(float *x, size_t n, int bf16) {
    for (size_t i = 0; bf16 && i < n; i++)
        x[i] = sr_bf16_to_f32(sr_f32_to_bf16(x[i]));
}

static void *up(const float *x, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    void *d = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, n * es);
    void *h = malloc(n * es);
    for (size_t i = 0; i < n; i++)
        if (bf16)
            ((uint16_t *)h)[i] = sr_f32_to_bf16(x[i]);
        else
            ((float *)h)[i] = x[i];
    sr_dev_upload(dev, d, h, n * es, "upload");
    free(h);
    return d;
}

/* Orders the d2h stream after everything issued on the others: a download
 * is ordered only after its own stream's past (device.h), and the ops run
 * on the compute and comm streams (the emulator found this test reading
 * results before the kernels that wrote them had run). */
static void d2h_after_all(void) {
    for (int s = 0; s < SR_NSTREAMS; s++) {
        sr_event ev = {0};
        if (s == SR_STREAM_D2H)
            continue;
        dev->record(dev, &ev, (sr_stream)s);
        dev->wait(dev, SR_STREAM_D2H, &ev);
    }
}

/* A download ordered after all the device's work so far. */
static void fetch(void *h, const void *d, size_t bytes) {
    d2h_after_all();
    sr_dev_download(dev, h, d, bytes, "download");
}

static float *down(const void *d, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    void *h = malloc(n * es);
    float *x = malloc(n * sizeof *x);
    fetch(h, d, n * es);
    for (size_t i = 0; i < n; i++)
        x[i] = bf16 ? sr_bf16_to_f32(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
    return x;
}

/* A device output of n elements, filled with NaN on the compute stream
 * (the ops' stream): an op that writes nothing leaves NaN behind. */
static void *out_nan(size_t n, int bf16) {
    size_t bytes = n * (bf16 ? 2 : 4);
    void *d = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, bytes);
    dev->memset(dev, SR_STREAM_COMPUTE, d, 0xff, bytes);
    return d;
}

/* max|g - r| / max|r|, or infinity when g holds a NaN */
static double rel(const float *g, const float *r, size_t n) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(g[i]) || isnan(r[i]))
            return INFINITY;
        md = fmax(md, fabs((double)g[i] - r[i]));
        mr = fmax(mr, fabs((double)r[i]));
    }
    return mr > 0 ? md / mr : md;
}

static void check(const char *what, const void *dgot, const float *ref, size_t n, int bf16, int act, double tol) {
    float *g = down(dgot, n, act ? bf16 : 0);
    double r = rel(g, ref, n);
    tap_ok(r <= tol, "%s %s: rel %.2e <= %.0e", bf16 ? "bf16" : "f32", what, r, tol);
    free(g);
}

/* An accumulated output (+=): what the GPU added (got - init) against what
 * the CPU added (ref - init), so an op that adds nothing fails. */
static void check_added(const char *what, const void *dgot, const float *ref, const float *init, size_t n, int bf16,
                        int act, double tol) {
    float *g = down(dgot, n, act ? bf16 : 0), *dg = malloc(n * 4), *dr = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        dg[i] = g[i] - init[i];
        dr[i] = ref[i] - init[i];
    }
    double r = rel(dg, dr, n);
    tap_ok(r <= tol, "%s %s (what it added): rel %.2e <= %.0e", bf16 ? "bf16" : "f32", what, r, tol);
    free(g), free(dg), free(dr);
}

/* Whether two device buffers hold the same bytes. */
static bool same_bits(const void *da, const void *db, size_t bytes) {
    char *a = malloc(bytes), *b = malloc(bytes);
    fetch(a, da, bytes);
    fetch(b, db, bytes);
    bool same = memcmp(a, b, bytes) == 0;
    free(a), free(b);
    return same;
}

/* A copy of device buffer d (n elements) at one element past a 16-byte
 * boundary: the kernels' scalar path (no 16-byte packs).  Free with
 * unshift_free. */
static void *shifted(const void *d, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    char *p = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, (n + 8) * es);
    dev->copy(dev, SR_STREAM_COMPUTE, p + es, d, n * es);
    return p + es;
}
static void unshift_free(void *p, int bf16) { dev->free(dev, (char *)p - (bf16 ? 2 : 4)); }

static float *copy_of(const float *x, size_t n) {
    float *c = malloc(n * 4);
    memcpy(c, x, n * 4);
    return c;
}

/* The fused classifier (ops.h crossentropy_fused) against the CPU's on N
 * rows of V real columns in Vp: losses, lse and the dlogits written over
 * the logits (the padding zero), every output's old content NaN where it
 * is only written. */
static void xent_fused_vs_cpu(const sr_ops *o, int bf16, int N, int V, int Vp, unsigned seed) {
    const sr_ops *cpu = &sr_ops_cpu;
    size_t NV = (size_t)N * Vp;
    float *lg = rnd(NV, seed, 4.0f);
    round_to(lg, NV, bf16);
    int *tg = malloc((size_t)N * sizeof *tg);
    for (int i = 0; i < N; i++)
        tg[i] = (i * 7919 + 3) % V;
    int *dtg = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, (size_t)N * sizeof(int));
    sr_dev_upload(dev, dtg, tg, (size_t)N * sizeof(int), "upload");
    void *dlg = up(lg, NV, bf16);
    float *loss = malloc((size_t)N * 4), *lse = malloc((size_t)N * 4), dl = 1.0f / (float)N;
    cpu->crossentropy_fused(loss, lse, lg, tg, dl, N, V, Vp);
    float *dloss = out_nan((size_t)N, 0), *dlse = out_nan((size_t)N, 0);
    o->crossentropy_fused(dloss, dlse, dlg, dtg, dl, N, V, Vp);
    char what[96];
    snprintf(what, sizeof what, "crossentropy_fused (V %d of %d) ", V, Vp);
    char *tail = what + strlen(what);
    size_t room = sizeof what - strlen(what);
    snprintf(tail, room, "losses");
    check(what, dloss, loss, (size_t)N, bf16, 0, bf16 ? 2e-3 : 1e-6);
    snprintf(tail, room, "lse");
    check(what, dlse, lse, (size_t)N, bf16, 0, bf16 ? 2e-3 : 1e-6);
    snprintf(tail, room, "dlogits");
    check(what, dlg, lg, NV, bf16, 1, bf16 ? 2e-2 : 1e-5);
    free(lg), free(tg), free(loss), free(lse);
}

static void ops_at(int bf16, int B, int T, int C, int NH, int V) {
    const sr_ops *o = bf16 ? &sr_ops_cuda_bf16 : &sr_ops_cuda_f32, *cpu = &sr_ops_cpu;
    int Vp = sr_model_padded_vocab(V), N = B * T;
    size_t NC = (size_t)N * C;
    double t_ew = bf16 ? 1e-2 : 2e-6, t_ln = bf16 ? 2e-2 : 1e-5, t_mm = bf16 ? 1e-2 : 1e-5;
    tap_diag("%s ops at B=%d T=%d C=%d NH=%d V=%d (Vp %d)", bf16 ? "bf16" : "f32", B, T, C, NH, V, Vp);
    bind_ws(o, B, T, C, NH);

    /* encoder */
    int *inp = malloc((size_t)N * sizeof *inp);
    for (int i = 0; i < N; i++)
        inp[i] = (i * 7919 + i / 3) % V;
    inp[0] = inp[1] = inp[N - 1]; /* repeated tokens */
    int *dinp_ids = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, (size_t)N * sizeof(int));
    sr_dev_upload(dev, dinp_ids, inp, (size_t)N * sizeof(int), "upload");
    float *wte = rnd((size_t)Vp * C, 1, 0.1f), *wpe = rnd((size_t)T * C, 2, 0.1f);
    round_to(wte, (size_t)Vp * C, bf16), round_to(wpe, (size_t)T * C, bf16);
    void *dwte_p = up(wte, (size_t)Vp * C, bf16), *dwpe_p = up(wpe, (size_t)T * C, bf16);
    float *enc = malloc(NC * 4);
    cpu->encoder_forward(enc, inp, wte, wpe, B, T, C);
    void *denc = out_nan(NC, bf16);
    o->encoder_forward(denc, dinp_ids, dwte_p, dwpe_p, B, T, C);
    check("encoder_forward", denc, enc, NC, bf16, 1, t_ew);
    {
        /* the scalar path (the token table off a 16-byte boundary): the same bits */
        void *swte = shifted(dwte_p, (size_t)Vp * C, bf16), *denc2 = out_nan(NC, bf16);
        o->encoder_forward(denc2, dinp_ids, swte, dwpe_p, B, T, C);
        tap_ok(same_bits(denc, denc2, NC * (bf16 ? 2 : 4)),
               "%s encoder_forward: the scalar path's bits are the packed's", bf16 ? "bf16" : "f32");
        unshift_free(swte, bf16), dev->free(dev, denc2);
    }
    float *dout = rnd(NC, 3, 1.0f);
    round_to(dout, NC, bf16);
    void *ddout = up(dout, NC, bf16);
    float *gwte = rnd((size_t)Vp * C, 4, 1.0f), *gwpe = rnd((size_t)T * C, 5, 1.0f);
    float *gwte0 = copy_of(gwte, (size_t)Vp * C), *gwpe0 = copy_of(gwpe, (size_t)T * C);
    float *dgwte = up(gwte, (size_t)Vp * C, 0), *dgwpe = up(gwpe, (size_t)T * C, 0);
    cpu->encoder_backward(gwte, gwpe, dout, inp, B, T, C, 1.0f);
    o->encoder_backward(dgwte, dgwpe, ddout, dinp_ids, B, T, C, 1.0f);
    check_added("encoder_backward dwte", dgwte, gwte, gwte0, (size_t)Vp * C, bf16, 0, t_ew);
    check_added("encoder_backward dwpe", dgwpe, gwpe, gwpe0, (size_t)T * C, bf16, 0, t_ew);
    /* dwpe's overwrite form (gbeta 0): written into NaN */
    float *owpe = malloc((size_t)T * C * 4), *dowpe = out_nan((size_t)T * C, 0);
    cpu->encoder_backward(gwte, owpe, dout, inp, B, T, C, 0.0f);
    o->encoder_backward(dgwte, dowpe, ddout, dinp_ids, B, T, C, 0.0f);
    check("encoder_backward dwpe (gbeta 0, into NaN)", dowpe, owpe, (size_t)T * C, bf16, 0, t_ew);

    /* layernorm: out, mean and rstd written; backward from the CPU's statistics */
    float *x = rnd(NC, 6, 1.0f), *w = rnd((size_t)C, 7, 1.0f), *b = rnd((size_t)C, 8, 0.5f);
    round_to(x, NC, bf16), round_to(w, (size_t)C, bf16), round_to(b, (size_t)C, bf16);
    void *dx = up(x, NC, bf16), *dw = up(w, (size_t)C, bf16), *db = up(b, (size_t)C, bf16);
    float *y = malloc(NC * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    cpu->layernorm_forward(y, mean, rstd, x, w, b, N, C);
    void *dy = out_nan(NC, bf16);
    float *dmean = out_nan((size_t)N, 0), *drstd = out_nan((size_t)N, 0);
    o->layernorm_forward(dy, dmean, drstd, dx, dw, db, N, C);
    check("layernorm_forward", dy, y, NC, bf16, 1, t_ln);
    check("layernorm_forward mean", dmean, mean, (size_t)N, bf16, 0, t_ln);
    check("layernorm_forward rstd", drstd, rstd, (size_t)N, bf16, 0, t_ln);
    float *mean_in = up(mean, (size_t)N, 0), *rstd_in = up(rstd, (size_t)N, 0);
    float *gx = rnd(NC, 9, 0.1f), *gw = rnd((size_t)C, 10, 0.1f), *gb = rnd((size_t)C, 11, 0.1f);
    round_to(gx, NC, bf16);
    float *gx0 = copy_of(gx, NC), *gw0 = copy_of(gw, (size_t)C), *gb0 = copy_of(gb, (size_t)C);
    void *dgx = up(gx, NC, bf16);
    float *dgw = up(gw, (size_t)C, 0), *dgb = up(gb, (size_t)C, 0);
    float *gs = rnd((size_t)C, 23, 0.1f), *gs0 = copy_of(gs, (size_t)C), *dgs = up(gs, (size_t)C, 0);
    float *si = rnd((size_t)C, 27, 0.1f), *si0 = copy_of(si, (size_t)C), *dsi = up(si, (size_t)C, 0);
    long long ln_launches = sr_cuda_calls[SR_CUDA_L_layernorm_backward];
    cpu->layernorm_backward(gx, gw, gb, dout, x, w, mean, rstd, N, C, 1.0f, 1.0f, si, gs, 1.0f);
    o->layernorm_backward(dgx, dgw, dgb, ddout, dx, dw, mean_in, rstd_in, N, C, 1.0f, 1.0f, dsi, dgs, 1.0f);
    check_added("layernorm_backward dinp", dgx, gx, gx0, NC, bf16, 1, t_ln);
    check_added("layernorm_backward dw", dgw, gw, gw0, (size_t)C, bf16, 0, t_ln);
    check_added("layernorm_backward db", dgb, gb, gb0, (size_t)C, bf16, 0, t_ln);
    check_added("layernorm_backward sum_in (dinp's column sums as it came in)", dsi, si, si0, (size_t)C, bf16, 0, t_ln);
    check_added("layernorm_backward sum_out (dinp's column sums as left)", dgs, gs, gs0, (size_t)C, bf16, 0, t_ln);
    tap_ok(sr_cuda_calls[SR_CUDA_L_layernorm_backward] - ln_launches == 1,
           "layernorm_backward: input gradient, dw, db and both sums from one launcher call");
    free(si), free(si0);
    dev->free(dev, dsi);
    /* the overwrite forms (beta, gbeta, sbeta 0): every output written into NaN */
    float *ogx = malloc(NC * 4), *ogw = malloc((size_t)C * 4), *ogb = malloc((size_t)C * 4);
    float *ogs = malloc((size_t)C * 4);
    void *dogx = out_nan(NC, bf16);
    float *dogw = out_nan((size_t)C, 0), *dogb = out_nan((size_t)C, 0), *dogs = out_nan((size_t)C, 0);
    cpu->layernorm_backward(ogx, ogw, ogb, dout, x, w, mean, rstd, N, C, 0.0f, 0.0f, NULL, ogs, 0.0f);
    o->layernorm_backward(dogx, dogw, dogb, ddout, dx, dw, mean_in, rstd_in, N, C, 0.0f, 0.0f, NULL, dogs, 0.0f);
    check("layernorm_backward dinp (beta 0, into NaN)", dogx, ogx, NC, bf16, 1, t_ln);
    check("layernorm_backward dw (gbeta 0, into NaN)", dogw, ogw, (size_t)C, bf16, 0, t_ln);
    check("layernorm_backward db (gbeta 0, into NaN)", dogb, ogb, (size_t)C, bf16, 0, t_ln);
    check("layernorm_backward sum_out (sbeta 0, into NaN)", dogs, ogs, (size_t)C, bf16, 0, t_ln);
    /* run to run: the same bits; and the scalar path (buffers off a 16-byte
     * boundary) against the CPU too */
    void *dogx2 = out_nan(NC, bf16);
    float *dogw2 = out_nan((size_t)C, 0), *dogb2 = out_nan((size_t)C, 0), *dogs2 = out_nan((size_t)C, 0);
    o->layernorm_backward(dogx2, dogw2, dogb2, ddout, dx, dw, mean_in, rstd_in, N, C, 0.0f, 0.0f, NULL, dogs2, 0.0f);
    tap_ok(same_bits(dogx, dogx2, NC * (bf16 ? 2 : 4)) && same_bits(dogw, dogw2, (size_t)C * 4) &&
               same_bits(dogb, dogb2, (size_t)C * 4) && same_bits(dogs, dogs2, (size_t)C * 4),
           "%s layernorm_backward: a second run is bitwise the first (dinp, dw, db, sum_out)", bf16 ? "bf16" : "f32");
    void *sdout = shifted(ddout, NC, bf16);
    o->layernorm_backward(dogx2, dogw2, dogb2, sdout, dx, dw, mean_in, rstd_in, N, C, 0.0f, 0.0f, NULL, dogs2, 0.0f);
    check("layernorm_backward dinp (scalar path)", dogx2, ogx, NC, bf16, 1, t_ln);
    check("layernorm_backward dw (scalar path)", dogw2, ogw, (size_t)C, bf16, 0, t_ln);
    check("layernorm_backward sum_out (scalar path)", dogs2, ogs, (size_t)C, bf16, 0, t_ln);
    unshift_free(sdout, bf16);
    /* the residual form: bitwise residual_forward then layernorm_forward on this table */
    {
        float *ra = rnd(NC, 24, 1.0f);
        round_to(ra, NC, bf16);
        void *dra = up(ra, NC, bf16), *res1 = out_nan(NC, bf16), *res2 = out_nan(NC, bf16);
        void *y1 = out_nan(NC, bf16), *y2 = out_nan(NC, bf16);
        float *m1 = out_nan((size_t)N, 0), *m2 = out_nan((size_t)N, 0), *r1 = out_nan((size_t)N, 0),
              *r2 = out_nan((size_t)N, 0);
        o->residual_forward(res1, dra, dx, NC);
        o->layernorm_forward(y1, m1, r1, res1, dw, db, N, C);
        o->residual_layernorm_forward(res2, y2, m2, r2, dra, dx, dw, db, N, C);
        tap_ok(same_bits(res1, res2, NC * (bf16 ? 2 : 4)) && same_bits(y1, y2, NC * (bf16 ? 2 : 4)) &&
                   same_bits(m1, m2, (size_t)N * 4) && same_bits(r1, r2, (size_t)N * 4),
               "%s residual_layernorm_forward: bitwise residual_forward then layernorm_forward (sum, output, mean, "
               "rstd)",
               bf16 ? "bf16" : "f32");
        float *cres = malloc(NC * 4), *cy = malloc(NC * 4), *cm = malloc((size_t)N * 4), *cr = malloc((size_t)N * 4);
        cpu->residual_layernorm_forward(cres, cy, cm, cr, ra, x, w, b, N, C);
        check("residual_layernorm_forward out", y2, cy, NC, bf16, 1, t_ln);
        void *sa = shifted(dra, NC, bf16);
        o->residual_layernorm_forward(res2, y2, m2, r2, sa, dx, dw, db, N, C);
        check("residual_layernorm_forward out (scalar path)", y2, cy, NC, bf16, 1, t_ln);
        unshift_free(sa, bf16);
        free(ra), free(cres), free(cy), free(cm), free(cr);
        dev->free(dev, dra), dev->free(dev, res1), dev->free(dev, res2), dev->free(dev, y1), dev->free(dev, y2);
        dev->free(dev, m1), dev->free(dev, m2), dev->free(dev, r1), dev->free(dev, r2);
    }

    /* matmul with bias: out[N,3C], the bias 16-byte aligned (the BIAS
     * epilogue) and not (the bias kernel after the GEMM) */
    int OC = 3 * C;
    float *W = rnd((size_t)OC * C, 12, 0.05f), *bias = rnd((size_t)OC, 13, 0.1f);
    round_to(W, (size_t)OC * C, bf16), round_to(bias, (size_t)OC, bf16);
    void *dW = up(W, (size_t)OC * C, bf16), *dbias_p = up(bias, (size_t)OC, bf16);
    float *bias_shifted = malloc((size_t)(OC + 1) * 4);
    bias_shifted[0] = 0.0f;
    memcpy(bias_shifted + 1, bias, (size_t)OC * 4);
    void *dbias_odd = up(bias_shifted, (size_t)OC + 1, bf16);
    const void *dbias_un = (const char *)dbias_odd + (bf16 ? 2 : 4); /* 2- or 4-byte aligned */
    float *mo = malloc((size_t)N * OC * 4);
    cpu->matmul_forward(mo, x, W, bias, N, C, OC);
    void *dmo = out_nan((size_t)N * OC, bf16);
    o->matmul_forward(dmo, dx, dW, dbias_p, N, C, OC);
    check("matmul_forward (+bias, epilogue)", dmo, mo, (size_t)N * OC, bf16, 1, t_mm);
    void *dmo2 = out_nan((size_t)N * OC, bf16);
    o->matmul_forward(dmo2, dx, dW, dbias_un, N, C, OC);
    check("matmul_forward (+bias not 16-byte aligned, bias kernel)", dmo2, mo, (size_t)N * OC, bf16, 1, t_mm);
    float *mdout = rnd((size_t)N * OC, 14, 1.0f);
    round_to(mdout, (size_t)N * OC, bf16);
    void *dmdout = up(mdout, (size_t)N * OC, bf16);
    float *mdin = rnd(NC, 15, 0.1f), *mdw = rnd((size_t)OC * C, 16, 0.1f), *mdb = rnd((size_t)OC, 17, 0.1f);
    round_to(mdin, NC, bf16);
    float *mdin0 = copy_of(mdin, NC), *mdw0 = copy_of(mdw, (size_t)OC * C), *mdb0 = copy_of(mdb, (size_t)OC);
    void *dmdin = up(mdin, NC, bf16);
    float *dmdw = up(mdw, (size_t)OC * C, 0), *dmdb = up(mdb, (size_t)OC, 0);
    cpu->matmul_backward(mdin, mdw, mdb, mdout, x, W, N, C, OC, 1.0f, 1.0f);
    o->matmul_backward(dmdin, dmdw, dmdb, dmdout, dx, dW, N, C, OC, 1.0f, 1.0f);
    check_added("matmul_backward dinp (beta 1)", dmdin, mdin, mdin0, NC, bf16, 1, t_mm);
    check_added("matmul_backward dW", dmdw, mdw, mdw0, (size_t)OC * C, bf16, 0, t_mm);
    check_added("matmul_backward dbias", dmdb, mdb, mdb0, (size_t)OC, bf16, 0, t_mm);
    /* the overwrite forms (beta, gbeta 0): dinp, dW and dbias written
     * into NaN, nothing of them read */
    float *wdin = malloc(NC * 4), *wdw = malloc((size_t)OC * C * 4), *wdb = malloc((size_t)OC * 4);
    void *dwdin = out_nan(NC, bf16);
    float *dwdw = out_nan((size_t)OC * C, 0), *dwdb = out_nan((size_t)OC, 0);
    cpu->matmul_backward(wdin, wdw, wdb, mdout, x, W, N, C, OC, 0.0f, 0.0f);
    o->matmul_backward(dwdin, dwdw, dwdb, dmdout, dx, dW, N, C, OC, 0.0f, 0.0f);
    check("matmul_backward dinp (beta 0, into NaN)", dwdin, wdin, NC, bf16, 1, t_mm);
    check("matmul_backward dW (gbeta 0, into NaN)", dwdw, wdw, (size_t)OC * C, bf16, 0, t_mm);
    check("matmul_backward dbias (gbeta 0, into NaN)", dwdb, wdb, (size_t)OC, bf16, 0, t_mm);

    /* the lm head: no bias, OC = Vp (ldd = Vp), and its backward with
     * dbias == NULL, over the padded vocabulary */
    float *lh = malloc((size_t)N * Vp * 4);
    cpu->matmul_forward(lh, x, wte, NULL, N, C, Vp);
    void *dlh = out_nan((size_t)N * Vp, bf16);
    o->matmul_forward(dlh, dx, dwte_p, NULL, N, C, Vp);
    check("matmul_forward (lm head: no bias, OC = Vp)", dlh, lh, (size_t)N * Vp, bf16, 1, t_mm);
    float *ldout = rnd((size_t)N * Vp, 23, 1.0f);
    round_to(ldout, (size_t)N * Vp, bf16);
    void *dldout = up(ldout, (size_t)N * Vp, bf16);
    float *ldin = rnd(NC, 24, 0.1f), *ldw = rnd((size_t)Vp * C, 25, 0.1f);
    round_to(ldin, NC, bf16);
    float *ldin0 = copy_of(ldin, NC), *ldw0 = copy_of(ldw, (size_t)Vp * C);
    void *dldin = up(ldin, NC, bf16);
    float *dldw = up(ldw, (size_t)Vp * C, 0);
    cpu->matmul_backward(ldin, ldw, NULL, ldout, x, wte, N, C, Vp, 1.0f, 1.0f);
    o->matmul_backward(dldin, dldw, NULL, dldout, dx, dwte_p, N, C, Vp, 1.0f, 1.0f);
    check_added("matmul_backward dinp (lm head, dbias NULL)", dldin, ldin, ldin0, NC, bf16, 1, t_mm);
    check_added("matmul_backward dW (lm head, dbias NULL)", dldw, ldw, ldw0, (size_t)Vp * C, bf16, 0, t_mm);

    /* attention over qkv = mo */
    round_to(mo, (size_t)N * OC, bf16);
    void *dqkv_in = up(mo, (size_t)N * OC, bf16);
    size_t attn = (size_t)B * NH * T * T;
    float *att = malloc(attn * 4), *ao = malloc(NC * 4);
    cpu->attention_forward(ao, att, mo, B, T, C, NH);
    void *datt = out_nan(o->attention_save_bytes(B, T, NH) / (bf16 ? 2 : 4), bf16);
    void *dao = out_nan(NC, bf16);
    o->attention_forward(dao, datt, dqkv_in, B, T, C, NH);
    check("attention_forward", dao, ao, NC, bf16, 1, t_ln);
    check("attention_forward probabilities", datt, att, attn, bf16, 1, t_ln);
    round_to(att, attn, bf16);
    void *att_in = up(att, attn, bf16);
    float *dq = rnd((size_t)N * OC, 18, 0.1f);
    round_to(dq, (size_t)N * OC, bf16);
    float *dq0 = copy_of(dq, (size_t)N * OC);
    void *ddq = up(dq, (size_t)N * OC, bf16);
    float *qb = rnd((size_t)OC, 26, 0.1f), *qb0 = copy_of(qb, (size_t)OC), *dqb = up(qb, (size_t)OC, 0);
    cpu->attention_backward(dq, dout, NULL, mo, att, B, T, C, NH, qb, 1.0f);
    o->attention_backward(ddq, ddout, NULL, dqkv_in, att_in, B, T, C, NH, dqb, 1.0f);
    check_added("attention_backward", ddq, dq, dq0, (size_t)N * OC, bf16, 1, t_ln);
    check_added("attention_backward: the qkv bias gradient (gbeta 1)", dqb, qb, qb0, (size_t)OC, bf16, 0, t_ln);
    free(qb), free(qb0);

    /* gelu, residual */
    size_t n4 = 4 * NC;
    float *gi = rnd(n4, 19, 3.0f), *go = malloc(n4 * 4), *gd = rnd(n4, 20, 1.0f), *gg = rnd(n4, 21, 0.1f);
    round_to(gi, n4, bf16), round_to(gd, n4, bf16), round_to(gg, n4, bf16);
    float *gg0 = copy_of(gg, n4);
    void *dgi = up(gi, n4, bf16), *dgo = out_nan(n4, bf16), *dgd = up(gd, n4, bf16), *dgg = up(gg, n4, bf16);
    cpu->gelu_forward(go, gi, n4);
    o->gelu_forward(dgo, dgi, n4);
    check("gelu_forward", dgo, go, n4, bf16, 1, t_ew);
    cpu->gelu_backward(gg, gi, gd, n4, 1.0f, NULL, 0, 0.0f);
    o->gelu_backward(dgg, dgi, dgd, n4, 1.0f, NULL, 0, 0.0f);
    check_added("gelu_backward (beta 1)", dgg, gg, gg0, n4, bf16, 1, t_ew);
    float *wgg = malloc(n4 * 4);
    void *dwgg = out_nan(n4, bf16);
    cpu->gelu_backward(wgg, gi, gd, n4, 0.0f, NULL, 0, 0.0f);
    o->gelu_backward(dwgg, dgi, dgd, n4, 0.0f, NULL, 0, 0.0f);
    check("gelu_backward (beta 0, into NaN)", dwgg, wgg, n4, bf16, 1, t_ew);
    {
        /* the scalar path: the same bits (element-wise) */
        void *sgd = shifted(dgd, n4, bf16), *sout = shifted(dwgg, n4, bf16);
        o->gelu_backward(sout, dgi, sgd, n4, 0.0f, NULL, 0, 0.0f);
        void *back = out_nan(n4, bf16);
        dev->copy(dev, SR_STREAM_COMPUTE, back, sout, n4 * (bf16 ? 2 : 4));
        tap_ok(same_bits(back, dwgg, n4 * (bf16 ? 2 : 4)), "%s gelu_backward: the scalar path's bits are the packed's",
               bf16 ? "bf16" : "f32");
        unshift_free(sgd, bf16), unshift_free(sout, bf16), dev->free(dev, back);
        /* with the bias gradient of the layer before (rows of 4C): added
         * (beta 1, gbeta 1) and written into NaN (0, 0) */
        int OC4 = 4 * C;
        float *bg = rnd((size_t)OC4, 25, 0.1f), *bg0 = copy_of(bg, (size_t)OC4), *dbg = up(bg, (size_t)OC4, 0);
        float *hg = copy_of(gg0, n4);
        void *dhg = up(gg0, n4, bf16);
        cpu->gelu_backward(hg, gi, gd, n4, 1.0f, bg, OC4, 1.0f);
        o->gelu_backward(dhg, dgi, dgd, n4, 1.0f, dbg, OC4, 1.0f);
        check_added("gelu_backward (beta 1) with the bias gradient: dinp", dhg, hg, gg0, n4, bf16, 1, t_ew);
        check_added("gelu_backward (gbeta 1): the bias gradient", dbg, bg, bg0, (size_t)OC4, bf16, 0, t_ln);
        float *obg = malloc((size_t)OC4 * 4), *dobg = out_nan((size_t)OC4, 0), *dobg2 = out_nan((size_t)OC4, 0);
        void *dog = out_nan(n4, bf16), *dog2 = out_nan(n4, bf16);
        cpu->gelu_backward(hg, gi, gd, n4, 0.0f, obg, OC4, 0.0f);
        o->gelu_backward(dog, dgi, dgd, n4, 0.0f, dobg, OC4, 0.0f);
        check("gelu_backward (beta 0) with the bias gradient: dinp, into NaN", dog, hg, n4, bf16, 1, t_ew);
        check("gelu_backward (gbeta 0): the bias gradient, into NaN", dobg, obg, (size_t)OC4, bf16, 0, t_ln);
        void *sgd2 = shifted(dgd, n4, bf16);
        o->gelu_backward(dog2, dgi, sgd2, n4, 0.0f, dobg2, OC4, 0.0f);
        tap_ok(same_bits(dog, dog2, n4 * (bf16 ? 2 : 4)) && same_bits(dobg, dobg2, (size_t)OC4 * 4),
               "%s gelu_backward with the bias gradient: the scalar path's bits are the packed's (rows summed in "
               "order either way)",
               bf16 ? "bf16" : "f32");
        unshift_free(sgd2, bf16);
        free(bg), free(bg0), free(hg), free(obg);
        dev->free(dev, dbg), dev->free(dev, dhg), dev->free(dev, dobg), dev->free(dev, dobg2), dev->free(dev, dog);
        dev->free(dev, dog2);
    }
    void *dro = out_nan(n4, bf16);
    cpu->residual_forward(go, gi, gd, n4);
    o->residual_forward(dro, dgi, dgd, n4);
    check("residual_forward", dro, go, n4, bf16, 1, t_ew);

    /* classifier: losses and lse written; the backward from the CPU's lse */
    float *lg = rnd((size_t)N * Vp, 22, 4.0f);
    round_to(lg, (size_t)N * Vp, bf16);
    int *tg = malloc((size_t)N * sizeof *tg);
    for (int i = 0; i < N; i++)
        tg[i] = (i * 31 + 5) % V;
    int *dtg = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, (size_t)N * sizeof(int));
    sr_dev_upload(dev, dtg, tg, (size_t)N * sizeof(int), "upload");
    void *dlg = up(lg, (size_t)N * Vp, bf16);
    float *loss = malloc((size_t)N * 4), *lse = malloc((size_t)N * 4);
    cpu->crossentropy_forward(loss, lse, lg, tg, N, V, Vp);
    float *dloss_p = out_nan((size_t)N, 0), *dlse = out_nan((size_t)N, 0);
    o->crossentropy_forward(dloss_p, dlse, dlg, dtg, N, V, Vp);
    check("crossentropy_forward losses", dloss_p, loss, (size_t)N, bf16, 0, bf16 ? 2e-3 : 1e-6);
    check("crossentropy_forward lse", dlse, lse, (size_t)N, bf16, 0, bf16 ? 2e-3 : 1e-6);
    float *lse_in = up(lse, (size_t)N, 0);
    float dl = 1.0f / N;
    cpu->crossentropy_backward(lg, lse, tg, dl, N, V, Vp);
    o->crossentropy_backward(dlg, lse_in, dtg, dl, N, V, Vp);
    check("crossentropy_backward dlogits", dlg, lg, (size_t)N * Vp, bf16, 1, bf16 ? 2e-2 : 1e-5);
    xent_fused_vs_cpu(o, bf16, N, V, Vp, 22);
    /* GPT-2's vocabulary: the row cached in shared memory in bf16 (100.6
     * KB, past 48 KiB: the attribute), re-read in f32 (201 KB) */
    xent_fused_vs_cpu(o, bf16, 3, 50257, 50304, 41);
    sr_status st = o->take_error();
    tap_ok(st == SR_OK, "%s ops: no CUDA error (%s)", bf16 ? "bf16" : "f32", st == SR_OK ? "none" : sr_error_message());
    free(inp), free(wte), free(wpe), free(enc), free(dout), free(gwte), free(gwpe), free(gwte0), free(gwpe0);
    free(x), free(w), free(b), free(y), free(mean), free(rstd), free(gx), free(gw), free(gb), free(gx0), free(gw0);
    free(gb0), free(W), free(bias), free(bias_shifted), free(mo), free(mdout), free(mdin), free(mdw), free(mdb);
    free(mdin0), free(mdw0), free(mdb0), free(lh), free(ldout), free(ldin), free(ldw), free(ldin0), free(ldw0);
    free(att), free(ao), free(dq), free(dq0), free(gi), free(go), free(gd), free(gg), free(gg0), free(lg), free(tg);
    free(wdin), free(wdw), free(wdb), free(wgg), free(owpe), free(ogx), free(ogw), free(ogb), free(ogs), free(gs),
        free(gs0);
    free(loss), free(lse);
}

/* The Llama family's ops (RMSNorm, RoPE with Llama-3 scaling, SwiGLU,
 * grouped-query attention) at B sequences of T tokens, NH query heads of
 * hs on NKV key/value heads, SwiGLU width F; GPT-2's attention above is
 * the same code with NKV == NH.  RoPE works in place, so its output
 * cannot start as NaN: the whole qkv buffer (values included, which it
 * must leave alone) is compared with the CPU's, and a launcher that does
 * nothing fails. */
static void llama_ops_at(int bf16, int B, int T, int NH, int NKV, int hs, int F) {
    const sr_ops *o = bf16 ? &sr_ops_cuda_bf16 : &sr_ops_cuda_f32, *cpu = &sr_ops_cpu;
    int N = B * T, C = NH * hs, W = (NH + 2 * NKV) * hs;
    size_t NC = (size_t)N * C, NW = (size_t)N * W, NF = (size_t)N * F;
    double t_ew = bf16 ? 1e-2 : 2e-6, t_ln = bf16 ? 2e-2 : 1e-5;
    tap_diag("%s Llama ops at B=%d T=%d NH=%d NKV=%d hs=%d (C %d) F=%d", bf16 ? "bf16" : "f32", B, T, NH, NKV, hs, C,
             F);
    bind_ws(o, B, T, C, NH);

    /* the token embedding alone (rotary positions: wpe and dwpe NULL) */
    int V = 64;
    int *tok = malloc((size_t)N * sizeof *tok);
    for (int i = 0; i < N; i++)
        tok[i] = (i * 37 + i / 5) % V;
    int *dtok = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, (size_t)N * sizeof(int));
    sr_dev_upload(dev, dtok, tok, (size_t)N * sizeof(int), "upload");
    float *wte = rnd((size_t)V * C, 30, 0.1f), *enc = malloc(NC * 4), *gwte = rnd((size_t)V * C, 29, 1.0f);
    round_to(wte, (size_t)V * C, bf16);
    float *gwte0 = copy_of(gwte, (size_t)V * C), *dgwte = up(gwte, (size_t)V * C, 0);
    void *dwte = up(wte, (size_t)V * C, bf16), *denc = out_nan(NC, bf16);
    cpu->encoder_forward(enc, tok, wte, NULL, B, T, C);
    o->encoder_forward(denc, dtok, dwte, NULL, B, T, C);
    check("encoder_forward (no positions: wpe NULL)", denc, enc, NC, bf16, 1, t_ew);

    /* RMSNorm: out and rstd written; the backward from the CPU's rstd */
    float *x = rnd(NC, 31, 1.0f), *w = rnd((size_t)C, 32, 1.0f), *dout = rnd(NC, 33, 1.0f);
    round_to(x, NC, bf16), round_to(w, (size_t)C, bf16), round_to(dout, NC, bf16);
    void *dx = up(x, NC, bf16), *dw = up(w, (size_t)C, bf16), *ddout = up(dout, NC, bf16);
    float *y = malloc(NC * 4), *rstd = malloc((size_t)N * 4);
    cpu->rmsnorm_forward(y, rstd, x, w, 1e-5f, N, C);
    void *dy = out_nan(NC, bf16);
    float *drstd = out_nan((size_t)N, 0);
    o->rmsnorm_forward(dy, drstd, dx, dw, 1e-5f, N, C);
    check("rmsnorm_forward", dy, y, NC, bf16, 1, t_ln);
    check("rmsnorm_forward rstd", drstd, rstd, (size_t)N, bf16, 0, t_ln);
    float *rstd_in = up(rstd, (size_t)N, 0);
    float *gx = rnd(NC, 34, 0.1f), *gw = rnd((size_t)C, 35, 0.1f);
    round_to(gx, NC, bf16);
    float *gx0 = copy_of(gx, NC), *gw0 = copy_of(gw, (size_t)C);
    void *dgx = up(gx, NC, bf16);
    float *dgw = up(gw, (size_t)C, 0);
    cpu->rmsnorm_backward(gx, gw, dout, x, w, rstd, N, C, 1.0f, 1.0f);
    o->rmsnorm_backward(dgx, dgw, ddout, dx, dw, rstd_in, N, C, 1.0f, 1.0f);
    check_added("rmsnorm_backward dinp", dgx, gx, gx0, NC, bf16, 1, t_ln);
    check_added("rmsnorm_backward dw", dgw, gw, gw0, (size_t)C, bf16, 0, t_ln);
    /* the overwrite forms (beta, gbeta 0): written into NaN */
    float *ogx = malloc(NC * 4), *ogw = malloc((size_t)C * 4);
    void *dogx = out_nan(NC, bf16);
    float *dogw = out_nan((size_t)C, 0);
    cpu->rmsnorm_backward(ogx, ogw, dout, x, w, rstd, N, C, 0.0f, 0.0f);
    o->rmsnorm_backward(dogx, dogw, ddout, dx, dw, rstd_in, N, C, 0.0f, 0.0f);
    check("rmsnorm_backward dinp (beta 0, into NaN)", dogx, ogx, NC, bf16, 1, t_ln);
    check("rmsnorm_backward dw (gbeta 0, into NaN)", dogw, ogw, (size_t)C, bf16, 0, t_ln);
    {
        /* run to run, the scalar path, the residual form */
        void *dogx2 = out_nan(NC, bf16);
        float *dogw2 = out_nan((size_t)C, 0);
        o->rmsnorm_backward(dogx2, dogw2, ddout, dx, dw, rstd_in, N, C, 0.0f, 0.0f);
        tap_ok(same_bits(dogx, dogx2, NC * (bf16 ? 2 : 4)) && same_bits(dogw, dogw2, (size_t)C * 4),
               "%s rmsnorm_backward: a second run is bitwise the first (dinp, dw)", bf16 ? "bf16" : "f32");
        void *sdout = shifted(ddout, NC, bf16);
        o->rmsnorm_backward(dogx2, dogw2, sdout, dx, dw, rstd_in, N, C, 0.0f, 0.0f);
        check("rmsnorm_backward dinp (scalar path)", dogx2, ogx, NC, bf16, 1, t_ln);
        check("rmsnorm_backward dw (scalar path)", dogw2, ogw, (size_t)C, bf16, 0, t_ln);
        unshift_free(sdout, bf16);
        float *ra = rnd(NC, 36, 1.0f);
        round_to(ra, NC, bf16);
        void *dra = up(ra, NC, bf16), *res1 = out_nan(NC, bf16), *res2 = out_nan(NC, bf16);
        void *y1 = out_nan(NC, bf16), *y2 = out_nan(NC, bf16);
        float *r1 = out_nan((size_t)N, 0), *r2 = out_nan((size_t)N, 0);
        o->residual_forward(res1, dra, dx, NC);
        o->rmsnorm_forward(y1, r1, res1, dw, 1e-5f, N, C);
        o->residual_rmsnorm_forward(res2, y2, r2, dra, dx, dw, 1e-5f, N, C);
        tap_ok(same_bits(res1, res2, NC * (bf16 ? 2 : 4)) && same_bits(y1, y2, NC * (bf16 ? 2 : 4)) &&
                   same_bits(r1, r2, (size_t)N * 4),
               "%s residual_rmsnorm_forward: bitwise residual_forward then rmsnorm_forward (sum, output, rstd)",
               bf16 ? "bf16" : "f32");
        float *cres = malloc(NC * 4), *cy = malloc(NC * 4), *cr = malloc((size_t)N * 4);
        cpu->residual_rmsnorm_forward(cres, cy, cr, ra, x, w, 1e-5f, N, C);
        check("residual_rmsnorm_forward out", y2, cy, NC, bf16, 1, t_ln);
        free(ra), free(cres), free(cy), free(cr);
        dev->free(dev, dra), dev->free(dev, res1), dev->free(dev, res2), dev->free(dev, y1), dev->free(dev, y2);
        dev->free(dev, r1), dev->free(dev, r2), dev->free(dev, dogx2), dev->free(dev, dogw2);
    }
    free(ogx), free(ogw);
    cpu->encoder_backward(gwte, NULL, dout, tok, B, T, C, 1.0f);
    o->encoder_backward(dgwte, NULL, ddout, dtok, B, T, C, 1.0f);
    check_added("encoder_backward dwte (dwpe NULL)", dgwte, gwte, gwte0, (size_t)V * C, bf16, 0, t_ew);

    /* RoPE with Llama-3.2's scaling (factor 32, 1/4, 8192; theta 500000),
     * the table as the model builds it */
    sr_model_dims d = {
        .C = C,
        .NH = NH,
        .T = T,
        .rope_theta = 500000.0,
        .rope = {.factor = 32.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 8192}};
    float *cs = malloc((size_t)T * hs * 4);
    sr_model_rope_table(&d, cs);
    float *dcs = up(cs, (size_t)T * hs, 0);
    float *qkv = rnd(NW, 36, 1.0f);
    round_to(qkv, NW, bf16);
    float *rq = copy_of(qkv, NW);
    void *drq = up(qkv, NW, bf16);
    cpu->rope_forward(rq, cs, B, T, NH, NKV, hs);
    o->rope_forward(drq, dcs, B, T, NH, NKV, hs);
    check("rope_forward (in place; values untouched)", drq, rq, NW, bf16, 1, t_ew);
    float *rg = rnd(NW, 37, 1.0f);
    round_to(rg, NW, bf16);
    void *drg = up(rg, NW, bf16);
    cpu->rope_backward(rg, cs, B, T, NH, NKV, hs);
    o->rope_backward(drg, dcs, B, T, NH, NKV, hs);
    check("rope_backward (in place)", drg, rg, NW, bf16, 1, t_ew);

    /* SwiGLU over gu[N, 2F] */
    float *gu = rnd(2 * NF, 38, 3.0f), *so = malloc(NF * 4), *sd = rnd(NF, 39, 1.0f), *sg = rnd(2 * NF, 40, 0.1f);
    round_to(gu, 2 * NF, bf16), round_to(sd, NF, bf16), round_to(sg, 2 * NF, bf16);
    float *sg0 = copy_of(sg, 2 * NF);
    void *dgu = up(gu, 2 * NF, bf16), *dso = out_nan(NF, bf16), *dsd = up(sd, NF, bf16), *dsg = up(sg, 2 * NF, bf16);
    cpu->swiglu_forward(so, gu, N, F);
    o->swiglu_forward(dso, dgu, N, F);
    check("swiglu_forward", dso, so, NF, bf16, 1, t_ew);
    cpu->swiglu_backward(sg, sd, gu, N, F, 1.0f);
    o->swiglu_backward(dsg, dsd, dgu, N, F, 1.0f);
    check_added("swiglu_backward (gate and up, beta 1)", dsg, sg, sg0, 2 * NF, bf16, 1, t_ew);
    float *wsg = malloc(2 * NF * 4);
    void *dwsg = out_nan(2 * NF, bf16);
    cpu->swiglu_backward(wsg, sd, gu, N, F, 0.0f);
    o->swiglu_backward(dwsg, dsd, dgu, N, F, 0.0f);
    check("swiglu_backward (gate and up, beta 0, into NaN)", dwsg, wsg, 2 * NF, bf16, 1, t_ew);
    {
        /* the scalar path (buffers off a 16-byte boundary) writes the
         * packed path's bits, and a second run the first's: SwiGLU both
         * ways, RoPE (in place) on a shifted copy of the queries */
        void *sdsd = shifted(dsd, NF, bf16), *sw = shifted(dwsg, 2 * NF, bf16), *back = out_nan(2 * NF, bf16);
        o->swiglu_backward(sw, sdsd, dgu, N, F, 0.0f);
        dev->copy(dev, SR_STREAM_COMPUTE, back, sw, 2 * NF * (bf16 ? 2 : 4));
        void *dwsg2 = out_nan(2 * NF, bf16);
        o->swiglu_backward(dwsg2, dsd, dgu, N, F, 0.0f);
        tap_ok(same_bits(back, dwsg, 2 * NF * (bf16 ? 2 : 4)) && same_bits(dwsg2, dwsg, 2 * NF * (bf16 ? 2 : 4)),
               "%s swiglu_backward: the scalar path's bits are the packed path's, a second run's the first's",
               bf16 ? "bf16" : "f32");
        void *rq1 = up(qkv, NW, bf16), *rq2 = shifted(rq1, NW, bf16), *rq3 = out_nan(NW, bf16);
        o->rope_forward(rq1, dcs, B, T, NH, NKV, hs);
        o->rope_forward(rq2, dcs, B, T, NH, NKV, hs);
        dev->copy(dev, SR_STREAM_COMPUTE, rq3, rq2, NW * (bf16 ? 2 : 4));
        tap_ok(same_bits(rq1, rq3, NW * (bf16 ? 2 : 4)),
               "%s rope_forward: the scalar path's bits are the packed path's", bf16 ? "bf16" : "f32");
        unshift_free(sdsd, bf16), unshift_free(sw, bf16), unshift_free(rq2, bf16);
        dev->free(dev, back), dev->free(dev, dwsg2), dev->free(dev, rq1), dev->free(dev, rq3);
    }

    /* grouped-query attention: out and the saved probabilities written;
     * the backward from the CPU's probabilities, into dqkv (+=) */
    size_t attn = (size_t)B * NH * T * T;
    float *att = malloc(attn * 4), *ao = malloc(NC * 4);
    cpu->gqa_attention_forward(ao, att, qkv, B, T, NH, NKV, hs);
    void *dqkv_in = up(qkv, NW, bf16);
    void *datt = out_nan(o->attention_save_bytes(B, T, NH) / (bf16 ? 2 : 4), bf16), *dao = out_nan(NC, bf16);
    o->gqa_attention_forward(dao, datt, dqkv_in, B, T, NH, NKV, hs);
    check("gqa_attention_forward", dao, ao, NC, bf16, 1, t_ln);
    check("gqa_attention_forward probabilities", datt, att, attn, bf16, 1, t_ln);
    round_to(att, attn, bf16);
    void *att_in = up(att, attn, bf16);
    float *dq = rnd(NW, 41, 0.1f);
    round_to(dq, NW, bf16);
    float *dq0 = copy_of(dq, NW);
    void *ddq = up(dq, NW, bf16);
    cpu->gqa_attention_backward(dq, dout, NULL, qkv, att, B, T, NH, NKV, hs);
    o->gqa_attention_backward(ddq, ddout, NULL, dqkv_in, att_in, B, T, NH, NKV, hs);
    check_added("gqa_attention_backward (q, k and v heads)", ddq, dq, dq0, NW, bf16, 1, t_ln);
    sr_status st = o->take_error();
    tap_ok(st == SR_OK, "%s Llama ops: no CUDA error (%s)", bf16 ? "bf16" : "f32",
           st == SR_OK ? "none" : sr_error_message());
    free(tok), free(wte), free(enc), free(gwte), free(gwte0);
    free(x), free(w), free(dout), free(y), free(rstd), free(gx), free(gw), free(gx0), free(gw0), free(cs), free(qkv);
    free(rq), free(rg), free(gu), free(so), free(sd), free(sg), free(sg0), free(att), free(ao), free(dq), free(dq0);
    free(wsg);
}

/* The reference log-sum-exp of every row's scaled, causal scores (in
 * double, from the same bf16 inputs): flash attention's saved statistic
 * has no counterpart in the CPU op. */
static float *lse_ref(const float *qkv, int B, int T, int NH, int NKV, int hs) {
    int W = (NH + 2 * NKV) * hs, R = NH / NKV;
    float *l = malloc((size_t)B * NH * T * 4);
    double *s = malloc((size_t)T * sizeof *s), scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + (size_t)(NH + h / R) * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += (double)q[i] * k[i];
                    s[j] = d * scale;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += exp(s[j] - mx);
                l[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
    free(s);
    return l;
}

/* Flash attention (the bf16 flash table, kernels/flash.cu) at B sequences
 * of T tokens, NH query heads on NKV key/value heads of hs (through the
 * GPT-2 entry when NKV == NH and `mha`), against the CPU op on the same
 * bf16 inputs: the output and the rows' log-sum-exps written into NaN, the
 * backward (dq, dk, dv assigned: every element of a dqkv of NaN written)
 * from the GPU's own output and LSE, as the model runs it; then the
 * backward again: bitwise the first (no atomics). */
static void flash_at(int B, int T, int NH, int NKV, bool mha, int hs) {
    const char *only = getenv("SHARDRUN_TEST_FLASH_HS"); /* one head dim (tests/mutants.sh) */
    if (only && *only && atoi(only) != hs)
        return;
    const sr_ops *o = &sr_ops_cuda_bf16_flash, *cpu = &sr_ops_cpu;
    char name[3][80]; /* the checks' names carry the head dim (tests/mutants.sh asks for each) */
    snprintf(name[0], sizeof name[0], "flash attention forward (hs %d): out", hs);
    snprintf(name[1], sizeof name[1], "flash attention forward (hs %d): log-sum-exp", hs);
    snprintf(name[2], sizeof name[2], "flash attention backward (hs %d; q, k and v heads)", hs);
    int C = NH * hs, W = (NH + 2 * NKV) * hs;
    size_t NC = (size_t)B * T * C, NW = (size_t)B * T * W, NL = (size_t)B * NH * T, attn = (size_t)B * NH * T * T;
    double tol = 2e-2;
    tap_diag("flash attention at B=%d T=%d NH=%d NKV=%d hs=%d%s", B, T, NH, NKV, hs, mha ? " (the GPT-2 entry)" : "");
    bind_ws(o, B, T, C, NH);
    float *qkv = rnd(NW, 50 + T, 2.0f), *dout = rnd(NC, 51 + T, 1.0f), *dq = calloc(NW, sizeof(float));
    round_to(qkv, NW, 1), round_to(dout, NC, 1);
    float *att = malloc(attn * 4), *ao = malloc(NC * 4), *lse = lse_ref(qkv, B, T, NH, NKV, hs);
    cpu->gqa_attention_forward(ao, att, qkv, B, T, NH, NKV, hs);
    void *dqkv = up(qkv, NW, 1), *ddout = up(dout, NC, 1), *dao = out_nan(NC, 1);
    float *dlse = out_nan(NL, 0);
    tap_ok(o->attention_save_bytes(B, T, NH) == NL * sizeof(float),
           "flash attention saves the rows' log-sum-exps, B x NH x T floats (%zu bytes), nothing T x T",
           o->attention_save_bytes(B, T, NH));
    if (mha)
        o->attention_forward(dao, dlse, dqkv, B, T, C, NH);
    else
        o->gqa_attention_forward(dao, dlse, dqkv, B, T, NH, NKV, hs);
    check(name[0], dao, ao, NC, 1, 1, tol);
    check(name[1], dlse, lse, NL, 1, 0, 1e-5);
    cpu->gqa_attention_backward(dq, dout, NULL, qkv, att, B, T, NH, NKV, hs);
    void *g[2];
    tap_ok(o->attention_backward_assigns, "flash attention's backward assigns dqkv (the model zeroes nothing)");
    /* GPT-2's entry sums the qkv bias gradient as it writes dqkv: written
     * into NaN the first time, added the second */
    float *hbias = calloc((size_t)W, 4), *dbias[2] = {out_nan((size_t)W, 0), out_nan((size_t)W, 0)};
    for (int k = 0; k < 2; k++) {
        g[k] = out_nan(NW, 1);
        if (mha)
            o->attention_backward(g[k], ddout, dao, dqkv, dlse, B, T, C, NH, dbias[k], 0.0f);
        else
            o->gqa_attention_backward(g[k], ddout, dao, dqkv, dlse, B, T, NH, NKV, hs);
    }
    check(name[2], g[0], dq, NW, 1, 1, tol);
    uint16_t *b0 = malloc(NW * 2), *b1 = malloc(NW * 2);
    fetch(b0, g[0], NW * 2);
    fetch(b1, g[1], NW * 2);
    tap_ok(memcmp(b0, b1, NW * 2) == 0, "flash attention backward: a second run is bitwise the first");
    if (mha) {
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int j = 0; j < W; j++)
                hbias[j] += dq[r * W + j];
        check("flash attention backward: the qkv bias gradient (gbeta 0, into NaN)", dbias[0], hbias, (size_t)W, 1, 0,
              tol);
        tap_ok(same_bits(dbias[0], dbias[1], (size_t)W * 4), "...bitwise the same on a second run");
        float *twice = malloc((size_t)W * 4);
        for (int j = 0; j < W; j++)
            twice[j] = 2 * hbias[j];
        o->attention_backward(g[1], ddout, dao, dqkv, dlse, B, T, C, NH, dbias[1], 1.0f);
        check("flash attention backward: the qkv bias gradient's += form (gbeta 1) doubles it", dbias[1], twice,
              (size_t)W, 1, 0, tol);
        free(twice);
    }
    dev->free(dev, dbias[0]), dev->free(dev, dbias[1]), free(hbias);
    sr_status st = o->take_error();
    tap_ok(st == SR_OK, "flash attention: no CUDA error (%s)", st == SR_OK ? "none" : sr_error_message());
    free(qkv), free(dout), free(dq), free(att), free(ao), free(lse), free(b0), free(b1);
}

/* Step-path downloads: through the pinned bounce buffer; a larger one into
 * pageable memory refused (70, naming the site) under SHARDRUN_CUDA_SYNC=1,
 * into pinned memory accepted. */
static void step_downloads(void) {
    sr_cuda_ctx *cx = sr_dev_cuda_ctx(dev);
    bool was = cx->sync_each;
    cx->sync_each = true;
    size_t big = dev->bounce_bytes * 2;
    void *src = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, big);
    dev->memset(dev, SR_STREAM_D2H, src, 0, big);
    double two[2] = {1.0, 1.0};
    sr_status st = sr_dev_download_step(dev, two, src, sizeof two, "step_scalars");
    tap_ok(st == SR_OK && two[0] == 0.0 && two[1] == 0.0, "a step-path download of 16 bytes goes through the bounce "
                                                          "buffer into pageable memory");
    char *pageable = malloc(big);
    st = sr_dev_download_step(dev, pageable, src, big, "step_scalars");
    const char *msg = sr_error_message();
    tap_ok(st == SR_ERR_INTERNAL && strstr(msg, "step_scalars") && strstr(msg, "pageable"),
           "SHARDRUN_CUDA_SYNC=1: a step-path download of %zu bytes into pageable memory is refused, 70 naming the "
           "site (%s)",
           big, msg);
    void *pinned = dev->alloc(dev, SR_SPACE_PINNED, SR_MEM_OTHER, big);
    st = sr_dev_download_step(dev, pinned, src, big, "step_scalars");
    tap_ok(st == SR_OK, "... and into pinned memory accepted");
    dev->free(dev, pinned);
    dev->free(dev, src);
    free(pageable);
    cx->sync_each = was;
}

/* the device table's primitives against the cpu table's */
static void primitives(void) {
    size_t n = 100003;
    float *a = rnd(n, 30, 2.0f), *c = rnd(n, 31, 2.0f);
    float *da = up(a, n, 0), *dc = up(c, n, 0);
    sr_dev *cpu = sr_dev_cpu_open();
    uint16_t *hb = malloc(n * 2), *gb = malloc(n * 2);
    void *db16 = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, n * 2);
    dev->cast_f32_bf16(dev, SR_STREAM_COMM, db16, da, n);
    cpu->cast_f32_bf16(cpu, SR_STREAM_COMM, hb, a, n);
    fetch(gb, db16, n * 2);
    tap_ok(memcmp(hb, gb, n * 2) == 0, "cast_f32_bf16: bitwise the host's rounding");
    {
        /* off a 16-byte boundary: the element path, the same bits */
        float *sa = shifted(da, n, 0);
        void *sb = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, n * 2);
        dev->cast_f32_bf16(dev, SR_STREAM_COMPUTE, sb, sa, n); /* (on the stream that made the copy) */
        fetch(gb, sb, n * 2);
        tap_ok(memcmp(hb, gb, n * 2) == 0, "cast_f32_bf16 from an unaligned source: bitwise the host's rounding");
        unshift_free(sa, 0);
        dev->free(dev, sb);
    }
    float *acc = malloc(n * 4), *gacc = malloc(n * 4);
    memcpy(acc, c, n * 4);
    cpu->fold_bf16(cpu, SR_STREAM_COMM, acc, hb, n, true);
    dev->fold_bf16(dev, SR_STREAM_COMM, dc, db16, n, true);
    fetch(gacc, dc, n * 4);
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "fold_bf16 (add): bitwise the host's");
    cpu->fold_bf16(cpu, SR_STREAM_COMM, acc, hb, n, false);
    dev->fold_bf16(dev, SR_STREAM_COMM, dc, db16, n, false);
    fetch(gacc, dc, n * 4);
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "fold_bf16 (set): bitwise the host's");
    cpu->add_f32(cpu, SR_STREAM_COMM, acc, a, n);
    dev->add_f32(dev, SR_STREAM_COMM, dc, da, n);
    fetch(gacc, dc, n * 4);
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "add_f32: bitwise the host's");
    double hs, gs1, gs2, *ds = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, 2 * sizeof(double));
    cpu->sum_squares(cpu, SR_STREAM_COMPUTE, &hs, a, n);
    dev->sum_squares(dev, SR_STREAM_COMPUTE, ds, da, n);
    fetch(&gs1, ds, sizeof gs1);
    dev->sum_squares(dev, SR_STREAM_COMPUTE, ds, da, n);
    fetch(&gs2, ds, sizeof gs2);
    tap_ok(fabs(gs1 - hs) <= 1e-12 * hs && memcmp(&gs1, &gs2, sizeof gs1) == 0,
           "sum_squares: %.17g vs host %.17g, and bitwise the same twice", gs1, hs);
    double hl = 1.5, gl;
    dev->memset(dev, SR_STREAM_COMPUTE, ds, 0, sizeof(double));
    sr_dev_upload(dev, ds, &hl, sizeof hl, "upload");
    cpu->loss_sum(cpu, SR_STREAM_COMPUTE, &hl, a, n, true);
    dev->loss_sum(dev, SR_STREAM_COMPUTE, ds, da, n, true);
    fetch(&gl, ds, sizeof gl);
    tap_is_close(gl, hl, 1e-9, 1e-9, "loss_sum adds to the accumulator: %.17g vs host %.17g", gl, hl);
    double nan_acc = NAN, hw = NAN, gw;
    sr_dev_upload(dev, ds, &nan_acc, sizeof nan_acc, "upload");
    cpu->loss_sum(cpu, SR_STREAM_COMPUTE, &hw, a, n, false);
    dev->loss_sum(dev, SR_STREAM_COMPUTE, ds, da, n, false);
    fetch(&gw, ds, sizeof gw);
    tap_is_close(gw, hw, 1e-9, 1e-9, "loss_sum's overwrite form (add false) writes over NaN: %.17g vs host %.17g", gw,
                 hw);
    /* AdamW: bitwise, decaying and not */
    float *p = rnd(n, 32, 1.0f), *g = rnd(n, 33, 0.01f), *m = rnd(n, 34, 0.001f), *v = rnd(n, 35, 1e-4f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *dp = up(p, n, 0), *dg = up(g, n, 0), *dm = up(m, n, 0), *dv = up(v, n, 0);
    /* the shard's shape: many small segments (biases, norms) and large
     * ones, decaying and not, blocks spanning several segments, a gap of
     * padding that stays untouched; one launch over all of them */
    size_t lens[9] = {768, 768, 2359296 / 64, 2304, 768, 5000, 17, n / 2, 0}, gap = 100;
    sr_adamw_segment segs[9];
    int ns = 0;
    size_t off = 0, start = 0;
    for (int i = 0; i < 8 && off + lens[i] <= n; i++) {
        if (i == 6)
            off += gap; /* padding before the 17-element segment */
        if (off + lens[i] > n)
            break;
        segs[ns++] = (sr_adamw_segment){off, lens[i], start, i % 3 != 1};
        off += lens[i];
        start += lens[i];
    }
    sr_adamw_segment *dsegs = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, sizeof segs);
    sr_dev_upload(dev, dsegs, segs, sizeof segs, "upload");
    uint16_t *h16 = calloc(n, 2), *g16 = malloc(n * 2);
    void *d16 = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, n * 2);
    dev->memset(dev, SR_STREAM_COMPUTE, d16, 0, n * 2);
    sr_adamw_launch hl_ = {.params = p,
                           .grads = g,
                           .m = m,
                           .v = v,
                           .segs = segs,
                           .nsegs = ns,
                           .params16 = h16,
                           .a = {0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 6e-4f, 0, 0.7f},
                           .weight_decay = 0.1f};
    sr_adamw_launch dl_ = hl_;
    dl_.params = dp, dl_.grads = dg, dl_.m = dm, dl_.v = dv, dl_.dsegs = dsegs, dl_.params16 = d16;
    long long launches = sr_cuda_calls[SR_CUDA_L_adamw];
    cpu->adamw(cpu, SR_STREAM_COMPUTE, &hl_);
    dev->adamw(dev, SR_STREAM_COMPUTE, &dl_);
    tap_ok(sr_cuda_calls[SR_CUDA_L_adamw] - launches == 1, "adamw: %d segments of the shard in one launch (%lld)", ns,
           sr_cuda_calls[SR_CUDA_L_adamw] - launches);
    float *gp = malloc(n * 4), *gm = malloc(n * 4), *gv = malloc(n * 4);
    fetch(gp, dp, n * 4);
    fetch(gm, dm, n * 4);
    fetch(gv, dv, n * 4);
    fetch(g16, d16, n * 2);
    tap_ok(memcmp(gp, p, n * 4) == 0 && memcmp(gm, m, n * 4) == 0 && memcmp(gv, v, n * 4) == 0,
           "adamw (-fmad=false): params, m and v bitwise the host's, the padding between segments untouched");
    tap_ok(memcmp(g16, h16, n * 2) == 0, "adamw: the bf16 copy it writes is bitwise the host's cast of the update "
                                         "(the padding's zeros untouched)");
    dev->free(dev, dsegs), dev->free(dev, d16);
    free(h16), free(g16);
    /* events order streams */
    sr_event ev = {0};
    dev->memset(dev, SR_STREAM_COMM, da, 0, n * 4);
    dev->record(dev, &ev, SR_STREAM_COMM);
    sr_dev_wait(dev, SR_STREAM_COMPUTE, &ev, "reduce_done");
    dev->copy(dev, SR_STREAM_COMPUTE, dc, da, n * 4);
    fetch(gacc, dc, n * 4);
    bool zero = true;
    for (size_t i = 0; i < n; i++)
        zero = zero && gacc[i] == 0.0f;
    tap_ok(zero, "a wait on a comm event orders compute after it (memset, then copy)");
    tap_ok(sr_k_spin(NULL, 1000) == 0 && dev->sync(dev, SR_STREAM_COMPUTE) == SR_OK, "the spin kernel runs");
    sr_device_close(cpu);
    free(a), free(c), free(hb), free(gb), free(acc), free(gacc), free(p), free(g), free(m), free(v), free(gp);
    free(gm), free(gv);
}

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        const char *req = getenv("SHARDRUN_TEST_REQUIRE");
        char why[200];
        snprintf(why, sizeof why, "no GPU: cudaGetDeviceCount says %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        if (req && strstr(req, "gpu")) {
            tap_ok(0, "SHARDRUN_TEST_REQUIRE has gpu, but %s", why);
            return tap_done();
        }
        printf("1..0 # SKIP %s\n", why);
        return 0;
    }
    if (!tap_ok(sr_dev_cuda_open(&dev, 0, "0") == SR_OK, "the cuda table opens on GPU 0: %s",
                dev ? dev->line : sr_error_message()))
        return tap_done();
    /* the CPU references on every core: the real shapes' GEMMs on one
     * thread took the GPU check's ops stage past its budget */
    tap_diag("CPU reference ops on %d threads", sr_ops_set_threads(0));
    dev->timeout_s = 60;
    const char *skip = getenv("SHARDRUN_TEST_KERNEL_SKIP");
    if (skip && *skip) {
        int known = 0;
        for (int i = 0; i < SR_CUDA_NLAUNCHERS; i++)
            known += strcmp(skip, sr_cuda_launcher_names[i]) == 0;
        if (!tap_ok(known == 1, "SHARDRUN_TEST_KERNEL_SKIP=%s names a launcher of sr_cuda.h", skip))
            return tap_done();
        tap_diag("SHARDRUN_TEST_KERNEL_SKIP=%s: that launcher launches nothing; this test must fail", skip);
    }
    int plans_after_first = 0;
    /* the emulator runs the Llama family's real dimensions in seconds: an
     * emulator tree checks them by default (CI's sanitizer tree) */
    const char *real = getenv("SHARDRUN_TEST_REAL_SHAPES");
#ifdef SR_CUDA_EMULATED
    real = real ? real : "llama";
#else
    real = real ? real : "0";
#endif
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        ops_at(bf16, 2, 16, 64, 4, 300);
        llama_ops_at(bf16, 2, 16, 4, 2, 16, 96); /* two query heads per kv head */
        llama_ops_at(bf16, 1, 8, 4, 1, 8, 40);   /* one kv head (multi-query) */
        if (strcmp(real, "1") == 0)
            ops_at(bf16, 8, 1024, 768, 12, 50257);
        if (strcmp(real, "1") == 0 || strcmp(real, "llama") == 0) {
            llama_ops_at(bf16, 1, 256, 12, 4, 64, 2048); /* llama-125m */
            llama_ops_at(bf16, 1, 256, 32, 8, 64, 8192); /* Llama-3.2-1B */
        }
    }
    /* flash attention: a tail tile (T not a multiple of 64) with two query
     * heads per kv head; one kv head with T under a tile; NKV == NH over
     * three tiles through GPT-2's entry; head dim 128 (Llama-3.1-8B's):
     * grouped over three tiles with a tail, and GPT-2's entry over two */
    flash_at(2, 80, 4, 2, false, 64);
    flash_at(1, 40, 2, 1, false, 64);
    flash_at(2, 130, 2, 2, true, 64);
    flash_at(1, 150, 4, 2, false, 128);
    flash_at(1, 70, 2, 2, true, 128);
    if (strcmp(real, "1") == 0) {
        flash_at(4, 1024, 12, 12, true, 64);  /* gpt2-124m */
        flash_at(2, 1024, 12, 4, false, 64);  /* llama-125m */
        flash_at(1, 2048, 32, 8, false, 64);  /* Llama-3.2-1B */
        flash_at(1, 2048, 32, 8, false, 128); /* Llama-3.1-8B's heads (T 2048: the CPU op's T x T) */
    }
    plans_after_first = sr_gemm_cache_size(sr_dev_cuda_ctx(dev)->gemm);
    for (int bf16 = 0; bf16 <= 1; bf16++) /* the same shapes again: every plan reused */
        ops_at(bf16, 2, 16, 64, 4, 300);
    tap_ok(sr_gemm_cache_size(sr_dev_cuda_ctx(dev)->gemm) == plans_after_first,
           "the same GEMM shapes a second time build no plan: %d plans, one per distinct shape",
           sr_gemm_cache_size(sr_dev_cuda_ctx(dev)->gemm));
    step_downloads();
    primitives();
    sr_check_primitives(getenv("SR_SRCDIR")); /* mma.cuh's primitives against the PTX ISA's tables */
    tap_ok(sr_cuda_bound() == sr_dev_cuda_ctx(dev) && sr_gemm_cache_size(sr_dev_cuda_ctx(dev)->gemm) >= 8,
           "the table's context is bound to this thread; its plan cache kept %d plans",
           sr_gemm_cache_size(sr_dev_cuda_ctx(dev)->gemm));
    int missing = 0;
    for (int i = 0; i < SR_CUDA_NLAUNCHERS; i++)
        if (sr_cuda_calls[i] == 0) {
            tap_diag("launcher %s was never called", sr_cuda_launcher_names[i]);
            missing++;
        }
    tap_ok(missing == 0, "every one of the %d launchers was reached by this test", SR_CUDA_NLAUNCHERS);
    /* the host wait's schedule: spin for 1 ms, then sleep at most 50 us */
    tap_ok(sr_cuda_poll_pause_us(0) == 0 && sr_cuda_poll_pause_us(SR_CUDA_SPIN_NS - 1) == 0 &&
               sr_cuda_poll_pause_us(SR_CUDA_SPIN_NS) > 0 && sr_cuda_poll_pause_us(SR_CUDA_SPIN_NS) <= 50 &&
               sr_cuda_poll_pause_us(3600ull * 1000000000ull) <= 50,
           "a host wait spins its first millisecond, then sleeps at most 50 us between polls");
    tap_ok(dev->sync(dev, SR_STREAM_COMPUTE) == SR_OK, "no CUDA error at the end");
    sr_dev_cuda_close(dev);
    return tap_done();
}
