/* device_cuda.c — the cuda device table (device.h) and the GPU's identity.
 *
 * Memory: cudaMalloc for the device space, cudaMallocHost for pinned host
 * memory, the accounted host allocator for the rest, each accounted in
 * mem.c (sr_mem_account_external) by category and space.  Streams: four
 * non-blocking CUDA streams, comm at the highest priority.  Events: a ring
 * of CUDA events; sr_event.impl names the one a record used and
 * sr_event.tick the record's sequence number, so a wait on an event whose
 * ring slot was reused since (a record more than RING records ago, long
 * complete in practice) waits for the later record: more order, never
 * less.  Host waits poll cudaEventQuery (sr_cuda_query, which clears the
 * cudaErrorNotReady it may leave as the thread's last error), spinning
 * for the first millisecond and then sleeping 50 us between polls
 * (sr_cuda_poll_pause_us), up to the deadline (comm.timeout_s), never block inside the
 * driver.  Step-path downloads (sr_dev_download_step) land in a small
 * pinned bounce buffer the table owns, since an async copy into pageable
 * memory returns only when it is done.  Primitives are the kernels of
 * kernels/reduce.cu and kernels/adamw.cu.
 *
 * Errors: a failed CUDA call of a stream-ordered primitive (they return
 * void) is kept as the table's first error and returned by the next wait
 * or sync, so the engine reports it at its one host wait per step.  A
 * sticky error (illegal address, launch failure, ECC, ...) or a host wait
 * past its deadline ends the process at once (fatal): the message
 * first, then _exit with the status, no cudaFree, destroy or NCCL
 * finalize, each of which can wait for a hung kernel forever.
 *
 * Exposed communication (comm_wait_ns): each compute-stream wait on a comm
 * event is bracketed by two timing events; the host wait that ends a step
 * sums the completed pairs' cudaEventElapsedTime.
 *
 * log.trace_steps (trace.h): spans in device time from pairs of timing
 * events (trace_begin/trace_end), turned into host times at the host waits
 * against an anchor event the host waited for once. */
#include "srconfig.h"

#include "cuda_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/sr_cuda.h"
#include "clock.h"
#include "flight.h"
#include "signals.h"
#include "testhook.h"
#include "trace.h"

#define RING 8192
#define DRY_HOST_BYTES (64u << 20)              /* a dry table's host buffers up to this size are real */
#define DRY_BASE ((uintptr_t)0x7a0000000000ull) /* a dry table's first device address */
#define TIMED 256                               /* timing-event pairs in flight */
#define TSPANS 1024                             /* log.trace_steps' device-time spans in flight */

typedef struct {
    void *p;
    size_t bytes;
    sr_mem_space space;
    sr_mem_cat cat;
} allocation;

/* One device-time span of log.trace_steps: its two timing events. */
typedef struct {
    cudaEvent_t a, b;
    int stream, lane;
    bool ended;
    char name[40];
} trace_span;

typedef struct {
    sr_dev base;
    sr_cuda_ctx ctx;
    int ordinal;
    char bus[32];
    cudaStream_t st[SR_NSTREAMS];
    cudaEvent_t ring[RING];
    uint64_t seq;
    double *partial[SR_NSTREAMS]; /* SR_CUDA_REDUCE_BLOCKS doubles per stream */
    cublasLtHandle_t lt;
    void *lt_ws;
    allocation *allocs;
    size_t nallocs, cap;
    cudaError_t first_error;
    char first_what[160];
    const char *last_op;
    long long hang_step; /* SHARDRUN_TEST_GPU_HANG_AT (0: off) */
    /* exposed communication: pairs of timing events around compute-stream
     * waits on comm events, [head, tail) pending */
    cudaEvent_t timed[TIMED][2];
    unsigned timed_head, timed_tail;
    /* log.trace_steps: spans in device time, [head, tail) pending; the
     * anchor is an event whose completion the host saw at anchor_ns */
    trace_span tspan[TSPANS];
    uint64_t ts_head, ts_tail;
    cudaEvent_t anchor;
    int64_t anchor_ns;
    /* the watchdog of the host thread (device.h, watch): the step armed
     * (0: disarmed), its thread */
    long long watch_step;
    pthread_t watch_th;
    bool watching;
    pthread_mutex_t watch_mu;
    pthread_cond_t watch_cv;
    bool watch_stop;
    /* dry (sr_dev_cuda_open_dry): nothing reaches the GPU; device memory
     * is addresses that are never dereferenced, handed out from `fake` */
    bool dry;
    uintptr_t fake;
} cuda_dev;

static cuda_dev *cd(sr_dev *d) { return (cuda_dev *)d; }

/* ------------------------------------------------------------------------ */
/* errors */

sr_status sr_cuda_status(cudaError_t e) {
    switch (e) {
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorSystemNotReady:
        return SR_ERR_PEER;
    default:
        return SR_ERR_INTERNAL;
    }
}

bool sr_cuda_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorPriorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
        return true;
    default:
        return false;
    }
}

/* Never returns: prints the recorded error (sr_error_message) first, then
 * _exit with st's exit status, calling no cudaFree, cudaFreeHost, destroy
 * or ncclCommFinalize (each can wait for a hung kernel forever). */
static _Noreturn void fatal(sr_status st) {
    const char *msg = sr_error_message();
    sr_flight_dump(st == SR_ERR_PEER ? "exit 69" : "exit 70", msg);
    sr_log_error("%s (the GPU may be unusable: exiting without freeing its memory)", msg[0] ? msg : sr_status_str(st));
    fflush(NULL);
    sr_signals_remove_temporaries(); /* what a signal would remove */
    _exit(sr_status_exit_code(st));
}

