/* cudaemu.h — the emulated CUDA runtime's own interface: what the emulated
 * cuBLASLt (cublaslt.c) and the kernel grid (a later part) need from the
 * runtime, and its configuration.
 *
 * The emulator implements the CUDA runtime entry points shardrun uses with
 * the toolkit's own declarations (cuda_runtime_api.h), so host code
 * compiles unchanged and links this library instead of libcudart.  It is
 * a test tool: never installed.  What it models and what it does not is in
 * tests/cudaemu/README.
 *
 * Configuration (environment, read at the first call):
 *   CUDAEMU_DEVICES=N        devices (default 1, at most 16)
 *   CUDAEMU_MEM_MB=N         memory per device in MiB (default 1024)
 *   CUDAEMU_NAME=TEXT        the devices' name (default "NVIDIA H100 80GB HBM3")
 *   CUDAEMU_NOTREADY_ERROR=0 a cudaErrorNotReady answer (cudaEventQuery,
 *                            cudaStreamQuery) is not recorded as the
 *                            thread's last error (default 1: recorded) */
#ifndef CUDAEMU_H
#define CUDAEMU_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Work for a stream's worker: fn(arg) runs in stream order, after all work
 * enqueued on `stream` before it (and any event it waits for), on the
 * stream's own thread; `free_arg` (may be NULL) frees arg afterwards.
 * stream 0 is the legacy default stream (it waits for every stream of the
 * device first).  Returns cudaSuccess or the error (recorded as the last
 * error; nothing was enqueued and arg is still the caller's). */
cudaError_t cudaemu_enqueue(cudaStream_t stream, void (*fn)(void *), void *arg, void (*free_arg)(void *));

/* Sets whether a cudaErrorNotReady answer is recorded as the thread's last
 * error (what a real GPU does is what the first-contact probe finds out;
 * the default is 1, the documented "may also return error codes from
 * previous, asynchronous launches" read strictly).  Returns the old value. */
int cudaemu_set_notready_error(int on);

/* Records e as the calling thread's last error (what a failing call does:
 * cudaErrorNotReady only while that switch is on); returns e. */
cudaError_t cudaemu_fail(cudaError_t e);

/* Whether [p, p + bytes) lies in device memory of the calling thread's
 * device (kernel arguments are checked against it). */
int cudaemu_is_device(const void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
