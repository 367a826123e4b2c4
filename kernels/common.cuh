/* common.cuh — what every kernel file shares: element loads and stores for
 * float and bf16, warp and block reductions in a fixed order, the launch
 * macro, and the index helpers.
 *
 * Under nvcc this is CUDA C++; in an emulator tree (configure
 * --with-cuda=emulator) the host C++ compiler builds the same code with
 * SR_CUDAEMU defined and tests/cudaemu/kernel.h included first, which
 * retargets SR_LAUNCH and SR_SHARED.
 *
 * The index helpers are __host__ __device__ and free of CUDA types, so
 * tests/gpu/index_math.cu runs them on the host (no GPU needed) against
 * plain loops: an off-by-one in an index shows in CI, not on the GPU.
 * Reductions are trees over a fixed shape (warp shuffles xor 16..1, then
 * the warps in order): the same inputs give the same bits on every run of
 * the same GPU type. */
#ifndef SR_COMMON_CUH
#define SR_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "mma.cuh"
#include "sr_cuda.h"

/* ---- index helpers (host and device) --------------------------------- */

/* Blocks of `block` threads that cover n items, capped at `cap` (grid-stride
 * loops cover the rest); at least 1. */
__host__ __device__ inline unsigned sr_grid_1d(size_t n, unsigned block, unsigned cap) {
    size_t g = (n + block - 1) / block;
    if (g > cap)
        g = cap;
    return g ? (unsigned)g : 1u;
}

/* Rows per chunk of the fixed-order column sums, and the chunk count for N
 * rows: chunk k covers rows [k*R, min(N, (k+1)*R)). */
#define SR_COLSUM_ROWS 32
__host__ __device__ inline int sr_colsum_chunks(int N) { return (N + SR_COLSUM_ROWS - 1) / SR_COLSUM_ROWS; }
__host__ __device__ inline void sr_colsum_bounds(int chunk, int N, int *lo, int *hi) {
    *lo = chunk * SR_COLSUM_ROWS;
    *hi = *lo + SR_COLSUM_ROWS < N ? *lo + SR_COLSUM_ROWS : N;
}

/* Row r of a [B*NH*T, T] score matrix is query position t = r % T; column
 * j is visible to it when j <= t (causal). */
__host__ __device__ inline int sr_causal_query(long long row, int T) { return (int)(row % T); }

/* The encoder's sort key: token in the high 32 bits, position in the low,
 * so sorted keys group a token's positions in increasing order. */
__host__ __device__ inline unsigned long long sr_key_pack(int token, int pos) {
    return ((unsigned long long)(unsigned)token << 32) | (unsigned)pos;
}
__host__ __device__ inline int sr_key_token(unsigned long long k) { return (int)(k >> 32); }
__host__ __device__ inline int sr_key_pos(unsigned long long k) { return (int)(k & 0xffffffffu); }
/* Whether sorted key i starts a run of one token (the first position of it). */
__host__ __device__ inline bool sr_key_run_start(const unsigned long long *keys, int i) {
    return i == 0 || sr_key_token(keys[i]) != sr_key_token(keys[i - 1]);
}

/* Offset of element (b, t, part, h, d) of a qkv tensor [B, T, 3C] whose
 * parts q, k, v are each C = NH*hs wide with heads contiguous (ops.h). */
__host__ __device__ inline size_t sr_qkv_offset(int b, int t, int part, int h, int d, int T, int C, int hs) {
    return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs + d;
}

/* Bit-exact float -> bf16, round to nearest even (NaN stays NaN), as the
 * host's sr_f32_to_bf16. */
__host__ __device__ inline uint16_t sr_bf16_bits_rne(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}

#if defined(__CUDACC__) || defined(SR_CUDAEMU)
/* ---- element access ---------------------------------------------------- */

__device__ inline float sr_ld(const float *p) { return *p; }
__device__ inline float sr_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ inline void sr_st(float *p, float v) { *p = v; }
__device__ inline void sr_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* ---- packed access: 16 bytes a load or store --------------------------- */

/* Elements of T in one 16-byte access: 8 bf16, 4 float.  A kernel
 * templated on V (this, or 1) reads and writes V elements at a time; its
 * launcher picks the pack when the row width is a multiple of it and every
 * pointer is 16-byte aligned (sr_aligned16), else 1 (scalar accesses, the
 * same arithmetic: the same bits). */
template <typename T> constexpr int sr_pack() { return 16 / (int)sizeof(T); }
inline bool sr_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
/* Threads of a block that gives each thread one of `packs` packs: whole
 * warps, at least one, at most `cap` (more packs loop). */