sr_status sr_cuda_fail(cudaError_t e, const char *bus, const char *what) {
    sr_status st = sr_cuda_status(e);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (st == SR_ERR_PEER)
        sr_error(st,
                 "GPU hardware error on rank %d (host %s, bus %s) in %s: %s (%s); the node is at fault "
                 "(hint: exclude it, e.g. sbatch --exclude=%s, and requeue)",
                 sr_log_rank(), host, bus ? bus : "?", what, cudaGetErrorString(e), cudaGetErrorName(e), host);
    else if (sr_cuda_sticky(e))
        sr_error(st,
                 "CUDA error on rank %d (host %s, bus %s) in %s: %s (%s) (hint: a GPU fault or a kernel bug: see "
                 "nvidia-smi -q and the kernel log (Xid); SHARDRUN_CUDA_SYNC=1 names the op that failed)",
                 sr_log_rank(), host, bus ? bus : "?", what, cudaGetErrorString(e), cudaGetErrorName(e));
    else
        sr_error(st,
                 "CUDA error on rank %d (bus %s) in %s: %s (%s) (hint: SHARDRUN_CUDA_SYNC=1 reports the op "
                 "that failed)",
                 sr_log_rank(), bus ? bus : "?", what, cudaGetErrorString(e), cudaGetErrorName(e));
    if (sr_cuda_sticky(e))
        fatal(st);
    return st;
}

cudaError_t sr_cuda_query(cudaEvent_t e) {
    cudaError_t q = cudaEventQuery(e);
    /* Whether CUDA keeps NotReady as the thread's last error is not
     * documented (HIP does; PyTorch clears it after every query): clear it
     * here, so the next launch check never reports it as its own. */
    bool mutant = strcmp(sr_testhook()->mutate, "keep_notready") == 0; /* the mutation suite's planted bug */
    if (q == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)
        (void)(mutant ? cudaSuccess : cudaGetLastError());
    return q;
}

