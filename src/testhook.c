/* testhook.c — reads and parses the SHARDRUN_TEST_* / SHARDRUN_BENCH_*
 * variables once; see testhook.h. */
#include "srconfig.h"

#include "testhook.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"

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

sr_status sr_testhook_parse(sr_testhooks *h, char *why, size_t why_len) {
    *h = (sr_testhooks){0};
    parse_state ps = {SR_OK, why, why_len};
    h->crash_step = -1;
    h->crash_rank = -1;
    h->pause_step = -1;
    h->pause_rank = -1;
    h->preempt_step = -1;
    h->preempt_rank = -1;
    h->nan_step = -1;
    h->alloc_fail_rank = -1;
    h->mem_available = -1;
    h->node_mem = -1;
    h->device_free_mb = -1;
    h->gpu_detect = -1;
    h->stall_seq = -1;
    h->mismatch_seq = -1;
    h->gpu_hang_step = -1;
    const char *v;
    char expected[512];
    snprintf(expected, sizeof expected, "SITE[:STEP][@RANK] with SITE one of %s", SR_TESTHOOK_CRASH_SITES);
    if ((v = getenv("SHARDRUN_TEST_CRASH_AT")) && *v &&
        (!parse_site(v, h->crash_site, sizeof h->crash_site, &h->crash_step, &h->crash_rank) ||
         !known_site(h->crash_site, false)))
        bad(&ps, "SHARDRUN_TEST_CRASH_AT", v, expected);
    snprintf(expected, sizeof expected, "SITE[:STEP][@RANK] with SITE one of %s, before_connect",
             SR_TESTHOOK_CRASH_SITES);
    if ((v = getenv("SHARDRUN_TEST_PAUSE_AT")) && *v &&
        (!parse_site(v, h->pause_site, sizeof h->pause_site, &h->pause_step, &h->pause_rank) ||
         !known_site(h->pause_site, true)))
        bad(&ps, "SHARDRUN_TEST_PAUSE_AT", v, expected);
    if ((v = getenv("SHARDRUN_TEST_PREEMPT_AT")) && *v) {
        long n = split_rank(v, &h->preempt_rank);
        if (n < 0 || !parse_i64(v, (size_t)n, 0, &h->preempt_step))
            bad(&ps, "SHARDRUN_TEST_PREEMPT_AT", v, "STEP[@RANK] (STEP 0: during set-up)");
    }
    if ((v = getenv("SHARDRUN_TEST_GPU_HANG_AT")) && *v && !parse_i64(v, strlen(v), 1, &h->gpu_hang_step))
        bad(&ps, "SHARDRUN_TEST_GPU_HANG_AT", v, "a step number >= 1");
    if ((v = getenv("SHARDRUN_TEST_MUTATE")) && *v) {
        if (strcmp(v, "keep_notready") == 0 || strcmp(v, "pageable_step") == 0)
            snprintf(h->mutate, sizeof h->mutate, "%s", v);
        else
            bad(&ps, "SHARDRUN_TEST_MUTATE", v, "keep_notready or pageable_step");
    }
    if ((v = getenv("SHARDRUN_TEST_NAN_AT_STEP")) && *v && !parse_i64(v, strlen(v), 1, &h->nan_step))
        bad(&ps, "SHARDRUN_TEST_NAN_AT_STEP", v, "a step number >= 1");
    if ((v = getenv("SHARDRUN_TEST_DUMP_PARAMS")) && *v) {
        if (strlen(v) >= sizeof h->dump_params)
            bad(&ps, "SHARDRUN_TEST_DUMP_PARAMS", v, "a path shorter than 4096 bytes");
        else
            snprintf(h->dump_params, sizeof h->dump_params, "%s", v);
    }
    if ((v = getenv("SHARDRUN_BENCH_COUNTS")) && *v) {
        if (strlen(v) >= sizeof h->bench_counts)
            bad(&ps, "SHARDRUN_BENCH_COUNTS", v, "a directory path shorter than 4096 bytes");
        else
            snprintf(h->bench_counts, sizeof h->bench_counts, "%s", v);
    }
    if ((v = getenv("SHARDRUN_TEST_ORACLE")) && *v) {
        if (strlen(v) >= sizeof h->oracle_dir - 32)
            bad(&ps, "SHARDRUN_TEST_ORACLE", v, "a directory path shorter than 4064 bytes");
        else
            snprintf(h->oracle_dir, sizeof h->oracle_dir, "%s", v);
    }
    if ((v = getenv("SHARDRUN_TEST_ALLOC_FAIL")) && *v) {
        long n = split_rank(v, &h->alloc_fail_rank);
        if (n < 0 || !parse_i64(v, (size_t)n, 1, &h->alloc_fail))
            bad(&ps, "SHARDRUN_TEST_ALLOC_FAIL", v, "N[@RANK], an allocation number >= 1");
    }
    if ((v = getenv("SHARDRUN_TEST_ISA")) && *v) {
        sr_isa level;
        if (strlen(v) >= sizeof h->isa || !sr_isa_parse(v, &level))
            bad(&ps, "SHARDRUN_TEST_ISA", v, SR_ISA_NAMES);
        else
            snprintf(h->isa, sizeof h->isa, "%s", v);
    }
    if ((v = getenv("SHARDRUN_TEST_MEM_AVAILABLE")) && *v && !parse_i64(v, strlen(v), 0, &h->mem_available))
        bad(&ps, "SHARDRUN_TEST_MEM_AVAILABLE", v, "a number of bytes >= 0");
    if ((v = getenv("SHARDRUN_TEST_NODE_MEM")) && *v && !parse_i64(v, strlen(v), 1, &h->node_mem))
        bad(&ps, "SHARDRUN_TEST_NODE_MEM", v, "a number of bytes >= 1");
    flag(&ps, "SHARDRUN_TEST_NO_PMIX_EVENTS", &h->no_pmix_events);
    if ((v = getenv("SHARDRUN_TEST_DEVICE")) && *v) {
        if (strcmp(v, "fake") == 0)
            snprintf(h->device, sizeof h->device, "fake");
        else
            bad(&ps, "SHARDRUN_TEST_DEVICE", v, "fake");
    }
    if ((v = getenv("SHARDRUN_TEST_DEVICE_FREE_MB")) && *v &&
        (!parse_i64(v, strlen(v), 0, &h->device_free_mb) || h->device_free_mb > ((int64_t)1 << 40)))
        bad(&ps, "SHARDRUN_TEST_DEVICE_FREE_MB", v, "a number of MiB from 0 to 2^40");
    if ((v = getenv("SHARDRUN_TEST_GPU_DETECT")) && *v &&
        (!parse_i64(v, strlen(v), 0, &h->gpu_detect) || h->gpu_detect > 1024))
        bad(&ps, "SHARDRUN_TEST_GPU_DETECT", v, "a number of GPUs from 0 to 1024");
    flag(&ps, "SHARDRUN_TEST_POISON", &h->poison);
    flag(&ps, "SHARDRUN_TEST_HB", &h->hb);
    if ((v = getenv("SHARDRUN_TEST_SKIP_WAIT")) && *v) {
        if (strlen(v) >= sizeof h->skip_wait || strspn(v, "abcdefghijklmnopqrstuvwxyz_,") != strlen(v))
            bad(&ps, "SHARDRUN_TEST_SKIP_WAIT", v,
                "list, or a comma list of wait sites (SHARDRUN_TEST_SKIP_WAIT=list)");
        else
            snprintf(h->skip_wait, sizeof h->skip_wait, "%s", v);
    }
    if ((v = getenv("SHARDRUN_TEST_COMM_DELAY_US")) && *v) {
        const char *colon = strchr(v, ':');
        size_t n = colon ? (size_t)(colon - v) : strlen(v);
        bool ok = parse_i64(v, n, 1, &h->comm_delay_us) && h->comm_delay_us <= 10000000;
        if (ok && colon && strcmp(colon + 1, "compute") == 0)
            h->comm_delay_stream = 1;
        else if (ok && colon && strcmp(colon + 1, "comm") != 0)
            ok = false;
        if (!ok) {
            h->comm_delay_us = 0;
            bad(&ps, "SHARDRUN_TEST_COMM_DELAY_US", v, "N[:comm|compute], microseconds from 1 to 10000000");
        }
    }
    if ((v = getenv("SHARDRUN_TEST_STALL_SEQ")) && *v &&
        (!parse_i64(v, strlen(v), 0, &h->stall_seq) || h->stall_seq > UINT32_MAX)) {
        h->stall_seq = -1;
        bad(&ps, "SHARDRUN_TEST_STALL_SEQ", v, "a collective's sequence number from 0 to 4294967295");
    }
    if ((v = getenv("SHARDRUN_TEST_MISMATCH_SEQ")) && *v) {
        long n = split_rank(v, &h->mismatch_rank);
        if (n < 0 || !parse_i64(v, (size_t)n, 0, &h->mismatch_seq) || h->mismatch_seq > UINT32_MAX) {
            h->mismatch_seq = -1;
            bad(&ps, "SHARDRUN_TEST_MISMATCH_SEQ", v,
                "K[@RANK]: a collective's sequence number from 0 to 4294967295, and the world rank (default 0)");
        }
        if (h->mismatch_rank < 0)
            h->mismatch_rank = 0;
    }
    flag(&ps, "SHARDRUN_TEST_NCCL_SIZE1", &h->nccl_size1);
    flag(&ps, "SHARDRUN_TEST_STAGED_COLLECTIVES", &h->staged);
    flag(&ps, "SHARDRUN_BENCH_NO_SHA256", &h->bench_no_sha256);
    if ((v = getenv("SHARDRUN_TEST_CKPT_WRITE_DELAY_MS")) && *v &&
        (!parse_i64(v, strlen(v), 1, &h->ckpt_write_delay_ms) || h->ckpt_write_delay_ms > 3600000)) {
        h->ckpt_write_delay_ms = 0;
        bad(&ps, "SHARDRUN_TEST_CKPT_WRITE_DELAY_MS", v, "milliseconds from 1 to 3600000");
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
    char line[1024] = "";
    size_t used = 0;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (used < sizeof line)                                                                                        \
            used += (size_t)snprintf(line + used, sizeof line - used, __VA_ARGS__);                                    \
    } while (0)
    if (h->crash_site[0])
        ADD(" SHARDRUN_TEST_CRASH_AT=%s", getenv("SHARDRUN_TEST_CRASH_AT"));
    if (h->pause_site[0])
        ADD(" SHARDRUN_TEST_PAUSE_AT=%s", getenv("SHARDRUN_TEST_PAUSE_AT"));
    if (h->preempt_step >= 0)
        ADD(" SHARDRUN_TEST_PREEMPT_AT=%s", getenv("SHARDRUN_TEST_PREEMPT_AT"));
    if (h->nan_step >= 0)
        ADD(" SHARDRUN_TEST_NAN_AT_STEP=%lld", (long long)h->nan_step);
    if (h->dump_params[0])
        ADD(" SHARDRUN_TEST_DUMP_PARAMS=%s", h->dump_params);
    if (h->oracle_dir[0])
        ADD(" SHARDRUN_TEST_ORACLE=%s", h->oracle_dir);
    if (h->alloc_fail > 0)
        ADD(" SHARDRUN_TEST_ALLOC_FAIL=%s", getenv("SHARDRUN_TEST_ALLOC_FAIL"));
    if (h->isa[0])
        ADD(" SHARDRUN_TEST_ISA=%s", h->isa);
    if (h->mem_available >= 0)
        ADD(" SHARDRUN_TEST_MEM_AVAILABLE=%lld", (long long)h->mem_available);
    if (h->node_mem > 0)
        ADD(" SHARDRUN_TEST_NODE_MEM=%lld", (long long)h->node_mem);
    if (h->no_pmix_events)
        ADD(" SHARDRUN_TEST_NO_PMIX_EVENTS=1");
    if (h->device[0])
        ADD(" SHARDRUN_TEST_DEVICE=%s", h->device);
    if (h->device_free_mb >= 0)
        ADD(" SHARDRUN_TEST_DEVICE_FREE_MB=%lld", (long long)h->device_free_mb);
    if (h->gpu_detect >= 0)
        ADD(" SHARDRUN_TEST_GPU_DETECT=%lld", (long long)h->gpu_detect);
    if (h->skip_wait[0])
        ADD(" SHARDRUN_TEST_SKIP_WAIT=%s", h->skip_wait);
    if (h->ckpt_write_delay_ms > 0)
        ADD(" SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=%s", getenv("SHARDRUN_TEST_CKPT_WRITE_DELAY_MS"));
    if (h->comm_delay_us > 0)
        ADD(" SHARDRUN_TEST_COMM_DELAY_US=%s", getenv("SHARDRUN_TEST_COMM_DELAY_US"));
    if (h->stall_seq >= 0)
        ADD(" SHARDRUN_TEST_STALL_SEQ=%lld", (long long)h->stall_seq);
    if (h->mismatch_seq >= 0)
        ADD(" SHARDRUN_TEST_MISMATCH_SEQ=%s", getenv("SHARDRUN_TEST_MISMATCH_SEQ"));
    if (h->gpu_hang_step >= 0)
        ADD(" SHARDRUN_TEST_GPU_HANG_AT=%lld", (long long)h->gpu_hang_step);
    if (h->mutate[0])
        ADD(" SHARDRUN_TEST_MUTATE=%s", h->mutate);
    if (h->bench_no_sha256)
        ADD(" SHARDRUN_BENCH_NO_SHA256=1");
    if (h->bench_counts[0])
        ADD(" SHARDRUN_BENCH_COUNTS=%s", h->bench_counts);
    if (h->nccl_size1)
        ADD(" SHARDRUN_TEST_NCCL_SIZE1=1");
    if (h->staged)
        ADD(" SHARDRUN_TEST_STAGED_COLLECTIVES=1");
#undef ADD
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
