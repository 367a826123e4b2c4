/* test_cudaemu.c — the emulated CUDA runtime (tests/cudaemu) against the
 * runtime API's documented behaviour: devices and their properties,
 * cudaSetDevice per thread, allocation and out-of-memory at the configured
 * size, streams that run asynchronously and in order, ordered across
 * streams only by events (and the legacy default stream), events (query,
 * synchronize, elapsed time), the per-thread last error and the NotReady
 * switch, pageable copies that return when done, cudaFree synchronising
 * the device, pointer attributes. */
#include "srconfig.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "cudaemu.h"
#include "tap.h"

static atomic_int flag;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* a slow operation: sleeps, then sets flag to its argument's value */
static void slow_set(void *arg) {
    sleep_ms(60);
    atomic_store(&flag, (int)(intptr_t)arg);
}

/* waits until the test opens the gate, then sets flag */
static atomic_int gate;
static void gated_set(void *arg) {
    while (!atomic_load(&gate))
        sleep_ms(1);
    atomic_store(&flag, (int)(intptr_t)arg);
}

/* records the flag it saw when it ran */
static int seen;
static void look(void *arg) {
    (void)arg;
    seen = atomic_load(&flag);
}

static void *other_thread(void *arg) {
    int *d = arg;
    cudaSetDevice(1);
    cudaGetDevice(d);
    return NULL;
}

