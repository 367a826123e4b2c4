/* rmsnorm.cu — RMSNorm forward and backward (the Llama family), float
 * statistics whatever the activation dtype.
 *
 * Forward: one warp per row (8 rows per 256-thread block): the sum of
 * squares (warp tree, fixed order), rstd = 1 / sqrt(ss / C + eps), out = x
 * * rstd * w.  Backward: one warp per row adds dinp = rstd (g - rstd^2 x
 * mean(g x)) with g = w * dout; dw is a column sum done as LayerNorm's, in
 * two fixed-order passes: each block sums a chunk of SR_COLSUM_ROWS rows
 * of x * rstd * dout for 256 channels into the workspace, then one thread
 * per channel adds the chunks in order.  No atomics: bitwise reproducible. */
#include "common.cuh"

template <typename T> __global__ void rms_fwd_k(T *out, float *rstd, const T *inp, const T *w, float eps, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = sr_ld(x + c);
        ss += v * v;
    }
    float s = 1.0f / sqrtf(sr_warp_sum(ss) / C + eps);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        sr_st(o + c, sr_ld(x + c) * s * sr_ld(w + c));
    if (lane == 0)
        rstd[row] = s;
}

template <typename T>
__global__ void rms_bwd_rows_k(T *dinp, const T *dout, const T *inp, const T *w, const float *rstd, int N, int C,
                               int add) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float s = rstd[row], dot = 0.0f;
    for (int c = lane; c < C; c += 32)
        dot += sr_ld(w + c) * sr_ld(d + c) * sr_ld(x + c);
    dot = sr_warp_sum(dot) / C;
    T *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float g = (sr_ld(w + c) * sr_ld(d + c) - sr_ld(x + c) * s * s * dot) * s;
        sr_st(di + c, add ? sr_ld(di + c) + g : g);
    }
}

/* partial[chunk][0..C) = sum of x * rstd * dout over the chunk's rows in order */
template <typename T>
__global__ void rms_bwd_cols_k(float *partial, const T *dout, const T *inp, const float *rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, lo, hi;
    if (c >= C)
        return;
    sr_colsum_bounds(chunk, N, &lo, &hi);
    float dw = 0.0f;
    for (int r = lo; r < hi; r++)
        dw += sr_ld(inp + (size_t)r * C + c) * rstd[r] * sr_ld(dout + (size_t)r * C + c);
    partial[(size_t)chunk * C + c] = dw;
}

template <typename T>
static int rms_fwd(cudaStream_t s, void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C) {
    return SR_LAUNCH(rms_fwd_k<T>, (N + 7) / 8, 256, 0, s, (T *)out, rstd, (const T *)inp, (const T *)w, eps, N, C);
}

template <typename T>
static int rms_bwd(cudaStream_t s, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                   const float *rstd, int N, int C, void *ws, int add_dinp, int add_dw) {
    int e = SR_LAUNCH(rms_bwd_rows_k<T>, (N + 7) / 8, 256, 0, s, (T *)dinp, (const T *)dout, (const T *)inp,
                      (const T *)w, rstd, N, C, add_dinp);
    if (e)
        return e;
    int chunks = sr_colsum_chunks(N);
    float *partial = (float *)ws;
    if ((e = SR_LAUNCH(rms_bwd_cols_k<T>, dim3((C + 255) / 256, chunks), 256, 0, s, partial, (const T *)dout,
                       (const T *)inp, rstd, N, C)))
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (C + 255) / 256, 256, 0, s, dw, partial, chunks, C, C, add_dw);
}

extern "C" int sr_k_rmsnorm_forward(cudaStream_t s, void *out, float *rstd, const void *inp, const void *w, float eps,
                                    int N, int C, int bf16) {
    SR_ENTER(rmsnorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), false));
    return SR_DISPATCH(bf16, rms_fwd, s, out, rstd, inp, w, eps, N, C);
}

extern "C" int sr_k_rmsnorm_backward(cudaStream_t s, void *dinp, float *dw, const void *dout, const void *inp,
                                     const void *w, const float *rstd, int N, int C, int bf16, void *ws, int add_dinp,
                                     int add_dw) {
    SR_ENTER(rmsnorm_backward, sr_lc_norm_backward(N, C, (bf16 ? 2 : 4), false, add_dinp != 0, add_dw != 0));
    return SR_DISPATCH(bf16, rms_bwd, s, dinp, dw, dout, inp, w, rstd, N, C, ws, add_dinp, add_dw);
}
