/* test_manifest.c — checkpoint manifests as pure logic: a rendered manifest
 * parses back to every field it was made from (three uneven shards), a
 * version-1 manifest still parses (states f32), and every refusal of the
 * parser fires with its message — each mutation is re-signed with a fresh
 * manifest_sha256 line, so the parser behind the self-checksum is what is
 * tested, not SHA-256. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manifest.h"
#include "model.h"
#include "shardfile.h"
#include "shardplan.h"
#include "tap.h"

static sr_model model;
static sr_shardplan plan;
static const char *ckeys[] = {"train.lr", "checkpoint.dir", "data.train"};
static const char *cvals[] = {"0.0006", "\"ck\"", "[\"a.bin\", \"b.bin\"]"};

/* A manifest for 3 shards of the model, with recognisable digests. */
static void make(sr_manifest *mf) {
    *mf = (sr_manifest){.step = 12,
                        .cursor = 48,
                        .tokens = 3072,
                        .seed = 1337,
                        .lr = 6e-4,
                        .min_lr = 6e-5,
                        .next_lr = 5.5e-4,
                        .warmup_steps = 2,
                        .steps = 20,
                        .world = 6,
                        .mesh_shard = 3,
                        .mesh_replicate = 2,
                        .dims = model.d,
                        .n_params = model.n_params,
                        .chunk_bytes = SR_SHARD_CHUNK_BYTES,
                        .state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32},
                        .nconfig = 3,
                        .ckeys = (char **)ckeys,
                        .cvals = (char **)cvals};
    snprintf(mf->schedule, sizeof mf->schedule, "cosine");
    snprintf(mf->isa, sizeof mf->isa, "x86-64-v3");
    snprintf(mf->created, sizeof mf->created, "2026-11-30T12:00:00Z");
    snprintf(mf->job, sizeof mf->job, "4242");
    snprintf(mf->host, sizeof mf->host, "node7");
    sr_manifest_model_hash(&mf->dims, mf->model_hash);
    mf->nfiles = 3;
    mf->files = calloc(3, sizeof *mf->files);
    sr_slice sl[8];
    for (int i = 0; i < 3; i++) {
        sr_manifest_file *f = &mf->files[i];
        snprintf(f->name, sizeof f->name, "shard_%05d.bin", i);
        f->shard = i;
        f->nslices = sr_shardplan_slices(&plan, i, sl);
        f->slices = calloc((size_t)f->nslices, sizeof *f->slices);
        for (int q = 0; q < f->nslices; q++) {
            f->slices[q][0] = sl[q].begin;
            f->slices[q][1] = sl[q].end - sl[q].begin;
            f->elements += f->slices[q][1];
        }
        f->bytes = sr_manifest_file_bytes(mf, f->elements);
        f->nchunks = (f->bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
        f->sha = calloc(f->nchunks, 32);
        for (uint64_t c = 0; c < f->nchunks; c++)
            for (int b = 0; b < 32; b++)
                f->sha[c][b] = (unsigned char)(i * 31 + (int)c * 7 + b);
    }
}

static void unmake(sr_manifest *mf) {
    for (int i = 0; i < mf->nfiles; i++) {
        free(mf->files[i].slices);
        free(mf->files[i].sha);
    }
    free(mf->files);
}

/* Replaces the last line with the manifest_sha256 of everything before it. */
static char *resign(const char *text) {
    size_t len = strlen(text);
    const char *last = text + len - 1;
    while (last > text && last[-1] != '\n')
        last--;
    size_t body = (size_t)(last - text);
    char *out = malloc(body + 128);
    memcpy(out, text, body);
    unsigned char h[32];
    sr_sha256(text, body, h);
    char *p = out + body;
    p += sprintf(p, "manifest_sha256: ");
    for (int i = 0; i < 32; i++)
        p += sprintf(p, "%02x", h[i]);
    sprintf(p, "\n");
    return out;
}

/* text with the first `from` replaced by `to` (NULL when absent). */
static char *replace(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at)
        return NULL;
    size_t a = (size_t)(at - text), fl = strlen(from), tl = strlen(to), len = strlen(text);
    char *out = malloc(len - fl + tl + 1);
    memcpy(out, text, a);
    memcpy(out + a, to, tl);
    memcpy(out + a + tl, at + fl, len - a - fl + 1);
    return out;
}

static int files_equal(const sr_manifest *a, const sr_manifest *b) {
    if (a->nfiles != b->nfiles)
        return 0;
    for (int i = 0; i < a->nfiles; i++) {
        const sr_manifest_file *x = &a->files[i], *y = &b->files[i];
        if (strcmp(x->name, y->name) || x->shard != y->shard || x->bytes != y->bytes || x->elements != y->elements ||
            x->nchunks != y->nchunks || x->nslices != y->nslices ||
            memcmp(x->slices, y->slices, sizeof *x->slices * (size_t)x->nslices) ||
            memcmp(x->sha, y->sha, 32 * x->nchunks))
            return 0;
    }
    return 1;
}

