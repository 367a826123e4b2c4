/* comm_nccl_cuda.c — the NCCL-calling half of the NCCL data plane, in the
 * CUDA module (cudamod.h): sr_nccl_cuda_impl, which comm_nccl.c's
 * functions dispatch to; see comm_nccl.h.
 *
 * Threads and NCCL: one mutex (nccl_mu) is held around every NCCL call,
 * because ncclCommAbort requires that no other thread is inside NCCL.  The
 * communicators are nonblocking (config.blocking = 0): a call that answers
 * ncclInProgress is polled with ncclCommGetAsyncError, the mutex released
 * between polls, up to comm.timeout_s, and nothing else is enqueued on the
 * comm stream meanwhile.  The watchdog thread (0.5 s tick) binds the GPU,
 * advances the ring of issued collectives with sr_cuda_query (which clears
 * the NotReady it may leave as the last error), asks every
 * communicator for an asynchronous error, and fails the plane when the
 * oldest incomplete collective is comm.timeout_s old or NCCL reports an
 * error.  Failing is: abort every communicator (children first, then the
 * world) from a helper thread, wait for it at most 5 s (_exit(69) if the
 * abort itself hangs), run the post-mortem over the TCP transport (which
 * peer's connection closed), print one message and _exit(69): after an
 * abort nothing may touch the GPU's memory (no cudaFree, no
 * synchronisation), so the process does not unwind. */
#include "srconfig.h"

#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "flight.h"
#include "mem.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "signals.h"
#include "testhook.h"

_Static_assert(SR_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "the id size");

static const char *nccl_version(void) {
    static char v[32];
    int code = 0;
    if (!v[0] && ncclGetVersion(&code) == ncclSuccess)
        snprintf(v, sizeof v, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    return v[0] ? v : "?";
}

static sr_status nccl_exchange_id(sr_world *w, unsigned char id[SR_NCCL_ID_BYTES], double timeout_s) {
    /* rank 0 takes part even when ncclGetUniqueId failed, so every rank
     * learns it (not a PMIx timeout) */
    struct {
        ncclUniqueId id;
        int32_t failed;
    } mine, *all = sr_calloc((size_t)w->size, sizeof *all);
    if (!all)
        return sr_error_oom("the NCCL id exchange");
    memset(&mine, 0, sizeof mine);
    sr_status st = SR_OK;
    if (w->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&mine.id);
        if (r != ncclSuccess) {
            st = sr_error(sr_nccl_status(r), "ncclGetUniqueId on rank 0: %s (%s)", ncclGetErrorString(r),
                          ncclGetLastError(NULL));
            mine.failed = 1;
        }
    }
    sr_status gst = sr_world_allgather(w, "shardrun.nccl_id", &mine, sizeof mine, all, timeout_s);
    if (st == SR_OK && gst == SR_OK && all[0].failed)
        st = sr_error(SR_ERR_PEER, "rank 0 could not make the NCCL unique id (see its message)");
    if (st == SR_OK)
        st = gst;
    if (st == SR_OK)
        memcpy(id, &all[0].id, SR_NCCL_ID_BYTES);
    free(all);
    return st;
}

#define RING 4096

/* Collectives and splits that actually ran (logged at close: the GPU
 * check's proof that NCCL, not a copy, moved the bytes). */
typedef struct {
    long allgather, reduce_scatter, allreduce, split;
} sr_nccl_counts;

typedef struct {
    long seq;
    sr_nccl_kind kind;
    const char *group;
    size_t bytes;
    double issued;   /* monotonic seconds */
    uint64_t flight; /* its flight-recorder entry (flight.h), or 0 */
} ring_op;

struct sr_nccl {
    sr_world *w;
    sr_dev *d;
    sr_transport *tp;
    sr_cuda_ctx *ctx;
    cudaStream_t stream;
    double timeout_s;
    pthread_mutex_t nccl_mu; /* held around every NCCL call */
    ncclComm_t world;
    ncclComm_t *children; /* one per group that got a communicator */
    int nchildren;
    size_t device_bytes;
    /* the ring of issued collectives, guarded by ring_mu */
    pthread_mutex_t ring_mu;
    cudaEvent_t ev[RING];
    ring_op ops[RING];
    long head, tail;     /* issued, completed */
    double oldest_since; /* when ops[tail] became the oldest */
    long seq;
    sr_nccl_counts counts;
    sr_status broken;
    bool healthy; /* opened completely and never failed: close finalizes, else aborts */
    bool aborted; /* under nccl_mu: the communicators are gone; no NCCL call may follow */
    /* the watchdog */
    pthread_t watchdog;
    bool watching, stop;
    pthread_cond_t stop_cv;
};

