/* misuse.cu — one planted mistake per case, for tests/cudaemu_misuse.sh: the
 * emulator's detectors (tests/cudaemu/README) must report each, naming the
 * kernel, block and thread (or the call and its site), and the process must
 * end there; the clean cases must run silently.  Built only in an emulator
 * tree: on a GPU several cases hang or fault.  The nccl_ cases (a tree with
 * the emulated NCCL) break NCCL's buffer rules, the ranks as threads of
 * this process, each on its own emulated GPU.
 *
 * usage: misuse CASE   (misuse list: the cases) */
#include "srconfig.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "../../kernels/mma.cuh"
#ifdef SR_HAVE_NCCL
#include <nccl.h>
#include <pthread.h>
#endif

/* thread 5 leaves before the barrier the others wait at */
__global__ void barrier_exit_k(float *out) {
    if (threadIdx.x == 5)
        return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

/* the lower half waits at one __syncthreads, the upper at another */
__global__ void barrier_divergent_k(float *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
        out[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2.0f;
    }
}

/* thread 0 writes sh[0], every other thread reads it: a barrier is missing
 * between them (sync: with it, the correct kernel) */
__global__ void shared_k(float *out, int sync) {
    SR_SHARED(float, sh, 32);
    if (threadIdx.x == 0)
        sh[0] = 3.0f;
    if (sync)
        __syncthreads();
    out[threadIdx.x] = sh[0];
}

/* a shuffle: `mask`, `lane_mask`, and only threads below `active` take part */
__global__ void shfl_k(float *out, unsigned mask, int lane_mask, int active) {
    if ((int)threadIdx.x >= active)
        return;
    out[threadIdx.x] = sr_shfl_xor(mask, (float)threadIdx.x, lane_mask);
}

/* writes out[0..n] (one past the end of n elements) */
__global__ void past_end_k(float *out, int n) {
    for (int i = threadIdx.x; i <= n; i += blockDim.x)
        out[i] = 1.0f;
}

/* mma.sync with zero operands; `how`: 0 every lane, 1 lane 5 exits first,
 * 2 the upper half executes an ldmatrix instead */
__global__ void mma_k(float *out, int how) {
    SR_SHARED(uint16_t, sh, 8 * 8);
    int l = threadIdx.x;
    sh[l] = 0, sh[l + 32] = 0;
    __syncthreads();
    if (how == 1 && l == 5)
        return;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {1, 2, 3, 4}, d[4];
    if (how == 2 && l >= 16) {
        uint32_t r[1];
        sr_ldmatrix<1, false>(r, SR_SHPTR(sh, (l % 8) * 8));
        d[0] = (float)r[0];
    } else
        sr_mma_m16n8k16_bf16(d, a, b, c);
    out[l] = d[0];
}

/* ldmatrix.x1 with lane 3's row address moved by `skew` bytes (2: not
 * 16-byte aligned), or every lane's a global address (skew < 0) */
__global__ void ldmatrix_k(float *out, int skew) {
    SR_SHARED(uint16_t, sh, 16 * 8);
    int l = threadIdx.x;
    for (int i = l; i < 16 * 8; i += 32)
        sh[i] = (uint16_t)i;
    __syncthreads();
    const char *row = (const char *)SR_SHPTR(sh, (l % 8) * 8);
    if (l == 3 && skew > 0)
        row += skew;
    if (skew < 0)
        row = (const char *)out;
    uint32_t r[1];
    sr_ldmatrix<1, false>(r, row);
    out[l] = (float)r[0];
}

/* cp.async into dynamic shared memory: `how` 0 waits and reads (correct),
 * 1 reads before the wait, 2 never waits, 3 copies from a misaligned
 * source, 4 reads one element past the dynamic array */
__global__ void cp_async_k(const float *src, float *out, int how) {
    SR_SHARED_DYN(float, sh);
    int l = threadIdx.x;
    sr_cp_async_ca<16>(SR_SHPTR(sh, 4 * l), src + 4 * l + (how == 3 ? 1 : 0));
    sr_cp_async_commit();
    if (how == 1)
        out[l] = sh[4 * l];
    if (how == 2)
        return;
    sr_cp_async_wait<0>();
    out[l] = sh[4 * l + (how == 4 && l == 31 ? 4 : 0)];
}

/* __ballot_sync over the full mask with lane 7 gone (how 1), or all there */
__global__ void ballot_k(float *out, int how) {
    int l = threadIdx.x;
    if (how == 1 && l == 7)
        return;
    out[l] = (float)sr_ballot(0xffffffffu, l & 1);
}

static void launch_failed(int e) {
    if (e) {
        fprintf(stderr, "misuse: launch failed: %s\n", cudaGetErrorString((cudaError_t)e));
        exit(1);
    }
}

#ifdef SR_HAVE_NCCL
/* One rank of an n-rank communicator: an in-place all-gather of `count`
 * floats (sendbuff == recvbuff + rank * count, NCCL's rule). */
struct nccl_rank {
    ncclUniqueId id;
    int rank, n;
    size_t count;
};
static void *nccl_rank_main(void *arg) {
    nccl_rank *r = (nccl_rank *)arg;
    cudaSetDevice(r->rank);
    ncclComm_t c;
    float *buf = nullptr;
    cudaMalloc((void **)&buf, 16 * sizeof(float));
    if (ncclCommInitRankConfig(&c, r->n, r->id, r->rank, nullptr) != ncclSuccess ||
        ncclAllGather(buf + r->rank * r->count, buf, r->count, ncclFloat32, c, 0) != ncclSuccess) {
        fprintf(stderr, "misuse: an NCCL call failed: %s\n", ncclGetLastError(nullptr));
        exit(1);
    }
    cudaDeviceSynchronize();
    ncclCommDestroy(c);
    cudaFree(buf);
    return nullptr;
}
/* two ranks, rank 1 gathering count1 elements (rank 0: 4) */
static void nccl_two_ranks(size_t count1) {
    nccl_rank r[2];
    ncclGetUniqueId(&r[0].id);
    r[1].id = r[0].id;
    r[0].rank = 0, r[1].rank = 1;
    r[0].n = r[1].n = 2;
    r[0].count = 4, r[1].count = count1;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], nullptr, nccl_rank_main, &r[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], nullptr);
}
/* a one-rank communicator on device 0 */
static ncclComm_t nccl_one_rank(void) {
    ncclUniqueId id;
    ncclComm_t c;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRankConfig(&c, 1, id, 0, nullptr) != ncclSuccess) {
        fprintf(stderr, "misuse: NCCL init failed: %s\n", ncclGetLastError(nullptr));
        exit(1);
    }
    return c;
}
#define NCCL_CASES(X) X(nccl_clean) X(nccl_overlap) X(nccl_host_buffer) X(nccl_mismatch)
#else
#define NCCL_CASES(X)
#endif

