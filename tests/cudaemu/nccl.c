/* nccl.c — the emulated NCCL: the calls src/comm_nccl.c makes, from NCCL's
 * documentation (nccl.h's declarations, so host code compiles unchanged),
 * between ranks that are separate processes, as under srun and mpirun; see
 * tests/cudaemu/README "NCCL" for what is and is not modelled.
 *
 * The rendezvous: ncclGetUniqueId opens a listening TCP socket on this
 * host's address (NCCL_SOCKET_IFNAME's interface, else the first up
 * interface that is not loopback, else loopback) and starts the hub, a
 * thread of that process; the unique id names its address and port and a
 * random nonce.  Every rank's communicator connects to the hub (one
 * connection per communicator), so ranks on "nodes" in network namespaces
 * meet as real ones would.  Why a hub of our own and not NCCL's rings: the
 * transports are not what the emulator checks; the calls, their order on
 * the streams and their buffers are.
 *
 * A collective is a stream operation (cudaemu_enqueue): when the stream
 * reaches it, the rank sends its contribution to the hub and waits for its
 * result, so a rank that never enters a collective leaves the others
 * waiting (the watchdog's case), and later work on the stream waits for
 * it.  The hub reduces in rank order 0, 1, ..., n-1 (bf16 rounded after
 * each addition, as a ring's hops do; f32 in f32, f64 in f64): every run is
 * reproducible.  Buffers are checked at the call (device memory of the
 * communicator's device, NCCL's in-place rules); a violation, or ranks
 * disagreeing on a collective's kind, type or count, is reported
 * ("cudaemu: error: ...") and the process aborts.  A connection that
 * closes without a goodbye (the process died or aborted) is an
 * asynchronous ncclRemoteError on every other rank of that communicator,
 * naming the lost rank.
 *
 * Nonblocking communicators (config.blocking = 0) answer ncclInProgress
 * from init, split and finalize; ncclCommGetAsyncError says when they are
 * done.  A split keeps a nonblocking parent in progress until a poll of
 * the parent itself sees it done; a split or collective before that is
 * refused, as NCCL refuses it.  ncclCommAbort may come from any thread: it ends the connection
 * and wakes every waiter; a collective in flight then never writes its
 * result (a GPU's would be killed), and nothing touches device memory.
 *
 * Test hooks (environment): CUDAEMU_NCCL_ASYNC_ERROR=RANK:SEQ (the
 * collective SEQ, counted from 0 over every communicator of the process
 * whose world rank is RANK, fails with an asynchronous ncclSystemError and
 * never completes), CUDAEMU_NCCL_INIT_HANG=RANK (that world rank's
 * ncclCommInitRankConfig never reaches the hub), CUDAEMU_NCCL_SPLIT_FAIL=RANK:K
 * (that world rank's K-th ncclCommSplit, counted from 1, is refused at
 * once with ncclInvalidUsage, as the first H200 run's second split was),
 * CUDAEMU_NCCL_CALLS=FILE
 * (each process appends a line of its call counts at exit and at an
 * abort). */
#include "srconfig.h"

#ifndef SR_HAVE_NCCL /* an emulator tree configured --without-nccl */
typedef int cudaemu_no_nccl;
#else

#include <nccl.h>

#include "cudaemu.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ID_MAGIC 0x4e43454du /* "MECN" */
#define CONFIG_MAGIC 0xcafebeefu

/* ---- call counts (CUDAEMU_NCCL_CALLS) ----------------------------------- */

enum {
    C_GETUNIQUEID,
    C_INIT,
    C_SPLIT,
    C_ASYNC,
    C_FINALIZE,
    C_ABORT,
    C_DESTROY,
    C_LASTERROR,
    C_ERRORSTRING,
    C_VERSION,
    C_ALLGATHER,
    C_REDUCESCATTER,
    C_ALLREDUCE,
    C_N
};
static const char *const call_names[C_N] = {
    "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommSplit",    "ncclCommGetAsyncError", "ncclCommFinalize",
    "ncclCommAbort",   "ncclCommDestroy",        "ncclGetLastError", "ncclGetErrorString",    "ncclGetVersion",
    "ncclAllGather",   "ncclReduceScatter",      "ncclAllReduce"};
static long calls[C_N];
#define COUNT(c) __atomic_add_fetch(&calls[c], 1, __ATOMIC_RELAXED)

static void write_counts(void) {
    const char *path = getenv("CUDAEMU_NCCL_CALLS");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "pid %ld:", (long)getpid());
    for (int i = 0; i < C_N; i++)
        fprintf(f, " %s=%ld", call_names[i], __atomic_load_n(&calls[i], __ATOMIC_RELAXED));
    fprintf(f, "\n");
    fclose(f);
}

/* ---- the last error --------------------------------------------------- */

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];

static ncclResult_t set_error(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t set_error(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&err_mu);
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&err_mu);
    const char *dbg = getenv("NCCL_DEBUG");
    if (dbg && (!strcasecmp(dbg, "WARN") || !strcasecmp(dbg, "INFO")))
        fprintf(stderr, "cudaemu: NCCL WARN %s\n", last_error);
    return r;
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    COUNT(C_LASTERROR);
    return last_error; /* as NCCL's: the newest message of the process */
}

