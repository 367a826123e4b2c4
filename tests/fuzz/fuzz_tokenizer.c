/* fuzz_tokenizer.c — libFuzzer harness for the tokenizers (tokenizer.h).
 * The first byte chooses: even, the rest is a tokenizer file
 * (tokenizer.json, a tiktoken rank file, llm.c's file; bit 1 names the
 * llama3 pattern for a rank file) — a file that loads must encode a fixed
 * text to ids inside its vocabulary that decode to that text; odd, the rest
 * is text encoded by a fixed small rank file (every byte, and merges of
 * frequent pairs) — the ids must decode to exactly the input's bytes, valid
 * UTF-8 or not (decode(encode(x)) == x). */
#include "srconfig.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ids decode to text[0 .. n) exactly. */
static void check_roundtrip(const sr_tokenizer *t, const unsigned char *text, size_t n) {
    sr_tok_encoder *e;
    if (sr_tok_encoder_new(t, &e) != SR_OK)
        abort();
    sr_tok_ids ids = {0};
    if (sr_tok_encode(e, text, n, &ids) != SR_OK)
        abort();
    size_t at = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t len;
        const unsigned char *b = sr_tokenizer_bytes(t, ids.ids[i], &len);
        if (!b || ids.ids[i] >= sr_tokenizer_vocab(t) || at + len > n || memcmp(b, text + at, len) != 0)
            abort();
        at += len;
    }
    if (at != n)
        abort();
    sr_tok_ids_free(&ids);
    sr_tok_encoder_free(e);
}

/* The fixed rank file: the 256 bytes, then "th", "he", "in", " t", ... */
static sr_tokenizer *fixed(void) {
    static sr_tokenizer *t;
    if (t)
        return t;
    const char *merges[] = {"th", "he", "in", " t", "er", "an", " the", "  ", "    ", "é", "ab", "abab", "aa", "aaaa"};
    size_t cap = 64 * 300, n = 0;
    char *text = malloc(cap);
    int rank = 0;
    unsigned char b64[64];
    for (int b = 0; b < 256; b++) {
        unsigned char one = (unsigned char)b;
        EVP_EncodeBlock(b64, &one, 1);
        n += (size_t)snprintf(text + n, cap - n, "%s %d\n", b64, rank++);
    }
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++) {
        EVP_EncodeBlock(b64, (const unsigned char *)merges[i], (int)strlen(merges[i]));
        n += (size_t)snprintf(text + n, cap - n, "%s %d\n", b64, rank++);
    }
    if (sr_tokenizer_parse(&t, text, n, "fixed", "gpt2") != SR_OK)
        abort();
    free(text);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        check_roundtrip(fixed(), data + 1, size - 1);
        return 0;
    }
    sr_tokenizer *t;
    if (sr_tokenizer_parse(&t, data + 1, size - 1, "fuzz", data[0] & 2 ? "llama3" : "gpt2") != SR_OK)
        return 0;
    if (sr_tokenizer_can_encode(t)) {
        static const char text[] = "Hello, world! It's 2026: 12345 \xe4\xbd\xa0\xe5\xa5\xbd  \n\n\xff tabs\there";
        check_roundtrip(t, (const unsigned char *)text, sizeof text - 1);
    }
    sr_tokenizer_free(t);
    return 0;
}
