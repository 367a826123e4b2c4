/* comm.c — the TCP transport and ring collectives; see comm.h.
 *
 * Threads: the caller queues operations; one progress thread runs them in
 * queue order (all ranks queue the same operations in the same order, so
 * the per-process order is consistent and deadlock-free); one accept thread
 * takes incoming connections and authenticates them.
 *
 * Wire protocol.  Handshake: the accepting side sends a 32-byte random
 * nonce; the connecting side answers {magic, rank, HMAC-SHA256(secret,
 * nonce || rank)}; the acceptor checks it in constant time and answers one
 * byte (1 = accepted).  A connection that fails is logged and dropped;
 * training goes on.  Data: every ring step sends a 16-byte header {magic,
 * op sequence number, payload bytes} and the payload; a header that does not
 * match is a protocol error.  Every poll has a deadline: comm.timeout_s
 * without any byte moving fails the operation, naming the silent peer. */
#include "srconfig.h"

#include "comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"

#define WIRE_MAGIC 0x53524431u /* "SRD1" */
#define HELLO_MAGIC 0x53524831u /* "SRH1" */
#define SECRET_LEN 32
#define NONCE_LEN 32

typedef struct {
    char ip[64];
    int port;
} peer_addr;

struct sr_group {
    sr_transport *tp;
    int n, me;
    int *ranks;
};

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
    sr_status status;
    float scratch; /* barrier payload */
    char message[512];
    bool done;
    sr_req *next;
};

struct sr_transport {
    sr_world *world;
    double timeout_s;
    int listen_fd;
    char address[96];
    peer_addr *addrs;
    unsigned char secret[SECRET_LEN];
    int *fds;      /* per world rank: connected socket or -1 */
    bool *needed;  /* per world rank: a ring neighbour in some group */
    sr_group **groups;
    int ngroups;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    sr_req *head, *tail;
    bool stopping, started, accepting;
    pthread_t progress, acceptor;
    uint32_t seq;
    /* first failure: every later operation fails with it */
    sr_status broken;
    char broken_msg[512];
    int rejected;
    void *scratch[2]; /* ping-pong chunk buffers of the progress thread */
    size_t scratch_bytes;
};

/* ------------------------------------------------------------------------ */
/* dtypes */

size_t sr_dtype_size(sr_dtype dt) { return dt == SR_DT_BF16 ? 2 : dt == SR_DT_F64 ? 8 : 4; }

uint16_t sr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);        /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float sr_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void sr_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = sr_f32_to_bf16(src[i]);
}

void sr_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = sr_bf16_to_f32(src[i]);
}

/* ------------------------------------------------------------------------ */
/* sockets */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_nonblock(int fd, bool on) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static void tune_socket(int fd) {
    int one = 1;
    /* Buffer sizes are left to the kernel: setting SO_SNDBUF/SO_RCVBUF turns
     * off TCP autotuning and caps them at net.core.[rw]mem_max. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Blocking-style I/O on a non-blocking fd with a deadline of `timeout`
 * seconds without progress.  Returns 0, or -1 with errno (ETIMEDOUT, EPIPE
 * for a closed peer, ...). */
static int io_full(int fd, void *buf, size_t len, bool writing, double timeout) {
    size_t done = 0;
    double last = now_s();
    while (done < len) {
        ssize_t n = writing ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            last = now_s();
            continue;
        }
        if (n == 0 && !writing) {
            errno = EPIPE;
            return -1;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        double left = timeout - (now_s() - last);
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
        poll(&p, 1, ms);
    }
    return 0;
}

/* Resolves comm.interface (address, interface name, or "" = host name). */
static sr_status bind_address(const char *iface, char *ip, size_t n) {
    struct in_addr a;
    if (iface && *iface) {
        if (inet_pton(AF_INET, iface, &a) == 1) {
            snprintf(ip, n, "%s", iface);
            return SR_OK;
        }
        struct ifaddrs *ifs = NULL, *it;
        if (getifaddrs(&ifs) == 0) {
            for (it = ifs; it; it = it->ifa_next)
                if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET && strcmp(it->ifa_name, iface) == 0) {
                    inet_ntop(AF_INET, &((struct sockaddr_in *)it->ifa_addr)->sin_addr, ip, (socklen_t)n);
                    freeifaddrs(ifs);
                    return SR_OK;
                }
            freeifaddrs(ifs);
        }
        return sr_error(SR_ERR_CONFIG,
                        "comm.interface '%s' is neither an IPv4 address nor an interface with an IPv4 address here "
                        "(hint: see ip -br addr)",
                        iface);
    }
    char host[256];
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    if (gethostname(host, sizeof host) == 0 && getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, (socklen_t)n);
        freeaddrinfo(res);
        return SR_OK;
    }
    sr_log_warn("cannot resolve the host name to an IPv4 address; the CPU transport binds to 127.0.0.1 (set "
                "comm.interface for multi-node jobs)");
    snprintf(ip, n, "127.0.0.1");
    return SR_OK;
}

