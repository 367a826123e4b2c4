/* device.c — the helpers every device table uses: the named waits and the
 * happens-before declarations of each primitive, the blocking copies, the
 * host buffers the device reads asynchronously; see device.h.  Choosing and
 * opening a table is device_open.c's; the cpu and fake tables are in
 * device_cpu.c, the cuda table in device_cuda.c. */
#include "srconfig.h"

#include "device.h"

#include "trace.h"

#include "testhook.h"

#include "clock.h"
#include "ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)SR_NSTREAMS == (int)SR_HB_TRANSPORT, "the checker's agents start with the streams");

const sr_wait_site sr_dev_wait_sites[] = {
    {"inputs_free", "h2d waits for compute before overwriting the previous micro-batch's inputs"},
    {"inputs_ready", "compute waits for the inputs' upload (h2d)"},
    {"params_updated", "comm waits for AdamW (compute) before gathering the updated shard"},
    {"slot_free", "comm waits for compute's last use of a full-unit buffer before gathering into it"},
    {"kept_ready", "comm waits for compute's copy of a unit's 1/N share before gathering it (reshard N)"},
    {"gather_ready", "compute waits for a unit's all-gather"},
    {"grads_ready", "comm waits for a unit's gradients (compute) before reducing them"},
    {"reduce_done", "comm waits for a unit's reduction (reduce-scatter; with HSDP the replicas' all-reduce)"},
    {"reductions_folded", "compute waits for every reduction (comm) before the gradient norm"},
    {"state_ready", "d2h waits for AdamW (compute) before a checkpoint reads the shards"},
    {"scalars_ready", "d2h waits for the step's loss and sum of squares (compute)"},
    {"step_scalars", "the host waits for the step's loss and gradient norm: its one host wait"},
    {"loss_ready", "d2h waits for an evaluation's loss (compute)"},
    {"eval_loss", "the host waits for an evaluation's loss"},
    {"task_losses", "the host waits for an evaluation task's per-token losses"},
    {"dump_gathered", "the host waits for a unit's all-gather of the parameter dump"},
    {"download", "the host waits for a copy to the host (checkpoints, the parameter dump, samples)"},
    {"upload", "the host waits for a copy from the host (initialisation, resume)"},
    {"offload_scalars", "comm waits for the step's loss (compute) before copying it to the host (offload)"},
    {"grads_on_host", "the host waits for the gradient shard's copies and the loss (comm): offload's one host wait"},
    {NULL, NULL}};

/* True when SHARDRUN_TEST_SKIP_WAIT names `site`. */
static bool skipped(const char *site) {
    const char *list = sr_testhook()->skip_wait;
    size_t n = strlen(site);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, site, n) == 0)
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

sr_status sr_dev_transport_wait(sr_dev *d, sr_event *ev) {
    if (!ev->req)
        return SR_OK;
    int64_t t0 = sr_clock_mono_ns();
    sr_status st = ev->req_wait(ev->req);
    d->comm_wait_ns += (uint64_t)(sr_clock_mono_ns() - t0);
    ev->req = NULL;
    return st;
}

/* log.trace_steps: a host wait on the host lane, named by its site. */
static void trace_wait(int lane, const char *site, int64_t t0) {
    if (t0) {
        char name[48];
        snprintf(name, sizeof name, "wait %s", site);
        sr_trace_span((sr_trace_lane)lane, name, t0, sr_clock_wall_ns(), -1, NULL);
    }
}

uint64_t sr_dev_trace_begin(sr_dev *d, sr_stream s) {
    if (!sr_trace_on())
        return 0;
    return d->trace_begin ? d->trace_begin(d, s) : (uint64_t)sr_clock_wall_ns();
}

void sr_dev_trace_end(sr_dev *d, uint64_t handle, int lane, const char *name) {
    if (!handle)
        return;
    if (d->trace_end)
        d->trace_end(d, handle, lane, name);
    else
        sr_trace_span((sr_trace_lane)lane, name, (int64_t)handle, sr_clock_wall_ns(), -1, NULL);
}

