/* bench_manifest.c — a checkpoint manifest of many ranks (bench/scale.sh):
 * for each shard count S given, a manifest of S shard files (every shard's
 * slices and chunk digests, as a save of an S-rank run writes it) is
 * rendered and written with fsync (what rank 0 does at a commit), then
 * loaded: read, self-checksum verified, parsed and validated (what every
 * rank does at a resume).  Median and spread of ROUNDS rounds; the growth
 * per doubling of S (2.0 = linear) of its size and both times.
 *
 * usage: bench_manifest S... ; prints a table. */
#include "srconfig.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/clock.h"
#include "../src/fsio.h"
#include "../src/manifest.h"
#include "../src/model.h"
#include "../src/ops.h"
#include "../src/shardfile.h"
#include "../src/shardplan.h"

#define ROUNDS 5

static double now_s(void) { return sr_clock_mono_s(); }

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The manifest an S-shard save of `model` writes (digests made up: the
 * loader checks the manifest's own checksum, not the shard files). */
static int make(sr_manifest *mf, const sr_model *model, const sr_shardplan *plan, int S) {
    *mf = (sr_manifest){.step = 1000,
                        .world = S,
                        .mesh_shard = S,
                        .mesh_replicate = 1,
                        .dims = model->d,
                        .n_params = model->n_params,
                        .chunk_bytes = SR_SHARD_CHUNK_BYTES,
                        .state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32},
                        .lr = 6e-4,
                        .steps = 100000};
    snprintf(mf->schedule, sizeof mf->schedule, "cosine");
    snprintf(mf->created, sizeof mf->created, "2026-12-04T00:00:00Z");
    snprintf(mf->job, sizeof mf->job, "bench");
    snprintf(mf->host, sizeof mf->host, "bench");
    sr_manifest_model_hash(&mf->dims, mf->model_hash);
    mf->nfiles = S;
    mf->files = calloc((size_t)S, sizeof *mf->files);
    if (!mf->files)
        return -1;
    sr_slice sl[64];
    for (int i = 0; i < S; i++) {
        sr_manifest_file *f = &mf->files[i];
        snprintf(f->name, sizeof f->name, "shard_%05d.bin", i);
        f->shard = i;
        f->nslices = sr_shardplan_slices(plan, i, sl);
        f->slices = calloc((size_t)f->nslices + 1, sizeof *f->slices);
        for (int q = 0; q < f->nslices; q++) {
            f->slices[q][0] = sl[q].begin;
            f->slices[q][1] = sl[q].end - sl[q].begin;
            f->elements += f->slices[q][1];
        }
        f->bytes = sr_manifest_file_bytes(mf, f->elements);
        f->nchunks = (f->bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
        f->sha = calloc(f->nchunks ? f->nchunks : 1, 32);
        if (!f->slices || !f->sha)
            return -1;
        for (uint64_t c = 0; c < f->nchunks; c++)
            for (int b = 0; b < 32; b++)
                f->sha[c][b] = (unsigned char)(i * 31 + (int)c * 7 + b);
    }
    return 0;
}

static void unmake(sr_manifest *mf) {
    for (int i = 0; i < mf->nfiles; i++) {
        free(mf->files[i].slices);
        free(mf->files[i].sha);
    }
    free(mf->files);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_manifest S...\n");
        return 64;
    }
    char dir[] = "/tmp/shardrun-manifest-bench.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench_manifest: mkdtemp");
        return 73;
    }
    /* a 12-layer model of width 256: every shard holds a slice of each unit */
    sr_model_dims d = {.L = 12, .NH = 4, .C = 256, .V = 256, .T = 64};
    sr_model model;
    if (sr_model_init(&model, d, &sr_ops_cpu, NULL, 0, false) != SR_OK) {
        fprintf(stderr, "bench_manifest: %s\n", sr_error_message());
        return 70;
    }
    printf("manifest of S ranks' shard records (a %.1fM-parameter model, 1 block per unit); median of %d rounds "
           "[min, max]; growth = this row / the row at half S\n",
           (double)model.n_params / 1e6, ROUNDS);
    printf("%6s %16s %28s %28s\n", "S", "bytes", "render+write+fsync ms", "load+verify+parse ms");
    double last[3] = {0, 0, 0};
    int last_s = 0, rc = 0;
    for (int a = 1; a < argc && rc == 0; a++) {
        int S = atoi(argv[a]);
        sr_shardplan plan = {0};
        sr_manifest mf;
        if (S < 1 || sr_shardplan_init(&plan, model.layer_offset, d.L, 1, S) != SR_OK || make(&mf, &model, &plan, S)) {
            fprintf(stderr, "bench_manifest: S=%s: %s\n", argv[a], sr_error_message());
            rc = 70;
            break;
        }
        double tw[ROUNDS], tl[ROUNDS];
        size_t len = 0;
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, SR_MANIFEST_NAME);
        for (int r = 0; r < ROUNDS && rc == 0; r++) {
            double t0 = now_s();
            char *text = NULL;
            int fd = -1;
            if (sr_manifest_render(&mf, &model, &plan, &text, &len) != SR_OK ||
                (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0 || sr_fsio_write_all(fd, text, len) != 0 ||
                fsync(fd) != 0)
                rc = 74;
            if (fd >= 0)
                close(fd);
            free(text);
            double t1 = now_s();
            int dfd = open(dir, O_RDONLY | O_DIRECTORY);
            sr_manifest got;
            if (rc == 0 && (dfd < 0 || sr_manifest_load(dfd, dir, &got) != SR_OK)) {
                fprintf(stderr, "bench_manifest: S=%d: %s\n", S, sr_error_message());
                rc = 65;
            } else if (rc == 0) {
                if (got.nfiles != S)
                    rc = 65;
                sr_manifest_free(&got);
            }
            if (dfd >= 0)
                close(dfd);
            tw[r] = (t1 - t0) * 1e3;
            tl[r] = (now_s() - t1) * 1e3;
        }
        unmake(&mf);
        sr_shardplan_free(&plan);
        if (rc)
            break;
        qsort(tw, ROUNDS, sizeof tw[0], cmp);
        qsort(tl, ROUNDS, sizeof tl[0], cmp);
        double cur[3] = {(double)len, tw[ROUNDS / 2], tl[ROUNDS / 2]};
        char g[3][24] = {"", "", ""};
        for (int k = 0; k < 3 && last_s && S == 2 * last_s; k++)
            snprintf(g[k], sizeof g[k], " (x%.2f)", cur[k] / last[k]);
        char b0[48], b1[64], b2[64];
        snprintf(b0, sizeof b0, "%zu%s", len, g[0]);
        snprintf(b1, sizeof b1, "%.1f [%.1f, %.1f]%s", tw[ROUNDS / 2], tw[0], tw[ROUNDS - 1], g[1]);
        snprintf(b2, sizeof b2, "%.1f [%.1f, %.1f]%s", tl[ROUNDS / 2], tl[0], tl[ROUNDS - 1], g[2]);
        printf("%6d %16s %28s %28s\n", S, b0, b1, b2);
        memcpy(last, cur, sizeof last);
        last_s = S;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, SR_MANIFEST_NAME);
    unlink(path);
    rmdir(dir);
    sr_model_free(&model);
    return rc;
}
