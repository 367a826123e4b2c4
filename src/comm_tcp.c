/* comm_tcp.c — TCP links: listen, authenticate, connect, framed I/O with
 * deadlines.  See comm_tcp.h for the wire protocol.
 *
 * Threads: one accept thread takes incoming connections and authenticates
 * them until sr_tcp_close; all other calls come from comm's progress
 * thread (I/O) or the owner (open, connect, close). */
#include "srconfig.h"

#include "comm_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
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

#include "clock.h"
#include "counts.h"
#include "mem.h"

#define WIRE_MAGIC 0x53524431u  /* "SRD1" */
#define HELLO_MAGIC 0x53524831u /* "SRH1" */
#define ABORT_MAGIC 0x53524131u /* "SRA1": {magic, culprit rank, reason} instead of a frame */
#define ABORT_SILENT 0u         /* reasons: the culprit sent nothing for timeout_s */
#define ABORT_LOST 1u           /*          the culprit's connection was lost */
/* how long a rank that timed out on its left neighbour still listens for
 * that neighbour's own abort notice before blaming it */
#define ABORT_GRACE_S 2.0
#define SECRET_LEN 32
#define NONCE_LEN 32

typedef struct {
    char ip[64];
    int port;
} peer_addr;

typedef struct {
    uint32_t magic, rank;
    unsigned char mac[32];
} hello_msg;

typedef struct {
    uint32_t magic, seq;
    uint64_t bytes;
} wire_hdr;

struct sr_tcp {
    sr_world *world;
    double timeout_s;
    char key[64]; /* the PMIx keys' prefix */
    int listen_fd;
    char address[96];
    peer_addr *addrs;
    unsigned char secret[SECRET_LEN];
    int *fds;     /* per world rank: connected socket or -1 */
    bool *dirty;  /* per world rank: an outgoing frame was left half sent */
    bool *needed; /* per world rank: a ring neighbour in some group */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping, accepting;
    int accept_errno; /* accept() failed for want of descriptors: the accept thread stopped */
    pthread_t acceptor;
};

/* Out of file descriptors (the process's or the system's): waiting or
 * retrying cannot help, so these fail at once. */
static bool out_of_fds(int err) { return err == EMFILE || err == ENFILE; }

static const char *errno_name(int err) { return err == EMFILE ? "EMFILE" : err == ENFILE ? "ENFILE" : "errno"; }

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

static bool stopping(sr_tcp *t) { return __atomic_load_n(&t->stopping, __ATOMIC_RELAXED); }

/* Blocking-style I/O on a non-blocking fd with a deadline of `timeout`
 * seconds without progress.  Returns 0, or -1 with errno (ETIMEDOUT, EPIPE
 * for a closed peer, ECANCELED when the transport is stopping, ...). */
