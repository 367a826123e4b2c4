/* tap.h — what every C test shares: a tiny TAP producer (automake's
 * tap-driver.sh reads it), the selection of checks by tests/run
 * (SHARDRUN_TEST_PATTERN, an extended regular expression matched against
 * each description: only matching checks are printed, every check still
 * runs), the tests/run command a failing check prints to rerun just it,
 * a numeric comparison, and the world-init preamble of the tests that run
 * under mpirun.  Header-only; static inline by house rule. */
#ifndef SR_TAP_H
#define SR_TAP_H

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__CUDACC__) && !defined(SR_CUDAEMU) /* the .cu tests (nvcc, C++) use the TAP part alone */
#include "world.h"
#endif

static int tap_n = 0, tap_failed = 0;

static inline void tap_plan(int n) { printf("1..%d\n", n); }

/* tap_selected: whether this run prints the check DESC (always without
 * SHARDRUN_TEST_PATTERN; a pattern that does not compile selects nothing
 * and says so once). */
static inline int tap_selected(const char *desc) {
    static int state = 0; /* 0 unknown, 1 all, 2 pattern, 3 bad pattern */
    static regex_t re;
    if (state == 0) {
        const char *p = getenv("SHARDRUN_TEST_PATTERN");
        state = !p || !*p ? 1 : regcomp(&re, p, REG_EXTENDED | REG_NOSUB) == 0 ? 2 : 3;
        if (state == 3)
            printf("# SHARDRUN_TEST_PATTERN '%s' is not an extended regular expression\n", p);
    }
    return state == 1 || (state == 2 && regexec(&re, desc, 0, NULL, 0) == 0);
}

/* tap_rerun: prints the tests/run command that reruns the check DESC alone
 * (its description up to the first " (", where this run's numbers start,
 * as an anchored pattern). */
static inline void tap_rerun(const char *desc) {
    const char *name = getenv("SR_TEST_NAME");
    const char *base = name ? strrchr(name, '/') : NULL;
    printf("# rerun: tests/run %s '^", base ? base + 1 : name ? name : "TEST");
    const char *end = strstr(desc, " (");
    for (const char *c = desc; *c && c != end; c++) {
        if (strchr("[]\\.*^$+?(){}|", *c))
            putchar('\\');
        if (*c == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*c);
    }
    printf("'\n");
}

static inline int tap_vok(int cond, const char *fmt, va_list ap) {
    char desc[2048];
    vsnprintf(desc, sizeof desc, fmt, ap);
    if (!tap_selected(desc))
        return cond;
    tap_n++;
    if (!cond)
        tap_failed++;
    printf("%s %d - %s\n", cond ? "ok" : "not ok", tap_n, desc);
    if (!cond)
        tap_rerun(desc);
    fflush(stdout);
    return cond;
}

static inline int tap_ok(int cond, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = tap_vok(cond, fmt, ap);
    va_end(ap);
    return r;
}

/* tap_is_close: ok when |got - want| <= rtol x |want| + atol; a failure
 * prints both values and the difference.  Returns the condition. */
static inline int tap_is_close(double got, double want, double rtol, double atol, const char *fmt, ...) {
    double diff = fabs(got - want);
    int cond = diff <= rtol * fabs(want) + atol; /* false for NaN */
    va_list ap;
    va_start(ap, fmt);
    tap_vok(cond, fmt, ap);
    va_end(ap);
    if (!cond)
        printf("# got %.17g, want %.17g (difference %.3g; tolerance %.3g x |want| + %.3g)\n", got, want, diff, rtol,
               atol);
    return cond;
}

static inline void tap_diag(const char *fmt, ...) {
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* A check that cannot run here: "ok N # SKIP why", or a failure when
 * SHARDRUN_TEST_REQUIRE names `need` (the caller's kind: gpu, ...). */
static inline int tap_skip(const char *need, const char *what, const char *why) {
    const char *req = getenv("SHARDRUN_TEST_REQUIRE");
    if (req && need && strstr(req, need))
        return tap_ok(0, "%s: SHARDRUN_TEST_REQUIRE has %s, but %s", what, need, why);
    printf("ok %d - %s # SKIP %s\n", ++tap_n, what, why);
    return 1;
}

/* Prints the plan and returns the program's exit status: 1 when a check
 * failed, 0 otherwise, so a test run by hand or by a script that reads
 * only $? (tests/gpu/check.sh's sanitize stage) sees the verdict.  Under
 * mpirun only rank 0 returns it (the others return 0: a rank exiting 1
 * first would make mpirun kill rank 0 before its TAP is complete). */
static inline int tap_done(void) {
    printf("1..%d\n", tap_n);
    fflush(stdout);
    return tap_failed ? 1 : 0;
}

#if !defined(__CUDACC__) && !defined(SR_CUDAEMU)
/* tap_world_open: the preamble of a C test that runs on every rank of a
 * world (mpirun.sh starts them): joins the world, tags log lines with the
 * rank, and sends stdout of every rank but 0 to /dev/null (the TAP comes
 * from rank 0).  Returns 0 after printing a failing one-check plan when the
 * world cannot be joined (the caller returns 1: the test failed). */
static inline int tap_world_open(sr_world *w) {
    if (sr_world_init(w) != SR_OK) {
        printf("1..1\nnot ok 1 - world: %s\n", sr_error_message());
        return 0;
    }
    sr_log_set_rank(w->rank, w->size);
    if (w->rank != 0 && !freopen("/dev/null", "w", stdout)) {
        printf("1..1\nnot ok 1 - rank %d: cannot silence stdout\n", w->rank);
        return 0;
    }
    return 1;
}
#endif

#endif
