/* testhook.c — reads and parses the SHARDRUN_TEST_* / SHARDRUN_BENCH_*
 * variables once; see testhook.h. */
#include "srconfig.h"

#include "testhook.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sr_testhooks hooks;
static sr_status init_status = SR_OK;
static char init_message[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

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

static void bad(const char *name, const char *value, const char *expected) {
    if (init_status == SR_OK) {
        init_status = SR_ERR_CONFIG;
        sr_fmt(init_message, sizeof init_message, "%s=%s: expected %s (a test hook; unset it for real runs)", name,
               value, expected);
    }
}

/* "@RANK" at the end of v (rank stays -1 without one); returns the length
 * before it, or -1 when the rank does not parse. */
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

static void read_all(void) {
    hooks.crash_step = -1;
    hooks.crash_rank = -1;
    hooks.preempt_step = -1;
    hooks.preempt_rank = -1;
    hooks.nan_step = -1;
    hooks.alloc_fail_rank = -1;
    const char *v;
    if ((v = getenv("SHARDRUN_TEST_CRASH_AT")) && *v) {
        long n = split_rank(v, &hooks.crash_rank);
        const char *colon = memchr(v, ':', n > 0 ? (size_t)n : 0);
        size_t site_len = colon ? (size_t)(colon - v) : (size_t)(n > 0 ? n : 0);
        if (n < 0 || site_len == 0 || site_len >= sizeof hooks.crash_site ||
            (colon && !parse_i64(colon + 1, (size_t)(v + n - colon - 1), 0, &hooks.crash_step)))
            bad("SHARDRUN_TEST_CRASH_AT", v, "SITE[:STEP][@RANK]");
        else
            memcpy(hooks.crash_site, v, site_len);
    }
    if ((v = getenv("SHARDRUN_TEST_PREEMPT_AT")) && *v) {
        long n = split_rank(v, &hooks.preempt_rank);
        if (n < 0 || !parse_i64(v, (size_t)n, 1, &hooks.preempt_step))
            bad("SHARDRUN_TEST_PREEMPT_AT", v, "STEP[@RANK]");
    }
    if ((v = getenv("SHARDRUN_TEST_NAN_AT_STEP")) && *v && !parse_i64(v, strlen(v), 1, &hooks.nan_step))
        bad("SHARDRUN_TEST_NAN_AT_STEP", v, "a step number >= 1");
    if ((v = getenv("SHARDRUN_TEST_DUMP_PARAMS")) && *v) {
        if (strlen(v) >= sizeof hooks.dump_params)
            bad("SHARDRUN_TEST_DUMP_PARAMS", v, "a path shorter than 4096 bytes");
        else
            snprintf(hooks.dump_params, sizeof hooks.dump_params, "%s", v);
    }
    if ((v = getenv("SHARDRUN_TEST_ALLOC_FAIL")) && *v) {
        long n = split_rank(v, &hooks.alloc_fail_rank);
        if (n < 0 || !parse_i64(v, (size_t)n, 1, &hooks.alloc_fail))
            bad("SHARDRUN_TEST_ALLOC_FAIL", v, "N[@RANK], an allocation number >= 1");
    }
    if ((v = getenv("SHARDRUN_TEST_ISA")) && *v) {
        if (strlen(v) >= sizeof hooks.isa)
            bad("SHARDRUN_TEST_ISA", v, "x86-64-v2, x86-64-v3 or x86-64-v4");
        else
            snprintf(hooks.isa, sizeof hooks.isa, "%s", v);
    }
    if ((v = getenv("SHARDRUN_BENCH_NO_SHA256")) && *v) {
        if (strcmp(v, "1") == 0)
            hooks.bench_no_sha256 = true;
        else if (strcmp(v, "0") != 0)
            bad("SHARDRUN_BENCH_NO_SHA256", v, "1 or 0");
    }
}

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
    if (h->preempt_step >= 0)
        ADD(" SHARDRUN_TEST_PREEMPT_AT=%s", getenv("SHARDRUN_TEST_PREEMPT_AT"));
    if (h->nan_step >= 0)
        ADD(" SHARDRUN_TEST_NAN_AT_STEP=%lld", (long long)h->nan_step);
    if (h->dump_params[0])
        ADD(" SHARDRUN_TEST_DUMP_PARAMS=%s", h->dump_params);
    if (h->alloc_fail > 0)
        ADD(" SHARDRUN_TEST_ALLOC_FAIL=%s", getenv("SHARDRUN_TEST_ALLOC_FAIL"));
    if (h->isa[0])
        ADD(" SHARDRUN_TEST_ISA=%s", h->isa);
    if (h->bench_no_sha256)
        ADD(" SHARDRUN_BENCH_NO_SHA256=1");
#undef ADD
    if (line[0])
        sr_log_warn("test hooks active (never set these for real runs):%s", line);
}

bool sr_testhook_crash_here(const char *site, int64_t step, int rank) {
    const sr_testhooks *h = sr_testhook();
    return h->crash_site[0] && strcmp(h->crash_site, site) == 0 && (h->crash_step < 0 || h->crash_step == step) &&
           (h->crash_rank < 0 || h->crash_rank == rank);
}
