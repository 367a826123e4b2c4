/* ops_cuda.c — the CUDA op tables (ops.h), in f32 (exact mode) and bf16.
 *
 * Each op maps its contract onto the launchers of kernels/ (sr_cuda.h) and
 * the cuBLASLt GEMMs of gemm_cuda.c, on the compute stream of the calling
 * thread's context (sr_cuda_bind).  Row-major tensors meet column-major
 * cuBLASLt by the usual identity: row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T, so a row-major GEMM (M, N, K) is the column-major
 * GEMM (N, M, K) with A and B swapped (rm_gemm).  Attention is flash
 * attention in the third table (sr_ops_cuda_bf16_flash: kernels/flash.cu,
 * one launch per layer, the rows' log-sum-exps saved), or materialized
 * (doc/ARCHITECTURE.md §3c): per sequence, a strided-batched GEMM over
 * the heads for the scores (scale folded into alpha), the causal softmax
 * kernel over every row at once, a second batched GEMM for the values
 * (grouped-query attention: the key and value heads expanded first); the
 * backward recomputes nothing and keeps one sequence's score gradient in
 * the workspace.  The Llama family's ops (RMSNorm, RoPE, SwiGLU,
 * grouped-query attention) are here too, the model's rotary table on the
 * device.
 *
 * Every launch is checked; the first failure on a thread is kept with the
 * op's name and shapes and returned by take_error (status 70, or 69 for a
 * hardware-class error).  With SHARDRUN_CUDA_SYNC=1 each op ends with a
 * synchronisation (sr_cuda_sync_stream), so an error inside a kernel is
 * reported by the op that caused it. */
#include "srconfig.h"

#include "cuda_backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/sr_cuda.h"
#include "line.h"

static _Thread_local sr_status op_error;

/* The context, or NULL with the error kept (an op called on a thread that
 * never bound one: a bug in the caller). */
static sr_cuda_ctx *ctx(void) {
    sr_cuda_ctx *c = sr_cuda_bound();
    if (c)
        sr_cuda_beat(c, NULL); /* the host is in shardrun's code (device.h, watch) */
    if (!c && op_error == SR_OK)
        op_error = sr_error(SR_ERR_INTERNAL, "a CUDA op ran on a thread with no CUDA context (sr_cuda_bind)");
    return c;
}

/* The context of an op whose kernels take the ops' workspace (encoder,
 * LayerNorm and bias backward, attention backward), or NULL with an
 * internal error when none is bound: on a GPU the kernels would write
 * through a null pointer (the emulator found a test that bound none).  How
 * much is enough is sr_cuda_ws_bytes's, for the shapes bind_workspace's
 * caller sized it for. */
static sr_cuda_ctx *ctx_ws(const char *op) {
    sr_cuda_ctx *c = ctx();
    if (c && (!c->ws || !c->ws_bytes)) {
        if (op_error == SR_OK)
            op_error = sr_error(SR_ERR_INTERNAL, "%s needs the ops' workspace, and none is bound (bind_workspace)", op);
        return NULL;
    }
    return c;
}

/* Ends one op: its launch error (or, with SHARDRUN_CUDA_SYNC=1, the error
 * of the synchronised stream) is kept with "op (shapes)". */
static void done(sr_cuda_ctx *c, int e, const char *op, const char *fmt, ...) {
    sr_cuda_beat(c, op); /* back from the driver: this op is enqueued */
    if (e == 0 && c->sync_each)
        e = (int)sr_cuda_sync_stream(c->stream);
    if (e == 0 || op_error != SR_OK)
        return;
    char what[200];
    sr_line l = SR_LINE(what);
    sr_line_add(&l, "%s (", op);
    va_list ap;
    va_start(ap, fmt);
    sr_line_vadd(&l, fmt, ap);
    va_end(ap);
    sr_line_add(&l, ")");
    op_error = sr_cuda_fail((cudaError_t)e, c->bus, what);
}

/* Keeps a GEMM's failure (gemm_cuda.c recorded the message). */
static void gemm_done(sr_cuda_ctx *c, sr_status st, const char *op) {
    if (st == SR_OK && c->sync_each) {
        cudaError_t e = sr_cuda_sync_stream(c->stream);
        if (e != cudaSuccess && op_error == SR_OK)
            op_error = sr_cuda_fail(e, c->bus, op);
        return;
    }
    if (st != SR_OK && op_error == SR_OK)
        op_error = sr_error_wrap(st, "%s", op);
}

static sr_status take_error(void) {
    sr_status st = op_error;
    op_error = SR_OK;
    return st;
}

static size_t es(int bf16) { return bf16 ? 2 : 4; }
static const void *at(const void *p, size_t elems, int bf16) { return (const char *)p + elems * es(bf16); }
static void *atw(void *p, size_t elems, int bf16) { return (char *)p + elems * es(bf16); }