cudaError_t sr_cuda_sync_stream(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

void sr_cuda_beat(sr_cuda_ctx *x, const char *op) {
    if (op)
        __atomic_store_n(&x->beat_op, op, __ATOMIC_RELAXED);
    __atomic_store_n(&x->beat_ns, (uint64_t)sr_clock_mono_ns(), __ATOMIC_RELEASE);
}

/* The first error of a primitive, kept for the next wait. */
static void keep(cuda_dev *c, int e, const char *what) {
    sr_cuda_beat(&c->ctx, NULL); /* back from the driver */
    if (e == cudaSuccess || c->first_error != cudaSuccess)
        return;
    c->first_error = (cudaError_t)e;
    snprintf(c->first_what, sizeof c->first_what, "%s", what);
}

static sr_status kept(cuda_dev *c) {
    if (c->first_error == cudaSuccess)
        return SR_OK;
    return sr_cuda_fail(c->first_error, c->bus, c->first_what); /* a sticky one does not return */
}

/* The start of one primitive on stream s: the test hook's delay (a spin
 * kernel) and the name of the last op for a deadline's message. */
static void begin(cuda_dev *c, sr_stream s, const char *what) {
    c->last_op = what;
    sr_cuda_beat(&c->ctx, what);
    if (c->dry)
        return;
    if (c->base.delay_us[s] > 0)
        keep(c, sr_k_spin(c->st[s], c->base.delay_us[s] * 1000), "the delay kernel");
    if (s == SR_STREAM_COMPUTE && c->hang_step > 0 && c->base.step == c->hang_step) {
        c->hang_step = 0; /* SHARDRUN_TEST_GPU_HANG_AT: once */
        keep(c, sr_k_spin(c->st[s], 3600ll * 1000000000ll), "the hang kernel");
    }
}

/* ------------------------------------------------------------------------ */
/* memory */

static void *cuda_alloc(sr_dev *d, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    cuda_dev *c = cd(d);
    if (c->nallocs == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        allocation *na = sr_realloc(c->allocs, cap * sizeof *na);
        if (!na) {
            sr_error_oom("the device allocation table");
            return NULL;
        }
        c->allocs = na;
        c->cap = cap;
    }
    void *p = NULL;
    cudaError_t e = cudaSuccess;
    size_t n = bytes ? bytes : 64;
    if (c->dry) {
        /* device memory: an address no one dereferences; host memory the
         * host reads (the bounce buffer, token slots) is real when small */
        if (space == SR_SPACE_DEVICE || bytes > DRY_HOST_BYTES) {
            p = (void *)c->fake;
            c->fake += (n + 255) / 256 * 256;
        } else if (!(p = calloc(1, n))) {
            sr_error_oom("a dry table's host buffer");
            return NULL;
        }
        c->allocs[c->nallocs++] = (allocation){p, bytes, space, cat};
        sr_mem_account_external(space, cat, bytes, true);
        return p;
    }
    if (space == SR_SPACE_DEVICE)
        e = cudaMalloc(&p, n);
    else if (space == SR_SPACE_PINNED)
        e = cudaMallocHost(&p, n);
    else {
        p = sr_mem_alloc_in(SR_SPACE_HOST, cat, bytes, false);
        if (p && sr_dev_hb_alloc(d, p, bytes) != SR_OK) {
            sr_mem_free(p);
            return NULL;
        }
        return p;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky */
        sr_error(SR_ERR_INTERNAL, "out of %s memory allocating %zu bytes for %s: %s (bus %s)", sr_mem_space_name(space),
                 bytes, sr_mem_name(cat), cudaGetErrorString(e), c->bus);
        return NULL;
    }
    if (d->poison && space == SR_SPACE_DEVICE) {
        /* all ones: NaN in f32, bf16 and f64 (test hook).  The legacy
         * stream does not order the table's non-blocking streams, so wait
         * for the fill here (allocation is set-up, never a step). */
        cudaMemset(p, 0xff, n);
        cudaDeviceSynchronize();
    } else if (d->poison)
        memset(p, 0xff, n);
    if (sr_dev_hb_alloc(d, p, bytes) != SR_OK) {
        (void)(space == SR_SPACE_DEVICE ? cudaFree(p) : cudaFreeHost(p));
        return NULL;
    }
    c->allocs[c->nallocs++] = (allocation){p, bytes, space, cat};
    sr_mem_account_external(space, cat, bytes, true);
    return p;
}

static void cuda_free(sr_dev *d, void *p) {
    cuda_dev *c = cd(d);
    if (!p)
        return;
    for (size_t i = 0; i < c->nallocs; i++)
        if (c->allocs[i].p == p) {
            allocation a = c->allocs[i];
            c->allocs[i] = c->allocs[--c->nallocs];
            sr_mem_account_external(a.space, a.cat, a.bytes, false);
            if (c->dry) {
                if (a.space != SR_SPACE_DEVICE && a.bytes <= DRY_HOST_BYTES)
                    free(p);
                return;
            }
            sr_dev_hb_free(d, p, a.bytes);
            if (a.space == SR_SPACE_DEVICE)
                cudaFree(p);
            else
                cudaFreeHost(p);
            return;
        }
    sr_dev_hb_free(d, p, sr_mem_block_bytes(p));
    sr_mem_free(p); /* host memory of the accounted allocator */
}

/* ------------------------------------------------------------------------ */
/* copies, events, waits */

/* The space of a pointer of this table (SR_SPACE_HOST for one it did not
 * allocate: host memory). */
static sr_mem_space space_of(const cuda_dev *c, const void *p) {
    if (c->dry)
        return (uintptr_t)p >= DRY_BASE && (uintptr_t)p < c->fake ? SR_SPACE_DEVICE : SR_SPACE_HOST;
    for (size_t i = 0; i < c->nallocs; i++)
        if ((const char *)p >= (const char *)c->allocs[i].p &&
            (const char *)p < (const char *)c->allocs[i].p + c->allocs[i].bytes)
            return c->allocs[i].space;
    return SR_SPACE_HOST;
}

static void cuda_memset(sr_dev *d, sr_stream s, void *dst, int byte, size_t bytes) {
    cuda_dev *c = cd(d);
    begin(c, s, "memset");
    sr_dev_hb_memset(d, s, dst, bytes);
    if (bytes && sr_ledger_bound())
        sr_ledger_memset((double)bytes);
    if (bytes && !c->dry) {
        sr_cuda_prof_begin(&c->ctx, c->st[s], SR_LEDGER_ROW_MEMSET);
        keep(c, cudaMemsetAsync(dst, byte, bytes, c->st[s]), "cudaMemsetAsync");
        sr_cuda_prof_end(&c->ctx, c->st[s]);
    }
}

static void cuda_copy(sr_dev *d, sr_stream s, void *dst, const void *src, size_t bytes) {
    cuda_dev *c = cd(d);
    begin(c, s, "copy");
    sr_dev_hb_copy(d, s, dst, src, bytes);
    if (!bytes || dst == src)
        return;
    /* (where the pointers live is looked up only when it is counted) */
    bool counted = sr_ledger_bound() || c->ctx.prof || c->dry;
    bool on_device = counted && space_of(c, dst) == SR_SPACE_DEVICE && space_of(c, src) == SR_SPACE_DEVICE;
    if (sr_ledger_bound())
        sr_ledger_copy((double)bytes, on_device);
    if (c->dry) {
        /* the host reads what is host memory: a copy between two host
         * buffers is done, a download gives zeros */
        if (space_of(c, dst) == SR_SPACE_DEVICE || (uintptr_t)dst >= DRY_BASE)
            return;
        if (space_of(c, src) != SR_SPACE_DEVICE)
            memmove(dst, src, bytes);
        else
            memset(dst, 0, bytes);
        return;
    }
    sr_cuda_prof_begin(&c->ctx, c->st[s], on_device ? SR_LEDGER_ROW_COPY_DEVICE : SR_LEDGER_ROW_COPY_HOST);
    keep(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->st[s]), "cudaMemcpyAsync");
    sr_cuda_prof_end(&c->ctx, c->st[s]);
}

static void record(cuda_dev *c, sr_event *ev, sr_stream s) {
    uint64_t seq = ++c->seq;
    cudaEvent_t *e = &c->ring[seq % RING];
    *ev = (sr_event){.tick = seq, .stream = (int)s};
    if (c->dry)
        return;
    if (!*e && cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) {
        keep(c, cudaGetLastError(), "cudaEventCreate");
        *e = NULL;
        return;
    }
    keep(c, cudaEventRecord(*e, c->st[s]), "cudaEventRecord");
    ev->impl = *e;
}

static void cuda_record(sr_dev *d, sr_event *ev, sr_stream s) {
    record(cd(d), ev, s);
    sr_dev_hb_record(d, s, ev);
}

