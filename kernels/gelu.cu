/* gelu.cu — GELU (tanh approximation) forward and backward, and the
 * residual add: element-wise, grid-stride loops of 256-thread blocks,
 * computed in float whatever the activation dtype (tanhf; the CPU op's
 * fast_tanhf differs by ~1e-7). */
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

template <typename T> __global__ void gelu_fwd_k(T *out, const T *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = sr_ld(inp + i), cube = 0.044715f * x * x * x;
        sr_st(out + i, 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube))));
    }
}

/* acc 1: dinp += the gradient; 0: dinp = the gradient, dinp not read */
template <typename T> __global__ void gelu_bwd_k(T *dinp, const T *inp, const T *dout, size_t n, int acc) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = sr_ld(inp + i), cube = 0.044715f * x * x * x;
        float th = tanhf(GELU_SCALE * (x + cube)), sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        float v = grad * sr_ld(dout + i);
        sr_st(dinp + i, acc ? sr_ld(dinp + i) + v : v);
    }
}

template <typename T> __global__ void residual_k(T *out, const T *a, const T *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sr_st(out + i, sr_ld(a + i) + sr_ld(b + i));
}

#define GRID(n) sr_grid_1d((n), 256, 65535u * 16)

template <typename T> static int gelu_fwd(cudaStream_t s, void *out, const void *inp, size_t n) {
    return SR_LAUNCH(gelu_fwd_k<T>, GRID(n), 256, 0, s, (T *)out, (const T *)inp, n);
}
template <typename T>
static int gelu_bwd(cudaStream_t s, void *dinp, const void *inp, const void *dout, size_t n, int acc) {
    return SR_LAUNCH(gelu_bwd_k<T>, GRID(n), 256, 0, s, (T *)dinp, (const T *)inp, (const T *)dout, n, acc);
}
template <typename T> static int residual(cudaStream_t s, void *out, const void *a, const void *b, size_t n) {
    return SR_LAUNCH(residual_k<T>, GRID(n), 256, 0, s, (T *)out, (const T *)a, (const T *)b, n);
}

extern "C" int sr_k_gelu_forward(cudaStream_t s, void *out, const void *inp, size_t n, int bf16) {
    SR_ENTER(gelu_forward, sr_lc_elementwise(n, (bf16 ? 2 : 4), 1, 1, 10));
    return SR_DISPATCH(bf16, gelu_fwd, s, out, inp, n);
}
extern "C" int sr_k_gelu_backward(cudaStream_t s, void *dinp, const void *inp, const void *dout, size_t n, int acc,
                                  int bf16) {
    SR_ENTER(gelu_backward, sr_lc_elementwise(n, (bf16 ? 2 : 4), acc ? 3 : 2, 1, 16));
    return SR_DISPATCH(bf16, gelu_bwd, s, dinp, inp, dout, n, acc);
}
extern "C" int sr_k_residual_forward(cudaStream_t s, void *out, const void *a, const void *b, size_t n, int bf16) {
    SR_ENTER(residual_forward, sr_lc_elementwise(n, (bf16 ? 2 : 4), 2, 1, 1));
    return SR_DISPATCH(bf16, residual, s, out, a, b, n);
}