static void hello_mac(const unsigned char *secret, const unsigned char *nonce, uint32_t rank, unsigned char *mac) {
    unsigned char msg[NONCE_LEN + 4];
    memcpy(msg, nonce, NONCE_LEN);
    memcpy(msg + NONCE_LEN, &rank, 4);
    unsigned int len = 32;
    HMAC(EVP_sha256(), secret, SECRET_LEN, msg, sizeof msg, mac, &len);
}

typedef struct {
    uint32_t magic, rank;
    unsigned char mac[32];
} hello_msg;

/* ------------------------------------------------------------------------ */
/* accept thread */

static void *accept_main(void *arg) {
    sr_transport *tp = arg;
    for (;;) {
        pthread_mutex_lock(&tp->lock);
        bool stop = tp->stopping;
        pthread_mutex_unlock(&tp->lock);
        if (stop)
            break;
        struct pollfd p = {tp->listen_fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        int fd = accept(tp->listen_fd, (struct sockaddr *)&from, &fl);
        if (fd < 0)
            continue;
        char who[80];
        snprintf(who, sizeof who, "%s:%d", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
        set_nonblock(fd, true);
        tune_socket(fd);
        unsigned char nonce[NONCE_LEN];
        RAND_bytes(nonce, sizeof nonce);
        hello_msg h;
        const char *why = NULL;
        /* a stranger gets a short deadline so it cannot stall start-up */
        double hs_timeout = tp->timeout_s < 5 ? tp->timeout_s : 5;
        if (io_full(fd, nonce, sizeof nonce, true, hs_timeout) != 0 || io_full(fd, &h, sizeof h, false, hs_timeout) != 0)
            why = "no handshake";
        else if (h.magic != HELLO_MAGIC)
            why = "not a shardrun peer (bad magic)";
        else if (h.rank >= (uint32_t)tp->world->size)
            why = "claims a rank outside the job";
        else {
            unsigned char want[32];
            hello_mac(tp->secret, nonce, h.rank, want);
            if (CRYPTO_memcmp(want, h.mac, 32) != 0)
                why = "wrong job secret";
        }
        if (!why) {
            pthread_mutex_lock(&tp->lock);
            if (!tp->needed[h.rank] || tp->fds[h.rank] >= 0)
                why = "not an expected peer";
            pthread_mutex_unlock(&tp->lock);
        }
        unsigned char verdict = why ? 0 : 1;
        if (!why && io_full(fd, &verdict, 1, true, hs_timeout) != 0)
            why = "handshake broke";
        if (why) {
            pthread_mutex_lock(&tp->lock);
            tp->rejected++;
            pthread_mutex_unlock(&tp->lock);
            sr_log_warn("rejected a transport connection from %s: %s", who, why);
            close(fd);
            continue;
        }
        pthread_mutex_lock(&tp->lock);
        tp->fds[h.rank] = fd;
        pthread_cond_broadcast(&tp->cond);
        pthread_mutex_unlock(&tp->lock);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */

sr_status sr_transport_open(sr_transport **out, sr_world *w, const sr_config *cfg) {
    *out = NULL;
    sr_transport *tp = calloc(1, sizeof *tp);
    if (!tp)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    tp->world = w;
    tp->timeout_s = cfg->comm_timeout_s;
    tp->listen_fd = -1;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->cond, NULL);
    tp->fds = malloc(sizeof(int) * (size_t)w->size);
    tp->needed = calloc((size_t)w->size, sizeof(bool));
    tp->addrs = calloc((size_t)w->size, sizeof(peer_addr));
    if (!tp->fds || !tp->needed || !tp->addrs) {
        sr_transport_close(tp);
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    }
    for (int i = 0; i < w->size; i++)
        tp->fds[i] = -1;
    *out = tp;
    /* resolved even for one rank, so a bad comm.interface fails before a
     * long job first runs on several ranks */
    char ip[64];
    sr_status st = bind_address(cfg->comm_interface, ip, sizeof ip);
    if (st != SR_OK || w->size == 1)
        return st;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    a.sin_port = 0;
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        if (fd >= 0)
            close(fd);
        return sr_error(SR_ERR_CONFIG, "cannot listen on %s (comm.interface): %s", ip, strerror(errno));
    }
    tp->listen_fd = fd;
    snprintf(tp->address, sizeof tp->address, "%s:%d", ip, ntohs(a.sin_port));

    peer_addr mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.ip, sizeof mine.ip, "%s", ip);
    mine.port = ntohs(a.sin_port);
    st = sr_world_allgather(w, "shardrun.addr", &mine, sizeof mine, tp->addrs);
    if (st != SR_OK)
        return st;
    /* The per-job secret: rank 0's random bytes, shared through PMIx only. */
    unsigned char mysecret[SECRET_LEN], *all = malloc((size_t)w->size * SECRET_LEN);
    if (!all)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    if (RAND_bytes(mysecret, SECRET_LEN) != 1) {
        free(all);
        return sr_error(SR_ERR_INTERNAL, "RAND_bytes failed");
    }
    st = sr_world_allgather(w, "shardrun.secret", mysecret, SECRET_LEN, all);
    if (st == SR_OK)
        memcpy(tp->secret, all, SECRET_LEN);
    OPENSSL_cleanse(mysecret, sizeof mysecret);
    OPENSSL_cleanse(all, (size_t)w->size * SECRET_LEN);
    free(all);
    if (st != SR_OK)
        return st;
    tp->accepting = true;
    if (pthread_create(&tp->acceptor, NULL, accept_main, tp) != 0) {
        tp->accepting = false;
        return sr_error(SR_ERR_INTERNAL, "cannot start the accept thread");
    }
    return SR_OK;
}

sr_status sr_group_create(sr_transport *tp, const int *ranks, int n, sr_group **out) {
    sr_group *g = calloc(1, sizeof *g);
    sr_group **ng = realloc(tp->groups, sizeof *ng * ((size_t)tp->ngroups + 1));
    if (!g || !ng) {
        free(g);
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    }
    tp->groups = ng;
    g->tp = tp;
    g->n = n;
    g->me = -1;
    g->ranks = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        g->ranks[i] = ranks[i];
        if (ranks[i] == tp->world->rank)
            g->me = i;
    }
    if (g->me < 0) {
        free(g->ranks);
        free(g);
        return sr_error(SR_ERR_INTERNAL, "group does not contain this rank");
    }
    if (n > 1) {
        tp->needed[g->ranks[(g->me + 1) % n]] = true;
        tp->needed[g->ranks[(g->me + n - 1) % n]] = true;
    }
    tp->groups[tp->ngroups++] = g;
    *out = g;
    return SR_OK;
}

