/* fuzz_safetensors.c — libFuzzer harness for the safetensors header (the
 * input is a whole file image: header length, JSON, data).  A header that
 * parses must satisfy what the importer relies on: every tensor's bytes
 * inside the data area and its size its shape times its dtype; rendering
 * the parsed tensors' names, dtypes and shapes again must parse back to
 * the same table. */
#include "srconfig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sr_st_header h;
    if (sr_st_parse_image(data, size, "fuzz", &h) != SR_OK)
        return 0;
    sr_st_entry *e = calloc((size_t)h.ntensors + 1, sizeof *e);
    uint64_t total = 0;
    for (int i = 0; i < h.ntensors; i++) {
        const sr_st_tensor *t = &h.t[i];
        if (t->end > h.data_len || t->end - t->begin != t->numel * sr_st_dtype_size(t->dtype))
            abort();
        total += t->end - t->begin;
        e[i].name = t->name;
        e[i].dtype = t->dtype;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
    }
    if (total != h.data_len)
        abort(); /* the tensors tile the data */
    char *hdr;
    size_t len;
    if (sr_st_render_header(e, h.ntensors, &hdr, &len) == SR_OK) {
        unsigned char *img = calloc(1, len + total + 1);
        memcpy(img, hdr, len);
        sr_st_header back;
        if (sr_st_parse_image(img, len + total, "again", &back) != SR_OK || back.ntensors != h.ntensors)
            abort();
        for (int i = 0; i < h.ntensors; i++) {
            const sr_st_tensor *a = sr_st_find(&back, h.t[i].name);
            if (!a || a->dtype != h.t[i].dtype || a->numel != h.t[i].numel || a->ndim != h.t[i].ndim)
                abort();
        }
        sr_st_free(&back);
        free(img);
        free(hdr);
    }
    free(e);
    sr_st_free(&h);
    return 0;
}
