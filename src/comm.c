/* comm.c — the collective layer: groups, requests, the progress thread and
 * the ring algorithms; see comm.h.  The bytes move over comm_tcp.c's links.
 *
 * Threads: the caller queues operations; one progress thread runs them in
 * queue order (all ranks queue the same operations in the same order, so
 * the per-process order is consistent and deadlock-free).  The first
 * failure is sticky (status.h): every later operation fails with it.
 * Arithmetic on the progress thread stays serial (vec.h's plain forms): an
 * OpenMP region opened from this thread would start a second pool and
 * fight the compute pool. */
#include "srconfig.h"

#include "comm.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "comm_loop.h"
#include "comm_tcp.h"
#include "flight.h"
#include "mem.h"
#include "signals.h"
#include "testhook.h"
#include "vec.h"

struct sr_group {
    sr_transport *tp;
    int n, me;
    int *ranks;
    char name[32]; /* for messages: "shard", "replicate", ... */
    void *dcomm;   /* the device communicator (comm_nccl_cuda.c), or NULL */
};

static const char *const op_names[] = {"all-gather", "reduce-scatter", "all-reduce", "broadcast"};

typedef enum { OP_ALLGATHER, OP_REDUCE_SCATTER, OP_ALLREDUCE, OP_BROADCAST } op_kind;

struct sr_req {
    op_kind kind;
    sr_group *g;
    void *recv;
    const void *send;
    size_t count;
    sr_dtype dt;
    sr_redop op;
    int root;
    uint32_t seq;
    uint64_t flight; /* its flight-recorder entry (flight.h), or 0 */
    sr_status status;
    float scratch; /* barrier payload */
    char message[512];
    bool done;
    bool abandoned; /* its waiter gave up (a stalled plane): freed at close */
    sr_req *next;
};

struct sr_transport {
    sr_world *world;
    sr_tcp *tcp;     /* the links: TCP sockets, or */
    sr_loop *loop;   /* ...the loop of virtual ranks (tests) */
    sr_mem_ctx *mem; /* the memory accounting of the rank that opened it (its threads use it too) */
    int log_rank, log_size;
    sr_group **groups;
    int ngroups;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sr_req *head, *tail;
    bool stopping, started;
    pthread_t progress;
    uint32_t seq;
    sr_sticky broken; /* the first failure */
    void *scratch[2]; /* ping-pong chunk buffers of the progress thread */
    size_t scratch_bytes;
    int64_t delay_us; /* SHARDRUN_TEST_COMM_DELAY_US on the comm stream: sleep before each operation */
    /* the watchdog */
    double timeout_s;
    pthread_t watchdog;
    bool watching;
    sr_req *running;     /* the operation the progress thread runs, or NULL */
    double oldest_since; /* when the oldest incomplete operation became the oldest */
    bool stalled;        /* the watchdog declared a stall: every wait fails with stall_msg */
    char stall_msg[1024];
    sr_req *abandoned; /* requests whose waiters gave up, freed at close */
};

/* ------------------------------------------------------------------------ */

/* The transport without its links. */
static sr_transport *transport_new(sr_world *w, const sr_transport_opts *o) {
    sr_transport *tp = sr_calloc(1, sizeof *tp);
    if (!tp)
        return NULL;
    tp->world = w;
    const sr_testhooks *h = sr_testhook();
    tp->delay_us = h->comm_delay_stream == 0 ? h->comm_delay_us : 0;
    tp->timeout_s = o->timeout_s;
    tp->mem = sr_mem_bound();
    tp->log_rank = w->rank;
    tp->log_size = w->size;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->cond, NULL);
    sr_sticky_init(&tp->broken);
    return tp;
}

sr_status sr_transport_open(sr_transport **out, sr_world *w, const sr_transport_opts *o) {
    sr_transport *tp = *out = transport_new(w, o);
    if (!tp)
        return sr_error_oom("the transport");
    return sr_tcp_open(&tp->tcp, w, o);
}