static const char *const kind_names[] = {"all-gather", "reduce-scatter", "all-reduce"};

/* Called with nccl_mu held, after finding the communicators aborted: the
 * watchdog's fail_plane is ending the process with the rank's one message
 * (it claimed it first), so this thread waits for that exit instead of
 * returning a second, empty error that would race it. */
static _Noreturn void await_plane_exit(sr_nccl *n) {
    pthread_mutex_unlock(&n->nccl_mu);
    for (;;)
        pause();
}

/* Polls a nonblocking communicator until its pending operation resolves or
 * the deadline passes; nccl_mu is held on entry and on return, released
 * between polls. */
static ncclResult_t settle(sr_nccl *n, ncclComm_t comm, ncclResult_t r, double deadline) {
    unsigned sleep_us = 50;
    while (r == ncclInProgress) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(comm, &async);
        if (q != ncclSuccess)
            return q;
        if (async != ncclInProgress)
            return async;
        if (sr_clock_mono_s() > deadline)
            return ncclInProgress;
        pthread_mutex_unlock(&n->nccl_mu);
        sr_cuda_beat(n->ctx, NULL); /* polling with its own deadline: not stuck in the driver */
        usleep(sleep_us);
        sleep_us = sleep_us < 20000 ? sleep_us * 2 : 20000;
        pthread_mutex_lock(&n->nccl_mu);
        if (n->aborted) /* the watchdog aborted meanwhile: the communicator is gone */
            await_plane_exit(n);
    }
    return r;
}

static sr_status nccl_error(ncclResult_t r, ncclComm_t comm, const char *what) {
    if (r == ncclInProgress)
        return sr_error(SR_ERR_PEER,
                        "NCCL: %s did not complete within comm.timeout_s (a peer is missing or slow) (hint: "
                        "NCCL_DEBUG=WARN shows what NCCL waits for)",
                        what);
    sr_status st = sr_nccl_status(r);
    return sr_error(st, "NCCL: %s failed on rank %d: %s%s%s (hint: %s)", what, sr_log_rank(), ncclGetErrorString(r),
                    ncclGetLastError(comm)[0] ? ": " : "", ncclGetLastError(comm),
                    st == SR_ERR_PEER ? "a peer or the network failed; NCCL_DEBUG=INFO shows which"
                                      : "this is a bug in how shardrun calls NCCL, please report it");
}

/* comm.interface (an interface name or an IPv4 address) as NCCL's
 * NCCL_SOCKET_IFNAME, when the user has not set that. */
static sr_status set_socket_ifname(const char *interface) {
    if (!interface || !*interface || getenv("NCCL_SOCKET_IFNAME"))
        return SR_OK;
    struct in_addr want;
    if (inet_pton(AF_INET, interface, &want) != 1)
        return setenv("NCCL_SOCKET_IFNAME", interface, 0) == 0 ? SR_OK : sr_error_oom("the environment");
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0)
        return sr_error(SR_ERR_CONFIG, "comm.interface %s: cannot list the interfaces (getifaddrs)", interface);
    const char *name = NULL;
    for (struct ifaddrs *i = ifs; i && !name; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == want.s_addr)
            name = i->ifa_name;
    sr_status st = name ? (setenv("NCCL_SOCKET_IFNAME", name, 0) == 0 ? SR_OK : sr_error_oom("the environment"))
                        : sr_error(SR_ERR_CONFIG,
                                   "comm.interface %s: no interface of this host has that address (hint: an "
                                   "interface name such as ib0, or NCCL_SOCKET_IFNAME)",
                                   interface);
    freeifaddrs(ifs);
    return st;
}

/* ---- failure: abort, post-mortem, exit 69 ------------------------------ */

static void *abort_main(void *arg) {
    sr_nccl *n = arg;
    pthread_mutex_lock(&n->nccl_mu);
    for (int i = n->nchildren - 1; i >= 0; i--)
        if (n->children[i])
            ncclCommAbort(n->children[i]);
    if (n->world)
        ncclCommAbort(n->world);
    n->aborted = true;
    pthread_mutex_unlock(&n->nccl_mu);
    return NULL;
}