sr_status sr_dev_wait(sr_dev *d, sr_stream s, sr_event *ev, const char *site) {
    if (skipped(site))
        return SR_OK;
    static const int lane[SR_NSTREAMS] = {SR_TRACE_COMPUTE, SR_TRACE_COMM, SR_TRACE_H2D, SR_TRACE_D2H};
    uint64_t h = sr_dev_trace_begin(d, s);
    sr_status st = d->wait(d, s, ev);
    if (h) {
        char name[48];
        snprintf(name, sizeof name, "wait %s", site);
        sr_dev_trace_end(d, h, lane[s], name);
    }
    return st;
}

sr_status sr_dev_host_wait(sr_dev *d, sr_event *ev, const char *site) {
    if (skipped(site))
        return SR_OK;
    int64_t t0 = sr_trace_on() ? sr_clock_wall_ns() : 0;
    sr_status st = d->host_wait(d, ev);
    trace_wait(SR_TRACE_HOST, site, t0);
    return st;
}

void sr_dev_declare(sr_dev *d, sr_stream s, const void *p, size_t bytes, bool write, const char *site) {
    if (d->delay_us[s] > 0 && write)
        usleep((useconds_t)d->delay_us[s]); /* the model's kernels of a unit: one delayed operation */
    if (!d->hb)
        return;
    sr_hb_issue(d->hb, (int)s, -1);
    sr_hb_access(d->hb, (int)s, p, bytes, write, site);
}

void sr_dev_collective(sr_dev *d, sr_stream on, const void *send, size_t sbytes, const void *recv, size_t rbytes,
                       const char *site) {
    if (!d->hb)
        return;
    sr_hb_issue(d->hb, SR_HB_TRANSPORT, (int)on);
    sr_hb_access(d->hb, SR_HB_TRANSPORT, send, sbytes, false, site);
    sr_hb_access(d->hb, SR_HB_TRANSPORT, recv, rbytes, true, site);
}

void sr_dev_collective_event(sr_dev *d, sr_event *ev) {
    if (d->hb)
        sr_hb_stamp(d->hb, SR_HB_TRANSPORT, &ev->hb);
}

long long sr_dev_host_waits(const sr_dev *d) { return d->hb ? sr_hb_host_waits(d->hb) : 0; }

sr_status sr_dev_download(sr_dev *d, void *host_dst, const void *src, size_t bytes, const char *site) {
    if (d->hb)
        sr_hb_track(d->hb, host_dst, bytes);
    d->copy(d, SR_STREAM_D2H, host_dst, src, bytes);
    sr_status st = skipped(site) ? SR_OK : d->sync(d, SR_STREAM_D2H);
    if (d->hb) {
        sr_hb_access(d->hb, SR_HB_HOST, host_dst, bytes, false, "the host reads what it downloaded");
        sr_hb_forget(d->hb, host_dst, bytes);
    }
    return st;
}

void sr_dev_watch(sr_dev *d, long long step) {
    if (d && step > 0)
        d->step = step; /* for a GPU deadline's message */
    if (d && d->watch)
        d->watch(d, step);
}

sr_status sr_dev_download_step(sr_dev *d, void *host_dst, const void *src, size_t bytes, const char *site) {
    bool skip_bounce = strcmp(sr_testhook()->mutate, "pageable_step") == 0; /* (the mutation suite's planted bug) */
    if (!d->bounce || bytes > d->bounce_bytes || skip_bounce) {
        sr_status st = d->pageable_check ? d->pageable_check(d, host_dst, bytes, site) : SR_OK;
        return st != SR_OK ? st : sr_dev_download(d, host_dst, src, bytes, site);
    }
    sr_status st = sr_dev_download(d, d->bounce, src, bytes, site);
    if (st == SR_OK)
        memcpy(host_dst, d->bounce, bytes);
    return st;
}

