/* kernel.h — the device side of the CUDA emulator: what the kernels (kernels/, .cu) need
 * to build with the host C++ compiler and run on the emulated grid.
 *
 * An emulator tree (configure --with-cuda=emulator) compiles every .cu with
 * the host compiler, -DSR_CUDAEMU and this header included first.  It gives
 * the kernels what nvcc gives them, from the CUDA C++ Programming Guide:
 * threadIdx, blockIdx, blockDim and gridDim; __syncthreads as a real block
 * barrier (each thread of a block is a fiber: grid.cc), reported when not
 * every thread reaches the same one; __shfl_xor_sync in lockstep across
 * the lanes of a warp, its mask checked; per-block shared memory through
 * SR_SHARED (common.cuh: __shared__ under nvcc), every access seen by the
 * race detector; the correctly rounded
 * __f*_rn intrinsics (IEEE single operations, no contraction: the tree
 * builds kernels with -ffp-contract=off); bf16 through the toolkit's own
 * cuda_bf16.h host code; and the one launch macro, SR_LAUNCH, retargeted
 * to cudaemu_launch (arguments evaluated and converted to the kernel's
 * parameter types at the launch, as a real launch does).  CUB's radix sort
 * is include/cub/device/device_radix_sort.cuh.  Out of scope: anything
 * kernels/ does not use (atomics, dynamic shared memory, cooperative
 * groups, warp votes). */
#ifndef CUDAEMU_KERNEL_H
#define CUDAEMU_KERNEL_H

/* Before the toolkit's host_defines.h, which keeps what is defined. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

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
/* Lane-xor exchange of a value's bits among the lanes of the calling
 * thread's warp named by `mask`: the caller's lane must be in the mask,
 * and the lane it reads must be in it and at the same shuffle (else a
 * report). */
uint64_t cudaemu_shfl_xor_bits(unsigned mask, uint64_t bits, int lane_mask);
/* This block's shared array for declaration `key` (the first caller of the
 * block allocates it, filled with 0xff bytes: NaN for floats). */
void *cudaemu_shared(const void *key, size_t bytes);
/* The race detector's view of one access to shared memory by the running
 * thread: two threads touching a byte between barriers, one writing, is
 * reported, naming array `name`.  cudaemu_shared_oob reports index i of
 * an array of n. */
void cudaemu_shared_access(const void *p, size_t bytes, int write, const char *name);
[[noreturn]] void cudaemu_shared_oob(const char *name, long long i, size_t n);
/* Launches fn(ctx) on every thread of grid x block on `stream` (in stream
 * order); free_ctx(ctx) after the grid.  A bad configuration is recorded
 * as the thread's last error and nothing is launched (ctx freed). */
void cudaemu_launch_raw(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, void (*fn)(void *),
                        void *ctx, void (*free_ctx)(void *));
/* The device's global timer in ns (CLOCK_MONOTONIC), after a short sleep:
 * a spinning kernel polls it without holding a host core. */
unsigned long long cudaemu_globaltimer(void);
}

#define __syncthreads() cudaemu_syncthreads(__FILE__, __LINE__)

template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "a register-sized value");
    (void)width;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cudaemu_shfl_xor_bits(mask, bits, lane_mask);
    memcpy(&v, &bits, sizeof v);
    return v;
}

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
    cudaemu_launch_raw(name, grid, block, shmem, stream, &cudaemu_call<P...>::run, c, &cudaemu_call<P...>::drop);
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
};
#define SR_SHARED(T, name, n)                                                                                          \
    static const char name##_cudaemu_key = 0;                                                                          \
    const cudaemu_sarray<T> name {                                                                                     \
        static_cast<T *>(cudaemu_shared(&name##_cudaemu_key, sizeof(T) * (n))), (size_t)(n), #name                     \
    }

#endif