const char *ncclGetErrorString(ncclResult_t r) {
    COUNT(C_ERRORSTRING);
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

ncclResult_t ncclGetVersion(int *version) {
    COUNT(C_VERSION);
    if (!version)
        return set_error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE; /* the headers the emulator implements */
    return ncclSuccess;
}

/* ---- the wire --------------------------------------------------------- */

enum { M_JOIN = 1, M_ATTACH, M_READY, M_SPLIT, M_SPLIT_OK, M_COLL, M_RESULT, M_LEAVE, M_ERROR, M_VIOLATION };

typedef struct {
    uint32_t type, comm;  /* the hub's communicator id (0: none yet) */
    int32_t rank, nranks; /* in that communicator */
    int32_t a, b, c, pad; /* JOIN/ATTACH: world rank, -, pid; COLL: kind, dtype; SPLIT: color, key; ERROR: result */
    uint64_t seq, count;  /* JOIN: the nonce; COLL/RESULT: the collective's number on its communicator */
    uint64_t len;         /* payload bytes that follow */
} wire;

typedef struct {
    uint32_t magic;
    uint32_t addr; /* IPv4, network order */
    uint16_t port; /* network order */
    uint16_t pad;
    uint64_t nonce;
} emu_id;
_Static_assert(sizeof(emu_id) <= NCCL_UNIQUE_ID_BYTES, "the id fits");

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static size_t dtype_size(int t) { return t == ncclBfloat16 ? 2 : t == ncclFloat64 ? 8 : 4; }
static const char *dtype_name(int t) {
    return t == ncclBfloat16 ? "bf16" : t == ncclFloat64 ? "f64" : t == ncclFloat32 ? "f32" : "?";
}
enum { K_ALLGATHER, K_REDUCESCATTER, K_ALLREDUCE };
static const char *const kind_names[] = {"ncclAllGather", "ncclReduceScatter", "ncclAllReduce"};

/* ---- the hub ---------------------------------------------------------- */

typedef struct hbuf {
    struct hbuf *next;
    size_t len, off;
    char data[];
} hbuf;

typedef struct {
    int fd;
    int comm, rank, world_rank; /* comm -1: not joined yet */
    bool left;
    bool other;    /* a rank of another process (the exit drain waits for it) */
    char who[128]; /* "host H pid P" */
    wire in;
    size_t in_got; /* header bytes, then payload bytes */
    char *payload;
    hbuf *out, *out_tail;
} hconn;

typedef struct hcoll {
    struct hcoll *next;
    uint64_t seq;
    int kind, dtype, arrived;
    uint64_t count;
    char **buf; /* per rank */
    int first;  /* the rank whose shape the others must match */
} hcoll;

typedef struct {
    uint32_t id;
    uint64_t nonce; /* the world's (0 for a split's child) */
    int nranks, joined, live;
    int *conn; /* per rank: the connection's index, -1 */
    bool ready, broken, used;
    /* the split round in progress */
    int split_in, *color, *key;
    hcoll *colls;
} hcomm;

typedef struct {
    int lfd;
    hconn *c;
    int nc;
    hcomm *m;
    int nm;
    uint32_t next_id;
    pthread_mutex_t mu; /* guards `open` (read by the exit drain) */
    int open;           /* other processes' connections still open */
} hub;

static hub *the_hub; /* this process's (the one that made the unique id) */

static hcomm *hub_comm(hub *h, uint32_t id) {
    for (int i = 0; i < h->nm; i++)
        if (h->m[i].used && h->m[i].id == id)
            return &h->m[i];
    return NULL;
}

static hcomm *hub_new_comm(hub *h, int nranks, uint64_t nonce) {
    int i = 0;
    while (i < h->nm && h->m[i].used)
        i++;
    if (i == h->nm) {
        hcomm *m = realloc(h->m, (size_t)(h->nm + 8) * sizeof *m);
        if (!m)
            return NULL;
        memset(m + h->nm, 0, 8 * sizeof *m);
        h->m = m;
        h->nm += 8;
    }
    hcomm *c = &h->m[i];
    memset(c, 0, sizeof *c);
    c->used = true;
    c->id = ++h->next_id;
    c->nonce = nonce;
    c->nranks = nranks;
    c->conn = malloc((size_t)nranks * sizeof *c->conn);
    c->color = calloc((size_t)nranks, sizeof *c->color);
    c->key = calloc((size_t)nranks, sizeof *c->key);
    if (!c->conn || !c->color || !c->key) {
        free(c->conn), free(c->color), free(c->key);
        c->used = false;
        return NULL;
    }
    for (int r = 0; r < nranks; r++)
        c->conn[r] = -1;
    return c;
}

static void hub_free_comm(hcomm *c) {
    for (hcoll *o = c->colls, *n; o; o = n) {
        n = o->next;
        for (int r = 0; r < c->nranks; r++)
            free(o->buf[r]);
        free(o->buf);
        free(o);
    }
    free(c->conn), free(c->color), free(c->key);
    memset(c, 0, sizeof *c);
}

/* Queues a message (header + payload) to connection k. */
static void hub_send(hub *h, int k, wire w, const void *payload) {
    hconn *c = &h->c[k];
    if (c->fd < 0)
        return;
    hbuf *b = malloc(sizeof *b + sizeof w + w.len);
    if (!b) {
        fprintf(stderr, "cudaemu: error: the NCCL hub is out of memory\n");
        abort();
    }
    b->next = NULL;
    b->len = sizeof w + w.len;
    b->off = 0;
    memcpy(b->data, &w, sizeof w);
    if (w.len)
        memcpy(b->data + sizeof w, payload, w.len);
    if (c->out_tail)
        c->out_tail->next = b;
    else
        c->out = b;
    c->out_tail = b;
}

static void hub_send_text(hub *h, int k, uint32_t type, uint32_t comm, int result, const char *text) {
    wire w = {.type = type, .comm = comm, .a = result, .len = strlen(text) + 1};
    hub_send(h, k, w, text);
}

static void hub_fail_comm(hub *h, hcomm *m, const char *text) {
    m->broken = true;
    for (int r = 0; r < m->nranks; r++)
        if (m->conn[r] >= 0 && !h->c[m->conn[r]].left)
            hub_send_text(h, m->conn[r], M_ERROR, m->id, ncclRemoteError, text);
}

static void hub_violation(hub *h, hcomm *m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hub_violation(hub *h, hcomm *m, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    m->broken = true;
    for (int r = 0; r < m->nranks; r++)
        if (m->conn[r] >= 0)
            hub_send_text(h, m->conn[r], M_VIOLATION, m->id, ncclInvalidUsage, text);
}

static void hub_ready_if_all(hub *h, hcomm *m) {
    if (m->ready || m->joined < m->nranks)
        return;
    m->ready = true;
    for (int r = 0; r < m->nranks; r++) {
        wire w = {.type = M_READY, .comm = m->id, .rank = r, .nranks = m->nranks};
        hub_send(h, m->conn[r], w, NULL);
    }
}

/* The sum of the contributions in rank order, element i of each starting
 * at element `from` of every rank's buffer. */
static void reduce(const hcomm *m, const hcoll *o, uint64_t from, uint64_t n, char *out) {
    for (uint64_t i = 0; i < n; i++) {
        uint64_t e = from + i;
        if (o->dtype == ncclFloat64) {
            double acc = ((const double *)(const void *)o->buf[0])[e];
            for (int r = 1; r < m->nranks; r++)
                acc += ((const double *)(const void *)o->buf[r])[e];
            memcpy(out + i * 8, &acc, 8);
        } else if (o->dtype == ncclBfloat16) {
            uint16_t acc;
            memcpy(&acc, o->buf[0] + e * 2, 2);
            for (int r = 1; r < m->nranks; r++) {
                uint16_t x;
                memcpy(&x, o->buf[r] + e * 2, 2);
                acc = cudaemu_f32_to_bf16(cudaemu_bf16_to_f32(acc) + cudaemu_bf16_to_f32(x));
            }
            memcpy(out + i * 2, &acc, 2);
        } else {
            float acc;
            memcpy(&acc, o->buf[0] + e * 4, 4);
            for (int r = 1; r < m->nranks; r++) {
                float x;
                memcpy(&x, o->buf[r] + e * 4, 4);
                acc += x;
            }
            memcpy(out + i * 4, &acc, 4);
        }
    }
}

static void hub_complete(hub *h, hcomm *m, hcoll *o) {
    size_t es = dtype_size(o->dtype), n = (size_t)m->nranks;
    if (o->kind == K_ALLGATHER) {
        size_t part = o->count * es;
        char *all = malloc(n * part + 1);
        if (!all)
            abort();
        for (size_t r = 0; r < n; r++)
            memcpy(all + r * part, o->buf[r], part);
        for (int r = 0; r < m->nranks; r++) {
            wire w = {.type = M_RESULT, .comm = m->id, .rank = r, .seq = o->seq, .len = n * part};
            hub_send(h, m->conn[r], w, all);
        }
        free(all);
    } else if (o->kind == K_REDUCESCATTER) {
        char *part = malloc(o->count * es + 1);
        if (!part)
            abort();
        for (int r = 0; r < m->nranks; r++) {
            reduce(m, o, (uint64_t)r * o->count, o->count, part);
            wire w = {.type = M_RESULT, .comm = m->id, .rank = r, .seq = o->seq, .len = o->count * es};
            hub_send(h, m->conn[r], w, part);
        }
        free(part);
    } else {
        char *sum = malloc(o->count * es + 1);
        if (!sum)
            abort();
        reduce(m, o, 0, o->count, sum);
        for (int r = 0; r < m->nranks; r++) {
            wire w = {.type = M_RESULT, .comm = m->id, .rank = r, .seq = o->seq, .len = o->count * es};
            hub_send(h, m->conn[r], w, sum);
        }
        free(sum);
    }
}

static void hub_coll(hub *h, hcomm *m, int k, const wire *w, char *payload) {
    hcoll **pp = &m->colls, *o;
    while ((o = *pp) && o->seq != w->seq)
        pp = &o->next;
    if (!o) {
        o = calloc(1, sizeof *o);
        if (!o || !(o->buf = calloc((size_t)m->nranks, sizeof *o->buf)))
            abort();
        o->seq = w->seq;
        o->kind = w->a;
        o->dtype = w->b;
        o->count = w->count;
        o->first = w->rank;
        *pp = o;
    }
    if (o->kind != w->a || o->dtype != w->b || o->count != w->count) {
        hub_violation(h, m,
                      "collective %llu of a communicator of %d ranks: rank %d (%s) calls %s of %llu %s elements, rank "
                      "%d called %s of %llu %s elements (every rank must make the same collectives in the same "
                      "order with the same count and type; NCCL would hang or corrupt memory)",
                      (unsigned long long)w->seq, m->nranks, w->rank, h->c[k].who, kind_names[w->a],
                      (unsigned long long)w->count, dtype_name(w->b), o->first, kind_names[o->kind],
                      (unsigned long long)o->count, dtype_name(o->dtype));
        free(payload);
        return;
    }
    if (o->buf[w->rank]) {
        free(payload);
        return;
    }
    o->buf[w->rank] = payload;
    if (++o->arrived < m->nranks)
        return;
    hub_complete(h, m, o);
    *pp = o->next;
    for (int r = 0; r < m->nranks; r++)
        free(o->buf[r]);
    free(o->buf);
    free(o);
}

/* All ranks of m have asked for a split: the children by color, ranks by
 * key then parent rank (NCCL's order). */
static void hub_split(hub *h, hcomm *m) {
    int n = m->nranks;
    uint32_t mid = m->id;
    int *done = calloc((size_t)n, sizeof *done);
    if (!done)
        abort();
    for (int r = 0; r < n; r++) {
        if (done[r])
            continue;
        int color = m->color[r];
        if (color == NCCL_SPLIT_NOCOLOR) {
            done[r] = 1;
            wire w = {.type = M_SPLIT_OK, .comm = 0, .rank = -1};
            hub_send(h, m->conn[r], w, NULL);
            continue;
        }
        int size = 0;
        for (int q = r; q < n; q++)
            size += !done[q] && m->color[q] == color;
        hcomm *c = hub_new_comm(h, size, 0);
        m = hub_comm(h, mid); /* (the table may have moved) */
        if (!c)
            abort();
        /* rank within the child: by (key, parent rank) */
        for (int q = r; q < n; q++) {
            if (done[q] || m->color[q] != color)
                continue;
            int my = 0;
            for (int p = r; p < n; p++)
                if (!done[p] && p != q && m->color[p] == color &&
                    (m->key[p] < m->key[q] || (m->key[p] == m->key[q] && p < q)))
                    my++;
            wire w = {.type = M_SPLIT_OK, .comm = c->id, .rank = my, .nranks = size};
            hub_send(h, m->conn[q], w, NULL);
        }
        for (int q = r; q < n; q++)
            if (m->color[q] == color)
                done[q] = 1;
    }
    m->split_in = 0;
    free(done);
}

static void hub_message(hub *h, int k, char *payload) {
    hconn *c = &h->c[k];
    wire w = c->in;
    if (w.type == M_JOIN || w.type == M_ATTACH) {
        if (payload)
            snprintf(c->who, sizeof c->who, "%s", payload);
        free(payload);
        hcomm *m = NULL;
        if (w.type == M_JOIN) {
            for (int i = 0; i < h->nm && !m; i++)
                if (h->m[i].used && h->m[i].nonce == w.seq)
                    m = &h->m[i];
            if (!m && !(m = hub_new_comm(h, w.nranks, w.seq)))
                abort();
        } else if (!(m = hub_comm(h, w.comm))) {
            hub_send_text(h, k, M_VIOLATION, 0, ncclInternalError, "attach to an unknown communicator");
            return;
        }
        c->comm = (int)m->id;
        c->rank = w.rank;
        c->world_rank = w.a;
        if (w.nranks != m->nranks || w.rank < 0 || w.rank >= m->nranks || m->conn[w.rank] >= 0) {
            char text[400];
            snprintf(text, sizeof text,
                     "ncclCommInitRankConfig: rank %d of %d (%s) does not fit the communicator its unique id names "
                     "(%d ranks%s): each rank must pass its own rank, below nranks, and every rank the same nranks",
                     w.rank, w.nranks, c->who, m->nranks,
                     w.rank >= 0 && w.rank < m->nranks && m->conn[w.rank] >= 0 ? "; that rank has joined already" : "");
            hub_send_text(h, k, M_VIOLATION, m->id, ncclInvalidUsage, text);
            c->comm = -1;
            return;
        }
        m->conn[w.rank] = k;
        m->joined++;
        m->live++;
        if (w.c != (int32_t)getpid()) {
            c->other = true;
            pthread_mutex_lock(&h->mu);
            h->open++;
            pthread_mutex_unlock(&h->mu);
        }
        hub_ready_if_all(h, m);
        return;
    }
    hcomm *m = c->comm >= 0 ? hub_comm(h, (uint32_t)c->comm) : NULL;
    if (!m) {
        free(payload);
        return;
    }
    switch (w.type) {
    case M_SPLIT:
        m->color[c->rank] = w.a;
        m->key[c->rank] = w.b;
        if (++m->split_in == m->nranks)
            hub_split(h, m);
        break;
    case M_COLL:
        if (m->broken)
            free(payload);
        else
            hub_coll(h, m, k, &w, payload);
        break;
    case M_LEAVE:
        c->left = true;
        free(payload);
        break;
    default:
        free(payload);
        break;
    }
}

/* Connection k closed: a rank that had not said goodbye is lost. */
static void hub_closed(hub *h, int k) {
    hconn *c = &h->c[k];
    hcomm *m = c->comm >= 0 ? hub_comm(h, (uint32_t)c->comm) : NULL;
    close(c->fd);
    c->fd = -1;
    for (hbuf *b = c->out, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    c->out = c->out_tail = NULL;
    free(c->payload);
    c->payload = NULL;
    if (c->other) {
        pthread_mutex_lock(&h->mu);
        h->open--;
        pthread_mutex_unlock(&h->mu);
        c->other = false;
    }
    if (!m)
        return;
    m->conn[c->rank] = -1;
    if (!c->left && !m->broken) {
        char text[400];
        snprintf(text, sizeof text,
                 "rank %d (world rank %d, %s) of a communicator of %d ranks closed its connection without "
                 "finalizing: it exited, was killed or aborted",
                 c->rank, c->world_rank, c->who, m->nranks);
        hub_fail_comm(h, m, text);
    }
    if (--m->live == 0)
        hub_free_comm(m);
}

static void hub_accept(hub *h) {
    int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int k = 0;
    while (k < h->nc && h->c[k].fd >= 0)
        k++;
    if (k == h->nc) {
        hconn *c = realloc(h->c, (size_t)(h->nc + 16) * sizeof *c);
        if (!c)
            abort();
        memset(c + h->nc, 0, 16 * sizeof *c);
        for (int i = h->nc; i < h->nc + 16; i++)
            c[i].fd = -1;
        h->c = c;
        h->nc += 16;
    }
    memset(&h->c[k], 0, sizeof h->c[k]);
    h->c[k].fd = fd;
    h->c[k].comm = -1;
}

/* Reads what connection k has; false when it closed. */
static bool hub_read(hub *h, int k) {
    hconn *c = &h->c[k];
    for (;;) {
        char *dst;
        size_t want;
        if (c->in_got < sizeof c->in) {
            dst = (char *)&c->in + c->in_got;
            want = sizeof c->in - c->in_got;
        } else {
            size_t got = c->in_got - sizeof c->in;
            if (!c->payload && c->in.len && !(c->payload = malloc(c->in.len)))
                abort();
            dst = c->payload + got;
            want = c->in.len - got;
        }
        if (want) {
            ssize_t r = recv(c->fd, dst, want, 0);
            if (r == 0)
                return false;
            if (r < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
            c->in_got += (size_t)r;
            if ((size_t)r < want)
                continue;
        }
        if (c->in_got == sizeof c->in + c->in.len) {
            char *p = c->payload;
            c->payload = NULL;
            c->in_got = 0;
            hub_message(h, k, p);
            if (c->fd < 0)
                return true;
        }
    }
}

static void hub_write(hub *h, int k) {
    hconn *c = &h->c[k];
    while (c->out) {
        hbuf *b = c->out;
        ssize_t w = send(c->fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL);
        if (w < 0)
            return; /* EAGAIN, or the peer is gone: its read side says so */
        b->off += (size_t)w;
        if (b->off < b->len)
            return;
        c->out = b->next;
        if (!c->out)
            c->out_tail = NULL;
        free(b);
    }
}

static void *hub_main(void *arg) {
    hub *h = arg;
    struct pollfd *p = NULL;
    for (;;) {
        struct pollfd *q = realloc(p, (size_t)(h->nc + 1) * sizeof *p);
        if (!q)
            abort();
        p = q;
        p[0] = (struct pollfd){.fd = h->lfd, .events = POLLIN};
        for (int k = 0; k < h->nc; k++)
            p[k + 1] = (struct pollfd){.fd = h->c[k].fd, .events = (short)(POLLIN | (h->c[k].out ? POLLOUT : 0))};
        int nfds = h->nc + 1;
        if (poll(p, (nfds_t)nfds, -1) < 0)
            continue;
        for (int k = 0; k < nfds - 1; k++) {
            if (h->c[k].fd < 0 || !p[k + 1].revents)
                continue;
            if (p[k + 1].revents & POLLOUT)
                hub_write(h, k);
            if ((p[k + 1].revents & (POLLIN | POLLHUP | POLLERR)) && !hub_read(h, k))
                hub_closed(h, k);
            else if (h->c[k].fd >= 0)
                hub_write(h, k);
        }
        if (p[0].revents & POLLIN)
            hub_accept(h);
    }
    return NULL;
}

/* At exit, the hub's process waits (at most 10 s) for the ranks of other
 * processes to leave, so their last messages are delivered: NCCL's ranks
 * do not depend on the root's process once initialised; ours do, on its
 * hub.  (Its own ranks' connections close with the process.) */
static void hub_drain(void) {
    write_counts();
    hub *h = the_hub;
    if (!h)
        return;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&h->mu);
        int open = h->open;
        pthread_mutex_unlock(&h->mu);
        if (open == 0)
            return;
        usleep(10000);
    }
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void at_exit_once(void) { atexit(hub_drain); }

/* This host's address for the hub: NCCL_SOCKET_IFNAME's interface (a comma
 * list of name prefixes, "=" exact, "^" excluding), else the first up
 * interface that is not loopback, else loopback. */
static int pick_address(struct in_addr *out, char *why, size_t size) {
    const char *want = getenv("NCCL_SOCKET_IFNAME");
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        snprintf(why, size, "getifaddrs: %s", strerror(errno));
        return -1;
    }
    bool found = false, lo = false;
    struct in_addr lo_addr = {htonl(INADDR_LOOPBACK)};
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
            continue;
        struct in_addr a = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
        bool match;
        if (want && *want) {
            bool exclude = want[0] == '^', exact = want[exclude] == '=';
            const char *list = want + exclude + exact;
            bool listed = false;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", list);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && !listed; t = strtok_r(NULL, ",", &save))
                listed = exact ? strcmp(i->ifa_name, t) == 0 : strncmp(i->ifa_name, t, strlen(t)) == 0;
            match = exclude ? !listed && !(i->ifa_flags & IFF_LOOPBACK) : listed;
        } else {
            match = !(i->ifa_flags & IFF_LOOPBACK) && strncmp(i->ifa_name, "docker", 6) != 0;
            if (i->ifa_flags & IFF_LOOPBACK)
                lo = true, lo_addr = a;
        }
        if (match)
            *out = a, found = true;
    }
    freeifaddrs(ifs);
    if (!found && !(want && *want) && lo)
        *out = lo_addr, found = true;
    if (!found)
        snprintf(why, size, "no up IPv4 interface matches NCCL_SOCKET_IFNAME=%s", want ? want : "(unset)");
    return found ? 0 : -1;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid) {
    COUNT(C_GETUNIQUEID);
    pthread_once(&exit_once, at_exit_once);
    if (!uid)
        return set_error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    char why[256];
    struct in_addr addr;
    if (pick_address(&addr, why, sizeof why) != 0)
        return set_error(ncclSystemError, "ncclGetUniqueId: no interface for the bootstrap: %s", why);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr, .sin_port = 0};
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        ncclResult_t r = set_error(ncclSystemError, "ncclGetUniqueId: the bootstrap socket on %s: %s", inet_ntoa(addr),
                                   strerror(errno));
        if (fd >= 0)
            close(fd);
        return r;
    }
    hub *h = calloc(1, sizeof *h);
    if (!h) {
        close(fd);
        return set_error(ncclSystemError, "ncclGetUniqueId: out of memory");
    }
    h->lfd = fd;
    pthread_mutex_init(&h->mu, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, hub_main, h) != 0) {
        close(fd);
        free(h);
        return set_error(ncclSystemError, "ncclGetUniqueId: cannot start the bootstrap thread");
    }
    pthread_detach(t);
    the_hub = h;
    emu_id id = {.magic = ID_MAGIC, .addr = sa.sin_addr.s_addr, .port = sa.sin_port};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)h;
    memset(uid, 0, sizeof *uid);
    memcpy(uid->internal, &id, sizeof id);
    return ncclSuccess;
}

