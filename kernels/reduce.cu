/* reduce.cu — the device table's element-wise primitives and fixed-order
 * reductions (device.h): f32 -> bf16 casts (round to nearest even, as the
 * host), bf16 -> f32 folds, f32 adds, the sum of squares and the loss sum
 * in double (the element-wise ones 16 bytes an access where aligned).
 * The reductions run SR_CUDA_REDUCE_BLOCKS blocks of 256
 * threads over a grid-stride loop, each block's tree into `partial`, then
 * one block sums the partials in order: the same bits on every run.
 *
 * Also the launcher bookkeeping (call counts, names) and the workspace
 * size of the ops. */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

long long sr_cuda_calls[SR_CUDA_NLAUNCHERS];
const char *const sr_cuda_launcher_names[SR_CUDA_NLAUNCHERS] = {
#define SR_CUDA_NAME(n, f) #n,
    SR_CUDA_LAUNCHERS(SR_CUDA_NAME)
#undef SR_CUDA_NAME
};

extern "C" int sr_cuda_skipped(int l) {
    static int skip = -2; /* -2: not read yet; -1: none */
    if (skip == -2) {
        const char *v = getenv("SHARDRUN_TEST_KERNEL_SKIP");
        int found = -1;
        for (int i = 0; v && *v && i < SR_CUDA_NLAUNCHERS; i++)
            if (strcmp(v, sr_cuda_launcher_names[i]) == 0)
                found = i;
        skip = found;
    }
    return l == skip;
}

extern "C" size_t sr_cuda_ws_att_bytes(int T, int NH) { return ((size_t)NH * T * T * sizeof(float) + 255) / 256 * 256; }

extern "C" int sr_cuda_colsum_chunks(int N) { return sr_colsum_chunks(N); }

extern "C" size_t sr_cuda_ws_bytes(int B, int T, int C, int NH, size_t sort_bytes, int flash) {
    size_t BT = (size_t)B * T;
    /* attention, per sequence: the score gradient [NH, T, T], then
     * grouped-query attention's two [T, C] buffers (expanded heads, the
     * per-head key/value gradients); flash attention: its row statistic */
    size_t att = flash ? sr_cuda_flash_ws_bytes(B, T, NH, NH, C / NH) /* (the widest qkv row: NKV <= NH) */
                       : sr_cuda_ws_att_bytes(T, NH) + 2 * (((size_t)T * C * sizeof(float) + 255) / 256 * 256);
    size_t cols = (size_t)sr_colsum_chunks((int)BT) * 4 * C * sizeof(float); /* LayerNorm / bias partials */
    size_t sort = sort_bytes ? sort_bytes : 2 * BT * 8 + ((size_t)1 << 20);  /* encoder keys + CUB's storage */
    size_t ws = att > cols ? att : cols;
    return (ws > sort ? ws : sort) + 256;
}

#define GRID(n) sr_grid_1d((n), 256, 65535u * 16)

/* The element-wise primitives over packs of 8 (a 16-byte access of bf16,
 * two of float) when VEC (every pointer 16-byte aligned), the tail and
 * the unaligned case element by element: the same value per element
 * either way.  The cast rounds as the host does (sr_bf16_bits_rne, NaN
 * kept quiet), packed or not. */
#define SR_STRIDE_LOOP(i, from, n)                                                                                     \
    for (size_t i = (from) + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                                   \
         i += (size_t)gridDim.x * blockDim.x)

template <bool VEC> __global__ void cast_k(__nv_bfloat16 *dst, const float *src, size_t n) {
    size_t packs = VEC ? n / 8 : 0;
    SR_STRIDE_LOOP(i, 0, packs) {
        float f[8];
        sr_ldv<4>(src + 8 * i, f);
        sr_ldv<4>(src + 8 * i + 4, f + 4);
        sr_stv<8>(dst + 8 * i, f);
    }
    SR_STRIDE_LOOP(i, 8 * packs, n)
    ((uint16_t *)dst)[i] = sr_bf16_bits_rne(src[i]);
}
template <bool VEC> __global__ void fold_k(float *acc, const __nv_bfloat16 *src, size_t n, int add) {
    size_t packs = VEC ? n / 8 : 0;
    SR_STRIDE_LOOP(i, 0, packs) {
        float f[8], a[8];
        sr_ldv<8>(src + 8 * i, f);
        if (add) {
            sr_ldv<4>(acc + 8 * i, a);
            sr_ldv<4>(acc + 8 * i + 4, a + 4);
            for (int k = 0; k < 8; k++)
                f[k] = a[k] + f[k];
        }
        sr_stv<4>(acc + 8 * i, f);
        sr_stv<4>(acc + 8 * i + 4, f + 4);
    }
    SR_STRIDE_LOOP(i, 8 * packs, n)
    acc[i] = add ? acc[i] + __bfloat162float(src[i]) : __bfloat162float(src[i]);
}
template <bool VEC> __global__ void add_k(float *acc, const float *src, size_t n) {
    size_t packs = VEC ? n / 4 : 0;
    SR_STRIDE_LOOP(i, 0, packs) {
        float a[4], b[4];
        sr_ldv<4>(acc + 4 * i, a);
        sr_ldv<4>(src + 4 * i, b);
        for (int k = 0; k < 4; k++)
            a[k] += b[k];
        sr_stv<4>(acc + 4 * i, a);
    }
    SR_STRIDE_LOOP(i, 4 * packs, n)
    acc[i] += src[i];
}

