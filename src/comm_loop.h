/* comm_loop.h — the loop links: ranks that are threads of one process
 * (virtual ranks: the tests', and plan --ledger's counted ranks; internal
 * to comm: comm.h passes on its sr_loop_hub).
 *
 * comm_loop owns the links of a *loop* data plane: S threads of one
 * process, each running a rank with its own engine, exchange framed
 * messages through shared memory instead of sockets.  It has the same
 * shape as comm_tcp.h (framed sends and receives by world rank and
 * operation sequence number, a deadline of comm.timeout_s without a
 * message, a lost peer named), so comm.c runs the very same ring
 * algorithms and offset arithmetic over it, and the watchdog watches it
 * the same way.  On one GPU it carries the virtual ranks of
 * tests/test_vranks (NCCL cannot run two ranks on one GPU).
 *
 * A hub holds one mailbox per ordered pair of ranks; a send copies the
 * message into the receiver's mailbox (never blocks), a receive takes the
 * oldest message of that sender, which must carry the expected sequence
 * number and size.  A rank's end is closed when its transport closes: its
 * peers then fail naming it, as after a lost connection. */
#ifndef SR_COMM_LOOP_H
#define SR_COMM_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct sr_loop sr_loop;

/* The hub of a loop plane: one mailbox per ordered pair of `size` ranks
 * (comm.h sr_transport_open_loop).  open: SR_ERR_INTERNAL when out of
 * memory; close after every rank's transport, NULL is fine. */
typedef struct sr_loop_hub sr_loop_hub;
sr_status sr_loop_hub_open(sr_loop_hub **out, int size);
void sr_loop_hub_close(sr_loop_hub *h);

/* One rank's end of the hub.  NULL when out of memory or the rank is
 * taken. */
sr_loop *sr_loop_attach(sr_loop_hub *h, int rank, double timeout_s);
/* Closes this end: peers waiting on it fail naming this rank. */
void sr_loop_close(sr_loop *l);
/* Makes every wait of this end fail at once (before close). */
void sr_loop_stop(sr_loop *l);
/* The first peer whose end is closed, waiting up to wait_s, or -1. */
int sr_loop_closed_peer(sr_loop *l, double wait_s);

/* As sr_tcp_exchange, sr_tcp_send and sr_tcp_recv (comm_tcp.h). */
sr_status sr_loop_exchange(sr_loop *l, int right, int left, uint32_t seq, const void *sbuf, size_t sbytes, void *rbuf,
                           size_t rbytes, char *msg, size_t msg_len);
sr_status sr_loop_send(sr_loop *l, int peer, uint32_t seq, const void *buf, size_t bytes, char *msg, size_t msg_len);
sr_status sr_loop_recv(sr_loop *l, int peer, uint32_t seq, void *buf, size_t bytes, char *msg, size_t msg_len);

#endif
