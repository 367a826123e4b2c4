/* tok_probe.c — the tokenizer module seen from outside, for the reference
 * checks (tests/tok/ref.py): `tok_probe TOKENIZER FILE...` encodes each
 * FILE's bytes as ordinary text and prints one line per file: its ids,
 * space-separated; `--roundtrip` instead prints, per file, "ok" when
 * decoding the ids gives back the file's bytes exactly, else the first
 * differing offset.  Status 0, or the tokenizer's load status. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16;
    unsigned char *b = malloc(cap);
    *n = 0;
    size_t got;
    while (b && (got = fread(b + *n, 1, cap - *n, f)) > 0) {
        *n += got;
        if (*n == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv) {
    bool roundtrip = argc > 1 && strcmp(argv[1], "--roundtrip") == 0;
    int a = roundtrip ? 2 : 1;
    if (argc - a < 2) {
        fprintf(stderr, "usage: tok_probe [--roundtrip] TOKENIZER FILE...\n");
        return 64;
    }
    sr_tokenizer *t;
    sr_status st = sr_tokenizer_load(&t, argv[a], "tok_probe");
    if (st != SR_OK) {
        fprintf(stderr, "tok_probe: %s\n", sr_error_message());
        return sr_status_exit_code(st);
    }
    sr_tok_encoder *e;
    if ((st = sr_tok_encoder_new(t, &e)) != SR_OK) {
        fprintf(stderr, "tok_probe: %s\n", sr_error_message());
        return sr_status_exit_code(st);
    }
    for (int i = a + 1; i < argc; i++) {
        size_t n;
        unsigned char *b = slurp(argv[i], &n);
        if (!b) {
            fprintf(stderr, "tok_probe: cannot read %s\n", argv[i]);
            return 66;
        }
        sr_tok_ids ids = {0};
        if ((st = sr_tok_encode(e, b, n, &ids)) != SR_OK) {
            fprintf(stderr, "tok_probe: %s\n", sr_error_message());
            return sr_status_exit_code(st);
        }
        if (roundtrip) {
            size_t at = 0;
            bool same = true;
            for (size_t k = 0; k < ids.n && same; k++) {
                size_t len;
                const unsigned char *p = sr_tokenizer_bytes(t, ids.ids[k], &len);
                same = p && at + len <= n && memcmp(p, b + at, len) == 0;
                at += same ? len : 0;
            }
            if (same && at == n)
                printf("ok %zu bytes %zu ids\n", n, ids.n);
            else
                printf("differs at byte %zu\n", at);
        } else {
            for (size_t k = 0; k < ids.n; k++)
                printf(k ? " %u" : "%u", ids.ids[k]);
            putchar('\n');
        }
        sr_tok_ids_free(&ids);
        free(b);
    }
    sr_tok_encoder_free(e);
    sr_tokenizer_free(t);
    return 0;
}
