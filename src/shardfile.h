/* shardfile.h — one shard file of a checkpoint: its header, its chunk
 * checksums, the writer, and the one chunk-verified reader.
 *
 * shardfile owns the bytes of shard_NNNNN.bin (shardrun-checkpoint(5)): a
 * 64-byte header (magic "SRSHARD", version, shard index and count, slices,
 * step, elements), then each saved state's elements (master parameters,
 * Adam m, Adam v) slice after slice.  The file is hashed in 4 MiB chunks
 * (SHA-256, OpenSSL EVP), the digests going to the manifest.  Writing
 * streams through two page-aligned staging buffers: the caller's thread
 * copies and hashes one (chunks in parallel) while a writer thread writes
 * the other and starts its writeback.  Reading verifies every chunk it
 * touches before a byte of it is used; the same reader serves resume (the
 * ranges a rank needs, stop at the first bad chunk) and `ckpt verify`
 * (every chunk, every failure reported). */
#ifndef SR_SHARDFILE_H
#define SR_SHARDFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define SR_SHARD_HEADER_BYTES 64
#define SR_SHARD_VERSION 1
#define SR_SHARD_CHUNK_BYTES ((uint64_t)4 << 20)
/* Chunks per staging buffer (reads and writes). */
#define SR_SHARD_BATCH_CHUNKS 8

/* What the manifest says of a file; the reader checks the file against it. */
typedef struct {
    int shard;
    int64_t step;
    uint64_t bytes, elements, nchunks;
    const unsigned char (*sha)[32]; /* nchunks digests */
} sr_shardfile_expect;

/* Where bytes that are not plain host memory go to and come from (the
 * engine's state: fsdp.h sr_fsdp_state_read/write): `at` is a byte
 * position the callback's owner defines; the reader and writer hand over
 * 4-byte-aligned pieces of at most a staging buffer. */
typedef sr_status (*sr_shardfile_put)(void *ctx, uint64_t at, const void *src, size_t bytes);
typedef sr_status (*sr_shardfile_get)(void *ctx, uint64_t at, void *dst, size_t bytes);

/* One piece of the file to read: bytes [off, off + bytes) into host memory
 * dst or, with `put`, to put(ctx, at + k, ...) for its byte k onwards. */
typedef struct {
    uint64_t off, bytes;
    void *dst;
    sr_shardfile_put put;
    void *ctx;
    uint64_t at;
} sr_shardfile_range;

/* A piece to write: the states are written piece after piece, from host
 * memory `data` or, with `get`, from get(ctx, at + k, ...) for byte k. */
typedef struct {
    const void *data;
    size_t bytes;
    sr_shardfile_get get;
    void *ctx;
    uint64_t at;
} sr_shardfile_piece;

/* Writes `path` (created exclusively): the header for (shard, count,
 * nslices, step, elements), then the pieces in order; fsyncs it.  hashes
 * receives one SHA-256 per 4 MiB chunk of the whole file.  SR_ERR_IO
 * (with a hint for a full disk), SR_ERR_CANTCREAT, SR_ERR_INTERNAL. */
sr_status sr_shardfile_write(const char *path, int shard, int shard_count, int nslices, int64_t step, uint64_t elements,
                             const sr_shardfile_piece *pieces, int npieces, unsigned char (*hashes)[32]);

/* Called for each problem when reading in `verify` mode (the file's path
 * and what is wrong with it); the reader goes on with the next chunk. */
typedef void (*sr_shardfile_problem)(void *ctx, const char *path, const char *what);

/* Opens entry `name` of the checkpoint directory dirfd (never through a
 * symbolic link, never blocking; it must be a regular file), checks its
 * size and header against x, and reads the ranges (sorted here) through
 * verified chunks,
 * adding the bytes verified to *verified.  ranges NULL (n 0) verifies every
 * chunk of the file.  Without `problem`, the first failure is returned
 * (SR_ERR_DATA naming the file and chunk); with it, every failure is
 * reported there and the count of problems is returned in *problems
 * (SR_OK as long as the file could be read).  `path` names the file in
 * messages.  SR_ERR_INTERNAL when out of memory. */
sr_status sr_shardfile_read(int dirfd, const char *name, const char *path, const sr_shardfile_expect *x,
                            sr_shardfile_range *ranges, size_t n, uint64_t *verified, sr_shardfile_problem problem,
                            void *ctx, int *problems);

/* SHA-256 of n bytes (the manifest's self-checksum uses it too). */
void sr_sha256(const void *data, size_t n, unsigned char out[32]);

#endif