inline int sr_pack_threads(int packs, int cap) {
    int t = (packs + 31) / 32 * 32;
    return t < 32 ? 32 : t > cap ? cap : t;
}

__device__ inline float sr_bits_f32(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = u;
    return v.f;
}
/* x as T stores it, read back: the bf16 rounding (to nearest even, as
 * sr_st) or x itself */
template <typename T> __device__ inline float sr_rounded(float x) {
    if constexpr (sizeof(T) == 2)
        return sr_bits_f32((uint32_t)sr_bf16_bits_rne(x) << 16);
    else
        return x;
}

/* f[0..V) = the V elements at p, as floats */
template <int V> __device__ inline void sr_ldv(const float *p, float *f) {
    if constexpr (V == 4) {
        float4 q = *reinterpret_cast<const float4 *>(p);
        f[0] = q.x, f[1] = q.y, f[2] = q.z, f[3] = q.w;
    } else {
        for (int k = 0; k < V; k++)
            f[k] = p[k];
    }
}
template <int V> __device__ inline void sr_ldv(const __nv_bfloat16 *p, float *f) {
    if constexpr (V == 8) {
        uint4 q = *reinterpret_cast<const uint4 *>(p);
        uint32_t w[4] = {q.x, q.y, q.z, q.w};
        for (int k = 0; k < 4; k++) {
            f[2 * k] = sr_bits_f32(w[k] << 16); /* (little-endian: the lower address in the low half) */
            f[2 * k + 1] = sr_bits_f32(w[k] & 0xffff0000u);
        }
    } else {
        for (int k = 0; k < V; k++)
            f[k] = sr_ld(p + k);
    }
}
/* the V elements at p = f[0..V), rounded to T (to nearest even) */
template <int V> __device__ inline void sr_stv(float *p, const float *f) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(f[0], f[1], f[2], f[3]);
    } else {
        for (int k = 0; k < V; k++)
            p[k] = f[k];
    }
}
template <int V> __device__ inline void sr_stv(__nv_bfloat16 *p, const float *f) {
    if constexpr (V == 8) {
        uint32_t w[4];
        for (int k = 0; k < 4; k++)
            w[k] = (uint32_t)sr_bf16_bits_rne(f[2 * k]) | ((uint32_t)sr_bf16_bits_rne(f[2 * k + 1]) << 16);
        *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        for (int k = 0; k < V; k++)
            sr_st(p + k, f[k]);
    }
}

/* Unrolls the loop that follows under nvcc (a register array indexed by
 * its counter stays in registers, not local memory); nothing in the
 * emulator's host compiler. */
#ifdef SR_CUDAEMU
#define SR_UNROLL
#else
#define SR_UNROLL _Pragma("unroll")
#endif

/* A block's shared array of n T: __shared__ under nvcc; the CUDA emulator
 * (tests/cudaemu/kernel.h) gives each emulated block its own.  Every
 * kernel declares shared memory through it (tests/cuda_static.sh). */
#ifndef SR_SHARED
#define SR_SHARED(T, name, n) __shared__ T name[n]
#endif

/* A planted bug of the mutation suite (tests/mutants.sh): true when the
 * emulator's CUDAEMU_MUTATE is src:NAME, so a kernel can carry a named
 * wrong variant of one line that only the emulator turns on; false under
 * nvcc, where it folds away. */
#ifdef SR_CUDAEMU
#define SR_MUTANT(name) (strcmp(cudaemu_mutation(#name, NULL), "src") == 0)
#else
#define SR_MUTANT(name) false
#endif

/* ---- reductions in a fixed order --------------------------------------- */

template <typename A> __device__ inline A sr_warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1)
        v += sr_shfl_xor(0xffffffffu, v, o);
    return v;
}
__device__ inline float sr_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, sr_shfl_xor(0xffffffffu, v, o));
    return v;
}
/* Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every
 * thread gets the result.  `sh` is an SR_SHARED array of 32 A (a pointer
 * under nvcc; the emulator's race-checked array there). */
template <typename A, typename S> __device__ inline A sr_block_sum(A v, S sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sr_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    A t = lane < nw ? sh[lane] : (A)0;
    return sr_warp_sum(t);
}
template <typename S> __device__ inline float sr_block_max(float v, S sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = sr_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : -INFINITY;
    return sr_warp_max(t);
}

/* acc[c] (add ? += : =) sum over chunks k (in order) of partial[k * stride
 * + c], for c < width: the second pass of the fixed-order column sums. */
