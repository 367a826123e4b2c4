/* ops_cpu.c — CPU reference implementation of sr_ops (OpenBLAS + OpenMP).
 *
 * This file owns the CPU back end and the threading policy.  One thread
 * pool: OpenMP.  OpenBLAS is told to use one thread, and each GEMM is split
 * into row (or column) blocks that the OpenMP threads hand to cblas_sgemm
 * independently.  That keeps OpenBLAS's pthread pool and OpenMP's pool from
 * busy-waiting against each other on few cores, and makes results depend on
 * the thread count only through the GEMM blocking.  Reductions that cross
 * rows (LayerNorm weight grads, bias grads, embedding grads) are split by
 * column so every sum runs in one fixed order whatever the thread count.
 * Attention runs per (batch, head) pair in parallel forward and per
 * (batch, key/value head) backward, with GEMMs for QK^T, att·V and their
 * gradients; grouped-query heads (the Llama family) are the same loops
 * with fewer key/value heads.  RMSNorm, RoPE and SwiGLU are row kernels
 * like LayerNorm and GELU. */
#include "srconfig.h"

#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "isa.h"
#include "mem.h"

static int n_threads = 1;
/* The first failure of an op on this thread since take_error() (ops return
 * void: what can fail on the CPU is a scratch allocation). */
static _Thread_local sr_status op_error = SR_OK;

static void fail(sr_status st) {
    if (op_error == SR_OK)
        op_error = st;
}

static sr_status take_error(void) {
    sr_status st = op_error;
    op_error = SR_OK;
    return st;
}

int sr_ops_set_threads(int n) {
    if (n <= 0) {
        cpu_set_t set;
        n = 1;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            n = CPU_COUNT(&set);
        if (n < 1)
            n = 1;
    }
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    n = 1;
#endif
    openblas_set_num_threads(1);
    n_threads = n;
    return n;
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* [lo, hi) of `n` items for thread `id` of `nt`, in `align`-sized blocks. */
static void split_range(int n, int id, int nt, int align, int *lo, int *hi) {
    int blocks = (n + align - 1) / align;
    int per = blocks / nt, extra = blocks % nt;
    int b0 = id * per + (id < extra ? id : extra);
    int b1 = b0 + per + (id < extra ? 1 : 0);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* exp and tanh that GCC vectorises (glibc's expf/tanhf are scalar calls and
 * were a third of a tiny-model step).  exp: x = k ln2 + r with k rounded to
 * nearest by the 1.5 * 2^23 trick (floorf blocks vectorisation), |r| <= ln2/2,
 * a degree-6 Taylor polynomial (relative error < 2e-7), scaled by 2^k built
 * in the exponent bits; k is clamped to [-127, 128], so results below
 * ~1e-38 are 0 and above ~3e38 are +inf.  Exact for |x| < 1e13, far beyond
 * what the model's finite activations reach. */
typedef union {
    float f;
    int32_t i;
} float_bits;

static inline SR_ISA_INLINE float fast_expf(float x) {
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
    float p =
        1.0f +
        r * (1.0f + r * (0.5f + r * (1.6666667e-1f + r * (4.1666668e-2f + r * (8.3333338e-3f + r * 1.3888889e-3f)))));
    int32_t ki = (int32_t)k;
    ki = ki < -127 ? -127 : ki;
    ki = ki > 128 ? 128 : ki;
    float_bits scale;
    scale.i = (ki + 127) << 23;
    return p * scale.f;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error ~1e-7. */
static inline SR_ISA_INLINE float fast_tanhf(float x) { return 1.0f - 2.0f / (fast_expf(2.0f * x) + 1.0f); }

/* ------------------------------------------------------------------------ */
/* Row and chunk kernels, compiled per ISA level (isa.h).  Each runs on one
 * thread; the ops below split rows or ranges over the OpenMP team and call
 * them, so the vector code is the clone's. */

/* out[o] = bias[o] + x . w[o] for rows o of w in [o0, o1): one input row
 * times the weight (a one-token forward).  Sixteen lanes over k, summed
 * as a tree, so each output's value does not depend on which thread or
 * how many compute it. */
static inline SR_ISA_INLINE void gemv_rows_body(float *out, const float *x, const float *w, const float *bias, int C,
                                                int o0, int o1) {
    for (int o = o0; o < o1; o++) {
        const float *r = w + (size_t)o * C;
        float acc[16] = {0.0f};
        int c = 0;
        for (; c + 16 <= C; c += 16)
            for (int j = 0; j < 16; j++)
                acc[j] += x[c + j] * r[c + j];
        float tail = 0.0f;
        for (; c < C; c++)
            tail += x[c] * r[c];
        for (int half = 8; half; half >>= 1)
            for (int j = 0; j < half; j++)
                acc[j] += acc[j + half];
        out[o] = (bias ? bias[o] : 0.0f) + (acc[0] + tail);
    }
}
SR_ISA_KERNEL(gemv_rows, (float *out, const float *x, const float *w, const float *bias, int C, int o0, int o1),
              (out, x, w, bias, C, o0, o1))

/* out[i] = a[i] + b[i] */
static inline SR_ISA_INLINE void vadd_body(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}
SR_ISA_KERNEL(vadd, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))

/* x[i] += d[i]; y[i] += d[i] */
static inline SR_ISA_INLINE void acc2_body(float *x, float *y, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        x[i] += d[i];
        y[i] += d[i];
    }
}
SR_ISA_KERNEL(acc2, (float *x, float *y, const float *d, size_t n), (x, y, d, n))

/* acc[i] += d[i] */
static inline SR_ISA_INLINE void acc1_body(float *acc, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] += d[i];
}
SR_ISA_KERNEL(acc1, (float *acc, const float *d, size_t n), (acc, d, n))