sr_status sr_dev_upload(sr_dev *d, void *dst, const void *host_src, size_t bytes, const char *site) {
    /* ordered after all work issued before, on every stream, as a
     * synchronous copy is (uploads are set-up and resume, never a step) */
    for (int s = 0; s < SR_NSTREAMS; s++) {
        sr_event ev = {0};
        if (s == SR_STREAM_H2D)
            continue;
        d->record(d, &ev, (sr_stream)s);
        d->wait(d, SR_STREAM_H2D, &ev);
    }
    if (d->hb)
        sr_hb_track(d->hb, host_src, bytes);
    d->copy(d, SR_STREAM_H2D, dst, host_src, bytes);
    sr_status st = skipped(site) ? SR_OK : d->sync(d, SR_STREAM_H2D);
    if (d->hb) {
        sr_hb_access(d->hb, SR_HB_HOST, host_src, bytes, true, "the host may reuse what it uploaded");
        sr_hb_forget(d->hb, host_src, bytes);
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* What every table's primitives tell the happens-before checker: one owner
 * of the accesses each call declares, so the cpu, fake and cuda tables are
 * held to the same ordering. */

static void hb_op(sr_dev *d, sr_stream s) {
    if (d->hb)
        sr_hb_issue(d->hb, (int)s, -1);
}
static void hb_rd(sr_dev *d, sr_stream s, const void *p, size_t bytes, const char *what) {
    if (d->hb)
        sr_hb_access(d->hb, (int)s, p, bytes, false, what);
}
static void hb_wr(sr_dev *d, sr_stream s, const void *p, size_t bytes, const char *what) {
    if (d->hb)
        sr_hb_access(d->hb, (int)s, p, bytes, true, what);
}

sr_status sr_dev_hb_alloc(sr_dev *d, const void *p, size_t bytes) {
    return p && d->hb ? sr_hb_track(d->hb, p, bytes) : SR_OK;
}
void sr_dev_hb_free(sr_dev *d, const void *p, size_t bytes) {
    if (p && d->hb)
        sr_hb_forget(d->hb, p, bytes);
}
void sr_dev_hb_memset(sr_dev *d, sr_stream s, const void *dst, size_t bytes) {
    hb_op(d, s);
    hb_wr(d, s, dst, bytes, "memset");
}
void sr_dev_hb_copy(sr_dev *d, sr_stream s, const void *dst, const void *src, size_t bytes) {
    hb_op(d, s);
    hb_rd(d, s, src, bytes, "copy (source)");
    hb_wr(d, s, dst, bytes, "copy (destination)");
}
void sr_dev_hb_record(sr_dev *d, sr_stream s, sr_event *ev) {
    if (d->hb) {
        sr_hb_issue(d->hb, (int)s, -1);
        sr_hb_stamp(d->hb, (int)s, &ev->hb);
    }
}
void sr_dev_hb_wait(sr_dev *d, sr_stream s, const sr_event *ev) {
    if (d->hb) {
        sr_hb_issue(d->hb, (int)s, -1);
        sr_hb_merge(d->hb, (int)s, &ev->hb);
    }
}
void sr_dev_hb_host_wait(sr_dev *d, const sr_event *ev) {
    if (d->hb)
        sr_hb_host_wait(d->hb, &ev->hb, "host_wait");
}
void sr_dev_hb_sync(sr_dev *d, sr_stream s) {
    if (d->hb) {
        sr_hb_clock c;
        sr_hb_stamp(d->hb, (int)s, &c);
        sr_hb_host_wait(d->hb, &c, "sync");
    }
}
void sr_dev_hb_cast(sr_dev *d, sr_stream s, const void *dst, const float *src, size_t n) {
    hb_op(d, s);
    hb_rd(d, s, src, n * 4, "cast_f32_bf16 (source)");
    hb_wr(d, s, dst, n * 2, "cast_f32_bf16 (destination)");
}
void sr_dev_hb_fold(sr_dev *d, sr_stream s, const float *acc, const void *src, size_t n, bool add) {
    hb_op(d, s);
    hb_rd(d, s, src, n * 2, "fold_bf16 (source)");
    if (add)
        hb_rd(d, s, acc, n * 4, "fold_bf16 (accumulator)");
    hb_wr(d, s, acc, n * 4, "fold_bf16 (accumulator)");
}
void sr_dev_hb_add(sr_dev *d, sr_stream s, const float *acc, const float *src, size_t n) {
    hb_op(d, s);
    hb_rd(d, s, src, n * 4, "add_f32 (source)");
    hb_rd(d, s, acc, n * 4, "add_f32 (accumulator)");
    hb_wr(d, s, acc, n * 4, "add_f32 (accumulator)");
}
void sr_dev_hb_sum_squares(sr_dev *d, sr_stream s, const double *out, const float *x, size_t n) {
    hb_op(d, s);
    hb_rd(d, s, x, n * 4, "sum_squares (source)");
    hb_wr(d, s, out, sizeof *out, "sum_squares (result)");
}
void sr_dev_hb_loss_sum(sr_dev *d, sr_stream s, const double *acc, const float *losses, size_t n, bool add) {
    hb_op(d, s);
    hb_rd(d, s, losses, n * 4, "loss_sum (losses)");
    if (add)
        hb_rd(d, s, acc, sizeof *acc, "loss_sum (accumulator)");
    hb_wr(d, s, acc, sizeof *acc, "loss_sum (accumulator)");
}
void sr_dev_hb_adamw(sr_dev *d, sr_stream s, const sr_adamw_launch *l) {
    hb_op(d, s);
    if (l->sumsq)
        hb_rd(d, s, l->sumsq, sizeof *l->sumsq, "adamw (the sum of squares of its clipping scale)");
    for (int i = 0; d->hb && i < l->nsegs; i++) {
        const sr_adamw_segment *g = &l->segs[i];
        hb_rd(d, s, l->grads + g->off, g->n * 4, "adamw (gradients)");
        hb_rd(d, s, l->params + g->off, g->n * 4, "adamw (parameters)");
        hb_wr(d, s, l->params + g->off, g->n * 4, "adamw (parameters)");
        hb_rd(d, s, l->m + g->off, g->n * 4, "adamw (m)");
        hb_wr(d, s, l->m + g->off, g->n * 4, "adamw (m)");
        hb_rd(d, s, l->v + g->off, g->n * 4, "adamw (v)");
        hb_wr(d, s, l->v + g->off, g->n * 4, "adamw (v)");
        if (l->params16)
            hb_wr(d, s, (uint16_t *)l->params16 + g->off, g->n * 2, "adamw (the parameters' bf16 copy)");
    }
}

/* ------------------------------------------------------------------------ */
/* host buffers the device reads asynchronously */

void *sr_dev_io_alloc(sr_dev *d, size_t bytes) {
    return d->kind == SR_DEV_CUDA ? d->alloc(d, SR_SPACE_PINNED, SR_MEM_OTHER, bytes) : sr_malloc(bytes);
}

void sr_dev_io_free(sr_dev *d, void *p) {
    if (d && d->kind == SR_DEV_CUDA)
        d->free(d, p);
    else
        free(p);
}

void sr_device_own_bytes(sr_dev_kind kind, size_t own[SR_NSPACE]) {
    if (kind != SR_DEV_CUDA)
        return;
    own[SR_SPACE_DEVICE] += SR_CUDA_LT_WORKSPACE_BYTES + (size_t)SR_NSTREAMS * SR_CUDA_SCRATCH_BYTES;
    own[SR_SPACE_PINNED] += SR_CUDA_BOUNCE_BYTES;
}

size_t sr_device_reserve_bytes(sr_dev_kind kind) {
    return kind == SR_DEV_CUDA ? (size_t)512 << 20 : 0; /* the CUDA context and modules (estimate) */
}
