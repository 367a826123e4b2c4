/* comm.h — collectives over groups of ranks (the data plane of CPU runs).
 *
 * comm owns the collective layer: groups, requests, one progress thread
 * that runs queued collectives in order (so communication overlaps
 * compute), the ring algorithms, and the transport's first failure.  The
 * bytes travel over the TCP links of comm_tcp.c (sockets, authentication,
 * deadlines).  Every collective has an asynchronous form returning a
 * request; sr_wait returns its status.  A peer that falls silent for
 * comm.timeout_s or dies fails the collective with SR_ERR_PEER naming it,
 * and every later collective fails the same way.  A watchdog thread ends
 * what the peers' deadlines cannot see: when the oldest incomplete
 * collective is older than comm.timeout_s + 6 s (this rank's plane
 * stalled), it breaks the plane, runs a post-mortem (which peer hung up)
 * and every wait fails with SR_ERR_PEER naming the collective: its
 * sequence number, operation, bytes and group.
 *
 * Groups are ordered lists of world ranks (a shard group, a replicate
 * group, ...), declared on every rank in the same order before
 * sr_transport_connect.  Algorithms are rings over the group, so a rank
 * connects only to its ring neighbours.  The interface mirrors NCCL's
 * (communicator per group, one stream of operations per process).
 * Element types: fp32, bf16 (reduced in fp32) and fp64 for reductions; any
 * sr_dtype, bytes included, for all-gather and broadcast (the control
 * plane's messages, ctl.h). */
#ifndef SR_COMM_H
#define SR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "status.h"
#include "world.h"
/* the links' own types, which the transport's callers name:
 * sr_transport_opts (comm_tcp.h) and sr_loop_hub (comm_loop.h) */
#include "comm_loop.h"
#include "comm_tcp.h"

typedef enum { SR_OP_SUM, SR_OP_AVG } sr_redop;

typedef struct sr_transport sr_transport;
typedef struct sr_group sr_group;
typedef struct sr_req sr_req;

/* Opens the transport: binds to the interface, makes the per-job secret
 * (rank 0, RAND_bytes) and exchanges addresses and the secret through PMIx.
 * Returns SR_ERR_CONFIG for a bad interface, SR_ERR_PEER for PMIx or socket
 * failures, SR_ERR_INTERNAL when out of memory.  *out is set even on
 * failure (NULL or a transport to close); close with sr_transport_close. */
sr_status sr_transport_open(sr_transport **out, sr_world *w, const sr_transport_opts *o);
/* The loop plane (the tests' virtual ranks, and the counted ranks of
 * `plan --ledger`, ledgerplan.h): virtual ranks, threads of this process,
 * share a hub of mailboxes (comm_loop.h's sr_loop_hub) instead of sockets.
 * Open the hub once for `size` ranks; each rank's thread opens its
 * transport on it with its own sr_world (rank, size; no PMIx) and uses it
 * like a TCP one.  Close every transport before the hub. */
sr_status sr_transport_open_loop(sr_transport **out, sr_loop_hub *hub, sr_world *w, const sr_transport_opts *o);

/* Declares a group (world ranks in ring order; must include this rank).
 * The group is owned by the transport. */
sr_status sr_group_create(sr_transport *tp, const int *ranks, int n, sr_group **out);
/* Names a group in messages ("shard", "replicate", ...; default "#i"). */
void sr_group_set_name(sr_group *g, const char *name);
/* Connects to every ring neighbour of every declared group and starts the
 * progress thread.  Blocking, bounded by the timeout. */
sr_status sr_transport_connect(sr_transport *tp);
/* The ring neighbours of all declared groups: the sockets connect opens. */
int sr_transport_peer_count(const sr_transport *tp);
/* The host memory (SR_MEM_COMM) the ring reduce-scatter reserves for
 * chunks of up to chunk_elements elements of es bytes: its two buffers. */
size_t sr_transport_scratch_bytes(size_t chunk_elements, size_t es);
/* Stops the threads and closes every socket.  NULL is fine. */
void sr_transport_close(sr_transport *tp);
/* "ip:port" this rank listens on ("(none)" for one rank). */
const char *sr_transport_address(const sr_transport *tp);

int sr_group_size(const sr_group *g);
int sr_group_rank(const sr_group *g); /* this process's index in the group */
const char *sr_group_name(const sr_group *g);
const int *sr_group_ranks(const sr_group *g); /* world ranks in ring order */
/* The group's device communicator (an NCCL communicator of comm_nccl_cuda.c;
 * NULL = none, the default): collectives on device memory over the group
 * go there instead of the host transport. */
void sr_group_set_device_comm(sr_group *g, void *comm);
void *sr_group_device_comm(const sr_group *g);
/* The post-mortem of a failed data plane other than this one (NCCL): the
 * first peer whose transport connection closed within wait_s, or -1. */
int sr_transport_closed_peer(sr_transport *tp, double wait_s);

/* Asynchronous collectives: queue the operation and return at once with
 * *req set (NULL req = block until done).  Buffers must stay valid and
 * untouched until sr_wait.  count is in elements of dt.
 *   allgather:      recv[n*count] = concat over ranks of send[count] (send may be recv + me*count)
 *   reduce_scatter: recv[count] = op over ranks of send[me*count .. (me+1)*count)
 *   allreduce:      buf[count] = op over ranks of buf, in place
 *   broadcast:      buf[count] from the group rank `root`
 * Reductions take SR_DT_F32, SR_DT_BF16 or SR_DT_F64 (SR_ERR_INTERNAL
 * otherwise). */
sr_status sr_allgather(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_req **req);
sr_status sr_reduce_scatter(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_redop op,
                            sr_req **req);
sr_status sr_allreduce(sr_group *g, void *buf, size_t count, sr_dtype dt, sr_redop op, sr_req **req);
sr_status sr_broadcast(sr_group *g, void *buf, size_t count, sr_dtype dt, int root, sr_req **req);
sr_status sr_barrier(sr_group *g, sr_req **req);
/* Waits for a request and frees it; returns its status (SR_ERR_PEER with
 * the peer named when a peer failed).  NULL is SR_OK. */
sr_status sr_wait(sr_req *req);
/* Makes `ev` a transport event of the device table (device.h) for `req`:
 * a wait on it is sr_wait(req).  A NULL req makes a complete event.  Sets
 * only ev's request fields: the caller records or stamps ev first. */
void sr_event_from_req(sr_event *ev, sr_req *req);

#endif