static void test_round_trip(const char *text) {
    sr_manifest in, out;
    make(&in);
    sr_status st = sr_manifest_parse(text, strlen(text), "m.yaml", &out);
    if (!tap_ok(st == SR_OK, "a rendered manifest parses (%s)", st == SR_OK ? "ok" : sr_error_message())) {
        unmake(&in);
        return;
    }
    tap_ok(out.version == SR_MANIFEST_VERSION && out.step == in.step && out.cursor == in.cursor &&
               out.tokens == in.tokens && out.seed == in.seed,
           "version %d, step, cursor, tokens and seed survive", out.version);
    tap_ok(strcmp(out.schedule, "cosine") == 0 && out.lr == in.lr && out.min_lr == in.min_lr &&
               out.next_lr == in.next_lr && out.warmup_steps == 2 && out.steps == 20,
           "the LR schedule survives, doubles exactly");
    tap_ok(out.world == 6 && out.mesh_shard == 3 && out.mesh_replicate == 2 && strcmp(out.isa, "x86-64-v3") == 0,
           "world size, mesh and ISA level survive");
    tap_ok(sr_model_dims_same(&out.dims, &in.dims) && out.dims.Vp == in.dims.Vp && out.n_params == in.n_params &&
               strcmp(out.model_hash, in.model_hash) == 0 && out.dims.arch == SR_ARCH_GPT2,
           "model family, dims, parameter count and hash survive");
    tap_ok(strcmp(out.created, in.created) == 0 && strcmp(out.job, "4242") == 0 && strcmp(out.host, "node7") == 0,
           "created, job and host survive");
    int cfg_ok = out.nconfig == 3;
    for (int i = 0; cfg_ok && i < 3; i++)
        cfg_ok = strcmp(out.ckeys[i], ckeys[i]) == 0 && strcmp(out.cvals[i], cvals[i]) == 0;
    tap_ok(cfg_ok, "the job's key = value list survives, quotes and lists included");
    tap_ok(out.state_dtype[0] == SR_DT_F32 && out.state_dtype[1] == SR_DT_F32 && out.state_dtype[2] == SR_DT_F32,
           "each state's dtype survives");
    tap_ok(files_equal(&in, &out), "three uneven shard files: names, sizes, slices and digests survive");
    uint64_t total = 0;
    for (int i = 0; i < in.nfiles; i++)
        total += in.files[i].bytes;
    tap_ok(out.total_bytes == total, "total bytes are the sum of the files (%llu)", (unsigned long long)total);
    sr_manifest_free(&out);
    unmake(&in);
}

/* A mutation of the rendered text, re-signed, must be refused (65) with
 * `want` in the message. */
static void refused(const char *text, const char *from, const char *to, const char *want, const char *what) {
    char *m = replace(text, from, to);
    if (!m) {
        tap_ok(0, "%s: the rendered manifest has no '%s' to change", what, from);
        return;
    }
    char *s = resign(m);
    sr_manifest out;
    sr_status st = sr_manifest_parse(s, strlen(s), "m.yaml", &out);
    tap_ok(st == SR_ERR_DATA && strstr(sr_error_message(), want) && strstr(sr_error_message(), "m.yaml:"),
           "%s is refused: %s", what, st == SR_OK ? "(accepted)" : sr_error_message());
    if (st == SR_OK)
        sr_manifest_free(&out);
    free(m);
    free(s);
}

