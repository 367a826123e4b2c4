/* launch_cuda.c — the way of every operation of the CUDA back end to the
 * GPU: the thread's bound context (sr_cuda_bind), the launch hooks and the
 * per-op timing of SHARDRUN_CUDA_PROFILE; see cuda_backend.h
 * (sr_cuda_bind, sr_cuda_prof_*) and kernels/sr_cuda.h (sr_cuda_dry,
 * sr_cuda_launch_begin/end).  It calls nothing else of the back end (the
 * device table, the GEMMs and the NCCL plane call it).
 *
 * Every kernel launch of kernels/ passes sr_cuda_launch_begin and
 * sr_cuda_launch_end (common.cuh's SR_LAUNCH), every cuBLASLt call, copy,
 * memset and NCCL collective sr_cuda_prof_begin and sr_cuda_prof_end.
 * With a ledger bound to the thread the launch is counted there; on a dry
 * table it is not issued; while the table's profile is on it is bracketed
 * by a pair of timing events from a pool created when the profile was
 * opened (nothing is allocated while a step runs: an operation past the
 * pool's end is counted untimed).  Collecting waits for the device and
 * adds each pair's time to the row the operation was counted to. */
#include "srconfig.h"

#include <stdlib.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "ledger.h"
#include "mem.h"

/* The CUDA context of this thread's table (cuda_backend.h): the ops of
 * ops_cuda.c and the NCCL plane compute in it. */
static _Thread_local sr_cuda_ctx *bound;

void sr_cuda_bind(sr_cuda_ctx *ctx) {
    bound = ctx;
    if (ctx && !ctx->dry)
        cudaSetDevice(ctx->ordinal);
}

sr_cuda_ctx *sr_cuda_bound(void) { return bound; }

int sr_cuda_dry(void) { return bound && bound->dry; }

/* A CUDA error of the profile's own calls (set-up and collection; the
 * device's sticky errors reach the run through its own waits). */
static sr_status fail(cudaError_t e, const char *bus, const char *what) {
    (void)cudaGetLastError();
    return sr_error(SR_ERR_INTERNAL, "%s failed: %s (bus %s)", what, cudaGetErrorString(e), bus ? bus : "?");
}

struct sr_cuda_prof {
    bool on;
    int n, used, open; /* pool size, pairs used, the pair begun and not ended (-1: none) */
    long long untimed;
    cudaEvent_t *a, *b;
    int *row;
    cudaEvent_t anchor; /* recorded when switched on: the operations' times are measured from it */
    bool anchored;
    float *span; /* [2n]: each pair's start and end, ms after the anchor (collect's scratch) */
};

sr_status sr_cuda_prof_open(sr_cuda_ctx *c, int pairs) {
    if (c->prof)
        return SR_OK;
    sr_cuda_prof *p = sr_calloc(1, sizeof *p);
    if (!p)
        return sr_error_oom("the profile's timing events");
    p->a = sr_calloc((size_t)pairs, sizeof *p->a);
    p->b = sr_calloc((size_t)pairs, sizeof *p->b);
    p->row = sr_calloc((size_t)pairs, sizeof *p->row);
    p->span = sr_calloc((size_t)pairs * 2, sizeof *p->span);
    p->open = -1;
    c->prof = p;
    if (!p->a || !p->b || !p->row || !p->span)
        return sr_error_oom("the profile's timing events");
    cudaError_t ae = cudaEventCreate(&p->anchor);
    if (ae != cudaSuccess)
        return fail(ae, c->bus, "cudaEventCreate (the profile's anchor)");
    for (int i = 0; i < pairs; i++) {
        cudaError_t e = cudaEventCreate(&p->a[i]);
        if (e == cudaSuccess)
            e = cudaEventCreate(&p->b[i]);
        if (e != cudaSuccess)
            return fail(e, c->bus, "cudaEventCreate (the profile's timing events)");
        p->n = i + 1;
    }
    return SR_OK;
}

void sr_cuda_prof_close(sr_cuda_ctx *c) {
    sr_cuda_prof *p = c->prof;
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        cudaEventDestroy(p->a[i]);
        if (p->b[i])
            cudaEventDestroy(p->b[i]);
    }
    if (p->anchor)
        cudaEventDestroy(p->anchor);
    free(p->span);
    free(p->a);
    free(p->b);
    free(p->row);
    free(p);
    c->prof = NULL;
}

