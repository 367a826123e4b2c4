/* plane.c — the data plane of the engine's collectives; see plane.h for
 * what it owns. */
#include "srconfig.h"

#include "plane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"
#include "config.h"
#include "flight.h"
#include "ledger.h"
#include "mem.h"
#include "testhook.h"

enum { MAX_GROUPS = 8 };

struct sr_plane {
    sr_dev *dev;
    sr_transport *tp;
    sr_plane_opts o;
    sr_group *groups[MAX_GROUPS]; /* declared through sr_plane_group, in order (NCCL's splits) */
    int ngroups;
    sr_nccl *nccl; /* open when the run needs it, else NULL */
    void *hstage;  /* host staging of virtual ranks on one GPU (staged) */
    size_t hstage_bytes;
};

bool sr_plane_needs_nccl(sr_dev_kind kind, int world_size, int backend) {
    return kind == SR_DEV_CUDA && (world_size > 1 || backend == SR_BACKEND_NCCL || sr_testhook()->nccl_size1);
}

size_t sr_plane_reserve_bytes(sr_dev_kind kind, int world_size, int backend, int ncomms) {
    const size_t per_comm = (size_t)256 << 20; /* NCCL's buffers per communicator (estimate) */
    return sr_plane_needs_nccl(kind, world_size, backend) ? (size_t)ncomms * per_comm : 0;
}

sr_status sr_plane_open(sr_plane **out, sr_dev *d, sr_transport *tp, const sr_plane_opts *o) {
    *out = sr_calloc(1, sizeof **out);
    if (!*out)
        return sr_error_oom("the data plane");
    **out = (sr_plane){.dev = d, .tp = tp, .o = *o};
    return SR_OK;
}

sr_status sr_plane_group(sr_plane *p, const int *ranks, int n, const char *name, sr_group **out) {
    if (p->ngroups == MAX_GROUPS)
        return sr_error(SR_ERR_INTERNAL, "the data plane holds at most %d groups", MAX_GROUPS);
    sr_status st = sr_group_create(p->tp, ranks, n, out);
    if (st != SR_OK)
        return st;
    sr_group_set_name(*out, name);
    p->groups[p->ngroups++] = *out;
    return SR_OK;
}

sr_status sr_plane_start(sr_plane *p, sr_world *w) {
    if (p->dev->dry || !sr_plane_needs_nccl(p->dev->kind, w->size, p->o.backend))
        return SR_OK;
    sr_nccl_opts no = {p->o.timeout_s, p->o.interface, sr_testhook()->nccl_size1};
    return sr_nccl_open(&p->nccl, w, p->dev, p->tp, p->groups, p->ngroups, &no);
}

void sr_plane_stop(sr_plane *p) {
    if (!p)
        return;
    sr_nccl_close(p->nccl);
    p->nccl = NULL;
}

void sr_plane_close(sr_plane *p) {
    if (!p)
        return;
    sr_plane_stop(p);
    free(p->hstage);
    free(p);
}

bool sr_plane_on_nccl(const sr_plane *p, const sr_group *g) { return p->nccl && sr_group_device_comm(g); }

const char *sr_plane_nccl_version(const sr_plane *p) { return p && p->nccl ? sr_nccl_version() : NULL; }

size_t sr_plane_device_bytes(const sr_plane *p) { return p ? sr_nccl_device_bytes(p->nccl) : 0; }

const char *sr_plane_describe(const sr_plane *p, int world_size, char *buf, size_t n) {
    if (p && p->nccl)
        snprintf(buf, n, "nccl %s (control plane tcp)", sr_nccl_version());
    else
        snprintf(buf, n, "%s", world_size > 1 ? "tcp" : "none (1 rank)");
    return buf;
}

/* Virtual ranks on one GPU (tests/test_vranks --device cuda, the GPU
 * check's proof of the multi-rank engine where NCCL cannot run two ranks):
 * their loop plane moves host memory, so the collective is staged — the
 * host waits for the comm stream, downloads the send buffer, runs the
 * transport's collective and uploads the result.  Synchronous, and only
 * for ranks without NCCL communicators (a real multi-GPU run has them). */