static sr_status cuda_wait(sr_dev *d, sr_stream s, sr_event *ev) {
    cuda_dev *c = cd(d);
    sr_dev_hb_wait(d, s, ev);
    sr_status st = sr_dev_transport_wait(d, ev);
    if (st != SR_OK || !ev->impl || c->dry)
        return st != SR_OK ? st : kept(c);
    /* a compute wait on communication: bracketed by timing events (exposed
     * communication), when a pair is free */
    cudaEvent_t *pair = NULL;
    if (s == SR_STREAM_COMPUTE && ev->stream == SR_STREAM_COMM && c->timed_head - c->timed_tail < TIMED) {
        pair = c->timed[c->timed_head % TIMED];
        if ((!pair[0] && cudaEventCreate(&pair[0]) != cudaSuccess) ||
            (!pair[1] && cudaEventCreate(&pair[1]) != cudaSuccess)) {
            keep(c, cudaGetLastError(), "cudaEventCreate (timing)");
            pair = NULL;
        }
    }
    if (pair)
        keep(c, cudaEventRecord(pair[0], c->st[s]), "cudaEventRecord (timing)");
    keep(c, cudaStreamWaitEvent(c->st[s], (cudaEvent_t)ev->impl, 0), "cudaStreamWaitEvent");
    if (pair) {
        keep(c, cudaEventRecord(pair[1], c->st[s]), "cudaEventRecord (timing)");
        c->timed_head++;
    }
    return kept(c);
}

/* Sums the exposed-communication pairs whose second event completed. */
static void timed_collect(cuda_dev *c) {
    while (c->timed_tail != c->timed_head) {
        cudaEvent_t *p = c->timed[c->timed_tail % TIMED];
        if (sr_cuda_query(p[1]) != cudaSuccess)
            return;
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p[0], p[1]) == cudaSuccess && ms > 0.0f)
            c->base.comm_wait_ns += (uint64_t)((double)ms * 1e6);
        c->timed_tail++;
    }
}

unsigned sr_cuda_poll_pause_us(uint64_t waited_ns) { return waited_ns < SR_CUDA_SPIN_NS ? 0u : SR_CUDA_SLEEP_US; }

/* Polls `e` until it completes or the deadline passes, pausing as
 * sr_cuda_poll_pause_us says (spin 1 ms, then 50 us sleeps).  The CUDA
 * emulator's device computes on this machine's own cores, which a poll
 * every 50 us takes from it (an emulated tiny job took 67 s, not 52, on two
 * cores), so there the sleeps double from 20 us to 1 ms, as before.  Past
 * the deadline the process ends (fatal): a hung kernel would also hang
 * every teardown. */
static sr_status poll_event(cuda_dev *c, cudaEvent_t e) {
    double timeout = c->base.timeout_s;
    uint64_t t0 = (uint64_t)sr_clock_mono_ns();
#ifdef SR_CUDA_EMULATED
    unsigned backoff = 20;
#endif
    for (;;) {
        cudaError_t q = sr_cuda_query(e);
        if (q == cudaSuccess) {
            timed_collect(c);
            return kept(c);
        }
        if (q != cudaErrorNotReady) {
            keep(c, q, c->last_op ? c->last_op : "a kernel");
            return kept(c);
        }
        sr_cuda_beat(&c->ctx, NULL); /* polling: the host is not stuck (the deadline below is the device's) */
        uint64_t waited = (uint64_t)sr_clock_mono_ns() - t0;
        if (timeout > 0 && (double)waited / 1e9 > timeout) {
            if (c->base.on_deadline)
                c->base.on_deadline(c->base.on_deadline_arg);
            fatal(sr_error(SR_ERR_INTERNAL,
                           "the GPU (bus %s) did not finish step %lld within comm.timeout_s = %g s; the last "
                           "op enqueued was %s (hint: SHARDRUN_CUDA_SYNC=1 names the op that hangs; a GPU "
                           "fault shows in nvidia-smi -q and the kernel log (Xid))",
                           c->bus, c->base.step, timeout, c->last_op ? c->last_op : "(none)"));
        }
        unsigned pause = sr_cuda_poll_pause_us(waited);
#ifdef SR_CUDA_EMULATED
        if (pause) {
            pause = backoff;
            backoff = backoff < 1000 ? 2 * backoff : 1000;
        }
#endif
        if (pause)
            usleep((useconds_t)pause);
    }
}

/* ---- log.trace_steps: spans in device time ---------------------------- */

/* The trace's spans whose closing event completed, with host times: the
 * anchor's host time plus cudaEventElapsedTime from it (float ms: about a
 * microsecond's resolution). */
static void trace_collect(cuda_dev *c) {
    while (c->ts_tail != c->ts_head) {
        trace_span *t = &c->tspan[c->ts_tail % TSPANS];
        if (!t->ended || sr_cuda_query(t->b) != cudaSuccess)
            return;
        float a = 0.0f, d = 0.0f;
        if (cudaEventElapsedTime(&a, c->anchor, t->a) != cudaSuccess ||
            cudaEventElapsedTime(&d, t->a, t->b) != cudaSuccess)
            a = d = 0.0f, (void)cudaGetLastError();
        int64_t t0 = c->anchor_ns + (int64_t)((double)a * 1e6);
        sr_trace_late_span((sr_trace_lane)t->lane, t->name, t0, t0 + (int64_t)((double)d * 1e6));
        t->ended = false;
        c->ts_tail++;
    }
}

