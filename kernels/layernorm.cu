/* layernorm.cu — LayerNorm forward and backward (eps 1e-5), float
 * statistics whatever the activation dtype, and the forward with the
 * residual add before it fused in.
 *
 * Accesses are 16 bytes (8 bf16 or 4 floats: common.cuh's packs) when the
 * row width is a multiple of the pack and every pointer is 16-byte
 * aligned, scalar otherwise (the same arithmetic, each lane's share of a
 * row's sums in another order: deterministic for a layout, not the same
 * bits as the packed path); offsets within a row are 32-bit, a row's start
 * 64-bit.
 *
 * Forward: one warp per row (8 rows per 256-thread block), each lane its
 * packs lane, lane + 32, ...: mean, then the variance of the centred row
 * (two passes, as the CPU op), out = (x - mean) * rstd * w + b.  The fused
 * form reads a and b, writes res = a + b (rounded to the activation dtype)
 * and normalises res as stored: bitwise residual_forward then
 * layernorm_forward, one launch and one read of res fewer.
 *
 * Backward, one pass: a block per chunk of SR_COLSUM_ROWS rows.  Its warps
 * first take the chunk's rows for the two row sums the input gradient
 * needs (kept in shared memory); then each thread takes a pack of columns
 * and walks the chunk's rows in order, writing (or adding to) dinp and
 * summing dout * norm, dout and, when asked, the input gradient as it came
 * in and as stored (the residual stream's bias gradients: GPT-2's MLP
 * projection's and attention projection's) into the chunk's partial row
 * of the workspace; one finish launch adds the chunks in order
 * (common.cuh sr_colsum_finish4_k).  Two launches
 * where there were four, the inputs read once from memory (the second walk
 * of a chunk hits the cache its first walk filled).  No atomics: bitwise
 * reproducible. */
#include "common.cuh"

/* One row: the statistics and the output, lanes over packs of V.  With
 * `res`, the row's input is a + x rounded to T, written to res first. */
template <typename T, int V>
__device__ inline void ln_row(T *o, float *mean, float *rstd, const T *x, const T *a, T *res, const T *w, const T *b,
                              int C, int lane) {
    float sum = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V];
        sr_ldv<V>(x + c, v);
        if (res) {
            float u[V];
            sr_ldv<V>(a + c, u);
            SR_UNROLL
            for (int k = 0; k < V; k++)
                v[k] = sr_rounded<T>(u[k] + v[k]);
            sr_stv<V>(res + c, v);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++)
            sum += v[k];
    }
    const T *in = res ? res : x;
    float m = sr_warp_sum(sum) / C, var = 0.0f;
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V];
        sr_ldv<V>(in + c, v);
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            float d = v[k] - m;
            var += d * d;
        }
    }
    float s = 1.0f / sqrtf(sr_warp_sum(var) / C + 1e-5f);
    for (int c = lane * V; c < C; c += 32 * V) {
        float v[V], wv[V], bv[V];
        sr_ldv<V>(in + c, v);
        sr_ldv<V>(w + c, wv);
        sr_ldv<V>(b + c, bv);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            v[k] = (v[k] - m) * s * wv[k] + bv[k];
        sr_stv<V>(o + c, v);
    }
    if (lane == 0) {
        *mean = m;
        *rstd = s;
    }
}

template <typename T, int V>
__global__ void ln_fwd_k(T *out, float *mean, float *rstd, const T *inp, const T *a, T *res, const T *w, const T *b,
                         int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N)
        return;
    size_t at = (size_t)row * C;
    ln_row<T, V>(out + at, mean + row, rstd + row, inp + at, a ? a + at : nullptr, res ? res + at : nullptr, w, b, C,
                 lane);
}

/* The chunk's rows: dinp (add), and partial[chunk][0..C) = sum of dout *
 * norm, [C..2C) = sum of dout, [2C..3C) = sum of dinp as it came in (sums
 * bit 0), [3C..4C) = sum of dinp as stored (sums bit 1), each over the
 * chunk's rows in order. */
template <typename T, int V>
__global__ void ln_bwd_k(T *dinp, float *partial, const T *dout, const T *inp, const T *w, const float *mean,
                         const float *rstd, int N, int C, int add, int sums) {
    SR_SHARED(float, s_dm, SR_COLSUM_ROWS);
    SR_SHARED(float, s_dnm, SR_COLSUM_ROWS);
    int lo, hi, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    sr_colsum_bounds(blockIdx.x, N, &lo, &hi);
    for (int r = lo + warp; r < hi; r += nw) {
        const T *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        float m = mean[r], s = rstd[r], dm = 0.0f, dnm = 0.0f;
        for (int c = lane * V; c < C; c += 32 * V) {
            float xv[V], dv[V], wv[V];
            sr_ldv<V>(x + c, xv);
            sr_ldv<V>(d + c, dv);
            sr_ldv<V>(w + c, wv);
            SR_UNROLL
            for (int k = 0; k < V; k++) {
                float norm = (xv[k] - m) * s, dn = wv[k] * dv[k];
                dm += dn;
                dnm += dn * norm;
            }
        }
        dm = sr_warp_sum(dm);
        dnm = sr_warp_sum(dnm);
        if (lane == 0) {
            s_dm[r - lo] = dm / C;
            s_dnm[r - lo] = dnm / C;
        }
    }
    __syncthreads();
    float *part = partial + (size_t)blockIdx.x * 4 * C;
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
        float wv[V], aw[V], ab[V], ai[V], as[V];
        sr_ldv<V>(w + c, wv);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            aw[k] = ab[k] = ai[k] = as[k] = 0.0f;
        for (int r = lo; r < hi; r++) {
            size_t at = (size_t)r * C + c;
            float xv[V], dv[V], g[V], old[V];
            sr_ldv<V>(inp + at, xv);
            sr_ldv<V>(dout + at, dv);
            if (add)
                sr_ldv<V>(dinp + at, old);
            float m = mean[r], s = rstd[r], dm = s_dm[r - lo], dnm = s_dnm[r - lo];
            SR_UNROLL
            for (int k = 0; k < V; k++) {
                float norm = (xv[k] - m) * s, dn = wv[k] * dv[k];
                float gk = (dn - dm - norm * dnm) * s;
                g[k] = add ? old[k] + gk : gk;
                aw[k] += dv[k] * norm;
                ab[k] += dv[k];
                ai[k] += add ? old[k] : 0.0f;
                as[k] += sr_rounded<T>(g[k]);
            }
            sr_stv<V>(dinp + at, g);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            part[c + k] = aw[k];
            part[C + c + k] = ab[k];
            if (sums & 1)
                part[2 * C + c + k] = ai[k];
            if (sums & 2)
                part[3 * C + c + k] = as[k];
        }
    }
}

