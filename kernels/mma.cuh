/* mma.cuh — the warp-level primitives of kernels/, each an inline
 * function with one definition under nvcc (the CUDA intrinsic or inline
 * PTX) and one under the CUDA emulator (tests/cudaemu/kernel.h's cudaemu_*
 * functions, which model them from NVIDIA's PTX ISA: tests/cudaemu/README).
 * No other file of kernels/ writes inline PTX or these intrinsics
 * (tests/cuda_static.sh).
 *
 *   sr_shfl_xor / _idx / _up / _down   __shfl_*_sync: a value of <= 8 bytes
 *                                      among the lanes `mask` names
 *   sr_ballot                          __ballot_sync
 *   sr_mma_m16n8k16_bf16               mma.sync.aligned.m16n8k16.row.col
 *                                      .f32.bf16.bf16.f32: D = A B + C, A
 *                                      16 x 16 and B 16 x 8 bf16, C and D
 *                                      16 x 8 f32, in the ISA's fragments
 *                                      (PTX ISA 9.7.14.5.8, "Matrix
 *                                      Fragments for mma.m16n8k16 with
 *                                      floating point type")
 *   sr_ldmatrix<N, TRANS>              ldmatrix.sync.aligned.m8n8.xN{.trans}
 *                                      .shared.b16 (9.7.14.5.15): N 8 x 8
 *                                      matrices of 16-bit elements, each
 *                                      lane giving one row's address
 *   sr_cp_async_ca<BYTES> / _cg        cp.async.{ca,cg}.shared.global of 4,
 *                                      8 or 16 bytes (cg: 16), and its
 *   sr_cp_async_commit / _wait<N> /    commit_group, wait_group N and
 *   _wait_all                          wait_all (9.7.9.25)
 *   sr_pack_bf16x2 / sr_unpack_bf16x2  two floats as bf16 (round to nearest
 *                                      even) in one 32-bit register, the
 *                                      first in the low half, and back
 *   sr_globaltimer                     %globaltimer, ns
 *
 * Shared memory such a kernel addresses by pointer (ldmatrix's rows,
 * cp.async's destination) is named SR_SHPTR(array, index): &array[index]
 * under nvcc, a checked pointer into the emulated block's shared memory
 * in the emulator.  Dynamic shared memory is SR_SHARED_DYN(T, name): the
 * launch's `shmem` bytes (above 48 KiB only after cudaFuncSetAttribute's
 * cudaFuncAttributeMaxDynamicSharedMemorySize, as on hardware), and
 * SR_SHSLICE(array, off, len) elements [off, off + len) of one as an array
 * of its own (bounds-checked by the emulator against the whole). */
#ifndef SR_MMA_CUH
#define SR_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

/* ---- shuffles and votes ------------------------------------------------ */

#ifdef SR_CUDAEMU
/* (the emulator's kinds of shuffle: tests/cudaemu/kernel.h) */
template <typename T> __device__ inline T sr_shfl_kind_(int kind, unsigned mask, T v, int arg) {
    static_assert(sizeof(T) <= 8, "a register-sized value");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cudaemu_shfl_bits(kind, mask, bits, arg);
    memcpy(&v, &bits, sizeof v);
    return v;
}
template <typename T> __device__ inline T sr_shfl_xor(unsigned mask, T v, int lane_mask) {
    return sr_shfl_kind_(CUDAEMU_SHFL_XOR, mask, v, lane_mask);
}
template <typename T> __device__ inline T sr_shfl_idx(unsigned mask, T v, int src_lane) {
    return sr_shfl_kind_(CUDAEMU_SHFL_IDX, mask, v, src_lane);
}
template <typename T> __device__ inline T sr_shfl_up(unsigned mask, T v, int delta) {
    return sr_shfl_kind_(CUDAEMU_SHFL_UP, mask, v, delta);
}
template <typename T> __device__ inline T sr_shfl_down(unsigned mask, T v, int delta) {
    return sr_shfl_kind_(CUDAEMU_SHFL_DOWN, mask, v, delta);
}
__device__ inline unsigned sr_ballot(unsigned mask, int pred) { return cudaemu_ballot(mask, pred != 0); }
#else
template <typename T> __device__ inline T sr_shfl_xor(unsigned mask, T v, int lane_mask) {
    return __shfl_xor_sync(mask, v, lane_mask);
}
template <typename T> __device__ inline T sr_shfl_idx(unsigned mask, T v, int src_lane) {
    return __shfl_sync(mask, v, src_lane);
}
template <typename T> __device__ inline T sr_shfl_up(unsigned mask, T v, int delta) {
    return __shfl_up_sync(mask, v, (unsigned)delta);
}
template <typename T> __device__ inline T sr_shfl_down(unsigned mask, T v, int delta) {
    return __shfl_down_sync(mask, v, (unsigned)delta);
}
__device__ inline unsigned sr_ballot(unsigned mask, int pred) { return __ballot_sync(mask, pred); }
#endif

