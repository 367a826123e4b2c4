/* ckpt_async.c — the asynchronous save (checkpoint.async): the snapshot of
 * this rank's state in buffers of its own, a writer thread that writes the
 * shard file while training goes on, and the commit once every rank's
 * writer is done (sr_ckpt_poll), the save in flight finished first by the
 * next save, a preemption or the end of the run.  Its own file: the part a
 * crash test reasons about alone.  Part of the ckpt module (ckpt.h,
 * ckpt_impl.h). */
#include "srconfig.h"

#include "ckpt_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fsio.h"
#include "mem.h"
#include "provenance.h"
#include "shardfile.h"
#include "testhook.h"
#include "trace.h"

/* ------------------------------------------------------------------------ */
/* asynchronous saves */

static uint64_t async_max_bytes(const sr_ckpt_opts *o, int local_size);

/* The save in flight: begun (temporary directory made, snapshot taken),
 * written by this rank's writer thread, committed by sr_ckpt_poll once
 * every rank's writer is done. */
struct pending {
    sr_ckpt *c;
    sr_ckpt_progress p;
    char tmp[PATH_MAX], final[PATH_MAX];
    records rec;
    unsigned char *mine;
    const sr_manifest *proto;
    pthread_t thread;
    bool thread_started;
    atomic_bool done;      /* the writer finished: mine holds its record */
    double t0, snapshot_s; /* start, and the stall of the snapshot */
    int64_t trace_t0;      /* log.trace_steps: the write's span began (0: not traced) */
    double write_s;        /* the writer's time (set before done) */
    sr_mem_ctx *mem;       /* the starting thread's accounting (virtual ranks) */
    int log_rank, log_world;
};

static const sr_manifest state_proto = {.state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32}};