template <typename T>
static int ln_fwd(cudaStream_t s, void *out, float *mean, float *rstd, const void *inp, const void *a, void *res,
                  const void *w, const void *b, int N, int C) {
    const int P = sr_pack<T>();
    bool vec = C % P == 0 && sr_aligned16(out) && sr_aligned16(inp) && sr_aligned16(a) && sr_aligned16(res) &&
               sr_aligned16(w) && sr_aligned16(b);
    if (vec)
        return SR_LAUNCH((ln_fwd_k<T, P>), (N + 7) / 8, 256, 0, s, (T *)out, mean, rstd, (const T *)inp, (const T *)a,
                         (T *)res, (const T *)w, (const T *)b, N, C);
    return SR_LAUNCH((ln_fwd_k<T, 1>), (N + 7) / 8, 256, 0, s, (T *)out, mean, rstd, (const T *)inp, (const T *)a,
                     (T *)res, (const T *)w, (const T *)b, N, C);
}

template <typename T>
static int ln_bwd(cudaStream_t s, void *dinp, float *dw, float *db, float *sum_in, float *sum_out, const void *dout,
                  const void *inp, const void *w, const float *mean, const float *rstd, int N, int C, void *ws,
                  int add_dinp, int add_dw, int add_sum) {
    const int P = sr_pack<T>();
    int chunks = sr_colsum_chunks(N), e;
    float *partial = (float *)ws;
    bool vec = C % P == 0 && sr_aligned16(dinp) && sr_aligned16(dout) && sr_aligned16(inp) && sr_aligned16(w);
    int sums = (sum_in ? 1 : 0) | (sum_out ? 2 : 0);
    if (vec)
        e = SR_LAUNCH((ln_bwd_k<T, P>), chunks, sr_pack_threads(C / P, 1024), 0, s, (T *)dinp, partial, (const T *)dout,
                      (const T *)inp, (const T *)w, mean, rstd, N, C, add_dinp, sums);
    else
        e = SR_LAUNCH((ln_bwd_k<T, 1>), chunks, sr_pack_threads(C, 1024), 0, s, (T *)dinp, partial, (const T *)dout,
                      (const T *)inp, (const T *)w, mean, rstd, N, C, add_dinp, sums);
    if (e)
        return e;
    int outs = sum_out ? 4 : sum_in ? 3 : 2, add = (add_dw ? 3 : 0) | (add_sum ? 12 : 0);
    return SR_LAUNCH(sr_colsum_finish4_k, (outs * C + 255) / 256, 256, 0, s, dw, db, sum_in, sum_out, add, partial,
                     chunks, C, 4 * C);
}

extern "C" int sr_k_layernorm_forward(cudaStream_t s, void *out, float *mean, float *rstd, const void *inp,
                                      const void *w, const void *b, int N, int C, int bf16) {
    SR_ENTER(layernorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), true, false));
    return SR_DISPATCH(bf16, ln_fwd, s, out, mean, rstd, inp, nullptr, nullptr, w, b, N, C);
}

extern "C" int sr_k_residual_layernorm_forward(cudaStream_t s, void *res, void *out, float *mean, float *rstd,
                                               const void *a, const void *b, const void *w, const void *bias, int N,
                                               int C, int bf16) {
    SR_ENTER(residual_layernorm_forward, sr_lc_norm_forward(N, C, (bf16 ? 2 : 4), true, true));
    return SR_DISPATCH(bf16, ln_fwd, s, out, mean, rstd, b, a, res, w, bias, N, C);
}

extern "C" int sr_k_layernorm_backward(cudaStream_t s, void *dinp, float *dw, float *db, float *sum_in, float *sum_out,
                                       const void *dout, const void *inp, const void *w, const float *mean,
                                       const float *rstd, int N, int C, int bf16, void *ws, int add_dinp, int add_dw,
                                       int add_sum) {
    SR_ENTER(layernorm_backward, sr_lc_norm_backward(N, C, (bf16 ? 2 : 4), true, add_dinp != 0, add_dw != 0,
                                                     (sum_in ? 1 : 0) + (sum_out ? 1 : 0), add_sum != 0));
    return SR_DISPATCH(bf16, ln_bwd, s, dinp, dw, db, sum_in, sum_out, dout, inp, w, mean, rstd, N, C, ws, add_dinp,
                       add_dw, add_sum);
}