/* ---- tensor cores ------------------------------------------------------ */

/* D = A B + C for the warp's 16 x 8 tile: a[4] (8 bf16 of A, two per
 * register, the lower-numbered element in the low half), b[2] (4 bf16 of
 * B), c[4] and d[4] (f32) in the ISA's fragments.  Every lane of the warp
 * executes it (.aligned). */
__device__ inline void sr_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifdef SR_CUDAEMU
    cudaemu_mma_m16n8k16_bf16(d, a, b, c);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
#endif
}

/* N (1, 2 or 4) 8 x 8 matrices of 16-bit elements from shared memory: lane
 * l gives the address of row l % 8 of matrix l / 8 (lanes 0..8N-1; 16-byte
 * aligned rows); r[m] receives matrix m's elements (l / 4, 2 (l % 4)) and
 * (l / 4, 2 (l % 4) + 1), or with TRANS its transpose's. */
template <int N, bool TRANS> __device__ inline void sr_ldmatrix(uint32_t (&r)[N], const void *row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef SR_CUDAEMU
    cudaemu_ldmatrix(r, N, TRANS, row);
#else
    uint32_t s = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (N == 1 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
    else if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
    else if constexpr (N == 2 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(s));
    else if constexpr (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
#endif
}

/* ---- asynchronous copies ----------------------------------------------- */

/* BYTES (4, 8 or 16) from global memory to shared memory, asynchronously
 * (.ca: through L1); both addresses aligned to BYTES.  The destination
 * may be read only after a wait that covers the copy's group. */
template <int BYTES> __device__ inline void sr_cp_async_ca(void *smem, const void *gmem) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async.ca copies 4, 8 or 16 bytes");
#ifdef SR_CUDAEMU
    cudaemu_cp_async(smem, gmem, BYTES, 0);
#else
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES));
#endif
}
/* 16 bytes, bypassing L1 (.cg). */
__device__ inline void sr_cp_async_cg(void *smem, const void *gmem) {
#ifdef SR_CUDAEMU
    cudaemu_cp_async(smem, gmem, 16, 1);
#else
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#endif
}
/* The thread's copies since the last commit become one group. */
__device__ inline void sr_cp_async_commit() {
#ifdef SR_CUDAEMU
    cudaemu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Waits until at most N of the thread's committed groups are pending (the
 * newest N; every older one has landed). */
template <int N> __device__ inline void sr_cp_async_wait() {
    static_assert(N >= 0 && N <= 7, "cp.async.wait_group N");
#ifdef SR_CUDAEMU
    cudaemu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
/* Commits and waits for every copy of the thread (cp.async.wait_all). */
__device__ inline void sr_cp_async_wait_all() {
#ifdef SR_CUDAEMU
    cudaemu_cp_async_wait(-1);
#else
    asm volatile("cp.async.wait_all;\n" ::);
#endif
}

/* ---- bf16 pairs and the timer ------------------------------------------ */

/* lo and hi as bf16, rounded to nearest even, lo in the low half. */
__device__ inline uint32_t sr_pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &p, sizeof u);
    return u;
}
/* The two bf16 of a register as floats (x: the low half). */
__device__ inline float2 sr_unpack_bf16x2(uint32_t u) {
    uint32_t lo = u << 16, hi = u & 0xffff0000u; /* a bf16 is a float's upper half: exact */
    float2 f;
    memcpy(&f.x, &lo, sizeof lo);
    memcpy(&f.y, &hi, sizeof hi);
    return f;
}

/* The device's global timer, ns (on the emulator: the host's monotonic
 * clock after a short sleep, so a spinning kernel holds no host core). */
__device__ inline unsigned long long sr_globaltimer() {
#ifdef SR_CUDAEMU
    return cudaemu_globaltimer();
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

/* ---- shared memory by pointer ------------------------------------------ */

#ifdef SR_CUDAEMU
#define SR_SHPTR(array, i) ((array).ptr(i))
#else
#define SR_SHPTR(array, i) (&(array)[i])
/* the launch's dynamic shared memory as T name[] */
#define SR_SHARED_DYN(T, name)                                                                                         \
    extern __shared__ __align__(16) unsigned char sr_dyn_smem_[];                                                      \
    T *const name = reinterpret_cast<T *>(sr_dyn_smem_)
/* elements [off, off + len) of a shared array, as an array */
#define SR_SHSLICE(array, off, len) ((array) + (off))
#endif

#endif
