/* comm_tcp.h — TCP links between the ranks of a job (internal to comm;
 * comm.h passes on its sr_transport_opts).
 *
 * comm_tcp owns the sockets: a listening socket bound to comm.interface,
 * the per-job secret and the addresses exchanged through PMIx, an accept
 * thread that authenticates incoming connections, connections to the peers
 * comm asks for, and framed sends and receives with deadlines.  It knows
 * nothing about collectives: comm.c runs its rings over these links.
 *
 * Wire protocol.  Handshake: the accepting side sends a 32-byte random
 * nonce; the connecting side answers {magic, rank, HMAC-SHA256(secret,
 * nonce || rank)}; the acceptor checks it in constant time and answers one
 * byte (1 = accepted).  A connection that fails is logged and dropped;
 * training goes on.  Data: every message is a 16-byte header {magic, op
 * sequence number, payload bytes} and the payload; a header that does not
 * match is a protocol error.  Every wait has a deadline: timeout_s without
 * any byte moving fails the operation, naming the silent peer.  Abort
 * notice: a rank that gives up on a peer sends its other neighbours
 * {magic "SRA1", the peer's rank, why} in place of its next frame (where its
 * stream is at a frame boundary); a rank that reads one fails naming that
 * peer and passes the notice on, and a rank that timed out waiting for a
 * frame from its left neighbour listens 2 s longer for that neighbour's
 * notice before blaming it.  So when a node is cut off, every rank names a
 * rank of the lost node, not a live neighbour that was waiting on it. */
#ifndef SR_COMM_TCP_H
#define SR_COMM_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "world.h"

typedef struct sr_tcp sr_tcp;

/* What the transport needs from the job (comm.* keys; the loop links take
 * its timeout too). */
typedef struct {
    double timeout_s;      /* deadline of every wait without progress */
    const char *interface; /* IPv4 address or interface name; "" = the host name's address */
    const char *key;       /* the PMIx keys' prefix (NULL: "shardrun"): a second transport of the
                            * same job (the memory checkpoint tier's own links) takes its own */
} sr_transport_opts;

/* Resolves the interface, listens (more than one rank), exchanges addresses
 * and the secret, starts the accept thread.  *out is set even on failure
 * (close it).  SR_ERR_CONFIG for a bad interface or a loopback address in
 * a job of several nodes, SR_ERR_PEER for PMIx. */
sr_status sr_tcp_open(sr_tcp **out, sr_world *w, const sr_transport_opts *o);
/* Marks world rank `peer` as one this rank must be connected to. */
void sr_tcp_need(sr_tcp *t, int peer);
/* How many peers are marked (the sockets sr_tcp_connect will hold). */
int sr_tcp_peer_count(const sr_tcp *t);
/* Connects to (lower ranks) or waits for (higher ranks) every needed peer
 * not yet connected (so it may be called again after more sr_tcp_need),
 * within the timeout.  SR_ERR_PEER naming a peer that did not answer. */
sr_status sr_tcp_connect(sr_tcp *t);
/* The first needed peer whose connection hung up or failed within wait_s
 * seconds (polled, nothing read), or -1: the watchdog's post-mortem. */
int sr_tcp_closed_peer(sr_tcp *t, double wait_s);
/* Makes every operation in flight fail at its next poll (before close). */
void sr_tcp_stop(sr_tcp *t);
void sr_tcp_close(sr_tcp *t);
const char *sr_tcp_address(const sr_tcp *t);

/* One ring step: sends sbytes of sbuf to world rank `right` and receives
 * rbytes into rbuf from `left` at the same time, both framed with `seq`.
 * On failure: SR_ERR_PEER with the reason in msg. */
sr_status sr_tcp_exchange(sr_tcp *t, int right, int left, uint32_t seq, const void *sbuf, size_t sbytes, void *rbuf,
                          size_t rbytes, char *msg, size_t msg_len);
/* One framed message to or from world rank `peer`. */
sr_status sr_tcp_send(sr_tcp *t, int peer, uint32_t seq, const void *buf, size_t bytes, char *msg, size_t msg_len);
sr_status sr_tcp_recv(sr_tcp *t, int peer, uint32_t seq, void *buf, size_t bytes, char *msg, size_t msg_len);

/* The wire's parsers, pure functions (also fuzzed, tests/fuzz):
 * sr_tcp_check_hello: NULL when msg (len bytes, a hello) is a shardrun
 *   peer's answer to `nonce` under the job's `secret` claiming a rank of a
 *   job of `world` ranks (*rank set); else why not.
 * sr_tcp_sign_hello: writes into msg the MAC for the rank it claims (what a
 *   connecting peer does; len >= 40).
 * sr_tcp_check_frame: true when a frame header (len bytes) is operation
 *   `seq` carrying `bytes` bytes; else false with why (naming `peer`).
 * sr_tcp_resolve_interface: comm.interface (an IPv4 address, an interface
 *   name, or "" for the host name's address, 127.0.0.1 when it has none) to
 *   an address; SR_ERR_CONFIG for a name that is neither.  (sr_tcp_open
 *   then refuses a loopback address in a job of several nodes.) */
const char *sr_tcp_check_hello(const unsigned char secret[32], const unsigned char nonce[32], const void *msg,
                               size_t len, int world, uint32_t *rank);
void sr_tcp_sign_hello(const unsigned char secret[32], const unsigned char nonce[32], void *msg, size_t len);
bool sr_tcp_check_frame(const void *hdr, size_t len, uint32_t seq, uint64_t bytes, int peer, char *why, size_t n);
sr_status sr_tcp_resolve_interface(const char *iface, char *ip, size_t n);

#endif
