/* kernel.h — the device side of the CUDA emulator: what the kernels (kernels/, .cu) need
 * to build with the host C++ compiler and run on the emulated grid.
 *
 * An emulator tree (configure --with-cuda=emulator) compiles every .cu with
 * the host compiler, -DSR_CUDAEMU and this header included first.  It gives
 * the kernels what nvcc gives them, from the CUDA C++ Programming Guide:
 * threadIdx, blockIdx, blockDim and gridDim; __syncthreads as a real block
 * barrier (each thread of a block is a fiber: grid.cc), reported when not
 * every thread reaches the same one; the warp-level operations of
 * kernels/mma.cuh (shuffles, votes, mma.sync, ldmatrix: warp.cc) in
 * lockstep across the lanes of a warp; per-block shared memory through
 * SR_SHARED (common.cuh: __shared__ under nvcc) and SR_SHARED_DYN (the
 * launch's dynamic bytes), every access seen by the race detector, and
 * cp.async (smem.cc); the correctly rounded
 * __f*_rn intrinsics (IEEE single operations, no contraction: the tree
 * builds kernels with -ffp-contract=off); bf16 through the toolkit's own
 * cuda_bf16.h host code; and the one launch macro, SR_LAUNCH, retargeted
 * to cudaemu_launch (arguments evaluated and converted to the kernel's
 * parameter types at the launch, as a real launch does).  CUB's radix sort
 * is include/cub/device/device_radix_sort.cuh.  Out of scope: anything
 * kernels/ does not use (atomics, cooperative groups, other mma shapes). */
#ifndef CUDAEMU_KERNEL_H
#define CUDAEMU_KERNEL_H

/* Before the toolkit's host_defines.h, which keeps what is defined. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cudaemu.h"

/* The special registers of the running thread (set by the grid before it
 * resumes a fiber; every fiber of a block runs on one host thread). */
struct cudaemu_regs {
    uint3 tid, bid, bdim, gdim;
};
extern __thread cudaemu_regs cudaemu_r;
#define threadIdx (cudaemu_r.tid)
#define blockIdx (cudaemu_r.bid)
#define blockDim (cudaemu_r.bdim)
#define gridDim (cudaemu_r.gdim)

extern "C" {
/* The block barrier at file:line: returns when every thread of the block
 * has reached it (a thread that exited, or one waiting at another
 * __syncthreads, is reported). */
void cudaemu_syncthreads(const char *file, int line);
/* The warp-level operations of kernels/mma.cuh (warp.cc says how each is
 * modelled).  A shuffle exchanges a value's bits among the lanes of the
 * calling thread's warp named by `mask` (kind CUDAEMU_SHFL_*: the lane read
 * is lane ^ arg, arg, lane - arg or lane + arg); the caller's lane must be
 * in the mask, and the lane it reads must be in it and at the same
 * shuffle (else a report).  A vote returns the mask's lanes whose pred is
 * true.  mma and ldmatrix are executed by every lane of the warp. */
enum { CUDAEMU_SHFL_XOR, CUDAEMU_SHFL_IDX, CUDAEMU_SHFL_UP, CUDAEMU_SHFL_DOWN };
uint64_t cudaemu_shfl_bits(int kind, unsigned mask, uint64_t bits, int arg);
unsigned cudaemu_ballot(unsigned mask, int pred);
void cudaemu_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
void cudaemu_ldmatrix(uint32_t *regs, int n, int trans, const void *row);
/* cp.async (smem.cc): a copy of `bytes` deferred to the wait that covers
 * it; commit closes the thread's group; wait lands all committed groups
 * but the newest n (n < 0: wait_all). */
void cudaemu_cp_async(void *dst, const void *src, int bytes, int cg);
void cudaemu_cp_async_commit(void);
void cudaemu_cp_async_wait(int n);
/* This block's shared array for declaration `key` (the first caller of the
 * block allocates it, filled with 0xff bytes: NaN for floats). */
void *cudaemu_shared(const void *key, size_t bytes);
/* The race detector's view of one access to shared memory by the running
 * thread: two threads touching a byte between barriers, one writing, is
 * reported, naming array `name`.  cudaemu_shared_oob reports index i of
 * an array of n. */
void cudaemu_shared_access(const void *p, size_t bytes, int write, const char *name);
[[noreturn]] void cudaemu_shared_oob(const char *name, long long i, size_t n);
/* &base[i] of an array of n elements of `elem` bytes (i <= n: one past the
 * end is a pointer too), else a report naming the array. */
void *cudaemu_shared_ptr(const void *base, long long i, size_t n, size_t elem, const char *name);
/* The block's dynamic shared memory (the launch's `shmem` bytes, into
 * *bytes), 0xff at the block's start. */
void *cudaemu_dynamic_shared(size_t *bytes);
/* Launches fn(ctx), kernel `func`, on every thread of grid x block with
 * `shmem` bytes of dynamic shared memory on `stream` (in stream order);
 * free_ctx(ctx) after the grid.  A bad configuration is recorded as the
 * thread's last error and nothing is launched (ctx freed):
 * cudaErrorInvalidConfiguration for the grid or block,
 * cudaErrorInvalidValue for dynamic shared memory above 48 KiB without
 * the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize, or above 227
 * KiB. */
void cudaemu_launch_raw(const char *name, const void *func, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                        void (*fn)(void *), void *ctx, void (*free_ctx)(void *));
/* The device's global timer in ns (CLOCK_MONOTONIC), after a short sleep:
 * a spinning kernel polls it without holding a host core. */
unsigned long long cudaemu_globaltimer(void);
}