sr_gemm_key sr_cuda_rm_key(int ta, int tb, int M, int N, int K, long long lda, long long sA, long long ldb,
                           long long sB, long long ldd, long long sD, int batch, bool bf16, bool accumulate,
                           bool d_f32) {
    sr_gemm_key k;
    memset(&k, 0, sizeof k); /* every field, align_* included, starts 0 */
    k.transa = tb;
    k.transb = ta;
    k.m = N;
    k.n = M;
    k.k = K;
    k.lda = ldb;
    k.ldb = lda;
    k.ldd = ldd;
    k.batch = batch;
    k.sa = sB;
    k.sb = sA;
    k.sd = sD;
    k.ab_bf16 = bf16;
    k.d_f32 = d_f32;
    k.accumulate = accumulate;
    return k;
}

/* Row-major D[M,N] (ld ldd) = alpha op(A)[M,K] op(B)[K,N] (+ D when
 * accumulate), batched `batch` times with the given strides. */
static sr_status rm_gemm(sr_cuda_ctx *c, int bf16, int ta, int tb, int M, int N, int K, const void *A, long long lda,
                         long long sA, const void *B, long long ldb, long long sB, void *D, long long ldd, long long sD,
                         int batch, float alpha, bool accumulate, bool d_f32, sr_ledger_family family) {
    sr_gemm_key k = sr_cuda_rm_key(ta, tb, M, N, K, lda, sA, ldb, sB, ldd, sD, batch, bf16, accumulate, d_f32);
    k.align_a = sr_gemm_align(B);
    k.align_b = sr_gemm_align(A);
    k.align_d = sr_gemm_align(D);
    return sr_gemm_run(c->gemm, c->stream, &k, B, A, D, NULL, alpha, family);
}

/* ------------------------------------------------------------------------ */
/* the ops, with the activation dtype as a first argument */

static void encoder_forward(int bf16, void *out, const int *inp, const void *wte, const void *wpe, int B, int T,
                            int C) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_encoder_forward(c->stream, out, inp, wte, wpe, B, T, C, bf16), "encoder_forward", "B=%d T=%d C=%d",
             B, T, C);
}

static void encoder_backward(int bf16, float *dwte, float *dwpe, const void *dout, const int *inp, int B, int T, int C,
                             float gbeta) {
    sr_cuda_ctx *c = ctx_ws("encoder_backward");
    if (c)
        done(c,
             sr_k_encoder_backward(c->stream, dwte, dwpe, dout, inp, B, T, C, bf16, c->ws, c->ws_bytes, gbeta != 0.0f),
             "encoder_backward", "B=%d T=%d C=%d", B, T, C);
}

static void layernorm_forward(int bf16, void *out, float *mean, float *rstd, const void *inp, const void *w,
                              const void *b, int N, int C) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_layernorm_forward(c->stream, out, mean, rstd, inp, w, b, N, C, bf16), "layernorm_forward",
             "N=%d C=%d", N, C);
}

static void residual_layernorm_forward(int bf16, void *res, void *out, float *mean, float *rstd, const void *a,
                                       const void *b, const void *w, const void *bias, int N, int C) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_residual_layernorm_forward(c->stream, res, out, mean, rstd, a, b, w, bias, N, C, bf16),
             "residual_layernorm_forward", "N=%d C=%d", N, C);
}

/* The column-sum partials of N rows of W floats fit the bound workspace
 * (sr_cuda_ws_bytes sizes it for the model's widest: 4 C), else an
 * internal error naming the op. */
static bool partials_fit(sr_cuda_ctx *c, int N, int W, const char *op) {
    size_t need = (size_t)sr_cuda_colsum_chunks(N) * (size_t)W * sizeof(float);
    if (need <= c->ws_bytes)
        return true;
    if (op_error == SR_OK)
        op_error = sr_error(SR_ERR_INTERNAL, "%s needs %zu bytes of workspace for N=%d rows of %d, %zu bound", op, need,
                            N, W, c->ws_bytes);
    return false;
}

static void layernorm_backward(int bf16, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                               const void *w, const float *mean, const float *rstd, int N, int C, float beta,
                               float gbeta, float *sum_in, float *sum_out, float sbeta) {
    sr_cuda_ctx *c = ctx_ws("layernorm_backward");
    if (c && partials_fit(c, N, 4 * C, "layernorm_backward"))
        done(c,
             sr_k_layernorm_backward(c->stream, dinp, dw, db, sum_in, sum_out, dout, inp, w, mean, rstd, N, C, bf16,
                                     c->ws, beta != 0.0f, gbeta != 0.0f, sbeta != 0.0f),
             "layernorm_backward", "N=%d C=%d", N, C);
}

