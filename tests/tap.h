/* tap.h — a tiny TAP producer for the C tests (automake's tap-driver.sh
 * reads it).  Header-only; static inline by house rule. */
#ifndef SR_TAP_H
#define SR_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n = 0, tap_failed = 0;

static inline void tap_plan(int n) { printf("1..%d\n", n); }

static inline int tap_ok(int cond, const char *fmt, ...) {
    va_list ap;
    tap_n++;
    if (!cond)
        tap_failed++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
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

static inline int tap_done(void) {
    printf("1..%d\n", tap_n);
    return 0;
}

#endif