static void *writer_main(void *arg) {
    struct pending *pd = arg;
    sr_mem_bind(pd->mem);
    sr_log_bind_rank(pd->log_rank, pd->log_world);
    int64_t delay = sr_testhook()->ckpt_write_delay_ms;
    if (delay > 0) {
        struct timespec ts = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    double t0 = sr_clock_mono_s();
    ckpt_traced_write(pd->c, &pd->p, pd->tmp, pd->proto, pd->mine, pd->c->snap,
                      pd->c->tier ? "memory checkpoint write" : "checkpoint write (background)", pd->trace_t0);
    if (pd->c->tier) /* the replica exchange with the buddies, on this thread too */
        ckpt_tier_replicate(pd->c, pd->p.step, pd->tmp, (int64_t)pd->rec.nchunks, pd->mine);
    pd->write_s = sr_clock_mono_s() - t0;
    atomic_store(&pd->done, true);
    return NULL;
}

/* The writer as a thread of its own: below the training threads (Linux: a
 * thread's own nice value), so it takes the cores they leave idle; if that
 * fails it just competes at normal priority. */
static void *writer_thread(void *arg) {
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    return writer_main(arg);
}

void ckpt_pending_free(sr_ckpt *c) {
    struct pending *pd = c->pend;
    if (!pd)
        return;
    if (pd->thread_started)
        pthread_join(pd->thread, NULL);
    free(pd->mine);
    free(pd->rec.all);
    free(pd);
    c->pend = NULL;
}

/* The snapshot of this rank's state (replica 0 ranks: params, m, v of its
 * slices) in host memory allocated and touched now, when every rank's fits
 * checkpoint.async_max_mb; otherwise saves stay synchronous and rank 0
 * says why.  Collective. */
sr_status ckpt_setup_async(sr_ckpt *c) {
    const sr_ckpt_opts *o = c->o;
    if (!o->async)
        return SR_OK;
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    uint64_t elements = 0;
    for (int i = 0; s.mesh->rep_idx == 0 && i < s.nslices; i++)
        elements += s.slices[i].end - s.slices[i].begin;
    uint64_t bytes = 0, max = async_max_bytes(o, c->w->local_size);
    bool fits = sr_ckpt_snapshot_fits(o, sizeof(float) * elements, c->w->local_size, &bytes);
    double vals[2] = {fits ? 0.0 : 1.0, (double)bytes};
    sr_status st = sr_ctl_sum(c->ctl, vals, 2);
    if (st != SR_OK)
        return st;
    char a[32], b[32];
    if (vals[0] > 0 && c->tier)
        return SR_OK; /* the memory tier turns itself off, saying why */
    if (vals[0] > 0) {
        sr_log_warn("checkpoint.async: the snapshot of %s per rank does not fit checkpoint.async_max_mb (%s%s) on %.0f "
                    "rank%s: saves are synchronous (hint: raise checkpoint.async_max_mb, or use more ranks)",
                    ckpt_size_str(a, sizeof a, (double)bytes), ckpt_size_str(b, sizeof b, (double)max),
                    o->async_max_mb > 0 ? "" : ": 25% of the node's memory divided by its ranks", vals[0],
                    vals[0] == 1 ? "" : "s");
        return SR_OK;
    }
    sr_status mine = SR_OK;
    for (int k = 0; k < SR_NSTATE && elements > 0 && mine == SR_OK; k++) {
        size_t n = (size_t)elements * sizeof(float);
        c->snap[k] = sr_fsdp_host_alloc(c->f, SR_MEM_CKPT_STAGING, n);
        if (!c->snap[k])
            mine = sr_error(SR_ERR_INTERNAL,
                            "out of memory for the checkpoint snapshot (%s; hint: "
                            "checkpoint.async: false)",
                            ckpt_size_str(a, sizeof a, (double)bytes));
        else
            memset(c->snap[k], 0, n); /* touched now, not at the first save */
    }
    c->snap_elements = elements;
    st = sr_ctl_agree(c->ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    c->async = st == SR_OK;
    return st;
}

bool sr_ckpt_snapshot_fits(const sr_ckpt_opts *o, uint64_t state_bytes, int local_size, uint64_t *snapshot_bytes) {
    uint64_t snap = state_bytes <= UINT64_MAX / SR_NSTATE ? SR_NSTATE * state_bytes : UINT64_MAX;
    *snapshot_bytes = snap;
    return o->dir && o->dir[0] && o->async && snap != UINT64_MAX && snap <= async_max_bytes(o, local_size);
}

bool sr_ckpt_async(const sr_ckpt *c) { return c && c->async; }
int64_t sr_ckpt_pending_step(const sr_ckpt *c) { return c && c->pend ? c->pend->p.step : -1; }

/* Copies this rank's state into the snapshot through the engine (a
 * download where it is device memory; a copy over the OpenMP team where it
 * is host memory), ordered after the step's update by sr_fsdp_state_sync. */
static sr_status take_snapshot(sr_ckpt *c) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    if (s.mesh->rep_idx != 0)
        return SR_OK;
    sr_status st = sr_fsdp_state_sync(c->f);
    for (int k = 0; k < SR_NSTATE && st == SR_OK; k++) {
        size_t at = 0;
        for (int i = 0; i < s.nslices && st == SR_OK; i++) {
            size_t n = s.slices[i].end - s.slices[i].begin;
            st = sr_fsdp_state_read(c->f, k, s.slices[i].local, n, c->snap[k] + at);
            at += n;
        }
    }
    return st == SR_OK ? SR_OK : SR_ERR_INTERNAL;
}

sr_status sr_ckpt_save_async(sr_ckpt *c, const sr_ckpt_progress *p, int64_t *waited_for) {
    if (waited_for)
        *waited_for = -1;
    if (!c->dir)
        return SR_OK;
    if (!c->async)
        return sr_ckpt_save(c, p, NULL);
    if (c->pend) {
        int64_t prev = c->pend->p.step;
        double t = sr_clock_mono_s();
        sr_log_info("checkpoint: step %lld is due while step %lld is still being written: waiting for it",
                    (long long)p->step, (long long)prev);
        sr_status st = sr_ckpt_poll(c, p->step, true);
        if (st != SR_OK)
            return st;
        sr_log_info("checkpoint: waited %.2f s for the save of step %lld", sr_clock_mono_s() - t, (long long)prev);
        if (waited_for)
            *waited_for = prev;
    }
    struct pending *pd = sr_calloc(1, sizeof *pd);
    if (!pd)
        return sr_error_oom("the checkpoint in flight");
    *pd = (struct pending){.c = c,
                           .p = *p,
                           .proto = &state_proto,
                           .t0 = sr_clock_mono_s(),
                           .mem = sr_mem_bound(),
                           .log_rank = sr_log_rank(),
                           .log_world = c->w->size};
    atomic_init(&pd->done, false);
    FMT(pd->tmp, "%s/.step_%08lld.tmp", c->dir, (long long)p->step);
    FMT(pd->final, "%s/step_%08lld", c->dir, (long long)p->step);
    c->pend = pd;
    if (!c->tier)
        sr_log_info("checkpoint: saving step %lld to %s (asynchronous: a snapshot, then a background write)",
                    (long long)p->step, pd->final);
    sr_status st = ckpt_save_begin(c, pd->tmp);
    if (st == SR_OK)
        st = ckpt_records_alloc(c, pd->proto, &pd->rec, &pd->mine);
    if (st != SR_OK) {
        ckpt_pending_free(c);
        return c->tier ? st /* the tier's caller says what it was */
                       : sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                                       (long long)p->step);
    }
    sr_ctl_word *me = (sr_ctl_word *)pd->mine;
    int64_t ts0 = sr_trace_on() ? sr_clock_wall_ns() : 0;
    sr_status snap_st = take_snapshot(c);
    if (ts0)
        sr_trace_span(SR_TRACE_CKPT, "checkpoint snapshot", ts0, sr_clock_wall_ns(), -1, NULL);
    if (snap_st != SR_OK) {
        /* reported through the records at the commit, like a failed write */
        me->status = SR_ERR_INTERNAL;
        FMT(me->msg, "%s", sr_error_message());
        atomic_store(&pd->done, true);
    } else if (c->snap_elements == 0 && !c->tier) {
        atomic_store(&pd->done, true); /* nothing to write on this rank */
    } else if ((pd->trace_t0 = sr_trace_late_begin()), pthread_create(&pd->thread, NULL, writer_thread, pd) == 0) {
        pd->thread_started = true;
    } else {
        writer_main(pd); /* no thread: write now (the save is then synchronous on this rank) */
    }
    pd->snapshot_s = sr_clock_mono_s() - pd->t0;
    return SR_OK;
}

