/* mixture.c — the training data as a run draws it: one source (data.train
 * or the embedded corpus) or data.mixture's, the smooth weighted
 * round-robin that assigns each global sequence to a source, and the
 * state checkpoints record; see mixture.h.  Written here because no
 * library here schedules data sources (it is a few lines over sr_data). */
#include "srconfig.h"

#include "mixture.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "line.h"
#include "mem.h"
#include "rng.h"
#include "testhook.h"

typedef struct {
    const char *name; /* the config's ("" for data.train) */
    sr_data *data;
    double share; /* weight / the sum */
} source;

struct sr_mix {
    source *src;
    int n;
    bool mixture, stop;
    int T;
    sr_mix_state st; /* where the state stands */
    /* the plan of the batch at plan_at (plan_n sequences): each one's
     * source and index in that source's order */
    uint64_t plan_at, plan_n;
    bool planned;
    int *plan_src;
    uint64_t *plan_idx;
    size_t plan_cap;
};

void sr_mix_close(sr_mix *m) {
    if (!m)
        return;
    for (int k = 0; k < m->n; k++)
        sr_data_close(m->src[k].data);
    free(m->src);
    free(m->plan_src);
    free(m->plan_idx);
    free(m);
}

/* The weights "NAME=W ..." of the state (history entries). */
static void weights_text(const sr_mix_state *s, char *buf, size_t n) {
    sr_line l = sr_line_on(buf, n);
    for (int k = 0; k < s->n; k++)
        sr_line_add(&l, "%s%s=%g", k ? " " : "", s->src[k].name, s->src[k].weight);
}

/* A new schedule at global cursor `cursor` (step `step`): the origin and
 * each source's base move there, the weights go into the history (the
 * oldest entry after the first dropped when it is full). */
static void new_segment(sr_mix_state *s, int64_t step, uint64_t cursor) {
    s->origin = cursor;
    for (int k = 0; k < s->n; k++)
        s->src[k].base = s->src[k].cursor;
    if (s->nhistory == SR_MIX_MAX_HISTORY) {
        memmove(&s->history[1], &s->history[2], (SR_MIX_MAX_HISTORY - 2) * sizeof s->history[0]);
        s->nhistory--;
    }
    s->history[s->nhistory].step = step;
    s->history[s->nhistory].cursor = cursor;
    weights_text(s, s->history[s->nhistory].weights, sizeof s->history[0].weights);
    s->nhistory++;
}

sr_status sr_mix_open(sr_mix **out, const sr_config *cfg, int T) {
    *out = NULL;
    sr_mix *m = sr_calloc(1, sizeof *m);
    const sr_mixture *mx = &cfg->data_mixture;
    int n = mx->count > 0 ? mx->count : 1;
    if (m)
        m->src = sr_calloc((size_t)n, sizeof *m->src);
    if (!m || !m->src) {
        sr_mix_close(m);
        return sr_error_oom("the training data");
    }
    m->T = T;
    m->mixture = mx->count > 0;
    m->stop = m->mixture && cfg->data_mixture_end == SR_MIX_END_STOP;
    double sum = 0;
    for (int k = 0; k < mx->count; k++)
        sum += mx->src[k].weight;
    sr_status st = SR_OK;
    for (int k = 0; k < n && st == SR_OK; k++, m->n++) {
        source *s = &m->src[k];
        if (m->mixture) {
            s->name = mx->src[k].name;
            s->share = mx->src[k].weight / sum;
            st = sr_data_open(&s->data, &mx->src[k].train, T, cfg->vocab_size);
            if (st != SR_OK)
                st = sr_error_wrap(st, "data.mixture source %s", s->name);
            sr_fmt(m->st.src[k].name, sizeof m->st.src[k].name, "%s", s->name);
            m->st.src[k].weight = mx->src[k].weight;
        } else {
            s->name = "";
            s->share = 1;
            st = cfg->data_train.count ? sr_data_open(&s->data, &cfg->data_train, T, cfg->vocab_size)
                                       : sr_data_open_embedded(&s->data, SR_DATA_TRAIN, T, cfg->vocab_size);
        }
    }
    if (st != SR_OK) {
        sr_mix_close(m);
        return st;
    }
    if (m->mixture) {
        m->st.n = n;
        new_segment(&m->st, 0, 0);
        m->plan_cap = (size_t)cfg->batch_size;
        m->plan_src = sr_malloc(m->plan_cap * sizeof *m->plan_src);
        m->plan_idx = sr_malloc(m->plan_cap * sizeof *m->plan_idx);
        if (!m->plan_src || !m->plan_idx) {
            sr_mix_close(m);
            return sr_error_oom("the data mixture's plan");
        }
    }
    *out = m;
    return SR_OK;
}

