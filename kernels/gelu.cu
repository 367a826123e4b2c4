/* gelu.cu — GELU (tanh approximation) forward and backward, and the
 * residual add: element-wise, computed in float whatever the activation
 * dtype (tanhf; the CPU op's fast_tanhf differs by ~1e-7).
 *
 * Grid-stride loops of 256-thread blocks over 16-byte packs (8 bf16 or 4
 * floats: common.cuh) when the length is a multiple of the pack and every
 * pointer is 16-byte aligned, else over elements; the index is 32-bit when
 * the count fits (every shape of the built-in models), 64-bit otherwise.
 * The backward with the bias gradient of the layer before GELU (the MLP's
 * first projection, whose output GELU read) is a column kernel instead: a
 * block per chunk of SR_COLSUM_ROWS rows, each thread a pack of columns
 * down the chunk's rows in order, writing dinp and summing it as stored
 * into the chunk's partial row; one finish launch adds the chunks in
 * order — the bias gradient without bias_backward's second read of dinp. */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

__device__ inline float gelu_f(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}
__device__ inline float gelu_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float th = tanhf(GELU_SCALE * (x + cube)), sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Packs of V over n / V: i the pack index, of type I */
#define SR_PACKS(I, i, npacks)                                                                                         \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (npacks); i += (I)gridDim.x * blockDim.x)

template <typename T, int V, typename I> __global__ void gelu_fwd_k(T *out, const T *inp, I npacks) {
    SR_PACKS(I, i, npacks) {
        float x[V];
        sr_ldv<V>(inp + i * V, x);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            x[k] = gelu_f(x[k]);
        sr_stv<V>(out + i * V, x);
    }
}

/* acc 1: dinp += the gradient; 0: dinp = the gradient, dinp not read (the
 * count last, as SR_LAUNCH_PACKS passes it) */
template <typename T, int V, typename I>
__global__ void gelu_bwd_k(T *dinp, const T *inp, const T *dout, int acc, I npacks) {
    SR_PACKS(I, i, npacks) {
        float x[V], d[V], o[V];
        sr_ldv<V>(inp + i * V, x);
        sr_ldv<V>(dout + i * V, d);
        if (acc)
            sr_ldv<V>(dinp + i * V, o);
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            float v = gelu_grad(x[k]) * d[k];
            o[k] = acc ? o[k] + v : v;
        }
        sr_stv<V>(dinp + i * V, o);
    }
}

/* The same over rows of OC, a chunk of rows per block: partial[chunk][c]
 * = the sum of the chunk's dinp[., c] as stored, rows in order. */
template <typename T, int V>
__global__ void gelu_bwd_cols_k(T *dinp, float *partial, const T *inp, const T *dout, int N, int OC, int acc) {
    int lo, hi;
    sr_colsum_bounds(blockIdx.x, N, &lo, &hi);
    for (int c = threadIdx.x * V; c < OC; c += blockDim.x * V) {
        float sum[V];
        SR_UNROLL
        for (int k = 0; k < V; k++)
            sum[k] = 0.0f;
        for (int r = lo; r < hi; r++) {
            size_t at = (size_t)r * OC + c;
            float x[V], d[V], o[V];
            sr_ldv<V>(inp + at, x);
            sr_ldv<V>(dout + at, d);
            if (acc)
                sr_ldv<V>(dinp + at, o);
            SR_UNROLL
            for (int k = 0; k < V; k++) {
                float v = gelu_grad(x[k]) * d[k];
                o[k] = acc ? o[k] + v : v;
                sum[k] += sr_rounded<T>(o[k]);
            }
            sr_stv<V>(dinp + at, o);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++)
            partial[(size_t)blockIdx.x * OC + c + k] = sum[k];
    }
}

template <typename T, int V, typename I> __global__ void residual_k(T *out, const T *a, const T *b, I npacks) {
    SR_PACKS(I, i, npacks) {
        float x[V], y[V];
        sr_ldv<V>(a + i * V, x);
        sr_ldv<V>(b + i * V, y);
        SR_UNROLL
        for (int k = 0; k < V; k++)
            x[k] += y[k];
        sr_stv<V>(out + i * V, x);
    }
}

#define GRID(n) sr_grid_1d((n), 256, 65535u * 16)

/* Launches kernel K<T, V, I> over n elements: V the pack when n and the
 * pointers allow, I 32-bit when the packs fit. */