void sr_cuda_prof_switch(sr_cuda_ctx *c, bool on) {
    sr_cuda_prof *p = c->prof;
    if (!p)
        return;
    if (on && !p->on) { /* (the device is drained: the anchor is now) */
        p->anchored = cudaEventRecord(p->anchor, 0) == cudaSuccess;
        if (!p->anchored)
            (void)cudaGetLastError();
    }
    p->on = on;
}

void sr_cuda_prof_begin(sr_cuda_ctx *c, cudaStream_t s, int row) {
    sr_cuda_prof *p = c ? c->prof : NULL;
    if (!p || !p->on)
        return;
    if (p->used == p->n || row < 0) {
        p->untimed++;
        return;
    }
    p->open = p->used++;
    p->row[p->open] = row;
    if (cudaEventRecord(p->a[p->open], s) != cudaSuccess) {
        (void)cudaGetLastError();
        p->used--, p->open = -1, p->untimed++;
    }
}

void sr_cuda_prof_end(sr_cuda_ctx *c, cudaStream_t s) {
    sr_cuda_prof *p = c ? c->prof : NULL;
    if (!p || !p->on || p->open < 0)
        return;
    if (cudaEventRecord(p->b[p->open], s) != cudaSuccess) {
        (void)cudaGetLastError();
        p->row[p->open] = -1;
        p->untimed++;
    }
    p->open = -1;
}

static int by_start(const void *x, const void *y) {
    float a = ((const float *)x)[0], b = ((const float *)y)[0];
    return (a > b) - (a < b);
}

sr_status sr_cuda_prof_collect(sr_cuda_ctx *c, sr_ledger *l, long long *untimed, double *busy_ms) {
    sr_cuda_prof *p = c->prof;
    *untimed = 0;
    *busy_ms = 0;
    if (!p)
        return SR_OK;
    /* everything enqueued so far, every stream (a profiled step waits) */
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return fail(e, c->bus, "the profile's wait for the device (cudaDeviceSynchronize)");
    int ns = 0;
    for (int i = 0; i < p->used; i++) {
        float ms = 0, t0 = 0, t1 = 0;
        if (p->row[i] < 0)
            continue;
        e = cudaEventElapsedTime(&ms, p->a[i], p->b[i]);
        if (e == cudaSuccess && p->anchored && cudaEventElapsedTime(&t0, p->anchor, p->a[i]) == cudaSuccess &&
            cudaEventElapsedTime(&t1, p->anchor, p->b[i]) == cudaSuccess) {
            p->span[2 * ns] = t0;
            p->span[2 * ns + 1] = t1;
            ns++;
        }
        if (e != cudaSuccess)
            return fail(e, c->bus, "cudaEventElapsedTime (the profile's timing events)");
        l->row[p->row[i]].ms += ms;
        l->fam[sr_ledger_row_family(p->row[i])].ms += ms;
    }
    /* the device's busy time: the union of the operations' spans (streams
     * overlap: the sum of the times can exceed it) */
    qsort(p->span, (size_t)ns, 2 * sizeof *p->span, by_start);
    double busy = 0, lo = 0, hi = -1;
    for (int i = 0; i < ns; i++) {
        if (p->span[2 * i] > hi) {
            busy += hi > lo ? hi - lo : 0;
            lo = p->span[2 * i];
            hi = p->span[2 * i + 1];
        } else if (p->span[2 * i + 1] > hi)
            hi = p->span[2 * i + 1];
    }
    busy += hi > lo ? hi - lo : 0;
    *busy_ms = busy;
    *untimed = p->untimed;
    p->used = 0;
    p->untimed = 0;
    p->open = -1;
    return SR_OK;
}

/* ---- the launch hooks ------------------------------------------------------ */

int sr_cuda_launch_begin(cudaStream_t stream) {
    sr_ledger_kernel();
    sr_cuda_ctx *c = bound;
    if (!c)
        return 0;
    if (c->dry)
        return 1;
    if (c->prof && c->prof->on)
        sr_cuda_prof_begin(c, stream, sr_ledger_current_row());
    return 0;
}

int sr_cuda_launch_end(cudaStream_t stream, int rc) {
    sr_cuda_ctx *c = bound;
    if (c && c->prof && c->prof->on)
        sr_cuda_prof_end(c, stream);
    return rc;
}