int sr_group_size(const sr_group *g) { return g->n; }
int sr_group_rank(const sr_group *g) { return g->me; }
const char *sr_transport_address(const sr_transport *tp) { return tp->address[0] ? tp->address : "(none)"; }
int sr_transport_rejected(const sr_transport *tp) {
    pthread_mutex_lock((pthread_mutex_t *)&tp->lock);
    int r = tp->rejected;
    pthread_mutex_unlock((pthread_mutex_t *)&tp->lock);
    return r;
}

static void *progress_main(void *arg);

static sr_status connect_peer(sr_transport *tp, int peer, double deadline) {
    const peer_addr *pa = &tp->addrs[peer];
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)pa->port);
        inet_pton(AF_INET, pa->ip, &a.sin_addr);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
            set_nonblock(fd, true);
            tune_socket(fd);
            unsigned char nonce[NONCE_LEN], verdict = 0;
            hello_msg h = {HELLO_MAGIC, (uint32_t)tp->world->rank, {0}};
            double left = deadline - now_s();
            if (left < 1)
                left = 1;
            if (io_full(fd, nonce, sizeof nonce, false, left) == 0) {
                hello_mac(tp->secret, nonce, h.rank, h.mac);
                if (io_full(fd, &h, sizeof h, true, left) == 0 && io_full(fd, &verdict, 1, false, left) == 0 &&
                    verdict == 1) {
                    tp->fds[peer] = fd;
                    return SR_OK;
                }
            }
            close(fd);
            return sr_error(SR_ERR_PEER, "rank %d at %s:%d refused the transport handshake", peer, pa->ip, pa->port);
        }
        int err = errno;
        if (fd >= 0)
            close(fd);
        if (now_s() > deadline)
            return sr_error(SR_ERR_PEER, "cannot connect to rank %d at %s:%d within comm.timeout_s: %s", peer, pa->ip,
                            pa->port, strerror(err));
        usleep(20000);
    }
}

