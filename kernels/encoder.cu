/* encoder.cu — token + position embedding, forward and backward.
 *
 * wpe NULL (rotary positions, the Llama family): out = wte[tok] alone, and
 * the backward, given dwpe NULL, sums dwte only.
 *
 * Forward: a block per token row, a thread per 16-byte pack of channels
 * (8 bf16 or 4 floats where C and the tables allow; else one channel: the
 * same sums).  Backward: dwpe[t, c] sums its B
 * rows in order (one thread per (t, c)); dwte is deterministic without
 * float atomics: the (token, position) keys are radix-sorted (CUB, stable,
 * on unique keys so the order is total), then one block per run of equal
 * tokens sums that token's positions in increasing order, a thread per
 * channel, and adds the sum to dwte once (llm.c sorts buckets on the host
 * for the same reason; here the inputs are already on the device). */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

template <typename T, int V>
__global__ void encoder_fwd_k(T *out, const int *inp, const T *wte, const T *wpe, int T_, int C) {
    int bt = blockIdx.x;
    const T *e = wte + (size_t)inp[bt] * C, *p = wpe ? wpe + (size_t)(bt % T_) * C : nullptr;
    T *o = out + (size_t)bt * C;
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
        float v[V], w[V];
        sr_ldv<V>(e + c, v);
        if (p) {
            sr_ldv<V>(p + c, w);
            SR_UNROLL
            for (int k = 0; k < V; k++)
                v[k] += w[k];
        }
        sr_stv<V>(o + c, v);
    }
}

template <typename T>
static int encoder_fwd(cudaStream_t s, void *out, const int *inp, const void *wte, const void *wpe, int B, int T_,
                       int C) {
    const int P = sr_pack<T>();
    long long rows = (long long)B * T_;
    if (rows <= 0)
        return 0;
    if (rows > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    bool vec = C % P == 0 && sr_aligned16(out) && sr_aligned16(wte) && sr_aligned16(wpe);
    int threads = sr_pack_threads(C / (vec ? P : 1), 256);
    if (vec)
        return SR_LAUNCH((encoder_fwd_k<T, P>), (unsigned)rows, threads, 0, s, (T *)out, inp, (const T *)wte,
                         (const T *)wpe, T_, C);
    return SR_LAUNCH((encoder_fwd_k<T, 1>), (unsigned)rows, threads, 0, s, (T *)out, inp, (const T *)wte,
                     (const T *)wpe, T_, C);
}

extern "C" int sr_k_encoder_forward(cudaStream_t s, void *out, const int *inp, const void *wte, const void *wpe, int B,
                                    int T, int C, int bf16) {
    SR_ENTER(encoder_forward, sr_lc_encoder_forward(B, T, C, (bf16 ? 2 : 4), wpe != NULL));
    return SR_DISPATCH(bf16, encoder_fwd, s, out, inp, wte, wpe, B, T, C);
}

__global__ void make_keys_k(unsigned long long *keys, const int *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        keys[i] = sr_key_pack(inp[i], i);
}

/* dwpe[t, c] (add ? += : =) sum over b (in order) of dout[b, t, c] */
template <typename T> __global__ void encoder_bwd_wpe_k(float *dwpe, const T *dout, int B, int T_, int C, int add) {
    size_t n = (size_t)T_ * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++)
            sum += sr_ld(dout + (size_t)b * n + i);
        dwpe[i] = add ? dwpe[i] + sum : sum;
    }
}

/* One block per sorted key; the block that starts a token's run sums the
 * run, channel by channel. */
template <typename T>
__global__ void encoder_bwd_wte_k(float *dwte, const T *dout, const unsigned long long *keys, int n, int C) {
    int i = blockIdx.x;
    if (!sr_key_run_start(keys, i))
        return;
    int token = sr_key_token(keys[i]);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int j = i; j < n && sr_key_token(keys[j]) == token; j++)
            sum += sr_ld(dout + (size_t)sr_key_pos(keys[j]) * C + c);
        dwte[(size_t)token * C + c] += sum;
    }
}

/* The workspace: two key arrays of n (CUB's double buffer), then CUB's
 * temporary storage. */
static size_t keys_bytes(size_t n) { return (2 * n * sizeof(unsigned long long) + 255) / 256 * 256; }

extern "C" int sr_cuda_sort_bytes(size_t n, size_t *bytes) {
    unsigned long long *a = nullptr, *b = nullptr;
    cub::DoubleBuffer<unsigned long long> keys(a, b);
    size_t tmp = 0;
    int e = SR_QUERY_LIB(cub::DeviceRadixSort::SortKeys(nullptr, tmp, keys, (int)n));
    if (e == 0)
        *bytes = keys_bytes(n) + tmp;
    return e;
}

template <typename T>
static int encoder_bwd(cudaStream_t s, float *dwte, float *dwpe, const void *dout, const int *inp, int B, int T_, int C,
                       void *ws, size_t ws_bytes, int add_wpe) {
    int n = B * T_, e;
    if (dwpe && (e = SR_LAUNCH(encoder_bwd_wpe_k<T>, sr_grid_1d((size_t)T_ * C, 256, 65535u * 8), 256, 0, s, dwpe,
                               (const T *)dout, B, T_, C, add_wpe)))
        return e;
    unsigned long long *k0 = (unsigned long long *)ws, *k1 = k0 + n;
    if ((e = SR_LAUNCH(make_keys_k, (n + 255) / 256, 256, 0, s, k0, inp, n)))
        return e;
    cub::DoubleBuffer<unsigned long long> keys(k0, k1);
    size_t tmp = ws_bytes > keys_bytes((size_t)n) ? ws_bytes - keys_bytes((size_t)n) : 0;
    e = SR_LAUNCH_LIB(s, cub::DeviceRadixSort::SortKeys((char *)ws + keys_bytes((size_t)n), tmp, keys, n, 0, 64, s));
    if (e)
        return e;
    return SR_LAUNCH(encoder_bwd_wte_k<T>, n, 256, 0, s, dwte, (const T *)dout, keys.Current(), n, C);
}

extern "C" int sr_k_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const void *dout, const int *inp, int B,
                                     int T, int C, int bf16, void *ws, size_t ws_bytes, int add_wpe) {
    SR_ENTER(encoder_backward, sr_lc_encoder_backward(B, T, C, (bf16 ? 2 : 4), dwpe != NULL, add_wpe != 0));
    return SR_DISPATCH(bf16, encoder_bwd, s, dwte, dwpe, dout, inp, B, T, C, ws, ws_bytes, add_wpe);
}