static int io_full(sr_tcp *t, int fd, void *buf, size_t len, bool writing, double timeout) {
    size_t done = 0;
    double last = sr_clock_mono_s();
    while (done < len) {
        if (t && stopping(t)) {
            errno = ECANCELED;
            return -1;
        }
        ssize_t n = writing ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            last = sr_clock_mono_s();
            continue;
        }
        if (n == 0 && !writing) {
            errno = EPIPE;
            return -1;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        double left = timeout - (sr_clock_mono_s() - last);
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

sr_status sr_tcp_resolve_interface(const char *iface, char *ip, size_t n) {
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
    snprintf(ip, n, "127.0.0.1"); /* one node: any rank reaches it; several: sr_tcp_open refuses it */
    return SR_OK;
}

/* A multi-node job cannot run its transport on a loopback network: the
 * other nodes' ranks would connect to their own loopback.  Inside a network
 * namespace, and on many real clusters, the host name resolves to 127.0.1.1
 * or not at all, so this is the common case of a job file without
 * comm.interface. */
static sr_status refuse_loopback(const sr_world *w, const char *iface, const char *ip) {
    struct in_addr a;
    if (w->num_nodes <= 1 || inet_pton(AF_INET, ip, &a) != 1 || (ntohl(a.s_addr) >> 24) != 127)
        return SR_OK;
    char host[256] = "?", why[400];
    gethostname(host, sizeof host);
    if (iface && *iface)
        snprintf(why, sizeof why, "comm.interface '%s' is %s", iface, ip);
    else if (strcmp(ip, "127.0.0.1") == 0)
        snprintf(why, sizeof why, "the host name '%.255s' does not resolve, and the fallback is %s", host, ip);
    else
        snprintf(why, sizeof why, "the host name '%.255s' resolves to %s", host, ip);
    return sr_error(SR_ERR_CONFIG,
                    "the transport address %s is on a loopback network, which the other nodes of this %d-node job "
                    "cannot reach (%s) (hint: set comm.interface to the cluster network's interface, for example "
                    "eth0 or ib0, or to this node's address on it; see ip -br addr)",
                    ip, w->num_nodes, why);
}

static void hello_mac(const unsigned char *secret, const unsigned char *nonce, uint32_t rank, unsigned char *mac) {
    unsigned char msg[NONCE_LEN + 4];
    memcpy(msg, nonce, NONCE_LEN);
    memcpy(msg + NONCE_LEN, &rank, 4);
    unsigned int len = 32;
    HMAC(EVP_sha256(), secret, SECRET_LEN, msg, sizeof msg, mac, &len);
}

/* ------------------------------------------------------------------------ */
/* accept thread */

const char *sr_tcp_check_hello(const unsigned char secret[32], const unsigned char nonce[32], const void *msg,
                               size_t len, int world, uint32_t *rank) {
    hello_msg h;
    if (len != sizeof h)
        return "no handshake";
    memcpy(&h, msg, sizeof h);
    if (h.magic != HELLO_MAGIC)
        return "not a shardrun peer (bad magic)";
    if (h.rank >= (uint32_t)world)
        return "claims a rank outside the job";
    unsigned char want[32];
    hello_mac(secret, nonce, h.rank, want);
    if (CRYPTO_memcmp(want, h.mac, 32) != 0)
        return "wrong job secret";
    *rank = h.rank;
    return NULL;
}

void sr_tcp_sign_hello(const unsigned char secret[32], const unsigned char nonce[32], void *msg, size_t len) {
    hello_msg h;
    if (len < sizeof h)
        return;
    memcpy(&h, msg, sizeof h);
    hello_mac(secret, nonce, h.rank, h.mac);
    memcpy(msg, &h, sizeof h);
}

bool sr_tcp_check_frame(const void *hdr, size_t len, uint32_t seq, uint64_t bytes, int peer, char *why, size_t n) {
    wire_hdr h;
    if (len != sizeof h) {
        snprintf(why, n, "protocol error from rank %d: a frame header of %zu bytes", peer, len);
        return false;
    }
    memcpy(&h, hdr, sizeof h);
    if (h.magic == WIRE_MAGIC && h.seq == seq && h.bytes == bytes)
        return true;
    snprintf(why, n,
             "protocol error from rank %d: operation %u of %llu bytes, expected %u of %llu (ranks out of step?)", peer,
             h.seq, (unsigned long long)h.bytes, seq, (unsigned long long)bytes);
    return false;
}

/* Authenticates one incoming connection; NULL when accepted (*rank set),
 * else why not. */
static const char *handshake_in(sr_tcp *t, int fd, uint32_t *rank) {
    unsigned char nonce[NONCE_LEN];
    RAND_bytes(nonce, sizeof nonce);
    hello_msg h;
    /* a stranger gets a short deadline so it cannot stall start-up */
    double hs_timeout = t->timeout_s < 5 ? t->timeout_s : 5;
    if (io_full(NULL, fd, nonce, sizeof nonce, true, hs_timeout) != 0 ||
        io_full(NULL, fd, &h, sizeof h, false, hs_timeout) != 0)
        return "no handshake";
    const char *why = sr_tcp_check_hello(t->secret, nonce, &h, sizeof h, t->world->size, rank);
    if (why)
        return why;
    pthread_mutex_lock(&t->lock);
    bool expected = t->needed[*rank] && t->fds[*rank] < 0;
    pthread_mutex_unlock(&t->lock);
    if (!expected)
        return "not an expected peer";
    unsigned char verdict = 1;
    if (io_full(NULL, fd, &verdict, 1, true, hs_timeout) != 0)
        return "handshake broke";
    return NULL;
}

static void *accept_main(void *arg) {
    sr_tcp *t = arg;
    while (!stopping(t)) {
        struct pollfd p = {t->listen_fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        int fd = accept(t->listen_fd, (struct sockaddr *)&from, &fl);
        if (fd < 0 && out_of_fds(errno)) {
            /* the connection stays queued; the owner fails in sr_tcp_connect */
            pthread_mutex_lock(&t->lock);
            t->accept_errno = errno;
            pthread_cond_broadcast(&t->cond);
            pthread_mutex_unlock(&t->lock);
            break;
        }
        if (fd < 0)
            continue;
        char who[80];
        snprintf(who, sizeof who, "%s:%d", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
        set_nonblock(fd, true);
        tune_socket(fd);
        uint32_t rank = 0;
        const char *why = handshake_in(t, fd, &rank);
        pthread_mutex_lock(&t->lock);
        if (!why)
            t->fds[rank] = fd;
        pthread_cond_broadcast(&t->cond);
        pthread_mutex_unlock(&t->lock);
        if (why) {
            sr_log_warn("rejected a transport connection from %s: %s", who, why);
            close(fd);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */

/* Listens on ip and exchanges addresses and the job secret through PMIx. */
static sr_status listen_and_exchange(sr_tcp *t, const char *ip) {
    sr_world *w = t->world;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    a.sin_port = 0;
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return sr_error(SR_ERR_CONFIG, "cannot listen on %s (comm.interface): %s", ip, strerror(err));
    }
    t->listen_fd = fd;
    snprintf(t->address, sizeof t->address, "%s:%d", ip, ntohs(a.sin_port));

    peer_addr mine = {0};
    snprintf(mine.ip, sizeof mine.ip, "%s", ip);
    mine.port = ntohs(a.sin_port);
    char key[96];
    snprintf(key, sizeof key, "%s.addr", t->key);
    sr_status st = sr_world_allgather(w, key, &mine, sizeof mine, t->addrs, t->timeout_s);
    if (st != SR_OK)
        return st;
    /* The per-job secret: rank 0's random bytes, shared through PMIx only. */
    unsigned char mysecret[SECRET_LEN], *all = sr_malloc((size_t)w->size * SECRET_LEN);
    if (!all)
        return sr_error_oom("the transport's secrets");
    if (RAND_bytes(mysecret, SECRET_LEN) != 1) {
        free(all);
        return sr_error(SR_ERR_INTERNAL, "RAND_bytes failed");
    }
    snprintf(key, sizeof key, "%s.secret", t->key);
    st = sr_world_allgather(w, key, mysecret, SECRET_LEN, all, t->timeout_s);
    if (st == SR_OK)
        memcpy(t->secret, all, SECRET_LEN);
    OPENSSL_cleanse(mysecret, sizeof mysecret);
    OPENSSL_cleanse(all, (size_t)w->size * SECRET_LEN);
    free(all);
    return st;
}

sr_status sr_tcp_open(sr_tcp **out, sr_world *w, const sr_transport_opts *o) {
    *out = NULL;
    sr_tcp *t = sr_calloc(1, sizeof *t);
    if (!t)
        return sr_error_oom("the transport");
    t->world = w;
    t->timeout_s = o->timeout_s;
    snprintf(t->key, sizeof t->key, "%s", o->key ? o->key : "shardrun");
    t->listen_fd = -1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    *out = t;
    t->fds = sr_malloc(sizeof(int) * (size_t)w->size);
    t->needed = sr_calloc((size_t)w->size, sizeof(bool));
    t->dirty = sr_calloc((size_t)w->size, sizeof(bool));
    t->addrs = sr_calloc((size_t)w->size, sizeof(peer_addr));
    if (!t->fds || !t->needed || !t->dirty || !t->addrs)
        return sr_error_oom("the transport's peer tables");
    for (int i = 0; i < w->size; i++)
        t->fds[i] = -1;
    /* resolved even for one rank, so a bad comm.interface fails before a
     * long job first runs on several ranks */
    char ip[64];
    sr_status st = sr_tcp_resolve_interface(o->interface, ip, sizeof ip);
    if (st == SR_OK)
        st = refuse_loopback(w, o->interface, ip);
    if (st != SR_OK || w->size == 1)
        return st;
    st = listen_and_exchange(t, ip);
    if (st != SR_OK)
        return st;
    if (pthread_create(&t->acceptor, NULL, accept_main, t) != 0)
        return sr_error(SR_ERR_INTERNAL, "cannot start the accept thread");
    t->accepting = true;
    return SR_OK;
}

void sr_tcp_need(sr_tcp *t, int peer) { t->needed[peer] = true; }

int sr_tcp_peer_count(const sr_tcp *t) {
    int n = 0;
    for (int p = 0; t && p < t->world->size; p++)
        n += t->needed[p] && p != t->world->rank;
    return n;
}

static sr_status connect_peer(sr_tcp *t, int peer, double deadline) {
    const peer_addr *pa = &t->addrs[peer];
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
            hello_msg h = {HELLO_MAGIC, (uint32_t)t->world->rank, {0}};
            double left = deadline - sr_clock_mono_s();
            if (left < 1)
                left = 1;
            if (io_full(NULL, fd, nonce, sizeof nonce, false, left) == 0) {
                hello_mac(t->secret, nonce, h.rank, h.mac);
                if (io_full(NULL, fd, &h, sizeof h, true, left) == 0 &&
                    io_full(NULL, fd, &verdict, 1, false, left) == 0 && verdict == 1) {
                    t->fds[peer] = fd;
                    sr_count_add(SR_COUNT_CONNECTIONS, 1);
                    return SR_OK;
                }
            }
            close(fd);
            return sr_error(SR_ERR_PEER, "rank %d at %s:%d refused the transport handshake", peer, pa->ip, pa->port);
        }
        int err = errno;
        if (fd >= 0)
            close(fd);
        if (fd < 0 && out_of_fds(err))
            return sr_error(SR_ERR_PEER,
                            "cannot open a socket to rank %d at %s:%d: %s (%s) (hint: raise the open-file limit, "
                            "ulimit -n)",
                            peer, pa->ip, pa->port, strerror(err), errno_name(err));
        if (sr_clock_mono_s() > deadline)
            return sr_error(SR_ERR_PEER, "cannot connect to rank %d at %s:%d within comm.timeout_s: %s", peer, pa->ip,
                            pa->port, strerror(err));
        usleep(20000);
    }
}

sr_status sr_tcp_connect(sr_tcp *t) {
    int me = t->world->rank;
    double deadline = sr_clock_mono_s() + t->timeout_s;
    for (int p = 0; p < me; p++) {
        if (!t->needed[p] || t->fds[p] >= 0)
            continue;
        sr_status st = connect_peer(t, p, deadline); /* the higher rank connects */
        if (st != SR_OK)
            return st;
    }
    pthread_mutex_lock(&t->lock);
    for (int p = me + 1; p < t->world->size; p++) {
        while (t->needed[p] && t->fds[p] < 0) {
            if (t->accept_errno) {
                int err = t->accept_errno;
                pthread_mutex_unlock(&t->lock);
                return sr_error(SR_ERR_PEER,
                                "cannot accept rank %d's connection: %s (%s) (hint: raise the open-file limit, "
                                "ulimit -n)",
                                p, strerror(err), errno_name(err));
            }
            struct timespec ts = sr_clock_wall_after(0.1);
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
            if (sr_clock_mono_s() > deadline) {
                pthread_mutex_unlock(&t->lock);
                return sr_error(SR_ERR_PEER, "rank %d did not connect within comm.timeout_s (%.0f s)", p, t->timeout_s);
            }
        }
    }
    pthread_mutex_unlock(&t->lock);
    return SR_OK;
}

int sr_tcp_closed_peer(sr_tcp *t, double wait_s) {
    double t0 = sr_clock_mono_s();
    int n = t->world->size;
    struct pollfd *p = sr_calloc((size_t)n, sizeof *p);
    if (!p)
        return -1;
    for (;;) {
        /* only hang-ups and errors: nothing is read, so the progress
         * thread's streams are untouched */
        int np = 0;
        for (int r = 0; r < n; r++)
            if (t->fds[r] >= 0)
                p[np++] = (struct pollfd){.fd = t->fds[r], .events = POLLRDHUP};
        int rc = np ? poll(p, (nfds_t)np, 100) : 0;
        for (int i = 0; rc > 0 && i < np; i++)
            if (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR))
                for (int r = 0; r < n; r++)
                    if (t->fds[r] == p[i].fd) {
                        free(p);
                        return r;
                    }
        if (sr_clock_mono_s() - t0 >= wait_s) {
            free(p);
            return -1;
        }
        if (!np || rc == 0)
            usleep(100000);
    }
}

void sr_tcp_stop(sr_tcp *t) {
    if (t)
        __atomic_store_n(&t->stopping, true, __ATOMIC_RELAXED);
}

void sr_tcp_close(sr_tcp *t) {
    if (!t)
        return;
    sr_tcp_stop(t);
    if (t->accepting)
        pthread_join(t->acceptor, NULL);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    for (int i = 0; t->fds && i < t->world->size; i++)
        if (t->fds[i] >= 0)
            close(t->fds[i]);
    OPENSSL_cleanse(t->secret, sizeof t->secret);
    free(t->fds);
    free(t->needed);
    free(t->dirty);
    free(t->addrs);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

const char *sr_tcp_address(const sr_tcp *t) { return t && t->address[0] ? t->address : "(none)"; }

/* ------------------------------------------------------------------------ */
/* framed I/O */

/* Abort notices.  A rank that gives up on a peer tells its other
 * neighbours which peer it gave up on, in place of its next frame, before
 * its own error rises.  Without them, when a node is cut off, a rank whose
 * ring neighbour is alive but waiting on the lost node times out on that
 * neighbour and names it; with them it names the lost node's rank.  Sent
 * only where the outgoing stream is at a frame boundary, without waiting
 * (best effort: the job is failing either way); a frame to a live
 * neighbour that was left half sent is first completed (finish_frame),
 * since that neighbour is usually still reading it and would otherwise see
 * only the close and name this rank instead of the culprit. */
static void notify_abort(sr_tcp *t, int culprit, uint32_t reason) {
    wire_hdr h = {ABORT_MAGIC, (uint32_t)culprit, reason};
    for (int p = 0; p < t->world->size; p++) {
        if (p == culprit || p == t->world->rank || t->fds[p] < 0 || t->dirty[p])
            continue;
        ssize_t n = send(t->fds[p], &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0 && (size_t)n < sizeof h)
            t->dirty[p] = true;
    }
}

/* Completes the frame {h, payload} to `peer`, of which `done` of `total`
 * bytes (header included) are sent (*done becomes `total`), waiting at most ABORT_GRACE_S without
 * progress; marks the stream dirty when it cannot.  Nothing to do at a
 * frame boundary. */
static void finish_frame(sr_tcp *t, int peer, const wire_hdr *h, const void *payload, size_t *done, size_t total) {
    if (*done == 0 || *done >= total || t->dirty[peer])
        return;
    int fd = t->fds[peer];
    bool ok = true;
    if (*done < sizeof *h)
        ok = io_full(t, fd, (char *)h + *done, sizeof *h - *done, true, ABORT_GRACE_S) == 0;
    size_t sent = *done > sizeof *h ? *done - sizeof *h : 0;
    if (ok)
        ok = io_full(t, fd, (char *)payload + sent, total - sizeof *h - sent, true, ABORT_GRACE_S) == 0;
    if (ok)
        *done = total;
    else
        t->dirty[peer] = true;
}

/* A header that is an abort notice from `from`: the message naming the
 * rank it gave up on; true.  False for any other header. */
static bool abort_notice(const wire_hdr *h, int from, char *msg, size_t msg_len) {
    if (h->magic != ABORT_MAGIC)
        return false;
    snprintf(msg, msg_len, "rank %d gave up on rank %u (%s); giving up too", from, h->seq,
             h->bytes == ABORT_SILENT ? "it sent nothing for comm.timeout_s: stopped, hung or unreachable?"
                                      : "its connection was lost: it exited or failed");
    return true;
}

/* A send to `peer` failed: when that peer had given up first, its abort
 * notice may wait unread on the connection (it exited right after sending
 * it, so the send met its reset).  True with the notice's message (and
 * the notice passed on); the notice is left where it is. */
static bool notice_before_reset(sr_tcp *t, int peer, char *msg, size_t msg_len) {
    wire_hdr h;
    if (t->fds[peer] < 0 || recv(t->fds[peer], &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != (ssize_t)sizeof h ||
        !abort_notice(&h, peer, msg, msg_len))
        return false;
    notify_abort(t, (int)h.seq, h.bytes == ABORT_SILENT ? ABORT_SILENT : ABORT_LOST);
    return true;
}

/* One exchange in flight: a frame {sh, sbuf} to `right` while one
 * {rh, rbuf} comes from `left`, with how much of each has moved. */
typedef struct {
    sr_tcp *t;
    int right, left;
    uint32_t seq;
    wire_hdr sh, rh;
    const void *sbuf;
    void *rbuf;
    size_t rbytes, s_done, r_done, s_total, r_total;
    char *msg;
    size_t msg_len;
} xchg;

/* This rank gives up because of `culprit`: the frame to the right
 * neighbour is completed when that neighbour is not the culprit (it is
 * likely still reading it), else a half-sent frame marks the stream dirty. */
static void settle_right(xchg *x, int culprit) {
    if (culprit != x->right)
        finish_frame(x->t, x->right, &x->sh, x->sbuf, &x->s_done, x->s_total);
    else if (x->s_done > 0 && x->s_done < x->s_total)
        x->t->dirty[x->right] = true;
}

/* Sends what the right neighbour takes now; *moved when any byte went. */
static sr_status send_some(xchg *x, bool *moved) {
    const char *src;
    size_t len;
    if (x->s_done < sizeof x->sh) {
        src = (const char *)&x->sh + x->s_done;
        len = sizeof x->sh - x->s_done;
    } else {
        src = (const char *)x->sbuf + (x->s_done - sizeof x->sh);
        len = x->s_total - x->s_done;
    }
    ssize_t n = send(x->t->fds[x->right], src, len, MSG_NOSIGNAL);
    if (n > 0) {
        x->s_done += (size_t)n;
        *moved = true;
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        int err = errno;
        x->t->dirty[x->right] = true;
        if (notice_before_reset(x->t, x->right, x->msg, x->msg_len))
            return SR_ERR_PEER;
        notify_abort(x->t, x->right, ABORT_LOST);
        snprintf(x->msg, x->msg_len, "lost the connection to rank %d (%s): it exited or failed", x->right,
                 strerror(err));
        return SR_ERR_PEER;
    }
    return SR_OK;
}

/* Receives what the left neighbour has sent; a complete header is checked
 * (an abort notice is passed on and ends the exchange). */
static sr_status recv_some(xchg *x, bool *moved) {
    char *dst;
    size_t len;
    if (x->r_done < sizeof x->rh) {
        dst = (char *)&x->rh + x->r_done;
        len = sizeof x->rh - x->r_done;
    } else {
        dst = (char *)x->rbuf + (x->r_done - sizeof x->rh);
        len = x->r_total - x->r_done;
    }
    ssize_t n = recv(x->t->fds[x->left], dst, len, 0);
    if (n > 0) {
        size_t before = x->r_done;
        x->r_done += (size_t)n;
        *moved = true;
        if (before < sizeof x->rh && x->r_done >= sizeof x->rh) {
            if (abort_notice(&x->rh, x->left, x->msg, x->msg_len)) {
                settle_right(x, (int)x->rh.seq);
                notify_abort(x->t, (int)x->rh.seq, x->rh.bytes == ABORT_SILENT ? ABORT_SILENT : ABORT_LOST);
                return SR_ERR_PEER;
            }
            if (!sr_tcp_check_frame(&x->rh, sizeof x->rh, x->seq, x->rbytes, x->left, x->msg, x->msg_len))
                return SR_ERR_PEER;
        }
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        int err = errno;
        settle_right(x, x->left);
        notify_abort(x->t, x->left, ABORT_LOST);
        snprintf(x->msg, x->msg_len, "lost the connection to rank %d (%s): it exited or failed", x->left,
                 n == 0 ? "closed" : strerror(err));
        return SR_ERR_PEER;
    }
    return SR_OK;
}

/* Nothing moved for the limit: the silent neighbour is named, unless this
 * is the first expiry while waiting on the left neighbour for a whole
 * frame (*grace is then set and the caller listens ABORT_GRACE_S longer,
 * for that neighbour's notice naming the real culprit). */
static sr_status timed_out(xchg *x, bool *grace) {
    int silent = x->r_done < x->r_total ? x->left : x->right;
    settle_right(x, silent);
    if (!*grace)
        notify_abort(x->t, silent, ABORT_SILENT);
    if (!*grace && silent == x->left && x->r_done == 0) {
        *grace = true;
        return SR_OK;
    }
    snprintf(x->msg, x->msg_len,
             "rank %d sent nothing for comm.timeout_s = %.0f s (stopped, hung or unreachable?); giving up", silent,
             x->t->timeout_s);
    return SR_ERR_PEER;
}

sr_status sr_tcp_exchange(sr_tcp *t, int right, int left, uint32_t seq, const void *sbuf, size_t sbytes, void *rbuf,
                          size_t rbytes, char *msg, size_t msg_len) {
    xchg x = {.t = t,
              .right = right,
              .left = left,
              .seq = seq,
              .sh = {WIRE_MAGIC, seq, sbytes},
              .sbuf = sbuf,
              .rbuf = rbuf,
              .rbytes = rbytes,
              .msg = msg,
              .msg_len = msg_len};
    x.s_total = sizeof x.sh + sbytes;
    x.r_total = sizeof x.rh + rbytes;
    int rfd = t->fds[right], lfd = t->fds[left];
    if (right >= 0) { /* counted when queued: a failed exchange ends the run */
        sr_count_add(SR_COUNT_MESSAGES, 1);
        sr_count_add(SR_COUNT_BYTES, x.s_total);
    }
    double last = sr_clock_mono_s(), limit = t->timeout_s;
    bool idle_round = false, grace = false;
    while (x.s_done < x.s_total || x.r_done < x.r_total) {
        struct pollfd p[2];
        int np = 0, si = -1, ri = -1;
        if (x.s_done < x.s_total) {
            p[np] = (struct pollfd){rfd, POLLOUT, 0};
            si = np++;
        }
        if (x.r_done < x.r_total) {
            if (si >= 0 && lfd == rfd) {
                p[si].events |= POLLIN;
                ri = si;
            } else {
                p[np] = (struct pollfd){lfd, POLLIN, 0};
                ri = np++;
            }
        }
        if (stopping(t)) {
            snprintf(msg, msg_len, "transport closed while an operation was in flight");
            return SR_ERR_PEER;
        }
        double left_s = limit - (sr_clock_mono_s() - last);
        if (left_s <= 0) {
            if (timed_out(&x, &grace) != SR_OK)
                return SR_ERR_PEER;
            last = sr_clock_mono_s();
            limit = ABORT_GRACE_S;
            continue;
        }
        /* optimistic I/O first; poll only after a round that moved nothing */
        if (!idle_round) {
            for (int k = 0; k < np; k++)
                p[k].revents = p[k].events;
        } else if (poll(p, (nfds_t)np, left_s > 1 ? 1000 : (int)(left_s * 1000) + 1) < 0 && errno != EINTR) {
            snprintf(msg, msg_len, "poll failed: %s", strerror(errno));
            return SR_ERR_PEER;
        }
        bool moved = false;
        if (si >= 0 && (p[si].revents & (POLLOUT | POLLERR | POLLHUP)) && send_some(&x, &moved) != SR_OK)
            return SR_ERR_PEER;
        if (ri >= 0 && (p[ri].revents & (POLLIN | POLLERR | POLLHUP)) && recv_some(&x, &moved) != SR_OK)
            return SR_ERR_PEER;
        if (moved)
            last = sr_clock_mono_s();
        idle_round = !moved;
    }
    return SR_OK;
}

static sr_status io_failed(sr_tcp *t, int peer, char *msg, size_t msg_len) {
    int err = errno;
    if ((err == ECONNRESET || err == EPIPE) && notice_before_reset(t, peer, msg, msg_len))
        return SR_ERR_PEER;
    if (err != ECANCELED)
        notify_abort(t, peer, err == ETIMEDOUT ? ABORT_SILENT : ABORT_LOST);
    errno = err;
    if (errno == ETIMEDOUT)
        snprintf(msg, msg_len, "rank %d sent nothing for comm.timeout_s = %.0f s; giving up", peer, t->timeout_s);
    else if (errno == ECANCELED)
        snprintf(msg, msg_len, "transport closed while an operation was in flight");
    else
        snprintf(msg, msg_len, "lost the connection to rank %d: it exited or failed", peer);
    return SR_ERR_PEER;
}

sr_status sr_tcp_send(sr_tcp *t, int peer, uint32_t seq, const void *buf, size_t bytes, char *msg, size_t msg_len) {
    int fd = t->fds[peer];
    wire_hdr h = {WIRE_MAGIC, seq, bytes};
    if (io_full(t, fd, &h, sizeof h, true, t->timeout_s) != 0 ||
        io_full(t, fd, (void *)buf, bytes, true, t->timeout_s) != 0) {
        t->dirty[peer] = true;
        return io_failed(t, peer, msg, msg_len);
    }
    sr_count_add(SR_COUNT_MESSAGES, 1);
    sr_count_add(SR_COUNT_BYTES, sizeof h + bytes);
    return SR_OK;
}

sr_status sr_tcp_recv(sr_tcp *t, int peer, uint32_t seq, void *buf, size_t bytes, char *msg, size_t msg_len) {
    int fd = t->fds[peer];
    wire_hdr got;
    if (io_full(t, fd, &got, sizeof got, false, t->timeout_s) != 0)
        return io_failed(t, peer, msg, msg_len);
    if (abort_notice(&got, peer, msg, msg_len)) {
        notify_abort(t, (int)got.seq, got.bytes == ABORT_SILENT ? ABORT_SILENT : ABORT_LOST);
        return SR_ERR_PEER;
    }
    if (!sr_tcp_check_frame(&got, sizeof got, seq, bytes, peer, msg, msg_len))
        return SR_ERR_PEER;
    if (io_full(t, fd, buf, bytes, false, t->timeout_s) != 0)
        return io_failed(t, peer, msg, msg_len);
    return SR_OK;
}