static inline SR_ISA_INLINE void ln_fwd_row_body(float *o, float *mean, float *rstd, const float *x, const float *w,
                                                 const float *b, int C) {
    const float eps = 1e-5f;
    float m = 0.0f;
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
        float d = x[c] - m;
        v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + eps);
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}
SR_ISA_KERNEL(ln_fwd_row, (float *o, float *mean, float *rstd, const float *x, const float *w, const float *b, int C),
              (o, mean, rstd, x, w, b, C))

static inline SR_ISA_INLINE void ln_bwd_row_body(float *di, const float *x, const float *d, const float *w, float m,
                                                 float s, int C) {
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        float dn = w[c] * d[c];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        float dn = w[c] * d[c];
        di[c] += (dn - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}
SR_ISA_KERNEL(ln_bwd_row, (float *di, const float *x, const float *d, const float *w, float m, float s, int C),
              (di, x, d, w, m, s, C))

static inline SR_ISA_INLINE void ln_bwd_cols_body(float *dw, float *db, const float *x, const float *d, float m,
                                                  float s, int n) {
    for (int c = 0; c < n; c++) {
        dw[c] += (x[c] - m) * s * d[c];
        db[c] += d[c];
    }
}
SR_ISA_KERNEL(ln_bwd_cols, (float *dw, float *db, const float *x, const float *d, float m, float s, int n),
              (dw, db, x, d, m, s, n))

/* Row t of a causal softmax over a[0..T): softmax of a[0..t], zeros after. */
static inline SR_ISA_INLINE void softmax_causal_row_body(float *row, int t, int T) {
    float mx = row[0];
    for (int t2 = 1; t2 <= t; t2++)
        mx = row[t2] > mx ? row[t2] : mx;
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++)
        row[t2] = fast_expf(row[t2] - mx);
    for (int t2 = 0; t2 <= t; t2++)
        sum += row[t2];
    float inv = 1.0f / sum;
    for (int t2 = 0; t2 <= t; t2++)
        row[t2] *= inv;
    for (int t2 = t + 1; t2 < T; t2++)
        row[t2] = 0.0f;
}
SR_ISA_KERNEL(softmax_causal_row, (float *row, int t, int T), (row, t, T))

/* Softmax backward of row t in place: dr = a * (dr - sum(a * dr)), zeros after t. */
static inline SR_ISA_INLINE void softmax_causal_bwd_row_body(float *dr, const float *ar, int t, int T) {
    float dot = 0.0f;
    for (int t2 = 0; t2 <= t; t2++)
        dot += ar[t2] * dr[t2];
    for (int t2 = 0; t2 <= t; t2++)
        dr[t2] = ar[t2] * (dr[t2] - dot);
    for (int t2 = t + 1; t2 < T; t2++)
        dr[t2] = 0.0f;
}
SR_ISA_KERNEL(softmax_causal_bwd_row, (float *dr, const float *ar, int t, int T), (dr, ar, t, T))