static void matmul_forward(int bf16, void *out, const void *inp, const void *w, const void *bias, int N, int C,
                           int OC) {
    sr_cuda_ctx *c = ctx();
    if (!c)
        return;
    /* out[N,OC] = inp[N,C] W[OC,C]^T (+ bias over the OC columns): the
     * BIAS epilogue for a 16-byte aligned bias, else a bias kernel after */
    bool epilogue = bias && sr_gemm_align(bias) == 16;
    sr_gemm_key k = sr_cuda_rm_key(0, 1, N, OC, C, C, 0, C, 0, OC, 0, 1, bf16, false, false);
    k.bias = epilogue;
    k.align_bias = epilogue ? 16 : 0;
    k.align_a = sr_gemm_align(w);
    k.align_b = sr_gemm_align(inp);
    k.align_d = sr_gemm_align(out);
    gemm_done(c, sr_gemm_run(c->gemm, c->stream, &k, w, inp, out, epilogue ? bias : NULL, 1.0f, SR_LF_GEMM_LINEAR),
              "matmul_forward");
    if (bias && !epilogue && op_error == SR_OK)
        done(c, sr_k_bias_forward(c->stream, out, bias, N, OC, bf16), "matmul_forward (bias)", "N=%d OC=%d", N, OC);
}

static void matmul_backward(int bf16, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                            const void *w, int N, int C, int OC, float beta, float gbeta) {
    sr_cuda_ctx *c = dbias ? ctx_ws("matmul_backward (dbias)") : ctx();
    if (!c)
        return;
    /* dinp[N,C] = beta dinp + dout[N,OC] W[OC,C] (beta 0: cuBLASLt's beta 0,
     * dinp not read) */
    gemm_done(c,
              rm_gemm(c, bf16, 0, 0, N, C, OC, dout, OC, 0, w, C, 0, dinp, C, 0, 1, 1.0f, beta != 0.0f, false,
                      SR_LF_GEMM_LINEAR),
              "matmul_backward (dinp)");
    /* dW[OC,C] = gbeta dW + dout^T inp, into float (gbeta 0: cuBLASLt's beta
     * 0, dW not read) */
    gemm_done(c,
              rm_gemm(c, bf16, 1, 0, OC, C, N, dout, OC, 0, inp, C, 0, dw, C, 0, 1, 1.0f, gbeta != 0.0f, true,
                      SR_LF_GEMM_LINEAR),
              "matmul_backward (dW)");
    if (dbias)
        done(c, sr_k_bias_backward(c->stream, dbias, dout, N, OC, bf16, c->ws, gbeta != 0.0f),
             "matmul_backward (dbias)", "N=%d OC=%d", N, OC);
}

/* Causal attention over qkv rows of W = (NH + 2 NKV) hs (queries, keys,
 * values; query head h reads key/value head h / R, R = NH / NKV).  Every
 * GEMM is one strided-batched call per sequence over the NH query heads.
 * With R == 1 (GPT-2) keys and values are read in place; with R > 1 the
 * sequence's key (or value) heads are first expanded into [T, NH hs] in
 * the workspace (gqa_expand: each head copied for its R query heads), so
 * the calls are GPT-2's (one per sequence; per key/value group with the
 * shared head broadcast at batch stride 0 took NKV calls each, and a
 * first H200 run measured llama-125m at 0.75x PyTorch's step).  The key
 * and value gradients, which R query heads share, are one call per
 * sequence over every query head into the workspace, then gqa_reduce sums
 * each group's heads in head order, in float (a batched GEMM writing one
 * output from several batches would race).  The workspace: the score
 * gradient (sr_cuda_ws_att_bytes), then two [T, C] buffers (the expanded
 * heads; the per-head gradients). */
typedef struct {
    int R;
    long long W, C, TT; /* row widths, T*T */
    size_t x0, x1;      /* byte offsets of the workspace's two [T, C] buffers */
} gqa_shape;

static gqa_shape gqa_of(int T, int NH, int NKV, int hs, int bf16) {
    gqa_shape g = {.R = NH / NKV, .W = (long long)(NH + 2 * NKV) * hs, .C = (long long)NH * hs, .TT = (long long)T * T};
    g.x0 = sr_cuda_ws_att_bytes(T, NH);
    g.x1 = g.x0 + ((size_t)T * g.C * es(bf16) + 255) / 256 * 256;
    return g;
}

/* Sequence b's key (v = 0) or value (v = 1) heads as NH heads of ld *ld:
 * in place (R == 1), or expanded into the workspace buffer at `off`. */
static const void *gqa_heads(sr_cuda_ctx *c, int bf16, const gqa_shape *g, const void *qkv, int b, int T, int NH,
                             int NKV, int hs, int v, size_t off, long long *ld) {
    const void *src = at(qkv, (size_t)b * T * g->W + (size_t)(NH + v * NKV) * hs, bf16);
    *ld = g->W;
    if (g->R == 1)
        return src;
    void *dst = (char *)c->ws + off;
    *ld = g->C;
    done(c, sr_k_gqa_expand(c->stream, dst, src, T, NKV, g->R, hs, (int)g->W, (int)g->C, bf16),
         v ? "attention (values expanded)" : "attention (keys expanded)", "T=%d NH=%d NKV=%d hs=%d", T, NH, NKV, hs);
    return dst;
}