static sr_status staged(sr_plane *p, sr_coll_kind kind, sr_group *g, void *recv, const void *send, size_t count,
                        sr_dtype dt, sr_event *ev) {
    sr_dev *d = p->dev;
    size_t es = sr_dtype_size(dt), n = (size_t)sr_group_size(g);
    size_t sb = (kind == SR_COLL_REDUCE_SCATTER ? n : 1) * count * es,
           rb = (kind == SR_COLL_ALLGATHER ? n : 1) * count * es;
    if (p->hstage_bytes < sb + rb) {
        void *np = sr_realloc(p->hstage, sb + rb);
        if (!np)
            return sr_error_oom("the staging buffer of a virtual rank's collective");
        p->hstage = np;
        p->hstage_bytes = sb + rb;
    }
    /* pageable staging: a synchronous path (virtual ranks are a test of the
     * engine on one GPU, not a production step), so its downloads block
     * inside the driver and are not sr_dev_download_step's */
    char *hs = p->hstage, *hr = hs + sb;
    sr_event before = {0};
    d->record(d, &before, SR_STREAM_COMM);
    sr_status st = sr_dev_host_wait(d, &before, "download");
    if (st == SR_OK)
        st = sr_dev_download(d, hs, send, sb, "download");
    sr_flight_plane was = sr_flight_set_host_plane(SR_FLIGHT_STAGING); /* the transport records it so */
    if (st == SR_OK)
        st = kind == SR_COLL_ALLGATHER        ? sr_allgather(g, hr, hs, count, dt, NULL)
             : kind == SR_COLL_REDUCE_SCATTER ? sr_reduce_scatter(g, hr, hs, count, dt, SR_OP_SUM, NULL)
                                              : sr_allreduce(g, hs, count, dt, SR_OP_SUM, NULL);
    sr_flight_set_host_plane(was);
    if (st == SR_OK)
        st = sr_dev_upload(d, recv, kind == SR_COLL_ALLREDUCE ? hs : hr, rb, "upload");
    d->record(d, ev, SR_STREAM_COMM);
    return st;
}

/* The choice (plane.h): NCCL; a copy for one rank off the cpu table (the
 * host transport cannot read device memory); staging on a GPU without a
 * communicator (and on the fake table under SHARDRUN_TEST_STAGED); else
 * the host transport's request on host-readable memory. */
sr_status sr_plane_collective(sr_plane *p, sr_coll_kind kind, const char *what, sr_group *g, void *recv, size_t rbytes,
                              const void *send, size_t sbytes, size_t count, sr_dtype dt, sr_event *ev) {
    sr_dev *d = p->dev;
    *ev = (sr_event){0};
    if (sr_group_size(g) > 1 && sr_ledger_bound()) {
        /* what this rank moves (ledger.h) */
        size_t full = kind == SR_COLL_ALLGATHER        ? rbytes
                      : kind == SR_COLL_REDUCE_SCATTER ? sbytes
                                                       : count * sr_dtype_size(dt);
        sr_ledger_collective(kind == SR_COLL_ALLREDUCE, (double)full, sr_group_size(g));
    }
    if (d->dry && sr_group_size(g) > 1) { /* counted, never run */
        d->record(d, ev, SR_STREAM_COMM);
        return SR_OK;
    }
    if (sr_plane_on_nccl(p, g)) {
        sr_dev_declare(d, SR_STREAM_COMM, send, sbytes, false, what);
        sr_dev_declare(d, SR_STREAM_COMM, recv, rbytes, true, what);
        /* the engine's collective kinds are the NCCL plane's, value for value */
        _Static_assert(SR_COLL_ALLGATHER == (int)SR_NCCL_ALLGATHER, "all-gather");
        _Static_assert(SR_COLL_REDUCE_SCATTER == (int)SR_NCCL_REDUCE_SCATTER, "reduce-scatter");
        _Static_assert(SR_COLL_ALLREDUCE == (int)SR_NCCL_ALLREDUCE, "all-reduce");
        sr_status st = sr_nccl_collective(p->nccl, (sr_nccl_kind)kind, g, recv, rbytes, send, sbytes, count, dt);
        d->record(d, ev, SR_STREAM_COMM);
        return st;
    }
    if (sr_group_size(g) == 1 && d->kind != SR_DEV_CPU) {
        static const char *const names[] = {"all-gather", "reduce-scatter", "all-reduce"};
        uint64_t fl = sr_flight_enter(SR_FLIGHT_COPY, -1, names[kind], sr_group_name(g), 1, count * sr_dtype_size(dt));
        sr_flight_start(fl); /* issued on the comm stream; a copy waits on no peer */
        if (kind != SR_COLL_ALLREDUCE && recv != send)
            d->copy(d, SR_STREAM_COMM, recv, send, count * sr_dtype_size(dt));
        d->record(d, ev, SR_STREAM_COMM);
        return SR_OK;
    }
    if (d->kind == SR_DEV_CUDA || (d->kind == SR_DEV_FAKE && sr_testhook()->staged))
        return staged(p, kind, g, recv, send, count, dt, ev);
    sr_dev_collective(d, SR_STREAM_COMM, send, sbytes, recv, rbytes, what);
    sr_req *req = NULL;
    sr_status st = kind == SR_COLL_ALLGATHER        ? sr_allgather(g, recv, send, count, dt, &req)
                   : kind == SR_COLL_REDUCE_SCATTER ? sr_reduce_scatter(g, recv, send, count, dt, SR_OP_SUM, &req)
                                                    : sr_allreduce(g, recv, count, dt, SR_OP_SUM, &req);
    sr_dev_collective_event(d, ev);
    sr_event_from_req(ev, req);
    return st;
}
