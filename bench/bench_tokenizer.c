/* bench_tokenizer.c — encoding throughput of the tokenizer module
 * (bench/run_tokenizer.sh runs it against tiktoken): `bench_tokenizer
 * TOKENIZER FILE THREADS` encodes the documents of FILE (separated by the
 * byte 0x1e) as ordinary text, each thread its own encoder taking the next
 * document, and prints "mbps=M ids=N sum=S": megabytes of text per second
 * over the whole encode (load and encoder set-up excluded), the number of
 * ids and their sum (the runner compares them with tiktoken's). */
#include "srconfig.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "tokenizer.h"

typedef struct {
    const unsigned char *p;
    size_t n;
} doc;

typedef struct {
    const doc *docs;
    size_t ndocs;
    atomic_size_t *next;
    sr_tok_encoder *e;
    sr_tok_ids ids;
    unsigned long long count, sum;
    int failed;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    for (;;) {
        size_t i = atomic_fetch_add(w->next, 1);
        if (i >= w->ndocs)
            break;
        w->ids.n = 0;
        if (sr_tok_encode(w->e, w->docs[i].p, w->docs[i].n, &w->ids) != SR_OK) {
            w->failed = 1;
            break;
        }
        w->count += w->ids.n;
        for (size_t k = 0; k < w->ids.n; k++)
            w->sum += w->ids.ids[k];
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER FILE THREADS\n");
        return 64;
    }
    int nt = atoi(argv[3]);
    if (nt < 1 || nt > 256)
        return 64;
    sr_tokenizer *t;
    if (sr_tokenizer_load(&t, argv[1], "bench_tokenizer") != SR_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", sr_error_message());
        return 65;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        return 66;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len)
        return 66;
    fclose(f);
    size_t cap = 1024, nd = 0;
    doc *docs = malloc(cap * sizeof *docs);
    for (size_t at = 0; at < (size_t)len;) {
        unsigned char *sep = memchr(text + at, 0x1e, (size_t)len - at);
        size_t end = sep ? (size_t)(sep - text) : (size_t)len;
        if (nd == cap)
            docs = realloc(docs, (cap *= 2) * sizeof *docs);
        docs[nd++] = (doc){text + at, end - at};
        at = end + 1;
    }
    atomic_size_t next = 0;
    worker *ws = calloc((size_t)nt, sizeof *ws);
    for (int k = 0; k < nt; k++) {
        ws[k] = (worker){.docs = docs, .ndocs = nd, .next = &next};
        if (sr_tok_encoder_new(t, &ws[k].e) != SR_OK)
            return 70;
    }
    double t0 = sr_clock_mono_s();
    pthread_t th[256];
    for (int k = 1; k < nt; k++)
        pthread_create(&th[k], NULL, run, &ws[k]);
    run(&ws[0]);
    for (int k = 1; k < nt; k++)
        pthread_join(th[k], NULL);
    double dt = sr_clock_mono_s() - t0;
    unsigned long long count = 0, sum = 0;
    for (int k = 0; k < nt; k++) {
        if (ws[k].failed)
            return 70;
        count += ws[k].count;
        sum += ws[k].sum;
        sr_tok_ids_free(&ws[k].ids);
        sr_tok_encoder_free(ws[k].e);
    }
    printf("mbps=%.3f ids=%llu sum=%llu\n", (double)len / 1e6 / dt, count, sum);
    free(ws);
    free(docs);
    free(text);
    sr_tokenizer_free(t);
    return 0;
}