static uint64_t cuda_trace_begin(sr_dev *d, sr_stream s) {
    cuda_dev *c = cd(d);
    if (c->dry)
        return 0;
    trace_collect(c);
    if (c->ts_head - c->ts_tail == TSPANS)
        return 0;
    if (!c->anchor) {
        /* the clock's anchor: an event the host waits for (once; the first
         * traced step pays for it) */
        if (cudaEventCreate(&c->anchor) != cudaSuccess ||
            cudaEventRecord(c->anchor, c->st[SR_STREAM_COMPUTE]) != cudaSuccess || poll_event(c, c->anchor) != SR_OK) {
            (void)cudaGetLastError();
            if (c->anchor)
                cudaEventDestroy(c->anchor);
            c->anchor = NULL;
            return 0;
        }
        c->anchor_ns = sr_clock_wall_ns();
    }
    trace_span *t = &c->tspan[c->ts_head % TSPANS];
    if ((!t->a && cudaEventCreate(&t->a) != cudaSuccess) || (!t->b && cudaEventCreate(&t->b) != cudaSuccess) ||
        cudaEventRecord(t->a, c->st[s]) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (!sr_trace_late_begin()) /* the window closed: no span */
        return 0;
    t->stream = (int)s;
    t->ended = false;
    return ++c->ts_head; /* the handle: the slot's number + 1 */
}

static void cuda_trace_end(sr_dev *d, uint64_t handle, int lane, const char *name) {
    cuda_dev *c = cd(d);
    trace_span *t = &c->tspan[(handle - 1) % TSPANS];
    if (cudaEventRecord(t->b, c->st[t->stream]) != cudaSuccess)
        (void)cudaGetLastError(); /* an unrecorded event queries done: the span ends with no duration */
    t->lane = lane;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ended = true;
}

/* The host waits for ev (the checker is told by the caller). */
static sr_status host_wait(cuda_dev *c, sr_event *ev) {
    sr_status st = sr_dev_transport_wait(&c->base, ev);
    if (st != SR_OK)
        return st;
    st = ev->impl ? poll_event(c, (cudaEvent_t)ev->impl) : kept(c);
    if (c->ts_head != c->ts_tail)
        trace_collect(c);
    return st;
}

static sr_status cuda_host_wait(sr_dev *d, sr_event *ev) {
    sr_dev_hb_host_wait(d, ev);
    return host_wait(cd(d), ev);
}

static sr_status cuda_sync(sr_dev *d, sr_stream s) {
    sr_dev_hb_sync(d, s);
    sr_event ev;
    record(cd(d), &ev, s);
    return host_wait(cd(d), &ev);
}

/* With SHARDRUN_CUDA_SYNC=1, and always on the CUDA emulator: refuses a
 * step-path download into pageable host memory (the copy would block
 * inside the driver, past the deadline). */
static sr_status cuda_pageable_check(sr_dev *d, const void *host, size_t bytes, const char *site) {
    cuda_dev *c = cd(d);
    if ((!c->ctx.sync_each && !d->emulated) || c->dry)
        return SR_OK;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, host);
    if (e != cudaSuccess)
        (void)cudaGetLastError(); /* an unknown pointer: pageable memory */
    if (e == cudaSuccess && a.type != cudaMemoryTypeUnregistered)
        return SR_OK;
    return sr_error(SR_ERR_INTERNAL,
                    "step-path download at %s: %zu bytes into pageable host memory, not through the %zu-byte pinned "
                    "bounce buffer; the copy would block inside the driver and the step's deadline would never run "
                    "(a bug, please report it; found by %s)",
                    site, bytes, d->bounce_bytes, d->emulated ? "the CUDA emulator" : "SHARDRUN_CUDA_SYNC=1");
}

/* ------------------------------------------------------------------------ */
/* primitives */

static void cuda_cast(sr_dev *d, sr_stream s, void *dst, const float *src, size_t n) {
    cuda_dev *c = cd(d);
    begin(c, s, "cast_f32_bf16");
    sr_dev_hb_cast(d, s, dst, src, n);
    keep(c, sr_k_cast_f32_bf16(c->st[s], dst, src, n), "cast_f32_bf16");
}
static void cuda_fold(sr_dev *d, sr_stream s, float *acc, const void *src, size_t n, bool add) {
    cuda_dev *c = cd(d);
    begin(c, s, "fold_bf16");
    sr_dev_hb_fold(d, s, acc, src, n, add);
    keep(c, sr_k_fold_bf16(c->st[s], acc, src, n, add), "fold_bf16");
}
static void cuda_add(sr_dev *d, sr_stream s, float *acc, const float *src, size_t n) {
    cuda_dev *c = cd(d);
    begin(c, s, "add_f32");
    sr_dev_hb_add(d, s, acc, src, n);
    keep(c, sr_k_add_f32(c->st[s], acc, src, n), "add_f32");
}
static void cuda_sum_squares(sr_dev *d, sr_stream s, double *out, const float *x, size_t n) {
    cuda_dev *c = cd(d);
    begin(c, s, "sum_squares");
    sr_dev_hb_sum_squares(d, s, out, x, n);
    keep(c, sr_k_sum_squares(c->st[s], out, x, n, c->partial[s]), "sum_squares");
}
static void cuda_loss_sum(sr_dev *d, sr_stream s, double *acc, const float *losses, size_t n, bool add) {
    cuda_dev *c = cd(d);
    begin(c, s, "loss_sum");
    sr_dev_hb_loss_sum(d, s, acc, losses, n, add);
    keep(c, sr_k_loss_sum(c->st[s], acc, losses, n, c->partial[s], add), "loss_sum");
}
/* the host's segment list is the kernel's table (sr_cuda.h) */
_Static_assert(sizeof(sr_adamw_segment) == sizeof(sr_cuda_adamw_seg) &&
                   offsetof(sr_adamw_segment, off) == offsetof(sr_cuda_adamw_seg, off) &&
                   offsetof(sr_adamw_segment, n) == offsetof(sr_cuda_adamw_seg, n) &&
                   offsetof(sr_adamw_segment, start) == offsetof(sr_cuda_adamw_seg, start) &&
                   offsetof(sr_adamw_segment, decay) == offsetof(sr_cuda_adamw_seg, decay),
               "sr_adamw_segment and sr_cuda_adamw_seg differ");