static bool abort_done;
static pthread_mutex_t abort_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t abort_cv = PTHREAD_COND_INITIALIZER;

static void *abort_wrapper(void *arg) {
    abort_main(arg);
    pthread_mutex_lock(&abort_mu);
    abort_done = true;
    pthread_cond_broadcast(&abort_cv);
    pthread_mutex_unlock(&abort_mu);
    return NULL;
}

/* Never returns.  The first caller (the watchdog, or a host wait past its
 * deadline) aborts; a second one waits for the first to end the process.
 * remote: NCCL blamed a peer (ncclRemoteError).  The post-mortem then waits
 * REMOTE_EXTRA_S longer for a closed transport connection than a rank whose
 * own NCCL failed: that rank runs the same post-mortem before it exits, and
 * with equal waits the two would each give up while the other still lives,
 * so neither message would name the rank that failed (the job templates
 * exclude the host that message names). */
#define REMOTE_EXTRA_S 3.0
static int plane_failing; /* set by fail_plane's first caller */
static void fail_plane(sr_nccl *n, const char *what, bool remote) {
    if (__atomic_exchange_n(&plane_failing, 1, __ATOMIC_ACQ_REL))
        for (;;)
            pause();
    /* this message is the rank's last: a main thread that meets the aborted
     * communicators waits for the exit (await_plane_exit) rather than
     * claiming it with an empty 69 (CI's nccl_emu.sh 41) */
    bool mine = sr_error_final_claim();
    pthread_t th;
    bool aborted = false;
    if (pthread_create(&th, NULL, abort_wrapper, n) == 0) {
        struct timespec dl = sr_clock_wall_after(5);
        pthread_mutex_lock(&abort_mu);
        int rc = 0;
        while (!abort_done && rc == 0)
            rc = pthread_cond_timedwait(&abort_cv, &abort_mu, &dl);
        aborted = abort_done;
        pthread_mutex_unlock(&abort_mu);
    }
    if (!aborted) {
        sr_flight_dump("nccl watchdog", what);
        sr_log_error("%s; ncclCommAbort did not return within 5 s: exiting", what);
        if (mine)
            sr_error_final_done();
        fflush(NULL);
        sr_signals_remove_temporaries(); /* what a signal would remove */
        _exit(sr_status_exit_code(SR_ERR_PEER));
    }
    int gone =
        sr_transport_closed_peer(n->tp, (n->timeout_s < 5.0 ? n->timeout_s : 5.0) + (remote ? REMOTE_EXTRA_S : 0));
    sr_flight_dump("nccl watchdog", what);
    if (gone >= 0)
        sr_log_error("%s; communicators aborted; post-mortem: lost the connection to rank %d (it gave up or died)",
                     what, gone);
    else
        sr_log_error("%s; communicators aborted; post-mortem: every peer's connection is alive: the plane stalled "
                     "on this rank or in NCCL, not at a lost peer (hint: NCCL_DEBUG=WARN)",
                     what);
    if (mine)
        sr_error_final_done();
    fflush(NULL);
    sr_signals_remove_temporaries(); /* what a signal would remove */
    _exit(sr_status_exit_code(SR_ERR_PEER));
}

/* Advances the ring past completed collectives (ring_mu held).  Returns the
 * CUDA error of a failed one, else cudaSuccess. */
static cudaError_t advance(sr_nccl *n) {
    while (n->tail < n->head) {
        cudaError_t q = sr_cuda_query(n->ev[n->tail % RING]);
        if (q == cudaErrorNotReady)
            return cudaSuccess;
        if (q != cudaSuccess) {
            sr_flight_end(n->ops[n->tail % RING].flight, false);
            return q;
        }
        sr_flight_end(n->ops[n->tail % RING].flight, true);
        n->tail++;
        n->oldest_since = sr_clock_mono_s();
    }
    return cudaSuccess;
}

