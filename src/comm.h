/* comm.h — collectives over groups of ranks, and the CPU (TCP) transport.
 *
 * comm owns the transport: a listening socket, authenticated connections to
 * the ranks this process exchanges data with, and one progress thread that
 * runs queued collectives in order, so communication overlaps compute.
 * Every collective has an asynchronous form returning a request; sr_wait
 * returns its status.  Every socket wait has a deadline (comm.timeout_s of
 * no progress); a peer that falls silent or dies fails the collective with
 * SR_ERR_PEER naming it, and every later collective fails the same way.
 *
 * Groups are ordered lists of world ranks (a shard group, a replicate
 * group, ...), declared on every rank in the same order before
 * sr_transport_connect.  Algorithms are rings over the group, so a rank
 * connects only to its ring neighbours.  The interface mirrors NCCL's
 * (communicator per group, one stream of operations per process) so the
 * NCCL back end can slot in.  Buffers: fp32, bf16 (reduced in fp32) and
 * fp64 (for scalars such as losses). */
#ifndef SR_COMM_H
#define SR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "status.h"
#include "world.h"

typedef enum { SR_DT_F32, SR_DT_BF16, SR_DT_F64 } sr_dtype;
typedef enum { SR_OP_SUM, SR_OP_AVG } sr_redop;

typedef struct sr_transport sr_transport;
typedef struct sr_group sr_group;
typedef struct sr_req sr_req;

/* Opens the transport: binds to comm.interface (an IPv4 address or an
 * interface name; empty = the address the host name resolves to), makes
 * the per-job secret (rank 0, RAND_bytes) and exchanges addresses and the
 * secret through PMIx.  Returns SR_ERR_CONFIG for a bad interface,
 * SR_ERR_PEER for PMIx or socket failures.  Close with sr_transport_close. */
sr_status sr_transport_open(sr_transport **out, sr_world *w, const sr_config *cfg);
/* Declares a group (world ranks in ring order; must include this rank).
 * The group is owned by the transport. */
sr_status sr_group_create(sr_transport *tp, const int *ranks, int n, sr_group **out);
/* Connects to every ring neighbour of every declared group and starts the
 * progress thread.  Blocking, bounded by comm.timeout_s. */
sr_status sr_transport_connect(sr_transport *tp);
/* Stops the progress and accept threads and closes every socket. */
void sr_transport_close(sr_transport *tp);
/* "ip:port" this rank listens on. */
const char *sr_transport_address(const sr_transport *tp);
/* Connections refused so far (bad secret or protocol). */
int sr_transport_rejected(const sr_transport *tp);

int sr_group_size(const sr_group *g);
int sr_group_rank(const sr_group *g); /* this process's index in the group */

/* Asynchronous collectives: queue the operation and return at once with
 * *req set (NULL req = block until done).  Buffers must stay valid and
 * untouched until sr_wait.
 *   allgather:      recv[n*count] = concat over ranks of send[count] (send may be recv + me*count)
 *   reduce_scatter: recv[count] = op over ranks of send[me*count .. (me+1)*count)
 *   allreduce:      buf[count] = op over ranks of buf, in place
 *   broadcast:      buf[count] from the group rank `root` */
sr_status sr_allgather(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_req **req);
sr_status sr_reduce_scatter(sr_group *g, void *recv, const void *send, size_t count, sr_dtype dt, sr_redop op,
                            sr_req **req);
sr_status sr_allreduce(sr_group *g, void *buf, size_t count, sr_dtype dt, sr_redop op, sr_req **req);
sr_status sr_broadcast(sr_group *g, void *buf, size_t count, sr_dtype dt, int root, sr_req **req);
sr_status sr_barrier(sr_group *g, sr_req **req);
/* Waits for a request and frees it; returns its status (SR_ERR_PEER with the
 * peer named when a peer failed). */
sr_status sr_wait(sr_req *req);

size_t sr_dtype_size(sr_dtype dt);
/* fp32 <-> bf16 (round to nearest even; NaN kept NaN). */
uint16_t sr_f32_to_bf16(float f);
float sr_bf16_to_f32(uint16_t b);
void sr_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void sr_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

#endif