bool sr_mix_is_mixture(const sr_mix *m) { return m->mixture; }

int sr_mix_count(const sr_mix *m) { return m->n; }

const sr_data *sr_mix_data(const sr_mix *m, int k, const char **name) {
    *name = m->src[k].name;
    return m->src[k].data;
}

void sr_mix_describe(const sr_mix *m, char *buf, size_t n) {
    sr_line l = sr_line_on(buf, n);
    for (int k = 0; k < m->n; k++) {
        if (m->mixture)
            sr_line_add(&l, "%ssource %s (weight %g, %.1f%% of the sequences): %s", k ? "\n" : "", m->src[k].name,
                        m->st.src[k].weight, 100.0 * m->src[k].share, sr_data_describe(m->src[k].data));
        else
            sr_line_add(&l, "%s", sr_data_describe(m->src[k].data));
    }
}

/* The source of `prior` named `name`, or -1. */
static int find(const sr_mix_state *prior, const char *name) {
    for (int j = 0; j < prior->n; j++)
        if (strcmp(prior->src[j].name, name) == 0)
            return j;
    return -1;
}

void sr_mix_resume(sr_mix *m, int64_t step, uint64_t cursor, const sr_mix_state *prior) {
    m->planned = false;
    if (!m->mixture || (step == 0 && cursor == 0))
        return;
    sr_mix_state *s = &m->st;
    bool same = prior->n == s->n;
    char change[SR_MIX_MAX_SOURCES * (2 * SR_MIX_NAME_MAX + 48)];
    sr_line l = sr_line_on(change, sizeof change);
    for (int k = 0; k < s->n; k++) {
        int j = find(prior, s->src[k].name);
        s->src[k].cursor = j >= 0 ? prior->src[j].cursor : 0;
        s->src[k].base = j >= 0 ? prior->src[j].base : 0;
        if (j < 0) {
            sr_line_add(&l, "%s%s added (from its start)", l.len ? ", " : "", s->src[k].name);
            same = false;
        } else if (prior->src[j].weight != s->src[k].weight) {
            sr_line_add(&l, "%s%s %g -> %g", l.len ? ", " : "", s->src[k].name, prior->src[j].weight, s->src[k].weight);
            same = false;
        }
    }
    for (int j = 0; j < prior->n; j++)
        if (find(s, prior->src[j].name) < 0)
            sr_line_add(&l, "%s%s removed", l.len ? ", " : "", prior->src[j].name);
    for (int k = 0; k < s->n; k++)
        s->src[k].epoch = s->src[k].cursor / sr_data_windows(m->src[k].data);
    /* the history so far (a checkpoint of one source has none) */
    s->nhistory = prior->nhistory;
    memcpy(s->history, prior->history, sizeof s->history);
    if (same && prior->n > 0) {
        s->origin = prior->origin;
        return;
    }
    bool say = sr_log_rank() <= 0; /* rank 0 says it */
    if (say && prior->n == 0)
        sr_log_warn("data.mixture: the checkpoint of step %lld trained on one source (data.train); the mixture "
                    "starts at its cursor %llu, each source from its start",
                    (long long)step, (unsigned long long)cursor);
    else if (say)
        sr_log_warn("data.mixture: the weights changed since the checkpoint of step %lld (%s): each source continues "
                    "from its cursor under the new weights, the schedule anew from global cursor %llu (the manifest "
                    "keeps the history)",
                    (long long)step, change, (unsigned long long)cursor);
    new_segment(s, step, cursor);
}

/* The plan of the batch at `cursor` (batch sequences).  SR_ERR_INTERNAL
 * when out of memory (sized for train.batch_size by sr_mix_open). */
static sr_status plan(sr_mix *m, uint64_t cursor, uint64_t batch) {
    if (m->planned && m->plan_at == cursor && m->plan_n == batch)
        return SR_OK;
    if (batch > m->plan_cap) {
        int *ps = sr_realloc(m->plan_src, batch * sizeof *ps);
        if (ps)
            m->plan_src = ps;
        uint64_t *pi = ps ? sr_realloc(m->plan_idx, batch * sizeof *pi) : NULL;
        if (!pi)
            return sr_error_oom("the data mixture's plan");
        m->plan_idx = pi;
        m->plan_cap = batch;
    }
    const sr_mix_state *s = &m->st;
    uint64_t fed[SR_MIX_MAX_SOURCES]; /* d_k: fed since the origin */
    for (int k = 0; k < m->n; k++)
        fed[k] = s->src[k].cursor - s->src[k].base;
    for (uint64_t i = 0; i < batch; i++) {
        double pos = (double)(cursor + i - s->origin + 1);
        int best = 0;
        double best_v = -INFINITY;
        for (int k = 0; k < m->n; k++) {
            double v = pos * m->src[k].share - (double)fed[k];
            if (v > best_v) {
                best_v = v;
                best = k;
            }
        }
        m->plan_src[i] = best;
        m->plan_idx[i] = s->src[best].base + fed[best];
        fed[best]++;
    }
    m->plan_at = cursor;
    m->plan_n = batch;
    m->planned = true;
    return SR_OK;
}

