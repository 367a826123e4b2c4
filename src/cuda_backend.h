/* cuda_backend.h — what the CUDA back end's host files share (device_cuda.c,
 * ops_cuda.c) and what the tests reach: the per-thread execution context,
 * the error mapping and the one documented synchronisation helper.  Only
 * built with SR_HAVE_CUDA. */
#ifndef SR_CUDA_BACKEND_H
#define SR_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "device.h"
#include "gemm_cuda.h"
#include "ops.h"
#include "status.h"

/* The execution context of the CUDA ops on one thread (ops.h): the GPU,
 * the compute stream, the GEMM plan cache and the ops' workspace. */
typedef struct {
    int ordinal;
    cudaStream_t stream;
    sr_gemm_cache *gemm;
    void *ws;
    size_t ws_bytes;
    size_t sort_bytes; /* the encoder sort's share of ws (CUB's answer) */
    bool sync_each;    /* SHARDRUN_CUDA_SYNC=1: synchronise after every op */
    const char *bus;   /* PCI bus id, for hardware-class errors */
    /* The host's heartbeat (sr_cuda_beat): when the thread last returned
     * to shardrun from the driver, and from what. */
    uint64_t beat_ns;
    const char *beat_op;
    bool dry;                  /* the table is dry (sr_dev_cuda_open_dry): launches counted, never issued */
    struct sr_cuda_prof *prof; /* SHARDRUN_CUDA_PROFILE's timing events (launch_cuda.c), or NULL */
} sr_cuda_ctx;

/* The per-op profile (launch_cuda.c): a pool of `pairs` timing-event
 * pairs for ctx, created at set-up (SR_ERR_INTERNAL or the CUDA error);
 * switched on and off; while on, every operation of the thread between
 * prof_begin and prof_end on stream s is timed to ledger row `row`
 * (ledger.h).  collect waits for the device, adds each timed operation's
 * milliseconds to its row and family of `l` and frees the pairs;
 * *untimed: the operations the pool had no pair for; *busy_ms: the union
 * of their spans since the profile was switched on (the device's busy
 * time: streams overlap). */
typedef struct sr_cuda_prof sr_cuda_prof;
sr_status sr_cuda_prof_open(sr_cuda_ctx *c, int pairs);
void sr_cuda_prof_close(sr_cuda_ctx *c);
void sr_cuda_prof_switch(sr_cuda_ctx *c, bool on);
void sr_cuda_prof_begin(sr_cuda_ctx *c, cudaStream_t s, int row);
void sr_cuda_prof_end(sr_cuda_ctx *c, cudaStream_t s);
sr_status sr_cuda_prof_collect(sr_cuda_ctx *c, struct sr_ledger *l, long long *untimed, double *busy_ms);

/* The host's heartbeat for the table's watchdog (device.h, watch): the
 * calling thread is in shardrun's code, not inside the driver, after `op`
 * (NULL: keeps the last name).  Every op and primitive beats at its start
 * and end. */
void sr_cuda_beat(sr_cuda_ctx *c, const char *op);

/* Binds ctx to the calling thread: cudaSetDevice(ctx->ordinal) and the ops
 * use it from now on.  Every thread that calls CUDA binds first. */
void sr_cuda_bind(sr_cuda_ctx *ctx);
sr_cuda_ctx *sr_cuda_bound(void);
/* The bound context of a cuda table (for threads that bind it). */
sr_cuda_ctx *sr_dev_cuda_ctx(sr_dev *d);

/* The cuda table on GPU `ordinal` (already picked); `physical` is the
 * CUDA_VISIBLE_DEVICES entry for the start line.  SR_ERR_CONFIG or
 * SR_ERR_INTERNAL with a message on failure. */
sr_status sr_dev_cuda_open(sr_dev **out, int ordinal, const char *physical);
/* The cuda table opened dry (device.h `dry`): no GPU, no CUDA call;
 * launches, GEMMs, copies and memsets are counted in the ledger bound to
 * the thread and never issued.  The calling thread is bound to it.
 * SR_ERR_INTERNAL when out of memory. */
sr_status sr_dev_cuda_open_dry(sr_dev **out);
void sr_dev_cuda_close(sr_dev *d);

/* The CUDA stream behind stream s of a cuda table. */
cudaStream_t sr_dev_cuda_stream(sr_dev *d, sr_stream s);

/* The CUDA ops computing in f32 (exact mode) or bf16, materialized
 * attention; and bf16 with flash attention (kernels/flash.cu). */
extern const sr_ops sr_ops_cuda_f32, sr_ops_cuda_bf16, sr_ops_cuda_bf16_flash;

/* The cuBLASLt key of a row-major GEMM: D[M,N] (ld ldd, batch stride sD) =
 * op(A)[M,K] (ld lda, sA) op(B)[K,N] (ld ldb, sB), ta/tb 1 = transposed.
 * Column-major, that is D^T = op(B)^T op(A)^T: the key's A operand is
 * the row-major B and its B operand the row-major A (pass them swapped to
 * sr_gemm_run).  Alignments are left 0 for the caller. */
sr_gemm_key sr_cuda_rm_key(int ta, int tb, int M, int N, int K, long long lda, long long sA, long long ldb,
                           long long sB, long long ldd, long long sD, int batch, bool bf16, bool accumulate,
                           bool d_f32);

/* The status of a CUDA error: SR_ERR_PEER (69) for hardware-class errors
 * (uncorrectable ECC, NVLink, contained errors, a device lost or
 * unavailable: the node is at fault, a requeue elsewhere helps), else
 * SR_ERR_INTERNAL (70). */
sr_status sr_cuda_status(cudaError_t e);
/* Records the error of `what` (op, shapes) on this rank with its status
 * and a hint; returns the status, or, for a sticky error, ends the
 * process. */
sr_status sr_cuda_fail(cudaError_t e, const char *bus, const char *what);

/* Whether `e` is sticky: the context is unusable (an illegal address, a
 * launch failure, uncorrectable ECC, an unknown error, ...) and every later
 * call answers it.  sr_cuda_fail ends the process on one: the message
 * first, then _exit with the status, calling no cudaFree, cudaFreeHost,
 * destroy or ncclCommFinalize (each can wait for a hung kernel forever). */
bool sr_cuda_sticky(cudaError_t e);
/* cudaEventQuery(e), with the cudaErrorNotReady it may leave as the
 * thread's last error cleared: the one query site of the back end
 * (tests/cuda_static.sh rejects cudaEventQuery and cudaStreamQuery
 * anywhere else). */
cudaError_t sr_cuda_query(cudaEvent_t e);
/* The host wait's pause after a poll that found the event not done, in
 * microseconds, for a wait `waited_ns` long: 0 (spin) for the first
 * SR_CUDA_SPIN_NS, then SR_CUDA_SLEEP_US (a step's tail is a few hundred
 * microseconds: a millisecond's sleep left the GPU idle that long). */
#define SR_CUDA_SPIN_NS 1000000ull
#define SR_CUDA_SLEEP_US 50u
unsigned sr_cuda_poll_pause_us(uint64_t waited_ns);
/* The one synchronous helper of the step path (tests/cuda_static.sh allows
 * synchronous CUDA calls nowhere else): waits for `stream` to drain and
 * returns the synchronisation's own status (never a stale last-error).
 * Used by SHARDRUN_CUDA_SYNC=1 after each op. */
cudaError_t sr_cuda_sync_stream(cudaStream_t stream);

#endif