sr_status sr_group_create(sr_transport *tp, const int *ranks, int n, sr_group **out) {
    *out = NULL;
    sr_group **ng = sr_realloc(tp->groups, sizeof *ng * ((size_t)tp->ngroups + 1));
    if (!ng)
        return sr_error_oom("a transport group");
    tp->groups = ng; /* kept even if what follows fails: the old block is gone */
    sr_group *g = sr_calloc(1, sizeof *g);
    int *rk = sr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!g || !rk) {
        free(g);
        free(rk);
        return sr_error_oom("a transport group");
    }
    *g = (sr_group){.tp = tp, .n = n, .me = -1, .ranks = rk};
    snprintf(g->name, sizeof g->name, "#%d", tp->ngroups);
    for (int i = 0; i < n; i++) {
        rk[i] = ranks[i];
        if (ranks[i] == tp->world->rank)
            g->me = i;
    }
    if (g->me < 0) {
        free(rk);
        free(g);
        return sr_error(SR_ERR_INTERNAL, "group does not contain this rank");
    }
    if (n > 1) {
        if (tp->tcp) {
            sr_tcp_need(tp->tcp, rk[(g->me + 1) % n]);
            sr_tcp_need(tp->tcp, rk[(g->me + n - 1) % n]);
        }
    }
    tp->groups[tp->ngroups++] = g;
    *out = g;
    return SR_OK;
}

void sr_group_set_name(sr_group *g, const char *name) { snprintf(g->name, sizeof g->name, "%s", name); }

int sr_group_size(const sr_group *g) { return g->n; }
int sr_group_rank(const sr_group *g) { return g->me; }
const char *sr_group_name(const sr_group *g) { return g->name; }
const int *sr_group_ranks(const sr_group *g) { return g->ranks; }
void sr_group_set_device_comm(sr_group *g, void *comm) { g->dcomm = comm; }
void *sr_group_device_comm(const sr_group *g) { return g->dcomm; }
const char *sr_transport_address(const sr_transport *tp) { return tp->tcp ? sr_tcp_address(tp->tcp) : "loop"; }

static void *progress_main(void *arg);
static void *watchdog_main(void *arg);

int sr_transport_peer_count(const sr_transport *tp) { return tp->tcp ? sr_tcp_peer_count(tp->tcp) : 0; }

/* The links: the loop of virtual ranks, or TCP. */
static sr_status link_exchange(sr_transport *tp, int right, int left, uint32_t seq, const void *s, size_t sb, void *r,
                               size_t rb, char *msg, size_t ml) {
    return tp->loop ? sr_loop_exchange(tp->loop, right, left, seq, s, sb, r, rb, msg, ml)
                    : sr_tcp_exchange(tp->tcp, right, left, seq, s, sb, r, rb, msg, ml);
}
static sr_status link_send(sr_transport *tp, int peer, uint32_t seq, const void *b, size_t n, char *msg, size_t ml) {
    return tp->loop ? sr_loop_send(tp->loop, peer, seq, b, n, msg, ml) : sr_tcp_send(tp->tcp, peer, seq, b, n, msg, ml);
}
static sr_status link_recv(sr_transport *tp, int peer, uint32_t seq, void *b, size_t n, char *msg, size_t ml) {
    return tp->loop ? sr_loop_recv(tp->loop, peer, seq, b, n, msg, ml) : sr_tcp_recv(tp->tcp, peer, seq, b, n, msg, ml);
}
static void link_stop(sr_transport *tp) {
    if (tp->loop)
        sr_loop_stop(tp->loop);
    else
        sr_tcp_stop(tp->tcp);
}
static int link_closed_peer(sr_transport *tp, double wait_s) {
    return tp->loop ? sr_loop_closed_peer(tp->loop, wait_s) : sr_tcp_closed_peer(tp->tcp, wait_s);
}

int sr_transport_closed_peer(sr_transport *tp, double wait_s) {
    return tp && (tp->loop || tp->tcp) ? link_closed_peer(tp, wait_s) : -1;
}

sr_status sr_transport_open_loop(sr_transport **out, sr_loop_hub *hub, sr_world *w, const sr_transport_opts *o) {
    sr_transport *tp = *out = transport_new(w, o);
    if (!tp)
        return sr_error_oom("the transport");
    tp->loop = sr_loop_attach(hub, w->rank, o->timeout_s);
    return tp->loop ? SR_OK : sr_error(SR_ERR_INTERNAL, "virtual rank %d: no free end of the loop hub", w->rank);
}

