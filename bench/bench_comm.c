/* bench_comm.c — CPU transport bus bandwidth against raw loopback TCP,
 * measured in the same run.
 *
 * Run under a PMIx launcher (mpirun -n N bench_comm [MiB] [REPS]).  Every
 * rank times all-gather and reduce-scatter of a MiB-sized fp32 buffer (total
 * size, as nccl-tests counts it) REPS times after one untimed round; busBw = size * (n-1)/n / time
 * (nccl-tests' definition for both).  Rank 0 then measures the machine's raw
 * single-stream TCP throughput on loopback: a forked child receives the same
 * number of bytes over one plain socket.  Prints RESULT lines with the median
 * and spread, which bench/run_fsdp.sh tabulates. */
#include "srconfig.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "config.h"
#include "world.h"

static double now_s(void) { return sr_clock_mono_s(); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, int n, size_t bytes, double *t, int reps) {
    qsort(t, (size_t)reps, sizeof *t, cmp);
    double f = (double)bytes * (n - 1) / n / 1e6;
    printf("RESULT what=%s ranks=%d bytes=%zu busbw_median_MBps=%.1f busbw_min_MBps=%.1f busbw_max_MBps=%.1f\n", what,
           n, bytes, f / t[reps / 2], f / t[reps - 1], f / t[0]);
}

/* Raw single-stream loopback TCP: fork a receiver, send `bytes`, time it. */
static double raw_tcp_MBps(size_t bytes) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) || getsockname(ls, (struct sockaddr *)&a, &al))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = accept(ls, NULL, NULL);
        char *buf = malloc(1 << 20);
        size_t got = 0;
        ssize_t n;
        while (got < bytes && (n = recv(fd, buf, 1 << 20, 0)) > 0)
            got += (size_t)n;
        char ack = 1;
        send(fd, &ack, 1, 0);
        _exit(0);
    }
    close(ls);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        return 0;
    char *buf = calloc(1, 1 << 20);
    double t0 = now_s();
    size_t sent = 0;
    while (sent < bytes) {
        size_t chunk = bytes - sent < (1u << 20) ? bytes - sent : (1u << 20);
        ssize_t n = send(fd, buf, chunk, 0);
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
    char ack;
    if (recv(fd, &ack, 1, 0) != 1)
        return 0;
    double t = now_s() - t0;
    close(fd);
    waitpid(pid, NULL, 0);
    free(buf);
    return (double)bytes / 1e6 / t;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    sr_world w;
    if (sr_world_init(&w) != SR_OK || w.size < 2) {
        fprintf(stderr, "bench_comm: run under mpirun -n 2 (or more): %s\n", sr_error_message());
        return 64;
    }
    sr_log_set_rank(w.rank, w.size);
    sr_config cfg;
    sr_config_init(&cfg); /* the job file's defaults: comm.timeout_s, comm.interface */
    sr_transport_opts topts = {.timeout_s = cfg.comm_timeout_s, .interface = cfg.comm_interface};
    sr_transport *tp;
    sr_group *g;
    int *ranks = malloc(sizeof(int) * (size_t)w.size);
    for (int i = 0; i < w.size; i++)
        ranks[i] = i;
    if (sr_transport_open(&tp, &w, &topts) != SR_OK || sr_group_create(tp, ranks, w.size, &g) != SR_OK ||
        sr_transport_connect(tp) != SR_OK) {
        fprintf(stderr, "bench_comm: %s\n", sr_error_message());
        return 69;
    }
    size_t bytes = mib << 20, count = bytes / sizeof(float);
    size_t per = count / (size_t)w.size;
    float *full = calloc(count, sizeof(float)), *part = calloc(per, sizeof(float));
    double *t = malloc(sizeof(double) * (size_t)reps);
    /* one untimed round of each: first-touch page faults are not bandwidth */
    sr_allgather(g, full, full + (size_t)w.rank * per, per, SR_DT_F32, NULL);
    sr_reduce_scatter(g, part, full, per, SR_DT_F32, SR_OP_SUM, NULL);
    sr_barrier(g, NULL);
    for (int r = 0; r < reps; r++) {
        sr_barrier(g, NULL);
        double t0 = now_s();
        sr_allgather(g, full, full + (size_t)w.rank * per, per, SR_DT_F32, NULL);
        t[r] = now_s() - t0;
    }
    if (w.rank == 0)
        report("allgather", w.size, per * (size_t)w.size * 4, t, reps);
    for (int r = 0; r < reps; r++) {
        sr_barrier(g, NULL);
        double t0 = now_s();
        sr_reduce_scatter(g, part, full, per, SR_DT_F32, SR_OP_SUM, NULL);
        t[r] = now_s() - t0;
    }
    if (w.rank == 0)
        report("reduce_scatter", w.size, per * (size_t)w.size * 4, t, reps);
    sr_barrier(g, NULL);
    if (w.rank == 0) {
        for (int r = 0; r < reps; r++)
            t[r] = raw_tcp_MBps(bytes);
        qsort(t, (size_t)reps, sizeof *t, cmp);
        printf("RESULT what=raw_tcp ranks=1 bytes=%zu MBps_median=%.1f MBps_min=%.1f MBps_max=%.1f\n", bytes,
               t[reps / 2], t[0], t[reps - 1]);
    }
    sr_barrier(g, NULL);
    sr_transport_close(tp);
    sr_world_close(&w);
    sr_config_free(&cfg);
    free(full), free(part), free(t), free(ranks);
    return 0;
}
