/* plane.h — the data plane of the engine's collectives.
 *
 * plane owns how a collective of the sharding engine travels, per group
 * and per call: over the group's NCCL communicator when it has one; as a
 * copy on the comm stream (or nothing, in place) for a group of one rank
 * on a table whose memory the host transport cannot read; through a host
 * staging buffer for ranks on a GPU without communicators (virtual ranks
 * in tests); else as the TCP or loop transport's request on host memory
 * (the cpu and fake tables).  It is also the one place that decides
 * whether a run needs NCCL (sr_plane_needs_nccl: the run's open path and
 * the memory plan ask the same function) and opens it over the groups the
 * engine declared through it.  Its context holds the device table, the
 * host transport, the NCCL plane and the staging buffer.  The control
 * plane (ctl.h) is not its business. */
#ifndef SR_PLANE_H
#define SR_PLANE_H

#include <stdbool.h>
#include <stddef.h>

#include "comm.h"
#include "device.h"
#include "dtype.h"
#include "status.h"
#include "world.h"

typedef struct sr_plane sr_plane;

typedef enum { SR_COLL_ALLGATHER, SR_COLL_REDUCE_SCATTER, SR_COLL_ALLREDUCE } sr_coll_kind;

/* What the plane needs from the job. */
typedef struct {
    int backend;           /* comm.backend: SR_BACKEND_AUTO, _TCP or _NCCL (config.h) */
    double timeout_s;      /* comm.timeout_s */
    const char *interface; /* comm.interface */
} sr_plane_opts;

/* Whether a run of `world_size` ranks on a table of kind `kind` moves its
 * device collectives over NCCL: a GPU run with more than one rank, with
 * comm.backend nccl, or under SHARDRUN_TEST_NCCL_SIZE1 (the one-GPU
 * check of the NCCL calls).  The one owner of that decision. */
bool sr_plane_needs_nccl(sr_dev_kind kind, int world_size, int backend);

/* NCCL's own device memory for `ncomms` communicators (outside the
 * accounting; an estimate the run checks against what it finds), for a
 * run whose plane uses NCCL (sr_plane_needs_nccl); 0 otherwise. */
size_t sr_plane_reserve_bytes(sr_dev_kind kind, int world_size, int backend, int ncomms);

/* A plane on table d and transport tp (both outlive it); NCCL is opened
 * later by sr_plane_start.  SR_ERR_INTERNAL when out of memory; *out is
 * set even on failure (NULL or a plane to close). */
sr_status sr_plane_open(sr_plane **out, sr_dev *d, sr_transport *tp, const sr_plane_opts *o);
/* Declares a group of `ranks` (n world ranks, ascending) on the transport,
 * named for messages, and records it for NCCL's splits (call before
 * sr_transport_connect, in the same order on every rank; at most 8). */
sr_status sr_plane_group(sr_plane *p, const int *ranks, int n, const char *name, sr_group **out);
/* After the transport is connected: opens NCCL over the declared groups
 * when sr_plane_needs_nccl says so (comm_nccl.h's statuses); else SR_OK. */
sr_status sr_plane_start(sr_plane *p, sr_world *w);
/* Stops NCCL (if open: its watchdog, the communicators) — before the
 * engine's buffers are freed, as the run's teardown does; then frees the
 * plane.  NULL is fine for both. */
void sr_plane_stop(sr_plane *p);
void sr_plane_close(sr_plane *p);

/* One collective on device buffers, on the comm stream, in comm.h's shapes
 * (all-gather: recv[n*count] from send[count]; reduce-scatter: recv[count]
 * from send[n*count]; all-reduce: in place, recv == send); *ev completes
 * with it.  sbytes and rbytes are the buffers' sizes (NCCL's wrappers check
 * the count against them); `what` names it for the happens-before checker.
 * SR_ERR_PEER (a lost peer, NCCL's errors), SR_ERR_INTERNAL. */
sr_status sr_plane_collective(sr_plane *p, sr_coll_kind kind, const char *what, sr_group *g, void *recv, size_t rbytes,
                              const void *send, size_t sbytes, size_t count, sr_dtype dt, sr_event *ev);
/* Whether g's collectives go over NCCL (it has a device communicator). */
bool sr_plane_on_nccl(const sr_plane *p, const sr_group *g);

/* NCCL's version when this plane uses NCCL, else NULL. */
const char *sr_plane_nccl_version(const sr_plane *p);
/* Device memory NCCL took (0 without NCCL). */
size_t sr_plane_device_bytes(const sr_plane *p);
/* "nccl 2.28.9 (control plane tcp)", "tcp" or "none (1 rank)" for the banner. */
const char *sr_plane_describe(const sr_plane *p, int world_size, char *buf, size_t n);

#endif
