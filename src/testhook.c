/* testhook.c — reads and parses the SHARDRUN_TEST_* / SHARDRUN_BENCH_*
 * variables once; see testhook.h. */
#include "srconfig.h"

#include "testhook.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"
#include "line.h"

static sr_testhooks hooks;
static sr_status init_status = SR_OK;
static char init_message[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* the parse in progress (sr_testhook_parse is not reentrant) */
typedef struct {
    sr_status st;
    char *why;
    size_t n;
} parse_state;

/* A decimal integer >= min filling the whole of s[0, len). */
static bool parse_i64(const char *s, size_t len, int64_t min, int64_t *out) {
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end || errno || v < min)
        return false;
    *out = v;
    return true;
}

static void bad(parse_state *ps, const char *name, const char *value, const char *expected) {
    if (ps->st == SR_OK) {
        ps->st = SR_ERR_CONFIG;
        sr_fmt(ps->why, ps->n, "%s=%s: expected %s (a test hook; unset it for real runs)", name, value, expected);
    }
}

/* "@RANK" at the end of v (rank stays -1 without one); returns the length
 * before it, or -1 when the rank does not parse. */
/* A boolean hook: 1 sets *out, 0 or empty leaves it false, anything else
 * is refused. */
static void flag(parse_state *ps, const char *name, bool *out) {
    const char *v = getenv(name);
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    if (strcmp(v, "1") == 0)
        *out = true;
    else
        bad(ps, name, v, "1 or 0");
}

static long split_rank(const char *v, int *rank) {
    *rank = -1;
    const char *at = strchr(v, '@');
    if (!at)
        return (long)strlen(v);
    int64_t r;
    if (!parse_i64(at + 1, strlen(at + 1), 0, &r) || r > 1 << 24)
        return -1;
    *rank = (int)r;
    return (long)(at - v);
}

/* SITE[:STEP][@RANK] into site (n bytes), *step (-1 = any), *rank (-1 =
 * any); false when it does not parse. */
static bool parse_site(const char *v, char *site, size_t n, int64_t *step, int *rank) {
    long len = split_rank(v, rank);
    const char *colon = memchr(v, ':', len > 0 ? (size_t)len : 0);
    size_t site_len = colon ? (size_t)(colon - v) : (size_t)(len > 0 ? len : 0);
    if (len < 0 || site_len == 0 || site_len >= n ||
        (colon && !parse_i64(colon + 1, (size_t)(v + len - colon - 1), 0, step)))
        return false;
    memcpy(site, v, site_len);
    site[site_len] = '\0';
    return true;
}

/* Whether `site` is a crash site in SR_TESTHOOK_CRASH_SITES (or, for a
 * pause, before_connect). */
static bool known_site(const char *site, bool pause) {
    const char *list = SR_TESTHOOK_CRASH_SITES;
    size_t n = strlen(site);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, site, n) == 0)
            return true;
        p += len;
        p += strspn(p, ", ");
    }
    return pause && strcmp(site, "before_connect") == 0;
}

/* ---- the hooks, one row each -------------------------------------------- */

