/* config_model.c — the model family's finalization of a job: the batch
 * split, the model's name, a pretrained model's config.json as the source
 * of the model keys the job leaves unset, each family's defaults and
 * rules (GPT-2: NKV = NH, F = 4C, tied; Llama: its dims, rotary and
 * scaling), then every cross-key rule of the job.  Part of the config
 * module (config.h, config_impl.h). */
#include "srconfig.h"

#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "dtype.h"
#include "fsio.h"
#include "line.h"
#include "mem.h"
#include "suggest.h"
#include "yamlload.h"

int64_t sr_config_micro_batch(const sr_config *cfg, int dp_ranks) {
    if (cfg->micro_batch > 0)
        return cfg->micro_batch;
    return cfg->batch_size / (dp_ranks > 0 ? dp_ranks : 1);
}

int64_t sr_config_accum_steps(const sr_config *cfg, int dp_ranks) {
    int64_t mb = sr_config_micro_batch(cfg, dp_ranks);
    return cfg->batch_size / (mb * (dp_ranks > 0 ? dp_ranks : 1));
}

/* The divisor of n closest to want (ties: the smaller). */
int64_t cfg_nearest_divisor(int64_t n, int64_t want) {
    int64_t best = 1;
    for (int64_t d = 1; d <= n; d++)
        if (n % d == 0 && llabs(d - want) < llabs(best - want))
            best = d;
    return best;
}

const char *sr_config_model_name(const sr_config *cfg, char *buf, size_t n) {
    int p = (int)cfg->model_preset;
    if (cfg->model_source) {
        snprintf(buf, n, "%s of %.1100s%s", sr_family_get((int)cfg->arch)->name, cfg->model_source->origin,
                 cfg->preset_yielded ? " (the default job's model.preset gives way to it)" : "");
        return buf;
    }
    const sr_family_preset *pr = &sr_family_presets[p];
    const struct {
        const char *key;
        int64_t have, preset;
        unsigned fkey; /* a key the family lacks follows the others (GPT-2's n_kv_head and ffn_dim): no change */
    } dims[] = {{"arch", cfg->arch, pr->arch, 0},
                {"n_layer", cfg->n_layer, pr->n_layer, 0},
                {"n_head", cfg->n_head, pr->n_head, 0},
                {"n_kv_head", cfg->n_kv_head, pr->n_kv_head, SR_FKEY_N_KV_HEAD},
                {"n_embd", cfg->n_embd, pr->n_embd, 0},
                {"ffn_dim", cfg->ffn_dim, pr->ffn_dim, SR_FKEY_FFN_DIM},
                {"vocab_size", cfg->vocab_size, pr->vocab_size, 0},
                {"seq_len", cfg->seq_len, pr->seq_len, 0}};
    const sr_family *f = sr_family_get((int)cfg->arch);
    char changed[160];
    sr_line l = SR_LINE(changed);
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].have != dims[i].preset && (!dims[i].fkey || (f->keys & dims[i].fkey)))
            sr_line_item(&l, ", ", "%s", dims[i].key);
    if (!changed[0])
        snprintf(buf, n, "%s", pr->name);
    else
        snprintf(buf, n, "custom (%s with %s changed)", pr->name, changed);
    return buf;
}

/* "A-B" or "A" with 1 <= A <= B: log.trace_steps. */
bool cfg_parse_step_range(const char *s, int64_t *a, int64_t *b) {
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s))
        return false;
    long long x = strtoll(s, &end, 10), y = x;
    if (*end == '-') {
        const char *t = end + 1;
        if (!isdigit((unsigned char)*t))
            return false;
        y = strtoll(t, &end, 10);
    }
    if (*end || errno || x < 1 || y < x)
        return false;
    *a = x;
    *b = y;
    return true;
}

sr_status sr_config_set_model_source(sr_config *cfg, const sr_config_model_source *src) {
    free(cfg->model_source);
    cfg->model_source = sr_malloc(sizeof *src);
    if (!cfg->model_source)
        return sr_error_oom("the model source");
    *cfg->model_source = *src;
    return SR_OK;
}

/* Every model key from cfg->model_source where the job leaves it unset;
 * one the job sets must agree (seq_len: at most the source's context). */
