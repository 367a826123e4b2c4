/* bias.cu — the bias gradient dbias[OC] (add ? += : =) sum over N rows of
 * dout, in two fixed-order passes (chunks of SR_COLSUM_ROWS rows into the
 * workspace, then the chunks in order): no atomics, bitwise reproducible
 * (cuBLASLt's BGRADB epilogue would overwrite alone; the op contract has
 * both forms).
 *
 * And the forward bias add, out[n, c] += bias[c], for a bias that is not
 * 16-byte aligned (cuBLASLt's BIAS epilogue wants it aligned; ops_cuda.c
 * runs the GEMM without the epilogue, then this). */
#include "common.cuh"

template <typename T> __global__ void bias_cols_k(float *partial, const T *dout, int N, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, lo, hi;
    if (c >= OC)
        return;
    sr_colsum_bounds(chunk, N, &lo, &hi);
    float sum = 0.0f;
    for (int r = lo; r < hi; r++)
        sum += sr_ld(dout + (size_t)r * OC + c);
    partial[(size_t)chunk * OC + c] = sum;
}

template <typename T> __global__ void bias_fwd_k(T *out, const T *bias, size_t n, int OC) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sr_st(out + i, sr_ld(out + i) + sr_ld(bias + i % OC));
}

template <typename T> static int bias_fwd(cudaStream_t s, void *out, const void *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    return SR_LAUNCH(bias_fwd_k<T>, sr_grid_1d(n, 256, 65535u * 8), 256, 0, s, (T *)out, (const T *)bias, n, OC);
}

extern "C" int sr_k_bias_forward(cudaStream_t s, void *out, const void *bias, int N, int OC, int bf16) {
    SR_ENTER(bias_forward, sr_lc_elementwise((size_t)N * OC, (bf16 ? 2 : 4), 2, 1, 1));
    return SR_DISPATCH(bf16, bias_fwd, s, out, bias, N, OC);
}

template <typename T>
static int bias_bwd(cudaStream_t s, float *dbias, const void *dout, int N, int OC, void *ws, int add) {
    int chunks = sr_colsum_chunks(N);
    int e = SR_LAUNCH(bias_cols_k<T>, dim3((OC + 255) / 256, chunks), 256, 0, s, (float *)ws, (const T *)dout, N, OC);
    if (e)
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (OC + 255) / 256, 256, 0, s, dbias, (const float *)ws, chunks, OC, OC, add);
}

extern "C" int sr_k_bias_backward(cudaStream_t s, float *dbias, const void *dout, int N, int OC, int bf16, void *ws,
                                  int add) {
    SR_ENTER(bias_backward, sr_lc_bias_backward(N, OC, (bf16 ? 2 : 4), add != 0));
    return SR_DISPATCH(bf16, bias_bwd, s, dbias, dout, N, OC, ws, add);
}