/* RMSNorm row: o = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). */
static inline SR_ISA_INLINE void rms_fwd_row_body(float *o, float *rstd, const float *x, const float *w, float eps,
                                                  int C) {
    float ss = 0.0f;
    for (int c = 0; c < C; c++)
        ss += x[c] * x[c];
    float s = 1.0f / sqrtf(ss / C + eps);
    for (int c = 0; c < C; c++)
        o[c] = x[c] * s * w[c];
    *rstd = s;
}
SR_ISA_KERNEL(rms_fwd_row, (float *o, float *rstd, const float *x, const float *w, float eps, int C),
              (o, rstd, x, w, eps, C))

/* RMSNorm row backward: with g = w * d, di += s (g - s^2 x mean(g x)). */
static inline SR_ISA_INLINE void rms_bwd_row_body(float *di, const float *x, const float *d, const float *w, float s,
                                                  int C) {
    float dot = 0.0f;
    for (int c = 0; c < C; c++)
        dot += w[c] * d[c] * x[c];
    dot /= C;
    for (int c = 0; c < C; c++)
        di[c] += (w[c] * d[c] - x[c] * s * s * dot) * s;
}
SR_ISA_KERNEL(rms_bwd_row, (float *di, const float *x, const float *d, const float *w, float s, int C),
              (di, x, d, w, s, C))

/* dw[c] += x[c] * s * d[c] over one row's column block */
static inline SR_ISA_INLINE void rms_bwd_cols_body(float *dw, const float *x, const float *d, float s, int n) {
    for (int c = 0; c < n; c++)
        dw[c] += x[c] * s * d[c];
}
SR_ISA_KERNEL(rms_bwd_cols, (float *dw, const float *x, const float *d, float s, int n), (dw, x, d, s, n))

/* Rotate-half on `heads` heads of hs at x (contiguous): sign +1 rotates by
 * the angle (forward), -1 by its negative (the gradient's inverse). */
static inline SR_ISA_INLINE void rope_row_body(float *x, const float *cs, int heads, int hs, float sign) {
    int half = hs / 2;
    const float *cosv = cs, *sinv = cs + half;
    for (int h = 0; h < heads; h++) {
        float *a = x + (size_t)h * hs, *b = a + half;
        for (int i = 0; i < half; i++) {
            float x1 = a[i], x2 = b[i], sn = sign * sinv[i];
            a[i] = x1 * cosv[i] - x2 * sn;
            b[i] = x2 * cosv[i] + x1 * sn;
        }
    }
}
SR_ISA_KERNEL(rope_row, (float *x, const float *cs, int heads, int hs, float sign), (x, cs, heads, hs, sign))

/* SwiGLU over one row: out[f] = silu(g[f]) * u[f] */
static inline SR_ISA_INLINE void swiglu_fwd_body(float *out, const float *g, const float *u, int F) {
    for (int f = 0; f < F; f++) {
        float a = g[f], sig = 1.0f / (1.0f + fast_expf(-a));
        out[f] = a * sig * u[f];
    }
}
SR_ISA_KERNEL(swiglu_fwd, (float *out, const float *g, const float *u, int F), (out, g, u, F))

/* dg += dout u silu'(g), du += dout silu(g); silu'(a) = sig (1 + a (1 - sig)) */
/* acc 1: += (beta 1); 0: = (beta 0: dg and du not read) */
static inline SR_ISA_INLINE void swiglu_bwd_body(float *dg, float *du, const float *dout, const float *g,
                                                 const float *u, int F, int acc) {
    for (int f = 0; f < F; f++) {
        float a = g[f], sig = 1.0f / (1.0f + fast_expf(-a));
        float vg = dout[f] * u[f] * (sig * (1.0f + a * (1.0f - sig))), vu = dout[f] * (a * sig);
        dg[f] = acc ? dg[f] + vg : vg;
        du[f] = acc ? du[f] + vu : vu;
    }
}
SR_ISA_KERNEL(swiglu_bwd, (float *dg, float *du, const float *dout, const float *g, const float *u, int F, int acc),
              (dg, du, dout, g, u, F, acc))

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

static inline SR_ISA_INLINE void gelu_fwd_body(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + fast_tanhf(GELU_SCALE * (x + cube)));
    }
}
SR_ISA_KERNEL(gelu_fwd, (float *out, const float *inp, size_t n), (out, inp, n))