static void cuda_adamw(sr_dev *d, sr_stream s, const sr_adamw_launch *l) {
    cuda_dev *c = cd(d);
    begin(c, s, "adamw");
    sr_dev_hb_adamw(d, s, l);
    const sr_adamw_args *a = &l->a;
    if (l->nsegs <= 0)
        return;
    if (!l->dsegs) { /* (sr_optim uploads the list; a launch without it is a bug) */
        keep(c, (int)cudaErrorInvalidValue, "adamw (no segment list in device memory)");
        return;
    }
    const sr_adamw_segment *last = &l->segs[l->nsegs - 1];
    keep(c,
         sr_k_adamw(c->st[s], l->params, l->grads, l->m, l->v, l->params16, (const sr_cuda_adamw_seg *)l->dsegs,
                    l->nsegs, last->start + last->n, a->b1, a->b2, a->eps, a->bc1, a->bc2, a->lr, l->weight_decay,
                    a->grad_scale, l->sumsq, l->clip),
         "adamw");
}

/* ------------------------------------------------------------------------ */
/* the per-op profile (profile_cuda.c) */

static sr_status cuda_profile_open(sr_dev *d, int pairs) { return sr_cuda_prof_open(&cd(d)->ctx, pairs); }
static void cuda_profile_switch(sr_dev *d, bool on) { sr_cuda_prof_switch(&cd(d)->ctx, on); }
static sr_status cuda_profile_collect(sr_dev *d, sr_ledger *l, long long *untimed, double *busy_ms) {
    return sr_cuda_prof_collect(&cd(d)->ctx, l, untimed, busy_ms);
}

/* ------------------------------------------------------------------------ */
/* the watchdog of the host thread */

/* Every 250 ms: armed, and the host not back from the driver for
 * timeout_s?  Then the run ends as a passed deadline does (70, the message
 * first, no teardown that could wait for the device).  The thread calls
 * nothing of CUDA: the driver may hold its locks for the stuck thread. */
static void *watch_main(void *arg) {
    cuda_dev *c = arg;
    pthread_mutex_lock(&c->watch_mu);
    while (!c->watch_stop) {
        struct timespec ts = sr_clock_wall_after(0.25);
        pthread_cond_timedwait(&c->watch_cv, &c->watch_mu, &ts);
        long long step = __atomic_load_n(&c->watch_step, __ATOMIC_ACQUIRE);
        double timeout = c->base.timeout_s;
        uint64_t beat = __atomic_load_n(&c->ctx.beat_ns, __ATOMIC_ACQUIRE);
        double quiet = beat ? (double)((uint64_t)sr_clock_mono_ns() - beat) / 1e9 : 0.0;
        if (c->watch_stop || step <= 0 || timeout <= 0 || quiet <= timeout)
            continue;
        pthread_mutex_unlock(&c->watch_mu);
        if (c->base.on_deadline) /* the NCCL plane: its own verdict when a collective is what hangs */
            c->base.on_deadline(c->base.on_deadline_arg);
        const char *op = __atomic_load_n(&c->ctx.beat_op, __ATOMIC_RELAXED);
        fatal(sr_error(SR_ERR_INTERNAL,
                       "the GPU (bus %s) did not finish step %lld within comm.timeout_s = %g s: the host thread has "
                       "been inside the CUDA driver for %.0f s, after %s (a launch waits for the device when CUDA "
                       "loads a kernel lazily, so a kernel hung earlier blocks it) (hint: CUDA_MODULE_LOADING=EAGER "
                       "loads every kernel at start; SHARDRUN_CUDA_SYNC=1 names the op that hangs; a GPU fault shows "
                       "in nvidia-smi -q and the kernel log (Xid))",
                       c->bus, step, timeout, quiet, op ? op : "the step's start"));
    }
    pthread_mutex_unlock(&c->watch_mu);
    return NULL;
}

static void cuda_watch(sr_dev *d, long long step) {
    cuda_dev *c = cd(d);
    if (step > 0)
        sr_cuda_beat(&c->ctx, NULL); /* armed from now */
    __atomic_store_n(&c->watch_step, step, __ATOMIC_RELEASE);
}

static void watch_start(cuda_dev *c) {
    pthread_mutex_init(&c->watch_mu, NULL);
    pthread_cond_init(&c->watch_cv, NULL);
    c->watching = pthread_create(&c->watch_th, NULL, watch_main, c) == 0;
    if (!c->watching)
        sr_log_warn("cannot start the watchdog of the host thread (a launch that blocks inside the driver then ends "
                    "the run only at Slurm's time limit)");
}

static void watch_stop(cuda_dev *c) {
    if (!c->watching)
        return;
    pthread_mutex_lock(&c->watch_mu);
    c->watch_stop = true;
    pthread_cond_signal(&c->watch_cv);
    pthread_mutex_unlock(&c->watch_mu);
    pthread_join(c->watch_th, NULL);
    c->watching = false;
}

