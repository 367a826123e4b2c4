/* bench_disk.c — the file system's raw sequential write ceiling for the
 * checkpoint benchmark: writes BYTES of fresh pseudo-random data (xorshift,
 * a new seed every run, so neither zero detection nor deduplication in a
 * virtual disk flatters it) in 4 MiB write() calls from a page-aligned
 * buffer, then fsync, the way `dd bs=4M conv=fsync` would with such input;
 * then reads the file back (from the page cache) in 4 MiB pread() calls.
 * Prints one line: "write_MBps=W read_MBps=R".  The data is generated
 * before the clock starts.
 * `bench_disk --touch BYTES` only writes to BYTES of fresh memory and frees
 * it: on a VM that hands freed memory back to its host (free page
 * reporting), the first touch of a page costs a host fault, which made
 * both dd and checkpoint saves 2-4x slower at random; touching memory
 * before every measured operation puts both on the same footing.
 * `bench_disk --memcpy BYTES` prints "memcpy_s=S": the median of 5 timed
 * single-threaded memcpy calls of BYTES between two touched buffers (the
 * asynchronous checkpoint's snapshot is such a copy).
 * usage: bench_disk FILE BYTES SEED | bench_disk --touch BYTES | bench_disk --memcpy BYTES */
#include "srconfig.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--touch") == 0) {
        size_t n = (size_t)strtoull(argv[2], NULL, 10);
        volatile unsigned char *p = malloc(n);
        if (!p)
            return 70;
        for (size_t i = 0; i < n; i += 4096)
            p[i] = 1;
        free((void *)p);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--memcpy") == 0) {
        size_t n = (size_t)strtoull(argv[2], NULL, 10);
        unsigned char *a = malloc(n), *b = malloc(n);
        if (!a || !b)
            return 70;
        memset(a, 1, n);
        memset(b, 2, n);
        double t[5];
        for (int i = 0; i < 5; i++) {
            double t0 = now_s();
            memcpy(b, a, n);
            t[i] = now_s() - t0;
            a[i] = b[n - 1 - (size_t)i]; /* the copy is used */
        }
        for (int i = 0; i < 5; i++) /* sort 5 */
            for (int j = i + 1; j < 5; j++)
                if (t[j] < t[i]) {
                    double x = t[i];
                    t[i] = t[j];
                    t[j] = x;
                }
        printf("memcpy_s=%.6f\n", t[2]);
        free(a);
        free(b);
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: bench_disk FILE BYTES SEED\n");
        return 64;
    }
    const size_t block = (size_t)4 << 20;
    size_t bytes = (size_t)strtoull(argv[2], NULL, 10);
    bytes = (bytes + block - 1) / block * block;
    uint64_t x = strtoull(argv[3], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *data = aligned_alloc(4096, bytes);
    if (!data) {
        fprintf(stderr, "bench_disk: out of memory for %zu bytes\n", bytes);
        return 70;
    }
    uint64_t *w = (uint64_t *)data;
    for (size_t i = 0; i < bytes / 8; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w[i] = x;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        perror(argv[1]);
        return 73;
    }
    double t0 = now_s();
    for (size_t off = 0; off < bytes; off += block)
        if (write(fd, data + off, block) != (ssize_t)block) {
            perror("write");
            return 74;
        }
    if (fsync(fd) != 0 || close(fd) != 0) {
        perror("fsync");
        return 74;
    }
    double t1 = now_s();
    fd = open(argv[1], O_RDONLY);
    for (size_t off = 0; off < bytes; off += block)
        if (pread(fd, data, block, (off_t)off) != (ssize_t)block) {
            perror("read");
            return 74;
        }
    double t2 = now_s();
    close(fd);
    printf("write_MBps=%.0f read_MBps=%.0f\n", (double)bytes / (t1 - t0) / 1e6, (double)bytes / (t2 - t1) / 1e6);
    free(data);
    return 0;
}
