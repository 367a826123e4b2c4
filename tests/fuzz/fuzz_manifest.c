/* fuzz_manifest.c — libFuzzer harness for checkpoint manifests.  The input
 * is a manifest without its last line; the harness appends the right
 * manifest_sha256 line, so the parser behind the self-checksum is what is
 * fuzzed, not SHA-256.  A manifest that parses is rendered again (with the
 * tensor table of its dims) and must parse back to the same files. */
#include "srconfig.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "model.h"
#include "ops.h"
#include "shardfile.h"
#include "shardplan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* text + "manifest_sha256: <hex>\n" (malloc'd). */
static char *sign(const char *text, size_t len, size_t *out_len) {
    char *out = malloc(len + 100);
    memcpy(out, text, len);
    unsigned char h[32];
    sr_sha256(text, len, h);
    char *p = out + len;
    p += sprintf(p, "manifest_sha256: ");
    for (int i = 0; i < 32; i++)
        p += sprintf(p, "%02x", h[i]);
    p += sprintf(p, "\n");
    *out_len = (size_t)(p - out);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len;
    char *text = sign((const char *)data, size, &len);
    sr_manifest mf;
    if (sr_manifest_parse(text, len, "fuzz/manifest.yaml", &mf) == SR_OK) {
        sr_model m;
        sr_shardplan pl;
        if (sr_model_init(&m, mf.dims, &sr_ops_cpu, NULL, 0, false) == SR_OK &&
            sr_shardplan_init(&pl, m.layer_offset, mf.dims.L, 1, mf.mesh_shard) == SR_OK) {
            char *again = NULL;
            size_t again_len = 0;
            if (sr_manifest_render(&mf, &m, &pl, &again, &again_len) == SR_OK) {
                sr_manifest back;
                if (sr_manifest_parse(again, again_len, "fuzz/again.yaml", &back) != SR_OK ||
                    back.nfiles != mf.nfiles || back.step != mf.step || back.total_bytes != mf.total_bytes)
                    __builtin_trap(); /* a rendered manifest must read back */
                sr_manifest_free(&back);
                free(again);
            }
            sr_shardplan_free(&pl);
        }
        sr_model_free(&m);
        sr_manifest_free(&mf);
    }
    free(text);
    return 0;
}
