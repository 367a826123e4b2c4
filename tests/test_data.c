/* test_data.c — token shards and the global data order: both llm.c formats
 * read back exactly, the seeded order is a permutation per epoch, the global
 * cursor gives the same sequences however a step is split into
 * micro-batches or ranks, and the embedded corpus splits 90/10. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "tap.h"

static char dir[] = "/tmp/sr-test-data-XXXXXX";

static void write_shard(const char *path, int magic, int version, int tokbytes, int n, unsigned mul) {
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {magic, version, n};
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(i * mul) % 70000u;
        if (tokbytes == 2) {
            uint16_t s = (uint16_t)(v % 65536);
            fwrite(&s, 2, 1, f);
        } else {
            fwrite(&v, 4, 1, f);
        }
    }
    fclose(f);
}

int main(void) {
    if (!mkdtemp(dir)) {
        tap_ok(0, "mkdtemp");
        return tap_done();
    }
    char p16[256], p32[256], pglob[256];
    snprintf(p16, sizeof p16, "%s/a_000.bin", dir);
    snprintf(p32, sizeof p32, "%s/b_000.bin", dir);
    write_shard(p16, SR_DATA_MAGIC_U16, 1, 2, 1000, 7);
    write_shard(p32, SR_DATA_MAGIC_U32, 7, 4, 1000, 69);

    /* uint16 shard reads back exactly */
    char *items[] = {p16};
    sr_strlist l16 = {items, 1};
    sr_data *d = NULL;
    tap_ok(sr_data_open(&d, &l16, 10, 65536) == SR_OK, "uint16 shard opens");
    tap_ok(d && sr_data_windows(d) == 99 && sr_data_tokens(d) == 1000, "1000 tokens make 99 windows of 10+1");
    int in[40], tg[40];
    sr_data_batch(d, 5, 2, false, 0, in, tg);
    int exact = 1;
    for (int t = 0; t < 10; t++)
        exact = exact && in[t] == (5 * 10 + t) * 7 % 65536 && tg[t] == (5 * 10 + t + 1) * 7 % 65536 &&
                in[10 + t] == (6 * 10 + t) * 7 % 65536;
    tap_ok(exact, "unshuffled sequence i is window i; targets are inputs shifted by one");
    sr_data_close(d);

    /* uint32 shard: tokens above 65535 */
    char *items32[] = {p32};
    sr_strlist l32 = {items32, 1};
    tap_ok(sr_data_open(&d, &l32, 10, 70000) == SR_OK, "uint32 shard (magic 20240801) opens");
    sr_data_batch(d, 0, 1, false, 0, in, tg);
    tap_ok(in[1] == 69 && in[9] == 621 && d && sr_data_tokens(d) == 1000, "uint32 tokens read back");
    sr_data_close(d);
    tap_ok(sr_data_open(&d, &l32, 10, 65536) == SR_ERR_DATA && strstr(sr_error_message(), "token"),
           "a token >= vocab_size is refused: %s", sr_error_message());

    /* globs: sorted, several shards, windows do not cross files */
    snprintf(pglob, sizeof pglob, "%s/*.bin", dir);
    char *gi[] = {pglob};
    sr_strlist lg = {gi, 1};
    tap_ok(sr_data_open(&d, &lg, 10, 70000) == SR_OK && sr_data_windows(d) == 198,
           "a glob opens both shards (198 windows)");

    /* the seeded order is a permutation of the windows in every epoch */
    uint64_t W = sr_data_windows(d);
    char *seen = calloc(W, 1);
    int perm = 1, differs = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        memset(seen, 0, W);
        for (uint64_t i = 0; i < W; i++) {
            uint64_t w = sr_data_window_of(d, epoch * W + i, true, 1337);
            perm = perm && w < W && !seen[w];
            if (w < W)
                seen[w] = 1;
            if (epoch == 1)
                differs += w != sr_data_window_of(d, i, true, 1337);
        }
    }
    tap_ok(perm, "every epoch visits every window exactly once");
    tap_ok(differs > 0, "epochs are shuffled differently");
    tap_ok(sr_data_window_of(d, 3, true, 1) != sr_data_window_of(d, 3, true, 2) ||
               sr_data_window_of(d, 4, true, 1) != sr_data_window_of(d, 4, true, 2),
           "the order depends on the seed");

    /* global cursor: a step of 4 sequences equals 4 micro-batches of 1 or 2 ranks x 2 */
    int whole_in[40], whole_tg[40], part_in[40], part_tg[40];
    sr_data_batch(d, 4 * 7, 4, true, 99, whole_in, whole_tg);
    for (int k = 0; k < 4; k++)
        sr_data_batch(d, 4 * 7 + k, 1, true, 99, part_in + 10 * k, part_tg + 10 * k);
    tap_ok(memcmp(whole_in, part_in, sizeof whole_in) == 0 && memcmp(whole_tg, part_tg, sizeof whole_tg) == 0,
           "the global cursor gives the same sequences however a step is split");
    free(seen);
    sr_data_close(d);

    /* embedded corpus */
    sr_data *tr = NULL, *va = NULL;
    tap_ok(sr_data_open_embedded(&tr, SR_DATA_TRAIN, 256, 256) == SR_OK &&
               sr_data_open_embedded(&va, SR_DATA_VAL, 256, 256) == SR_OK,
           "embedded corpus opens");
    tap_ok(tr && va && sr_data_tokens(tr) + sr_data_tokens(va) == sr_corpus_size && sr_corpus_size > 100000 &&
               llabs((long long)sr_data_tokens(va) * 9 - (long long)sr_data_tokens(tr)) < 100,
           "embedded corpus (%zu bytes) splits 90/10 into train and val", sr_corpus_size);
    sr_data_close(tr);
    sr_data_close(va);
    tap_ok(sr_data_open_embedded(&tr, SR_DATA_TRAIN, 256, 100) == SR_ERR_CONFIG,
           "embedded byte-level corpus needs vocab_size >= 256");

    unlink(p16);
    unlink(p32);
    rmdir(dir);
    return tap_done();
}