/* ---- communicators ---------------------------------------------------- */

typedef struct result {
    struct result *next;
    uint64_t seq, len;
    char *data;
} result;

struct ncclComm {
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    int refs;
    int fd;
    bool blocking;
    uint32_t id;
    int rank, nranks, world_rank, device;
    emu_id hub_id;
    uint64_t nonce;
    bool attach; /* a split's child: ATTACH, not JOIN */
    ncclResult_t async;
    char error[400];
    bool aborted, finalizing, left, rx_started;
    pthread_t rx;
    long pending;      /* collectives enqueued and not finished */
    uint64_t next_seq; /* this rank's next collective on it */
    result *results;
    struct ncclComm *splitting; /* the child whose split is in progress */
    bool split_unreaped;        /* a nonblocking parent's split is done, not yet seen by ncclCommGetAsyncError */
    bool nocolor_wait;          /* a NCCL_SPLIT_NOCOLOR split waits for its round */
    void *buffers;              /* device memory NCCL keeps (NCCL_BUFFSIZE) */
    size_t buffer_bytes;
    pthread_mutex_t send_mu;
};

static long coll_counter; /* this process's collectives, for CUDAEMU_NCCL_ASYNC_ERROR */

static void unref(ncclComm_t c) {
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left)
        return;
    for (result *r = c->results, *n; r; r = n) {
        n = r->next;
        free(r->data);
        free(r);
    }
    pthread_mutex_destroy(&c->send_mu);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static ncclComm_t new_comm(int device, bool blocking) {
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->refs = 1;
    c->fd = -1;
    c->device = device;
    c->blocking = blocking;
    c->async = ncclInProgress;
    return c;
}