sr_status sr_transport_connect(sr_transport *tp) {
    sr_status st = tp->tcp ? sr_tcp_connect(tp->tcp) : SR_OK;
    if (st != SR_OK)
        return st;
    if (pthread_create(&tp->progress, NULL, progress_main, tp) != 0)
        return sr_error(SR_ERR_INTERNAL, "cannot start the progress thread");
    tp->started = true;
    tp->oldest_since = sr_clock_mono_s();
    if (pthread_create(&tp->watchdog, NULL, watchdog_main, tp) != 0)
        return sr_error(SR_ERR_INTERNAL, "cannot start the watchdog thread");
    tp->watching = true;
    return SR_OK;
}

void sr_transport_close(sr_transport *tp) {
    if (!tp)
        return;
    pthread_mutex_lock(&tp->lock);
    tp->stopping = true;
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->lock);
    if (tp->tcp || tp->loop)
        link_stop(tp); /* an operation in flight fails at its next poll */
    if (tp->started)
        pthread_join(tp->progress, NULL);
    if (tp->watching)
        pthread_join(tp->watchdog, NULL);
    while (tp->abandoned) {
        sr_req *r = tp->abandoned;
        tp->abandoned = r->next;
        free(r);
    }
    sr_tcp_close(tp->tcp);
    sr_loop_close(tp->loop);
    for (int i = 0; i < tp->ngroups; i++) {
        free(tp->groups[i]->ranks);
        free(tp->groups[i]);
    }
    for (int i = 0; i < 2; i++)
        sr_mem_free(tp->scratch[i]);
    free(tp->groups);
    sr_sticky_destroy(&tp->broken);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->cond);
    free(tp);
}

/* ------------------------------------------------------------------------ */
/* ring algorithms (progress thread) */

/* Chunk c of `count` elements split into n ring chunks: [*off, *off+*len). */
static void chunk_of(size_t count, int n, int c, size_t *off, size_t *len) {
    size_t per = (count + (size_t)n - 1) / (size_t)n;
    size_t o = per * (size_t)c;
    *off = o < count ? o : count;
    *len = o + per <= count ? per : (o < count ? count - o : 0);
}

static sr_status exchange(sr_group *g, uint32_t seq, const void *s, size_t sb, void *r, size_t rb, char *msg,
                          size_t ml) {
    return link_exchange(g->tp, g->ranks[(g->me + 1) % g->n], g->ranks[(g->me + g->n - 1) % g->n], seq, s, sb, r, rb,
                         msg, ml);
}

/* Grows the transport's two ping-pong chunk buffers (progress thread only). */
size_t sr_transport_scratch_bytes(size_t chunk_elements, size_t es) {
    return 2 * (chunk_elements * es + 16); /* two buffers, each a chunk and room for its alignment */
}

static bool scratch_reserve(sr_transport *tp, size_t bytes) {
    if (tp->scratch_bytes >= bytes)
        return true;
    for (int i = 0; i < 2; i++) {
        sr_mem_free(tp->scratch[i]);
        tp->scratch[i] = NULL;
    }
    tp->scratch_bytes = 0;
    for (int i = 0; i < 2; i++) {
        tp->scratch[i] = sr_mem_alloc(SR_MEM_COMM, bytes);
        if (!tp->scratch[i]) {
            sr_mem_free(tp->scratch[0]);
            tp->scratch[0] = NULL;
            return false;
        }
    }
    tp->scratch_bytes = bytes;
    return true;
}

/* Writes src scaled by `scale` to dst (both dt). */
static void scale_copy(void *dst, const void *src, size_t n, sr_dtype dt, double scale) {
    if (scale == 1.0) {
        if (dst != src)
            memmove(dst, src, n * sr_dtype_size(dt));
        return;
    }
    sr_vec_scale(dst, src, n, dt, scale);
}

/* Ring reduce-scatter without a full-size copy: `src` holds the group's n
 * chunks (chunk_of(total)); `out` receives the reduced chunk me.  Step
 * k sends the partial sum of chunk me-k-1 and receives that of chunk me-k-2
 * into the other ping-pong buffer, adds its own contribution, and sends it
 * on next step; after n-1 steps the buffer holds chunk me in full. */