static inline SR_ISA_INLINE void gelu_bwd_body(float *dinp, const float *inp, const float *dout, size_t n, int acc) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float arg = GELU_SCALE * (x + cube);
        float th = fast_tanhf(arg);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        float v = grad * dout[i];
        dinp[i] = acc ? dinp[i] + v : v; /* acc 0 (beta 0): dinp not read */
    }
}
SR_ISA_KERNEL(gelu_bwd, (float *dinp, const float *inp, const float *dout, size_t n, int acc),
              (dinp, inp, dout, n, acc))

/* One row of the classifier: the log-sum-exp of the real logits into
 * *lse; returns the loss -log p[target] from the shifted logits (finite
 * even when p underflows).  The logits are read only: the exponentials go
 * through a small buffer, in chunks, so the exp loop stays vectorised and
 * the sum keeps its one fixed order. */
static inline SR_ISA_INLINE float xent_fwd_row_body(float *lse, const float *l, int target, int V) {
    enum { CHUNK = 256 };
    float e[CHUNK];
    float mx = l[0];
    for (int v = 1; v < V; v++)
        mx = l[v] > mx ? l[v] : mx;
    double sum = 0.0;
    for (int v0 = 0; v0 < V; v0 += CHUNK) {
        int n = V - v0 < CHUNK ? V - v0 : CHUNK;
        for (int k = 0; k < n; k++)
            e[k] = fast_expf(l[v0 + k] - mx);
        for (int k = 0; k < n; k++)
            sum += e[k];
    }
    double log_sum = log(sum);
    *lse = (float)((double)mx + log_sum);
    return (float)(log_sum - (double)(l[target] - mx));
}
SR_ISA_KERNEL_RET(float, xent_fwd_row, (float *lse, const float *l, int target, int V), (lse, l, target, V))

/* Sum of x[0..n) in double, four interleaved partial sums added in a fixed
 * order (the latency of one serial chain, not its rounding, is the cost). */
static inline SR_ISA_INLINE double sum4(const float *x, int n) {
    double a = 0.0, b = 0.0, c = 0.0, d = 0.0;
    int k = 0;
    for (; k + 4 <= n; k += 4) {
        a += x[k];
        b += x[k + 1];
        c += x[k + 2];
        d += x[k + 3];
    }
    for (; k < n; k++)
        a += x[k];
    return (a + b) + (c + d);
}

/* The logits of one row become dlogits: exp(l - lse) * dloss, and at the
 * target minus the sum of the others' (p - 1 = -sum of the other p: it
 * keeps its precision as p -> 1, where 1 - p is far below the spacing of
 * p, and the row's gradient sums to zero); padding zero. */
static inline SR_ISA_INLINE void xent_bwd_row_body(float *l, float lse, int target, float dloss, int V, int Vp) {
    for (int v = 0; v < V; v++)
        l[v] = fast_expf(l[v] - lse);
    double others = sum4(l, target) + sum4(l + target + 1, V - target - 1);
    for (int v = 0; v < V; v++)
        l[v] *= dloss;
    l[target] = (float)(-others * (double)dloss);
    for (int v = V; v < Vp; v++)
        l[v] = 0.0f;
}
SR_ISA_KERNEL(xent_bwd_row, (float *l, float lse, int target, float dloss, int V, int Vp),
              (l, lse, target, dloss, V, Vp))

/* [lo, hi) of n elements for this thread, in 64-element blocks. */
static void my_range(size_t n, size_t *lo, size_t *hi) {
    int blocks = (int)((n + 63) / 64), b0, b1;
    split_range(blocks, thread_id(), team_size(), 1, &b0, &b1);
    *lo = (size_t)b0 * 64 < n ? (size_t)b0 * 64 : n;
    *hi = (size_t)b1 * 64 < n ? (size_t)b1 * 64 : n;
}

/* ------------------------------------------------------------------------ */

static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        if (wpe)
            vadd(out + (size_t)bt * C, wte + (size_t)inp[bt] * C, wpe + (size_t)(bt % T) * C, (size_t)C);
        else
            memcpy(out + (size_t)bt * C, wte + (size_t)inp[bt] * C, (size_t)C * sizeof(float));
    }
}

