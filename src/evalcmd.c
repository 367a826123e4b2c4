/* evalcmd.c — `shardrun eval`: the model on a device, the tasks' batches
 * through its forward, the scores; see evalcmd.h. */
#include "srconfig.h"

#include "evalcmd.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_tools.h"
#include "clock.h"
#include "dtype.h"
#include "evaltask.h"
#include "mem.h"
#include "model.h"
#include "modelfile.h"
#include "ops.h"

/* The tokenizer choice, made when the model's vocabulary is known. */
typedef struct {
    const sr_eval_opts *o;
    sr_tokenizer *tok;
    char job_tok[PATH_MAX + 64];
} tok_pick;

static sr_status usable(tok_pick *p, int V) {
    if (p->tok && !sr_tokenizer_can_encode(p->tok))
        return sr_error(SR_ERR_USAGE,
                        "%s is llm.c's tokenizer file, which decodes only: a task's text needs a tokenizer that "
                        "encodes (hint: --tokenizer with the model's tokenizer.json)",
                        p->o->s.tokenizer ? p->o->s.tokenizer : p->job_tok);
    if (!p->tok && V != 256)
        return sr_error(SR_ERR_USAGE,
                        "the model's vocabulary has %d tokens, not the 256 bytes of the byte-level vocabulary, and "
                        "%s (hint: --tokenizer PATH with the model's tokenizer.json)",
                        V, p->job_tok[0] ? "its tokenizer could not be read" : "no tokenizer is recorded");
    return SR_OK;
}

static sr_status pick_mf(const sr_manifest *mf, void *ctx) {
    tok_pick *p = ctx;
    sr_sample_job_tokenizer(mf, p->job_tok, sizeof p->job_tok);
    sr_status st = sr_sample_tokenizer(p->o->s.tokenizer, p->job_tok, "the job's data.tokenizer", mf->dims.V, &p->tok);
    if (st == SR_OK && !p->o->s.tokenizer)
        sr_sample_tokenizer_warn(mf, p->tok, p->job_tok);
    return st == SR_OK ? usable(p, mf->dims.V) : st;
}

/* a Hugging Face directory: --tokenizer, else its tokenizer.json */
static sr_status pick_hf(void *ctx, int V, const char *dir) {
    tok_pick *p = ctx;
    struct stat sb;
    sr_fmt(p->job_tok, sizeof p->job_tok, "%s/tokenizer.json", dir);
    if (stat(p->job_tok, &sb) != 0)
        p->job_tok[0] = '\0';
    sr_status st = sr_sample_tokenizer(p->o->s.tokenizer, p->job_tok, "the directory's tokenizer.json", V, &p->tok);
    return st == SR_OK ? usable(p, V) : st;
}

/* The model on its device: parameters in the table's dtype, activations
 * for `B` sequences. */
typedef struct {
    sr_dev *dev;
    sr_model m;
    bool m_init;
    void *params; /* the device's copy (NULL on the cpu table: `host`) */
    const float *host;
    sr_dtype dt;
    int B;
    int *in, *tg; /* [B, T], sr_dev_io_alloc */
    float *losses;
} runner;

static sr_param_view layer_view(void *ctx, int layer) {
    runner *r = ctx;
    size_t off = r->m.layer_offset[layer];
    if (r->params)
        return (sr_param_view){(char *)r->params + off * sr_dtype_size(r->dt), r->dt};
    return (sr_param_view){(void *)(r->host + off), SR_DT_F32};
}

static void runner_free(runner *r) {
    if (r->dev) {
        sr_dev_io_free(r->dev, r->in);
        sr_dev_io_free(r->dev, r->tg);
        if (r->params)
            r->dev->free(r->dev, r->params);
    }
    if (r->dev)
        sr_dev_io_free(r->dev, r->losses);
    if (r->m_init)
        sr_model_free(&r->m);
    if (r->dev)
        sr_device_close(r->dev);
}