static sr_status ring_reduce_scatter(sr_group *g, uint32_t seq, const void *src, void *out, size_t total, sr_dtype dt,
                                     sr_redop op, char *msg, size_t ml) {
    int n = g->n, me = g->me;
    size_t es = sr_dtype_size(dt), maxc = (total + (size_t)n - 1) / (size_t)n;
    double scale = op == SR_OP_AVG ? 1.0 / n : 1.0;
    size_t mo, ml_me;
    chunk_of(total, n, me, &mo, &ml_me);
    if (n == 1) {
        scale_copy(out, (const char *)src + mo * es, ml_me, dt, scale);
        return SR_OK;
    }
    if (!scratch_reserve(g->tp, sr_transport_scratch_bytes(maxc, es) / 2)) {
        snprintf(msg, ml, "out of memory for transport buffers");
        return SR_ERR_INTERNAL;
    }
    void *bufs[2] = {g->tp->scratch[0], g->tp->scratch[1]};
    size_t so, sl;
    chunk_of(total, n, ((me - 1) % n + n) % n, &so, &sl);
    const char *sendp = (const char *)src + so * es;
    /* Each step moves its chunk in pieces (the same count on every rank):
     * while this rank adds piece i, the neighbour's piece i+1 is already
     * streaming into the socket buffer, so arithmetic overlaps the wire. */
    const size_t piece = ((size_t)1 << 20) / es, npieces = (maxc + piece - 1) / piece;
    int next = 0;
    for (int k = 0; k < n - 1; k++) {
        int rc = ((me - k - 2) % n + n) % n;
        bool final_step = k == n - 2;
        size_t ro, rl;
        chunk_of(total, n, rc, &ro, &rl);
        /* the last step receives straight into `out` (chunk me) unless
         * `out` overlaps what is still being sent or added (in place) */
        char *recvp = bufs[next];
        const char *o = out, *own = (const char *)src + ro * es;
        if (final_step && (o + rl * es <= sendp || o >= sendp + sl * es) && (o + rl * es <= own || o >= own + rl * es))
            recvp = out;
        for (size_t p = 0; p < npieces; p++) {
            size_t a = p * piece;
            size_t sn = a < sl ? (sl - a < piece ? sl - a : piece) : 0;
            size_t rn = a < rl ? (rl - a < piece ? rl - a : piece) : 0;
            sr_status st = exchange(g, seq, sendp + a * es, sn * es, recvp + a * es, rn * es, msg, ml);
            if (st != SR_OK)
                return st;
            sr_vec_add(recvp + a * es, (const char *)src + (ro + a) * es, rn, dt);
            if (final_step) /* chunk me is complete: store it while the rest streams */
                scale_copy((char *)out + a * es, recvp + a * es, rn, dt, scale);
        }
        sendp = recvp;
        sl = rl;
        next ^= 1;
    }
    return SR_OK;
}

/* buf holds n chunks; chunk me is filled.  chunked: the chunk_of(count)
 * layout (allreduce); else n chunks of `count` elements each. */
static sr_status ring_allgather(sr_group *g, uint32_t seq, void *buf, size_t count, size_t es, bool chunked, char *msg,
                                size_t ml) {
    int n = g->n, me = g->me;
    sr_status st = SR_OK;
    for (int k = 0; k < n - 1 && st == SR_OK; k++) {
        int sc = ((me - k) % n + n) % n, rc = ((me - k - 1) % n + n) % n;
        size_t so, sl, ro, rl;
        if (chunked) {
            chunk_of(count, n, sc, &so, &sl);
            chunk_of(count, n, rc, &ro, &rl);
        } else {
            so = (size_t)sc * count;
            ro = (size_t)rc * count;
            sl = rl = count;
        }
        st = exchange(g, seq, (char *)buf + so * es, sl * es, (char *)buf + ro * es, rl * es, msg, ml);
    }
    return st;
}

/* Along the ring from the root, one hop per step; only the two ranks of the
 * current hop (ring neighbours) move data. */
