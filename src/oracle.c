/* oracle.c — SHARDRUN_TEST_ORACLE: the first step laid out for an independent
 * reference (tests/gpu/oracle.py, PyTorch): into DIR, init.safetensors (the
 * weights the step starts from, as `ckpt export` writes them), batch.bin (int32
 * inputs then targets, batch_size x seq_len each), logits.bin (float32: the
 * logits over the real vocabulary of the first sequence's last position,
 * after the forward), grads.params (paramdump.h) and step.json (the
 * shapes, loss, gradient norm, learning rate, AdamW constants, clipping and
 * which tensors decay).  One rank without offload.  Part of the run:
 * train_impl.h. */
#include "srconfig.h"

#include "train_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "export_hf.h"
#include "fsio.h"
#include "mem.h"
#include "paramdump.h"
#include "testhook.h"

bool sr_oracle_on(const sr_run *r, int64_t s) { return sr_testhook()->oracle_dir[0] && s == r->start.step; }

static void oracle_path(char *buf, size_t n, const char *name) {
    sr_fmt(buf, n, "%s/%s", sr_testhook()->oracle_dir, name);
}

typedef struct {
    const void *p;
    size_t bytes;
} blob;

static sr_status write_blobs(int fd, const char *tmp, void *arg) {
    for (const blob *b = arg; b->p; b++)
        if (sr_fsio_write_all(fd, b->p, b->bytes) != 0)
            return sr_fsio_write_error(tmp, errno);
    return SR_OK;
}

static sr_status write_text(int fd, const char *tmp, void *arg) {
    return sr_fsio_write_all(fd, arg, strlen(arg)) == 0 ? SR_OK : sr_fsio_write_error(tmp, errno);
}

/* Before the step: the weights it starts from. */
sr_status sr_oracle_init(sr_run *r) {
    if (r->w->size != 1 || r->cfg->offload_optimizer)
        return sr_error(SR_ERR_CONFIG, "SHARDRUN_TEST_ORACLE needs one rank and sharding.offload.optimizer: false");
    float *full = sr_malloc(r->model.n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the oracle's initial weights");
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "init.safetensors");
    sr_status st = sr_fsdp_gather_params(r->fsdp, full);
    if (st == SR_OK)
        st = sr_export_safetensors(&r->model, full, path);
    free(full);
    return st;
}

/* After micro-batch a's forward: its tokens, and for a = 0 the logits row. */
sr_status sr_oracle_forward(sr_run *r, int a) {
    const sr_config *cfg = r->cfg;
    size_t n = (size_t)r->mb * (size_t)r->T, es = r->ops->act == SR_DT_BF16 ? 2 : 4;
    if (!r->oracle_in) {
        r->oracle_in = sr_malloc((size_t)cfg->batch_size * (size_t)r->T * sizeof(int));
        r->oracle_tg = sr_malloc((size_t)cfg->batch_size * (size_t)r->T * sizeof(int));
        if (!r->oracle_in || !r->oracle_tg)
            return sr_error_oom("the oracle's batch");
    }
    memcpy(r->oracle_in + (size_t)a * n, r->in + (size_t)a * n, n * sizeof(int));
    memcpy(r->oracle_tg + (size_t)a * n, r->tg + (size_t)a * n, n * sizeof(int));
    if (a != 0)
        return SR_OK;
    const sr_model_dims *d = &r->model.d;
    void *row = sr_malloc((size_t)d->V * es);
    float *f = sr_malloc((size_t)d->V * sizeof(float));
    sr_status st = row && f ? SR_OK : sr_error_oom("the oracle's logits row");
    /* the download waits for the forward on the compute stream (the
     * backward turns the logits into their gradient in place later) */
    sr_event ev = {0};
    if (st == SR_OK) {
        r->dev->record(r->dev, &ev, SR_STREAM_COMPUTE);
        st = r->dev->wait(r->dev, SR_STREAM_D2H, &ev);
    }
    if (st == SR_OK)
        st = sr_dev_download(r->dev, row, (const char *)r->model.logits + (size_t)(r->T - 1) * d->Vp * es,
                             (size_t)d->V * es, "download");
    for (int v = 0; st == SR_OK && v < d->V; v++)
        f[v] = es == 2 ? sr_bf16_to_f32(((const uint16_t *)row)[v]) : ((const float *)row)[v];
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "logits.bin");
    blob b[] = {{f, (size_t)d->V * sizeof(float)}, {NULL, 0}};
    if (st == SR_OK)
        st = sr_fsio_atomic_write_own(path, write_blobs, b);
    free(row);
    free(f);
    return st;
}

/* After the step's gradients are final and its constants known. */
sr_status sr_oracle_step(sr_run *r, const sr_step_out *o) {
    const sr_config *cfg = r->cfg;
    const sr_model_dims *d = &r->model.d;
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "grads.params");
    sr_status st = sr_paramdump_grads(r->fsdp, &r->model, path);
    size_t n = (size_t)cfg->batch_size * (size_t)r->T * sizeof(int);
    blob b[] = {{r->oracle_in, n}, {r->oracle_tg, n}, {NULL, 0}};
    oracle_path(path, sizeof path, "batch.bin");
    if (st == SR_OK)
        st = sr_fsio_atomic_write_own(path, write_blobs, b);
    json_t *decay = json_array();
    for (int i = 0; i < r->model.n_tensors; i++)
        if (r->model.tensors[i].decay)
            json_array_append_new(decay, json_string(r->model.tensors[i].name));
    json_t *j = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:s, s:s, s:o}", "L", d->L,
        "NH", d->NH, "C", d->C, "V", d->V, "Vp", d->Vp, "T", r->T, "B", (int)cfg->batch_size, "loss", o->loss,
        "grad_norm", o->norm, "lr", o->lr, "beta1", cfg->beta1, "beta2", cfg->beta2, "eps", cfg->eps, "weight_decay",
        cfg->weight_decay, "grad_clip", cfg->grad_clip, "act", r->ops->act == SR_DT_BF16 ? "bf16" : "f32",
        "param_dtype", cfg->param_dtype == SR_DT_BF16 ? "bf16" : "fp32", "attention",
        r->flash ? "flash" : "materialized", "decay", decay);
    char *text = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    oracle_path(path, sizeof path, "step.json");
    if (st == SR_OK)
        st = text ? sr_fsio_atomic_write_own(path, write_text, text) : sr_error_oom("the oracle's step.json");
    free(text);
    json_decref(j);
    return st;
}
