/* test_safetensors.c — the safetensors header and the importer's
 * conversions: a rendered header parses back (names, dtypes, shapes,
 * packed offsets, the header padded with spaces to a multiple of 8,
 * format "pt"); each refusal of the spec (overlap, hole, trailing bytes,
 * wrong byte count, unknown dtype, duplicate key, bad JSON, a header past
 * the end or over the limit) is SR_ERR_DATA; f16 -> f32 is exact for all
 * 65536 half values against ldexp. */
#include "srconfig.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelfile.h"
#include "safetensors.h"
#include "tap.h"

/* An image: 8-byte length, text (padded to 8 with spaces), `data` zero bytes. */
static unsigned char *image(const char *text, size_t data, size_t *size) {
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    unsigned char *img = calloc(1, 8 + padded + data);
    for (int i = 0; i < 8; i++)
        img[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(img + 8, text, n);
    memset(img + 8 + n, ' ', padded - n);
    *size = 8 + padded + data;
    return img;
}

static sr_status parse_text(const char *text, size_t data) {
    size_t size;
    unsigned char *img = image(text, data, &size);
    sr_st_header h;
    sr_status st = sr_st_parse_image(img, size, "t", &h);
    if (st == SR_OK)
        sr_st_free(&h);
    free(img);
    return st;
}

static float ref_half(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

int main(void) {
    /* render -> parse */
    sr_st_entry e[3] = {
        {"transformer.wte.weight", SR_ST_F32, 2, {5, 3}}, {"b", SR_ST_BF16, 1, {7}}, {"scalar", SR_ST_F16, 0, {0}}};
    char *hdr;
    size_t len;
    tap_ok(sr_st_render_header(e, 3, &hdr, &len) == SR_OK, "a header renders");
    tap_ok(len % 8 == 0 && (hdr[len - 1] == ' ' || hdr[len - 1] == '}'), "the data area starts at a multiple of 8");
    size_t data = 5 * 3 * 4 + 7 * 2 + 2;
    unsigned char *img = calloc(1, len + data);
    memcpy(img, hdr, len);
    sr_st_header h;
    sr_status st = sr_st_parse_image(img, len + data, "rendered", &h);
    tap_ok(st == SR_OK, "it parses back: %s", st == SR_OK ? "" : sr_error_message());
    if (st == SR_OK) {
        const sr_st_tensor *w = sr_st_find(&h, "transformer.wte.weight"), *b = sr_st_find(&h, "b"),
                           *s = sr_st_find(&h, "scalar");
        tap_ok(h.ntensors == 3 && w && b && s && strcmp(h.format, "pt") == 0, "three tensors, format pt");
        tap_ok(w && w->ndim == 2 && w->shape[0] == 5 && w->shape[1] == 3 && w->begin == 0 && w->end == 60 &&
                   w->dtype == SR_ST_F32,
               "wte: F32 [5, 3] at 0..60");
        tap_ok(b && b->begin == 60 && b->end == 74 && b->dtype == SR_ST_BF16, "b: BF16 [7] at 60..74 (packed)");
        tap_ok(s && s->ndim == 0 && s->numel == 1 && s->begin == 74 && s->end == 76, "a scalar: one element");
        tap_ok(h.data_start == len, "the data starts right after the header");
        sr_st_free(&h);
    }
    free(img);
    free(hdr);

    /* refusals */
    const struct {
        const char *text;
        size_t data;
        const char *why;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[4,12]}}",
         12, "overlapping tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "a hole before the first tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "bytes after the last tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "a byte count not shape x dtype"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "an unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
         "\"data_offsets\":[0,8]}}",
         8, "a duplicate key"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "offsets past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "a negative dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin after end"},
        {"{\"a\":[1,2]}", 0, "a tensor that is not an object"},
        {"{\"__metadata__\":{\"format\":7}}", 0, "metadata that is not strings"},
        {"[1,2,3]", 0, "a header that is not an object"},
        {"{\"a\":", 0, "JSON cut short"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        tap_ok(parse_text(bad[i].text, bad[i].data) == SR_ERR_DATA, "refused (65): %s", bad[i].why);
    tap_ok(parse_text("{}", 0) == SR_OK, "an empty header with no data is a valid (empty) file");
    unsigned char shortimg[12] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    tap_ok(sr_st_parse_image(shortimg, sizeof shortimg, "t", &h) == SR_ERR_DATA, "a header length past the end");
    unsigned char huge[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}; /* 100000001 */
    tap_ok(sr_st_parse_image(huge, sizeof huge, "t", &h) == SR_ERR_DATA &&
               strstr(sr_error_message(), "at most 100000000"),
           "a header length over 100,000,000");
    tap_ok(sr_st_parse_image(huge, 5, "t", &h) == SR_ERR_DATA, "a file shorter than the length field");

    /* f16 -> f32, every value */
    int wrong = 0;
    for (uint32_t x = 0; x < 65536; x++) {
        float a = sr_f16_to_f32((uint16_t)x), b = ref_half((uint16_t)x);
        if (!(a == b || (isnan(a) && isnan(b))) || signbit(a) != signbit(b))
            wrong++;
    }
    tap_ok(wrong == 0, "f16 -> f32 exact for all 65536 values (%d wrong)", wrong);
    return tap_done();
}