static sr_status ring_broadcast(sr_group *g, uint32_t seq, void *buf, size_t bytes, int root, char *msg, size_t ml) {
    int n = g->n, me = g->me;
    for (int k = 0; k < n - 1; k++) {
        int sender = (root + k) % n, receiver = (root + k + 1) % n;
        sr_status st = SR_OK;
        if (me == sender)
            st = link_send(g->tp, g->ranks[receiver], seq, buf, bytes, msg, ml);
        else if (me == receiver)
            st = link_recv(g->tp, g->ranks[sender], seq, buf, bytes, msg, ml);
        if (st != SR_OK)
            return st;
    }
    return SR_OK;
}

static sr_status run_op(sr_req *r) {
    sr_group *g = r->g;
    int n = g->n, me = g->me;
    size_t es = sr_dtype_size(r->dt);
    char *msg = r->message;
    size_t ml = sizeof r->message;
    switch (r->kind) {
    case OP_ALLGATHER: {
        char *recv = r->recv;
        if ((const char *)r->send != recv + (size_t)me * r->count * es)
            memmove(recv + (size_t)me * r->count * es, r->send, r->count * es);
        return n == 1 ? SR_OK : ring_allgather(g, r->seq, recv, r->count, es, false, msg, ml);
    }
    case OP_REDUCE_SCATTER:
        return ring_reduce_scatter(g, r->seq, r->send, r->recv, r->count * (size_t)n, r->dt, r->op, msg, ml);
    case OP_ALLREDUCE: {
        /* in place: reduce-scatter into this rank's chunk of the buffer,
         * then all-gather the chunks */
        size_t o, l;
        chunk_of(r->count, n, me, &o, &l);
        sr_status st =
            ring_reduce_scatter(g, r->seq, r->recv, (char *)r->recv + o * es, r->count, r->dt, r->op, msg, ml);
        if (st == SR_OK && n > 1)
            st = ring_allgather(g, r->seq, r->recv, r->count, es, true, msg, ml);
        return st;
    }
    case OP_BROADCAST:
        return ring_broadcast(g, r->seq, r->recv, r->count * es, r->root, msg, ml);
    }
    return SR_ERR_INTERNAL;
}

