/* fuzz_config.c — libFuzzer harness for the job file: the input is YAML,
 * then (after a NUL) --set assignments separated by NULs, then a byte that
 * picks the number of ranks for the world-size rules.  Everything the
 * program does with a job before training: parse, overrides, finalize,
 * not-landed check, world-size rules, `config show`. */
#include "srconfig.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t ylen = strlen(text);
    sr_config cfg;
    sr_status st = sr_config_init(&cfg);
    if (st == SR_OK)
        st = sr_config_load_text(&cfg, text, ylen, "fuzz.yaml");
    size_t at = ylen + 1;
    int ranks = 1;
    while (st == SR_OK && at < size) {
        const char *set = text + at;
        size_t n = strlen(set);
        if (at + n >= size) { /* the last field: a byte for the rank count */
            ranks = 1 + (unsigned char)set[0] % 16;
            break;
        }
        st = sr_config_set(&cfg, set);
        at += n + 1;
    }
    if (st == SR_OK)
        st = sr_config_finalize(&cfg);
    if (st == SR_OK)
        st = sr_job_check_world(&cfg, ranks, ranks - 1, NULL);
    if (st == SR_OK)
        sr_config_show(&cfg, devnull, NULL);
    sr_config_free(&cfg);
    free(text);
    return 0;
}