/* Whether the plane has failed; fills what. */
static bool check_plane(sr_nccl *n, char *what, size_t size, bool deadline_passed, bool *remote) {
    *remote = false;
    pthread_mutex_lock(&n->ring_mu);
    cudaError_t ce = advance(n);
    bool failed = false;
    if (ce != cudaSuccess) {
        snprintf(what, size, "NCCL watchdog: a collective's stream failed: %s (%s)", cudaGetErrorString(ce),
                 cudaGetErrorName(ce));
        failed = true;
    } else if (n->tail < n->head) {
        double age = sr_clock_mono_s() - n->oldest_since;
        if (age >= n->timeout_s || deadline_passed) {
            const ring_op *o = &n->ops[n->tail % RING];
            snprintf(what, size,
                     "NCCL watchdog: collective %ld (%s of %zu bytes on group %s) has not completed %.0f s after it "
                     "became the oldest (comm.timeout_s %g s)",
                     o->seq, kind_names[o->kind], o->bytes, o->group, age, n->timeout_s);
            failed = true;
        }
    }
    pthread_mutex_unlock(&n->ring_mu);
    if (failed)
        return true;
    pthread_mutex_lock(&n->nccl_mu);
    for (int i = -1; i < n->nchildren && !failed && !n->aborted; i++) {
        ncclComm_t c = i < 0 ? n->world : n->children[i];
        ncclResult_t async = ncclSuccess;
        if (c && ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            snprintf(what, size, "NCCL reported an asynchronous error: %s: %s", ncclGetErrorString(async),
                     ncclGetLastError(c));
            *remote = async == ncclRemoteError;
            failed = true;
        }
    }
    pthread_mutex_unlock(&n->nccl_mu);
    return failed;
}

static void *watchdog_main(void *arg) {
    sr_nccl *n = arg;
    sr_cuda_bind(n->ctx);
    pthread_mutex_lock(&n->ring_mu);
    while (!n->stop) {
        struct timespec t = sr_clock_mono_after(0.5);
        pthread_cond_timedwait(&n->stop_cv, &n->ring_mu, &t);
        if (n->stop)
            break;
        pthread_mutex_unlock(&n->ring_mu);
        char what[512];
        bool remote;
        if (check_plane(n, what, sizeof what, false, &remote))
            fail_plane(n, what, remote);
        pthread_mutex_lock(&n->ring_mu);
    }
    pthread_mutex_unlock(&n->ring_mu);
    return NULL;
}

/* The device's host wait passed its deadline: when a collective of this
 * plane is still incomplete, the plane is what stalled.  When the plane's
 * watchdog is already ending the process, its verdict stands (fail_plane
 * waits for it): its abort may have completed the very collective this
 * check would find, and the device's deadline would then end the run as an
 * internal error (70) in place of the plane's 69. */
static void on_deadline(void *arg) {
    sr_nccl *n = arg;
    char what[512] = "";
    bool remote = false;
    if (__atomic_load_n(&plane_failing, __ATOMIC_ACQUIRE) || check_plane(n, what, sizeof what, true, &remote))
        fail_plane(n, what, remote);
}

/* ---- open and close ---------------------------------------------------- */

static sr_status init_world(sr_nccl *n, const unsigned char id[SR_NCCL_ID_BYTES]) {
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = "shardrun.world";
    double deadline = sr_clock_mono_s() + n->timeout_s;
    pthread_mutex_lock(&n->nccl_mu);
    ncclResult_t r = ncclCommInitRankConfig(&n->world, n->w->size, uid, n->w->rank, &config);
    if (n->world)
        r = settle(n, n->world, r, deadline);
    pthread_mutex_unlock(&n->nccl_mu);
    if (r == ncclInProgress)
        return sr_error(SR_ERR_PEER,
                        "NCCL: ncclCommInitRankConfig (%d ranks) did not complete within comm.timeout_s = %g s: a "
                        "rank did not join (hint: NCCL_DEBUG=INFO; check NCCL_SOCKET_IFNAME / comm.interface)",
                        n->w->size, n->timeout_s);
    return r == ncclSuccess ? SR_OK : nccl_error(r, n->world, "ncclCommInitRankConfig");
}

/* One split per group, in declared order, on every rank (collective over
 * the world): color = the group's lowest world rank, key = this rank's
 * index in it. */
