/* swiglu.cu — SwiGLU (the Llama family's MLP gate), forward and backward:
 * out[n, f] = silu(g) u with g = gu[n, f], u = gu[n, F + f] (the fused
 * gate/up projection's two halves), silu(a) = a sigmoid(a); the backward
 * adds dg = dout u sig (1 + a (1 - sig)) and du = dout silu(a) into
 * dgu[N, 2F], or writes them (acc 0: dgu not read).  Element-wise, grid-stride loops of 256-thread blocks, float
 * arithmetic whatever the dtype (expf; the CPU op's fast_expf differs by
 * ~1e-7). */
#include "common.cuh"

template <typename T> __global__ void swiglu_fwd_k(T *out, const T *gu, long long n, int F) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long row = i / F;
        int f = (int)(i % F);
        const T *g = gu + (size_t)row * 2 * F + f;
        float a = sr_ld(g), sig = 1.0f / (1.0f + expf(-a));
        sr_st(out + i, a * sig * sr_ld(g + F));
    }
}

template <typename T> __global__ void swiglu_bwd_k(T *dgu, const T *dout, const T *gu, long long n, int F, int acc) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long row = i / F;
        int f = (int)(i % F);
        const T *g = gu + (size_t)row * 2 * F + f;
        T *dg = dgu + (size_t)row * 2 * F + f;
        float a = sr_ld(g), u = sr_ld(g + F), d = sr_ld(dout + i), sig = 1.0f / (1.0f + expf(-a));
        float vg = d * u * (sig * (1.0f + a * (1.0f - sig))), vu = d * (a * sig);
        sr_st(dg, acc ? sr_ld(dg) + vg : vg);
        sr_st(dg + F, acc ? sr_ld(dg + F) + vu : vu);
    }
}

#define GRID(n) sr_grid_1d((size_t)(n), 256, 65535u * 16)

template <typename T> static int swiglu_fwd(cudaStream_t s, void *out, const void *gu, int N, int F) {
    long long n = (long long)N * F;
    return SR_LAUNCH(swiglu_fwd_k<T>, GRID(n), 256, 0, s, (T *)out, (const T *)gu, n, F);
}
template <typename T>
static int swiglu_bwd(cudaStream_t s, void *dgu, const void *dout, const void *gu, int N, int F, int acc) {
    long long n = (long long)N * F;
    return SR_LAUNCH(swiglu_bwd_k<T>, GRID(n), 256, 0, s, (T *)dgu, (const T *)dout, (const T *)gu, n, F, acc);
}

extern "C" int sr_k_swiglu_forward(cudaStream_t s, void *out, const void *gu, int N, int F, int bf16) {
    SR_ENTER(swiglu_forward, sr_lc_swiglu(N, F, (bf16 ? 2 : 4), 0));
    return SR_DISPATCH(bf16, swiglu_fwd, s, out, gu, N, F);
}
extern "C" int sr_k_swiglu_backward(cudaStream_t s, void *dgu, const void *dout, const void *gu, int N, int F, int acc,
                                    int bf16) {
    SR_ENTER(swiglu_backward, sr_lc_swiglu(N, F, (bf16 ? 2 : 4), acc ? 2 : 1));
    return SR_DISPATCH(bf16, swiglu_bwd, s, dgu, dout, gu, N, F, acc);
}