/* ------------------------------------------------------------------------ */
/* identity and opening */

/* "580.65.06" from the kernel module, or the CUDA driver API version: the
 * first word after "Kernel Module" that starts with a digit (the open
 * module's line reads "... Open Kernel Module for x86_64  580.159.04 ...":
 * the first H200 run printed "driver for"). */
static void driver_version(char *buf, size_t n) {
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[256];
    if (f && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "Kernel Module");
        if (p) {
            p += strlen("Kernel Module");
            for (;;) {
                while (*p == ' ' || *p == '\t')
                    p++;
                size_t len = strcspn(p, " \t\n");
                if (len == 0)
                    break;
                if (*p >= '0' && *p <= '9') {
                    snprintf(buf, n, "%.*s", (int)(len < 64 ? len : 64), p);
                    fclose(f);
                    return;
                }
                p += len;
            }
        }
    }
    if (f)
        fclose(f);
    int v = 0;
    cudaDriverGetVersion(&v);
    snprintf(buf, n, "CUDA %d.%d", v / 1000, v % 1000 / 10);
}

static size_t cuda_used_bytes(sr_dev *d) {
    (void)d;
    size_t free_b = 0, total_b = 0;
    return cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? total_b - free_b : 0;
}

sr_cuda_ctx *sr_dev_cuda_ctx(sr_dev *d) { return &cd(d)->ctx; }
cudaStream_t sr_dev_cuda_stream(sr_dev *d, sr_stream s) { return cd(d)->st[s]; }

/* The operations a CUDA device and a dry one share. */
static void cuda_ops(sr_dev *b, cuda_dev *c) {
    *b = (sr_dev){.kind = SR_DEV_CUDA,
                  .separate_memory = true,
                  .alloc = cuda_alloc,
                  .free = cuda_free,
                  .memset = cuda_memset,
                  .copy = cuda_copy,
                  .record = cuda_record,
                  .wait = cuda_wait,
                  .host_wait = cuda_host_wait,
                  .sync = cuda_sync,
                  .cast_f32_bf16 = cuda_cast,
                  .fold_bf16 = cuda_fold,
                  .add_f32 = cuda_add,
                  .sum_squares = cuda_sum_squares,
                  .loss_sum = cuda_loss_sum,
                  .adamw = cuda_adamw,
                  .pageable_check = cuda_pageable_check,
                  .trace_begin = cuda_trace_begin,
                  .trace_end = cuda_trace_end,
                  .state_space = SR_SPACE_DEVICE,
                  .device_free_bytes = -1,
                  .impl = c};
}

#define TRY(call, what)                                                                                                \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return sr_cuda_fail(e_, c->bus, what);                                                                     \
    } while (0)

/* The device, its streams (communication at the higher priority), their
 * scratch, cuBLASLt with its workspace, the bounce buffer and the GEMM
 * plan cache; the device's properties into *prop.  The caller closes c on
 * failure. */
static sr_status open_runtime(cuda_dev *c, int ordinal, struct cudaDeviceProp *prop) {
    TRY(cudaSetDevice(ordinal), "cudaSetDevice");
    TRY(cudaDeviceGetPCIBusId(c->bus, (int)sizeof c->bus, ordinal), "cudaDeviceGetPCIBusId");
    snprintf(c->base.pci_bus, sizeof c->base.pci_bus, "%s", c->bus);
    TRY(cudaGetDeviceProperties(prop, ordinal), "cudaGetDeviceProperties");
    int lo, hi;
    TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange");
    for (int s = 0; s < SR_NSTREAMS; s++)
        TRY(cudaStreamCreateWithPriority(&c->st[s], cudaStreamNonBlocking, s == SR_STREAM_COMM ? hi : lo),
            "cudaStreamCreateWithPriority");
    for (int s = 0; s < SR_NSTREAMS; s++)
        if (!(c->partial[s] = cuda_alloc(&c->base, SR_SPACE_DEVICE, SR_MEM_OTHER, SR_CUDA_SCRATCH_BYTES)))
            return SR_ERR_INTERNAL;
    cublasStatus_t ls = cublasLtCreate(&c->lt);
    if (ls != CUBLAS_STATUS_SUCCESS) {
        c->lt = NULL;
        return sr_error(SR_ERR_INTERNAL, "cublasLtCreate failed on bus %s: %s", c->bus, cublasLtGetStatusString(ls));
    }
    const size_t lt_ws = SR_CUDA_LT_WORKSPACE_BYTES;
    if (!(c->lt_ws = cuda_alloc(&c->base, SR_SPACE_DEVICE, SR_MEM_OTHER, lt_ws)) ||
        !(c->base.bounce = cuda_alloc(&c->base, SR_SPACE_PINNED, SR_MEM_OTHER, SR_CUDA_BOUNCE_BYTES)))
        return SR_ERR_INTERNAL;
    c->base.bounce_bytes = SR_CUDA_BOUNCE_BYTES;
    c->ctx = (sr_cuda_ctx){.ordinal = ordinal,
                           .stream = c->st[SR_STREAM_COMPUTE],
                           .gemm = sr_gemm_cache_new(c->lt, c->lt_ws, lt_ws),
                           .sync_each = getenv("SHARDRUN_CUDA_SYNC") && strcmp(getenv("SHARDRUN_CUDA_SYNC"), "1") == 0,
                           .bus = c->bus};
    if (!c->ctx.gemm)
        return sr_error_oom("the GEMM plan cache");
    sr_cuda_bind(&c->ctx);
    /* what the job may plan: free memory now less max(5 %, 512 MiB) */
    size_t free_b = 0, total_b = 0;
    TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    long long margin = (long long)(total_b / 20) > (512ll << 20) ? (long long)(total_b / 20) : (512ll << 20);
    c->base.device_free_bytes = (long long)free_b > margin ? (long long)free_b - margin : 0;
    c->base.used_at_open = total_b - free_b;
    c->base.used_bytes = cuda_used_bytes;
    return SR_OK;
}

