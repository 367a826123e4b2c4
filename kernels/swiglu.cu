/* swiglu.cu — SwiGLU (the Llama family's MLP gate), forward and backward:
 * out[n, f] = silu(g) u with g = gu[n, f], u = gu[n, F + f] (the fused
 * gate/up projection's two halves), silu(a) = a sigmoid(a); the backward
 * adds dg = dout u sig (1 + a (1 - sig)) and du = dout silu(a) into
 * dgu[N, 2F], or writes them (acc 0: dgu not read).  A block per row, its
 * threads over packs of V columns (16 bytes: 8 bf16 or 4 floats, when F is
 * a multiple of the pack and the pointers are 16-byte aligned; else V = 1):
 * no division per element, 32-bit offsets within a row; float arithmetic
 * whatever the dtype (expf; the CPU op's fast_expf differs by ~1e-7). */
#include "common.cuh"

template <typename T, int V> __global__ void swiglu_fwd_k(T *out, const T *gu, int F) {
    const T *g = gu + (size_t)blockIdx.x * 2 * F;
    T *o = out + (size_t)blockIdx.x * F;
    for (int f = threadIdx.x * V; f < F; f += blockDim.x * V) {
        float a[V], u[V];
        sr_ldv<V>(g + f, a);
        sr_ldv<V>(g + F + f, u);
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            float sig = 1.0f / (1.0f + expf(-a[k]));
            a[k] = a[k] * sig * u[k];
        }
        sr_stv<V>(o + f, a);
    }
}

template <typename T, int V> __global__ void swiglu_bwd_k(T *dgu, const T *dout, const T *gu, int F, int acc) {
    const T *g = gu + (size_t)blockIdx.x * 2 * F, *d = dout + (size_t)blockIdx.x * F;
    T *dg = dgu + (size_t)blockIdx.x * 2 * F;
    for (int f = threadIdx.x * V; f < F; f += blockDim.x * V) {
        float a[V], u[V], dv[V], og[V], ou[V];
        sr_ldv<V>(g + f, a);
        sr_ldv<V>(g + F + f, u);
        sr_ldv<V>(d + f, dv);
        if (acc) {
            sr_ldv<V>(dg + f, og);
            sr_ldv<V>(dg + F + f, ou);
        }
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            float sig = 1.0f / (1.0f + expf(-a[k]));
            float vg = dv[k] * u[k] * (sig * (1.0f + a[k] * (1.0f - sig))), vu = dv[k] * (a[k] * sig);
            og[k] = acc ? og[k] + vg : vg;
            ou[k] = acc ? ou[k] + vu : vu;
        }
        sr_stv<V>(dg + f, og);
        sr_stv<V>(dg + F + f, ou);
    }
}

template <typename T> static int swiglu_fwd(cudaStream_t s, void *out, const void *gu, int N, int F) {
    const int P = sr_pack<T>();
    if (N <= 0)
        return 0;
    if (F % P == 0 && sr_aligned16(out) && sr_aligned16(gu))
        return SR_LAUNCH((swiglu_fwd_k<T, P>), N, sr_pack_threads(F / P, 256), 0, s, (T *)out, (const T *)gu, F);
    return SR_LAUNCH((swiglu_fwd_k<T, 1>), N, sr_pack_threads(F, 256), 0, s, (T *)out, (const T *)gu, F);
}
template <typename T>
static int swiglu_bwd(cudaStream_t s, void *dgu, const void *dout, const void *gu, int N, int F, int acc) {
    const int P = sr_pack<T>();
    if (N <= 0)
        return 0;
    if (F % P == 0 && sr_aligned16(dgu) && sr_aligned16(dout) && sr_aligned16(gu))
        return SR_LAUNCH((swiglu_bwd_k<T, P>), N, sr_pack_threads(F / P, 256), 0, s, (T *)dgu, (const T *)dout,
                         (const T *)gu, F, acc);
    return SR_LAUNCH((swiglu_bwd_k<T, 1>), N, sr_pack_threads(F, 256), 0, s, (T *)dgu, (const T *)dout, (const T *)gu,
                     F, acc);
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