/* partial[block] = sum of x[i]^2 (squares) or x[i] over the block's
 * grid-stride share, in double */
__global__ void partial_k(double *partial, const float *x, size_t n, int squares) {
    SR_SHARED(double, sh, 32);
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += squares ? (double)x[i] * x[i] : (double)x[i];
    s = sr_block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}
/* *out = (add ? *out : 0) + the partials, summed by one block */
__global__ void finish_k(double *out, const double *partial, int add) {
    SR_SHARED(double, sh, 32);
    double s = sr_block_sum(partial[threadIdx.x], sh);
    if (threadIdx.x == 0)
        *out = add ? *out + s : s;
}

extern "C" int sr_k_cast_f32_bf16(cudaStream_t s, void *dst, const float *src, size_t n) {
    SR_ENTER(cast_f32_bf16, sr_ledger_cost{0, 6.0 * (double)n});
    if (n == 0)
        return 0;
    if (sr_aligned16(dst) && sr_aligned16(src))
        return SR_LAUNCH(cast_k<true>, GRID(n / 8 ? n / 8 : n), 256, 0, s, (__nv_bfloat16 *)dst, src, n);
    return SR_LAUNCH(cast_k<false>, GRID(n), 256, 0, s, (__nv_bfloat16 *)dst, src, n);
}
extern "C" int sr_k_fold_bf16(cudaStream_t s, float *acc, const void *src, size_t n, int add) {
    SR_ENTER(fold_bf16, sr_ledger_cost{add ? (double)n : 0, (add ? 10.0 : 6.0) * (double)n});
    if (n == 0)
        return 0;
    if (sr_aligned16(acc) && sr_aligned16(src))
        return SR_LAUNCH(fold_k<true>, GRID(n / 8 ? n / 8 : n), 256, 0, s, acc, (const __nv_bfloat16 *)src, n, add);
    return SR_LAUNCH(fold_k<false>, GRID(n), 256, 0, s, acc, (const __nv_bfloat16 *)src, n, add);
}
extern "C" int sr_k_add_f32(cudaStream_t s, float *acc, const float *src, size_t n) {
    SR_ENTER(add_f32, sr_ledger_cost{(double)n, 12.0 * (double)n});
    if (n == 0)
        return 0;
    if (sr_aligned16(acc) && sr_aligned16(src))
        return SR_LAUNCH(add_k<true>, GRID(n / 4 ? n / 4 : n), 256, 0, s, acc, src, n);
    return SR_LAUNCH(add_k<false>, GRID(n), 256, 0, s, acc, src, n);
}

static int reduce(cudaStream_t s, double *out, const float *x, size_t n, double *partial, int squares, int add) {
    int e = SR_LAUNCH(partial_k, SR_CUDA_REDUCE_BLOCKS, 256, 0, s, partial, x, n, squares);
    if (e)
        return e;
    return SR_LAUNCH(finish_k, 1, SR_CUDA_REDUCE_BLOCKS, 0, s, out, partial, add);
}
extern "C" int sr_k_sum_squares(cudaStream_t s, double *out, const float *x, size_t n, double *partial) {
    SR_ENTER(sum_squares, sr_ledger_cost{2.0 * (double)n, 4.0 * (double)n});
    return reduce(s, out, x, n, partial, 1, 0);
}
extern "C" int sr_k_loss_sum(cudaStream_t s, double *acc, const float *losses, size_t n, double *partial, int add) {
    SR_ENTER(loss_sum, sr_ledger_cost{(double)n, 4.0 * (double)n});
    return reduce(s, acc, losses, n, partial, 0, add);
}
