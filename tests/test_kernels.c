/* test_kernels.c — every CUDA op and device-table primitive against the CPU
 * op, in both modes (exact f32, bf16), and the launcher call-count table.
 *
 * Needs a GPU: without one the whole test is a SKIP carrying
 * cudaGetDeviceCount's answer (a failure when SHARDRUN_TEST_REQUIRE names
 * gpu, as tests/gpu/check.sh sets).  Shapes: small ones always; with
 * SHARDRUN_TEST_REAL_SHAPES=1 also B=8, T=1024, C=768, V=50257.
 * Tolerances are GPU.md §8's: max|gpu - ref| / max|ref| per tensor, where
 * in bf16 mode the reference is the CPU op on the same bf16-rounded
 * inputs.  AdamW must be bitwise equal to the host's. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "model.h"
#include "ops.h"
#include "tap.h"

static sr_dev *dev;

static float *rnd(size_t n, unsigned seed, float scale) {
    float *x = malloc(n * sizeof *x);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = ((float)rand() / RAND_MAX - 0.5f) * 2.0f * scale;
    return x;
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

static float *down(const void *d, size_t n, int bf16) {
    size_t es = bf16 ? 2 : 4;
    void *h = malloc(n * es);
    float *x = malloc(n * sizeof *x);
    sr_dev_download(dev, h, d, n * es, "download");
    for (size_t i = 0; i < n; i++)
        x[i] = bf16 ? sr_bf16_to_f32(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
    return x;
}

static double rel(const float *g, const float *r, size_t n) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)g[i] - r[i]));
        mr = fmax(mr, fabs((double)r[i]));
        if (isnan(g[i]))
            return INFINITY;
    }
    return mr > 0 ? md / mr : md;
}

static void check(const char *what, const void *dgot, const float *ref, size_t n, int bf16, int act, double tol) {
    float *g = down(dgot, n, act ? bf16 : 0);
    double r = rel(g, ref, n);
    tap_ok(r <= tol, "%s %s: rel %.2e <= %.0e", bf16 ? "bf16" : "f32", what, r, tol);
    free(g);
}

static void ops_at(int bf16, int B, int T, int C, int NH, int V) {
    const sr_ops *o = bf16 ? &sr_ops_cuda_bf16 : &sr_ops_cuda_f32, *cpu = &sr_ops_cpu;
    int Vp = sr_model_padded_vocab(V), N = B * T;
    size_t NC = (size_t)N * C;
    double t_ew = bf16 ? 1e-2 : 2e-6, t_ln = bf16 ? 2e-2 : 1e-5, t_mm = bf16 ? 1e-2 : 1e-5;
    tap_diag("%s ops at B=%d T=%d C=%d NH=%d V=%d", bf16 ? "bf16" : "f32", B, T, C, NH, V);
    size_t wsb = o->workspace_bytes(B, T, C, NH);
    void *ws = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_ACTIVATIONS, wsb);
    o->bind_workspace(ws, wsb);

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
    void *denc = up(enc, NC, bf16);
    o->encoder_forward(denc, dinp_ids, dwte_p, dwpe_p, B, T, C);
    check("encoder_forward", denc, enc, NC, bf16, 1, t_ew);
    float *dout = rnd(NC, 3, 1.0f);
    round_to(dout, NC, bf16);
    void *ddout = up(dout, NC, bf16);
    float *gwte = rnd((size_t)Vp * C, 4, 1.0f), *gwpe = rnd((size_t)T * C, 5, 1.0f);
    float *dgwte = up(gwte, (size_t)Vp * C, 0), *dgwpe = up(gwpe, (size_t)T * C, 0);
    cpu->encoder_backward(gwte, gwpe, dout, inp, B, T, C);
    o->encoder_backward(dgwte, dgwpe, ddout, dinp_ids, B, T, C);
    check("encoder_backward dwte", dgwte, gwte, (size_t)Vp * C, bf16, 0, t_ew);
    check("encoder_backward dwpe", dgwpe, gwpe, (size_t)T * C, bf16, 0, t_ew);

    /* layernorm */
    float *x = rnd(NC, 6, 1.0f), *w = rnd((size_t)C, 7, 1.0f), *b = rnd((size_t)C, 8, 0.5f);
    round_to(x, NC, bf16), round_to(w, (size_t)C, bf16), round_to(b, (size_t)C, bf16);
    void *dx = up(x, NC, bf16), *dw = up(w, (size_t)C, bf16), *db = up(b, (size_t)C, bf16);
    float *y = malloc(NC * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    cpu->layernorm_forward(y, mean, rstd, x, w, b, N, C);
    void *dy = up(y, NC, bf16);
    float *dmean = up(mean, (size_t)N, 0), *drstd = up(rstd, (size_t)N, 0);
    o->layernorm_forward(dy, dmean, drstd, dx, dw, db, N, C);
    check("layernorm_forward", dy, y, NC, bf16, 1, t_ln);
    check("layernorm_forward rstd", drstd, rstd, (size_t)N, bf16, 0, t_ln);
    float *gx = rnd(NC, 9, 0.1f), *gw = rnd((size_t)C, 10, 0.1f), *gb = rnd((size_t)C, 11, 0.1f);
    round_to(gx, NC, bf16);
    void *dgx = up(gx, NC, bf16);
    float *dgw = up(gw, (size_t)C, 0), *dgb = up(gb, (size_t)C, 0);
    cpu->layernorm_backward(gx, gw, gb, dout, x, w, mean, rstd, N, C);
    o->layernorm_backward(dgx, dgw, dgb, ddout, dx, dw, dmean, drstd, N, C);
    check("layernorm_backward dinp", dgx, gx, NC, bf16, 1, t_ln);
    check("layernorm_backward dw", dgw, gw, (size_t)C, bf16, 0, t_ln);
    check("layernorm_backward db", dgb, gb, (size_t)C, bf16, 0, t_ln);

    /* matmul with bias: out[N,3C] */
    int OC = 3 * C;
    float *W = rnd((size_t)OC * C, 12, 0.05f), *bias = rnd((size_t)OC, 13, 0.1f);
    round_to(W, (size_t)OC * C, bf16), round_to(bias, (size_t)OC, bf16);
    void *dW = up(W, (size_t)OC * C, bf16), *dbias_p = up(bias, (size_t)OC, bf16);
    float *mo = malloc((size_t)N * OC * 4);
    cpu->matmul_forward(mo, x, W, bias, N, C, OC);
    void *dmo = up(mo, (size_t)N * OC, bf16);
    o->matmul_forward(dmo, dx, dW, dbias_p, N, C, OC);
    check("matmul_forward (+bias)", dmo, mo, (size_t)N * OC, bf16, 1, t_mm);
    float *mdout = rnd((size_t)N * OC, 14, 1.0f);
    round_to(mdout, (size_t)N * OC, bf16);
    void *dmdout = up(mdout, (size_t)N * OC, bf16);
    float *mdin = rnd(NC, 15, 0.1f), *mdw = rnd((size_t)OC * C, 16, 0.1f), *mdb = rnd((size_t)OC, 17, 0.1f);
    round_to(mdin, NC, bf16);
    void *dmdin = up(mdin, NC, bf16);
    float *dmdw = up(mdw, (size_t)OC * C, 0), *dmdb = up(mdb, (size_t)OC, 0);
    cpu->matmul_backward(mdin, mdw, mdb, mdout, x, W, N, C, OC);
    o->matmul_backward(dmdin, dmdw, dmdb, dmdout, dx, dW, N, C, OC);
    check("matmul_backward dinp", dmdin, mdin, NC, bf16, 1, t_mm);
    check("matmul_backward dW", dmdw, mdw, (size_t)OC * C, bf16, 0, t_mm);
    check("matmul_backward dbias", dmdb, mdb, (size_t)OC, bf16, 0, t_mm);

    /* attention over qkv = mo */
    round_to(mo, (size_t)N * OC, bf16);
    void *dqkv_in = up(mo, (size_t)N * OC, bf16);
    size_t attn = (size_t)B * NH * T * T;
    float *att = malloc(attn * 4), *ao = malloc(NC * 4);
    cpu->attention_forward(ao, att, mo, B, T, C, NH);
    void *datt = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_ACTIVATIONS, o->attention_save_bytes(B, T, NH));
    void *dao = up(ao, NC, bf16);
    o->attention_forward(dao, datt, dqkv_in, B, T, C, NH);
    check("attention_forward", dao, ao, NC, bf16, 1, t_ln);
    check("attention_forward probabilities", datt, att, attn, bf16, 1, t_ln);
    float *dq = rnd((size_t)N * OC, 18, 0.1f);
    round_to(dq, (size_t)N * OC, bf16);
    void *ddq = up(dq, (size_t)N * OC, bf16);
    cpu->attention_backward(dq, dout, mo, att, B, T, C, NH);
    o->attention_backward(ddq, ddout, dqkv_in, datt, B, T, C, NH);
    check("attention_backward", ddq, dq, (size_t)N * OC, bf16, 1, t_ln);

    /* gelu, residual */
    size_t n4 = 4 * NC;
    float *gi = rnd(n4, 19, 3.0f), *go = malloc(n4 * 4), *gd = rnd(n4, 20, 1.0f), *gg = rnd(n4, 21, 0.1f);
    round_to(gi, n4, bf16), round_to(gd, n4, bf16), round_to(gg, n4, bf16);
    void *dgi = up(gi, n4, bf16), *dgo = up(gi, n4, bf16), *dgd = up(gd, n4, bf16), *dgg = up(gg, n4, bf16);
    cpu->gelu_forward(go, gi, n4);
    o->gelu_forward(dgo, dgi, n4);
    check("gelu_forward", dgo, go, n4, bf16, 1, t_ew);
    cpu->gelu_backward(gg, gi, gd, n4);
    o->gelu_backward(dgg, dgi, dgd, n4);
    check("gelu_backward", dgg, gg, n4, bf16, 1, t_ew);
    cpu->residual_forward(go, gi, gd, n4);
    o->residual_forward(dgo, dgi, dgd, n4);
    check("residual_forward", dgo, go, n4, bf16, 1, t_ew);

    /* classifier */
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
    float *dloss_p = up(loss, (size_t)N, 0), *dlse = up(lse, (size_t)N, 0);
    o->crossentropy_forward(dloss_p, dlse, dlg, dtg, N, V, Vp);
    check("crossentropy_forward losses", dloss_p, loss, (size_t)N, bf16, 0, bf16 ? 2e-3 : 1e-6);
    float dl = 1.0f / N;
    cpu->crossentropy_backward(lg, lse, tg, dl, N, V, Vp);
    o->crossentropy_backward(dlg, dlse, dtg, dl, N, V, Vp);
    check("crossentropy_backward dlogits", dlg, lg, (size_t)N * Vp, bf16, 1, bf16 ? 2e-2 : 1e-5);
    sr_status st = o->take_error();
    tap_ok(st == SR_OK, "%s ops: no CUDA error (%s)", bf16 ? "bf16" : "f32", st == SR_OK ? "none" : sr_error_message());
    free(inp), free(wte), free(wpe), free(enc), free(dout), free(gwte), free(gwpe), free(x), free(w), free(b);
    free(y), free(mean), free(rstd), free(gx), free(gw), free(gb), free(W), free(bias), free(mo), free(mdout);
    free(mdin), free(mdw), free(mdb), free(att), free(ao), free(dq), free(gi), free(go), free(gd), free(gg);
    free(lg), free(tg), free(loss), free(lse);
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
    sr_dev_download(dev, gb, db16, n * 2, "download");
    tap_ok(memcmp(hb, gb, n * 2) == 0, "cast_f32_bf16: bitwise the host's rounding");
    float *acc = malloc(n * 4), *gacc = malloc(n * 4);
    memcpy(acc, c, n * 4);
    cpu->fold_bf16(cpu, SR_STREAM_COMM, acc, hb, n, true);
    dev->fold_bf16(dev, SR_STREAM_COMM, dc, db16, n, true);
    sr_dev_download(dev, gacc, dc, n * 4, "download");
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "fold_bf16 (add): bitwise the host's");
    cpu->fold_bf16(cpu, SR_STREAM_COMM, acc, hb, n, false);
    dev->fold_bf16(dev, SR_STREAM_COMM, dc, db16, n, false);
    sr_dev_download(dev, gacc, dc, n * 4, "download");
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "fold_bf16 (set): bitwise the host's");
    cpu->add_f32(cpu, SR_STREAM_COMM, acc, a, n);
    dev->add_f32(dev, SR_STREAM_COMM, dc, da, n);
    sr_dev_download(dev, gacc, dc, n * 4, "download");
    tap_ok(memcmp(acc, gacc, n * 4) == 0, "add_f32: bitwise the host's");
    double hs, gs1, gs2, *ds = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, 2 * sizeof(double));
    cpu->sum_squares(cpu, SR_STREAM_COMPUTE, &hs, a, n);
    dev->sum_squares(dev, SR_STREAM_COMPUTE, ds, da, n);
    sr_dev_download(dev, &gs1, ds, sizeof gs1, "download");
    dev->sum_squares(dev, SR_STREAM_COMPUTE, ds, da, n);
    sr_dev_download(dev, &gs2, ds, sizeof gs2, "download");
    tap_ok(fabs(gs1 - hs) <= 1e-12 * hs && memcmp(&gs1, &gs2, sizeof gs1) == 0,
           "sum_squares: %.17g vs host %.17g, and bitwise the same twice", gs1, hs);
    double hl = 1.5, gl;
    dev->memset(dev, SR_STREAM_COMPUTE, ds, 0, sizeof(double));
    sr_dev_upload(dev, ds, &hl, sizeof hl, "upload");
    cpu->loss_sum(cpu, SR_STREAM_COMPUTE, &hl, a, n);
    dev->loss_sum(dev, SR_STREAM_COMPUTE, ds, da, n);
    sr_dev_download(dev, &gl, ds, sizeof gl, "download");
    tap_is_close(gl, hl, 1e-9, 1e-9, "loss_sum adds to the accumulator: %.17g vs host %.17g", gl, hl);
    /* AdamW: bitwise, decaying and not */
    float *p = rnd(n, 32, 1.0f), *g = rnd(n, 33, 0.01f), *m = rnd(n, 34, 0.001f), *v = rnd(n, 35, 1e-4f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *dp = up(p, n, 0), *dg = up(g, n, 0), *dm = up(m, n, 0), *dv = up(v, n, 0);
    sr_adamw_segment segs[2] = {{0, n / 3, true}, {n / 3, n - n / 3, false}};
    sr_adamw_launch hl_ = {p, m, v, g, segs, 2, {0.9f, 0.95f, 1e-8f, 0.19f, 0.0975f, 6e-4f, 0, 0.7f}, 0.1f};
    sr_adamw_launch dl_ = {dp, dm, dv, dg, segs, 2, hl_.a, 0.1f};
    cpu->adamw(cpu, SR_STREAM_COMPUTE, &hl_);
    dev->adamw(dev, SR_STREAM_COMPUTE, &dl_);
    float *gp = malloc(n * 4), *gm = malloc(n * 4), *gv = malloc(n * 4);
    sr_dev_download(dev, gp, dp, n * 4, "download");
    sr_dev_download(dev, gm, dm, n * 4, "download");
    sr_dev_download(dev, gv, dv, n * 4, "download");
    tap_ok(memcmp(gp, p, n * 4) == 0 && memcmp(gm, m, n * 4) == 0 && memcmp(gv, v, n * 4) == 0,
           "adamw (-fmad=false): params, m and v bitwise the host's");
    /* events order streams */
    sr_event ev = {0};
    dev->memset(dev, SR_STREAM_COMM, da, 0, n * 4);
    dev->record(dev, &ev, SR_STREAM_COMM);
    sr_dev_wait(dev, SR_STREAM_COMPUTE, &ev, "reduce_done");
    dev->copy(dev, SR_STREAM_COMPUTE, dc, da, n * 4);
    sr_dev_download(dev, gacc, dc, n * 4, "download");
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
    dev->timeout_s = 60;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        ops_at(bf16, 2, 16, 64, 4, 300);
        if (getenv("SHARDRUN_TEST_REAL_SHAPES") && strcmp(getenv("SHARDRUN_TEST_REAL_SHAPES"), "1") == 0)
            ops_at(bf16, 8, 1024, 768, 12, 50257);
    }
    primitives();
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
    tap_ok(dev->sync(dev, SR_STREAM_COMPUTE) == SR_OK, "no CUDA error at the end");
    sr_dev_cuda_close(dev);
    return tap_done();
}
