/* ctl.h — the host control plane: what the ranks of a run agree on.
 *
 * ctl owns the run's agreements: whether every rank succeeded at a step of
 * a collective procedure (opening the checkpoint directory, each phase of a
 * save, loading a checkpoint) with the lowest failing rank's message,
 * sums of host scalars (losses, ranks that saw a preemption signal, rank
 * 0's clock), broadcasts of step lists, the minimum of a value (the ISA
 * level), and all-gathers of typed host records.  Messages are typed host
 * buffers (bytes, int64, fp64); nothing is punned through the data plane's
 * float collectives.  Today the TCP transport carries it over a group of
 * every rank; on GPU runs it stays on TCP while NCCL moves the data.
 *
 * Every call is a collective: every rank calls it in the same order. */
#ifndef SR_CTL_H
#define SR_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "status.h"

typedef struct sr_ctl sr_ctl;

/* One rank's word in an agreement. */
typedef struct {
    int32_t status; /* an sr_status */
    int32_t flag;
    uint64_t value;
    char msg[1008];
} sr_ctl_word;

/* Declares the control plane's group of every rank on the transport
 * (before sr_transport_connect).  SR_ERR_INTERNAL when out of memory.
 * Close with sr_ctl_close (NULL is fine). */
sr_status sr_ctl_open(sr_ctl **out, sr_transport *tp, int world_size);
void sr_ctl_close(sr_ctl *c);
int sr_ctl_rank(const sr_ctl *c);
int sr_ctl_size(const sr_ctl *c);

/* Every rank contributes (mine, flag, value, msg).  Returns the status of
 * the lowest failing rank (its message recorded, prefixed "rank R: " when
 * it is not this one) or SR_OK; *all (may be NULL; free() it) receives
 * every rank's word in rank order.  A transport failure is returned as is. */
sr_status sr_ctl_agree(sr_ctl *c, sr_status mine, int flag, uint64_t value, const char *msg, sr_ctl_word **all);
/* vals[0..n) become their sums over every rank (fp64, one collective). */
sr_status sr_ctl_sum(sr_ctl *c, double *vals, int n);
/* *v becomes the minimum of every rank's *v. */
sr_status sr_ctl_min(sr_ctl *c, int64_t *v);
/* vals[0..n) are replaced by world rank `root`'s. */
sr_status sr_ctl_broadcast(sr_ctl *c, int64_t *vals, size_t n, int root);
/* recv[r * bytes ..] = rank r's send[0 .. bytes). */
sr_status sr_ctl_allgather(sr_ctl *c, void *recv, const void *send, size_t bytes);

#endif
