/* comm_loop.c — the loop links of virtual ranks; see comm_loop.h.
 *
 * Written by hand: the ranks are threads of this process, and what they
 * need is a mailbox with a deadline (pthread mutex and condition
 * variables), not a messaging library. */
#include "srconfig.h"

#include "comm_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "mem.h"

typedef struct message {
    uint32_t seq;
    size_t bytes;
    struct message *next;
    unsigned char data[];
} message;

struct sr_loop {
    sr_loop_hub *hub;
    int rank;
    double timeout_s;
    bool stopping;
};

struct sr_loop_hub {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    message **head, **tail; /* [from * size + to] */
    bool *attached, *closed;
    sr_loop *ends;
};

sr_status sr_loop_hub_open(sr_loop_hub **out, int size) {
    *out = NULL;
    sr_loop_hub *h = sr_calloc(1, sizeof *h);
    if (!h)
        return sr_error_oom("the loop hub");
    size_t n = (size_t)size * (size_t)size;
    h->size = size;
    h->head = sr_calloc(n, sizeof *h->head);
    h->tail = sr_calloc(n, sizeof *h->tail);
    h->attached = sr_calloc((size_t)size, sizeof(bool));
    h->closed = sr_calloc((size_t)size, sizeof(bool));
    h->ends = sr_calloc((size_t)size, sizeof *h->ends);
    if (!h->head || !h->tail || !h->attached || !h->closed || !h->ends) {
        sr_loop_hub_close(h);
        return sr_error_oom("the loop hub");
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    *out = h;
    return SR_OK;
}

void sr_loop_hub_close(sr_loop_hub *h) {
    if (!h)
        return;
    for (size_t i = 0; h->head && i < (size_t)h->size * (size_t)h->size; i++)
        while (h->head[i]) {
            message *m = h->head[i];
            h->head[i] = m->next;
            free(m);
        }
    if (h->head) {
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
    }
    free(h->head);
    free(h->tail);
    free(h->attached);
    free(h->closed);
    free(h->ends);
    free(h);
}

sr_loop *sr_loop_attach(sr_loop_hub *h, int rank, double timeout_s) {
    if (rank < 0 || rank >= h->size)
        return NULL;
    pthread_mutex_lock(&h->mu);
    sr_loop *l = NULL;
    if (!h->attached[rank]) {
        h->attached[rank] = true;
        l = &h->ends[rank];
        *l = (sr_loop){.hub = h, .rank = rank, .timeout_s = timeout_s};
    }
    pthread_mutex_unlock(&h->mu);
    return l;
}

void sr_loop_stop(sr_loop *l) {
    if (!l)
        return;
    pthread_mutex_lock(&l->hub->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->hub->cv);
    pthread_mutex_unlock(&l->hub->mu);
}

void sr_loop_close(sr_loop *l) {
    if (!l)
        return;
    pthread_mutex_lock(&l->hub->mu);
    l->stopping = true;
    l->hub->closed[l->rank] = true;
    pthread_cond_broadcast(&l->hub->cv);
    pthread_mutex_unlock(&l->hub->mu);
}

int sr_loop_closed_peer(sr_loop *l, double wait_s) {
    sr_loop_hub *h = l->hub;
    struct timespec dl;
    dl = sr_clock_wall_after(wait_s);
    pthread_mutex_lock(&h->mu);
    int gone = -1;
    for (;;) {
        for (int r = 0; r < h->size && gone < 0; r++)
            if (r != l->rank && h->closed[r])
                gone = r;
        if (gone >= 0 || pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&h->mu);
    return gone;
}

sr_status sr_loop_send(sr_loop *l, int peer, uint32_t seq, const void *buf, size_t bytes, char *msg, size_t msg_len) {
    sr_loop_hub *h = l->hub;
    message *m = malloc(sizeof *m + (bytes ? bytes : 1));
    if (!m) {
        snprintf(msg, msg_len, "out of memory for a loop message of %zu bytes to rank %d", bytes, peer);
        return SR_ERR_INTERNAL;
    }
    *m = (message){.seq = seq, .bytes = bytes};
    if (bytes)
        memcpy(m->data, buf, bytes);
    pthread_mutex_lock(&h->mu);
    sr_status st = SR_OK;
    if (h->closed[peer]) {
        snprintf(msg, msg_len, "lost the connection to rank %d (its loop end closed)", peer);
        st = SR_ERR_PEER;
    } else if (l->stopping) {
        snprintf(msg, msg_len, "the transport was stopped");
        st = SR_ERR_PEER;
    } else {
        size_t k = (size_t)l->rank * (size_t)h->size + (size_t)peer;
        if (h->tail[k])
            h->tail[k]->next = m;
        else
            h->head[k] = m;
        h->tail[k] = m;
        m = NULL;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    free(m);
    return st;
}

sr_status sr_loop_recv(sr_loop *l, int peer, uint32_t seq, void *buf, size_t bytes, char *msg, size_t msg_len) {
    sr_loop_hub *h = l->hub;
    size_t k = (size_t)peer * (size_t)h->size + (size_t)l->rank;
    struct timespec dl;
    dl = sr_clock_wall_after(l->timeout_s);
    pthread_mutex_lock(&h->mu);
    sr_status st = SR_OK;
    for (;;) {
        if (h->head[k])
            break;
        if (l->stopping) {
            snprintf(msg, msg_len, "the transport was stopped");
            st = SR_ERR_PEER;
            break;
        }
        if (h->closed[peer]) {
            snprintf(msg, msg_len, "lost the connection to rank %d (its loop end closed)", peer);
            st = SR_ERR_PEER;
            break;
        }
        if (pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT && !h->head[k]) {
            snprintf(msg, msg_len, "rank %d sent nothing for comm.timeout_s = %g s (stopped, hung?); giving up", peer,
                     l->timeout_s);
            st = SR_ERR_PEER;
            break;
        }
    }
    message *m = st == SR_OK ? h->head[k] : NULL;
    if (m) {
        h->head[k] = m->next;
        if (!h->head[k])
            h->tail[k] = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    if (!m)
        return st;
    if (m->seq != seq || m->bytes != bytes) {
        snprintf(msg, msg_len,
                 "protocol error from rank %d: expected operation %u with %zu bytes, got operation %u with %zu bytes",
                 peer, (unsigned)seq, bytes, (unsigned)m->seq, m->bytes);
        st = SR_ERR_INTERNAL;
    } else if (bytes) {
        memcpy(buf, m->data, bytes);
    }
    free(m);
    return st;
}

sr_status sr_loop_exchange(sr_loop *l, int right, int left, uint32_t seq, const void *sbuf, size_t sbytes, void *rbuf,
                           size_t rbytes, char *msg, size_t msg_len) {
    /* a send never blocks: send, then receive */
    sr_status st = sr_loop_send(l, right, seq, sbuf, sbytes, msg, msg_len);
    return st == SR_OK ? sr_loop_recv(l, left, seq, rbuf, rbytes, msg, msg_len) : st;
}