static void gqa_forward(int bf16, void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs) {
    sr_cuda_ctx *c = NH == NKV ? ctx() : ctx_ws("attention_forward");
    if (!c)
        return;
    gqa_shape g = gqa_of(T, NH, NKV, hs, bf16);
    float scale = 1.0f / sqrtf((float)hs);
    long long ld;
    for (int b = 0; b < B && op_error == SR_OK; b++) {
        const void *q = at(qkv, (size_t)b * T * g.W, bf16);
        const void *k = gqa_heads(c, bf16, &g, qkv, b, T, NH, NKV, hs, 0, g.x0, &ld);
        void *ab = atw(att, (size_t)b * NH * g.TT, bf16);
        /* scores[h] = scale q_h k_h^T, every head of sequence b at once */
        if (op_error == SR_OK)
            gemm_done(c,
                      rm_gemm(c, bf16, 0, 1, T, T, hs, q, g.W, hs, k, ld, hs, ab, T, g.TT, NH, scale, false, false,
                              SR_LF_GEMM_ATTENTION),
                      "attention_forward (scores)");
    }
    if (op_error == SR_OK)
        done(c, sr_k_softmax_causal_forward(c->stream, att, (long long)B * NH * T, T, bf16), "attention_forward",
             "softmax B=%d NH=%d T=%d", B, NH, T);
    for (int b = 0; b < B && op_error == SR_OK; b++) {
        const void *v = gqa_heads(c, bf16, &g, qkv, b, T, NH, NKV, hs, 1, g.x0, &ld);
        const void *ab = at(att, (size_t)b * NH * g.TT, bf16);
        void *ob = atw(out, (size_t)b * T * g.C, bf16);
        /* y_h = att_h v_h, written into its heads' columns of out */
        if (op_error == SR_OK)
            gemm_done(c,
                      rm_gemm(c, bf16, 0, 0, T, hs, T, ab, T, g.TT, v, ld, hs, ob, g.C, hs, NH, 1.0f, false, false,
                              SR_LF_GEMM_ATTENTION),
                      "attention_forward (values)");
    }
}

/* dst (the key or value heads of one sequence's dqkv, rows of W) += alpha
 * X_h^T Y_h summed over each group's query heads h: X [T, T] per head
 * (stride TT), Y [T, hs] per head at ldy.  With R == 1 (GPT-2) one
 * batched GEMM accumulates straight into dst; with R > 1 one batched GEMM
 * over every query head writes each head's gradient into the workspace,
 * and gqa_reduce adds each group's R heads in head order, in float, into
 * its key or value head. */
static void gqa_kv_grad(sr_cuda_ctx *c, int bf16, const gqa_shape *g, int T, int NH, int NKV, int hs, const void *X,
                        const void *Y, long long ldy, void *dst, float alpha, const char *what) {
    if (g->R == 1) {
        gemm_done(c,
                  rm_gemm(c, bf16, 1, 0, T, hs, T, X, T, g->TT, Y, ldy, hs, dst, g->W, hs, NH, alpha, true, false,
                          SR_LF_GEMM_ATTENTION),
                  what);
        return;
    }
    void *per_head = (char *)c->ws + g->x1;
    gemm_done(c,
              rm_gemm(c, bf16, 1, 0, T, hs, T, X, T, g->TT, Y, ldy, hs, per_head, g->C, hs, NH, alpha, false, false,
                      SR_LF_GEMM_ATTENTION),
              what);
    if (op_error == SR_OK)
        done(c, sr_k_gqa_reduce(c->stream, dst, per_head, T, NKV, g->R, hs, (int)g->W, (int)g->C, bf16), what,
             "T=%d NH=%d NKV=%d hs=%d", T, NH, NKV, hs);
}

static void gqa_backward(int bf16, void *dqkv, const void *dout, const void *qkv, const void *att, int B, int T, int NH,
                         int NKV, int hs) {
    sr_cuda_ctx *c = ctx_ws("attention_backward");
    if (!c)
        return;
    gqa_shape g = gqa_of(T, NH, NKV, hs, bf16);
    float scale = 1.0f / sqrtf((float)hs);
    void *datt = c->ws; /* one sequence's [NH, T, T] score gradient */
    long long ld;
    for (int b = 0; b < B && op_error == SR_OK; b++) {
        size_t base = (size_t)b * T * g.W;
        const void *ab = at(att, (size_t)b * NH * g.TT, bf16), *dy = at(dout, (size_t)b * T * g.C, bf16);
        const void *q = at(qkv, base, bf16);
        /* datt_h = dy_h v_h^T ; dv += att_h^T dy_h (over each group) */
        const void *v = gqa_heads(c, bf16, &g, qkv, b, T, NH, NKV, hs, 1, g.x0, &ld);
        if (op_error == SR_OK)
            gemm_done(c,
                      rm_gemm(c, bf16, 0, 1, T, T, hs, dy, g.C, hs, v, ld, hs, datt, T, g.TT, NH, 1.0f, false, false,
                              SR_LF_GEMM_ATTENTION),
                      "attention_backward (datt)");
        if (op_error == SR_OK)
            gqa_kv_grad(c, bf16, &g, T, NH, NKV, hs, ab, dy, g.C, atw(dqkv, base + (size_t)(NH + NKV) * hs, bf16), 1.0f,
                        "attention_backward (dv)");
        if (op_error == SR_OK)
            done(c, sr_k_softmax_causal_backward(c->stream, datt, ab, (long long)NH * T, T, bf16), "attention_backward",
                 "softmax NH=%d T=%d", NH, T);
        /* dq_h += scale datt_h k_h ; dk += scale datt_h^T q_h (over each group) */
        const void *k = op_error == SR_OK ? gqa_heads(c, bf16, &g, qkv, b, T, NH, NKV, hs, 0, g.x0, &ld) : NULL;
        if (op_error == SR_OK)
            gemm_done(c,
                      rm_gemm(c, bf16, 0, 0, T, hs, T, datt, T, g.TT, k, ld, hs, atw(dqkv, base, bf16), g.W, hs, NH,
                              scale, true, false, SR_LF_GEMM_ATTENTION),
                      "attention_backward (dq)");
        if (op_error == SR_OK)
            gqa_kv_grad(c, bf16, &g, T, NH, NKV, hs, datt, q, g.W, atw(dqkv, base + (size_t)NH * hs, bf16), scale,
                        "attention_backward (dk)");
    }
}