static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C,
                             float gbeta) {
    /* Split by channel: each thread owns columns [c0, c1) of dwte and dwpe,
     * so scattered token rows never collide and the order is fixed.  The
     * overwrite form zeroes its dwpe columns first: the same sums as a
     * zeroed buffer's, bit for bit. */
#pragma omp parallel
    {
        int c0, c1;
        split_range(C, thread_id(), team_size(), 16, &c0, &c1);
        if (c1 > c0 && dwpe && gbeta == 0.0f)
            for (int t = 0; t < T; t++)
                memset(dwpe + (size_t)t * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
        if (c1 > c0)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const float *d = dout + ((size_t)b * T + t) * C;
                    if (dwpe)
                        acc2(dwte + (size_t)inp[b * T + t] * C + c0, dwpe + (size_t)t * C + c0, d + c0,
                             (size_t)(c1 - c0));
                    else
                        acc1(dwte + (size_t)inp[b * T + t] * C + c0, d + c0, (size_t)(c1 - c0));
                }
    }
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        ln_fwd_row(out + (size_t)n * C, &mean[n], &rstd[n], inp + (size_t)n * C, w, b, C);
}

/* The overwrite forms (ops.h: beta, gbeta 0) zero what they write first:
 * the same sums as a zeroed buffer's, bit for bit. */
static void zero_if(float *p, size_t n, float beta) {
    if (beta == 0.0f)
        memset(p, 0, n * sizeof(float));
}

/* Inside a parallel region: sum[c] = beta sum[c] + x[0][c] + x[1][c] + ...
 * over N rows of width W, for this thread's columns (16 at a time), each
 * row added in order: matmul_backward's bias sum, whatever the team. */
static void colsum_part(float *sum, const float *x, int N, int W, float beta) {
    int c0, c1;
    split_range(W, thread_id(), team_size(), 16, &c0, &c1);
    if (c1 <= c0)
        return;
    zero_if(sum + c0, (size_t)(c1 - c0), beta);
    for (int n = 0; n < N; n++)
        acc1(sum + c0, x + (size_t)n * W + c0, (size_t)(c1 - c0));
}

static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C, float beta, float gbeta,
                               float *sum_in, float *sum_out, float sbeta) {
#pragma omp parallel
    {
        /* Pass 0 (sum_in): the column sums of dinp as it came in, before
         * pass 1 writes it */
        if (sum_in) {
            colsum_part(sum_in, dinp, beta != 0.0f ? N : 0, C, sbeta); /* (beta 0: dinp not read, no rows) */
#pragma omp barrier
        }
        /* Pass 1, by row: the input gradient. */
#pragma omp for
        for (int n = 0; n < N; n++) {
            zero_if(dinp + (size_t)n * C, (size_t)C, beta);
            ln_bwd_row(dinp + (size_t)n * C, inp + (size_t)n * C, dout + (size_t)n * C, w, mean[n], rstd[n], C);
        }
        /* Pass 2, by column block: weight and bias gradients. */
        int c0, c1;
        split_range(C, thread_id(), team_size(), 16, &c0, &c1);
        if (c1 > c0) {
            zero_if(dw + c0, (size_t)(c1 - c0), gbeta);
            zero_if(db + c0, (size_t)(c1 - c0), gbeta);
        }
        if (c1 > c0)
            for (int n = 0; n < N; n++)
                ln_bwd_cols(dw + c0, db + c0, inp + (size_t)n * C + c0, dout + (size_t)n * C + c0, mean[n], rstd[n],
                            c1 - c0);
        /* Pass 3 (sum_out): the input gradient's column sums, pass 1
         * done (the barrier of its loop) */
        if (sum_out)
            colsum_part(sum_out, dinp, N, C, sbeta);
    }
}

static void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    if (N == 1) {
        /* one row (a one-token forward): split the output columns, 64 at a
         * time, so every thread works */
#pragma omp parallel
        {
            int o0, o1;
            split_range(OC, thread_id(), team_size(), 64, &o0, &o1);
            if (o1 > o0)
                gemv_rows(out, inp, w, bias, C, o0, o1);
        }
        return;
    }
#pragma omp parallel
    {
        int n0, n1;
        split_range(N, thread_id(), team_size(), 16, &n0, &n1);
        if (n1 > n0) {
            float *o = out + (size_t)n0 * OC;
            if (bias) {
                for (int n = n0; n < n1; n++)
                    memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n1 - n0, OC, C, 1.0f, inp + (size_t)n0 * C, C, w, C,
                        bias ? 1.0f : 0.0f, o, OC);
        }
    }
}