static void *progress_main(void *arg) {
    sr_transport *tp = arg;
    sr_mem_bind(tp->mem);
    sr_log_bind_rank(tp->log_rank, tp->log_size);
    pthread_mutex_lock(&tp->lock);
    for (;;) {
        while (!tp->head && !tp->stopping)
            pthread_cond_wait(&tp->cond, &tp->lock);
        if (!tp->head && tp->stopping)
            break;
        sr_req *r = tp->head;
        tp->head = r->next;
        if (!tp->head)
            tp->tail = NULL;
        tp->running = r;
        pthread_mutex_unlock(&tp->lock);
        if (tp->delay_us > 0)
            usleep((useconds_t)tp->delay_us); /* SHARDRUN_TEST_COMM_DELAY_US */
        if (sr_testhook()->stall_seq == (int64_t)r->seq && tp->world->rank == 0)
            while (!__atomic_load_n(&tp->stopping, __ATOMIC_RELAXED))
                usleep(20000); /* SHARDRUN_TEST_STALL_SEQ: this collective never completes */
        sr_status st = sr_sticky_raise(&tp->broken);
        if (st != SR_OK) {
            snprintf(r->message, sizeof r->message, "%s", sr_error_message());
        } else {
            sr_flight_start(r->flight);
            st = run_op(r);
            if (st != SR_OK)
                sr_sticky_set(&tp->broken, st, "%s", r->message);
        }
        sr_flight_end(r->flight, st == SR_OK);
        pthread_mutex_lock(&tp->lock);
        r->status = st;
        tp->running = NULL;
        tp->oldest_since = sr_clock_mono_s();
        if (r->abandoned) {
            r->next = tp->abandoned;
            tp->abandoned = r;
        }
        /* last: a waiter that sees done (sr_wait reads it without the
         * lock) frees the request at once */
        __atomic_store_n(&r->done, true, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&tp->cond);
    }
    pthread_mutex_unlock(&tp->lock);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the watchdog */

/* How much longer than comm.timeout_s the watchdog waits on this plane:
 * the TCP links' own deadline (timeout_s without a byte moving, naming the
 * silent peer, plus up to 2 s for a neighbour's abort notice and 2 s to
 * finish a half-sent frame) speaks first when a peer is the cause; the
 * watchdog covers what they cannot see, a plane stalled on this rank's
 * side.  Detection (+ 6 s, 250 ms ticks) and the post-mortem (<= 5 s) end
 * within comm.timeout_s + 12 s. */
#define WATCHDOG_GRACE_S 6.0

/* The watchdog thread: every 250 ms, is the oldest incomplete operation
 * older than the deadline?  Then it breaks the plane (every wait fails with
 * its message, every socket operation at its next poll), runs the
 * post-mortem (which peer hung up, within min(5 s, timeout_s)), and leaves
 * the exit (69) to the run's error path; if the run has not closed the
 * transport 5 s later, it exits 69 itself. */
static void *watchdog_main(void *arg) {
    sr_transport *tp = arg;
    sr_mem_bind(tp->mem);
    sr_log_bind_rank(tp->log_rank, tp->log_size);
    pthread_mutex_lock(&tp->lock);
    while (!tp->stopping) {
        struct timespec ts = sr_clock_wall_after(0.25);
        pthread_cond_timedwait(&tp->cond, &tp->lock, &ts);
        sr_req *old = tp->running ? tp->running : tp->head;
        double age = sr_clock_mono_s() - tp->oldest_since;
        if (tp->stopping || tp->stalled || !old || age < tp->timeout_s + WATCHDOG_GRACE_S)
            continue;
        char what[512];
        snprintf(what, sizeof what,
                 "watchdog: collective %u (%s of %zu bytes on group %s) has not completed %.0f s after it became the "
                 "oldest (comm.timeout_s %g s)",
                 (unsigned)old->seq, op_names[old->kind], old->count * sr_dtype_size(old->dt), old->g->name, age,
                 tp->timeout_s);
        pthread_mutex_unlock(&tp->lock);
        int gone = link_closed_peer(tp, tp->timeout_s < 5.0 ? tp->timeout_s : 5.0);
        pthread_mutex_lock(&tp->lock);
        if (gone >= 0)
            snprintf(tp->stall_msg, sizeof tp->stall_msg,
                     "%s; post-mortem: rank %d's connection closed (it gave up or died)", what, gone);
        else
            snprintf(tp->stall_msg, sizeof tp->stall_msg,
                     "%s; post-mortem: every peer's connection is alive: the plane stalled on this rank, not at a lost "
                     "peer",
                     what);
        tp->stalled = true;
        sr_sticky_set(&tp->broken, SR_ERR_PEER, "%s", tp->stall_msg);
        pthread_cond_broadcast(&tp->cond);
        pthread_mutex_unlock(&tp->lock);
        link_stop(tp);
        for (int i = 0; i < 50 && !__atomic_load_n(&tp->stopping, __ATOMIC_RELAXED); i++)
            usleep(100000);
        if (!__atomic_load_n(&tp->stopping, __ATOMIC_RELAXED)) {
            sr_flight_dump("watchdog", tp->stall_msg);
            sr_log_error("%s (the run did not end within 5 s: exiting)", tp->stall_msg);
            sr_signals_remove_temporaries(); /* what a signal would remove */
            _exit(sr_status_exit_code(SR_ERR_PEER));
        }
        pthread_mutex_lock(&tp->lock);
    }
    pthread_mutex_unlock(&tp->lock);
    return NULL;
}

static sr_status submit(sr_group *g, op_kind kind, void *recv, const void *send, size_t count, sr_dtype dt, sr_redop op,
                        int root, sr_req **out) {
    if (out)
        *out = NULL;
    if ((kind == OP_REDUCE_SCATTER || kind == OP_ALLREDUCE) && dt != SR_DT_F32 && dt != SR_DT_BF16 && dt != SR_DT_F64)
        return sr_error(SR_ERR_INTERNAL, "a reduction of %s elements: only f32, bf16 and f64 can be summed",
                        sr_dtype_name(dt));
    sr_req *r = sr_calloc(1, sizeof *r);
    if (!r)
        return sr_error_oom("a transport request");
    *r = (sr_req){.kind = kind,
                  .g = g,
                  .recv = recv ? recv : &r->scratch,
                  .send = send ? send : &r->scratch,
                  .count = count,
                  .dt = dt,
                  .op = op,
                  .root = root};
    sr_transport *tp = g->tp;
    const sr_testhooks *h = sr_testhook();
    if (g->n == 1 || !tp->started) {
        /* nothing to exchange: run inline */
        r->flight =
            sr_flight_enter(sr_flight_host_plane(), -1, op_names[kind], g->name, g->n, count * sr_dtype_size(dt));
        sr_flight_start(r->flight);
        r->status = g->n == 1 ? run_op(r) : SR_ERR_INTERNAL;
        sr_flight_end(r->flight, r->status == SR_OK);
        if (g->n != 1)
            snprintf(r->message, sizeof r->message, "transport not connected");
        r->done = true;
    } else {
        pthread_mutex_lock(&tp->lock);
        if (tp->stalled) {
            pthread_mutex_unlock(&tp->lock);
            free(r);
            return sr_error(SR_ERR_PEER, "%s", tp->stall_msg);
        }
        if (!tp->head && !tp->running)
            tp->oldest_since = sr_clock_mono_s();
        r->seq = tp->seq++;
        if (h->mismatch_seq == (int64_t)r->seq && tp->world->rank == h->mismatch_rank)
            r->count = count > 1 ? count - 1 : 0; /* SHARDRUN_TEST_MISMATCH_SEQ: this rank's size differs */
        r->flight = sr_flight_enter(sr_flight_host_plane(), r->seq, op_names[kind], g->name, g->n,
                                    r->count * sr_dtype_size(dt));
        if (tp->tail)
            tp->tail->next = r;
        else
            tp->head = r;
        tp->tail = r;
        pthread_cond_broadcast(&tp->cond);
        pthread_mutex_unlock(&tp->lock);
    }
    if (out) {
        *out = r;
        return SR_OK;
    }
    return sr_wait(r);
}

sr_status sr_wait(sr_req *r) {
    if (!r)
        return SR_OK;
    sr_transport *tp = r->g->tp;
    if (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&tp->lock);
        while (!r->done && !tp->stalled)
            pthread_cond_wait(&tp->cond, &tp->lock);
        if (!r->done) {
            /* the watchdog broke the plane: the progress thread may still
             * hold the request; it is freed at close */
            r->abandoned = true;
            pthread_mutex_unlock(&tp->lock);
            return sr_error(SR_ERR_PEER, "%s", tp->stall_msg);
        }
        pthread_mutex_unlock(&tp->lock);
    }
    sr_status st = r->status;
    if (st != SR_OK)
        sr_error(st, "%s", r->message);
    free(r);
    return st;
}