static sr_status finalize_from_source(sr_config *cfg) {
    const sr_config_model_source *m = cfg->model_source;
    /* seq_len when unset: the source's context, at most 4096 (a Llama-3
     * config declares 131072, which would size activations for it) */
    int64_t T = m->max_seq_len < 4096 ? m->max_seq_len : 4096;
    const sr_family *f = sr_family_get((int)m->arch);
    const struct {
        const char *key;
        int64_t *i;
        double *d;
        bool *b;
        int64_t iv;
        double dv;
        unsigned fkey; /* 0: every family's key */
    } k[] = {
        {"model.arch", &cfg->arch, NULL, NULL, m->arch, 0, 0},
        {"model.n_layer", &cfg->n_layer, NULL, NULL, m->n_layer, 0, 0},
        {"model.n_head", &cfg->n_head, NULL, NULL, m->n_head, 0, 0},
        {"model.n_embd", &cfg->n_embd, NULL, NULL, m->n_embd, 0, 0},
        {"model.vocab_size", &cfg->vocab_size, NULL, NULL, m->vocab_size, 0, 0},
        {"model.seq_len", &cfg->seq_len, NULL, NULL, T, 0, 0},
        {"model.n_kv_head", &cfg->n_kv_head, NULL, NULL, m->n_kv_head, 0, SR_FKEY_N_KV_HEAD},
        {"model.ffn_dim", &cfg->ffn_dim, NULL, NULL, m->ffn_dim, 0, SR_FKEY_FFN_DIM},
        {"model.norm_eps", NULL, &cfg->norm_eps, NULL, 0, m->norm_eps, SR_FKEY_NORM_EPS},
        {"model.rope_theta", NULL, &cfg->rope_theta, NULL, 0, m->rope_theta, SR_FKEY_ROPE},
        {"model.rope_scaling.factor", NULL, &cfg->rope_factor, NULL, 0, m->rope_factor, SR_FKEY_ROPE},
        {"model.rope_scaling.low_freq_factor", NULL, &cfg->rope_low_freq_factor, NULL, 0, m->rope_low_freq_factor,
         SR_FKEY_ROPE},
        {"model.rope_scaling.high_freq_factor", NULL, &cfg->rope_high_freq_factor, NULL, 0, m->rope_high_freq_factor,
         SR_FKEY_ROPE},
        {"model.rope_scaling.original_max_position", &cfg->rope_original_max_position, NULL, NULL,
         m->rope_original_max_position, 0, SR_FKEY_ROPE},
        {"model.tie_embeddings", NULL, NULL, &cfg->tie_embeddings, m->tie_embeddings, 0, SR_FKEY_TIE},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (k[i].fkey && !(f->keys & k[i].fkey))
            continue; /* a key the source's family lacks: finalize_family fills it as the family implies */
        if (!cfg_was_set(cfg, k[i].key)) {
            if (k[i].i)
                *k[i].i = k[i].iv;
            else if (k[i].d)
                *k[i].d = k[i].dv;
            else
                *k[i].b = k[i].iv != 0;
            continue;
        }
        bool seq = strcmp(k[i].key, "model.seq_len") == 0;
        bool agree = k[i].i   ? (seq ? *k[i].i <= m->max_seq_len : *k[i].i == k[i].iv)
                     : k[i].d ? *k[i].d == k[i].dv
                              : *k[i].b == (k[i].iv != 0);
        if (agree)
            continue;
        char w[1200], have[64], want[64];
        sr_config_where(cfg, k[i].key, w, sizeof w);
        if (k[i].i && strcmp(k[i].key, "model.arch") == 0) {
            snprintf(have, sizeof have, "%s", sr_family_get((int)*k[i].i)->name);
            snprintf(want, sizeof want, "%s", sr_family_get((int)k[i].iv)->name);
        } else if (k[i].i) {
            snprintf(have, sizeof have, "%lld", (long long)*k[i].i);
            snprintf(want, sizeof want, seq ? "at most %lld" : "%lld", (long long)(seq ? m->max_seq_len : k[i].iv));
        } else if (k[i].d) {
            snprintf(have, sizeof have, "%g", *k[i].d);
            snprintf(want, sizeof want, "%g", k[i].dv);
        } else {
            snprintf(have, sizeof have, "%s", *k[i].b ? "true" : "false");
            snprintf(want, sizeof want, "%s", k[i].iv ? "true" : "false");
        }
        return sr_error(SR_ERR_CONFIG,
                        "%s: %s is %s, and model.init's %s says %s (hint: leave the model keys out: the directory's "
                        "config.json gives them)",
                        w, k[i].key, have, m->origin, want);
    }
    return SR_OK;
}