/* Flash attention (kernels/flash.cu; the bf16 flash table): one launch
 * per layer over every sequence and head, `att` the rows' log-sum-exps
 * [B, NH, T] (f32); the backward reads the forward's output for its row
 * statistic, kept in the workspace (sr_cuda_flash_ws_bytes), and assigns
 * dqkv (the table's attention_backward_assigns: no memset before it). */
static void flash_forward(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_flash_forward(c->stream, out, (float *)att, qkv, B, T, NH, NKV, hs), "attention_forward (flash)",
             "B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
}

static void flash_backward_bias(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att, int B,
                                int T, int NH, int NKV, int hs, float *dbias, float gbeta) {
    sr_cuda_ctx *c = ctx_ws("attention_backward");
    if (c)
        done(c,
             sr_k_flash_backward(c->stream, dqkv, dout, out, qkv, (const float *)att, B, T, NH, NKV, hs, (float *)c->ws,
                                 dbias, gbeta != 0.0f),
             "attention_backward (flash)", "B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
}
static void flash_backward(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att, int B,
                           int T, int NH, int NKV, int hs) {
    flash_backward_bias(dqkv, dout, out, qkv, att, B, T, NH, NKV, hs, NULL, 0.0f);
}

static void attention_forward(int bf16, void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    gqa_forward(bf16, out, att, qkv, B, T, NH, NH, C / NH);
}

static void attention_backward(int bf16, void *dqkv, const void *dout, const void *qkv, const void *att, int B, int T,
                               int C, int NH, float *dbias, float gbeta) {
    gqa_backward(bf16, dqkv, dout, qkv, att, B, T, NH, NH, C / NH);
    sr_cuda_ctx *c = dbias && op_error == SR_OK ? ctx_ws("attention_backward (dbias)") : NULL;
    if (c &&
        partials_fit(c, B * T, 3 * C, "attention_backward (dbias)")) /* (the materialised path: a pass over dqkv) */
        done(c, sr_k_bias_backward(c->stream, dbias, dqkv, B * T, 3 * C, bf16, c->ws, gbeta != 0.0f),
             "attention_backward (dbias)", "N=%d OC=%d", B * T, 3 * C);
}

static void rmsnorm_forward(int bf16, void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_rmsnorm_forward(c->stream, out, rstd, inp, w, eps, N, C, bf16), "rmsnorm_forward", "N=%d C=%d", N,
             C);
}

static void residual_rmsnorm_forward(int bf16, void *res, void *out, float *rstd, const void *a, const void *b,
                                     const void *w, float eps, int N, int C) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_residual_rmsnorm_forward(c->stream, res, out, rstd, a, b, w, eps, N, C, bf16),
             "residual_rmsnorm_forward", "N=%d C=%d", N, C);
}
static void rmsnorm_backward(int bf16, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                             const float *rstd, int N, int C, float beta, float gbeta) {
    sr_cuda_ctx *c = ctx_ws("rmsnorm_backward");
    if (c)
        done(c,
             sr_k_rmsnorm_backward(c->stream, dinp, dw, dout, inp, w, rstd, N, C, bf16, c->ws, beta != 0.0f,
                                   gbeta != 0.0f),
             "rmsnorm_backward", "N=%d C=%d", N, C);
}

static void rope(int bf16, int back, void *qkv, const float *cs, int B, int T, int NH, int NKV, int hs) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c,
             back ? sr_k_rope_backward(c->stream, qkv, cs, B, T, NH, NKV, hs, bf16)
                  : sr_k_rope_forward(c->stream, qkv, cs, B, T, NH, NKV, hs, bf16),
             back ? "rope_backward" : "rope_forward", "B=%d T=%d NH=%d NKV=%d hs=%d", B, T, NH, NKV, hs);
}