sr_status sr_transport_connect(sr_transport *tp) {
    int me = tp->world->rank;
    double deadline = now_s() + tp->timeout_s;
    for (int p = 0; p < tp->world->size; p++) {
        if (!tp->needed[p] || p >= me)
            continue;
        sr_status st = connect_peer(tp, p, deadline); /* the higher rank connects */
        if (st != SR_OK)
            return st;
    }
    pthread_mutex_lock(&tp->lock);
    for (int p = me + 1; p < tp->world->size; p++) {
        while (tp->needed[p] && tp->fds[p] < 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&tp->cond, &tp->lock, &ts);
            if (now_s() > deadline) {
                pthread_mutex_unlock(&tp->lock);
                return sr_error(SR_ERR_PEER, "rank %d did not connect within comm.timeout_s (%.0f s)", p,
                                tp->timeout_s);
            }
        }
    }
    pthread_mutex_unlock(&tp->lock);
    if (pthread_create(&tp->progress, NULL, progress_main, tp) != 0)
        return sr_error(SR_ERR_INTERNAL, "cannot start the progress thread");
    tp->started = true;
    return SR_OK;
}

void sr_transport_close(sr_transport *tp) {
    if (!tp)
        return;
    pthread_mutex_lock(&tp->lock);
    __atomic_store_n(&tp->stopping, true, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&tp->cond);
    pthread_mutex_unlock(&tp->lock);
    if (tp->started)
        pthread_join(tp->progress, NULL);
    if (tp->accepting)
        pthread_join(tp->acceptor, NULL);
    if (tp->listen_fd >= 0)
        close(tp->listen_fd);
    for (int i = 0; tp->fds && i < tp->world->size; i++)
        if (tp->fds[i] >= 0)
            close(tp->fds[i]);
    for (int i = 0; i < tp->ngroups; i++) {
        free(tp->groups[i]->ranks);
        free(tp->groups[i]);
    }
    OPENSSL_cleanse(tp->secret, sizeof tp->secret);
    for (int i = 0; i < 2; i++)
        sr_mem_free(SR_MEM_COMM, tp->scratch[i], tp->scratch_bytes);
    free(tp->groups);
    free(tp->fds);
    free(tp->needed);
    free(tp->addrs);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->cond);
    free(tp);
}

/* ------------------------------------------------------------------------ */
/* one ring step: send to the right, receive from the left, concurrently */

typedef struct {
    uint32_t magic, seq;
    uint64_t bytes;
} wire_hdr;

