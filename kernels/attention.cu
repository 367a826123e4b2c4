/* attention.cu — the causal softmax of materialized attention, forward and
 * backward.  The score and value GEMMs are cuBLASLt strided-batched calls
 * (src/ops_cuda.c); these kernels turn scaled scores into probabilities in
 * place and back.
 *
 * One warp per row of T scores (8 rows per 256-thread block); row r is
 * query t = r % T and sees columns 0..t.  Forward: the row's max, the sum
 * of expf(x - max) (warp tree, fixed order), then p = expf(x - max) / sum
 * for j <= t and exactly 0 above the diagonal (the CPU op's contract: the
 * saved `att` is zero there).  Backward, in place on datt: d = p * (d -
 * sum(p * d)) for j <= t, 0 above.
 *
 * Grouped-query attention (ops_cuda.c runs GPT-2's batched GEMMs on it):
 * gqa_expand copies one sequence's NKV key (or value) heads into [T, NH
 * hs], each for its R = NH / NKV query heads; the GEMMs write one key or
 * value gradient per query head into [T, NH hs], and gqa_reduce adds each
 * group's R heads, in head order and in float, into its key or value head
 * of dqkv (one thread per element, one rounding). */
#include "common.cuh"

template <typename T> __global__ void softmax_fwd_k(T *att, long long rows, int T_) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    int t = sr_causal_query(row, T_);
    T *x = att + row * T_;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        mx = fmaxf(mx, sr_ld(x + j));
    mx = sr_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32)
        sum += expf(sr_ld(x + j) - mx);
    float inv = 1.0f / sr_warp_sum(sum);
    for (int j = lane; j < T_; j += 32)
        sr_st(x + j, j <= t ? expf(sr_ld(x + j) - mx) * inv : 0.0f);
}

template <typename T> __global__ void softmax_bwd_k(T *datt, const T *att, long long rows, int T_) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    int t = sr_causal_query(row, T_);
    T *d = datt + row * T_;
    const T *a = att + row * T_;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
        dot += sr_ld(a + j) * sr_ld(d + j);
    dot = sr_warp_sum(dot);
    for (int j = lane; j < T_; j += 32)
        sr_st(d + j, j <= t ? sr_ld(a + j) * (sr_ld(d + j) - dot) : 0.0f);
}

template <typename T> static int softmax_fwd(cudaStream_t s, void *att, long long rows, int T_) {
    return SR_LAUNCH(softmax_fwd_k<T>, (unsigned)((rows + 7) / 8), 256, 0, s, (T *)att, rows, T_);
}
template <typename T> static int softmax_bwd(cudaStream_t s, void *datt, const void *att, long long rows, int T_) {
    return SR_LAUNCH(softmax_bwd_k<T>, (unsigned)((rows + 7) / 8), 256, 0, s, (T *)datt, (const T *)att, rows, T_);
}

extern "C" int sr_k_softmax_causal_forward(cudaStream_t s, void *att, long long rows, int T, int bf16) {
    SR_ENTER(softmax_causal_forward, sr_lc_softmax(rows, T, (bf16 ? 2 : 4), false));
    return SR_DISPATCH(bf16, softmax_fwd, s, att, rows, T);
}
extern "C" int sr_k_softmax_causal_backward(cudaStream_t s, void *datt, const void *att, long long rows, int T,
                                            int bf16) {
    SR_ENTER(softmax_causal_backward, sr_lc_softmax(rows, T, (bf16 ? 2 : 4), true));
    return SR_DISPATCH(bf16, softmax_bwd, s, datt, att, rows, T);
}

template <typename T> __global__ void gqa_expand_k(T *dst, const T *src, int T_, int NKV, int R, int hs, int W, int C) {
    (void)NKV; /* the launch's shape: the copy reads the heads through R */
    long long n = (long long)T_ * C;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int t = (int)(i / C), e = (int)(i % C), h = e / hs, j = e % hs;
        dst[i] = src[(size_t)t * W + (size_t)(h / R) * hs + j];
    }
}

template <typename T>
static int gqa_expand(cudaStream_t s, void *dst, const void *src, int T_, int NKV, int R, int hs, int W, int C) {
    size_t n = (size_t)T_ * C;
    return SR_LAUNCH(gqa_expand_k<T>, sr_grid_1d(n, 256, 65535u * 16), 256, 0, s, (T *)dst, (const T *)src, T_, NKV,
                     R, hs, W, C);
}

extern "C" int sr_k_gqa_expand(cudaStream_t s, void *dst, const void *src, int T, int NKV, int R, int hs, int W, int C,
                               int bf16) {
    SR_ENTER(gqa_expand, sr_lc_gqa(T, NKV, R, hs, (bf16 ? 2 : 4), false));
    return SR_DISPATCH(bf16, gqa_expand, s, dst, src, T, NKV, R, hs, W, C);
}

template <typename T>
__global__ void gqa_reduce_k(T *dst, const T *src, int T_, int NKV, int R, int hs, int W, int C) {
    long long n = (long long)T_ * NKV * hs;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int e = (int)(i % ((long long)NKV * hs)), t = (int)(i / ((long long)NKV * hs)), g = e / hs, j = e % hs;
        const T *x = src + (size_t)t * C + (size_t)g * R * hs + j;
        float sum = 0.0f;
        for (int r = 0; r < R; r++)
            sum += sr_ld(x + (size_t)r * hs);
        T *d = dst + (size_t)t * W + (size_t)g * hs + j;
        sr_st(d, sr_ld(d) + sum);
    }
}

template <typename T>
static int gqa_reduce(cudaStream_t s, void *dst, const void *src, int T_, int NKV, int R, int hs, int W, int C) {
    size_t n = (size_t)T_ * NKV * hs;
    return SR_LAUNCH(gqa_reduce_k<T>, sr_grid_1d(n, 256, 65535u * 16), 256, 0, s, (T *)dst, (const T *)src, T_, NKV,
                     R, hs, W, C);
}

extern "C" int sr_k_gqa_reduce(cudaStream_t s, void *dst, const void *src, int T, int NKV, int R, int hs, int W, int C,
                               int bf16) {
    SR_ENTER(gqa_reduce, sr_lc_gqa(T, NKV, R, hs, (bf16 ? 2 : 4), true));
    return SR_DISPATCH(bf16, gqa_reduce, s, dst, src, T, NKV, R, hs, W, C);
}
