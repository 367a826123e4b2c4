/* fuzz_shardfile.c — libFuzzer harness for checkpoint shard files.  The
 * input is a shard file; the harness makes the manifest's side agree with
 * it — chunk digests computed from the input, shard index, step and element
 * count taken from its header — so the reader behind the checksums and the
 * header check is what is fuzzed: the chunk walk, the ranges (three, picked
 * from the input) and verify mode. */
#include "srconfig.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int dirfd_ = -1;

static void on_problem(void *ctx, const char *path, const char *what) {
    (void)path;
    (void)what;
    ++*(int *)ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (dirfd_ < 0) {
        char tmpl[] = "/tmp/sr-fuzz-shard.XXXXXX";
        if (!mkdtemp(tmpl))
            return 0;
        dirfd_ = open(tmpl, O_RDONLY | O_DIRECTORY);
    }
    int fd = openat(dirfd_, "shard_00000.bin", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    close(fd);
    uint64_t nchunks = (size + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
    unsigned char(*sha)[32] = calloc(nchunks + 1, 32);
    for (uint64_t c = 0; c < nchunks; c++) {
        size_t off = c * SR_SHARD_CHUNK_BYTES,
               n = size - off < SR_SHARD_CHUNK_BYTES ? size - off : SR_SHARD_CHUNK_BYTES;
        sr_sha256(data + off, n, sha[c]);
    }
    sr_shardfile_expect x = {0, 0, size, 0, nchunks, (const unsigned char(*)[32])sha};
    if (size >= SR_SHARD_HEADER_BYTES) {
        uint32_t shard;
        uint64_t step, elements;
        memcpy(&shard, data + 12, 4);
        memcpy(&step, data + 24, 8);
        memcpy(&elements, data + 32, 8);
        x.shard = (int)shard;
        x.step = (int64_t)step;
        x.elements = elements;
    }
    /* three ranges inside the file, from the last bytes of the input */
    unsigned char buf[3][64];
    sr_shardfile_range r[3];
    size_t nr = 0;
    for (int i = 0; i < 3 && size >= 8; i++) {
        uint32_t a = data[size - 1 - i], b = data[size - 4 - i];
        uint64_t off = size ? (uint64_t)(a * 131u + b) % size : 0, len = 1 + (uint64_t)(b % 64);
        if (off + len <= size)
            r[nr++] = (sr_shardfile_range){off, len, buf[i], NULL, NULL, 0};
    }
    uint64_t verified = 0;
    int problems = 0;
    sr_shardfile_read(dirfd_, "shard_00000.bin", "fuzz/shard_00000.bin", &x, nr ? r : NULL, nr, &verified, NULL, NULL,
                      NULL);
    sr_shardfile_read(dirfd_, "shard_00000.bin", "fuzz/shard_00000.bin", &x, NULL, 0, &verified, on_problem, &problems,
                      NULL);
    free(sha);
    return 0;
}