static sr_status ring_exchange(sr_group *g, uint32_t seq, const void *sbuf, size_t sbytes, void *rbuf,
                               size_t rbytes, char *msg, size_t msg_len) {
    sr_transport *tp = g->tp;
    int right = g->ranks[(g->me + 1) % g->n], left = g->ranks[(g->me + g->n - 1) % g->n];
    int rfd = tp->fds[right], lfd = tp->fds[left];
    wire_hdr sh = {WIRE_MAGIC, seq, sbytes}, rh;
    size_t s_done = 0, r_done = 0, s_total = sizeof sh + sbytes, r_total = sizeof rh + rbytes;
    double last = now_s();
    bool idle_round = false;
    while (s_done < s_total || r_done < r_total) {
        struct pollfd p[2];
        int np = 0, si = -1, ri = -1;
        if (s_done < s_total) {
            p[np] = (struct pollfd){rfd, POLLOUT, 0};
            si = np++;
        }
        if (r_done < r_total) {
            if (si >= 0 && lfd == rfd) {
                p[si].events |= POLLIN;
                ri = si;
            } else {
                p[np] = (struct pollfd){lfd, POLLIN, 0};
                ri = np++;
            }
        }
        if (__atomic_load_n(&tp->stopping, __ATOMIC_RELAXED)) {
            snprintf(msg, msg_len, "transport closed while an operation was in flight");
            return SR_ERR_PEER;
        }
        double left_s = tp->timeout_s - (now_s() - last);
        if (left_s <= 0) {
            int silent = r_done < r_total ? left : right;
            snprintf(msg, msg_len,
                     "rank %d sent nothing for comm.timeout_s = %.0f s (stopped, hung or unreachable?); giving up",
                     silent, tp->timeout_s);
            return SR_ERR_PEER;
        }
        /* optimistic I/O first; poll only after a round that moved nothing */
        if (!idle_round) {
            for (int k = 0; k < np; k++)
                p[k].revents = p[k].events;
        } else {
            int rc = poll(p, (nfds_t)np, left_s > 1 ? 1000 : (int)(left_s * 1000) + 1);
            if (rc < 0 && errno != EINTR) {
                snprintf(msg, msg_len, "poll failed: %s", strerror(errno));
                return SR_ERR_PEER;
            }
        }
        bool moved = false;
        if (si >= 0 && (p[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
            const char *src;
            size_t len;
            if (s_done < sizeof sh) {
                src = (const char *)&sh + s_done;
                len = sizeof sh - s_done;
            } else {
                src = (const char *)sbuf + (s_done - sizeof sh);
                len = s_total - s_done;
            }
            ssize_t n = send(rfd, src, len, MSG_NOSIGNAL);
            if (n > 0) {
                s_done += (size_t)n;
                moved = true;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                snprintf(msg, msg_len, "lost the connection to rank %d (%s): it exited or failed", right,
                         strerror(errno));
                return SR_ERR_PEER;
            }
        }
        if (ri >= 0 && (p[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
            char *dst;
            size_t len;
            if (r_done < sizeof rh) {
                dst = (char *)&rh + r_done;
                len = sizeof rh - r_done;
            } else {
                dst = (char *)rbuf + (r_done - sizeof rh);
                len = r_total - r_done;
            }
            ssize_t n = recv(lfd, dst, len, 0);
            if (n > 0) {
                size_t before = r_done;
                r_done += (size_t)n;
                moved = true;
                if (before < sizeof rh && r_done >= sizeof rh &&
                    (rh.magic != WIRE_MAGIC || rh.seq != seq || rh.bytes != rbytes)) {
                    snprintf(msg, msg_len,
                             "protocol error from rank %d: operation %u of %llu bytes, expected %u of %zu (ranks "
                             "out of step?)",
                             left, rh.seq, (unsigned long long)rh.bytes, seq, rbytes);
                    return SR_ERR_PEER;
                }
            } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                snprintf(msg, msg_len, "lost the connection to rank %d (%s): it exited or failed", left,
                         n == 0 ? "closed" : strerror(errno));
                return SR_ERR_PEER;
            }
        }
        if (moved)
            last = now_s();
        idle_round = !moved;
    }
    return SR_OK;
}

/* chunk c of `count` elements split in n: [off, off+len) */
static void chunk_of(size_t count, int n, int c, size_t *off, size_t *len) {
    size_t per = (count + (size_t)n - 1) / (size_t)n;
    size_t o = per * (size_t)c;
    *off = o < count ? o : count;
    *len = o + per <= count ? per : (o < count ? count - o : 0);
}

/* Arithmetic on the progress thread stays serial: an OpenMP region opened
 * from this thread would start a second pool and fight the compute pool. */



/* Grows the transport's two ping-pong chunk buffers (progress thread only). */
static bool scratch_reserve(sr_transport *tp, size_t bytes) {
    if (tp->scratch_bytes >= bytes)
        return true;
    for (int i = 0; i < 2; i++) {
        sr_mem_free(SR_MEM_COMM, tp->scratch[i], tp->scratch_bytes);
        tp->scratch[i] = NULL;
    }
    tp->scratch_bytes = 0;
    for (int i = 0; i < 2; i++) {
        tp->scratch[i] = sr_mem_alloc(SR_MEM_COMM, bytes);
        if (!tp->scratch[i])
            return false;
    }
    tp->scratch_bytes = bytes;
    return true;
}

/* partial[i] += own[i] in the wire dtype; the addition itself is fp32 (fp64
 * for fp64), bf16 partial sums are rounded once per hop. */
static void add_chunk(void *partial, const void *own, size_t n, sr_dtype dt) {
    if (dt == SR_DT_F32) {
        float *p = partial;
        const float *o = own;
        for (size_t i = 0; i < n; i++)
            p[i] += o[i];
    } else if (dt == SR_DT_F64) {
        double *p = partial;
        const double *o = own;
        for (size_t i = 0; i < n; i++)
            p[i] += o[i];
    } else {
        uint16_t *p = partial;
        const uint16_t *o = own;
        for (size_t i = 0; i < n; i++)
            p[i] = sr_f32_to_bf16(sr_bf16_to_f32(p[i]) + sr_bf16_to_f32(o[i]));
    }
}

/* Writes src scaled by `scale` to dst (both dt). */
static void scale_copy(void *dst, const void *src, size_t n, sr_dtype dt, double scale) {
    if (scale == 1.0) {
        if (dst != src)
            memmove(dst, src, n * sr_dtype_size(dt));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (dt == SR_DT_F32)
            ((float *)dst)[i] = ((const float *)src)[i] * (float)scale;
        else if (dt == SR_DT_F64)
            ((double *)dst)[i] = ((const double *)src)[i] * scale;
        else
            ((uint16_t *)dst)[i] = sr_f32_to_bf16(sr_bf16_to_f32(((const uint16_t *)src)[i]) * (float)scale);
    }
}

/* Ring reduce-scatter without a full-size copy: `src` holds the group's n
 * chunks (chunk_of(total)); `out` receives the reduced chunk me.  Step k
 * sends the partial sum of chunk me-k-1 and receives that of chunk me-k-2
 * into the other ping-pong buffer, adds its own contribution, and sends it
 * on next step; after n-1 steps the buffer holds chunk me in full. */
static sr_status ring_reduce_scatter(sr_group *g, uint32_t seq, const void *src, void *out, size_t total,
                                     sr_dtype dt, sr_redop op, char *msg, size_t ml) {
    int n = g->n, me = g->me;
    size_t es = sr_dtype_size(dt), maxc = (total + (size_t)n - 1) / (size_t)n;
    double scale = op == SR_OP_AVG ? 1.0 / n : 1.0;
    size_t mo, ml_me;
    chunk_of(total, n, me, &mo, &ml_me);
    if (n == 1) {
        scale_copy(out, (const char *)src + mo * es, ml_me, dt, scale);
        return SR_OK;
    }
    if (!scratch_reserve(g->tp, maxc * es + 16)) {
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
            sr_status st = ring_exchange(g, seq, sendp + a * es, sn * es, recvp + a * es, rn * es, msg, ml);
            if (st != SR_OK)
                return st;
            add_chunk(recvp + a * es, (const char *)src + (ro + a) * es, rn, dt);
            if (final_step) /* chunk me is complete: store it while the rest streams */
                scale_copy((char *)out + a * es, recvp + a * es, rn, dt, scale);
        }
        sendp = recvp;
        sl = rl;
        next ^= 1;
    }
    return SR_OK;
}

static sr_status ring_allgather(sr_group *g, uint32_t seq, void *buf, size_t count, size_t es, bool chunked,
                                char *msg, size_t ml) {
    /* buf holds n chunks; chunk me is filled.  chunked: chunk_of(count) layout
     * (allreduce); else n chunks of `count` elements each. */
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
        st = ring_exchange(g, seq, (char *)buf + so * es, sl * es, (char *)buf + ro * es, rl * es, msg, ml);
    }
    return st;
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
        sr_status st = ring_reduce_scatter(g, r->seq, r->recv, (char *)r->recv + o * es, r->count, r->dt, r->op,
                                           msg, ml);
        if (st == SR_OK && n > 1)
            st = ring_allgather(g, r->seq, r->recv, r->count, es, true, msg, ml);
        return st;
    }
    case OP_BROADCAST: {
        /* along the ring from the root, one hop per step; only the two ranks
         * of the current hop (ring neighbours) move data */
        size_t bytes = r->count * es;
        for (int k = 0; k < n - 1; k++) {
            int sender = (r->root + k) % n, receiver = (r->root + k + 1) % n;
            if (me != sender && me != receiver)
                continue;
            int peer = g->ranks[me == sender ? receiver : sender];
            int fd = g->tp->fds[peer];
            wire_hdr h = {WIRE_MAGIC, r->seq, bytes}, got;
            int rc;
            if (me == sender) {
                rc = io_full(fd, &h, sizeof h, true, g->tp->timeout_s);
                if (!rc)
                    rc = io_full(fd, r->recv, bytes, true, g->tp->timeout_s);
            } else {
                rc = io_full(fd, &got, sizeof got, false, g->tp->timeout_s);
                if (!rc && (got.magic != WIRE_MAGIC || got.seq != r->seq || got.bytes != bytes)) {
                    snprintf(msg, ml, "protocol error from rank %d during a broadcast", peer);
                    return SR_ERR_PEER;
                }
                if (!rc)
                    rc = io_full(fd, r->recv, bytes, false, g->tp->timeout_s);
            }
            if (rc) {
                if (errno == ETIMEDOUT)
                    snprintf(msg, ml, "rank %d sent nothing for comm.timeout_s = %.0f s; giving up", peer,
                             g->tp->timeout_s);
                else
                    snprintf(msg, ml, "lost the connection to rank %d: it exited or failed", peer);
                return SR_ERR_PEER;
            }
        }
        return SR_OK;
    }
    }
    return SR_ERR_INTERNAL;
}