sr_status sr_ckpt_poll(sr_ckpt *c, int64_t now_step, bool wait) {
    if (!c || !c->pend)
        return SR_OK;
    struct pending *pd = c->pend;
    if (wait && pd->thread_started) {
        pthread_join(pd->thread, NULL);
        pd->thread_started = false;
    }
    double busy = atomic_load(&pd->done) ? 0.0 : 1.0;
    sr_status st = sr_ctl_sum(c->ctl, &busy, 1);
    if (st != SR_OK || busy > 0)
        return st; /* a transport failure ends the run; busy: ask again at the next step */
    if (pd->thread_started) {
        pthread_join(pd->thread, NULL);
        pd->thread_started = false;
    }
    uint64_t total = 0;
    bool transport_failed = false;
    st = ckpt_gather_records(c, &pd->rec, pd->mine, &total, &transport_failed);
    sr_ckpt_progress p = pd->p;
    if (!transport_failed) {
        st = ckpt_save_commit(c, &p, pd->tmp, pd->final, &pd->rec, st);
        sr_status fin =
            sr_ctl_agree(c->ctl, ckpt_committer(c) ? st : SR_OK, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
        if (st == SR_OK)
            st = fin;
    }
    double took = sr_clock_mono_s() - pd->t0, snap = pd->snapshot_s, write = pd->write_s;
    ckpt_pending_free(c);
    if (st != SR_OK)
        return transport_failed || c->tier /* the tier's caller says what it was */
                   ? st
                   : sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                                   (long long)p.step);
    c->last_step = p.step;
    if (c->tier) {
        ckpt_tier_committed(c, p.step, now_step, total, snap, write, took);
        return SR_OK;
    }
    c->commit = (sr_ckpt_commit){p.step, now_step, took, total, true};
    c->have_commit = true;
    sr_log_info("checkpoint: step %lld saved (asynchronous: started at step %lld, committed at step %lld): %.1f MB; "
                "training stalled %.3f s for the snapshot, the background write took %.2f s (%.0f MB/s), %.2f s from "
                "start to commit",
                (long long)p.step, (long long)p.step, (long long)now_step, (double)total / 1e6, snap, write,
                write > 0 ? (double)total / c->w->size / 1e6 / write : 0.0, took);
    return SR_OK;
}

/* checkpoint.async_max_mb in bytes: the key, or 25 % of the node's memory
 * divided by its `local_size` ranks when it is 0. */
static uint64_t async_max_bytes(const sr_ckpt_opts *o, int local_size) {
    if (o->async_max_mb > 0)
        return (uint64_t)o->async_max_mb << 20;
    size_t cap = sr_mem_side_copy_cap(local_size);
    return cap == SIZE_MAX ? UINT64_MAX : (uint64_t)cap;
}