#define __syncthreads() cudaemu_syncthreads(__FILE__, __LINE__)

/* Correctly rounded single operations: the host's IEEE arithmetic. */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

/* A kernel's arguments, converted to its parameter types at the launch. */
template <typename... P> struct cudaemu_call {
    void (*k)(P...);
    std::tuple<typename std::decay<P>::type...> args;
    static void run(void *c) {
        cudaemu_call *self = static_cast<cudaemu_call *>(c);
        std::apply(self->k, self->args);
    }
    static void drop(void *c) { delete static_cast<cudaemu_call *>(c); }
};

/* One argument at the launch: a pointer is translated and checked
 * (cudaemu_kernel_arg: device memory, or pinned or registered host
 * memory), after the mutation suite's shift_out moved it one element on. */
template <typename A> inline void cudaemu_arg(const char *name, int i, int shift, A &a) {
    if constexpr (std::is_pointer<A>::value) {
        if (shift == i && a)
            a = a + 1;
        a = (A)cudaemu_kernel_arg(name, i, (const void *)a);
    } else {
        (void)name, (void)i, (void)shift;
    }
}

template <typename... P, typename... A>
inline void cudaemu_launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, void (*k)(P...),
                           A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel's argument count");
    auto *c = new cudaemu_call<P...>{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
    int n = -1;
    int shift = strcmp(cudaemu_mutation(name, &n), "shift_out") == 0 ? n : -1;
    std::apply(
        [&](auto &...x) {
            int i = 0;
            (cudaemu_arg(name, i++, shift, x), ...);
        },
        c->args);
    cudaemu_launch_raw(name, (const void *)k, grid, block, shmem, stream, &cudaemu_call<P...>::run, c,
                       &cudaemu_call<P...>::drop);
}

/* The runtime API's C++ form for a kernel (cuda_runtime.h has it under
 * nvcc alone): the kernel's host function stands for it. */
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*entry)(P...), enum cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr, value);
}

/* common.cuh's launch macro, retargeted: clear (unless the mutation
 * suite's launch_keeps_error), launch, read. */
#define SR_LAUNCH_RAW(kernel, grid, block, shmem, stream, ...)                                                         \
    ((void)(strcmp(cudaemu_mutation(NULL, NULL), "launch_keeps_error") != 0 && cudaGetLastError()),                    \
     cudaemu_launch(#kernel, dim3(grid), dim3(block), (shmem), (stream), kernel, __VA_ARGS__),                         \
     (int)cudaGetLastError())

/* A block's shared array: __shared__ T name[n] under nvcc.  Here every
 * element access goes through the race detector (cudaemu_shared_access)
 * and is bounds-checked. */
template <typename T> struct cudaemu_sref {
    T *p;
    const char *name;
    operator T() const {
        cudaemu_shared_access(p, sizeof(T), 0, name);
        return *p;
    }
    cudaemu_sref &operator=(T v) {
        cudaemu_shared_access(p, sizeof(T), 1, name);
        *p = v;
        return *this;
    }
    cudaemu_sref &operator=(const cudaemu_sref &o) { return *this = static_cast<T>(o); }
    cudaemu_sref &operator+=(T v) { return *this = static_cast<T>(*this) + v; }
};
template <typename T> struct cudaemu_sarray {
    T *base;
    size_t n;
    const char *name;
    template <typename I> cudaemu_sref<T> operator[](I i) const {
        if (i < 0 || (unsigned long long)i >= n)
            cudaemu_shared_oob(name, (long long)i, n);
        return cudaemu_sref<T>{base + i, name};
    }
    /* &name[i] (kernels/mma.cuh's SR_SHPTR): for the operations that take a
     * shared address (ldmatrix, cp.async), which check their own bytes */
    template <typename I> T *ptr(I i) const {
        return static_cast<T *>(cudaemu_shared_ptr(base, (long long)i, n, sizeof(T), name));
    }
};
#define SR_SHARED(T, name, n)                                                                                          \
    static const char name##_cudaemu_key = 0;                                                                          \
    const cudaemu_sarray<T> name {                                                                                     \
        static_cast<T *>(cudaemu_shared(&name##_cudaemu_key, sizeof(T) * (n))), (size_t)(n), #name                     \
    }
/* The launch's dynamic shared memory as T name[]: extern __shared__ under
 * nvcc (kernels/mma.cuh). */
template <typename T> inline cudaemu_sarray<T> cudaemu_dynamic_array(const char *name) {
    size_t bytes = 0;
    void *p = cudaemu_dynamic_shared(&bytes);
    return cudaemu_sarray<T>{static_cast<T *>(p), bytes / sizeof(T), name};
}
#define SR_SHARED_DYN(T, name) const cudaemu_sarray<T> name = cudaemu_dynamic_array<T>(#name)
/* Elements [off, off + len) of a shared array as an array of its own,
 * bounds-checked against the whole (kernels/mma.cuh's SR_SHSLICE). */
template <typename T> inline cudaemu_sarray<T> cudaemu_slice(const cudaemu_sarray<T> &a, size_t off, size_t len) {
    if (off + len > a.n)
        cudaemu_shared_oob(a.name, (long long)(off + len) - 1, a.n);
    return cudaemu_sarray<T>{a.base + off, len, a.name};
}
#define SR_SHSLICE(array, off, len) cudaemu_slice((array), (size_t)(off), (size_t)(len))

#endif