#undef TRY

sr_status sr_dev_cuda_open(sr_dev **out, int ordinal, const char *physical) {
    *out = NULL;
    cuda_dev *c = sr_calloc(1, sizeof *c);
    if (!c)
        return sr_error_oom("the cuda device table");
    const sr_testhooks *h = sr_testhook();
    c->ordinal = ordinal;
    snprintf(c->bus, sizeof c->bus, "?");
#ifdef SR_CUDA_EMULATED
    const bool emulated = true;
#else
    const bool emulated = false;
#endif
    cuda_ops(&c->base, c);
    c->base.name = emulated ? "cuda-emulated" : "cuda";
    c->base.emulated = emulated;
    c->base.profile_open = cuda_profile_open;
    c->base.profile_switch = cuda_profile_switch;
    c->base.profile_collect = cuda_profile_collect;
    c->base.watch = cuda_watch;
    c->base.poison = h->poison;
    if (h->comm_delay_us > 0)
        c->base.delay_us[h->comm_delay_stream == 1 ? SR_STREAM_COMPUTE : SR_STREAM_COMM] = h->comm_delay_us;
    c->hang_step = h->gpu_hang_step > 0 ? h->gpu_hang_step : 0;
    if (h->hb && !(c->base.hb = sr_hb_open(true))) {
        free(c);
        return sr_error_oom("the happens-before checker");
    }
    struct cudaDeviceProp prop;
    sr_status st = open_runtime(c, ordinal, &prop);
    if (st != SR_OK) {
        sr_dev_cuda_close(&c->base);
        return st;
    }
    watch_start(c);
    char drv[80];
    driver_version(drv, sizeof drv);
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(c->base.line, sizeof c->base.line,
             "%s:%d (%sGPU %.32s, %.96s, sm_%d%d, %.1f GiB, bus %.31s, driver %.79s, CUDA %d.%d)", c->base.name,
             ordinal, emulated ? "the CUDA emulator of tests/cudaemu, not a GPU: " : "",
             physical && *physical ? physical : "?", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1 << 30), c->bus, drv, rt / 1000, rt % 1000 / 10);
    *out = &c->base;
    return SR_OK;
}

sr_status sr_dev_cuda_open_dry(sr_dev **out) {
    *out = NULL;
    cuda_dev *c = sr_calloc(1, sizeof *c);
    if (!c)
        return sr_error_oom("the dry cuda device table");
    c->dry = true;
    c->fake = DRY_BASE;
    snprintf(c->bus, sizeof c->bus, "dry");
    cuda_ops(&c->base, c);
    c->base.name = "cuda-dry";
    c->base.dry = true;
    snprintf(c->base.pci_bus, sizeof c->base.pci_bus, "dry");
    snprintf(c->base.line, sizeof c->base.line, "cuda-dry (counted, never issued: no GPU)");
    c->ctx = (sr_cuda_ctx){.bus = c->bus, .dry = true, .gemm = sr_gemm_cache_new(NULL, NULL, 0)};
    for (int s = 0; s < SR_NSTREAMS; s++)
        c->partial[s] = cuda_alloc(&c->base, SR_SPACE_DEVICE, SR_MEM_OTHER, SR_CUDA_SCRATCH_BYTES);
    c->base.bounce = cuda_alloc(&c->base, SR_SPACE_PINNED, SR_MEM_OTHER, SR_CUDA_BOUNCE_BYTES);
    c->base.bounce_bytes = SR_CUDA_BOUNCE_BYTES;
    if (!c->ctx.gemm || !c->base.bounce) {
        sr_dev_cuda_close(&c->base);
        return sr_error_oom("the dry cuda device table");
    }
    sr_cuda_bind(&c->ctx);
    *out = &c->base;
    return SR_OK;
}

void sr_dev_cuda_close(sr_dev *d) {
    if (!d)
        return;
    cuda_dev *c = cd(d);
    watch_stop(c);
    sr_cuda_prof_close(&c->ctx);
    sr_gemm_cache_free(c->ctx.gemm);
    while (c->nallocs)
        cuda_free(d, c->allocs[c->nallocs - 1].p);
    free(c->allocs);
    if (c->lt)
        cublasLtDestroy(c->lt);
    for (int i = 0; i < RING; i++)
        if (c->ring[i])
            cudaEventDestroy(c->ring[i]);
    for (int i = 0; i < TIMED; i++)
        for (int k = 0; k < 2; k++)
            if (c->timed[i][k])
                cudaEventDestroy(c->timed[i][k]);
    for (int i = 0; i < TSPANS; i++) {
        if (c->tspan[i].a)
            cudaEventDestroy(c->tspan[i].a);
        if (c->tspan[i].b)
            cudaEventDestroy(c->tspan[i].b);
    }
    if (c->anchor)
        cudaEventDestroy(c->anchor);
    for (int s = 0; s < SR_NSTREAMS; s++)
        if (c->st[s])
            cudaStreamDestroy(c->st[s]);
    if (sr_cuda_bound() == &c->ctx)
        sr_cuda_bind(NULL);
    sr_hb_close(c->base.hb);
    free(c);
}