/* The family's keys the job leaves unset (and a Hugging Face source did
 * not give: finalize_from_source): the preset's when it is of the job's
 * family; else what the family implies (a key it lacks: GPT-2's n_kv_head
 * n_head, ffn_dim 4 n_embd, tied) or its defaults (Llama: a SwiGLU width
 * of 8/3 n_embd rounded up to 64, rope_theta 10000, tied). */
static void fill_family_defaults(sr_config *cfg, int p, const sr_family *f) {
    const sr_family_preset *pr = &sr_family_presets[p];
    bool same = pr->arch == cfg->arch && !cfg->model_source;
#define UNSET(key, fk) (!cfg_was_set(cfg, key) && !(cfg->model_source && (f->keys & (fk))))
    if (UNSET("model.n_kv_head", SR_FKEY_N_KV_HEAD))
        cfg->n_kv_head = same && (f->keys & SR_FKEY_N_KV_HEAD) ? pr->n_kv_head : cfg->n_head;
    if (UNSET("model.ffn_dim", SR_FKEY_FFN_DIM)) {
        int64_t w = f->ffn_num * cfg->n_embd / f->ffn_den;
        cfg->ffn_dim = !(f->keys & SR_FKEY_FFN_DIM) ? w : same ? pr->ffn_dim : (w + 63) / 64 * 64;
    }
    if (UNSET("model.tie_embeddings", SR_FKEY_TIE))
        cfg->tie_embeddings = same ? pr->tie : true;
    if (UNSET("model.rope_theta", SR_FKEY_ROPE))
        cfg->rope_theta = same ? pr->rope_theta : SR_FAMILY_ROPE_THETA;
    if (UNSET("model.rope_scaling.factor", SR_FKEY_ROPE))
        cfg->rope_factor = same ? pr->rope_factor : 0;
    if (UNSET("model.rope_scaling.low_freq_factor", SR_FKEY_ROPE))
        cfg->rope_low_freq_factor = same ? pr->rope_low : SR_FAMILY_ROPE_LOW;
    if (UNSET("model.rope_scaling.high_freq_factor", SR_FKEY_ROPE))
        cfg->rope_high_freq_factor = same ? pr->rope_high : SR_FAMILY_ROPE_HIGH;
    if (UNSET("model.rope_scaling.original_max_position", SR_FKEY_ROPE))
        cfg->rope_original_max_position = same ? pr->rope_orig : SR_FAMILY_ROPE_ORIG;
#undef UNSET
}

/* The family and its keys from the preset where the job does not set
 * them; a key the family lacks set to another value than the family
 * implies is refused (it would be ignored), as are heads that do not group
 * and rotary heads of odd size. */