int main(void) {
    setenv("CUDAEMU_DEVICES", "2", 1);
    setenv("CUDAEMU_MEM_MB", "64", 1);
    setenv("CUDAEMU_NAME", "NVIDIA H200 (emulated)", 1);

    /* devices */
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    tap_ok(rc == cudaSuccess && n == 2, "two devices as configured (%d)", n);
    struct cudaDeviceProp p;
    tap_ok(cudaGetDeviceProperties(&p, 1) == cudaSuccess && strcmp(p.name, "NVIDIA H200 (emulated)") == 0 &&
               p.major == 9 && p.minor == 0 && p.totalGlobalMem == (size_t)64 << 20,
           "properties: the configured name, sm_90, the memory size");
    char b0[32], b1[32];
    tap_ok(cudaDeviceGetPCIBusId(b0, sizeof b0, 0) == cudaSuccess && cudaDeviceGetPCIBusId(b1, sizeof b1, 1) == 0 &&
               strcmp(b0, b1) != 0,
           "each device has its own PCI bus id (%s, %s)", b0, b1);
    tap_ok(cudaSetDevice(5) == cudaErrorInvalidDevice, "cudaSetDevice(5): cudaErrorInvalidDevice");
    tap_ok(cudaPeekAtLastError() == cudaErrorInvalidDevice, "  ...kept by cudaPeekAtLastError");
    tap_ok(cudaGetLastError() == cudaErrorInvalidDevice && cudaGetLastError() == cudaSuccess,
           "  ...returned and cleared by cudaGetLastError");
    int there = -1, here = -1;
    pthread_t th;
    pthread_create(&th, NULL, other_thread, &there);
    pthread_join(th, NULL);
    cudaGetDevice(&here);
    tap_ok(there == 1 && here == 0, "cudaSetDevice is per thread (there %d, here %d)", there, here);

    /* memory */
    void *a = NULL, *b = NULL;
    size_t fr = 0, tot = 0;
    tap_ok(cudaMalloc(&a, 32 << 20) == cudaSuccess && cudaemu_is_device(a, 32 << 20), "cudaMalloc 32 MiB");
    tap_ok(cudaMemGetInfo(&fr, &tot) == cudaSuccess && tot == (size_t)64 << 20 && fr == (size_t)32 << 20,
           "cudaMemGetInfo: 32 of 64 MiB free");
    tap_ok(cudaMalloc(&b, 40 << 20) == cudaErrorMemoryAllocation && b == NULL,
           "40 MiB more: cudaErrorMemoryAllocation at the configured size");
    cudaGetLastError();
    float *pinned = NULL, *pageable = malloc(1024 * sizeof(float));
    tap_ok(cudaMallocHost((void **)&pinned, 1024 * sizeof(float)) == cudaSuccess, "cudaMallocHost");
    struct cudaPointerAttributes at;
    int kinds_ok = cudaPointerGetAttributes(&at, a) == cudaSuccess && at.type == cudaMemoryTypeDevice;
    kinds_ok = kinds_ok && cudaPointerGetAttributes(&at, pinned) == cudaSuccess && at.type == cudaMemoryTypeHost;
    kinds_ok =
        kinds_ok && cudaPointerGetAttributes(&at, pageable) == cudaSuccess && at.type == cudaMemoryTypeUnregistered;
    tap_ok(kinds_ok, "cudaPointerGetAttributes: device, pinned host, unregistered");

    /* asynchrony and order within a stream */
    cudaStream_t s1, s2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, -1);
    for (int i = 0; i < 1024; i++)
        pinned[i] = (float)i;
    atomic_store(&flag, 0);
    atomic_store(&gate, 0);
    cudaemu_enqueue(s1, gated_set, (void *)(intptr_t)1, NULL);
    cudaMemcpyAsync(a, pinned, 1024 * sizeof(float), cudaMemcpyHostToDevice, s1);
    cudaMemsetAsync(pinned, 0, 16, s1); /* not device memory: refused */
    tap_ok(cudaGetLastError() == cudaErrorInvalidValue, "cudaMemsetAsync on host memory: cudaErrorInvalidValue");
    tap_ok(atomic_load(&flag) == 0 && cudaStreamQuery(s1) == cudaErrorNotReady,
           "a pinned copy returns at once, the stream's work still pending");
    cudaGetLastError();
    /* across streams: only events order (s1 is held at its gate) */
    cudaemu_enqueue(s2, look, NULL, NULL);
    cudaStreamSynchronize(s2);
    tap_ok(seen == 0, "another stream's work does not wait for this one's");
    atomic_store(&gate, 1);
    cudaStreamSynchronize(s1);
    tap_ok(atomic_load(&flag) == 1 && memcmp(a, pinned, 1024 * sizeof(float)) == 0,
           "cudaStreamSynchronize returns after the stream's work, in order");

    /* an event orders them */
    cudaEvent_t e, t0, t1, nt;
    cudaEventCreate(&e);
    atomic_store(&flag, 0);
    atomic_store(&gate, 0);
    cudaemu_enqueue(s1, gated_set, (void *)(intptr_t)2, NULL);
    cudaEventRecord(e, s1);
    tap_ok(cudaEventQuery(e) == cudaErrorNotReady, "cudaEventQuery before the work ran: cudaErrorNotReady");
    tap_ok(cudaGetLastError() == cudaErrorNotReady, "  ...recorded as the last error (the switch's default)");
    int old = cudaemu_set_notready_error(0);
    tap_ok(cudaEventQuery(e) == cudaErrorNotReady && cudaPeekAtLastError() == cudaSuccess,
           "  ...not recorded with the switch off");
    cudaemu_set_notready_error(old);
    cudaStreamWaitEvent(s2, e, 0);
    cudaemu_enqueue(s2, look, NULL, NULL);
    atomic_store(&gate, 1);
    cudaStreamSynchronize(s2);
    tap_ok(seen == 2, "cudaStreamWaitEvent orders the other stream after the event (saw %d)", seen);
    tap_ok(cudaEventQuery(e) == cudaSuccess, "cudaEventQuery after: cudaSuccess");

    /* timing */
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventCreateWithFlags(&nt, cudaEventDisableTiming);
    cudaEventRecord(t0, s1);
    cudaemu_enqueue(s1, slow_set, (void *)(intptr_t)3, NULL);
    cudaEventRecord(t1, s1);
    cudaEventRecord(nt, s1);
    float ms = 0;
    tap_ok(cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady, "elapsed time before the end event: NotReady");
    cudaGetLastError();
    cudaEventSynchronize(t1);
    rc = cudaEventElapsedTime(&ms, t0, t1);
    tap_ok(rc == cudaSuccess && ms >= 59.0f, "elapsed time around a 60 ms operation: at least 60 ms (%.1f ms)",
           (double)ms);
    tap_ok(cudaEventElapsedTime(&ms, t0, nt) == cudaErrorInvalidResourceHandle,
           "an event without timing: cudaErrorInvalidResourceHandle");
    cudaGetLastError();

    /* pageable copies return when done; cudaFree synchronises */
    atomic_store(&flag, 0);
    cudaemu_enqueue(s1, slow_set, (void *)(intptr_t)4, NULL);
    memset(pageable, 0, 1024 * sizeof(float));
    cudaMemcpyAsync(pageable, a, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s1);
    tap_ok(atomic_load(&flag) == 4 && pageable[1023] == 1023.0f,
           "a copy to pageable memory returns only when done (and after the stream's earlier work)");
    atomic_store(&flag, 0);
    cudaemu_enqueue(s2, slow_set, (void *)(intptr_t)5, NULL);
    void *c = NULL;
    cudaMalloc(&c, 256);
    cudaFree(c);
    tap_ok(atomic_load(&flag) == 5, "cudaFree waits for the device's work");
    tap_ok(cudaFree(pageable) == cudaErrorInvalidDevicePointer, "cudaFree of host memory: InvalidDevicePointer");
    cudaGetLastError();

    /* the legacy default stream waits for blocking streams */
    cudaStream_t s3;
    cudaStreamCreate(&s3);
    atomic_store(&flag, 0);
    cudaemu_enqueue(s3, slow_set, (void *)(intptr_t)6, NULL);
    cudaemu_enqueue(0, look, NULL, NULL);
    cudaStreamSynchronize(0);
    tap_ok(seen == 6, "work on the legacy default stream waits for a blocking stream's (saw %d)", seen);

    cudaEventDestroy(e);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaEventDestroy(nt);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaStreamDestroy(s3);
    cudaFreeHost(pinned);
    cudaFree(a);
    tap_ok(cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr == tot, "everything freed: all memory free again");
    free(pageable);
    return tap_done();
}
