/* cuda_probe.c — a one-second probe of two CUDA runtime behaviours the
 * back end is built around (tests/gpu/check.sh's env stage prints its
 * answers into env.txt):
 *
 *   1. Whether cudaEventQuery, answering cudaErrorNotReady while work is
 *      pending, also leaves it as the thread's last error (HIP documents
 *      that it does; CUDA does not say).  sr_cuda_query clears it either
 *      way and SR_LAUNCH clears stale state before every launch; the
 *      answer says which of the two was needed.
 *   2. Whether cudaMemcpyAsync into pageable host memory blocks the host
 *      until the copy is done (so a deadline around it never runs): the
 *      step path downloads through a pinned bounce buffer because of it.
 *
 * Prints "probe: ..." lines; exit 0 when both questions were answered, 69
 * without a GPU, 70 on an unexpected CUDA error. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime.h>

#include "../kernels/sr_cuda.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int bad(const char *what, cudaError_t e) {
    printf("probe: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return 70;
}

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("probe: no GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 69;
    }
    cudaStream_t s;
    cudaEvent_t ev;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
        return bad("cudaStreamCreateWithFlags", e);
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
        return bad("cudaEventCreateWithFlags", e);

    /* 1. NotReady as the last error */
    (void)cudaGetLastError();
    if (sr_k_spin(s, 300LL * 1000 * 1000) != 0) /* 300 ms */
        return bad("the spin kernel", cudaGetLastError());
    if ((e = cudaEventRecord(ev, s)) != cudaSuccess)
        return bad("cudaEventRecord", e);
    cudaError_t q = cudaEventQuery(ev);
    cudaError_t last = cudaPeekAtLastError();
    printf("probe: cudaEventQuery while pending answers %s; the last error after it is %s: NotReady %s as the "
           "last error\n",
           cudaGetErrorName(q), cudaGetErrorName(last),
           q != cudaErrorNotReady      ? "was not observed (the kernel ended first)"
           : last == cudaErrorNotReady ? "IS left"
                                       : "is not left");
    (void)cudaGetLastError();
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
        return bad("cudaStreamSynchronize", e);

    /* 2. an async copy into pageable memory behind a 300 ms kernel */
    size_t n = 1 << 20;
    void *d = NULL, *h = malloc(n);
    if (!h)
        return 70;
    if ((e = cudaMalloc(&d, n)) != cudaSuccess)
        return bad("cudaMalloc", e);
    if (sr_k_spin(s, 300LL * 1000 * 1000) != 0)
        return bad("the spin kernel", cudaGetLastError());
    double t0 = now_ms();
    if ((e = cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s)) != cudaSuccess)
        return bad("cudaMemcpyAsync", e);
    double took = now_ms() - t0;
    printf("probe: cudaMemcpyAsync of 1 MiB into pageable memory behind a 300 ms kernel returned after %.0f ms: "
           "it %s\n",
           took, took >= 200.0 ? "BLOCKS until the copy is done" : "returns at once");
    cudaStreamSynchronize(s);
    cudaFree(d);
    free(h);
    return 0;
}
