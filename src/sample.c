/* sample.c — generation with a key/value cache, token choice, llm.c
 * tokenizer files and `shardrun sample`; see sample.h. */
#include "srconfig.h"

#include "sample.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_tools.h"
#include "clock.h"
#include "config.h"
#include "ctl.h"
#include "fsdp.h"
#include "fsio.h"
#include "mem.h"
#include "model.h"
#include "modelfile.h"
#include "ops.h"
#include "rng.h"
#include "tokenizer.h"

/* Writes tokens as text: with a tokenizer (tokenizer.h; NULL for none)
 * their bytes (an id the tokenizer has no token for as [ID]), for V == 256
 * the bytes, else the ids separated by spaces (a space before each id when
 * `first` is false).  `escape` shows control bytes and non-ASCII as C
 * escapes (for one-line logs).  Returns 0 or -1 on a write error. */
static int sr_sample_write(FILE *out, const int *tok, int n, int V, const sr_tokenizer *t, bool first);

/* Host bytes sr_sample_generate needs for model m: its full fp32
 * parameters (the caller's) and the generator's cache and buffers. */
static size_t sr_sample_host_bytes(const struct sr_model *m);

/* The start token without a prompt: GPT-2's <|endoftext|> (50256) for a
 * vocabulary of 50257, a newline for bytes, else 0. */
static int sr_sample_start_token(int V);

/* The one generator behind `shardrun sample` and the training log's
 * samples: the model `m` (its tensor table) with its full unit-major fp32
 * parameters `params` in host memory, on the CPU op table with the threads
 * set (sr_ops_set_threads; the result does not depend on their number),
 * fed prompt[0 .. n) (n >= 1), then o->tokens tokens drawn, each handed to
 * emit(ctx, token, i) (a status other than SR_OK stops it and is
 * returned).  The i-th draw: argmax when o->temperature is 0 or o->top_k
 * is 1 (the lowest id among equals); else softmax(logits / temperature)
 * over the top_k largest (all when top_k is 0 or >= V), drawn with
 * sr_rng_uniform(o->seed, SR_SAMPLE_STREAM, i): the same seed gives the
 * same text. */
#define SR_SAMPLE_STREAM 0x53414d50u
typedef sr_status (*sr_sample_emit)(void *ctx, int token, long i);
static sr_status sr_sample_generate(const struct sr_model *m, const float *params, const int *prompt, int n,
                                    const sr_sample_opts *o, sr_sample_emit emit, void *ctx);

/* ------------------------------------------------------------------------ */
/* choosing the next token */

typedef struct {
    float logit;
    int id;
} cand;

static int by_logit(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* The next token from logits[0 .. V) (the draw sample.h describes);
 * `scratch` holds 2 V floats. */
static int sr_sample_pick(const float *logits, int V, double temperature, int top_k, uint64_t seed, uint64_t index,
                          float *scratch) {
    if (temperature <= 0.0 || top_k == 1) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    cand *c = (cand *)scratch; /* 2 V floats: V {float, int} pairs */
    for (int i = 0; i < V; i++)
        c[i] = (cand){logits[i], i};
    int k = top_k > 0 && top_k < V ? top_k : V;
    if (k < V)
        qsort(c, (size_t)V, sizeof *c, by_logit);
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < k; i++)
        mx = c[i].logit > mx ? c[i].logit : mx;
    for (int i = 0; i < k; i++)
        sum += exp(((double)c[i].logit - mx) / temperature);
    double u = sr_rng_uniform(seed, SR_SAMPLE_STREAM, index) * sum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += exp(((double)c[i].logit - mx) / temperature);
        if (u < acc)
            return c[i].id;
    }
    return c[k - 1].id; /* rounding left u at the very top */
}

/* ------------------------------------------------------------------------ */
/* showing tokens */