static sr_status runner_open(runner *r, const sr_eval_opts *o, const sr_model_dims *d, const float *all, int max_seqs) {
    memset(r, 0, sizeof *r);
    r->host = all;
    sr_status st = sr_device_open(&r->dev, o->device, 1, 0, 1);
    if (st != SR_OK)
        return st;
    bool cuda = r->dev->kind == SR_DEV_CUDA;
    r->dt = sr_device_auto_dtype(cuda);
    const sr_ops *ops = sr_device_ops(r->dev, r->dt, false);
    int B = o->batch > 0 ? o->batch : 64;
    if (B > max_seqs)
        B = max_seqs;
    while (o->batch <= 0 && B > 1 && sr_model_activation_bytes(d, ops, B) > SR_EVAL_ACT_BYTES)
        B /= 2;
    r->B = B;
    st = sr_model_init(&r->m, *d, ops, r->dev, B, false);
    r->m_init = true;
    size_t n = r->m.n_params, bt = (size_t)B * (size_t)d->T;
    r->in = st == SR_OK ? sr_dev_io_alloc(r->dev, bt * sizeof(int)) : NULL;
    r->tg = st == SR_OK ? sr_dev_io_alloc(r->dev, bt * sizeof(int)) : NULL;
    r->losses = st == SR_OK ? sr_dev_io_alloc(r->dev, bt * sizeof(float)) : NULL;
    if (st == SR_OK && (!r->in || !r->tg || !r->losses))
        st = sr_error_oom("the evaluation's batch");
    if (st == SR_OK && r->dev->kind != SR_DEV_CPU) { /* the parameters on the device, in its dtype */
        size_t es = sr_dtype_size(r->dt);
        r->params = r->dev->alloc(r->dev, SR_SPACE_DEVICE, SR_MEM_PARAM_SHARD, n * es);
        void *staged = r->dt == SR_DT_F32 ? (void *)all : sr_malloc(n * es);
        if (!r->params || !staged)
            st = r->params ? sr_error_oom("the model's bf16 copy") : SR_ERR_INTERNAL;
        if (st == SR_OK && staged != all)
            for (size_t i = 0; i < n; i++)
                ((uint16_t *)staged)[i] = sr_f32_to_bf16(all[i]);
        if (st == SR_OK)
            st = sr_dev_upload(r->dev, r->params, staged, n * es, "upload");
        if (staged != all)
            free(staged);
    }
    if (st != SR_OK)
        runner_free(r);
    return st;
}

/* The context the tasks need: their longest window's inputs, rounded up
 * to a multiple of 64 (at most the model's T). */
static int context_needed(const sr_task_enc *enc, int n, int T) {
    int need = 1;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < enc[i].nseq; s++)
            need = enc[i].len[s] - 1 > need ? enc[i].len[s] - 1 : need;
    need = (need + 63) / 64 * 64;
    return need < T ? need : T;
}

/* The model `table` (its tensor table and fp32 parameters `all`) for a
 * context of T' < T: *d2, and the same tensors, each of the first of its
 * elements (the position embedding's first T' rows; every other tensor
 * whole), into *out (malloc'd; NULL when the parameters are the same at
 * T': a model without learned positions).  A forward at positions < T' computes
 * what the full model does there, on T' columns instead of T. */