static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                            int N, int C, int OC, float beta, float gbeta) {
#pragma omp parallel
    {
        int id = thread_id(), nt = team_size();
        int n0, n1, o0, o1;
        /* dinp[N,C] = beta dinp + dout[N,OC] @ w[OC,C], split by rows of N
         * (BLAS reads no C when beta is 0) */
        split_range(N, id, nt, 16, &n0, &n1);
        if (n1 > n0 && dinp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, OC, 1.0f, dout + (size_t)n0 * OC, OC, w,
                        C, beta != 0.0f ? 1.0f : 0.0f, dinp + (size_t)n0 * C, C);
        /* dw[OC,C] = gbeta dw + dout^T @ inp, split by rows of OC (BLAS
         * zeroes C first when beta is 0: the same sums) */
        split_range(OC, id, nt, 16, &o0, &o1);
        if (o1 > o0)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, C, N, 1.0f, dout + o0, OC, inp, C,
                        gbeta != 0.0f ? 1.0f : 0.0f, dw + (size_t)o0 * C, C);
        if (dbias && o1 > o0)
            zero_if(dbias + o0, (size_t)(o1 - o0), gbeta);
        if (dbias && o1 > o0)
            for (int n = 0; n < N; n++)
                acc1(dbias + o0, dout + (size_t)n * OC + o0, (size_t)(o1 - o0));
    }
}

/* Causal attention with NKV key/value heads for NH query heads (NKV == NH:
 * GPT-2's multi-head attention).  Row width W = (NH + 2 NKV) hs: queries,
 * keys, values. */
static void gqa_attention_forward(float *out, float *att, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    float scale = 1.0f / sqrtf((float)hs);
    int W = (NH + 2 * NKV) * hs, C = NH * hs, per = NH / NKV;
#pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / per;
        const float *row = qkv + (size_t)b * T * W;
        const float *q = row + (size_t)h * hs, *k = row + (size_t)(NH + g) * hs, *v = row + (size_t)(NH + NKV + g) * hs;
        float *a = att + (size_t)bh * T * T;
        /* a = scale * q k^T (the full square; the upper triangle is masked) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, W, k, W, 0.0f, a, T);
        for (int t = 0; t < T; t++)
            softmax_causal_row(a + (size_t)t * T, t, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, W, 0.0f,
                    out + (size_t)b * T * C + (size_t)h * hs, C);
    }
}

/* One task per (sequence, key/value head): its query heads run in head
 * order, so each key/value gradient is summed in one fixed order and no
 * two threads write the same head. */
static void gqa_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                   int NH, int NKV, int hs) {
    float scale = 1.0f / sqrtf((float)hs);
    int W = (NH + 2 * NKV) * hs, C = NH * hs, per = NH / NKV;
    /* one T x T scratch per thread, allocated before the team starts so an
     * allocation failure is reported (take_error) instead of crashing a
     * worker; counted but not accounted, like any short-lived buffer */
    int nt = n_threads;
    float *scratch = sr_malloc((size_t)nt * sr_ops_scratch_bytes(T));
    if (!scratch) {
        fail(sr_error_oom("the attention backward scratch"));
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        float *datt = scratch + (size_t)thread_id() * T * T;
#pragma omp for schedule(dynamic)
        for (int bg = 0; bg < B * NKV; bg++) {
            int b = bg / NKV, g = bg % NKV;
            size_t base = (size_t)b * T * W;
            const float *k = qkv + base + (size_t)(NH + g) * hs, *v = qkv + base + (size_t)(NH + NKV + g) * hs;
            float *dk = dqkv + base + (size_t)(NH + g) * hs, *dv = dqkv + base + (size_t)(NH + NKV + g) * hs;
            for (int h = g * per; h < (g + 1) * per; h++) {
                const float *q = qkv + base + (size_t)h * hs;
                float *dq = dqkv + base + (size_t)h * hs;
                const float *a = att + ((size_t)b * NH + h) * T * T;
                const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
                /* datt = dy v^T ; dv += a^T dy */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, W, 0.0f, datt, T);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C, 1.0f, dv, W);
                /* softmax backward, in place: dpre = a * (datt - sum(a * datt)) */
                for (int t = 0; t < T; t++)
                    softmax_causal_bwd_row(datt + (size_t)t * T, a + (size_t)t * T, t, T);
                /* dq += scale dpre k ; dk += scale dpre^T q */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, datt, T, k, W, 1.0f, dq, W);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, datt, T, q, W, 1.0f, dk, W);
            }
        }
    }
    free(scratch);
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    gqa_attention_forward(out, att, qkv, B, T, NH, NH, C / NH);
}

