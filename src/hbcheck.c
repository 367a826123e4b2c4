/* hbcheck.c — the happens-before checker; see hbcheck.h.
 *
 * Written by hand: no library here checks the ordering of a program's own
 * streams (compute-sanitizer's racecheck sees shared-memory hazards only,
 * not races between CUDA streams in global memory).
 *
 * The interval map is a sorted array of disjoint byte ranges, each with the
 * last write (agent, tick, site) and, per agent, its last read since that
 * write.  A few hundred ranges in a training run; linear moves are fine. */
#include "srconfig.h"

#include "hbcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem.h"
#include "signals.h"

typedef struct {
    uintptr_t lo, hi;
    int writer; /* agent, or -1: never written while tracked */
    uint64_t w_tick;
    const char *w_site;
    uint64_t r_tick[SR_HB_AGENTS]; /* 0: no read since the write */
    const char *r_site[SR_HB_AGENTS];
} range;

typedef struct {
    uintptr_t lo, hi;
} block;

struct sr_hb {
    bool fatal;
    sr_hb_clock vc[SR_HB_AGENTS];
    range *r;
    size_t n, cap;
    block *b; /* tracked memory, sorted */
    size_t nb, capb;
    long long host_waits, violations;
    char last[512];
};

static const char *const agent_names[SR_HB_AGENTS] = {"compute", "comm", "h2d", "d2h", "transport", "host"};

/* The name of an agent ("compute", ..., "host"). */
static const char *agent_name(int agent) { return agent >= 0 && agent < SR_HB_AGENTS ? agent_names[agent] : "?"; }

/* The checker's own bookkeeping is test instrumentation, not the
 * program's memory: plain allocations (not counted, so
 * SHARDRUN_TEST_ALLOC_FAIL numbers stay those of the program), and running
 * out ends the run. */
static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) {
        sr_log_error("happens-before checker: out of memory");
        fflush(stderr);
        sr_signals_remove_temporaries();             /* what a signal would remove */
        _exit(sr_status_exit_code(SR_ERR_INTERNAL)); /* mid-flight by design: no exit handlers, no leak report */
    }
    return q;
}

sr_hb *sr_hb_open(bool fatal) {
    sr_hb *s = calloc(1, sizeof *s);
    if (s)
        s->fatal = fatal;
    return s;
}

void sr_hb_close(sr_hb *s) {
    if (!s)
        return;
    free(s->r);
    free(s->b);
    free(s);
}

static void merge(sr_hb_clock *dst, const sr_hb_clock *src) {
    for (int i = 0; i < SR_HB_AGENTS; i++)
        if (src->c[i] > dst->c[i])
            dst->c[i] = src->c[i];
}

void sr_hb_issue(sr_hb *s, int agent, int after) {
    merge(&s->vc[agent], &s->vc[SR_HB_HOST]);
    if (after >= 0)
        merge(&s->vc[agent], &s->vc[after]);
    s->vc[agent].c[agent]++;
}

void sr_hb_stamp(sr_hb *s, int agent, sr_hb_clock *out) { *out = s->vc[agent]; }

void sr_hb_merge(sr_hb *s, int agent, const sr_hb_clock *c) { merge(&s->vc[agent], c); }

void sr_hb_host_wait(sr_hb *s, const sr_hb_clock *c, const char *site) {
    (void)site;
    merge(&s->vc[SR_HB_HOST], c);
    s->host_waits++;
}

/* Index of the first of n records (range or block, both starting with
 * {lo, hi}, `stride` bytes apart) whose hi is above x: a binary search. */