__global__ static void sr_colsum_finish_k(float *acc, const float *partial, int chunks, int width, int stride,
                                          int add) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width)
        return;
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++)
        sum += partial[(size_t)k * stride + c];
    acc[c] = add ? acc[c] + sum : sum; /* add 0: the overwrite form, acc not read */
}

/* The same for up to four column sums laid side by side in each chunk's
 * partial row (stride `stride`): output j (o[j] non-NULL) is the sum of
 * columns [j width, (j + 1) width), added (add bit j) or written; one
 * launch for a norm's dw, db and the input gradient's sums. */
__global__ static void sr_colsum_finish4_k(float *o0, float *o1, float *o2, float *o3, int add, const float *partial,
                                           int chunks, int width, int stride) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, j = i / (width > 0 ? width : 1), c = i - j * width;
    if (j > 3)
        return;
    float *o = j == 0 ? o0 : j == 1 ? o1 : j == 2 ? o2 : o3;
    if (!o)
        return;
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++)
        sum += partial[(size_t)k * stride + (size_t)j * width + c];
    o[c] = (add >> j) & 1 ? o[c] + sum : sum;
}

/* ---- launches ---------------------------------------------------------- */

/* The one launch macro, used by every launch (tests/cuda_static.sh rejects
 * a bare triple-chevron launch anywhere else): it clears the thread's
 * last-error first, so a stale one (cudaErrorNotReady left by a query, an
 * allocation failure) is never reported as this launch's, then launches,
 * then reads the launch's own error as an int (0 when it was enqueued).
 * A sticky error (an illegal address, ...) still shows: every call answers
 * it.  The CUDA emulator retargets this one macro. */
#ifndef SR_LAUNCH_RAW
#define SR_LAUNCH_RAW(kernel, grid, block, shmem, stream, ...)                                                         \
    ((void)cudaGetLastError(), kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__), (int)cudaGetLastError())
#endif
/* Every launch passes the table's two hooks (sr_cuda.h): it is counted in
 * the ledger bound to the thread (ledger.h), on a dry table (device.h:
 * `plan --ledger`'s counting executor) counted only and never issued, and
 * under SHARDRUN_CUDA_PROFILE bracketed by timing events. */
#define SR_LAUNCH(kernel, grid, block, shmem, stream, ...)                                                             \
    (sr_cuda_launch_begin(stream)                                                                                      \
         ? 0                                                                                                           \
         : sr_cuda_launch_end(stream, SR_LAUNCH_RAW(kernel, grid, block, shmem, stream, __VA_ARGS__)))
/* The same hygiene around a library call that launches kernels on
 * `stream` and checks the last-error itself (CUB's radix sort calls
 * cudaPeekAtLastError): the stale state is cleared before it, its own
 * status returned; one launch in the ledger. */
#ifndef SR_LAUNCH_LIB
#define SR_LAUNCH_LIB(stream, call)                                                                                    \
    (sr_cuda_launch_begin(stream) ? 0 : sr_cuda_launch_end(stream, ((void)cudaGetLastError(), (int)(call))))
#endif

/* A library's size query (CUB's temporary storage): no launch, nothing to
 * count; a dry table, with no GPU to ask, answers 0 bytes. */
#ifndef SR_QUERY_LIB
#define SR_QUERY_LIB(call) (sr_cuda_dry() ? 0 : ((void)cudaGetLastError(), (int)(call)))
#endif

/* Enters launcher `name`: counts the call (sr_cuda_calls) and, when
 * SHARDRUN_TEST_KERNEL_SKIP names this launcher, returns 0 without
 * launching (the kernel test's mutation check: a skipped launcher must
 * fail it); with a ledger bound, records the launcher's cost (ledger.h's
 * sr_lc_* of its arguments: evaluated only then). */
#define SR_ENTER(name, ...)                                                                                            \
    do {                                                                                                               \
        (void)__atomic_add_fetch(&sr_cuda_calls[SR_CUDA_L_##name], 1, __ATOMIC_RELAXED);                               \
        if (sr_cuda_skipped(SR_CUDA_L_##name))                                                                         \
            return 0;                                                                                                  \
        if (sr_ledger_bound())                                                                                         \
            sr_ledger_enter(SR_CUDA_L_##name, (__VA_ARGS__));                                                          \
    } while (0)

/* Calls the float or the bf16 instance of a templated launch body. */
#define SR_DISPATCH(bf16, F, ...) ((bf16) ? F<__nv_bfloat16>(__VA_ARGS__) : F<float>(__VA_ARGS__))
#endif

#endif