static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                               int NH) {
    gqa_attention_backward(dqkv, dout, qkv, att, B, T, NH, NH, C / NH);
}

static void rmsnorm_forward(void *out_, float *rstd, const void *inp_, const void *w_, float eps, int N, int C) {
    float *out = out_;
    const float *inp = inp_, *w = w_;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        rms_fwd_row(out + (size_t)n * C, &rstd[n], inp + (size_t)n * C, w, eps, C);
}

static void rmsnorm_backward(void *dinp_, float *dw, const void *dout_, const void *inp_, const void *w_,
                             const float *rstd, int N, int C, float beta, float gbeta) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_;
#pragma omp parallel
    {
        /* Pass 1, by row: the input gradient. */
#pragma omp for
        for (int n = 0; n < N; n++) {
            zero_if(dinp + (size_t)n * C, (size_t)C, beta);
            rms_bwd_row(dinp + (size_t)n * C, inp + (size_t)n * C, dout + (size_t)n * C, w, rstd[n], C);
        }
        /* Pass 2, by column block: the weight gradient, rows in order. */
        int c0, c1;
        split_range(C, thread_id(), team_size(), 16, &c0, &c1);
        if (c1 > c0)
            zero_if(dw + c0, (size_t)(c1 - c0), gbeta);
        if (c1 > c0)
            for (int n = 0; n < N; n++)
                rms_bwd_cols(dw + c0, inp + (size_t)n * C + c0, dout + (size_t)n * C + c0, rstd[n], c1 - c0);
    }
}

static void rope(float *qkv, const float *cs, int B, int T, int NH, int NKV, int hs, float sign) {
    size_t W = (size_t)(NH + 2 * NKV) * hs;
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++)
        rope_row(qkv + (size_t)bt * W, cs + (size_t)(bt % T) * hs, NH + NKV, hs, sign);
}

static void rope_forward(void *qkv, const float *cs, int B, int T, int NH, int NKV, int hs) {
    rope(qkv, cs, B, T, NH, NKV, hs, 1.0f);
}

static void rope_backward(void *dqkv, const float *cs, int B, int T, int NH, int NKV, int hs) {
    rope(dqkv, cs, B, T, NH, NKV, hs, -1.0f);
}

static void swiglu_forward(void *out_, const void *gu_, int N, int F) {
    float *out = out_;
    const float *gu = gu_;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        swiglu_fwd(out + (size_t)n * F, gu + (size_t)n * 2 * F, gu + (size_t)n * 2 * F + F, F);
}

static void swiglu_backward(void *dgu_, const void *dout_, const void *gu_, int N, int F, float beta) {
    float *dgu = dgu_;
    const float *dout = dout_, *gu = gu_;
    int acc = beta != 0.0f;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *d = dgu + (size_t)n * 2 * F;
        const float *g = gu + (size_t)n * 2 * F;
        swiglu_bwd(d, d + F, dout + (size_t)n * F, g, g + F, F, acc);
    }
}

static void gqa_attention_forward_t(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs) {
    gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
}

static void gqa_attention_backward_t(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att,
                                     int B, int T, int NH, int NKV, int hs) {
    (void)out; /* (flash attention's; the saved probabilities suffice here) */
    gqa_attention_backward(dqkv, dout, qkv, att, B, T, NH, NKV, hs);
}

static void gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        gelu_fwd(out + lo, inp + lo, hi - lo);
    }
}

static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, float beta, float *dbias, int OC,
                          float gbeta) {
    int acc = beta != 0.0f;
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        gelu_bwd(dinp + lo, inp + lo, dout + lo, hi - lo, acc);
        if (dbias) {
#pragma omp barrier
            colsum_part(dbias, dinp, (int)(n / (size_t)OC), OC, gbeta);
        }
    }
}

static void residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        vadd(out + lo, a + lo, b + lo, hi - lo);
    }
}

static void crossentropy_forward(float *losses, float *lse, const void *logits_, const int *targets, int N, int V,
                                 int Vp) {
    const float *logits = logits_;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        losses[n] = xent_fwd_row(&lse[n], logits + (size_t)n * Vp, targets[n], V);
}

static void crossentropy_backward(void *logits_, const float *lse, const int *targets, float dloss, int N, int V,
                                  int Vp) {
    float *logits = logits_;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        xent_bwd_row(logits + (size_t)n * Vp, lse[n], targets[n], dloss, V, Vp);
}