/* Source s's seed: train.seed mixed with its name (each source its own
 * seeded order). */
static uint64_t source_seed(const source *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = s->name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return sr_rng_mix(seed ^ h);
}

/* SHARDRUN_TEST_DUMP_SEQS: one line per sequence, "GLOBAL SOURCE INDEX
 * WINDOW", appended whole (O_APPEND: the ranks' lines never interleave). */
static void dump(const char *path, uint64_t global, const char *name, uint64_t idx, uint64_t window) {
    char line[160];
    int n = snprintf(line, sizeof line, "%llu %s %llu %llu\n", (unsigned long long)global, name[0] ? name : "-",
                     (unsigned long long)idx, (unsigned long long)window);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) != n)
            sr_log_warn("SHARDRUN_TEST_DUMP_SEQS: a short write to %s", path);
        close(fd);
    }
}

sr_status sr_mix_batch(sr_mix *m, uint64_t cursor, uint64_t batch, uint64_t off, int count, uint64_t seed, int *inputs,
                       int *targets) {
    const char *dumpto = sr_testhook()->dump_seqs;
    if (!m->mixture) {
        sr_data_batch(m->src[0].data, cursor + off, count, true, seed, inputs, targets);
        for (int b = 0; dumpto[0] && b < count; b++)
            dump(dumpto, cursor + off + (uint64_t)b, "", cursor + off + (uint64_t)b,
                 sr_data_window_of(m->src[0].data, cursor + off + (uint64_t)b, true, seed));
        return SR_OK;
    }
    sr_status st = plan(m, cursor, batch);
    for (int b = 0; st == SR_OK && b < count; b++) {
        uint64_t i = off + (uint64_t)b;
        const source *s = &m->src[m->plan_src[i]];
        uint64_t sseed = source_seed(s, seed);
        sr_data_batch(s->data, m->plan_idx[i], 1, true, sseed, inputs + (size_t)b * m->T, targets + (size_t)b * m->T);
        if (dumpto[0])
            dump(dumpto, cursor + i, s->name, m->plan_idx[i], sr_data_window_of(s->data, m->plan_idx[i], true, sseed));
    }
    return st;
}

bool sr_mix_exhausted(sr_mix *m, uint64_t cursor, uint64_t batch, const char **name) {
    if (!m->stop || plan(m, cursor, batch) != SR_OK) /* (out of memory: the batch itself fails) */
        return false;
    for (uint64_t i = 0; i < batch; i++) {
        const source *s = &m->src[m->plan_src[i]];
        if (m->plan_idx[i] >= sr_data_windows(s->data)) {
            *name = s->name;
            return true;
        }
    }
    return false;
}

sr_status sr_mix_advance(sr_mix *m, uint64_t cursor, uint64_t batch) {
    if (!m->mixture)
        return SR_OK;
    sr_status st = plan(m, cursor, batch);
    if (st != SR_OK)
        return st;
    for (uint64_t i = 0; i < batch; i++)
        m->st.src[m->plan_src[i]].cursor++;
    for (int k = 0; k < m->n; k++)
        m->st.src[k].epoch = m->st.src[k].cursor / sr_data_windows(m->src[k].data);
    m->planned = false;
    return SR_OK;
}

void sr_mix_state_get(const sr_mix *m, sr_mix_state *out) {
    if (!m->mixture) {
        out->n = 0;
        out->nhistory = 0;
        return;
    }
    *out = m->st;
}

void sr_mix_tokens_json(const sr_mix *m, char *buf, size_t n) {
    sr_line l = sr_line_on(buf, n);
    for (int k = 0; m->mixture && k < m->n; k++)
        sr_line_add(&l, "%s\"%s\":%llu", k ? "," : "{", m->st.src[k].name,
                    (unsigned long long)(m->st.src[k].cursor * (uint64_t)m->T));
    if (m->mixture)
        sr_line_add(&l, "}");
}
