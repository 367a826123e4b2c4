/* bench_flight.c — the flight recorder's cost per record (make bench):
 * nanoseconds for one record's life (sr_flight_enter, _start, _end: what a
 * host collective costs the recorder), median and spread over rounds of
 * a million records each.  bench/run_flight.sh multiplies it by the
 * records a training step makes and divides by the step's time.
 *
 * usage: bench_flight [ROUNDS]; prints "ns_per_record MEDIAN MIN MAX". */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../src/clock.h"
#include "../src/flight.h"

static double now_s(void) { return sr_clock_mono_s(); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: bench_flight [ROUNDS (1..1000)]\n");
        return 64;
    }
    sr_flight_opts o = {SR_FLIGHT_DEFAULT_ENTRIES, "/nonexistent", "", 0, 1, "bench", "-", 0, 300.0};
    if (!sr_flight_init(&o)) {
        fprintf(stderr, "bench_flight: out of memory\n");
        return 70;
    }
    enum { N = 1000000 };
    double *t = malloc(sizeof *t * (size_t)rounds);
    if (!t)
        return 70;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (int i = 0; i < N; i++) {
            uint64_t id = sr_flight_enter(SR_FLIGHT_HOST, i, "all-gather", "shard", 8, 4096);
            sr_flight_start(id);
            sr_flight_end(id, true);
        }
        t[r] = (now_s() - t0) / N * 1e9;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp);
    printf("ns_per_record %.2f %.2f %.2f\n", t[rounds / 2], t[0], t[rounds - 1]);
    free(t);
    sr_flight_shutdown();
    return 0;
}