/* the CPU's fused form: each row's forward then its backward, the same
 * arithmetic as the two ops (bitwise), one pass over the rows */
static void crossentropy_fused(float *losses, float *lse, void *logits_, const int *targets, float dloss, int N, int V,
                               int Vp) {
    float *logits = logits_;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *l = logits + (size_t)n * Vp;
        losses[n] = xent_fwd_row(&lse[n], l, targets[n], V);
        xent_bwd_row(l, lse[n], targets[n], dloss, V, Vp);
    }
}

static size_t attention_save_bytes(int B, int T, int NH) { return (size_t)B * NH * T * T * sizeof(float); }

/* The table's entries: the activation dtype is f32, so each `void *` of
 * the op contract is a float array (ops.h). */
static void encoder_forward_t(void *out, const int *inp, const void *wte, const void *wpe, int B, int T, int C) {
    encoder_forward(out, inp, wte, wpe, B, T, C);
}
static void encoder_backward_t(float *dwte, float *dwpe, const void *dout, const int *inp, int B, int T, int C,
                               float gbeta) {
    encoder_backward(dwte, dwpe, dout, inp, B, T, C, gbeta);
}
static void layernorm_forward_t(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b,
                                int N, int C) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
/* the fused forms: the two ops in turn (bitwise) */
static void residual_layernorm_forward_t(void *res, void *out, float *mean, float *rstd, const void *a, const void *b,
                                         const void *w, const void *bias, int N, int C) {
    residual_forward(res, a, b, (size_t)N * C);
    layernorm_forward(out, mean, rstd, res, w, bias, N, C);
}
static void residual_rmsnorm_forward_t(void *res, void *out, float *rstd, const void *a, const void *b, const void *w,
                                       float eps, int N, int C) {
    residual_forward(res, a, b, (size_t)N * C);
    rmsnorm_forward(out, rstd, res, w, eps, N, C);
}
static void layernorm_backward_t(void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C, float beta, float gbeta,
                                 float *sum_in, float *sum_out, float sbeta) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, beta, gbeta, sum_in, sum_out, sbeta);
}
static void matmul_forward_t(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC) {
    matmul_forward(out, inp, w, bias, N, C, OC);
}
static void matmul_backward_t(void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w,
                              int N, int C, int OC, float beta, float gbeta) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, beta, gbeta);
}
static void attention_forward_t(void *out, void *att, const void *qkv, int B, int T, int C, int NH) {
    attention_forward(out, att, qkv, B, T, C, NH);
}
static void attention_backward_t(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att, int B,
                                 int T, int C, int NH, float *dbias, float gbeta) {
    (void)out;
    attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    if (dbias) {
#pragma omp parallel
        colsum_part(dbias, dqkv, B * T, 3 * C, gbeta);
    }
}
static void gelu_forward_t(void *out, const void *inp, size_t n) { gelu_forward(out, inp, n); }
static void gelu_backward_t(void *dinp, const void *inp, const void *dout, size_t n, float beta, float *dbias, int OC,
                            float gbeta) {
    gelu_backward(dinp, inp, dout, n, beta, dbias, OC, gbeta);
}
static void residual_forward_t(void *out, const void *a, const void *b, size_t n) { residual_forward(out, a, b, n); }

const sr_ops sr_ops_cpu = {
    .name = "cpu",
    .act = SR_DT_F32,
    .encoder_forward = encoder_forward_t,
    .encoder_backward = encoder_backward_t,
    .layernorm_forward = layernorm_forward_t,
    .residual_layernorm_forward = residual_layernorm_forward_t,
    .layernorm_backward = layernorm_backward_t,
    .matmul_forward = matmul_forward_t,
    .matmul_backward = matmul_backward_t,
    .attention_forward = attention_forward_t,
    .attention_backward = attention_backward_t,
    .attention_save_bytes = attention_save_bytes,
    .gelu_forward = gelu_forward_t,
    .gelu_backward = gelu_backward_t,
    .residual_forward = residual_forward_t,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .crossentropy_fused = crossentropy_fused,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .residual_rmsnorm_forward = residual_rmsnorm_forward_t,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .gqa_attention_forward = gqa_attention_forward_t,
    .gqa_attention_backward = gqa_attention_backward_t,
    .take_error = take_error,
};

size_t sr_ops_scratch_bytes(int T) { return (size_t)T * (size_t)T * sizeof(float); }