/* SHARDRUN_TEST_CRASH_AT and _PAUSE_AT: SITE[:STEP][@RANK]. */
static void hook_crash(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    char expected[512];
    snprintf(expected, sizeof expected, "SITE[:STEP][@RANK] with SITE one of %s", SR_TESTHOOK_CRASH_SITES);
    if (!parse_site(v, h->crash_site, sizeof h->crash_site, &h->crash_step, &h->crash_rank) ||
        !known_site(h->crash_site, false))
        bad(ps, name, v, expected);
}
static void hook_pause(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    char expected[512];
    snprintf(expected, sizeof expected, "SITE[:STEP][@RANK] with SITE one of %s, before_connect",
             SR_TESTHOOK_CRASH_SITES);
    if (!parse_site(v, h->pause_site, sizeof h->pause_site, &h->pause_step, &h->pause_rank) ||
        !known_site(h->pause_site, true))
        bad(ps, name, v, expected);
}
static void hook_isa(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    sr_isa level;
    if (strlen(v) >= sizeof h->isa || !sr_isa_parse(v, &level))
        bad(ps, name, v, SR_ISA_NAMES);
    else
        snprintf(h->isa, sizeof h->isa, "%s", v);
}
static void hook_skip_wait(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    if (strlen(v) >= sizeof h->skip_wait || strspn(v, "abcdefghijklmnopqrstuvwxyz_,") != strlen(v))
        bad(ps, name, v, "list, or a comma list of wait sites (SHARDRUN_TEST_SKIP_WAIT=list)");
    else
        snprintf(h->skip_wait, sizeof h->skip_wait, "%s", v);
}
static void hook_comm_delay(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    const char *colon = strchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    bool ok = parse_i64(v, n, 1, &h->comm_delay_us) && h->comm_delay_us <= 10000000;
    if (ok && colon && strcmp(colon + 1, "compute") == 0)
        h->comm_delay_stream = 1;
    else if (ok && colon && strcmp(colon + 1, "comm") != 0)
        ok = false;
    if (!ok) {
        h->comm_delay_us = 0;
        bad(ps, name, v, "N[:comm|compute], microseconds from 1 to 10000000");
    }
}
static void hook_mismatch(parse_state *ps, const char *name, const char *v, sr_testhooks *h) {
    long n = split_rank(v, &h->mismatch_rank);
    if (n < 0 || !parse_i64(v, (size_t)n, 0, &h->mismatch_seq) || h->mismatch_seq > UINT32_MAX) {
        h->mismatch_seq = -1;
        bad(ps, name, v,
            "K[@RANK]: a collective's sequence number from 0 to 4294967295, and the world rank (default 0)");
    }
    if (h->mismatch_rank < 0)
        h->mismatch_rank = 0;
}

/* How a row's value is read into the field at `off`: a whole integer in
 * [min, max] (on failure the field is set to `reset`); N[@RANK] (the rank
 * into the int at off2); a string shorter than `max` bytes (into a field of
 * off2 bytes); one of the choices (the words of `expect` but "or"; a field
 * of off2 bytes); a flag (1 or 0); or a function of its own. */
typedef enum { H_INT, H_RANKED, H_STR, H_CHOICE, H_FLAG, H_FN } hook_kind;
typedef struct {
    const char *name;
    hook_kind kind;
    size_t off, off2;
    int64_t min, max, reset;
    const char *expect;
    void (*fn)(parse_state *ps, const char *name, const char *v, sr_testhooks *h);
} hook_row;

#define F(field) offsetof(sr_testhooks, field)
#define SIZE(field) sizeof(((sr_testhooks *)0)->field)
#define NOMAX INT64_MAX
/* In the order they are checked: the first that does not parse is the
 * message. */