sr_status sr_allgather(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_req **req) {
    return submit(g, OP_ALLGATHER, recv, send, count, dt, SR_OP_SUM, 0, req);
}

sr_status sr_reduce_scatter(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_redop op,
                            sr_req **req) {
    return submit(g, OP_REDUCE_SCATTER, recv, send, count, dt, op, 0, req);
}

sr_status sr_allreduce(sr_group *g, void *buf, size_t count, sr_dtype dt, sr_redop op, sr_req **req) {
    return submit(g, OP_ALLREDUCE, buf, buf, count, dt, op, 0, req);
}

sr_status sr_broadcast(sr_group *g, void *buf, size_t count, sr_dtype dt, int root, sr_req **req) {
    return submit(g, OP_BROADCAST, buf, buf, count, dt, SR_OP_SUM, root, req);
}

sr_status sr_barrier(sr_group *g, sr_req **req) {
    /* an allreduce of one float kept inside the request */
    return submit(g, OP_ALLREDUCE, NULL, NULL, 1, SR_DT_F32, SR_OP_SUM, 0, req);
}

/* sr_wait through the untyped pointer of a device-table event. */
static sr_status wait_untyped(void *req) { return sr_wait(req); }

void sr_event_from_req(sr_event *ev, sr_req *req) {
    ev->req = req;
    ev->req_wait = req ? wait_untyped : NULL;
}