static void swiglu_forward(int bf16, void *out, const void *gu, int N, int F) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_swiglu_forward(c->stream, out, gu, N, F, bf16), "swiglu_forward", "N=%d F=%d", N, F);
}

static void swiglu_backward(int bf16, void *dgu, const void *dout, const void *gu, int N, int F, float beta) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_swiglu_backward(c->stream, dgu, dout, gu, N, F, beta != 0.0f, bf16), "swiglu_backward",
             "N=%d F=%d", N, F);
}

static void gelu_forward(int bf16, void *out, const void *inp, size_t n) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_gelu_forward(c->stream, out, inp, n, bf16), "gelu_forward", "n=%zu", n);
}
static void gelu_backward(int bf16, void *dinp, const void *inp, const void *dout, size_t n, float beta, float *dbias,
                          int OC, float gbeta) {
    sr_cuda_ctx *c = dbias ? ctx_ws("gelu_backward (dbias)") : ctx();
    if (c && (!dbias || (OC > 0 && partials_fit(c, (int)(n / (size_t)OC), OC, "gelu_backward (dbias)"))))
        done(c, sr_k_gelu_backward(c->stream, dinp, inp, dout, n, beta != 0.0f, bf16, dbias, OC, gbeta != 0.0f, c->ws),
             "gelu_backward", "n=%zu OC=%d", n, OC);
}
static void residual_forward(int bf16, void *out, const void *a, const void *b, size_t n) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_residual_forward(c->stream, out, a, b, n, bf16), "residual_forward", "n=%zu", n);
}
static void crossentropy_forward(int bf16, float *losses, float *lse, const void *logits, const int *targets, int N,
                                 int V, int Vp) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_crossentropy_forward(c->stream, losses, lse, logits, targets, N, V, Vp, bf16),
             "crossentropy_forward", "N=%d V=%d Vp=%d", N, V, Vp);
}
static void crossentropy_backward(int bf16, void *logits, const float *lse, const int *targets, float dloss, int N,
                                  int V, int Vp) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_crossentropy_backward(c->stream, logits, lse, targets, dloss, N, V, Vp, bf16),
             "crossentropy_backward", "N=%d V=%d Vp=%d", N, V, Vp);
}

static void crossentropy_fused(int bf16, float *losses, float *lse, void *logits, const int *targets, float dloss,
                               int N, int V, int Vp) {
    sr_cuda_ctx *c = ctx();
    if (c)
        done(c, sr_k_crossentropy_fused(c->stream, losses, lse, logits, targets, dloss, N, V, Vp, bf16),
             "crossentropy_fused", "N=%d V=%d Vp=%d", N, V, Vp);
}

static size_t attention_save(int bf16, int B, int T, int NH) { return (size_t)B * NH * T * T * es(bf16); }
static size_t flash_save(int B, int T, int NH) { return (size_t)B * NH * T * sizeof(float); }

static size_t workspace(int flash, int B, int T, int C, int NH) {
    size_t sort = 0;
    if (sr_cuda_sort_bytes((size_t)B * T, &sort) != 0) {
        (void)cudaGetLastError(); /* no GPU here (a plan): the estimate */
        sort = 0;
    }
    if (sr_cuda_bound())
        sr_cuda_bound()->sort_bytes = sort;
    return sr_cuda_ws_bytes(B, T, C, NH, sort, flash);
}
static size_t workspace_bytes(int B, int T, int C, int NH) { return workspace(0, B, T, C, NH); }
static size_t flash_workspace_bytes(int B, int T, int C, int NH) { return workspace(1, B, T, C, NH); }

static void bind_workspace(void *ws, size_t bytes) {
    sr_cuda_ctx *c = ctx();
    if (c) {
        c->ws = ws;
        c->ws_bytes = bytes;
    }
}

/* ------------------------------------------------------------------------ */
/* the two tables: thin entries that fix the dtype */

