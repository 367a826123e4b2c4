/* bias.cu — the bias gradient dbias[OC] += sum over N rows of dout, in two
 * fixed-order passes (chunks of SR_COLSUM_ROWS rows into the workspace,
 * then the chunks in order): no atomics, bitwise reproducible.  cuBLASLt's
 * BGRADB epilogue would overwrite dbias; the op contract is +=. */
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

template <typename T> static int bias_bwd(cudaStream_t s, float *dbias, const void *dout, int N, int OC, void *ws) {
    int chunks = sr_colsum_chunks(N);
    int e = SR_LAUNCH(bias_cols_k<T>, dim3((OC + 255) / 256, chunks), 256, 0, s, (float *)ws, (const T *)dout, N, OC);
    if (e)
        return e;
    return SR_LAUNCH(sr_colsum_finish_k, (OC + 255) / 256, 256, 0, s, dbias, (const float *)ws, chunks, OC, OC);
}

extern "C" int sr_k_bias_backward(cudaStream_t s, float *dbias, const void *dout, int N, int OC, int bf16, void *ws) {
    SR_ENTER(bias_backward);
    return SR_DISPATCH(bf16, bias_bwd, s, dbias, dout, N, OC, ws);
}