static sr_status shrink(const sr_model *table, const float *all, int T2, sr_model_dims *d2, float **out) {
    sr_model small;
    *d2 = table->d;
    d2->T = T2;
    sr_status st = sr_model_init(&small, *d2, &sr_ops_cpu, NULL, 0, false);
    if (st != SR_OK)
        return st;
    *out = NULL;
    if (small.n_params == table->n_params) { /* (rotary positions: only the context changes) */
        sr_model_free(&small);
        return SR_OK;
    }
    *out = sr_calloc(small.n_params, sizeof(float));
    if (!*out || small.n_tensors != table->n_tensors)
        st =
            *out ? sr_error(SR_ERR_INTERNAL, "the model's tensors change with its context") : sr_error_oom("the model");
    for (int i = 0; st == SR_OK && i < small.n_tensors; i++) {
        const sr_tensor *a = &table->tensors[i], *b = &small.tensors[i];
        if (b->numel > a->numel || (b->numel < a->numel && strstr(a->name, "wpe") == NULL))
            st = sr_error(SR_ERR_INTERNAL, "%s: %zu elements at a context of %d, %zu at %d", a->name, b->numel, T2,
                          a->numel, table->d.T);
        else
            memcpy(*out + b->offset, all + a->offset, b->numel * sizeof(float));
    }
    sr_model_free(&small);
    if (st != SR_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* One task's logprobs [e->nseq], batch after batch. */
static sr_status score(runner *r, const sr_task_enc *e, double *logprob) {
    sr_param_source src = {layer_view, NULL, NULL, NULL, r};
    sr_status st = SR_OK;
    for (int s = 0; st == SR_OK && s < e->nseq; s += r->B) {
        int n = e->nseq - s < r->B ? e->nseq - s : r->B;
        sr_task_fill(e, s, n, r->in, r->tg);
        st = sr_model_forward(&r->m, &src, r->in, r->tg, n);
        if (st == SR_OK)
            st = sr_model_read_losses(&r->m, r->losses, n);
        if (st == SR_OK)
            sr_task_take(e, s, n, r->losses, logprob);
    }
    return st;
}

/* The model and where it came from. */
typedef struct {
    tok_pick pick;
    sr_manifest mf;
    bool have_mf, loaded;
    sr_model table; /* the tensor table of the model as read (its dims) */
    float *all;     /* its fp32 parameters, or those of a shorter context (fit) */
    char from[PATH_MAX + 64];
} source;

static sr_status load(source *m, const char *ckpt) {
    sr_status st;
    if (sr_modelfile_is_hf_dir(ckpt)) {
        st = sr_sample_read_hf(ckpt, &m->table, &m->all, pick_hf, &m->pick);
        sr_fmt(m->from, sizeof m->from, "%s (Hugging Face)", ckpt);
    } else {
        char used[PATH_MAX];
        st = sr_ckpt_tool_read_model(ckpt, &m->mf, &m->table, &m->all, pick_mf, &m->pick, used, sizeof used);
        m->have_mf = st == SR_OK;
        if (m->have_mf)
            sr_fmt(m->from, sizeof m->from, "%s (step %lld)", used, (long long)m->mf.step);
    }
    m->loaded = st == SR_OK;
    return st;
}

static void unload(source *m) {
    sr_tokenizer_free(m->pick.tok);
    if (m->loaded) {
        free(m->all);
        sr_model_free(&m->table);
    }
    if (m->have_mf)
        sr_manifest_free(&m->mf);
}

/* The dims *d the forwards run at: the model's, with the context the
 * tasks need (the encodings' rows shortened to it, and m->all replaced by
 * the parameters of that context where they differ). */
static sr_status fit(source *m, sr_task_enc *enc, int n, sr_model_dims *d) {
    *d = m->table.d;
    int T2 = context_needed(enc, n, d->T);
    if (T2 == d->T)
        return SR_OK;
    float *shrunk = NULL;
    sr_status st = shrink(&m->table, m->all, T2, d, &shrunk);
    if (st != SR_OK)
        return st;
    if (shrunk) {
        free(m->all);
        m->all = shrunk;
    }
    for (int i = 0; i < n; i++)
        enc[i].T = T2; /* (every window fits: T2 covers the longest) */
    return SR_OK;
}

sr_status sr_eval_run(const char *ckpt, const sr_eval_opts *o, FILE *out, FILE *log) {
    sr_task tasks[SR_EVAL_MAX_TASKS];
    sr_task_enc enc[SR_EVAL_MAX_TASKS];
    memset(tasks, 0, sizeof tasks);
    memset(enc, 0, sizeof enc);
    sr_status st = SR_OK;
    for (int i = 0; st == SR_OK && i < o->ntasks; i++)
        st = sr_task_load(&tasks[i], o->tasks[i]);
    source m = {.pick = {o, NULL, ""}};
    double t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = load(&m, ckpt);
    sr_model_dims d = m.loaded ? m.table.d : (sr_model_dims){0};
    const char *thow = "";
    int threads = m.loaded ? sr_ops_set_threads(sr_sample_threads(&o->s, m.have_mf ? &m.mf : NULL, &thow)) : 0;
    int max_seqs = 1;
    for (int i = 0; st == SR_OK && i < o->ntasks; i++) {
        st = sr_task_encode(&tasks[i], m.pick.tok, d.V, d.T, &enc[i]);
        max_seqs = enc[i].nseq > max_seqs ? enc[i].nseq : max_seqs;
    }
    if (st == SR_OK) /* a shorter context costs what the tasks need */
        st = fit(&m, enc, o->ntasks, &d);
    runner r;
    bool opened = false;
    if (st == SR_OK)
        opened = (st = runner_open(&r, o, &d, m.all, max_seqs)) == SR_OK;
    double t1 = sr_clock_mono_s();
    long seqs = 0;
    for (int i = 0; st == SR_OK && i < o->ntasks; i++) {
        double *lp = sr_calloc((size_t)enc[i].nseq, sizeof(double));
        st = lp ? score(&r, &enc[i], lp) : sr_error_oom("the task's scores");
        if (st == SR_OK && (sr_task_write(out, &tasks[i], &enc[i], lp, o->json) != 0 || fflush(out) != 0))
            st = sr_error(SR_ERR_IO, "write to standard output failed");
        seqs += enc[i].nseq;
        free(lp);
    }
    double t2 = sr_clock_mono_s();
    if (st == SR_OK)
        fprintf(log,
                "shardrun: eval of %s: %d task%s, %ld sequences of up to %d tokens (%s) in %.2f s, %.1f sequences/s; "
                "batch %d of %d positions on %s (%s), %d thread%s (%s); loaded in %.2f s\n",
                m.from, o->ntasks, o->ntasks == 1 ? "" : "s", seqs, m.table.d.T,
                m.pick.tok ? "encoded by the tokenizer" : "UTF-8 bytes", t2 - t1,
                (double)seqs / (t2 - t1 > 0 ? t2 - t1 : 1e-9), r.B, d.T, r.dev->name, sr_dtype_name(r.dt), threads,
                threads == 1 ? "" : "s", thow, t1 - t0);
    if (opened)
        runner_free(&r);
    for (int i = 0; i < o->ntasks; i++) {
        sr_task_enc_free(&enc[i]);
        sr_task_free(&tasks[i]);
    }
    unload(&m);
    return st;
}