#define TABLE(SUF, BF)                                                                                                 \
    static void encoder_forward_##SUF(void *o, const int *i, const void *e, const void *p, int B, int T, int C) {      \
        encoder_forward(BF, o, i, e, p, B, T, C);                                                                      \
    }                                                                                                                  \
    static void encoder_backward_##SUF(float *a, float *b, const void *d, const int *i, int B, int T, int C,           \
                                       float gb) {                                                                     \
        encoder_backward(BF, a, b, d, i, B, T, C, gb);                                                                 \
    }                                                                                                                  \
    static void layernorm_forward_##SUF(void *o, float *m, float *r, const void *i, const void *w, const void *b,      \
                                        int N, int C) {                                                                \
        layernorm_forward(BF, o, m, r, i, w, b, N, C);                                                                 \
    }                                                                                                                  \
    static void residual_layernorm_forward_##SUF(void *rs, void *o, float *m, float *r, const void *a, const void *b,  \
                                                 const void *w, const void *bi, int N, int C) {                        \
        residual_layernorm_forward(BF, rs, o, m, r, a, b, w, bi, N, C);                                                \
    }                                                                                                                  \
    static void layernorm_backward_##SUF(void *di, float *dw, float *db, const void *d, const void *i, const void *w,  \
                                         const float *m, const float *r, int N, int C, float beta, float gb,           \
                                         float *si, float *so, float sb) {                                             \
        layernorm_backward(BF, di, dw, db, d, i, w, m, r, N, C, beta, gb, si, so, sb);                                 \
    }                                                                                                                  \
    static void matmul_forward_##SUF(void *o, const void *i, const void *w, const void *b, int N, int C, int OC) {     \
        matmul_forward(BF, o, i, w, b, N, C, OC);                                                                      \
    }                                                                                                                  \
    static void matmul_backward_##SUF(void *di, float *dw, float *db, const void *d, const void *i, const void *w,     \
                                      int N, int C, int OC, float beta, float gb) {                                    \
        matmul_backward(BF, di, dw, db, d, i, w, N, C, OC, beta, gb);                                                  \
    }                                                                                                                  \
    static void attention_forward_##SUF(void *o, void *a, const void *q, int B, int T, int C, int NH) {                \
        attention_forward(BF, o, a, q, B, T, C, NH);                                                                   \
    }                                                                                                                  \
    static void attention_backward_##SUF(void *dq, const void *d, const void *o, const void *q, const void *a, int B,  \
                                         int T, int C, int NH, float *db, float gb) {                                  \
        (void)o;                                                                                                       \
        attention_backward(BF, dq, d, q, a, B, T, C, NH, db, gb);                                                      \
    }                                                                                                                  \
    static size_t attention_save_##SUF(int B, int T, int NH) { return attention_save(BF, B, T, NH); }                  \
    static void rmsnorm_forward_##SUF(void *o, float *r, const void *i, const void *w, float e, int N, int C) {        \
        rmsnorm_forward(BF, o, r, i, w, e, N, C);                                                                      \
    }                                                                                                                  \
    static void rmsnorm_backward_##SUF(void *di, float *dw, const void *d, const void *i, const void *w,               \
                                       const float *r, int N, int C, float beta, float gb) {                           \
        rmsnorm_backward(BF, di, dw, d, i, w, r, N, C, beta, gb);                                                      \
    }                                                                                                                  \
    static void residual_rmsnorm_forward_##SUF(void *rs, void *o, float *r, const void *a, const void *b,              \
                                               const void *w, float e, int N, int C) {                                 \
        residual_rmsnorm_forward(BF, rs, o, r, a, b, w, e, N, C);                                                      \
    }                                                                                                                  \
    static void rope_forward_##SUF(void *q, const float *cs, int B, int T, int NH, int NKV, int hs) {                  \
        rope(BF, 0, q, cs, B, T, NH, NKV, hs);                                                                         \
    }                                                                                                                  \
    static void rope_backward_##SUF(void *q, const float *cs, int B, int T, int NH, int NKV, int hs) {                 \
        rope(BF, 1, q, cs, B, T, NH, NKV, hs);                                                                         \
    }                                                                                                                  \
    static void swiglu_forward_##SUF(void *o, const void *gu, int N, int F) { swiglu_forward(BF, o, gu, N, F); }       \
    static void swiglu_backward_##SUF(void *d, const void *o, const void *gu, int N, int F, float beta) {              \
        swiglu_backward(BF, d, o, gu, N, F, beta);                                                                     \
    }                                                                                                                  \
    static void gqa_forward_##SUF(void *o, void *a, const void *q, int B, int T, int NH, int NKV, int hs) {            \
        gqa_forward(BF, o, a, q, B, T, NH, NKV, hs);                                                                   \
    }                                                                                                                  \
    static void gqa_backward_##SUF(void *dq, const void *d, const void *o, const void *q, const void *a, int B, int T, \
                                   int NH, int NKV, int hs) {                                                          \
        (void)o;                                                                                                       \
        gqa_backward(BF, dq, d, q, a, B, T, NH, NKV, hs);                                                              \
    }                                                                                                                  \
    static void gelu_forward_##SUF(void *o, const void *i, size_t n) { gelu_forward(BF, o, i, n); }                    \
    static void gelu_backward_##SUF(void *di, const void *i, const void *d, size_t n, float beta, float *db, int OC,   \
                                    float gb) {                                                                        \
        gelu_backward(BF, di, i, d, n, beta, db, OC, gb);                                                              \
    }                                                                                                                  \
    static void residual_forward_##SUF(void *o, const void *a, const void *b, size_t n) {                              \
        residual_forward(BF, o, a, b, n);                                                                              \
    }                                                                                                                  \
    static void crossentropy_forward_##SUF(float *l, float *s, const void *g, const int *t, int N, int V, int Vp) {    \
        crossentropy_forward(BF, l, s, g, t, N, V, Vp);                                                                \
    }                                                                                                                  \
    static void crossentropy_backward_##SUF(void *g, const float *s, const int *t, float d, int N, int V, int Vp) {    \
        crossentropy_backward(BF, g, s, t, d, N, V, Vp);                                                               \
    }                                                                                                                  \
    static void crossentropy_fused_##SUF(float *l, float *s, void *g, const int *t, float d, int N, int V, int Vp) {   \
        crossentropy_fused(BF, l, s, g, t, d, N, V, Vp);                                                               \
    }                                                                                                                  \
    const sr_ops sr_ops_cuda_##SUF = {                                                                                 \
        .name = "cuda-" #SUF,                                                                                          \
        .act = BF ? SR_DT_BF16 : SR_DT_F32,                                                                            \
        .encoder_forward = encoder_forward_##SUF,                                                                      \
        .encoder_backward = encoder_backward_##SUF,                                                                    \
        .layernorm_forward = layernorm_forward_##SUF,                                                                  \
        .residual_layernorm_forward = residual_layernorm_forward_##SUF,                                                \
        .layernorm_backward = layernorm_backward_##SUF,                                                                \
        .matmul_forward = matmul_forward_##SUF,                                                                        \
        .matmul_backward = matmul_backward_##SUF,                                                                      \
        .attention_forward = attention_forward_##SUF,                                                                  \
        .attention_backward = attention_backward_##SUF,                                                                \
        .attention_save_bytes = attention_save_##SUF,                                                                  \
        .gelu_forward = gelu_forward_##SUF,                                                                            \
        .gelu_backward = gelu_backward_##SUF,                                                                          \
        .residual_forward = residual_forward_##SUF,                                                                    \
        .crossentropy_forward = crossentropy_forward_##SUF,                                                            \
        .crossentropy_backward = crossentropy_backward_##SUF,                                                          \
        .crossentropy_fused = crossentropy_fused_##SUF,                                                                \
        .rmsnorm_forward = rmsnorm_forward_##SUF,                                                                      \
        .rmsnorm_backward = rmsnorm_backward_##SUF,                                                                    \
        .residual_rmsnorm_forward = residual_rmsnorm_forward_##SUF,                                                    \
        .rope_forward = rope_forward_##SUF,                                                                            \
        .rope_backward = rope_backward_##SUF,                                                                          \
        .swiglu_forward = swiglu_forward_##SUF,                                                                        \
        .swiglu_backward = swiglu_backward_##SUF,                                                                      \
        .gqa_attention_forward = gqa_forward_##SUF,                                                                    \
        .gqa_attention_backward = gqa_backward_##SUF,                                                                  \
        .workspace_bytes = workspace_bytes,                                                                            \
        .bind_workspace = bind_workspace,                                                                              \
        .take_error = take_error,                                                                                      \
    };