static void test_refusals(const char *text) {
    sr_manifest out;
    /* the self-checksum itself */
    size_t len = strlen(text);
    char *cut = strdup(text);
    cut[len - 10] = '\0';
    sr_status st = sr_manifest_parse(cut, strlen(cut), "m.yaml", &out);
    tap_ok(st == SR_ERR_DATA && strstr(sr_error_message(), "last line is not"), "a truncated manifest is refused: %s",
           sr_error_message());
    free(cut);
    char *flip = replace(text, "step: 12", "step: 13");
    st = sr_manifest_parse(flip, strlen(flip), "m.yaml", &out);
    tap_ok(st == SR_ERR_DATA && strstr(sr_error_message(), "does not match its manifest_sha256"),
           "an edited manifest without a new checksum is refused: %s", sr_error_message());
    free(flip);
    /* behind the checksum */
    refused(text, "format: shardrun-checkpoint", "format: other", "format: expected", "another format");
    refused(text, "version: 4", "version: 5", "version 5 is not supported", "a newer version");
    refused(text, "version: 4", "version: 0", "not supported", "version 0");
    refused(text, "arch: gpt2", "arch: mamba", "arch 'mamba' is not a family", "an unknown family");
    refused(text, "step: 12", "step: -1", "expected an integer", "a negative step");
    refused(text, "step: 12", "stop: 12", "expected key 'step'", "a missing step");
    refused(text, "n_layer: 2", "n_layer: 3", "hash or parameter count", "dims that do not match the hash");
    refused(text, "parameters:", "parameters: 1\n  x:", "hash or parameter count", "a wrong parameter count");
    refused(text, "name: shard_00001.bin", "name: ../shard_00001.bin", "not a shard file name",
            "a path in a file name");
    refused(text, "name: shard_00001.bin", "name: shard_00000.bin", "listed twice", "a file listed twice");
    refused(text, "shard: 1\n", "shard: x\n", "expected an integer", "a shard index that is not a number");
    refused(text, "shard: 1\n", "shard: 0\n", "shard index 0 is out of range or repeated", "a repeated shard index");
    refused(text, "shard: 1\n", "shard: 3\n", "shard index 3 is out of range or repeated",
            "a shard index out of range");
    refused(text, "  bytes: ", "  bytes: 1", "disagree with elements", "bytes disagreeing with elements");
    refused(text, "{params: 64,", "{params: 65,", "disagrees with the layout", "a section at the wrong offset");
    refused(text, "slices: [[", "slices: [[9999999999, 5], [", "lies outside", "a slice outside the parameters");
    refused(text, "slices: [[0,", "slices: [[1,", "do not cover", "slices that do not tile the parameters");
    refused(text, "slices: [[", "slices: [[0, 1], [", "slices hold", "slices that disagree with elements");
    refused(text, "slices: [[", "slices: [[x, 1], [", "two integers", "a slice that is not two integers");
    refused(text, "sha256:\n  - ", "sha256:\n  - 00\n  - ", "chunk checksums", "one digest too many");
    refused(text, "sha256:\n  - ", "sha256:\n  - ZZ", "64 lowercase hex digits", "a digest that is not hex");
    refused(text, "chunk_bytes: 4194304", "chunk_bytes: 1048576", "chunk_bytes: expected", "another chunk size");
    refused(text, "{name: adam_m, dtype: f32}", "{name: adam_m, dtype: bf16}", "dtype bf16 is not one",
            "a state dtype this version cannot load");
    refused(text, "{name: adam_m, dtype: f32}", "{name: adam_x, dtype: f32}", "expected 'adam_m'",
            "states out of order");
    refused(text, "files:\n", "files: []\nfilez:\n", "expected key 'files'", "no shard files");
    refused(text, "format: shardrun-checkpoint", "format: [shardrun", "YAML syntax error", "YAML that does not parse");
}

/* A version-1 manifest: the state list is bare names, no ISA level, no
 * family. */
static void test_version1(const char *text) {
    char *a0 = replace(text, "version: 4", "version: 1");
    char *a = a0 ? replace(a0, "  arch: gpt2\n", "") : NULL;
    free(a0);
    char *b =
        a ? replace(a,
                    "state:\n- {name: params, dtype: f32}\n- {name: adam_m, dtype: f32}\n- {name: adam_v, dtype: f32}",
                    "state: [params, adam_m, adam_v]")
          : NULL;
    char *c = b ? replace(b, "  isa: x86-64-v3\n", "") : NULL;
    if (!tap_ok(c != NULL, "a version-1 manifest can be made from the rendering")) {
        free(a);
        free(b);
        return;
    }
    char *s = resign(c);
    sr_manifest out;
    sr_status st = sr_manifest_parse(s, strlen(s), "v1.yaml", &out);
    tap_ok(st == SR_OK && out.version == 1 && out.state_dtype[1] == SR_DT_F32 && out.isa[0] == '\0',
           "a version-1 manifest parses, states f32, no ISA level (%s)", st == SR_OK ? "ok" : sr_error_message());
    if (st == SR_OK)
        sr_manifest_free(&out);
    free(a);
    free(b);
    free(c);
    free(s);
}

int main(void) {
    sr_model_dims d = {.L = 2, .NH = 2, .C = 16, .V = 37, .T = 8};
    if (sr_model_init(&model, d, &sr_ops_cpu, NULL, 0, false) != SR_OK ||
        sr_shardplan_init(&plan, model.layer_offset, d.L, 1, 3) != SR_OK) {
        tap_ok(0, "model and plan");
        return tap_done();
    }
    sr_manifest mf;
    make(&mf);
    char *text = NULL;
    size_t len = 0;
    sr_status st = sr_manifest_render(&mf, &model, &plan, &text, &len);
    unmake(&mf);
    if (tap_ok(st == SR_OK && len == strlen(text), "a manifest renders")) {
        tap_ok(strstr(text, "tensors:") &&
                   strstr(text, "{name: h.1.mlp.c_fc.weight, shape: [64, 16], dtype: f32, unit: 1"),
               "the tensor table is rendered with each tensor's unit");
        test_round_trip(text);
        test_refusals(text);
        test_version1(text);
    }
    free(text);
    sr_shardplan_free(&plan);
    sr_model_free(&model);
    return tap_done();
}