#define CASES(X)                                                                                                       \
    X(clean)                                                                                                           \
    X(barrier_exit) X(barrier_divergent) X(shared_race) X(shfl_mask_omits) X(shfl_outside) X(shfl_inactive)            \
        X(past_end) X(host_reads_device) X(kernel_pageable) X(use_after_free) X(double_free) X(copy_past_end)          \
            X(event_unrecorded) X(mma_lane_exit) X(mma_partial_warp) X(mma_divergent) X(ldmatrix_misaligned)       \
                X(ldmatrix_outside) X(cp_async_early_read) X(cp_async_no_wait) X(cp_async_misaligned)             \
                    X(dynamic_past_end) X(ballot_lane_exit) X(dynamic_shared_limits) NCCL_CASES(X)

int main(int argc, char **argv) {
    const char *c = argc == 2 ? argv[1] : "";
    if (strcmp(c, "list") == 0) {
#define NAME(n) puts(#n);
        CASES(NAME)
        return 0;
    }
    setenv("CUDAEMU_DEVICES", "2", 0); /* (the nccl_ cases' second rank) */
    float *d = nullptr, host[64] = {0}, *src = nullptr;
    cudaMalloc((void **)&d, 32 * sizeof(float));
    cudaMalloc((void **)&src, 160 * sizeof(float));
    cudaStream_t s = 0;
    if (strcmp(c, "clean") == 0) {
        /* the correct forms of the cases below */
        launch_failed(SR_LAUNCH_RAW(shared_k, 1, 32, 0, s, d, 1));
        launch_failed(SR_LAUNCH_RAW(shfl_k, 1, 32, 0, s, d, 0xffffffffu, 16, 32));
        launch_failed(SR_LAUNCH_RAW(shfl_k, 1, 32, 0, s, d, 0x0000ffffu, 8, 16));
        launch_failed(SR_LAUNCH_RAW(past_end_k, 1, 32, 0, s, d, 31));
        launch_failed(SR_LAUNCH_RAW(mma_k, 1, 32, 0, s, d, 0));
        launch_failed(SR_LAUNCH_RAW(ldmatrix_k, 1, 32, 0, s, d, 0));
        launch_failed(SR_LAUNCH_RAW(cp_async_k, 1, 32, 128 * sizeof(float), s, src, d, 0));
        launch_failed(SR_LAUNCH_RAW(ballot_k, 1, 32, 0, s, d, 0));
        cudaEvent_t e;
        cudaEventCreate(&e);
        cudaEventRecord(e, s);
        cudaStreamWaitEvent(s, e, 0);
        cudaMemcpy(host, d, 32 * sizeof(float), cudaMemcpyDeviceToHost);
        cudaEventDestroy(e);
        cudaFree(d);
        printf("clean: every correct form ran; out[0] = %g\n", (double)host[0]);
        return 0;
    } else if (strcmp(c, "barrier_exit") == 0) {
        launch_failed(SR_LAUNCH_RAW(barrier_exit_k, 1, 32, 0, s, d));
    } else if (strcmp(c, "barrier_divergent") == 0) {
        launch_failed(SR_LAUNCH_RAW(barrier_divergent_k, 1, 32, 0, s, d));
    } else if (strcmp(c, "shared_race") == 0) {
        launch_failed(SR_LAUNCH_RAW(shared_k, 1, 32, 0, s, d, 0));
    } else if (strcmp(c, "shfl_mask_omits") == 0) {
        launch_failed(SR_LAUNCH_RAW(shfl_k, 1, 32, 0, s, d, 0x0000ffffu, 1, 32));
    } else if (strcmp(c, "shfl_outside") == 0) {
        launch_failed(SR_LAUNCH_RAW(shfl_k, 1, 32, 0, s, d, 0x0000ffffu, 16, 16));
    } else if (strcmp(c, "shfl_inactive") == 0) {
        launch_failed(SR_LAUNCH_RAW(shfl_k, 1, 32, 0, s, d, 0xffffffffu, 16, 16));
    } else if (strcmp(c, "past_end") == 0) {
        launch_failed(SR_LAUNCH_RAW(past_end_k, 1, 32, 0, s, d, 32));
    } else if (strcmp(c, "host_reads_device") == 0) {
        volatile float *v = d + 3;
        host[0] = *v;
    } else if (strcmp(c, "kernel_pageable") == 0) {
        launch_failed(SR_LAUNCH_RAW(shared_k, 1, 32, 0, s, host, 1));
    } else if (strcmp(c, "use_after_free") == 0) {
        cudaFree(d);
        cudaMemcpy(host, d, 16, cudaMemcpyDeviceToHost);
    } else if (strcmp(c, "double_free") == 0) {
        cudaFree(d);
        cudaFree(d);
    } else if (strcmp(c, "copy_past_end") == 0) {
        cudaMemcpy(d + 8, host, 32 * sizeof(float), cudaMemcpyHostToDevice);
    } else if (strcmp(c, "mma_lane_exit") == 0) {
        launch_failed(SR_LAUNCH_RAW(mma_k, 1, 32, 0, s, d, 1));
    } else if (strcmp(c, "mma_partial_warp") == 0) {
        launch_failed(SR_LAUNCH_RAW(mma_k, 1, 16, 0, s, d, 0));
    } else if (strcmp(c, "mma_divergent") == 0) {
        launch_failed(SR_LAUNCH_RAW(mma_k, 1, 32, 0, s, d, 2));
    } else if (strcmp(c, "ldmatrix_misaligned") == 0) {
        launch_failed(SR_LAUNCH_RAW(ldmatrix_k, 1, 32, 0, s, d, 2));
    } else if (strcmp(c, "ldmatrix_outside") == 0) {
        launch_failed(SR_LAUNCH_RAW(ldmatrix_k, 1, 32, 0, s, d, -1));
    } else if (strcmp(c, "cp_async_early_read") == 0) {
        launch_failed(SR_LAUNCH_RAW(cp_async_k, 1, 32, 128 * sizeof(float), s, src, d, 1));
    } else if (strcmp(c, "cp_async_no_wait") == 0) {
        launch_failed(SR_LAUNCH_RAW(cp_async_k, 1, 32, 128 * sizeof(float), s, src, d, 2));
    } else if (strcmp(c, "cp_async_misaligned") == 0) {
        launch_failed(SR_LAUNCH_RAW(cp_async_k, 1, 32, 128 * sizeof(float), s, src, d, 3));
    } else if (strcmp(c, "dynamic_past_end") == 0) {
        launch_failed(SR_LAUNCH_RAW(cp_async_k, 1, 32, 128 * sizeof(float), s, src, d, 4));
    } else if (strcmp(c, "ballot_lane_exit") == 0) {
        launch_failed(SR_LAUNCH_RAW(ballot_k, 1, 32, 0, s, d, 1));
    } else if (strcmp(c, "dynamic_shared_limits") == 0) {
        /* above 48 KiB of dynamic shared memory only with the kernel's
         * attribute, and never above 227 KiB (the runtime's errors, as on
         * hardware; not reports) */
        int a = SR_LAUNCH_RAW(cp_async_k, 1, 32, 64 * 1024, s, src, d, 0);
        int b = (int)cudaFuncSetAttribute(cp_async_k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
        int c2 = SR_LAUNCH_RAW(cp_async_k, 1, 32, 64 * 1024, s, src, d, 0);
        int e2 = (int)cudaFuncSetAttribute(cp_async_k, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024);
        (void)cudaGetLastError();
        int f = SR_LAUNCH_RAW(cp_async_k, 1, 32, 228 * 1024, s, src, d, 0);
        cudaDeviceSynchronize();
        printf("dynamic_shared_limits: 64 KiB without the attribute: %s; the attribute set: %s; then: %s; an attribute "
               "of 228 KiB: %s; a launch of 228 KiB: %s\n",
               cudaGetErrorName((cudaError_t)a), cudaGetErrorName((cudaError_t)b), cudaGetErrorName((cudaError_t)c2),
               cudaGetErrorName((cudaError_t)e2), cudaGetErrorName((cudaError_t)f));
        return 0;
    } else if (strcmp(c, "event_unrecorded") == 0) {
        cudaEvent_t e;
        cudaEventCreate(&e);
        cudaStreamWaitEvent(s, e, 0);
        cudaDeviceSynchronize();
        cudaEventDestroy(e);
        cudaFree(d);
        return 0; /* a warning, not an error: CUDA makes the wait a no-op */
#ifdef SR_HAVE_NCCL
    } else if (strcmp(c, "nccl_clean") == 0) {
        nccl_two_ranks(4);
        printf("nccl_clean: 2 ranks gathered in place\n");
        return 0;
    } else if (strcmp(c, "nccl_overlap") == 0) {
        /* in place would be d + rank * 4 = d; d + 1 overlaps the result */
        ncclAllGather(d + 1, d, 4, ncclFloat32, nccl_one_rank(), s);
    } else if (strcmp(c, "nccl_host_buffer") == 0) {
        ncclAllGather(host, d, 4, ncclFloat32, nccl_one_rank(), s);
    } else if (strcmp(c, "nccl_mismatch") == 0) {
        nccl_two_ranks(5);
#endif
    } else {
        fprintf(stderr, "usage: misuse CASE (misuse list)\n");
        return 64;
    }
    cudaDeviceSynchronize();
    fprintf(stderr, "misuse: %s: nothing was reported\n", c);
    return 1;
}