#define SR_LAUNCH_PACKS(K, T, n, vec, s, ...)                                                                          \
    ((vec) ? ((n) / sr_pack<T>() <= 0x7fffffffu ? SR_LAUNCH((K<T, sr_pack<T>(), unsigned>), GRID((n) / sr_pack<T>()),  \
                                                            256, 0, s, __VA_ARGS__, (unsigned)((n) / sr_pack<T>()))    \
                                                : SR_LAUNCH((K<T, sr_pack<T>(), size_t>), GRID((n) / sr_pack<T>()),    \
                                                            256, 0, s, __VA_ARGS__, (size_t)((n) / sr_pack<T>())))     \
           : ((n) <= 0x7fffffffu ? SR_LAUNCH((K<T, 1, unsigned>), GRID(n), 256, 0, s, __VA_ARGS__, (unsigned)(n))      \
                                 : SR_LAUNCH((K<T, 1, size_t>), GRID(n), 256, 0, s, __VA_ARGS__, (size_t)(n))))

template <typename T> static int gelu_fwd(cudaStream_t s, void *out, const void *inp, size_t n) {
    bool vec = n % sr_pack<T>() == 0 && sr_aligned16(out) && sr_aligned16(inp);
    return SR_LAUNCH_PACKS(gelu_fwd_k, T, n, vec, s, (T *)out, (const T *)inp);
}
template <typename T>
static int gelu_bwd(cudaStream_t s, void *dinp, const void *inp, const void *dout, size_t n, int acc, float *dbias,
                    int OC, int add_bias, void *ws) {
    const int P = sr_pack<T>();
    bool vec = sr_aligned16(dinp) && sr_aligned16(inp) && sr_aligned16(dout);
    if (!dbias) {
        vec = vec && n % P == 0;
        return SR_LAUNCH_PACKS(gelu_bwd_k, T, n, vec, s, (T *)dinp, (const T *)inp, (const T *)dout, acc);
    }
    int N = (int)(n / (size_t)OC), chunks = sr_colsum_chunks(N), e;
    float *partial = (float *)ws;
    int threads = sr_pack_threads(OC / (vec && OC % P == 0 ? P : 1), 1024);
    if (vec && OC % P == 0)
        e = SR_LAUNCH((gelu_bwd_cols_k<T, P>), chunks, threads, 0, s, (T *)dinp, partial, (const T *)inp,
                      (const T *)dout, N, OC, acc);
    else
        e = SR_LAUNCH((gelu_bwd_cols_k<T, 1>), chunks, threads, 0, s, (T *)dinp, partial, (const T *)inp,
                      (const T *)dout, N, OC, acc);
    if (e)
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (OC + 255) / 256, 256, 0, s, dbias, partial, chunks, OC, OC, add_bias);
}
template <typename T> static int residual(cudaStream_t s, void *out, const void *a, const void *b, size_t n) {
    bool vec = n % sr_pack<T>() == 0 && sr_aligned16(out) && sr_aligned16(a) && sr_aligned16(b);
    return SR_LAUNCH_PACKS(residual_k, T, n, vec, s, (T *)out, (const T *)a, (const T *)b);
}

extern "C" int sr_k_gelu_forward(cudaStream_t s, void *out, const void *inp, size_t n, int bf16) {
    SR_ENTER(gelu_forward, sr_lc_elementwise(n, (bf16 ? 2 : 4), 1, 1, 10));
    return SR_DISPATCH(bf16, gelu_fwd, s, out, inp, n);
}
extern "C" int sr_k_gelu_backward(cudaStream_t s, void *dinp, const void *inp, const void *dout, size_t n, int acc,
                                  int bf16, float *dbias, int OC, int add_bias, void *ws) {
    SR_ENTER(gelu_backward, sr_lc_gelu_backward(n, OC, (bf16 ? 2 : 4), acc != 0, dbias != NULL, add_bias != 0));
    if (dbias && (OC <= 0 || n % (size_t)OC != 0 || n / (size_t)OC > 0x7fffffffu))
        return (int)cudaErrorInvalidValue;
    return SR_DISPATCH(bf16, gelu_bwd, s, dinp, inp, dout, n, acc, dbias, OC, add_bias, ws);
}
extern "C" int sr_k_residual_forward(cudaStream_t s, void *out, const void *a, const void *b, size_t n, int bf16) {
    SR_ENTER(residual_forward, sr_lc_elementwise(n, (bf16 ? 2 : 4), 2, 1, 1));
    return SR_DISPATCH(bf16, residual, s, out, a, b, n);
}
