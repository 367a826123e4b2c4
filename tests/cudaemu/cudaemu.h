/* cudaemu.h — the emulated CUDA runtime's own interface: what the emulated
 * cuBLASLt (cublaslt.c), NCCL (nccl.c) and the kernel grid need from the
 * runtime, and its configuration.
 *
 * The emulator implements the CUDA runtime entry points shardrun uses with
 * the toolkit's own declarations (cuda_runtime_api.h), so host code
 * compiles unchanged and links this library instead of libcudart.  It is
 * a test tool: never installed.  What it models and what it does not is in
 * tests/cudaemu/README.
 *
 * Configuration (environment, read at the first call):
 *   CUDAEMU_DEVICES=N        devices (default 8, a node's worth, so that one rank
 *                            per GPU under mpirun just works; at most 16); CUDA_VISIBLE_DEVICES
 *                            selects among them by ordinal, each keeping its
 *                            bus id
 *   CUDAEMU_MEM_MB=N         memory per device in MiB (default 1024)
 *   CUDAEMU_NAME=TEXT        the devices' name (default "NVIDIA H100 80GB HBM3")
 *   CUDAEMU_NOTREADY_ERROR=0 a cudaErrorNotReady answer (cudaEventQuery,
 *                            cudaStreamQuery) is not recorded as the
 *                            thread's last error (default 1: recorded)
 *   CUDAEMU_DELAY_SEED=N     a random delay of 0..CUDAEMU_DELAY_MAX_US (200)
 *                            microseconds before every stream operation,
 *                            each stream's sequence seeded from N (0: off):
 *                            other interleavings of the streams, repeatable
 *   CUDAEMU_MUTATE=KIND[:KERNEL[:ARG]]
 *                            a mutation the emulator applies, for the
 *                            mutation suite (tests/mutants.sh; a warning
 *                            says so): drop_sync:K:N (the N-th __syncthreads
 *                            each thread of kernel K reaches is skipped),
 *                            narrow_mask:K (K's shuffles use mask
 *                            0x0000ffff), grid_minus_one:K (K's grid one
 *                            block smaller in x), shift_out:K:I (K's pointer
 *                            argument I one element further on), lda (every
 *                            cuBLASLt product reads A with its leading
 *                            dimension plus one), launch_keeps_error
 *                            (SR_LAUNCH does not clear the last error first),
 *                            frag_off_by_one:K (K's mma.sync reads lane l's A
 *                            fragment from lane l + 1), drop_trans:K (K's
 *                            ldmatrix ignores .trans), skip_wait:K (K's
 *                            cp.async waits land nothing), src:NAME (the
 *                            planted bug a kernel's source names with
 *                            SR_MUTANT(NAME): kernels/common.cuh)
 *
 * The emulated NCCL (nccl.c) has its own knobs: CUDAEMU_NCCL_ASYNC_ERROR,
 * CUDAEMU_NCCL_INIT_HANG, CUDAEMU_NCCL_CALLS (its header comment).
 *
 * Misuse is reported ("cudaemu: error: ...", naming the call, kernel,
 * block, thread or stream and the calling site) and the process aborts:
 * see the detectors in tests/cudaemu/README. */
#ifndef CUDAEMU_H
#define CUDAEMU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
 * device. */
int cudaemu_is_device(const void *p, size_t bytes);

/* Where the bytes of [p, p + bytes) are, for code that runs as the device
 * (cuBLASLt, CUB, the runtime): device memory is handed out at tagged
 * addresses the host faults on (runtime.c), this is the untagged one;
 * host pointers come back unchanged.  A device pointer that no live
 * allocation holds (freed, or never allocated) or a range past its
 * allocation's end is reported, naming `what`, and the process aborts. */
void *cudaemu_device_view(const void *p, size_t bytes, const char *what);

/* A kernel's pointer argument `index` at its launch: translated like
 * cudaemu_device_view (its start checked), and pageable host memory is
 * reported (a kernel reaches device, pinned and registered memory only). */
void *cudaemu_kernel_arg(const char *kernel, int index, const void *p);

/* A device allocation a kernel had as argument `arg` (-1: none): its
 * bytes, size and end (guard included).  cudaemu_kernel_arg records one per
 * device argument; cudaemu_take_guards moves the launch's to `out` (at
 * most max, the count returned); cudaemu_check_guards reports a write past
 * an allocation's size (outside AddressSanitizer, which reports it at the
 * access), naming `what`. */
typedef struct {
    const char *real;
    size_t n, end;
    int arg;
} cudaemu_guard;
int cudaemu_take_guards(cudaemu_guard *out, int max);
void cudaemu_check_guards(const char *what, const cudaemu_guard *g, int n);

/* The symbol of a code address ("func+0x12 in binary"), best effort: the
 * calling site a report names. */
void cudaemu_describe_site(const void *pc, char *buf, size_t n);

/* Reports misuse found by the emulator ("cudaemu: error: ...") and aborts. */
cudaError_t cudaemu_report(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* CUDAEMU_LAZY_LOADING=1: the first launch of each kernel (by name) waits,
 * on the launching thread, for every stream of its device to drain, as
 * the driver does when CUDA's lazy module loading loads the kernel's
 * module; a kernel hung earlier then keeps the host inside the "driver"
 * (tests/cudaemu.sh: the host watchdog of device.h must end the run).
 * Off by default: nothing waits. */
void cudaemu_lazy_load(const char *kernel);

/* A kernel's cudaFuncAttributeMaxDynamicSharedMemorySize (cudaFuncSetAttribute;
 * 48 KiB when never set): the launch's check (grid.cc). */
size_t cudaemu_func_max_dynamic_shared(const void *func);

/* CUDAEMU_OPS=FILE: the emulator counts the GPU operations it is asked
 * for — kernel launches (a library call such as CUB's sort: one),
 * cuBLASLt matmuls, memsets and copies of more than 0 bytes — and each
 * process appends "pid P: kernels=K matmuls=M memsets=S copies=C" to FILE
 * at exit (tests/ledger.sh checks the ledger against these counts).
 * cudaemu_count adds one of kind k. */
enum { CUDAEMU_OP_KERNEL, CUDAEMU_OP_MATMUL, CUDAEMU_OP_MEMSET, CUDAEMU_OP_COPY, CUDAEMU_NOPS };
void cudaemu_count(int k);

/* The mutation CUDAEMU_MUTATE names for `kernel` (NULL: any; a template
 * kernel "k<T>" is named "k"): its kind ("" when none applies) and *arg
 * its number. */
const char *cudaemu_mutation(const char *kernel, int *arg);

/* f32 <-> bf16 as the emulated device computes them (cuBLASLt's output,
 * NCCL's reductions): widening is exact; narrowing rounds to nearest even,
 * a NaN stays a NaN. */
static inline float cudaemu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t cudaemu_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#ifdef __cplusplus
}
#endif

#endif