static sr_status split_groups(sr_nccl *n, sr_group *const *groups, int ngroups, bool size1) {
    n->children = sr_calloc((size_t)(ngroups > 0 ? ngroups : 1), sizeof *n->children);
    if (!n->children)
        return sr_error_oom("the NCCL communicators");
    for (int i = 0; i < ngroups; i++) {
        sr_group *g = groups[i];
        if (sr_group_size(g) == 1 && !size1)
            continue; /* the same on every rank: group sizes are uniform over the mesh */
        const int *ranks = sr_group_ranks(g);
        int color = ranks[0];
        for (int k = 1; k < sr_group_size(g); k++)
            color = ranks[k] < color ? ranks[k] : color;
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        char name[64];
        snprintf(name, sizeof name, "shardrun.%s", sr_group_name(g));
        config.commName = name;
        ncclComm_t child = NULL;
        double deadline = sr_clock_mono_s() + n->timeout_s;
        pthread_mutex_lock(&n->nccl_mu);
        ncclResult_t r = ncclCommSplit(n->world, color, sr_group_rank(g), &child, &config);
        r = settle(n, child ? child : n->world, r, deadline);
        /* the split is an operation of the parent too: the parent must
         * answer ncclSuccess before its next use (the next split), or NCCL
         * refuses it ("Attempt to use communicator before the previous
         * operation returned ncclSuccess": the first H200 run) */
        if (r == ncclSuccess)
            r = settle(n, n->world, ncclInProgress, deadline);
        pthread_mutex_unlock(&n->nccl_mu);
        if (r != ncclSuccess) {
            if (child)
                n->children[n->nchildren++] = child; /* for close to abort */
            char what[96];
            snprintf(what, sizeof what, "ncclCommSplit of group %s", sr_group_name(g));
            return nccl_error(r, child ? child : n->world, what);
        }
        n->children[n->nchildren++] = child;
        n->counts.split++;
        sr_group_set_device_comm(g, child);
    }
    return SR_OK;
}

static sr_status nccl_open(sr_nccl **out, sr_world *w, sr_dev *d, sr_transport *tp, sr_group *const *groups,
                           int ngroups, const sr_nccl_opts *o) {
    *out = NULL;
    if (!d || d->kind != SR_DEV_CUDA)
        return sr_error(SR_ERR_INTERNAL, "the NCCL plane needs the cuda device table");
    sr_nccl *n = sr_calloc(1, sizeof *n);
    if (!n)
        return sr_error_oom("the NCCL plane");
    *out = n;
    n->w = w;
    n->d = d;
    n->tp = tp;
    n->ctx = sr_dev_cuda_ctx(d);
    n->stream = sr_dev_cuda_stream(d, SR_STREAM_COMM);
    n->timeout_s = o->timeout_s > 0 ? o->timeout_s : 600;
    pthread_mutex_init(&n->nccl_mu, NULL);
    pthread_mutex_init(&n->ring_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < RING; i++)
        if (cudaEventCreateWithFlags(&n->ev[i], cudaEventDisableTiming) != cudaSuccess)
            return sr_cuda_fail(cudaGetLastError(), n->ctx->bus, "cudaEventCreateWithFlags (the NCCL ring)");
    char bus[32];
    sr_status st = sr_nccl_test_busid(w->local_rank, n->ctx->bus, bus, sizeof bus);
    st = sr_nccl_check_unique_gpu(w, st == SR_OK ? bus : NULL, n->timeout_s); /* every rank takes part */
    if (st == SR_OK)
        st = set_socket_ifname(o->interface);
    unsigned char id[SR_NCCL_ID_BYTES];
    if (st == SR_OK)
        st = nccl_exchange_id(w, id, n->timeout_s);
    size_t free0 = 0, free1 = 0, total = 0;
    if (st == SR_OK && cudaMemGetInfo(&free0, &total) != cudaSuccess)
        free0 = 0;
    if (st == SR_OK)
        st = init_world(n, id);
    if (st == SR_OK)
        st = sr_nccl_check_groups(w, groups, ngroups, n->timeout_s);
    if (st == SR_OK)
        st = split_groups(n, groups, ngroups, o->size1_comms);
    if (st == SR_OK && free0 && cudaMemGetInfo(&free1, &total) == cudaSuccess && free1 < free0)
        n->device_bytes = free0 - free1;
    if (st == SR_OK) {
        sr_log_info("NCCL %s: %d communicator%s split from the world's; NCCL took %.1f MiB of device memory "
                    "(cudaMemGetInfo delta)",
                    nccl_version(), n->nchildren, n->nchildren == 1 ? "" : "s", (double)n->device_bytes / (1 << 20));
        n->oldest_since = sr_clock_mono_s();
        n->healthy = true;
        n->watching = pthread_create(&n->watchdog, NULL, watchdog_main, n) == 0;
        d->on_deadline = on_deadline;
        d->on_deadline_arg = n;
    }
    return st;
}