static const hook_row rows[] = {
    {"SHARDRUN_TEST_CRASH_AT", H_FN, 0, 0, 0, 0, 0, NULL, hook_crash},
    {"SHARDRUN_TEST_PAUSE_AT", H_FN, 0, 0, 0, 0, 0, NULL, hook_pause},
    {"SHARDRUN_TEST_PREEMPT_AT", H_RANKED, F(preempt_step), F(preempt_rank), 0, NOMAX, -1,
     "STEP[@RANK] (STEP 0: during set-up)", NULL},
    {"SHARDRUN_TEST_GPU_HANG_AT", H_INT, F(gpu_hang_step), 0, 1, NOMAX, -1, "a step number >= 1", NULL},
    {"SHARDRUN_TEST_MUTATE", H_CHOICE, F(mutate), SIZE(mutate), 0, 0, 0, "keep_notready or pageable_step", NULL},
    {"SHARDRUN_TEST_NAN_AT_STEP", H_INT, F(nan_step), 0, 1, NOMAX, -1, "a step number >= 1", NULL},
    {"SHARDRUN_TEST_DUMP_PARAMS", H_STR, F(dump_params), SIZE(dump_params), 0, 4096, 0,
     "a path shorter than 4096 bytes", NULL},
    {"SHARDRUN_TEST_DUMP_SEQS", H_STR, F(dump_seqs), SIZE(dump_seqs), 0, 4096, 0, "a path shorter than 4096 bytes",
     NULL},
    {"SHARDRUN_BENCH_COUNTS", H_STR, F(bench_counts), SIZE(bench_counts), 0, 4096, 0,
     "a directory path shorter than 4096 bytes", NULL},
    {"SHARDRUN_TEST_ORACLE", H_STR, F(oracle_dir), SIZE(oracle_dir), 0, 4096 - 32, 0,
     "a directory path shorter than 4064 bytes", NULL},
    {"SHARDRUN_TEST_ALLOC_FAIL", H_RANKED, F(alloc_fail), F(alloc_fail_rank), 1, NOMAX, 0,
     "N[@RANK], an allocation number >= 1", NULL},
    {"SHARDRUN_TEST_ISA", H_FN, 0, 0, 0, 0, 0, NULL, hook_isa},
    {"SHARDRUN_TEST_MEM_AVAILABLE", H_INT, F(mem_available), 0, 0, NOMAX, -1, "a number of bytes >= 0", NULL},
    {"SHARDRUN_TEST_NODE_MEM", H_INT, F(node_mem), 0, 1, NOMAX, -1, "a number of bytes >= 1", NULL},
    {"SHARDRUN_TEST_NODE_RANKS", H_INT, F(node_ranks), 0, 1, 1 << 20, -1, "a number of ranks >= 1", NULL},
    {"SHARDRUN_TEST_NO_PMIX_EVENTS", H_FLAG, F(no_pmix_events), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_TEST_DEVICE", H_CHOICE, F(device), SIZE(device), 0, 0, 0, "fake", NULL},
    {"SHARDRUN_TEST_DEVICE_FREE_MB", H_INT, F(device_free_mb), 0, 0, (int64_t)1 << 40, -1,
     "a number of MiB from 0 to 2^40", NULL},
    {"SHARDRUN_TEST_GPU_DETECT", H_INT, F(gpu_detect), 0, 0, 1024, -1, "a number of GPUs from 0 to 1024", NULL},
    {"SHARDRUN_TEST_POISON", H_FLAG, F(poison), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_TEST_HB", H_FLAG, F(hb), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_TEST_SKIP_WAIT", H_FN, 0, 0, 0, 0, 0, NULL, hook_skip_wait},
    {"SHARDRUN_TEST_COMM_DELAY_US", H_FN, 0, 0, 0, 0, 0, NULL, hook_comm_delay},
    {"SHARDRUN_TEST_STALL_SEQ", H_INT, F(stall_seq), 0, 0, UINT32_MAX, -1,
     "a collective's sequence number from 0 to 4294967295", NULL},
    {"SHARDRUN_TEST_MISMATCH_SEQ", H_FN, 0, 0, 0, 0, 0, NULL, hook_mismatch},
    {"SHARDRUN_TEST_NCCL_SIZE1", H_FLAG, F(nccl_size1), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_TEST_STAGED_COLLECTIVES", H_FLAG, F(staged), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_BENCH_NO_SHA256", H_FLAG, F(bench_no_sha256), 0, 0, 0, 0, NULL, NULL},
    {"SHARDRUN_TEST_CKPT_WRITE_DELAY_MS", H_INT, F(ckpt_write_delay_ms), 0, 1, 3600000, 0,
     "milliseconds from 1 to 3600000", NULL},
};
#undef F
#undef SIZE

/* One row's value v into h. */
static void parse_row(parse_state *ps, const hook_row *r, const char *v, sr_testhooks *h) {
    char *base = (char *)h;
    int64_t *i = (int64_t *)(base + r->off);
    switch (r->kind) {
    case H_INT:
        if (!parse_i64(v, strlen(v), r->min, i) || *i > r->max) {
            *i = r->reset;
            bad(ps, r->name, v, r->expect);
        }
        break;
    case H_RANKED: {
        long n = split_rank(v, (int *)(base + r->off2));
        if (n < 0 || !parse_i64(v, (size_t)n, r->min, i))
            bad(ps, r->name, v, r->expect);
        break;
    }
    case H_STR:
        if (strlen(v) >= (size_t)r->max)
            bad(ps, r->name, v, r->expect);
        else
            snprintf(base + r->off, r->off2, "%s", v);
        break;
    case H_CHOICE: {
        /* the choices are the expect text's words but "or" */
        char list[128];
        snprintf(list, sizeof list, "%s", r->expect);
        bool ok = false;
        for (char *w = strtok(list, " "); w && !ok; w = strtok(NULL, " "))
            ok = strcmp(w, "or") != 0 && strcmp(w, v) == 0;
        if (ok)
            snprintf(base + r->off, r->off2, "%s", v);
        else
            bad(ps, r->name, v, r->expect);
        break;
    }
    case H_FLAG:
        flag(ps, r->name, (bool *)(base + r->off));
        break;
    case H_FN:
        r->fn(ps, r->name, v, h);
        break;
    }
}

sr_status sr_testhook_parse(sr_testhooks *h, char *why, size_t why_len) {
    *h = (sr_testhooks){0};
    parse_state ps = {SR_OK, why, why_len};
    h->crash_step = h->pause_step = h->preempt_step = h->nan_step = -1;
    h->crash_rank = h->pause_rank = h->preempt_rank = h->alloc_fail_rank = -1;
    h->mem_available = h->node_mem = h->device_free_mb = h->gpu_detect = -1;
    h->stall_seq = h->mismatch_seq = h->gpu_hang_step = -1;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        const char *v = getenv(rows[k].name);
        if (rows[k].kind == H_FLAG || (v && *v))
            parse_row(&ps, &rows[k], v, h);
    }
    return ps.st;
}

