/* fuzz_task.c — libFuzzer harness for the evaluation task file
 * (evaltask.h, `shardrun eval --task`, train.eval_tasks): the input is a
 * task file whose first byte, taken off, picks the model's context (1 to
 * 64 positions).  What the program does with one: read and check it
 * (sr_task_read), encode it as bytes for that context, fill every batch,
 * take made-up losses back, count and write the scores. */
#include "srconfig.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaltask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    if (size < 1)
        return 0;
    int T = 1 + data[0] % 64;
    FILE *f = fmemopen((void *)(data + 1), size - 1 ? size - 1 : 1, "rb");
    if (!f)
        return 0;
    if (size == 1) /* (fmemopen needs a size: an empty file) */
        fseek(f, 0, SEEK_END);
    sr_task t;
    sr_status st = sr_task_read(&t, "fuzz.jsonl", f);
    fclose(f);
    sr_task_enc e;
    if (st == SR_OK && sr_task_encode(&t, NULL, 256, T, &e) == SR_OK) {
        enum { B = 4 };
        int *in = malloc(sizeof(int) * B * (size_t)T), *tg = malloc(sizeof(int) * B * (size_t)T);
        float *loss = malloc(sizeof(float) * B * (size_t)T);
        double *lp = calloc((size_t)e.nseq + 1, sizeof(double));
        for (int i = 0; i < B * T; i++)
            loss[i] = (float)(i % 7) * 0.25f;
        for (int s = 0; s < e.nseq; s += B) {
            int n = e.nseq - s < B ? e.nseq - s : B;
            sr_task_fill(&e, s, n, in, tg);
            sr_task_take(&e, s, n, loss, lp);
        }
        double c[2] = {0, 0};
        sr_task_count(&t, &e, lp, 0, t.n, c);
        sr_task_write(devnull, &t, &e, lp, true);
        sr_task_write(devnull, &t, &e, lp, false);
        free(in);
        free(tg);
        free(loss);
        free(lp);
        sr_task_enc_free(&e);
    }
    sr_task_free(&t);
    return 0;
}
