/* data.h — token shards, the embedded corpus, the seeded global data order,
 * and their header (`shardrun data prepare` writes them: prepare.h).
 *
 * Formats (llm.c's, so its data scripts work unchanged): a 256 x int32
 * header — magic, version, token count — then the tokens.  magic 20240520,
 * version 1: uint16 tokens (GPT-2); magic 20240801 (llm.c's Llama-3
 * scripts, version 7; version 1 also accepted): uint32 tokens.
 *
 * A data set is a list of shards; every shard is cut into windows of T+1
 * tokens (input and shifted target).  The order is one global sequence
 * stream: sequence i is window perm_e(i mod W) of epoch e = i / W, where
 * perm_e is a seeded pseudo-random permutation computed per index (no table).
 * Optimizer step s consumes sequences [s*batch, (s+1)*batch), so the cursor
 * is global and any world size sees the same batches (ARCHITECTURE.md §3). */
#ifndef SR_DATA_H
#define SR_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "status.h"

#define SR_DATA_MAGIC_U16 20240520
#define SR_DATA_MAGIC_U32 20240801
#define SR_DATA_HEADER_INTS 256

typedef struct sr_data sr_data;

enum { SR_DATA_TRAIN, SR_DATA_VAL };

/* Opens the shards named by `paths` (paths or globs, sorted per glob) for
 * windows of T+1 tokens and checks every header, size and token (< vocab;
 * a negative vocab checks headers and sizes only, reading no token).
 * Returns SR_ERR_NOINPUT (missing, unreadable, no glob match) or
 * SR_ERR_DATA (bad magic or version, truncated, token out of range, fewer
 * than T+1 tokens) with the file named.  Free with sr_data_close. */
sr_status sr_data_open(sr_data **out, const sr_strlist *paths, int T, int64_t vocab);
/* Checks a shard's bytes (the whole file, len bytes; `path` names it in
 * messages): header, size, and every token < vocab (none when vocab < 0).  *tok_bytes (2 or 4) and
 * *ntok describe it.  SR_ERR_DATA naming what is wrong. */
sr_status sr_data_check_shard(const char *path, const void *bytes, size_t len, int64_t vocab, int *tok_bytes,
                              uint64_t *ntok);
/* The vocabulary of the embedded corpus (bytes). */
#define SR_DATA_EMBEDDED_VOCAB 256
/* The embedded corpus (byte-level, vocabulary 256): SR_DATA_TRAIN is the
 * first 90 %, SR_DATA_VAL the last 10 %. */
sr_status sr_data_open_embedded(sr_data **out, int part, int T, int64_t vocab);
void sr_data_close(sr_data *d);

/* The shards as opened: each one's path (the glob's match; the embedded
 * corpus's "<embedded corpus, train|val>"), its bytes as mapped (the whole
 * file; the embedded part's bytes), its modification time when opened
 * (nanoseconds; -1 for the embedded corpus).  Valid until sr_data_close. */
typedef struct {
    const char *path;
    const void *bytes;
    size_t len;
    int64_t mtime_ns;
    bool embedded;
} sr_data_shard_info;
int sr_data_nshards(const sr_data *d);
void sr_data_shard(const sr_data *d, int i, sr_data_shard_info *out);

/* Windows (sequences per epoch) and tokens in the data set. */
uint64_t sr_data_windows(const sr_data *d);
uint64_t sr_data_tokens(const sr_data *d);
const char *sr_data_describe(const sr_data *d);

/* Fills inputs/targets [count, T] with global sequences first .. first+count-1.
 * `shuffle`: seeded order (training); otherwise windows in file order
 * (evaluation). */
void sr_data_batch(const sr_data *d, uint64_t first, int count, bool shuffle, uint64_t seed, int *inputs, int *targets);

/* The window of global sequence i (exposed for tests). */
uint64_t sr_data_window_of(const sr_data *d, uint64_t i, bool shuffle, uint64_t seed);

/* The embedded corpus. */
extern const unsigned char sr_corpus_data[];
extern const size_t sr_corpus_size;

#endif