static void *progress_main(void *arg) {
    sr_transport *tp = arg;
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
        sr_status broken = tp->broken;
        pthread_mutex_unlock(&tp->lock);
        sr_status st;
        if (broken != SR_OK) {
            st = broken;
            snprintf(r->message, sizeof r->message, "%s", tp->broken_msg);
        } else {
            st = run_op(r);
        }
        pthread_mutex_lock(&tp->lock);
        if (st != SR_OK && tp->broken == SR_OK) {
            tp->broken = st;
            snprintf(tp->broken_msg, sizeof tp->broken_msg, "%s", r->message);
        }
        r->status = st;
        r->done = true;
        pthread_cond_broadcast(&tp->cond);
    }
    pthread_mutex_unlock(&tp->lock);
    return NULL;
}

static sr_status submit(sr_group *g, op_kind kind, void *recv, const void *send, size_t count, sr_dtype dt,
                        sr_redop op, int root, sr_req **out) {
    sr_req *r = calloc(1, sizeof *r);
    if (!r)
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    r->kind = kind;
    r->g = g;
    r->recv = recv ? recv : &r->scratch;
    r->send = send ? send : &r->scratch;
    r->count = count;
    r->dt = dt;
    r->op = op;
    r->root = root;
    sr_transport *tp = g->tp;
    if (g->n == 1 || !tp->started) {
        /* nothing to exchange: run inline */
        r->status = g->n == 1 ? run_op(r) : SR_ERR_INTERNAL;
        if (g->n != 1)
            snprintf(r->message, sizeof r->message, "transport not connected");
        r->done = true;
    } else {
        pthread_mutex_lock(&tp->lock);
        r->seq = tp->seq++;
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
    if (!r->done) {
        pthread_mutex_lock(&tp->lock);
        while (!r->done)
            pthread_cond_wait(&tp->cond, &tp->lock);
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