static void nccl_close(sr_nccl *n) {
    if (!n)
        return;
    if (n->watching) {
        pthread_mutex_lock(&n->ring_mu);
        n->stop = true;
        pthread_cond_signal(&n->stop_cv);
        pthread_mutex_unlock(&n->ring_mu);
        pthread_join(n->watchdog, NULL);
    }
    if (n->healthy) /* (a plane that never opened ran nothing: the run's error stays its last line) */
        sr_log_info_all("NCCL ran %ld all-gathers, %ld reduce-scatters, %ld all-reduces over %ld split communicators",
                        n->counts.allgather, n->counts.reduce_scatter, n->counts.allreduce, n->counts.split);
    if (n->d && n->d->on_deadline_arg == n) {
        n->d->on_deadline = NULL;
        n->d->on_deadline_arg = NULL;
    }
    /* finalize (nonblocking: polled up to the deadline), then destroy; a
     * plane that failed or never finished opening is aborted instead */
    pthread_mutex_lock(&n->nccl_mu);
    if (!n->healthy || n->broken != SR_OK) {
        for (int i = n->nchildren - 1; i >= 0; i--)
            ncclCommAbort(n->children[i]);
        if (n->world)
            ncclCommAbort(n->world);
        n->nchildren = 0;
        n->world = NULL;
    }
    for (int i = n->nchildren - 1; i >= 0; i--) {
        settle(n, n->children[i], ncclCommFinalize(n->children[i]), sr_clock_mono_s() + n->timeout_s);
        ncclCommDestroy(n->children[i]);
    }
    if (n->world) {
        settle(n, n->world, ncclCommFinalize(n->world), sr_clock_mono_s() + n->timeout_s);
        ncclCommDestroy(n->world);
    }
    pthread_mutex_unlock(&n->nccl_mu);
    for (int i = 0; i < RING; i++)
        if (n->ev[i])
            cudaEventDestroy(n->ev[i]);
    free(n->children);
    pthread_cond_destroy(&n->stop_cv);
    pthread_mutex_destroy(&n->ring_mu);
    pthread_mutex_destroy(&n->nccl_mu);
    free(n);
}

static size_t nccl_device_bytes(const sr_nccl *n) { return n ? n->device_bytes : 0; }

/* ---- collectives --------------------------------------------------------- */

static ncclDataType_t nccl_type(sr_dtype dt, bool *ok) {
    *ok = true;
    switch (dt) {
    case SR_DT_F32:
        return ncclFloat32;
    case SR_DT_BF16:
        return ncclBfloat16;
    case SR_DT_F64:
        return ncclFloat64;
    default:
        *ok = false;
        return ncclFloat32;
    }
}