static void read_all(void) { init_status = sr_testhook_parse(&hooks, init_message, sizeof init_message); }

sr_status sr_testhook_init(void) {
    pthread_once(&once, read_all);
    if (init_status != SR_OK)
        return sr_error(init_status, "%s", init_message);
    return SR_OK;
}

const sr_testhooks *sr_testhook(void) {
    pthread_once(&once, read_all);
    return &hooks;
}

void sr_testhook_warn_active(void) {
    const sr_testhooks *h = sr_testhook();
    char line[1024];
    sr_line l = SR_LINE(line);
    if (h->crash_site[0])
        sr_line_add(&l, " SHARDRUN_TEST_CRASH_AT=%s", getenv("SHARDRUN_TEST_CRASH_AT"));
    if (h->pause_site[0])
        sr_line_add(&l, " SHARDRUN_TEST_PAUSE_AT=%s", getenv("SHARDRUN_TEST_PAUSE_AT"));
    if (h->preempt_step >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_PREEMPT_AT=%s", getenv("SHARDRUN_TEST_PREEMPT_AT"));
    if (h->nan_step >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_NAN_AT_STEP=%lld", (long long)h->nan_step);
    if (h->dump_params[0])
        sr_line_add(&l, " SHARDRUN_TEST_DUMP_PARAMS=%s", h->dump_params);
    if (h->dump_seqs[0])
        sr_line_add(&l, " SHARDRUN_TEST_DUMP_SEQS=%s", h->dump_seqs);
    if (h->oracle_dir[0])
        sr_line_add(&l, " SHARDRUN_TEST_ORACLE=%s", h->oracle_dir);
    if (h->alloc_fail > 0)
        sr_line_add(&l, " SHARDRUN_TEST_ALLOC_FAIL=%s", getenv("SHARDRUN_TEST_ALLOC_FAIL"));
    if (h->isa[0])
        sr_line_add(&l, " SHARDRUN_TEST_ISA=%s", h->isa);
    if (h->mem_available >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_MEM_AVAILABLE=%lld", (long long)h->mem_available);
    if (h->node_mem > 0)
        sr_line_add(&l, " SHARDRUN_TEST_NODE_MEM=%lld", (long long)h->node_mem);
    if (h->no_pmix_events)
        sr_line_add(&l, " SHARDRUN_TEST_NO_PMIX_EVENTS=1");
    if (h->device[0])
        sr_line_add(&l, " SHARDRUN_TEST_DEVICE=%s", h->device);
    if (h->device_free_mb >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_DEVICE_FREE_MB=%lld", (long long)h->device_free_mb);
    if (h->gpu_detect >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_GPU_DETECT=%lld", (long long)h->gpu_detect);
    if (h->skip_wait[0])
        sr_line_add(&l, " SHARDRUN_TEST_SKIP_WAIT=%s", h->skip_wait);
    if (h->ckpt_write_delay_ms > 0)
        sr_line_add(&l, " SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=%s", getenv("SHARDRUN_TEST_CKPT_WRITE_DELAY_MS"));
    if (h->comm_delay_us > 0)
        sr_line_add(&l, " SHARDRUN_TEST_COMM_DELAY_US=%s", getenv("SHARDRUN_TEST_COMM_DELAY_US"));
    if (h->stall_seq >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_STALL_SEQ=%lld", (long long)h->stall_seq);
    if (h->mismatch_seq >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_MISMATCH_SEQ=%s", getenv("SHARDRUN_TEST_MISMATCH_SEQ"));
    if (h->gpu_hang_step >= 0)
        sr_line_add(&l, " SHARDRUN_TEST_GPU_HANG_AT=%lld", (long long)h->gpu_hang_step);
    if (h->mutate[0])
        sr_line_add(&l, " SHARDRUN_TEST_MUTATE=%s", h->mutate);
    if (h->bench_no_sha256)
        sr_line_add(&l, " SHARDRUN_BENCH_NO_SHA256=1");
    if (h->bench_counts[0])
        sr_line_add(&l, " SHARDRUN_BENCH_COUNTS=%s", h->bench_counts);
    if (h->nccl_size1)
        sr_line_add(&l, " SHARDRUN_TEST_NCCL_SIZE1=1");
    if (h->staged)
        sr_line_add(&l, " SHARDRUN_TEST_STAGED_COLLECTIVES=1");
    if (line[0])
        sr_log_warn("test hooks active (never set these for real runs):%s", line);
}

bool sr_testhook_crash_here(const char *site, int64_t step, int rank) {
    const sr_testhooks *h = sr_testhook();
    if (!known_site(site, false)) { /* a site the list does not name: the program's bug */
        fprintf(stderr, "shardrun: internal error: crash site %s is not in SR_TESTHOOK_CRASH_SITES\n", site);
        abort();
    }
    return h->crash_site[0] && strcmp(h->crash_site, site) == 0 && (h->crash_step < 0 || h->crash_step == step) &&
           (h->crash_rank < 0 || h->crash_rank == rank);
}

static bool pause_here(const char *site, int64_t step, int rank) {
    const sr_testhooks *h = sr_testhook();
    return h->pause_site[0] && strcmp(h->pause_site, site) == 0 && (h->pause_step < 0 || h->pause_step == step) &&
           (h->pause_rank < 0 || h->pause_rank == rank);
}

void sr_testhook_pause_point(const char *site, int64_t step, int rank) {
    if (!pause_here(site, step, rank))
        return;
    fprintf(stderr, "shardrun: test: SHARDRUN_TEST_PAUSE_AT: rank %d stopped at %s (step %lld)\n", rank, site,
            (long long)step);
    raise(SIGSTOP);
}
