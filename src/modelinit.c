/* modelinit.c — model.init: pretrained weights read into the engine's
 * shards on a fresh run, every rank its own slices, after the ranks have
 * checked that they see the same file; see modelinit.h. */
#include "srconfig.h"

#include "modelinit.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "line.h"
#include "mem.h"
#include "modelfile.h"

/* One rank's view of model.init, for the ranks to compare. */
typedef struct {
    uint64_t size;
    unsigned char fp[32];
    int32_t opened;
    char host[60];
} init_view;

/* Whether every rank that opened model.init opened the same file (size
 * and fingerprint, one all-gather, every rank calls it: a rank that failed
 * to open contributes nothing to compare).  SR_ERR_CONFIG naming the ranks
 * and hosts whose file differs from the lowest opened rank's. */
static sr_status same_init_file(const sr_world *w, sr_ctl *ctl, const char *path, const sr_modelfile *mf) {
    init_view me = {0};
    sr_status st = mf->fd >= 0 ? sr_modelfile_fingerprint(mf, me.fp) : SR_OK;
    me.opened = mf->fd >= 0 && st == SR_OK;
    me.size = mf->size;
    snprintf(me.host, sizeof me.host, "%.59s", w->host);
    init_view *all = sr_calloc((size_t)w->size, sizeof *all);
    sr_status gs = all ? sr_ctl_allgather(ctl, all, &me, sizeof me) : sr_error_oom("the model.init comparison");
    if (gs != SR_OK) {
        free(all);
        return gs;
    }
    int ref = 0;
    while (ref < w->size && !all[ref].opened)
        ref++;
    char list[768];
    sr_line l = SR_LINE(list);
    int differ = 0;
    for (int k = ref + 1; k < w->size; k++)
        if (all[k].opened && (all[k].size != all[ref].size || memcmp(all[k].fp, all[ref].fp, 32) != 0)) {
            if (++differ <= 8)
                sr_line_add(&l, "%srank %d on %.60s (%llu bytes)", differ > 1 ? ", " : "", k, all[k].host,
                            (unsigned long long)all[k].size);
        }
    if (differ)
        st = sr_error(SR_ERR_CONFIG,
                      "model.init: %s is not the same file on every rank: %s%s differ%s from rank %d on %.60s (%llu "
                      "bytes; compared: size, header, first and last MiB) (hint: a stale node-local copy? give "
                      "every node the same file)",
                      path, list, differ > 8 ? " and more" : "", differ == 1 ? "s" : "", ref, all[ref].host,
                      (unsigned long long)all[ref].size);
    free(all);
    return st;
}

/* model.init (collective; modelinit.h): every rank maps the file onto the
 * model and reads only its own slices of the parameter vector, handing
 * each host piece to the engine (which uploads it where the shard lives in
 * device memory); with lm_head.weight in the file each rank checks its
 * part of the tie; rank 0 hashes the whole file for the manifest; one
 * agreement.  Before reading, the ranks compare the file's size and
 * fingerprint (same_init_file), so ranks that see different files under
 * one path never train a hybrid. */
sr_status sr_modelinit_load(sr_modelinit *out, const char *path, sr_fsdp *f, const sr_model *model, sr_ctl *ctl,
                            const sr_world *w) {
    double t0 = sr_clock_mono_s();
    sr_fsdp_layout s;
    sr_fsdp_layout_get(f, &s);
    enum { PIECE = 1 << 20 }; /* floats read and handed over at a time */
    float *piece = sr_malloc(PIECE * sizeof(float));
    sr_modelfile mf = {.fd = -1};
    bool tied = true, opened = false;
    uint64_t bytes = 0;
    char sha[65] = "";
    sr_status mine = !piece ? sr_error_oom("the model.init read piece") : SR_OK;
    if (mine == SR_OK)
        mine = sr_modelfile_open(&mf, path, model, "model.init");
    opened = mine == SR_OK;
    sr_status same = same_init_file(w, ctl, path, &mf); /* collective: every rank, opened or not */
    if (mine == SR_OK)
        mine = same;
    if (mine == SR_OK)
        sr_log_info("model.init: reading this rank's shard of %s (%.1f MB file)", path, (double)mf.size / 1e6);
    for (int i = 0; i < s.nslices && mine == SR_OK; i++)
        for (size_t b = s.slices[i].begin; b < s.slices[i].end && mine == SR_OK; b += PIECE) {
            size_t e = b + PIECE < s.slices[i].end ? b + PIECE : s.slices[i].end;
            mine = sr_modelfile_read(&mf, b, e, piece);
            if (mine == SR_OK)
                mine =
                    sr_fsdp_state_write(f, SR_STATE_PARAMS, s.slices[i].local + (b - s.slices[i].begin), e - b, piece);
            bool eq = true;
            if (mine == SR_OK)
                mine = sr_modelfile_head_tied(&mf, b, e, &eq);
            tied = tied && eq;
            bytes += (e - b) * sizeof(float);
        }
    if (mine == SR_OK && !tied)
        mine = sr_error(SR_ERR_DATA,
                        "model.init: %s: lm_head.weight differs from the token embedding; this model ties its output "
                        "head to the embedding (hint: a GPT-2 with an untied head cannot be loaded; a Llama one "
                        "loads with model.tie_embeddings: false)",
                        path);
    if (mine == SR_OK && w->rank == 0)
        mine = sr_modelfile_sha256(&mf, sha);
    sr_ctl_word *all = NULL;
    sr_status st = sr_ctl_agree(ctl, mine, 0, bytes, mine == SR_OK ? NULL : sr_error_message(), &all);
    int64_t words[8] = {0};
    if (st == SR_OK) {
        memcpy(words, sha, 64);
        st = sr_ctl_broadcast(ctl, words, 8, 0);
    }
    if (st == SR_OK) {
        memcpy(sha, words, 64);
        sha[64] = '\0';
        uint64_t total = 0;
        for (int k = 0; k < w->size; k++)
            total += all[k].value;
        char abs[PATH_MAX];
        const char *where = realpath(path, abs) ? abs : path;
        sr_fmt(out->path, sizeof out->path, "%s", where);
        sr_fmt(out->sha256, sizeof out->sha256, "%s", sha);
        out->loaded = true;
        sr_log_info("model.init: loaded %s (%s); %.1f MB read by %d rank%s in %.2f s; sha256 %s", where, mf.what,
                    (double)total / 1e6, w->size, w->size == 1 ? "" : "s", sr_clock_mono_s() - t0, sha);
        st = sr_fsdp_state_loaded(f);
    }
    free(all);
    free(piece);
    if (opened)
        sr_modelfile_close(&mf);
    return st;
}