TABLE(f32, 0)
TABLE(bf16, 1)

/* The bf16 table with flash attention (model.attention, ARCHITECTURE
 * §3c): the same ops but attention's, its saved bytes and workspace. */
static void flash_forward_mha(void *o, void *a, const void *q, int B, int T, int C, int NH) {
    flash_forward(o, a, q, B, T, NH, NH, C / NH);
}
static void flash_backward_mha(void *dq, const void *d, const void *o, const void *q, const void *a, int B, int T,
                               int C, int NH, float *dbias, float gbeta) {
    flash_backward_bias(dq, d, o, q, a, B, T, NH, NH, C / NH, dbias, gbeta);
}
const sr_ops sr_ops_cuda_bf16_flash = {
    .name = "cuda-bf16-flash",
    .act = SR_DT_BF16,
    .encoder_forward = encoder_forward_bf16,
    .encoder_backward = encoder_backward_bf16,
    .layernorm_forward = layernorm_forward_bf16,
    .residual_layernorm_forward = residual_layernorm_forward_bf16,
    .layernorm_backward = layernorm_backward_bf16,
    .matmul_forward = matmul_forward_bf16,
    .matmul_backward = matmul_backward_bf16,
    .attention_forward = flash_forward_mha,
    .attention_backward = flash_backward_mha,
    .attention_save_bytes = flash_save,
    .attention_backward_assigns = 1,
    .gelu_forward = gelu_forward_bf16,
    .gelu_backward = gelu_backward_bf16,
    .residual_forward = residual_forward_bf16,
    .crossentropy_forward = crossentropy_forward_bf16,
    .crossentropy_backward = crossentropy_backward_bf16,
    .crossentropy_fused = crossentropy_fused_bf16,
    .rmsnorm_forward = rmsnorm_forward_bf16,
    .rmsnorm_backward = rmsnorm_backward_bf16,
    .residual_rmsnorm_forward = residual_rmsnorm_forward_bf16,
    .rope_forward = rope_forward_bf16,
    .rope_backward = rope_backward_bf16,
    .swiglu_forward = swiglu_forward_bf16,
    .swiglu_backward = swiglu_backward_bf16,
    .gqa_attention_forward = flash_forward,
    .gqa_attention_backward = flash_backward,
    .workspace_bytes = flash_workspace_bytes,
    .bind_workspace = bind_workspace,
    .take_error = take_error,
};