static sr_status finalize_family(sr_config *cfg, int p) {
    char w[1200];
    if (!cfg_was_set(cfg, "model.arch") && !cfg->model_source)
        cfg->arch = sr_family_presets[p].arch;
    const sr_family *f = sr_family_get((int)cfg->arch);
    /* set to what the family implies they are accepted: config show
     * prints them for any job, and its output must read back */
    const struct {
        const char *key;
        unsigned fkey;
        bool implied;
    } own[] = {
        {"model.n_kv_head", SR_FKEY_N_KV_HEAD, cfg->n_kv_head == cfg->n_head},
        {"model.ffn_dim", SR_FKEY_FFN_DIM, cfg->ffn_dim == f->ffn_num * cfg->n_embd / f->ffn_den},
        {"model.norm_eps", SR_FKEY_NORM_EPS, cfg->norm_eps == SR_FAMILY_NORM_EPS},
        {"model.rope_theta", SR_FKEY_ROPE, cfg->rope_theta == SR_FAMILY_ROPE_THETA},
        {"model.rope_scaling.factor", SR_FKEY_ROPE, cfg->rope_factor == 0},
        {"model.rope_scaling.low_freq_factor", SR_FKEY_ROPE, cfg->rope_low_freq_factor == SR_FAMILY_ROPE_LOW},
        {"model.rope_scaling.high_freq_factor", SR_FKEY_ROPE, cfg->rope_high_freq_factor == SR_FAMILY_ROPE_HIGH},
        {"model.rope_scaling.original_max_position", SR_FKEY_ROPE,
         cfg->rope_original_max_position == SR_FAMILY_ROPE_ORIG},
        {"model.tie_embeddings", SR_FKEY_TIE, cfg->tie_embeddings},
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!(f->keys & own[i].fkey) && cfg_was_set(cfg, own[i].key) && !own[i].implied) {
            char with[64], first[64];
            sr_family_list(own[i].fkey, with, sizeof with);
            snprintf(first, sizeof first, "%.*s", (int)strcspn(with, ","), with); /* the hint's family */
            sr_config_where(cfg, own[i].key, w, sizeof w);
            return sr_error(SR_ERR_CONFIG,
                            "%s: %s applies to model.arch: %s only; this job's model is %s (hint: model.arch: "
                            "%s, or a %s-* model.preset; or remove the key)",
                            w, own[i].key, with, f->name, first, first);
        }
    fill_family_defaults(cfg, p, f);
    if ((f->keys & SR_FKEY_N_KV_HEAD) && cfg->n_head % cfg->n_kv_head != 0) {
        sr_config_where(cfg, cfg_was_set(cfg, "model.n_kv_head") ? "model.n_kv_head" : "model.n_head", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.n_kv_head (%lld) must divide model.n_head (%lld): each key/value head serves a "
                        "whole group of query heads (hint: n_kv_head %lld divides it)",
                        w, (long long)cfg->n_kv_head, (long long)cfg->n_head,
                        (long long)cfg_nearest_divisor(cfg->n_head, cfg->n_kv_head));
    }
    if (!f->learned_positions && cfg->n_embd % cfg->n_head == 0 && (cfg->n_embd / cfg->n_head) % 2 != 0) {
        sr_config_where(cfg, cfg_was_set(cfg, "model.n_head") ? "model.n_head" : "model.n_embd", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: the head size n_embd / n_head (%lld) must be even for rotary positions, which rotate "
                        "pairs of channels (hint: another n_head)",
                        w, (long long)(cfg->n_embd / cfg->n_head));
    }
    if ((f->keys & SR_FKEY_ROPE) && cfg->rope_factor > 0 && !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor)) {
        sr_config_where(cfg, "model.rope_scaling.high_freq_factor", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.rope_scaling.high_freq_factor (%g) must exceed low_freq_factor (%g) (hint: "
                        "Llama-3 uses 4 and 1)",
                        w, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
    }
    return SR_OK;
}

sr_status sr_config_finalize(sr_config *cfg) {
    char w[1200], w2[1200];
    int p = (int)cfg->model_preset;
    if (cfg->model_source && cfg_was_set(cfg, "model.preset") && cfg->origin[cfg_key_index("model.preset")].file &&
        strcmp(cfg->origin[cfg_key_index("model.preset")].file, SR_CONFIG_DEFAULT_JOB) == 0) {
        /* the embedded default job's preset yields to the directory's
         * config.json (the model line says so); one the user wrote does not */
        cfg->preset_yielded = true;
        sr_status rst = cfg_reset_key(cfg, cfg_key_index("model.preset"));
        if (rst != SR_OK)
            return rst;
        p = (int)cfg->model_preset;
    }
    if (cfg->model_source && cfg_was_set(cfg, "model.preset")) {
        sr_config_where(cfg, "model.preset", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.preset and a Hugging Face directory in model.init (%s) both declare the model "
                        "(hint: remove model.preset)",
                        w, cfg->model_source->origin);
    }
    if (!cfg_was_set(cfg, "model.n_layer"))
        cfg->n_layer = sr_family_presets[p].n_layer;
    if (!cfg_was_set(cfg, "model.n_head"))
        cfg->n_head = sr_family_presets[p].n_head;
    if (!cfg_was_set(cfg, "model.n_embd"))
        cfg->n_embd = sr_family_presets[p].n_embd;
    if (!cfg_was_set(cfg, "model.vocab_size"))
        cfg->vocab_size = sr_family_presets[p].vocab_size;
    if (!cfg_was_set(cfg, "model.seq_len"))
        cfg->seq_len = sr_family_presets[p].seq_len;
    sr_status st = cfg->model_source ? finalize_from_source(cfg) : SR_OK;
    if (st == SR_OK)
        st = finalize_family(cfg, p);
    if (st != SR_OK)
        return st;

    if (cfg->n_embd % cfg->n_head != 0) {
        sr_config_where(cfg, cfg_was_set(cfg, "model.n_embd") ? "model.n_embd" : "model.n_head", w, sizeof w);
        return sr_error(
            SR_ERR_CONFIG,
            "%s: model.n_embd (%lld) must be divisible by model.n_head (%lld) (hint: n_head %lld divides it)", w,
            (long long)cfg->n_embd, (long long)cfg->n_head, (long long)cfg_nearest_divisor(cfg->n_embd, cfg->n_head));
    }
    if (cfg->min_lr > cfg->lr) {
        sr_config_where(cfg, cfg_was_set(cfg, "train.min_lr") ? "train.min_lr" : "train.lr", w, sizeof w);
        return sr_error(SR_ERR_CONFIG, "%s: train.min_lr (%g) must not exceed train.lr (%g)", w, cfg->min_lr, cfg->lr);
    }
    /* whatever the number of ranks, the batch splits into micro-batches */
    if (cfg->micro_batch > 0 && cfg->batch_size % cfg->micro_batch != 0) {
        sr_config_where(cfg, "train.batch_size", w, sizeof w);
        sr_config_where(cfg, "train.micro_batch", w2, sizeof w2);
        return sr_error(SR_ERR_CONFIG,
                        "%s: train.batch_size (%lld) is not a whole multiple of train.micro_batch (%lld); "
                        "micro_batch set at %s (hint: choose batch_size = micro_batch x ranks x accumulation steps)",
                        w, (long long)cfg->batch_size, (long long)cfg->micro_batch, w2);
    }
    cfg->log_trace_first = cfg->log_trace_last = 0;
    if (cfg->log_trace_steps && cfg->log_trace_steps[0]) {
        sr_config_where(cfg, "log.trace_steps", w, sizeof w);
        if (!cfg_parse_step_range(cfg->log_trace_steps, &cfg->log_trace_first, &cfg->log_trace_last))
            return sr_error(SR_ERR_CONFIG,
                            "%s: log.trace_steps '%s' is not a range of steps A-B with 1 <= A <= B (hint: 10-12 traces "
                            "steps 10, 11 and 12; a single step is 10)",
                            w, cfg->log_trace_steps);
        if (cfg->log_flight_recorder == 0) {
            sr_config_where(cfg, "log.flight_recorder", w2, sizeof w2);
            return sr_error(SR_ERR_CONFIG,
                            "%s: log.trace_steps needs the flight recorder, whose records are the trace's collectives, "
                            "but log.flight_recorder is 0 at %s (hint: remove log.flight_recorder: 0)",
                            w, w2);
        }
    }
    if (cfg->preempt_exit_status == sr_status_exit_code(SR_ERR_STALLED)) {
        sr_config_where(cfg, "preemption.exit_status", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: preemption.exit_status %lld is the crash-loop guard's status (a run that must not be "
                        "requeued) (hint: keep the default 75, and RequeueExit=75 in slurm.conf)",
                        w, (long long)cfg->preempt_exit_status);
    }
    if (cfg->blocks_per_unit > cfg->n_layer) {
        sr_config_where(cfg, "sharding.blocks_per_unit", w, sizeof w);
        return sr_error(SR_ERR_CONFIG, "%s: sharding.blocks_per_unit (%lld) exceeds model.n_layer (%lld)", w,
                        (long long)cfg->blocks_per_unit, (long long)cfg->n_layer);
    }
    return SR_OK;
}

sr_status sr_config_check_model(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab_size, int64_t seq_len) {
    const struct {
        const char *key;
        int64_t v;
    } dims[] = {{"model.n_layer", n_layer},
                {"model.n_head", n_head},
                {"model.n_embd", n_embd},
                {"model.vocab_size", vocab_size},
                {"model.seq_len", seq_len}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const sr_key *k = &cfg_keys[cfg_key_index(dims[i].key)];
        if ((double)dims[i].v < k->min || (double)dims[i].v > k->max) {
            char expect[128];
            cfg_fmt_range_int(expect, sizeof expect, k);
            return sr_error(SR_ERR_CONFIG, "%s: %lld is out of range; expected %s", k->key, (long long)dims[i].v,
                            expect);
        }
    }
    if (n_embd % n_head != 0)
        return sr_error(SR_ERR_CONFIG, "model.n_embd (%lld) must be divisible by model.n_head (%lld)",
                        (long long)n_embd, (long long)n_head);
    return SR_OK;
}
