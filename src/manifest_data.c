/* manifest_data.c — the manifest's data: the record of what a run trains
 * on (provenance: the tokenizer, every shard with its source and SHA-256,
 * the fingerprints) and data.mixture's state (each source's cursor,
 * tokens, epoch, weight and base; the origin; the weights' history),
 * rendered and parsed back.  Part of the manifest module (manifest.h). */
#include "srconfig.h"

#include "manifest_impl.h"

#include <string.h>

#include "mem.h"

/* data.mixture's state: each source's cursor, tokens, epoch, weight and
 * base (its cursor when the weights were set), the origin, the history. */
void man_render_mixture(man_emitter *e, const sr_mix_state *m, int T) {
    man_e_str(e, "mixture");
    man_e_map(e, true, false);
    man_kv_u64(e, "origin", m->origin);
    man_e_str(e, "sources");
    man_e_seq(e, true, false);
    for (int i = 0; i < m->n; i++) {
        man_e_map(e, true, true);
        man_kv_str(e, "name", m->src[i].name);
        man_kv_u64(e, "cursor", m->src[i].cursor);
        man_kv_u64(e, "tokens", m->src[i].cursor * (uint64_t)T);
        man_kv_u64(e, "epoch", m->src[i].epoch);
        man_kv_dbl_short(e, "weight", m->src[i].weight);
        man_kv_u64(e, "base", m->src[i].base);
        man_e_map(e, false, true);
    }
    man_e_seq(e, false, false);
    man_e_str(e, "history");
    man_e_seq(e, true, false);
    for (int i = 0; i < m->nhistory; i++) {
        man_e_map(e, true, true);
        man_kv_u64(e, "step", (uint64_t)m->history[i].step);
        man_kv_u64(e, "cursor", m->history[i].cursor);
        man_kv_str(e, "weights", m->history[i].weights);
        man_e_map(e, false, true);
    }
    man_e_seq(e, false, false);
    man_e_map(e, false, false);
}

void man_render_data(man_emitter *e, const sr_data_record *d) {
    man_e_str(e, "provenance");
    man_e_map(e, true, false);
    man_kv_str(e, "fingerprint", d->fingerprint);
    if (d->tokenizer_sha256[0]) {
        man_e_str(e, "tokenizer");
        man_e_map(e, true, false);
        man_kv_str(e, "path", d->tokenizer);
        man_kv_str(e, "sha256", d->tokenizer_sha256);
        man_kv_str(e, "pattern", d->tokenizer_pattern);
        man_e_map(e, false, false);
    }
    if (d->nsources > 0) {
        man_e_str(e, "sources");
        man_e_seq(e, true, false);
        for (int i = 0; i < d->nsources; i++) {
            man_e_map(e, true, true);
            man_kv_str(e, "name", d->sources[i].name);
            man_kv_str(e, "fingerprint", d->sources[i].fingerprint);
            man_e_map(e, false, true);
        }
        man_e_seq(e, false, false);
    }
    man_e_str(e, "shards");
    man_e_seq(e, true, false);
    for (int i = 0; i < d->n; i++) {
        man_e_map(e, true, true);
        man_kv_str(e, "split", d->shards[i].split);
        if (d->shards[i].source[0])
            man_kv_str(e, "source", d->shards[i].source);
        man_kv_str(e, "path", d->shards[i].path);
        man_kv_u64(e, "bytes", d->shards[i].bytes);
        man_kv_str(e, "sha256", d->shards[i].sha256);
        man_e_map(e, false, true);
    }
    man_e_seq(e, false, false);
    man_e_map(e, false, false);
}