static sr_status nccl_collective(sr_nccl *n, sr_nccl_kind kind, sr_group *g, void *recv, size_t rbytes,
                                 const void *send, size_t sbytes, size_t count, sr_dtype dt) {
    if (n->broken != SR_OK)
        return n->broken;
    ncclComm_t comm = sr_group_device_comm(g);
    bool ok;
    ncclDataType_t t = nccl_type(dt, &ok);
    size_t es = sr_dtype_size(dt), gs = (size_t)sr_group_size(g);
    size_t need_send = kind == SR_NCCL_REDUCE_SCATTER ? gs * count * es : count * es;
    size_t need_recv = kind == SR_NCCL_ALLGATHER ? gs * count * es : count * es;
    if (!comm || !ok || need_send > sbytes || need_recv > rbytes || (kind == SR_NCCL_ALLREDUCE && send != recv))
        return n->broken = sr_error(SR_ERR_INTERNAL,
                                    "NCCL %s on group %s: %zu elements of %zu bytes need %zu bytes to send and %zu "
                                    "to receive, but the buffers hold %zu and %zu%s%s (a bug, please report it)",
                                    kind_names[kind], sr_group_name(g), count, es, need_send, need_recv, sbytes, rbytes,
                                    comm ? "" : "; the group has no communicator",
                                    ok ? "" : "; the element type is not one NCCL reduces here");
    pthread_mutex_lock(&n->ring_mu);
    while (n->head - n->tail >= RING) { /* rare: RING collectives in flight */
        cudaError_t ce = advance(n);
        pthread_mutex_unlock(&n->ring_mu);
        if (ce != cudaSuccess)
            return n->broken = sr_cuda_fail(ce, n->ctx->bus, "an NCCL collective");
        sr_cuda_beat(n->ctx, NULL);
        usleep(100);
        pthread_mutex_lock(&n->ring_mu);
    }
    long seq = n->seq++;
    pthread_mutex_unlock(&n->ring_mu);
    uint64_t fl = sr_flight_enter(SR_FLIGHT_NCCL, seq, kind_names[kind], sr_group_name(g), (int)gs,
                                  kind == SR_NCCL_ALLGATHER ? need_recv : need_send);
    const sr_testhooks *h = sr_testhook();
    if (h->stall_seq == seq && n->w->rank == 0) /* SHARDRUN_TEST_STALL_SEQ: this collective never completes */
        sr_k_spin(n->stream, (long long)((n->timeout_s + 120) * 1e9));
    if (n->d->delay_us[SR_STREAM_COMM] > 0) /* SHARDRUN_TEST_COMM_DELAY_US: a late collective */
        sr_k_spin(n->stream, (long long)n->d->delay_us[SR_STREAM_COMM] * 1000);
    double deadline = sr_clock_mono_s() + n->timeout_s;
    pthread_mutex_lock(&n->nccl_mu);
    if (n->aborted) /* the watchdog is ending the process */
        await_plane_exit(n);
    ncclResult_t r;
    sr_cuda_prof_begin(n->ctx, n->stream, SR_LEDGER_ROW_COLLECTIVE);
    switch (kind) {
    case SR_NCCL_ALLGATHER:
        r = ncclAllGather(send, recv, count, t, comm, n->stream);
        break;
    case SR_NCCL_REDUCE_SCATTER:
        r = ncclReduceScatter(send, recv, count, t, ncclSum, comm, n->stream);
        break;
    default:
        r = ncclAllReduce(send, recv, count, t, ncclSum, comm, n->stream);
        break;
    }
    sr_cuda_prof_end(n->ctx, n->stream);
    r = settle(n, comm, r, deadline);
    pthread_mutex_unlock(&n->nccl_mu);
    sr_flight_start(fl);
    if (r != ncclSuccess) {
        sr_flight_end(fl, false);
        char what[128];
        snprintf(what, sizeof what, "%s %ld of %zu bytes on group %s", kind_names[kind], seq, need_recv,
                 sr_group_name(g));
        n->broken = nccl_error(r, comm, what);
        /* a peer, the network or the GPU failed: kernels may be stuck on
         * the comm stream, so no unwinding (cudaFree would wait for them):
         * abort, post-mortem, 69 */
        if (n->broken == SR_ERR_PEER) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", sr_error_message());
            fail_plane(n, msg, r == ncclRemoteError);
        }
        return n->broken;
    }
    pthread_mutex_lock(&n->ring_mu);
    ring_op *o = &n->ops[n->head % RING];
    *o = (ring_op){seq, kind, sr_group_name(g), kind == SR_NCCL_ALLGATHER ? need_recv : need_send, sr_clock_mono_s(),
                   fl};
    if (n->tail == n->head)
        n->oldest_since = o->issued;
    cudaError_t ce = cudaEventRecord(n->ev[n->head % RING], n->stream);
    n->head++;
    if (kind == SR_NCCL_ALLGATHER)
        n->counts.allgather++;
    else if (kind == SR_NCCL_REDUCE_SCATTER)
        n->counts.reduce_scatter++;
    else
        n->counts.allreduce++;
    pthread_mutex_unlock(&n->ring_mu);
    if (ce != cudaSuccess)
        return n->broken = sr_cuda_fail(ce, n->ctx->bus, "cudaEventRecord after an NCCL collective");
    return SR_OK;
}

const sr_nccl_impl sr_nccl_cuda_impl = {
    .version = nccl_version,
    .exchange_id = nccl_exchange_id,
    .open = nccl_open,
    .close = nccl_close,
    .device_bytes = nccl_device_bytes,
    .collective = nccl_collective,
};
