/* rmsnorm.cu — RMSNorm forward and backward (the Llama family), float
 * statistics whatever the activation dtype, and the forward with the
 * residual add before it fused in; layernorm.cu's structure (16-byte
 * packs where the layout allows, 32-bit offsets within a row).
 *
 * Forward: one warp per row (8 rows per 256-thread block): the sum of
 * squares (warp tree, fixed order), rstd = 1 / sqrt(ss / C + eps), out = x
 * * rstd * w; the fused form writes res = a + b (rounded) and normalises
 * it as stored, bitwise residual_forward then rmsnorm_forward.  Backward,
 * one pass: a block per chunk of SR_COLSUM_ROWS rows; its warps take the
 * rows for mean(g x) with g = w * dout, then each thread a pack of columns
 * down the chunk's rows in order: dinp = rstd (g - rstd^2 x mean(g x))
 * written or added, and x * rstd * dout summed into the chunk's partial
 * row; one finish launch adds the chunks in order.  No atomics: bitwise
 * reproducible. */
#include "common.cuh"

template <typename T, int V>
__global__ void rms_fwd_k(T *out, float *rstd, const T *inp, const T *a, T *res, const T *w, float eps, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    size_t at = (size_t)row * C;
    const T *x = inp + at;
    float ss = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V];
        sr_ldv<V>(x + c, v);
        if (res) {
            float u[V];
            sr_ldv<V>(a + at + c, u);
            SR_UNROLL
            for (int k = 0; k < V; k++)
                v[k] = sr_rounded<T>(u[k] + v[k]);
            sr_stv<V>(res + at + c, v);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++)
            ss += v[k] * v[k];
    }
    const T *in = res ? res + at : x;
    float s = 1.0f / sqrtf(sr_warp_sum(ss) / C + eps);
    T *o = out + at;
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V], wv[V];
        sr_ldv<V>(in + c, v);
        sr_ldv<V>(w + c, wv);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            v[k] = v[k] * s * wv[k];
        sr_stv<V>(o + c, v);
    }
    if (lane == 0)
        rstd[row] = s;
}

/* The chunk's rows: dinp (add), and partial[chunk][0..C) = sum of x *
 * rstd * dout over the chunk's rows in order. */
template <typename T, int V>
__global__ void rms_bwd_k(T *dinp, float *partial, const T *dout, const T *inp, const T *w, const float *rstd, int N,
                          int C, int add) {
    SR_SHARED(float, s_dot, SR_COLSUM_ROWS);
    int lo, hi, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    sr_colsum_bounds(blockIdx.x, N, &lo, &hi);
    for (int r = lo + warp; r < hi; r += nw) {
        const T *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        float dot = 0.0f;
        for (int c = lane * V; c < C; c += 32 * V) {
            float xv[V], dv[V], wv[V];
            sr_ldv<V>(x + c, xv);
            sr_ldv<V>(d + c, dv);
            sr_ldv<V>(w + c, wv);
            SR_UNROLL
            for (int k = 0; k < V; k++)
                dot += wv[k] * dv[k] * xv[k];
        }
        dot = sr_warp_sum(dot);
        if (lane == 0)
            s_dot[r - lo] = dot / C;
    }
    __syncthreads();
    float *part = partial + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
        float wv[V], aw[V];
        sr_ldv<V>(w + c, wv);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            aw[k] = 0.0f;
        for (int r = lo; r < hi; r++) {
            size_t at = (size_t)r * C + c;
            float xv[V], dv[V], g[V], old[V];
            sr_ldv<V>(inp + at, xv);
            sr_ldv<V>(dout + at, dv);
            if (add)
                sr_ldv<V>(dinp + at, old);
            float s = rstd[r], dot = s_dot[r - lo];
            SR_UNROLL
            for (int k = 0; k < V; k++) {
                float gk = (wv[k] * dv[k] - xv[k] * s * s * dot) * s;
                g[k] = add ? old[k] + gk : gk;
                aw[k] += xv[k] * s * dv[k];
            }
            sr_stv<V>(dinp + at, g);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++)
            part[c + k] = aw[k];
    }
}

template <typename T>
static int rms_fwd(cudaStream_t s, void *out, float *rstd, const void *inp, const void *a, void *res, const void *w,
                   float eps, int N, int C) {
    const int P = sr_pack<T>();
    if (C % P == 0 && sr_aligned16(out) && sr_aligned16(inp) && sr_aligned16(a) && sr_aligned16(res) && sr_aligned16(w))
        return SR_LAUNCH((rms_fwd_k<T, P>), (N + 7) / 8, 256, 0, s, (T *)out, rstd, (const T *)inp, (const T *)a,
                         (T *)res, (const T *)w, eps, N, C);
    return SR_LAUNCH((rms_fwd_k<T, 1>), (N + 7) / 8, 256, 0, s, (T *)out, rstd, (const T *)inp, (const T *)a, (T *)res,
                     (const T *)w, eps, N, C);
}

template <typename T>
static int rms_bwd(cudaStream_t s, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                   const float *rstd, int N, int C, void *ws, int add_dinp, int add_dw) {
    const int P = sr_pack<T>();
    int chunks = sr_colsum_chunks(N), e;
    float *partial = (float *)ws;
    if (C % P == 0 && sr_aligned16(dinp) && sr_aligned16(dout) && sr_aligned16(inp) && sr_aligned16(w))
        e = SR_LAUNCH((rms_bwd_k<T, P>), chunks, sr_pack_threads(C / P, 1024), 0, s, (T *)dinp, partial,
                      (const T *)dout, (const T *)inp, (const T *)w, rstd, N, C, add_dinp);
    else
        e = SR_LAUNCH((rms_bwd_k<T, 1>), chunks, sr_pack_threads(C, 1024), 0, s, (T *)dinp, partial, (const T *)dout,
                      (const T *)inp, (const T *)w, rstd, N, C, add_dinp);
    if (e)
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (C + 255) / 256, 256, 0, s, dw, partial, chunks, C, C, add_dw);
}

extern "C" int sr_k_rmsnorm_forward(cudaStream_t s, void *out, float *rstd, const void *inp, const void *w, float eps,
                                    int N, int C, int bf16) {
    SR_ENTER(rmsnorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), false, false));
    return SR_DISPATCH(bf16, rms_fwd, s, out, rstd, inp, nullptr, nullptr, w, eps, N, C);
}

extern "C" int sr_k_residual_rmsnorm_forward(cudaStream_t s, void *res, void *out, float *rstd, const void *a,
                                             const void *b, const void *w, float eps, int N, int C, int bf16) {
    SR_ENTER(residual_rmsnorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), false, true));
    return SR_DISPATCH(bf16, rms_fwd, s, out, rstd, b, a, res, w, eps, N, C);
}

extern "C" int sr_k_rmsnorm_backward(cudaStream_t s, void *dinp, float *dw, const void *dout, const void *inp,
                                     const void *w, const float *rstd, int N, int C, int bf16, void *ws, int add_dinp,
                                     int add_dw) {
    SR_ENTER(rmsnorm_backward, sr_lc_norm_backward(N, C, (bf16 ? 2 : 4), false, add_dinp != 0, add_dw != 0, 0, false));
    return SR_DISPATCH(bf16, rms_bwd, s, dinp, dw, dout, inp, w, rstd, N, C, ws, add_dinp, add_dw);
}