static int sr_sample_write(FILE *out, const int *tok, int n, int V, const sr_tokenizer *t, bool first) {
    for (int i = 0; i < n; i++) {
        int rc;
        size_t len;
        const unsigned char *b = t ? sr_tokenizer_bytes(t, tok[i], &len) : NULL;
        if (b) {
            rc = fwrite(b, 1, len, out) == len ? 0 : -1;
        } else if (t) {
            rc = fprintf(out, "[%d]", tok[i]) < 0 ? -1 : 0;
        } else if (V == 256) {
            rc = fputc(tok[i], out) == EOF ? -1 : 0;
        } else {
            rc = fprintf(out, first && i == 0 ? "%d" : " %d", tok[i]) < 0 ? -1 : 0;
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the command */

/* "1,2,3" -> ids (syntax only; the range is checked against V). */
static sr_status parse_ids(const char *s, int **ids, int *n) {
    *n = 0;
    *ids = sr_malloc(sizeof(int) * (strlen(s) / 2 + 1));
    if (!*ids)
        return sr_error_oom("the prompt");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',') || (*end == ',' && !end[1])) {
            free(*ids);
            *ids = NULL;
            return sr_error(SR_ERR_USAGE,
                            "--prompt-tokens %s: expected token ids separated by commas, e.g. 50256,464,3290", s);
        }
        (*ids)[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return sr_error(SR_ERR_USAGE, "%s", "--prompt-tokens: expected at least one token id");
    }
    return SR_OK;
}

/* The prompt as ids for vocabulary V (the default start token without
 * one: the tokenizer's end-of-text, GPT-2's 50256, a newline for bytes,
 * else 0). */
static sr_status make_prompt(const sr_sample_opts *o, int V, const sr_tokenizer *t, int **ids, int *n,
                             const char **how) {
    sr_status st = SR_OK;
    if (o->prompt_tokens) {
        st = parse_ids(o->prompt_tokens, ids, n);
        for (int i = 0; st == SR_OK && i < *n; i++)
            if ((*ids)[i] >= V) {
                st = sr_error(SR_ERR_USAGE, "--prompt-tokens: token %d is outside the vocabulary (0..%d)", (*ids)[i],
                              V - 1);
                free(*ids);
                *ids = NULL;
            }
        *how = "--prompt-tokens";
        return st;
    }
    if (o->prompt) {
        size_t len = strlen(o->prompt);
        if (len == 0)
            return sr_error(SR_ERR_USAGE, "%s", "--prompt: empty (omit it to start from the start token)");
        if (t && sr_tokenizer_can_encode(t)) {
            sr_tok_encoder *e;
            sr_tok_ids v = {0};
            st = sr_tok_encoder_new(t, &e);
            if (st == SR_OK)
                st = sr_tok_encode(e, (const unsigned char *)o->prompt, len, &v);
            sr_tok_encoder_free(e);
            if (st == SR_OK && !(*ids = sr_malloc(sizeof(int) * (v.n ? v.n : 1))))
                st = sr_error_oom("the prompt");
            for (size_t i = 0; st == SR_OK && i < v.n; i++)
                (*ids)[i] = (int)v.ids[i];
            *n = (int)v.n;
            sr_tok_ids_free(&v);
            *how = "--prompt, encoded by the tokenizer";
            return st;
        }
        if (V != 256)
            return sr_error(SR_ERR_USAGE,
                            "--prompt: the model's vocabulary has %d tokens, not the 256 bytes of the byte-level "
                            "vocabulary, and %s (hint: --tokenizer PATH with the model's tokenizer.json, or use "
                            "--prompt-tokens with ids)",
                            V, t ? "llm.c's tokenizer file decodes only" : "no tokenizer was given");
        *ids = sr_malloc(sizeof(int) * len);
        if (!*ids)
            return sr_error_oom("the prompt");
        for (size_t i = 0; i < len; i++)
            (*ids)[i] = (unsigned char)o->prompt[i];
        *n = (int)len;
        *how = "--prompt";
        return SR_OK;
    }
    *ids = sr_malloc(sizeof(int));
    if (!*ids)
        return sr_error_oom("the prompt");
    *n = 1;
    int64_t eot = t ? sr_tokenizer_eot(t) : -1;
    (*ids)[0] = eot >= 0 && eot < V ? (int)eot : sr_sample_start_token(V);
    *how = eot >= 0 && eot < V ? "the tokenizer's end-of-text token"
           : V == 50257        ? "GPT-2's <|endoftext|> (50256)"
           : V == 256          ? "a newline"
                               : "token 0";
    return SR_OK;
}

static sr_status sr_sample_generate(const sr_model *m, const float *params, const int *prompt, int n,
                                    const sr_sample_opts *o, sr_sample_emit emit, void *ctx) {
    sr_decoder *g = NULL;
    float *scratch = NULL;
    int V = m->d.V;
    sr_status st = sr_decoder_new(&g, m, params);
    if (st == SR_OK && !(scratch = sr_malloc(sizeof(float) * 2 * (size_t)V)))
        st = sr_error_oom("the sampler");
    const float *logits = NULL;
    for (int i = 0; st == SR_OK && i < n; i++)
        logits = sr_decoder_feed(g, prompt[i]);
    for (long i = 0; st == SR_OK && i < o->tokens; i++) {
        int next = sr_sample_pick(logits, V, o->temperature, o->top_k, o->seed, (uint64_t)i, scratch);
        st = emit(ctx, next, i);
        if (st == SR_OK && i + 1 < o->tokens)
            logits = sr_decoder_feed(g, next);
    }
    free(scratch);
    sr_decoder_free(g);
    return st;
}

static size_t sr_sample_host_bytes(const sr_model *m) {
    return m->n_params * sizeof(float) +       /* the parameters */
           sr_decoder_bytes(&m->d) +           /* the decoder's cache and buffers */
           sizeof(float) * 2 * (size_t)m->d.V; /* the draw's scratch */
}

static int sr_sample_start_token(int V) { return V == 50257 ? 50256 : V == 256 ? '\n' : 0; }

/* What the prompt check reads and fills (once per model tried). */
typedef struct {
    const sr_sample_opts *o;
    sr_tokenizer **tok;
    int **prompt, *n;
    const char **how;
} prompt_check;

sr_status sr_sample_tokenizer(const char *opt, const char *job_tok, const char *what, int V, sr_tokenizer **tok) {
    sr_tokenizer_free(*tok);
    *tok = NULL;
    sr_status st = SR_OK;
    if (opt) {
        st = sr_tokenizer_load(tok, opt, "--tokenizer");
    } else if (job_tok && *job_tok) {
        if (sr_tokenizer_load(tok, job_tok, what) != SR_OK)
            sr_log_warn("%s (printing token ids; hint: --tokenizer PATH)", sr_error_message());
    }
    sr_tokenizer *t = *tok;
    const char *name = opt ? opt : job_tok;
    int64_t tv = t ? sr_tokenizer_vocab(t) : 0;
    if (st == SR_OK && t && sr_tokenizer_can_encode(t) && tv > V)
        st = sr_error(SR_ERR_DATA, "%s: the tokenizer has %lld ids; the model's vocabulary has %d", name, (long long)tv,
                      V);
    if (st == SR_OK && t && !sr_tokenizer_can_encode(t) && tv < V)
        st = sr_error(SR_ERR_DATA, "%s: %lld tokens; the model's vocabulary has %d", name, (long long)tv, V);
    return st;
}

/* The tokenizer for vocabulary V (sr_sample_tokenizer), then the prompt. */
static sr_status check_prompt_v(prompt_check *pc, int V, const char *job_tok) {
    free(*pc->prompt);
    *pc->prompt = NULL;
    sr_status st = sr_sample_tokenizer(pc->o->tokenizer, job_tok, "the job's data.tokenizer", V, pc->tok);
    return st == SR_OK ? make_prompt(pc->o, V, *pc->tok, pc->prompt, pc->n, pc->how) : st;
}

void sr_sample_job_tokenizer(const sr_manifest *mf, char *job_tok, size_t n) {
    job_tok[0] = '\0';
    if (mf->has_data && mf->data.tokenizer_sha256[0])
        sr_fmt(job_tok, n, "%s", mf->data.tokenizer);
    for (int i = 0; !job_tok[0] && i < mf->nconfig; i++)
        if (strcmp(mf->ckeys[i], "data.tokenizer") == 0 && !sr_config_unquote(mf->cvals[i], job_tok, n))
            job_tok[0] = '\0';
}

void sr_sample_tokenizer_warn(const sr_manifest *mf, const sr_tokenizer *tok, const char *job_tok) {
    if (tok && mf->has_data && mf->data.tokenizer_sha256[0] &&
        (strcmp(sr_tokenizer_fingerprint(tok), mf->data.tokenizer_sha256) != 0 ||
         strcmp(sr_tokenizer_pattern(tok), mf->data.tokenizer_pattern) != 0))
        sr_log_warn("%s is not the tokenizer the checkpoint was trained with (fingerprint %.12s..., recorded "
                    "%.12s...): its text may be wrong (hint: --tokenizer PATH)",
                    job_tok, sr_tokenizer_fingerprint(tok), mf->data.tokenizer_sha256);
}

/* The job's tokenizer (sr_sample_job_tokenizer) and the prompt. */
static sr_status check_prompt(const sr_manifest *mf, void *ctx) {
    prompt_check *pc = ctx;
    char job_tok[PATH_MAX + 64];
    sr_sample_job_tokenizer(mf, job_tok, sizeof job_tok);
    sr_status st = check_prompt_v(pc, mf->dims.V, job_tok);
    if (st == SR_OK && !pc->o->tokenizer)
        sr_sample_tokenizer_warn(mf, *pc->tok, job_tok);
    return st;
}

/* The threads of `shardrun sample`: --threads, else the job's `threads`
 * key as the checkpoint recorded it (when above 0), else OMP_NUM_THREADS,
 * else every core this process may use.  *how names the source. */
int sr_sample_threads(const sr_sample_opts *o, const sr_manifest *mf, const char **how) {
    if (o->threads > 0) {
        *how = "--threads";
        return o->threads;
    }
    for (int i = 0; mf && i < mf->nconfig; i++)
        if (strcmp(mf->ckeys[i], "threads") == 0) {
            long v = strtol(mf->cvals[i], NULL, 10);
            if (v > 0 && v <= 4096) {
                *how = "the checkpoint's threads key";
                return (int)v;
            }
        }
    const char *env = getenv("OMP_NUM_THREADS");
    char *end;
    long v = env && *env ? strtol(env, &end, 10) : 0;
    if (v > 0 && v <= 4096 && *end == '\0') {
        *how = "OMP_NUM_THREADS";
        return (int)v;
    }
    *how = "the cores available";
    return 0;
}

sr_status sr_sample_read_hf(const char *dir, sr_model *model, float **all, sr_sample_hf_check check, void *ctx) {
    sr_model_dims d;
    char weights[PATH_MAX];
    *all = NULL;
    sr_status st = sr_modelfile_hf_dir(dir, &d, weights, sizeof weights);
    if (st == SR_OK && check)
        st = check(ctx, d.V, dir);
    if (st != SR_OK)
        return st;
    st = sr_model_init(model, d, &sr_ops_cpu, NULL, 0, false);
    sr_modelfile mf;
    bool opened = false;
    if (st == SR_OK) {
        st = sr_modelfile_open(&mf, weights, model, dir);
        opened = st == SR_OK;
    }
    if (st == SR_OK && !(*all = sr_malloc(model->n_params * sizeof(float))))
        st = sr_error_oom("the model");
    if (st == SR_OK)
        st = sr_modelfile_read(&mf, 0, model->n_params, *all);
    bool tied = true;
    if (st == SR_OK)
        st = sr_modelfile_head_tied(&mf, 0, model->n_params, &tied);
    if (st == SR_OK && !tied)
        st = sr_error(SR_ERR_DATA,
                      "%s: lm_head.weight differs from the token embedding, and config.json ties them "
                      "(tie_word_embeddings)",
                      weights);
    if (opened)
        sr_modelfile_close(&mf);
    if (st != SR_OK) {
        free(*all);
        *all = NULL;
        sr_model_free(model);
    }
    return st;
}

static sr_status check_prompt_hf(void *ctx, int V, const char *dir) {
    (void)dir;
    return check_prompt_v(ctx, V, NULL);
}

/* `shardrun sample`'s writer: each token to `out` as it is drawn. */
typedef struct {
    FILE *out;
    int V;
    const sr_tokenizer *tok;
    int last;
    bool echoed; /* the prompt was written before the first token */
} stream_ctx;

static sr_status stream_token(void *ctx, int token, long i) {
    stream_ctx *x = ctx;
    x->last = token;
    if (sr_sample_write(x->out, &token, 1, x->V, x->tok, i == 0 && !x->echoed) != 0 || fflush(x->out) != 0)
        return sr_error(SR_ERR_IO, "write to standard output failed: %s", strerror(errno));
    return SR_OK;
}

/* The sample to sx->out: the prompt (its last window's worth, *cut the
 * tokens before it, with a warning) echoed unless --no-echo, the tokens
 * as drawn, and a newline to end the output (ids always; text unless its
 * last byte is one). */
static sr_status write_sample(const sr_sample_opts *o, const sr_model *m, const float *all, const int *prompt, int n,
                              stream_ctx *sx, int *cut) {
    int W = sr_decoder_window(&m->d);
    *cut = n > W ? n - W : 0;
    if (*cut)
        sr_log_warn("the prompt is %d tokens, more than the model's context of %d: its first %d tokens are cut, the "
                    "model reads the last %d",
                    n, W, *cut, W);
    sr_status st = SR_OK;
    if ((o->prompt || o->prompt_tokens) && !o->no_echo) {
        if (sr_sample_write(sx->out, prompt + *cut, n - *cut, sx->V, sx->tok, true) != 0)
            st = sr_error(SR_ERR_IO, "write to standard output failed: %s", strerror(errno));
        sx->echoed = true;
    }
    if (st == SR_OK)
        st = sr_sample_generate(m, all, prompt + *cut, n - *cut, o, stream_token, sx);
    bool text = sx->tok || sx->V == 256, ends_line = false;
    size_t llen = 0;
    const unsigned char *lb = sx->tok && sx->last >= 0 ? sr_tokenizer_bytes(sx->tok, sx->last, &llen) : NULL;
    if (text && sx->last >= 0)
        ends_line = sx->tok ? lb && llen > 0 && lb[llen - 1] == '\n' : sx->last == '\n';
    if (st == SR_OK && !ends_line && fputc('\n', sx->out) == EOF)
        st = sr_error(SR_ERR_IO, "write to standard output failed: %s", strerror(errno));
    return st;
}

sr_status sr_sample_run(const char *ckpt, const sr_sample_opts *o, FILE *out, FILE *log) {
    sr_manifest mf;
    bool have_mf = false;
    sr_model model;
    float *all = NULL;
    sr_tokenizer *tok = NULL;
    int *prompt = NULL, n = 0;
    const char *how = "";
    char from[PATH_MAX + 64];
    int64_t step = -1;
    double t0 = sr_clock_mono_s();
    /* the prompt and the tokenizer checked against the model's dims before
     * any weight is read */
    prompt_check pc = {o, &tok, &prompt, &n, &how};
    sr_status st;
    if (sr_modelfile_is_hf_dir(ckpt)) {
        st = sr_sample_read_hf(ckpt, &model, &all, check_prompt_hf, &pc);
        sr_fmt(from, sizeof from, "%s", ckpt);
    } else {
        char used[PATH_MAX];
        st = sr_ckpt_tool_read_model(ckpt, &mf, &model, &all, check_prompt, &pc, used, sizeof used);
        have_mf = st == SR_OK;
        if (have_mf) {
            step = mf.step;
            sr_fmt(from, sizeof from, "%s (step %lld", used, (long long)step);
        }
    }
    if (st != SR_OK) {
        sr_tokenizer_free(tok);
        free(prompt);
        return st;
    }
    const char *thow;
    int threads = sr_ops_set_threads(sr_sample_threads(o, have_mf ? &mf : NULL, &thow));
    int V = model.d.V, cut = 0;
    double t1 = sr_clock_mono_s();
    stream_ctx sx = {out, V, tok, -1, false};
    st = write_sample(o, &model, all, prompt, n, &sx, &cut);
    double t2 = sr_clock_mono_s();
    if (st == SR_OK) {
        char topk[32], hf_what[64];
        snprintf(topk, sizeof topk, o->top_k > 0 ? "%d" : "off", o->top_k);
        snprintf(hf_what, sizeof hf_what, " (Hugging Face %s", sr_family_get(model.d.arch)->display);
        fprintf(log,
                "shardrun: sampled %ld tokens from %s%s, vocab %d%s) after a %d-token prompt (%s)%s; "
                "temperature %g, top-k %s, seed %llu; %d thread%s (%s); loaded in %.2f s, %.1f tokens/s\n",
                o->tokens, from, have_mf ? "" : hf_what, V,
                tok        ? ", decoded by the tokenizer"
                : V == 256 ? ", bytes"
                           : ", token ids",
                n - cut, how, sx.echoed ? ", echoed before the text" : "", o->temperature, topk,
                (unsigned long long)o->seed, threads, threads == 1 ? "" : "s", thow, t1 - t0,
                (double)(o->tokens + n - cut) / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
    }
    free(prompt);
    sr_tokenizer_free(tok);
    free(all);
    sr_model_free(&model);
    if (have_mf)
        sr_manifest_free(&mf);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the sample during training */

/* log.sample_every (sample.h): every rank all-gathers the fp32 master to
 * the host (sr_fsdp_gather_params, as the parameter dump), rank 0 runs the
 * cached generator of `shardrun sample` (sr_sample_generate: the start
 * token, temperature 0.8, top-k 40) with the run's threads while the
 * others wait in one agreement, and logs the text. */
enum { SAMPLE_TOKENS = 64 };

typedef struct {
    int tok[SAMPLE_TOKENS];
    int n;
} sample_buf;

static sr_status keep_token(void *ctx, int token, long i) {
    sample_buf *b = ctx;
    b->tok[i] = token;
    b->n = (int)i + 1;
    return SR_OK;
}

sr_status sr_sample_during_training(sr_fsdp *f, const sr_model *m, sr_ctl *ctl, const sr_world *w, int64_t step,
                                    uint64_t seed, int threads, const sr_tokenizer *tok, bool *warned) {
    const sr_model_dims *d = &m->d;
    size_t need = sr_sample_host_bytes(m);
    size_t cap = sr_mem_side_copy_cap(w->local_size);
    int64_t fits = need <= cap;
    sr_status st = sr_ctl_min(ctl, &fits);
    if (st != SR_OK)
        return st;
    if (!fits) {
        if (!*warned)
            sr_log_warn("log.sample_every: a sample needs %.1f MiB of host memory on every rank (the full fp32 model "
                        "and its key/value cache), above the cap of 25%% of the node's memory divided by its ranks "
                        "(%.1f MiB here) on some rank: samples skipped (hint: shardrun sample CKPT on a node of its "
                        "own)",
                        (double)need / (1024.0 * 1024.0), (double)cap / (1024.0 * 1024.0));
        *warned = true;
        return SR_OK;
    }
    float *full = sr_malloc(m->n_params * sizeof(float));
    st = full ? SR_OK : sr_error_oom("the training sample's model");
    st = sr_ctl_agree(ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = sr_fsdp_gather_params(f, full);
    sample_buf b = {.n = 0};
    double t0 = sr_clock_mono_s();
    sr_status mine = SR_OK;
    if (st == SR_OK && w->rank == 0) {
        int64_t eot = tok ? sr_tokenizer_eot(tok) : -1;
        int start = eot >= 0 && eot < d->V ? (int)eot : sr_sample_start_token(d->V);
        sr_sample_opts o = {.tokens = SAMPLE_TOKENS, .temperature = 0.8, .top_k = 40, .seed = seed + (uint64_t)step};
        mine = sr_sample_generate(m, full, &start, 1, &o, keep_token, &b);
    }
    free(full);
    if (st == SR_OK)
        st = sr_ctl_agree(ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK && w->rank == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            sr_sample_write(f, b.tok, b.n, d->V, tok, true);
            fclose(f);
        }
        /* the decoded bytes as text (a character may span tokens), escaped once */
        size_t cap = 4 * len + 8;
        char *shown = text ? sr_malloc(cap) : NULL;
        if (shown)
            sr_escape_n(text, len, shown, cap);
        sr_log_info("sample at step %lld (%d tokens, temperature 0.8, top-k 40, seed %llu, %d thread%s, %.2f s): "
                    "\"%s\"",
                    (long long)step, b.n, (unsigned long long)(seed + (uint64_t)step), threads, threads == 1 ? "" : "s",
                    sr_clock_mono_s() - t0, shown ? shown : "?");
        free(shown);
        free(text);
    }
    return st;
}