/* data.mixture's state (version 4; absent: one source). */
sr_status man_parse_mixture(man_pctx *p, yaml_node_t *mix, sr_mix_state *m) {
    yaml_node_t *srcs = man_mget(p, mix, "sources"), *hist = man_mget(p, mix, "history");
    if (!srcs || srcs->type != YAML_SEQUENCE_NODE || man_seq_len(srcs) == 0 || man_seq_len(srcs) > SR_MIX_MAX_SOURCES)
        return man_perr(p, srcs ? srcs : mix, "data.mixture: expected a list 'sources' of 1 to %d", SR_MIX_MAX_SOURCES);
    if (hist && (hist->type != YAML_SEQUENCE_NODE || man_seq_len(hist) > SR_MIX_MAX_HISTORY))
        return man_perr(p, hist, "data.mixture: history: expected a list of at most %d", SR_MIX_MAX_HISTORY);
    sr_status st = man_get_u64(p, mix, "origin", UINT64_MAX, &m->origin);
    for (size_t i = 0; i < man_seq_len(srcs) && st == SR_OK; i++) {
        yaml_node_t *it = man_seq_item(p, srcs, i);
        st = man_get_str(p, it, "name", m->src[i].name, sizeof m->src[i].name);
        if (st == SR_OK)
            st = man_get_u64(p, it, "cursor", UINT64_MAX / 2, &m->src[i].cursor);
        if (st == SR_OK)
            st = man_get_u64(p, it, "epoch", UINT64_MAX / 2, &m->src[i].epoch);
        if (st == SR_OK)
            st = man_get_u64(p, it, "base", m->src[i].cursor, &m->src[i].base);
        if (st == SR_OK)
            st = man_get_dbl(p, it, "weight", &m->src[i].weight);
        if (st == SR_OK && !(m->src[i].weight > 0 && m->src[i].weight <= 1e9))
            st = man_perr(p, man_mget(p, it, "weight"), "data.mixture: source %s: weight: expected a number > 0",
                          m->src[i].name);
        if (st == SR_OK && !sr_config_mixture_name_ok(m->src[i].name))
            st = man_perr(p, man_mget(p, it, "name"), "data.mixture: a source's name '%.60s' is not one a job can give",
                          m->src[i].name);
        for (size_t j = 0; st == SR_OK && j < i; j++)
            if (strcmp(m->src[j].name, m->src[i].name) == 0)
                st =
                    man_perr(p, man_mget(p, it, "name"), "data.mixture: the source %s is listed twice", m->src[i].name);
        m->n = (int)i + 1;
    }
    for (size_t i = 0; hist && i < man_seq_len(hist) && st == SR_OK; i++) {
        yaml_node_t *it = man_seq_item(p, hist, i);
        uint64_t step = 0;
        st = man_get_u64(p, it, "step", INT64_MAX, &step);
        m->history[i].step = (int64_t)step;
        if (st == SR_OK)
            st = man_get_u64(p, it, "cursor", UINT64_MAX, &m->history[i].cursor);
        if (st == SR_OK)
            st = man_get_str(p, it, "weights", m->history[i].weights, sizeof m->history[i].weights);
        m->nhistory = (int)i + 1;
    }
    return st;
}

/* The data record: optional (checkpoints written before it have none). */
sr_status man_parse_data(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    yaml_node_t *n = man_mget(p, root, "provenance");
    if (!n)
        return SR_OK;
    sr_data_record *d = &mf->data;
    sr_status st = man_get_str(p, n, "fingerprint", d->fingerprint, sizeof d->fingerprint);
    yaml_node_t *tok = man_mget(p, n, "tokenizer");
    if (st == SR_OK && tok)
        st = man_get_str(p, tok, "path", d->tokenizer, sizeof d->tokenizer);
    if (st == SR_OK && tok)
        st = man_get_str(p, tok, "sha256", d->tokenizer_sha256, sizeof d->tokenizer_sha256);
    if (st == SR_OK && tok)
        st = man_get_str(p, tok, "pattern", d->tokenizer_pattern, sizeof d->tokenizer_pattern);
    yaml_node_t *sh = man_mget(p, n, "shards");
    if (st == SR_OK && (!sh || sh->type != YAML_SEQUENCE_NODE))
        return man_perr(p, sh ? sh : n, "provenance: expected a list 'shards'");
    if (st != SR_OK)
        return st;
    size_t k = man_seq_len(sh);
    d->shards = sr_calloc(k + 1, sizeof *d->shards);
    if (!d->shards)
        return sr_error_oom("the manifest's data record");
    for (size_t i = 0; i < k && st == SR_OK; i++) {
        yaml_node_t *item = man_seq_item(p, sh, i);
        sr_data_shard_record *r = &d->shards[i];
        st = man_get_str(p, item, "split", r->split, sizeof r->split);
        if (st == SR_OK && man_mget(p, item, "source"))
            st = man_get_str(p, item, "source", r->source, sizeof r->source);
        if (st == SR_OK)
            st = man_get_str(p, item, "path", r->path, sizeof r->path);
        if (st == SR_OK)
            st = man_get_u64(p, item, "bytes", UINT64_MAX / 2, &r->bytes);
        if (st == SR_OK)
            st = man_get_str(p, item, "sha256", r->sha256, sizeof r->sha256);
        d->n = (int)i + 1;
    }
    yaml_node_t *srcs = st == SR_OK ? man_mget(p, n, "sources") : NULL;
    if (srcs && (srcs->type != YAML_SEQUENCE_NODE || man_seq_len(srcs) > SR_MIX_MAX_SOURCES))
        return man_perr(p, srcs, "provenance: sources: expected a list of at most %d", SR_MIX_MAX_SOURCES);
    for (size_t i = 0; srcs && i < man_seq_len(srcs) && st == SR_OK; i++) {
        yaml_node_t *item = man_seq_item(p, srcs, i);
        st = man_get_str(p, item, "name", d->sources[i].name, sizeof d->sources[i].name);
        if (st == SR_OK)
            st = man_get_str(p, item, "fingerprint", d->sources[i].fingerprint, sizeof d->sources[i].fingerprint);
        d->nsources = (int)i + 1;
    }
    mf->has_data = st == SR_OK;
    return st;
}