/* The communicator failed (mu held): its asynchronous error, once. */
static void comm_fail(ncclComm_t c, ncclResult_t r, const char *text) {
    if (c->async == ncclSuccess || c->async == ncclInProgress) {
        c->async = r;
        snprintf(c->error, sizeof c->error, "%s", text);
        set_error(r, "%s", text);
    }
    pthread_cond_broadcast(&c->cv);
}

static int send_msg(ncclComm_t c, wire w, const void *payload) {
    pthread_mutex_lock(&c->send_mu);
    int rc = write_all(c->fd, &w, sizeof w);
    if (rc == 0 && w.len)
        rc = write_all(c->fd, payload, w.len);
    pthread_mutex_unlock(&c->send_mu);
    return rc;
}

static void *rx_main(void *arg);

static bool env_rank_is(const char *name, int rank, long *second) {
    const char *v = getenv(name);
    if (!v || !*v)
        return false;
    char *end;
    long r = strtol(v, &end, 10);
    if (second)
        *second = *end == ':' ? strtol(end + 1, NULL, 10) : 0;
    return r == rank;
}

/* The communicator's thread: reserves NCCL's device memory, connects to
 * the hub, joins (or attaches, for a split's child), then delivers what
 * the hub sends until the connection ends. */
static void *rx_main(void *arg) {
    ncclComm_t c = arg;
    cudaSetDevice(c->device);
    char why[300] = "";
    if (!c->attach && env_rank_is("CUDAEMU_NCCL_INIT_HANG", c->world_rank, NULL)) {
        /* CUDAEMU_NCCL_INIT_HANG: this rank never reaches the hub */
        pthread_mutex_lock(&c->mu);
        while (!c->aborted && !c->left)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    const char *bs = getenv("NCCL_BUFFSIZE");
    size_t buffsize = bs && atol(bs) > 0 ? (size_t)atol(bs) : (size_t)4 << 20;
    c->buffer_bytes = c->nranks > 1 ? 2 * buffsize : 0; /* a send and a receive buffer */
    if (c->buffer_bytes && cudaMalloc(&c->buffers, c->buffer_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        c->buffers = NULL;
        pthread_mutex_lock(&c->mu);
        comm_fail(c, ncclUnhandledCudaError,
                  "cudaemu NCCL: cudaMalloc of the communicator's buffers failed (device "
                  "memory is full)");
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = c->hub_id.addr, .sin_port = c->hub_id.port};
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(why, sizeof why, "cudaemu NCCL: cannot connect to the bootstrap root at %s:%d: %s",
                 inet_ntoa(sa.sin_addr), ntohs(sa.sin_port), strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_mutex_lock(&c->mu);
    c->fd = fd;
    if (fd < 0 || c->aborted) {
        comm_fail(c, ncclSystemError, why[0] ? why : "aborted");
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    pthread_mutex_unlock(&c->mu);
    char who[128], host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    snprintf(who, sizeof who, "host %s pid %ld", host, (long)getpid());
    wire w = {.type = c->attach ? M_ATTACH : M_JOIN,
              .comm = c->id,
              .rank = c->rank,
              .nranks = c->nranks,
              .a = c->world_rank,
              .c = (int32_t)getpid(),
              .seq = c->nonce,
              .len = strlen(who) + 1};
    if (send_msg(c, w, who) != 0) {
        pthread_mutex_lock(&c->mu);
        comm_fail(c, ncclSystemError, "cudaemu NCCL: the bootstrap root closed the connection at init");
        pthread_mutex_unlock(&c->mu);
    }
    for (;;) {
        wire m;
        if (read_all(fd, &m, sizeof m) != 0)
            break;
        char *p = NULL;
        if (m.len && (!(p = malloc(m.len)) || read_all(fd, p, m.len) != 0)) {
            free(p);
            break;
        }
        pthread_mutex_lock(&c->mu);
        switch (m.type) {
        case M_READY:
            c->id = m.comm;
            if (c->async == ncclInProgress)
                c->async = ncclSuccess;
            pthread_cond_broadcast(&c->cv);
            break;
        case M_SPLIT_OK: {
            /* (the hub answers each rank's splits in order; comm 0 is the
             * answer to a NCCL_SPLIT_NOCOLOR one) */
            ncclComm_t child = m.comm ? c->splitting : NULL;
            if (m.comm) {
                c->splitting = NULL;
                c->split_unreaped = !c->blocking && c->async == ncclInProgress;
            } else
                c->nocolor_wait = false;
            pthread_cond_broadcast(&c->cv);
            if (child) {
                pthread_mutex_lock(&child->mu);
                child->id = m.comm;
                child->rank = m.rank;
                child->nranks = m.nranks;
                child->attach = true;
                child->hub_id = c->hub_id;
                child->world_rank = c->world_rank;
                child->rx_started = !child->aborted && pthread_create(&child->rx, NULL, rx_main, child) == 0;
                if (!child->rx_started)
                    comm_fail(child, ncclSystemError, "cudaemu NCCL: cannot start the communicator's thread");
                pthread_mutex_unlock(&child->mu);
            }
            break;
        }
        case M_RESULT: {
            result *r = malloc(sizeof *r);
            if (!r)
                abort();
            *r = (result){c->results, m.seq, m.len, p};
            c->results = r;
            p = NULL;
            pthread_cond_broadcast(&c->cv);
            break;
        }
        case M_ERROR:
            if (!c->left)
                comm_fail(c, (ncclResult_t)m.a, p ? p : "?");
            break;
        case M_VIOLATION:
            pthread_mutex_unlock(&c->mu);
            cudaemu_report("NCCL: %s", p ? p : "?");
        default:
            break;
        }
        pthread_mutex_unlock(&c->mu);
        free(p);
    }
    pthread_mutex_lock(&c->mu);
    if (!c->aborted && !c->left)
        comm_fail(c, ncclRemoteError,
                  "cudaemu NCCL: the connection to the bootstrap root closed (the process of the rank that made "
                  "the unique id exited or was killed)");
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static bool config_ok(const ncclConfig_t *config, const char *call, ncclResult_t *r) {
    if (config && (config->magic != CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, commName))) {
        *r = set_error(ncclInvalidArgument, "%s: the config was not initialised with NCCL_CONFIG_INITIALIZER", call);
        return false;
    }
    return true;
}

/* A blocking communicator's call waits here for what it started. */
static ncclResult_t finish(ncclComm_t c, ncclResult_t r) {
    if (r != ncclInProgress || !c || !c->blocking)
        return r;
    pthread_mutex_lock(&c->mu);
    while (c->async == ncclInProgress && !c->aborted)
        pthread_cond_wait(&c->cv, &c->mu);
    r = c->async;
    pthread_mutex_unlock(&c->mu);
    return r;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config) {
    COUNT(C_INIT);
    pthread_once(&exit_once, at_exit_once);
    ncclResult_t r;
    if (!comm)
        return set_error(ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
    *comm = NULL;
    if (!config_ok(config, "ncclCommInitRankConfig", &r))
        return r;
    emu_id id;
    memcpy(&id, commId.internal, sizeof id);
    if (id.magic != ID_MAGIC)
        return set_error(ncclInvalidArgument, "ncclCommInitRankConfig: the unique id was not made by "
                                              "ncclGetUniqueId (of this emulator)");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return set_error(ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d ranks", rank, nranks);
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return set_error(ncclUnhandledCudaError, "ncclCommInitRankConfig: cudaGetDevice failed");
    ncclComm_t c = new_comm(dev, !config || config->blocking != 0);
    if (!c)
        return set_error(ncclSystemError, "ncclCommInitRankConfig: out of memory");
    c->hub_id = id;
    c->nonce = id.nonce;
    c->rank = rank;
    c->world_rank = rank;
    c->nranks = nranks;
    c->rx_started = pthread_create(&c->rx, NULL, rx_main, c) == 0;
    if (!c->rx_started) {
        free(c);
        return set_error(ncclSystemError, "ncclCommInitRankConfig: cannot start the communicator's thread");
    }
    *comm = c;
    return finish(c, ncclInProgress);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    COUNT(C_SPLIT);
    ncclResult_t r;
    if (!comm || !newcomm)
        return set_error(ncclInvalidArgument, "ncclCommSplit: comm or newcomm is NULL");
    *newcomm = NULL;
    static int splits; /* this process's ncclCommSplit calls (CUDAEMU_NCCL_SPLIT_FAIL) */
    long nth = 0;
    int k = __atomic_add_fetch(&splits, 1, __ATOMIC_RELAXED);
    if (env_rank_is("CUDAEMU_NCCL_SPLIT_FAIL", comm->world_rank, &nth) && nth == k)
        return set_error(ncclInvalidUsage, "ncclCommSplit: refused (CUDAEMU_NCCL_SPLIT_FAIL: Attempt to use "
                                           "communicator before the previous operation returned ncclSuccess)");
    if (!config_ok(config, "ncclCommSplit", &r))
        return r;
    pthread_mutex_lock(&comm->mu);
    if (comm->async != ncclSuccess || comm->aborted || comm->splitting || comm->nocolor_wait) {
        r = comm->async == ncclInProgress || comm->splitting || comm->nocolor_wait
                ? set_error(ncclInvalidUsage, "ncclCommSplit: the parent communicator has an operation in progress "
                                              "(poll ncclCommGetAsyncError until ncclSuccess first)")
            : comm->async != ncclSuccess ? comm->async
                                         : set_error(ncclInvalidUsage, "ncclCommSplit: the parent was aborted");
        pthread_mutex_unlock(&comm->mu);
        return r;
    }
    ncclComm_t child = NULL;
    if (color != NCCL_SPLIT_NOCOLOR) {
        bool blocking = config ? config->blocking != 0 : comm->blocking;
        if (!(child = new_comm(comm->device, blocking))) {
            pthread_mutex_unlock(&comm->mu);
            return set_error(ncclSystemError, "ncclCommSplit: out of memory");
        }
        comm->splitting = child;
        /* a nonblocking parent is busy with the split until a poll of its
         * own (ncclCommGetAsyncError) sees it done, as NCCL's is: a use
         * before that is refused ("Attempt to use communicator before the
         * previous operation returned ncclSuccess"; the first H200 run
         * found shardrun polling only the child) */
        if (!comm->blocking)
            comm->async = ncclInProgress;
    } else
        comm->nocolor_wait = true;
    pthread_mutex_unlock(&comm->mu);
    wire w = {.type = M_SPLIT, .comm = comm->id, .rank = comm->rank, .nranks = comm->nranks, .a = color, .b = key};
    if (send_msg(comm, w, NULL) != 0) {
        pthread_mutex_lock(&comm->mu);
        comm->splitting = NULL;
        comm->nocolor_wait = false;
        pthread_mutex_unlock(&comm->mu);
        if (child)
            unref(child);
        return set_error(ncclRemoteError, "ncclCommSplit: the connection to the bootstrap root is closed");
    }
    if (!child) {
        /* NCCL_SPLIT_NOCOLOR: no communicator; the round ends first */
        pthread_mutex_lock(&comm->mu);
        while (comm->nocolor_wait && !comm->aborted && comm->async == ncclSuccess)
            pthread_cond_wait(&comm->cv, &comm->mu);
        pthread_mutex_unlock(&comm->mu);
        return ncclSuccess;
    }
    *newcomm = child;
    return finish(child, ncclInProgress);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    COUNT(C_ASYNC);
    if (!comm || !asyncError)
        return set_error(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
    pthread_mutex_lock(&comm->mu);
    if (comm->split_unreaped && comm->async == ncclInProgress) {
        comm->split_unreaped = false;
        comm->async = ncclSuccess;
    }
    *asyncError = comm->async;
    pthread_mutex_unlock(&comm->mu);
    return ncclSuccess;
}

static void leave(ncclComm_t c) {
    /* (mu held) the goodbye: the hub stops counting this rank as live */
    if (c->left || c->fd < 0 || c->aborted)
        return;
    c->left = true;
    wire w = {.type = M_LEAVE, .comm = c->id, .rank = c->rank};
    send_msg(c, w, NULL);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    COUNT(C_FINALIZE);
    if (!comm)
        return set_error(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    pthread_mutex_lock(&comm->mu);
    if (comm->finalizing || comm->aborted) {
        pthread_mutex_unlock(&comm->mu);
        return set_error(ncclInvalidUsage, "ncclCommFinalize: the communicator was finalized or aborted already");
    }
    comm->finalizing = true;
    ncclResult_t r = ncclSuccess;
    if (comm->pending == 0)
        leave(comm);
    else {
        comm->async = ncclInProgress; /* until the collectives in flight are done */
        r = ncclInProgress;
    }
    pthread_mutex_unlock(&comm->mu);
    return finish(comm, r);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    COUNT(C_DESTROY);
    if (!comm)
        return ncclSuccess;
    pthread_mutex_lock(&comm->mu);
    if (!comm->finalizing) { /* NCCL finalizes first (blocking) */
        comm->finalizing = true;
        while (comm->pending > 0 && !comm->aborted && comm->async == ncclSuccess)
            pthread_cond_wait(&comm->cv, &comm->mu);
        leave(comm);
    }
    bool was_left = comm->left, started = comm->rx_started;
    comm->left = true;
    int fd = comm->fd;
    pthread_cond_broadcast(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    if (fd >= 0)
        shutdown(fd, was_left ? SHUT_WR : SHUT_RDWR);
    if (started)
        pthread_join(comm->rx, NULL);
    if (fd >= 0)
        close(fd);
    if (comm->buffers)
        cudaFree(comm->buffers);
    unref(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    COUNT(C_ABORT);
    write_counts();
    if (!comm)
        return ncclSuccess;
    pthread_mutex_lock(&comm->mu);
    comm->aborted = true;
    int fd = comm->fd;
    bool started = comm->rx_started;
    pthread_cond_broadcast(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    if (started)
        pthread_join(comm->rx, NULL);
    if (fd >= 0)
        close(fd);
    /* the device memory stays: after an abort nothing touches the device */
    unref(comm);
    return ncclSuccess;
}

/* ---- collectives ------------------------------------------------------ */

typedef struct {
    ncclComm_t c;
    int kind, dtype;
    uint64_t seq, count;
    const char *send; /* real addresses (cudaemu_device_view) */
    char *recv;
    size_t sbytes, rbytes;
    bool inject; /* CUDAEMU_NCCL_ASYNC_ERROR */
} coll_job;

static void coll_done(ncclComm_t c) {
    /* (mu held) */
    if (--c->pending == 0 && c->finalizing && c->async == ncclInProgress) {
        leave(c);
        c->async = ncclSuccess;
    }
    pthread_cond_broadcast(&c->cv);
}

/* On the stream's worker, in stream order. */
static void coll_run(void *arg) {
    coll_job *j = arg;
    ncclComm_t c = j->c;
    pthread_mutex_lock(&c->mu);
    if (j->inject) {
        comm_fail(c, ncclSystemError,
                  "cudaemu NCCL: an asynchronous error injected by CUDAEMU_NCCL_ASYNC_ERROR (a network or GPU failure "
                  "in the collective)");
    }
    /* (a finalize in progress still runs what was enqueued before it) */
    bool ok = !c->aborted && (c->async == ncclSuccess || (c->async == ncclInProgress && c->finalizing));
    pthread_mutex_unlock(&c->mu);
    if (ok) {
        wire w = {.type = M_COLL,
                  .comm = c->id,
                  .rank = c->rank,
                  .nranks = c->nranks,
                  .a = j->kind,
                  .b = j->dtype,
                  .seq = j->seq,
                  .count = j->count,
                  .len = j->sbytes};
        if (send_msg(c, w, j->send) != 0) {
            pthread_mutex_lock(&c->mu);
            if (!c->aborted)
                comm_fail(c, ncclRemoteError,
                          "cudaemu NCCL: the connection to the bootstrap root closed in a "
                          "collective");
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_lock(&c->mu);
    result *got = NULL;
    for (;;) {
        for (result **pp = &c->results; *pp && !got; pp = &(*pp)->next)
            if ((*pp)->seq == j->seq) {
                got = *pp;
                *pp = got->next;
                break;
            }
        if (got || c->aborted || (c->async != ncclSuccess && c->async != ncclInProgress))
            break;
        pthread_cond_wait(&c->cv, &c->mu);
    }
    if (!got) {
        /* the collective failed: like a GPU's, it never completes; an
         * abort releases the stream (its result is never written) */
        while (!c->aborted)
            pthread_cond_wait(&c->cv, &c->mu);
        coll_done(c);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    if (got->len != j->rbytes)
        cudaemu_report("NCCL: %s collective %llu: the hub returned %llu bytes for a receive buffer of %zu",
                       kind_names[j->kind], (unsigned long long)j->seq, (unsigned long long)got->len, j->rbytes);
    if (got->len)
        memcpy(j->recv, got->data, got->len);
    free(got->data);
    free(got);
    pthread_mutex_lock(&c->mu);
    coll_done(c);
    pthread_mutex_unlock(&c->mu);
}

static void coll_free(void *arg) {
    coll_job *j = arg;
    unref(j->c);
    free(j);
}

static bool overlap(const char *a, size_t an, const char *b, size_t bn) { return a < b + bn && b < a + an; }

static ncclResult_t collective(int kind, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const void *caller) {
    const char *call = kind_names[kind];
    char site[200];
    cudaemu_describe_site(caller, site, sizeof site);
    if (!comm)
        return set_error(ncclInvalidArgument, "%s: comm is NULL", call);
    if (datatype != ncclFloat32 && datatype != ncclBfloat16 && datatype != ncclFloat64)
        return set_error(ncclInvalidArgument, "%s: data type %d is not modelled by the emulator (f32, bf16, f64)", call,
                         (int)datatype);
    if (kind != K_ALLGATHER && op != ncclSum)
        return set_error(ncclInvalidArgument, "%s: reduction %d is not modelled by the emulator (ncclSum)", call,
                         (int)op);
    pthread_mutex_lock(&comm->mu);
    ncclResult_t state = comm->async;
    bool aborted = comm->aborted, finalizing = comm->finalizing;
    int n = comm->nranks, rank = comm->rank, world_rank = comm->world_rank;
    pthread_mutex_unlock(&comm->mu);
    if (aborted || finalizing)
        return set_error(ncclInvalidUsage, "%s: the communicator was %s", call, aborted ? "aborted" : "finalized");
    if (state == ncclInProgress)
        return set_error(ncclInvalidUsage,
                         "%s: the communicator is not ready (poll ncclCommGetAsyncError until "
                         "ncclSuccess first)",
                         call);
    if (state != ncclSuccess)
        return state;
    int dev = -1;
    cudaGetDevice(&dev);
    if (dev != comm->device)
        cudaemu_report("NCCL: %s on a communicator of device %d while device %d is current (NCCL's calls run on "
                       "the communicator's device), called from %s",
                       call, comm->device, dev, site);
    size_t es = dtype_size(datatype);
    size_t sbytes = (kind == K_REDUCESCATTER ? (size_t)n : 1) * count * es;
    size_t rbytes = (kind == K_ALLGATHER ? (size_t)n : 1) * count * es;
    /* NCCL's buffer rules: device memory of the communicator's device;
     * in place exactly at the documented offset, or not overlapping */
    if (count && (!cudaemu_is_device(sendbuff, sbytes) || !cudaemu_is_device(recvbuff, rbytes)))
        cudaemu_report("NCCL: %s (rank %d, %zu elements of %s): %s [%p, +%zu bytes) is not device memory of device "
                       "%d (NCCL's buffers are the communicator's device's), called from %s",
                       call, rank, count, dtype_name(datatype),
                       cudaemu_is_device(sendbuff, sbytes) ? "recvbuff" : "sendbuff",
                       cudaemu_is_device(sendbuff, sbytes) ? recvbuff : sendbuff,
                       cudaemu_is_device(sendbuff, sbytes) ? rbytes : sbytes, comm->device, site);
    const char *s = count ? cudaemu_device_view(sendbuff, sbytes, call) : sendbuff;
    char *d = count ? cudaemu_device_view(recvbuff, rbytes, call) : recvbuff;
    if (count && overlap(s, sbytes, d, rbytes)) {
        bool in_place = kind == K_ALLGATHER       ? s == d + (size_t)rank * count * es
                        : kind == K_REDUCESCATTER ? d == s + (size_t)rank * count * es
                                                  : s == d;
        if (!in_place)
            cudaemu_report("NCCL: %s (rank %d of %d, %zu elements of %s): sendbuff and recvbuff overlap but the call "
                           "is not in place: in place is %s (NCCL's rule); here sendbuff - recvbuff = %td bytes; "
                           "called from %s",
                           call, rank, n, count, dtype_name(datatype),
                           kind == K_ALLGATHER       ? "sendbuff == recvbuff + rank * sendcount"
                           : kind == K_REDUCESCATTER ? "recvbuff == sendbuff + rank * recvcount"
                                                     : "sendbuff == recvbuff",
                           s - d, site);
    }
    coll_job *j = calloc(1, sizeof *j);
    if (!j)
        return set_error(ncclSystemError, "%s: out of memory", call);
    long nth = __atomic_fetch_add(&coll_counter, 1, __ATOMIC_RELAXED);
    long at = -1;
    bool inject = env_rank_is("CUDAEMU_NCCL_ASYNC_ERROR", world_rank, &at) && at == nth;
    pthread_mutex_lock(&comm->mu);
    *j = (coll_job){comm, kind, (int)datatype, comm->next_seq++, count, s, d, sbytes, rbytes, inject};
    comm->refs++;
    comm->pending++;
    pthread_mutex_unlock(&comm->mu);
    if (cudaemu_enqueue(stream, coll_run, j, coll_free) != cudaSuccess) {
        pthread_mutex_lock(&comm->mu);
        comm->refs--;
        comm->pending--;
        pthread_mutex_unlock(&comm->mu);
        free(j);
        return set_error(ncclUnhandledCudaError, "%s: the stream is not valid on device %d", call, comm->device);
    }
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    COUNT(C_ALLGATHER);
    return collective(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream,
                      __builtin_return_address(0));
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    COUNT(C_REDUCESCATTER);
    return collective(K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, comm, stream,
                      __builtin_return_address(0));
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    COUNT(C_ALLREDUCE);
    return collective(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, comm, stream, __builtin_return_address(0));
}

#endif /* SR_HAVE_NCCL */
