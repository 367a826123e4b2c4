/* clock.h — the program's one clock: monotonic time (durations, timeouts,
 * rates), wall time (timestamps in records, files and traces) and the
 * absolute deadlines pthread_cond_timedwait takes.  Every function but
 * the two formatters (sr_clock_iso, sr_clock_duration) is
 * async-signal-safe (POSIX's clock read is, POSIX.1-2008 2.4.3, and
 * nothing here locks or allocates): the preemption handler
 * (preempt.c) and the flight recorder's dump (flight.c) read it in signal
 * handlers.  The CUDA module reads it through the program's exported
 * symbols.  clock.c is the one file that reads POSIX's clocks
 * (tests/layers.sh). */
#ifndef SR_CLOCK_H
#define SR_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Monotonic seconds / nanoseconds since an arbitrary start (CLOCK_MONOTONIC):
 * differences are durations; never compare with wall time. */
double sr_clock_mono_s(void);
int64_t sr_clock_mono_ns(void);
/* Wall time since the epoch (CLOCK_REALTIME), in seconds / nanoseconds:
 * what records and files carry; it may jump (NTP, an administrator). */
double sr_clock_wall_s(void);
int64_t sr_clock_wall_ns(void);
/* The wall time now as a timespec (what a signal handler stores). */
struct timespec sr_clock_wall_ts(void);
/* Absolute deadlines `seconds` (>= 0) from now for pthread_cond_timedwait:
 * on the wall clock (a condition variable's default clock) or on the
 * monotonic clock (one made with pthread_condattr_setclock(CLOCK_MONOTONIC)). */
struct timespec sr_clock_wall_after(double seconds);
struct timespec sr_clock_mono_after(double seconds);
/* A timespec as seconds. */
double sr_clock_ts_s(struct timespec ts);
/* Wall time t (seconds since the epoch; t < 0: now) as ISO 8601 UTC,
 * "2026-12-05T19:04:05Z", into out[n] (n >= 21).  Not async-signal-safe
 * (gmtime_r, strftime). */
void sr_clock_iso(double t, char *out, size_t n);
/* A duration of `s` seconds (< 0 taken as 0) as a person reads it, into
 * out[n] (n >= 16): with seconds "7s", "12m03s", "2h05m09s"; without
 * (an estimate) "7s", "41m", "2h05m" (minutes rounded up). */
void sr_clock_duration(double s, int with_seconds, char *out, size_t n);

#endif
