/* clock.c — the program's one clock (see clock.h): CLOCK_MONOTONIC and
 * CLOCK_REALTIME read in one place, in the forms the program uses
 * (seconds as double, nanoseconds as int64_t, timespecs for deadlines).
 * Async-signal-safe but for the two formatters: clock_gettime and
 * arithmetic only. */
#include "srconfig.h"

#include "clock.h"

#include <stdio.h>

static struct timespec now(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return ts;
}

double sr_clock_ts_s(struct timespec ts) { return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec; }

static int64_t ts_ns(struct timespec ts) { return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec; }

double sr_clock_mono_s(void) { return sr_clock_ts_s(now(CLOCK_MONOTONIC)); }
int64_t sr_clock_mono_ns(void) { return ts_ns(now(CLOCK_MONOTONIC)); }
double sr_clock_wall_s(void) { return sr_clock_ts_s(now(CLOCK_REALTIME)); }
int64_t sr_clock_wall_ns(void) { return ts_ns(now(CLOCK_REALTIME)); }
struct timespec sr_clock_wall_ts(void) {
    return now(CLOCK_REALTIME);
}

static struct timespec after(clockid_t clk, double seconds) {
    struct timespec ts = now(clk);
    if (!(seconds > 0))
        return ts;
    time_t whole = (time_t)seconds;
    ts.tv_sec += whole;
    ts.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

struct timespec sr_clock_wall_after(double seconds) {
    return after(CLOCK_REALTIME, seconds);
}
struct timespec sr_clock_mono_after(double seconds) {
    return after(CLOCK_MONOTONIC, seconds);
}

void sr_clock_iso(double t, char *out, size_t n) {
    time_t tt = (time_t)(t < 0 ? sr_clock_wall_s() : t);
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void sr_clock_duration(double s, int with_seconds, char *out, size_t n) {
    long long t = s > 0 ? (long long)(s + 0.5) : 0;
    if (!with_seconds && t >= 60)
        t = (t + 59) / 60 * 60; /* an estimate: whole minutes, rounded up */
    long long h = t / 3600, m = t / 60 % 60, sec = t % 60;
    if (t < 60)
        snprintf(out, n, "%llds", t);
    else if (h == 0)
        snprintf(out, n, with_seconds ? "%lldm%02llds" : "%lldm", m, sec);
    else
        snprintf(out, n, with_seconds ? "%lldh%02lldm%02llds" : "%lldh%02lldm", h, m, sec);
}