static size_t first_above(const void *base, size_t n, size_t stride, uintptr_t x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uintptr_t *span = (const void *)((const char *)base + mid * stride);
        if (span[1] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t first_after(const sr_hb *s, uintptr_t x) { return first_above(s->r, s->n, sizeof *s->r, x); }

static bool reserve(sr_hb *s, size_t more) {
    if (s->n + more <= s->cap)
        return true;
    size_t cap = s->cap ? s->cap * 2 : 64;
    while (cap < s->n + more)
        cap *= 2;
    s->r = grow(s->r, cap * sizeof *s->r);
    s->cap = cap;
    return true;
}

/* Replaces ranges [i, j) by the `m` ranges in `with`. */
static bool splice(sr_hb *s, size_t i, size_t j, const range *with, size_t m) {
    if (m > j - i && !reserve(s, m - (j - i)))
        return false;
    if (s->n > j) /* (s->r is NULL while nothing was ever tracked) */
        memmove(s->r + i + m, s->r + j, (s->n - j) * sizeof *s->r);
    if (m)
        memcpy(s->r + i, with, m * sizeof *with);
    s->n = s->n - (j - i) + m;
    return true;
}

/* Makes x a range boundary (splits the range that contains it). */
static bool split_at(sr_hb *s, uintptr_t x) {
    size_t i = first_after(s, x);
    if (i == s->n || s->r[i].lo >= x)
        return true;
    range two[2] = {s->r[i], s->r[i]};
    two[0].hi = x;
    two[1].lo = x;
    return splice(s, i, i + 1, two, 2);
}

static sr_status report(sr_hb *s, int agent, bool write, const char *site, const range *g, int other,
                        bool other_wrote) {
    const char *other_site = other_wrote ? g->w_site : g->r_site[other];
    snprintf(s->last, sizeof s->last,
             "happens-before violation: %s %s %zu bytes at %p (%s) with no ordering after the %s by %s (%s); a "
             "stream wait or host wait is missing between them",
             agent_name(agent), write ? "writes" : "reads", (size_t)(g->hi - g->lo), (void *)g->lo, site ? site : "?",
             other_wrote ? "write" : "read", agent_name(other), other_site ? other_site : "?");
    s->violations++;
    if (s->fatal) {
        sr_log_error("%s", s->last);
        fflush(stderr);
        sr_signals_remove_temporaries();             /* what a signal would remove */
        _exit(sr_status_exit_code(SR_ERR_INTERNAL)); /* mid-flight by design: no exit handlers, no leak report */
    }
    return SR_ERR_INTERNAL;
}

static size_t block_after(const sr_hb *s, uintptr_t x) { return first_above(s->b, s->nb, sizeof *s->b, x); }

static bool tracked(const sr_hb *s, uintptr_t a) {
    size_t i = block_after(s, a);
    return i < s->nb && s->b[i].lo <= a;
}

sr_status sr_hb_track(sr_hb *s, const void *p, size_t bytes) {
    if (!p || !bytes)
        return SR_OK;
    uintptr_t a = (uintptr_t)p;
    size_t i = block_after(s, a);
    if (s->nb == s->capb) {
        size_t cap = s->capb ? 2 * s->capb : 64;
        s->b = grow(s->b, cap * sizeof *s->b);
        s->capb = cap;
    }
    memmove(s->b + i + 1, s->b + i, (s->nb - i) * sizeof *s->b);
    s->b[i] = (block){a, a + bytes};
    s->nb++;
    return SR_OK;
}

sr_status sr_hb_access(sr_hb *s, int agent, const void *p, size_t bytes, bool write, const char *site) {
    if (!bytes || !p || !tracked(s, (uintptr_t)p))
        return SR_OK;
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    if (agent == SR_HB_HOST)
        s->vc[SR_HB_HOST].c[SR_HB_HOST]++;
    const sr_hb_clock *know = &s->vc[agent];
    uint64_t now = know->c[agent];
    if (!split_at(s, a) || !split_at(s, b))
        return sr_error_oom("the happens-before checker");
    size_t i = first_after(s, a), j = i;
    sr_status st = SR_OK;
    for (; j < s->n && s->r[j].lo < b; j++) {
        const range *g = &s->r[j];
        if (st != SR_OK)
            continue;
        if (g->writer >= 0 && know->c[g->writer] < g->w_tick)
            st = report(s, agent, write, site, g, g->writer, true);
        for (int o = 0; write && st == SR_OK && o < SR_HB_AGENTS; o++)
            if (g->r_tick[o] && know->c[o] < g->r_tick[o])
                st = report(s, agent, write, site, g, o, false);
    }
    if (write) {
        range w = {.lo = a, .hi = b, .writer = agent, .w_tick = now, .w_site = site};
        if (!splice(s, i, j, &w, 1))
            return sr_error_oom("the happens-before checker");
        return st;
    }
    /* a read: mark the ranges it covers and fill the gaps between them */
    size_t cnt = j - i, m = 0;
    range *out = grow(NULL, (2 * cnt + 1) * sizeof *out);
    uintptr_t at = a;
    for (size_t k = i; k <= j; k++) {
        uintptr_t next = k < j ? s->r[k].lo : b;
        if (next > at)
            out[m++] = (range){.lo = at, .hi = next, .writer = -1};
        if (k == j)
            break;
        out[m++] = s->r[k];
        at = s->r[k].hi;
    }
    for (size_t k = 0; k < m; k++) {
        out[k].r_tick[agent] = now;
        out[k].r_site[agent] = site;
    }
    bool ok = splice(s, i, j, out, m);
    free(out);
    return ok ? st : sr_error_oom("the happens-before checker");
}

void sr_hb_forget(sr_hb *s, const void *p, size_t bytes) {
    if (!p || !bytes)
        return;
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    size_t k = block_after(s, a);
    if (k < s->nb && s->b[k].lo == a) {
        memmove(s->b + k, s->b + k + 1, (s->nb - k - 1) * sizeof *s->b);
        s->nb--;
    }
    if (!split_at(s, a) || !split_at(s, b))
        return; /* out of memory: the history stays, which only over-reports */
    size_t i = first_after(s, a), j = i;
    while (j < s->n && s->r[j].lo < b)
        j++;
    splice(s, i, j, NULL, 0);
}

long long sr_hb_host_waits(const sr_hb *s) { return s->host_waits; }
long long sr_hb_violations(const sr_hb *s) { return s->violations; }
const char *sr_hb_last(const sr_hb *s) { return s->last; }
