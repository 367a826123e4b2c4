/* layernorm.cu — LayerNorm forward and backward (eps 1e-5), float
 * statistics whatever the activation dtype.
 *
 * Forward: one warp per row (8 rows per 256-thread block): mean, then the
 * variance of the centred row (two passes, as the CPU op), out = (x - mean)
 * * rstd * w + b.  Backward: one warp per row adds (or writes: the
 * overwrite form) dinp; dw and db are column sums done in two fixed-order
 * passes: each block sums a chunk of SR_COLSUM_ROWS rows for 256 channels
 * into the workspace, then one thread per channel adds the chunks in order
 * (and adds the total to dw, db or writes it).  No atomics: bitwise
 * reproducible. */
#include "common.cuh"

template <typename T>
__global__ void ln_fwd_k(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32)
        sum += sr_ld(x + c);
    float m = sr_warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = sr_ld(x + c) - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(sr_warp_sum(var) / C + 1e-5f);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        sr_st(o + c, (sr_ld(x + c) - m) * s * sr_ld(w + c) + sr_ld(b + c));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

template <typename T>
__global__ void ln_bwd_rows_k(T *dinp, const T *dout, const T *inp, const T *w, const float *mean, const float *rstd,
                              int N, int C, int add) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (sr_ld(x + c) - m) * s, dn = sr_ld(w + c) * sr_ld(d + c);
        dm += dn;
        dnm += dn * norm;
    }
    dm = sr_warp_sum(dm) / C;
    dnm = sr_warp_sum(dnm) / C;
    T *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (sr_ld(x + c) - m) * s, dn = sr_ld(w + c) * sr_ld(d + c);
        float g = (dn - dm - norm * dnm) * s;
        sr_st(di + c, add ? sr_ld(di + c) + g : g);
    }
}

/* partial[chunk][0..C) = sum of dout * norm, [C..2C) = sum of dout, over
 * the chunk's rows in order */
template <typename T>
__global__ void ln_bwd_cols_k(float *partial, const T *dout, const T *inp, const float *mean, const float *rstd, int N,
                              int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, lo, hi;
    if (c >= C)
        return;
    sr_colsum_bounds(chunk, N, &lo, &hi);
    float dw = 0.0f, db = 0.0f;
    for (int r = lo; r < hi; r++) {
        float d = sr_ld(dout + (size_t)r * C + c);
        dw += (sr_ld(inp + (size_t)r * C + c) - mean[r]) * rstd[r] * d;
        db += d;
    }
    partial[(size_t)chunk * 2 * C + c] = dw;
    partial[(size_t)chunk * 2 * C + C + c] = db;
}

template <typename T>
static int ln_fwd(cudaStream_t s, void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b,
                  int N, int C) {
    return SR_LAUNCH(ln_fwd_k<T>, (N + 7) / 8, 256, 0, s, (T *)out, mean, rstd, (const T *)inp, (const T *)w,
                     (const T *)b, N, C);
}

template <typename T>
static int ln_bwd(cudaStream_t s, void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w,
                  const float *mean, const float *rstd, int N, int C, void *ws, int add_dinp, int add_dw) {
    int e = SR_LAUNCH(ln_bwd_rows_k<T>, (N + 7) / 8, 256, 0, s, (T *)dinp, (const T *)dout, (const T *)inp,
                      (const T *)w, mean, rstd, N, C, add_dinp);
    if (e)
        return e;
    int chunks = sr_colsum_chunks(N);
    float *partial = (float *)ws;
    if ((e = SR_LAUNCH(ln_bwd_cols_k<T>, dim3((C + 255) / 256, chunks), 256, 0, s, partial, (const T *)dout,
                       (const T *)inp, mean, rstd, N, C)))
        return e;
    if ((e = SR_LAUNCH(sr_colsum_finish_k, (C + 255) / 256, 256, 0, s, dw, partial, chunks, C, 2 * C, add_dw)))
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (C + 255) / 256, 256, 0, s, db, partial + C, chunks, C, 2 * C, add_dw);
}

extern "C" int sr_k_layernorm_forward(cudaStream_t s, void *out, float *mean, float *rstd, const void *inp,
                                      const void *w, const void *b, int N, int C, int bf16) {
    SR_ENTER(layernorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), true));
    return SR_DISPATCH(bf16, ln_fwd, s, out, mean, rstd, inp, w, b, N, C);
}

extern "C" int sr_k_layernorm_backward(cudaStream_t s, void *dinp, float *dw, float *db, const void *dout,
                                       const void *inp, const void *w, const float *mean, const float *rstd, int N,
                                       int C, int bf16, void *ws, int add_dinp, int add_dw) {
    SR_ENTER(layernorm_backward, sr_lc_norm_backward(N, C, (bf16 ? 2 : 4), true, add_dinp != 0, add_dw != 0));
    return SR_DISPATCH(bf16, ln_bwd, s, dinp, dw, db, dout, inp, w, mean, rstd, N, C, ws, add_dinp, add_dw);
}
