/* manifest.c — rendering (libyaml emitter) and parsing (libyaml document)
 * of checkpoint manifests; see manifest.h and shardrun-checkpoint(5). */
#include "srconfig.h"

#include "manifest.h"
#include "manifest_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "config.h"
#include "fsio.h"
#include "mem.h"
#include "shardfile.h"
#include "yamlload.h"

#define MANIFEST_MAX ((size_t)256 << 20)

/* The saved states, in file order. */
static const char *const state_names[SR_NSTATE] = {"params", "adam_m", "adam_v"};

void sr_manifest_free(sr_manifest *mf) {
    for (int i = 0; mf->files && i < mf->nfiles; i++) {
        free(mf->files[i].slices);
        free(mf->files[i].sha);
    }
    free(mf->files);
    for (int i = 0; i < mf->nconfig; i++) {
        free(mf->ckeys[i]);
        free(mf->cvals[i]);
    }
    free(mf->ckeys);
    free(mf->cvals);
    free(mf->data.shards);
    *mf = (sr_manifest){0};
}

static bool unhex32(const char *s, unsigned char out[32]) {
    if (strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return false;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(v << 4);
        else
            out[i / 2] |= (unsigned char)v;
    }
    return true;
}

void sr_manifest_model_hash(const sr_model_dims *d0, char out[65]) {
    char text[512];
    sr_model_dims c = *d0, *d = &c;
    sr_model_dims_complete(d);
    /* GPT-2's text is the one versions 1 and 2 hashed: their hashes stay;
     * a family with keys of its own hashes them all */
    const sr_family *f = sr_family_get(d->arch);
    int n = snprintf(text, sizeof text,
                     "shardrun gpt2 n_layer=%d n_head=%d n_embd=%d vocab_size=%d padded_vocab=%d seq_len=%d "
                     "dtype=f32 layout=unit-major-v1",
                     d->L, d->NH, d->C, d->V, d->Vp, d->T);
    if (f->keys)
        n = snprintf(text, sizeof text,
                     "shardrun %s n_layer=%d n_head=%d n_kv_head=%d n_embd=%d ffn_dim=%d vocab_size=%d "
                     "padded_vocab=%d seq_len=%d tied=%d norm_eps=%.17g rope_theta=%.17g rope_scaling=%.17g/%.17g/"
                     "%.17g/%d dtype=f32 layout=unit-major-v1",
                     f->name, d->L, d->NH, d->NKV, d->C, d->F, d->V, d->Vp, d->T, !d->untied, d->norm_eps,
                     d->rope_theta, d->rope.factor, d->rope.factor > 0 ? d->rope.low_freq_factor : 0,
                     d->rope.factor > 0 ? d->rope.high_freq_factor : 0,
                     d->rope.factor > 0 ? d->rope.original_max_position : 0);
    unsigned char h[32];
    sr_sha256(text, (size_t)n, h);
    sr_hex(h, 32, out);
}

uint64_t sr_manifest_section(const sr_manifest *mf, uint64_t elements, int k) {
    uint64_t off = SR_SHARD_HEADER_BYTES;
    for (int j = 0; j < k; j++)
        off += elements * sr_dtype_size(mf->state_dtype[j]);
    return off;
}

uint64_t sr_manifest_file_bytes(const sr_manifest *mf, uint64_t elements) {
    return sr_manifest_section(mf, elements, SR_NSTATE);
}

bool sr_manifest_shard_name(const char *s) {
    if (strlen(s) != 15 || strncmp(s, "shard_", 6) != 0 || strcmp(s + 11, ".bin") != 0)
        return false;
    for (int i = 6; i < 11; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* rendering */

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} membuf;

static int membuf_write(void *data, unsigned char *buffer, size_t size) {
    membuf *b = data;
    if (b->len + size + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (b->len + size + 1 > cap)
            cap *= 2;
        char *nb = sr_realloc(b->buf, cap);
        if (!nb) {
            b->oom = true;
            return 0;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, buffer, size);
    b->len += size;
    b->buf[b->len] = '\0';
    return 1;
}

static void emit(man_emitter *e, yaml_event_t *ev) {
    if (!e->ok) {
        yaml_event_delete(ev);
        return;
    }
    if (!yaml_emitter_emit(&e->em, ev))
        e->ok = false;
}

void man_e_str(man_emitter *e, const char *s) {
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1, YAML_ANY_SCALAR_STYLE);
    emit(e, &ev);
}

static void e_u64(man_emitter *e, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    man_e_str(e, b);
}

void man_e_map(man_emitter *e, bool start, bool flow) {
    yaml_event_t ev;
    if (start)
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                            flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
    else
        yaml_mapping_end_event_initialize(&ev);
    emit(e, &ev);
}

void man_e_seq(man_emitter *e, bool start, bool flow) {
    yaml_event_t ev;
    if (start)
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                             flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
    else
        yaml_sequence_end_event_initialize(&ev);
    emit(e, &ev);
}

void man_kv_str(man_emitter *e, const char *k, const char *v) {
    man_e_str(e, k);
    man_e_str(e, v);
}

void man_kv_u64(man_emitter *e, const char *k, uint64_t v) {
    man_e_str(e, k);
    e_u64(e, v);
}

static void kv_dbl(man_emitter *e, const char *k, double v) {
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    man_kv_str(e, k, b);
}

/* The shortest decimal that reads back as v (the model's keys: 1e-05, not
 * 1.0000000000000001e-05). */
void man_kv_dbl_short(man_emitter *e, const char *k, double v) {
    char b[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v)
            break;
    }
    man_kv_str(e, k, b);
}

static void render_progress(man_emitter *e, const sr_manifest *mf) {
    man_kv_u64(e, "step", (uint64_t)mf->step);
    man_kv_u64(e, "tokens", mf->tokens);
    man_e_str(e, "data");
    man_e_map(e, true, false);
    man_kv_u64(e, "cursor", mf->cursor);
    man_kv_str(e, "cursor_unit", "sequences of the global seeded order consumed; step s+1 starts here");
    if (mf->mix.n > 0)
        man_render_mixture(e, &mf->mix, (int)mf->dims.T);
    man_e_map(e, false, false);
    man_e_str(e, "rng");
    man_e_map(e, true, false);
    man_kv_u64(e, "seed", mf->seed);
    man_kv_str(e, "kind", "counter-based: init and data order are functions of (seed, index); no other state");
    man_e_map(e, false, false);
    man_e_str(e, "lr_schedule");
    man_e_map(e, true, false);
    man_kv_str(e, "schedule", mf->schedule);
    kv_dbl(e, "lr", mf->lr);
    kv_dbl(e, "min_lr", mf->min_lr);
    man_kv_u64(e, "warmup_steps", mf->warmup_steps);
    man_kv_u64(e, "steps", mf->steps);
    kv_dbl(e, "next_lr", mf->next_lr);
    man_e_map(e, false, false);
}

static void render_world_model(man_emitter *e, const sr_manifest *mf) {
    man_e_str(e, "world");
    man_e_map(e, true, false);
    man_kv_u64(e, "size", (uint64_t)mf->world);
    man_e_str(e, "mesh");
    man_e_map(e, true, true);
    man_kv_u64(e, "shard", (uint64_t)mf->mesh_shard);
    man_kv_u64(e, "replicate", (uint64_t)mf->mesh_replicate);
    man_e_map(e, false, true);
    man_kv_str(e, "isa", mf->isa);
    man_e_map(e, false, false);
    man_e_str(e, "model");
    man_e_map(e, true, false);
    const sr_model_dims *d = &mf->dims;
    const sr_family *f = sr_family_get(d->arch);
    man_kv_str(e, "arch", f->name);
    man_kv_u64(e, "n_layer", (uint64_t)d->L);
    man_kv_u64(e, "n_head", (uint64_t)d->NH);
    man_kv_u64(e, "n_embd", (uint64_t)d->C);
    man_kv_u64(e, "vocab_size", (uint64_t)d->V);
    man_kv_u64(e, "padded_vocab_size", (uint64_t)d->Vp);
    man_kv_u64(e, "seq_len", (uint64_t)d->T);
    /* the family's own keys */
    if (f->keys & SR_FKEY_N_KV_HEAD)
        man_kv_u64(e, "n_kv_head", (uint64_t)d->NKV);
    if (f->keys & SR_FKEY_FFN_DIM)
        man_kv_u64(e, "ffn_dim", (uint64_t)d->F);
    if (f->keys & SR_FKEY_TIE)
        man_kv_str(e, "tie_embeddings", d->untied ? "false" : "true");
    if (f->keys & SR_FKEY_NORM_EPS)
        man_kv_dbl_short(e, "norm_eps", d->norm_eps);
    if (f->keys & SR_FKEY_ROPE) {
        man_kv_dbl_short(e, "rope_theta", d->rope_theta);
        if (d->rope.factor > 0) {
            man_e_str(e, "rope_scaling");
            man_e_map(e, true, true);
            man_kv_dbl_short(e, "factor", d->rope.factor);
            man_kv_dbl_short(e, "low_freq_factor", d->rope.low_freq_factor);
            man_kv_dbl_short(e, "high_freq_factor", d->rope.high_freq_factor);
            man_kv_u64(e, "original_max_position", (uint64_t)d->rope.original_max_position);
            man_e_map(e, false, true);
        }
    }
    man_kv_u64(e, "parameters", mf->n_params);
    man_kv_str(e, "hash", mf->model_hash);
    if (mf->init_path[0]) {
        man_e_str(e, "init");
        man_e_map(e, true, false);
        man_kv_str(e, "path", mf->init_path);
        man_kv_str(e, "sha256", mf->init_sha256);
        man_e_map(e, false, false);
    }
    man_e_map(e, false, false);
}

static void render_tensors(man_emitter *e, const sr_model *model, const sr_shardplan *plan) {
    man_e_str(e, "tensors");
    man_e_seq(e, true, false);
    for (int i = 0; i < model->n_tensors; i++) {
        const sr_tensor *t = &model->tensors[i];
        man_e_map(e, true, true);
        man_kv_str(e, "name", t->name);
        man_e_str(e, "shape");
        man_e_seq(e, true, true);
        if (t->ndim == 2)
            e_u64(e, (uint64_t)t->rows);
        e_u64(e, (uint64_t)t->cols);
        man_e_seq(e, false, true);
        man_kv_str(e, "dtype", "f32");
        man_kv_u64(e, "unit", (uint64_t)plan->unit_of_layer[t->unit]);
        man_kv_u64(e, "offset", t->offset);
        man_e_map(e, false, true);
    }
    man_e_seq(e, false, false);
}

static void render_file(man_emitter *e, const sr_manifest *mf, const sr_manifest_file *f) {
    man_e_map(e, true, false);
    man_kv_str(e, "name", f->name);
    man_kv_u64(e, "shard", (uint64_t)f->shard);
    man_kv_u64(e, "bytes", f->bytes);
    man_kv_u64(e, "elements", f->elements);
    man_e_str(e, "sections");
    man_e_map(e, true, true);
    for (int k = 0; k < SR_NSTATE; k++)
        man_kv_u64(e, state_names[k], sr_manifest_section(mf, f->elements, k));
    man_e_map(e, false, true);
    man_e_str(e, "slices");
    man_e_seq(e, true, true);
    for (int s = 0; s < f->nslices; s++) {
        man_e_seq(e, true, true);
        e_u64(e, f->slices[s][0]);
        e_u64(e, f->slices[s][1]);
        man_e_seq(e, false, true);
    }
    man_e_seq(e, false, true);
    man_e_str(e, "sha256");
    man_e_seq(e, true, false);
    for (uint64_t c = 0; c < f->nchunks; c++) {
        char h[65];
        sr_hex(f->sha[c], 32, h);
        man_e_str(e, h);
    }
    man_e_seq(e, false, false);
    man_e_map(e, false, false);
}

/* Appends the self-checksum line over everything rendered so far. */
static void append_self_sum(membuf *mb) {
    unsigned char h[32];
    char hx[65], line[128];
    sr_sha256(mb->buf, mb->len, h);
    sr_hex(h, 32, hx);
    int n = snprintf(line, sizeof line, "manifest_sha256: %s\n", hx);
    membuf_write(mb, (unsigned char *)line, (size_t)n);
}

sr_status sr_manifest_render(const sr_manifest *mf, const sr_model *model, const sr_shardplan *plan, char **out,
                             size_t *out_len) {
    membuf mb = {0};
    man_emitter e = {.ok = true};
    if (!yaml_emitter_initialize(&e.em))
        return sr_error_oom("the manifest emitter");
    yaml_emitter_set_output(&e.em, membuf_write, &mb);
    yaml_emitter_set_width(&e.em, 120);
    yaml_emitter_set_unicode(&e.em, 1);
    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    emit(&e, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    emit(&e, &ev);
    man_e_map(&e, true, false);
    man_kv_str(&e, "format", SR_CKPT_FORMAT);
    man_kv_u64(&e, "version", SR_MANIFEST_VERSION);
    man_kv_str(&e, "created", mf->created);
    man_kv_str(&e, "job", mf->job);
    man_kv_str(&e, "host", mf->host);
    render_progress(&e, mf);
    render_world_model(&e, mf);
    man_e_str(&e, "config");
    man_e_map(&e, true, false);
    for (int i = 0; i < mf->nconfig; i++)
        man_kv_str(&e, mf->ckeys[i], mf->cvals[i]);
    man_e_map(&e, false, false);
    if (mf->has_data)
        man_render_data(&e, &mf->data);
    render_tensors(&e, model, plan);
    man_kv_u64(&e, "chunk_bytes", mf->chunk_bytes);
    man_e_str(&e, "state");
    man_e_seq(&e, true, false);
    for (int k = 0; k < SR_NSTATE; k++) {
        man_e_map(&e, true, true);
        man_kv_str(&e, "name", state_names[k]);
        man_kv_str(&e, "dtype", sr_dtype_name(mf->state_dtype[k]));
        man_e_map(&e, false, true);
    }
    man_e_seq(&e, false, false);
    man_e_str(&e, "files");
    man_e_seq(&e, true, false);
    for (int i = 0; i < mf->nfiles; i++)
        render_file(&e, mf, &mf->files[i]);
    man_e_seq(&e, false, false);
    man_e_map(&e, false, false);
    yaml_document_end_event_initialize(&ev, 1);
    emit(&e, &ev);
    yaml_stream_end_event_initialize(&ev);
    emit(&e, &ev);
    bool ok = e.ok && !mb.oom && yaml_emitter_flush(&e.em);
    yaml_emitter_delete(&e.em);
    if (ok)
        append_self_sum(&mb);
    if (!ok || mb.oom) {
        free(mb.buf);
        return mb.oom ? sr_error_oom("the manifest") : sr_error(SR_ERR_INTERNAL, "cannot render the manifest");
    }
    *out = mb.buf;
    *out_len = mb.len;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* parsing */

sr_status man_perr(man_pctx *p, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
sr_status man_perr(man_pctx *p, const yaml_node_t *n, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        return sr_error(SR_ERR_DATA, "%s:%zu:%zu: %s", p->path, n->start_mark.line + 1, n->start_mark.column + 1, msg);
    return sr_error(SR_ERR_DATA, "%s: %s", p->path, msg);
}

yaml_node_t *man_mget(man_pctx *p, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(&p->doc, pr->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(&p->doc, pr->value);
    }
    return NULL;
}

static const char *sval(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

size_t man_seq_len(const yaml_node_t *n) { return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start); }

yaml_node_t *man_seq_item(man_pctx *p, const yaml_node_t *n, size_t i) {
    return yaml_document_get_node(&p->doc, n->data.sequence.items.start[i]);
}

sr_status man_get_u64(man_pctx *p, yaml_node_t *map, const char *key, uint64_t max, uint64_t *out) {
    yaml_node_t *n = man_mget(p, map, key);
    const char *s = sval(n);
    if (!s)
        return man_perr(p, n ? n : map, "expected key '%s' with a number", key);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || errno || v > max)
        return man_perr(p, n, "%s: expected an integer 0..%" PRIu64 ", got '%s'", key, max, s);
    *out = v;
    return SR_OK;
}

static sr_status get_int(man_pctx *p, yaml_node_t *map, const char *key, int max, int *out) {
    uint64_t v;
    sr_status st = man_get_u64(p, map, key, (uint64_t)max, &v);
    if (st == SR_OK)
        *out = (int)v;
    return st;
}

sr_status man_get_dbl(man_pctx *p, yaml_node_t *map, const char *key, double *out) {
    yaml_node_t *n = man_mget(p, map, key);
    const char *s = sval(n);
    char *end;
    if (!s || !*s || (*out = strtod(s, &end), *end))
        return man_perr(p, n ? n : map, "expected key '%s' with a number", key);
    return SR_OK;
}

sr_status man_get_str(man_pctx *p, yaml_node_t *map, const char *key, char *out, size_t n) {
    yaml_node_t *node = man_mget(p, map, key);
    const char *s = sval(node);
    if (!s)
        return man_perr(p, node ? node : map, "expected key '%s' with a string", key);
    snprintf(out, n, "%s", s);
    return SR_OK;
}

/* The last line is "manifest_sha256: <hex>" over every byte before it;
 * *body is set to the length before that line. */
static sr_status check_self_sum(const char *path, const char *text, size_t len, size_t *body) {
    static const char tag[] = "manifest_sha256: ";
    const char *last = len >= 2 ? text + len - 2 : text;
    while (last > text && last[-1] != '\n')
        last--;
    if (len < 2 || text[len - 1] != '\n' || strncmp(last, tag, sizeof tag - 1) != 0 ||
        (size_t)(text + len - 1 - (last + sizeof tag - 1)) != 64)
        return sr_error(SR_ERR_DATA,
                        "%s: the last line is not 'manifest_sha256: <64 hex digits>' (truncated, edited or not a "
                        "shardrun manifest)",
                        path);
    char hx[65] = {0};
    unsigned char want[32], got[32];
    memcpy(hx, last + sizeof tag - 1, 64);
    sr_sha256(text, (size_t)(last - text), got);
    if (!unhex32(hx, want) || memcmp(want, got, 32) != 0)
        return sr_error(SR_ERR_DATA,
                        "%s: SHA-256 of the manifest does not match its manifest_sha256 line (the manifest was "
                        "altered or damaged)",
                        path);
    *body = (size_t)(last - text);
    return SR_OK;
}

static sr_status parse_header(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    char fmt[64];
    uint64_t ver, u;
    sr_status st = man_get_str(p, root, "format", fmt, sizeof fmt);
    if (st != SR_OK)
        return st;
    if (strcmp(fmt, SR_CKPT_FORMAT) != 0)
        return man_perr(p, man_mget(p, root, "format"), "format: expected '%s', got '%s'", SR_CKPT_FORMAT, fmt);
    if ((st = man_get_u64(p, root, "version", 1000, &ver)) != SR_OK)
        return st;
    if (ver < 1 || ver > SR_MANIFEST_VERSION)
        return man_perr(p, man_mget(p, root, "version"),
                        "version %" PRIu64 " is not supported (this shardrun reads 1 to %d)", ver, SR_MANIFEST_VERSION);
    mf->version = (int)ver;
    if ((st = man_get_u64(p, root, "step", (uint64_t)INT64_MAX, &u)) != SR_OK)
        return st;
    mf->step = (int64_t)u;
    if ((st = man_get_u64(p, root, "tokens", UINT64_MAX, &mf->tokens)) != SR_OK)
        return st;
    /* informational: absent or odd values do not make a checkpoint unusable */
    if (man_get_str(p, root, "created", mf->created, sizeof mf->created) != SR_OK)
        mf->created[0] = '\0';
    if (man_get_str(p, root, "job", mf->job, sizeof mf->job) != SR_OK)
        mf->job[0] = '\0';
    if (man_get_str(p, root, "host", mf->host, sizeof mf->host) != SR_OK)
        mf->host[0] = '\0';
    return SR_OK;
}

static sr_status parse_progress(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    sr_status st = man_get_u64(p, man_mget(p, root, "data"), "cursor", UINT64_MAX, &mf->cursor);
    yaml_node_t *mix = mf->version >= 4 ? man_mget(p, man_mget(p, root, "data"), "mixture") : NULL;
    if (st == SR_OK && mix && (st = man_parse_mixture(p, mix, &mf->mix)) == SR_OK) {
        /* the schedule's invariant: what the sources fed since the origin is
         * what the global cursor moved since */
        uint64_t fed = 0;
        for (int k = 0; k < mf->mix.n; k++)
            fed += mf->mix.src[k].cursor - mf->mix.src[k].base;
        if (mf->mix.origin > mf->cursor || fed != mf->cursor - mf->mix.origin)
            return man_perr(p, mix,
                            "data.mixture: the sources fed %llu sequences since the origin %llu, but the cursor moved "
                            "%llu (a damaged manifest)",
                            (unsigned long long)fed, (unsigned long long)mf->mix.origin,
                            (unsigned long long)(mf->mix.origin > mf->cursor ? 0 : mf->cursor - mf->mix.origin));
    }
    if (st == SR_OK)
        st = man_get_u64(p, man_mget(p, root, "rng"), "seed", UINT64_MAX, &mf->seed);
    if (st != SR_OK)
        return st;
    /* informational (the run's own keys decide the schedule): a missing or
     * odd value leaves the field empty instead of refusing the checkpoint */
    yaml_node_t *lr = man_mget(p, root, "lr_schedule");
    if (man_get_str(p, lr, "schedule", mf->schedule, sizeof mf->schedule) != SR_OK)
        mf->schedule[0] = '\0';
    if (man_get_dbl(p, lr, "lr", &mf->lr) != SR_OK)
        mf->lr = 0;
    if (man_get_dbl(p, lr, "min_lr", &mf->min_lr) != SR_OK)
        mf->min_lr = 0;
    if (man_get_dbl(p, lr, "next_lr", &mf->next_lr) != SR_OK)
        mf->next_lr = 0;
    if (man_get_u64(p, lr, "warmup_steps", UINT64_MAX, &mf->warmup_steps) != SR_OK)
        mf->warmup_steps = 0;
    if (man_get_u64(p, lr, "steps", UINT64_MAX, &mf->steps) != SR_OK)
        mf->steps = 0;
    return SR_OK;
}

static sr_status parse_world(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    yaml_node_t *world = man_mget(p, root, "world"), *mesh = man_mget(p, world, "mesh");
    sr_status st = get_int(p, world, "size", 1 << 24, &mf->world);
    if (st == SR_OK)
        st = get_int(p, mesh, "shard", 1 << 24, &mf->mesh_shard);
    if (st == SR_OK)
        st = get_int(p, mesh, "replicate", 1 << 24, &mf->mesh_replicate);
    if (st != SR_OK)
        return st;
    if (mf->world < 1 || mf->mesh_shard < 1 || mf->mesh_replicate < 1 ||
        (int64_t)mf->mesh_shard * mf->mesh_replicate != mf->world)
        return man_perr(p, world, "world: size %d is not mesh shard %d x replicate %d", mf->world, mf->mesh_shard,
                        mf->mesh_replicate);
    mf->isa[0] = '\0';
    if (mf->version >= 2)
        return man_get_str(p, world, "isa", mf->isa, sizeof mf->isa);
    return SR_OK;
}

/* Version 3's model.arch and the family's own keys (a Llama model's);
 * versions 1 and 2 are GPT-2 (a zeroed arch).  Values a job file could not
 * have are refused before anything is sized by them. */
static sr_status parse_family(man_pctx *p, yaml_node_t *model, sr_manifest *mf) {
    sr_model_dims *d = &mf->dims;
    d->arch = 0;
    if (mf->version < 3)
        return SR_OK;
    char arch[16], names[64];
    sr_status st = man_get_str(p, model, "arch", arch, sizeof arch);
    if (st != SR_OK)
        return st;
    d->arch = sr_family_find(arch);
    if (d->arch < 0)
        return man_perr(p, man_mget(p, model, "arch"), "model: arch '%s' is not a family this shardrun knows (%s)",
                        arch, sr_family_list(0, names, sizeof names));
    const sr_family *f = sr_family_get(d->arch);
    if (!f->keys) /* a family has all of these keys or none (family.h); render_world_model writes them */
        return SR_OK;
    char tie[8];
    if ((st = get_int(p, model, "n_kv_head", INT32_MAX, &d->NKV)) != SR_OK ||
        (st = get_int(p, model, "ffn_dim", INT32_MAX, &d->F)) != SR_OK ||
        (st = man_get_str(p, model, "tie_embeddings", tie, sizeof tie)) != SR_OK ||
        (st = man_get_dbl(p, model, "norm_eps", &d->norm_eps)) != SR_OK ||
        (st = man_get_dbl(p, model, "rope_theta", &d->rope_theta)) != SR_OK)
        return st;
    d->untied = strcmp(tie, "false") == 0;
    double eps = d->norm_eps;
    yaml_node_t *rs = man_mget(p, model, "rope_scaling");
    if (rs && ((st = man_get_dbl(p, rs, "factor", &d->rope.factor)) != SR_OK ||
               (st = man_get_dbl(p, rs, "low_freq_factor", &d->rope.low_freq_factor)) != SR_OK ||
               (st = man_get_dbl(p, rs, "high_freq_factor", &d->rope.high_freq_factor)) != SR_OK ||
               (st = get_int(p, rs, "original_max_position", INT32_MAX, &d->rope.original_max_position)) != SR_OK))
        return st;
    if (d->NKV < 1 || d->NH < 1 || d->NKV > d->NH || d->NH % d->NKV != 0 || d->F < 1 || d->F > (1 << 20) ||
        !(eps > 0) || !(d->rope_theta >= 1) || (rs && !(d->rope.factor > 0)) ||
        (strcmp(tie, "true") != 0 && !d->untied))
        return man_perr(p, model,
                        "model: the %s keys (n_kv_head %d, ffn_dim %d, tie_embeddings %s, norm_eps %g, "
                        "rope_theta %g) are not a model this shardrun builds",
                        f->display, d->NKV, d->F, tie, eps, d->rope_theta);
    return SR_OK;
}

static sr_status parse_model(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    yaml_node_t *model = man_mget(p, root, "model");
    const struct {
        const char *key;
        int *dst;
    } dims[] = {{"n_layer", &mf->dims.L},
                {"n_head", &mf->dims.NH},
                {"n_embd", &mf->dims.C},
                {"vocab_size", &mf->dims.V},
                {"padded_vocab_size", &mf->dims.Vp},
                {"seq_len", &mf->dims.T}};
    sr_status st = SR_OK;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0] && st == SR_OK; i++)
        st = get_int(p, model, dims[i].key, INT32_MAX, dims[i].dst);
    if (st == SR_OK)
        st = parse_family(p, model, mf);
    if (st == SR_OK)
        st = man_get_u64(p, model, "parameters", UINT64_MAX / 16, &mf->n_params);
    if (st == SR_OK)
        st = man_get_str(p, model, "hash", mf->model_hash, sizeof mf->model_hash);
    yaml_node_t *init = man_mget(p, model, "init");
    if (st == SR_OK && init)
        st = man_get_str(p, init, "path", mf->init_path, sizeof mf->init_path);
    if (st == SR_OK && init)
        st = man_get_str(p, init, "sha256", mf->init_sha256, sizeof mf->init_sha256);
    if (st != SR_OK)
        return st;
    /* a shape a job file could not have is refused before anything is sized by it */
    const sr_model_dims *d = &mf->dims;
    if (sr_config_check_model(d->L, d->NH, d->C, d->V, d->T) != SR_OK)
        return man_perr(p, model, "model: %s", sr_error_message());
    if (!sr_family_get(d->arch)->learned_positions && (d->C / d->NH) % 2 != 0)
        return man_perr(p, model, "model: a %s head size must be even (n_embd %d / n_head %d)",
                        sr_family_get(d->arch)->display, d->C, d->NH);
    char h[65];
    sr_manifest_model_hash(&mf->dims, h);
    if (strcmp(h, mf->model_hash) != 0 || sr_model_n_params(&mf->dims) != mf->n_params ||
        mf->dims.Vp != sr_model_padded_vocab(mf->dims.V))
        return man_perr(p, model, "model: hash or parameter count does not match its dims");
    return SR_OK;
}

/* Version 1: [params, adam_m, adam_v], all f32.  Version 2: a list of
 * {name, dtype} in that order. */
static sr_status parse_state(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    yaml_node_t *n = man_mget(p, root, "state");
    if (!n || n->type != YAML_SEQUENCE_NODE || man_seq_len(n) != SR_NSTATE)
        return man_perr(p, n ? n : root, "expected key 'state' with the %d saved states", SR_NSTATE);
    for (int k = 0; k < SR_NSTATE; k++) {
        yaml_node_t *item = man_seq_item(p, n, (size_t)k);
        const char *name = mf->version >= 2 ? sval(man_mget(p, item, "name")) : sval(item);
        const char *dt = mf->version >= 2 ? sval(man_mget(p, item, "dtype")) : "f32";
        if (!name || strcmp(name, state_names[k]) != 0)
            return man_perr(p, item ? item : n, "state %d: expected '%s'", k, state_names[k]);
        if (!dt || strcmp(dt, "f32") != 0)
            return man_perr(p, item, "state %s: dtype %s is not one this shardrun loads (f32)", name,
                            dt ? dt : "missing");
        mf->state_dtype[k] = SR_DT_F32;
    }
    return SR_OK;
}

static sr_status parse_config(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    yaml_node_t *n = man_mget(p, root, "config");
    if (!n || n->type != YAML_MAPPING_NODE)
        return SR_OK; /* informational: used for "changed since" warnings */
    size_t np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    mf->ckeys = sr_calloc(np + 1, sizeof(char *));
    mf->cvals = sr_calloc(np + 1, sizeof(char *));
    if (!mf->ckeys || !mf->cvals)
        return sr_error_oom("the manifest's job keys");
    for (size_t i = 0; i < np; i++) {
        yaml_node_pair_t *pr = &n->data.mapping.pairs.start[i];
        const char *k = sval(yaml_document_get_node(&p->doc, pr->key)),
                   *v = sval(yaml_document_get_node(&p->doc, pr->value));
        if (!k || !v)
            continue;
        char *kd = sr_strdup(k), *vd = sr_strdup(v);
        if (!kd || !vd) {
            free(kd);
            free(vd);
            return sr_error_oom("the manifest's job keys");
        }
        mf->ckeys[mf->nconfig] = kd;
        mf->cvals[mf->nconfig++] = vd;
    }
    return SR_OK;
}

static sr_status parse_slices(man_pctx *p, yaml_node_t *fn, const sr_manifest *mf, sr_manifest_file *f) {
    yaml_node_t *sl = man_mget(p, fn, "slices");
    if (!sl || sl->type != YAML_SEQUENCE_NODE)
        return man_perr(p, sl ? sl : fn, "%s: expected 'slices' as a list of [begin, count]", f->name);
    f->nslices = (int)man_seq_len(sl);
    f->slices = sr_calloc((size_t)f->nslices + 1, sizeof *f->slices);
    if (!f->slices)
        return sr_error_oom("the manifest's slices");
    uint64_t sum = 0;
    for (int s = 0; s < f->nslices; s++) {
        yaml_node_t *pair = man_seq_item(p, sl, (size_t)s);
        if (!pair || pair->type != YAML_SEQUENCE_NODE || man_seq_len(pair) != 2)
            return man_perr(p, pair ? pair : sl, "%s: slice %d: expected [begin, count]", f->name, s);
        for (int q = 0; q < 2; q++) {
            const char *v = sval(man_seq_item(p, pair, (size_t)q));
            char *end;
            if (!v || !*v || *v == '-' || (f->slices[s][q] = strtoull(v, &end, 10), *end))
                return man_perr(p, pair, "%s: slice %d: expected two integers", f->name, s);
        }
        if (f->slices[s][1] == 0 || f->slices[s][0] > mf->n_params || f->slices[s][1] > mf->n_params - f->slices[s][0])
            return man_perr(p, pair, "%s: slice %d lies outside the %" PRIu64 " parameters", f->name, s, mf->n_params);
        sum += f->slices[s][1];
    }
    if (sum != f->elements)
        return man_perr(p, sl, "%s: slices hold %" PRIu64 " elements, elements says %" PRIu64, f->name, sum,
                        f->elements);
    return SR_OK;
}

static sr_status parse_hashes(man_pctx *p, yaml_node_t *fn, sr_manifest_file *f) {
    yaml_node_t *sh = man_mget(p, fn, "sha256");
    f->nchunks = (f->bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
    if (!sh || sh->type != YAML_SEQUENCE_NODE || (uint64_t)man_seq_len(sh) != f->nchunks)
        return man_perr(p, sh ? sh : fn,
                        "%s: expected 'sha256' with %" PRIu64 " chunk checksums (one per %" PRIu64 " bytes)", f->name,
                        f->nchunks, SR_SHARD_CHUNK_BYTES);
    f->sha = sr_malloc((size_t)f->nchunks * 32 + 1);
    if (!f->sha)
        return sr_error_oom("the manifest's checksums");
    for (uint64_t c = 0; c < f->nchunks; c++) {
        yaml_node_t *hn = man_seq_item(p, sh, (size_t)c);
        const char *hv = sval(hn);
        if (!hv || !unhex32(hv, f->sha[c]))
            return man_perr(p, hn ? hn : sh, "%s: chunk %" PRIu64 ": expected 64 lowercase hex digits", f->name, c);
    }
    return SR_OK;
}

static sr_status parse_file(man_pctx *p, yaml_node_t *fn, sr_manifest *mf, int i) {
    sr_manifest_file *f = &mf->files[i];
    yaml_node_t *name = man_mget(p, fn, "name");
    const char *full = sval(name);
    if (!full)
        return man_perr(p, name ? name : fn, "expected key 'name' with a string");
    if (!sr_manifest_shard_name(full)) /* the whole name in the message, however long */
        return man_perr(p, name,
                        "files: name '%s' is not a shard file name (shard_NNNNN.bin); a manifest may not name paths "
                        "outside its checkpoint directory",
                        full);
    snprintf(f->name, sizeof f->name, "%s", full);
    sr_status st; /* (a name listed twice: check_unique, once all are read) */
    if ((st = get_int(p, fn, "shard", 1 << 24, &f->shard)) != SR_OK ||
        (st = man_get_u64(p, fn, "bytes", UINT64_MAX / 2, &f->bytes)) != SR_OK ||
        (st = man_get_u64(p, fn, "elements", UINT64_MAX / 64, &f->elements)) != SR_OK)
        return st;
    uint64_t want = sr_manifest_file_bytes(mf, f->elements);
    if (f->bytes != want)
        return man_perr(p, man_mget(p, fn, "bytes"),
                        "%s: bytes %" PRIu64 " disagree with elements %" PRIu64 " (expected %" PRIu64 ")", f->name,
                        f->bytes, f->elements, want);
    yaml_node_t *sec = man_mget(p, fn, "sections");
    for (int k = 0; k < SR_NSTATE; k++) {
        uint64_t off;
        if ((st = man_get_u64(p, sec, state_names[k], UINT64_MAX, &off)) != SR_OK)
            return st;
        if (off != sr_manifest_section(mf, f->elements, k))
            return man_perr(p, sec, "%s: section %s at %" PRIu64 " disagrees with the layout", f->name, state_names[k],
                            off);
    }
    if ((st = parse_slices(p, fn, mf, f)) != SR_OK || (st = parse_hashes(p, fn, f)) != SR_OK)
        return st;
    mf->total_bytes += f->bytes;
    return SR_OK;
}

static int cmp_slice(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The slices of all files tile [0, parameters) exactly once. */
static sr_status check_tiling(man_pctx *p, yaml_node_t *files, const sr_manifest *mf) {
    size_t total = 0;
    for (int i = 0; i < mf->nfiles; i++)
        total += (size_t)mf->files[i].nslices;
    uint64_t(*all)[2] = sr_malloc(sizeof *all * (total + 1));
    if (!all)
        return sr_error_oom("the manifest's slices");
    size_t k = 0;
    for (int i = 0; i < mf->nfiles; i++)
        for (int s = 0; s < mf->files[i].nslices; s++) {
            all[k][0] = mf->files[i].slices[s][0];
            all[k++][1] = mf->files[i].slices[s][1];
        }
    qsort(all, k, sizeof *all, cmp_slice);
    uint64_t at = 0;
    bool tiled = true;
    for (size_t i = 0; i < k && tiled; i++) {
        tiled = all[i][0] == at;
        at += all[i][1];
    }
    free(all);
    if (!tiled || at != mf->n_params)
        return man_perr(p, files, "files: the slices do not cover the %" PRIu64 " parameters exactly once",
                        mf->n_params);
    return SR_OK;
}

typedef struct {
    const char *name;
    int index;
} named_file;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named_file *)a)->name, ((const named_file *)b)->name);
}

/* Every shard index 0..nfiles-1 once and no name twice, in O(n log n): a
 * manifest of thousands of ranks is read by every rank at a resume. */
static sr_status check_unique(man_pctx *p, yaml_node_t *n, sr_manifest *mf) {
    int N = mf->nfiles;
    unsigned char *seen = sr_calloc((size_t)N, 1);
    named_file *order = sr_malloc(sizeof *order * (size_t)N);
    sr_status st = seen && order ? SR_OK : sr_error_oom("the manifest's file check");
    for (int i = 0; i < N && st == SR_OK; i++) {
        int k = mf->files[i].shard;
        if (k < 0 || k >= N || seen[k]++)
            st = man_perr(p, man_seq_item(p, n, (size_t)i), "files: %s: shard index %d is out of range or repeated",
                          mf->files[i].name, k);
        order[i] = (named_file){mf->files[i].name, i};
    }
    if (st == SR_OK) {
        qsort(order, (size_t)N, sizeof *order, cmp_named);
        for (int i = 1; i < N && st == SR_OK; i++)
            if (strcmp(order[i].name, order[i - 1].name) == 0) {
                int later = order[i].index > order[i - 1].index ? order[i].index : order[i - 1].index;
                st = man_perr(p, man_mget(p, man_seq_item(p, n, (size_t)later), "name"), "files: '%s' is listed twice",
                              mf->files[later].name);
            }
    }
    free(seen);
    free(order);
    return st;
}

static sr_status parse_files(man_pctx *p, yaml_node_t *root, sr_manifest *mf) {
    sr_status st = man_get_u64(p, root, "chunk_bytes", (uint64_t)1 << 30, &mf->chunk_bytes);
    if (st != SR_OK)
        return st;
    if (mf->chunk_bytes != SR_SHARD_CHUNK_BYTES)
        return man_perr(p, man_mget(p, root, "chunk_bytes"), "chunk_bytes: expected %" PRIu64, SR_SHARD_CHUNK_BYTES);
    yaml_node_t *n = man_mget(p, root, "files");
    if (!n || n->type != YAML_SEQUENCE_NODE || man_seq_len(n) == 0)
        return man_perr(p, n ? n : root, "expected key 'files' with a list of shard files");
    mf->nfiles = (int)man_seq_len(n);
    mf->files = sr_calloc((size_t)mf->nfiles, sizeof(sr_manifest_file));
    if (!mf->files)
        return sr_error_oom("the manifest's file list");
    if (mf->nfiles != mf->mesh_shard)
        return man_perr(p, n, "files: %d shard files for a mesh of %d shards", mf->nfiles, mf->mesh_shard);
    for (int i = 0; i < mf->nfiles && st == SR_OK; i++)
        st = parse_file(p, man_seq_item(p, n, (size_t)i), mf, i);
    if (st == SR_OK)
        st = check_unique(p, n, mf);
    return st == SR_OK ? check_tiling(p, n, mf) : st;
}

sr_status sr_manifest_parse(const char *text, size_t len, const char *path, sr_manifest *mf) {
    *mf = (sr_manifest){0};
    size_t body = 0;
    sr_status st = check_self_sum(path, text, len, &body);
    if (st != SR_OK)
        return st;
    man_pctx p = {.path = path};
    sr_yaml_error err;
    bool has_root;
    /* depth, size and duplicate keys are refused while the text is read */
    if (!sr_yaml_load(text, body, &sr_yaml_default_limits, true, &p.doc, &has_root, &err))
        return err.oom ? sr_error_oom("reading a manifest")
                       : sr_error(SR_ERR_DATA, "%s:%zu:%zu: %s", path, err.line + 1, err.column + 1, err.msg);
    yaml_node_t *root = yaml_document_get_root_node(&p.doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        st = man_perr(&p, root, "expected a mapping at the top");
    if (st == SR_OK)
        st = parse_header(&p, root, mf);
    if (st == SR_OK)
        st = parse_progress(&p, root, mf);
    if (st == SR_OK)
        st = parse_world(&p, root, mf);
    if (st == SR_OK)
        st = parse_model(&p, root, mf);
    if (st == SR_OK)
        st = parse_state(&p, root, mf);
    if (st == SR_OK)
        st = parse_config(&p, root, mf);
    if (st == SR_OK)
        st = man_parse_data(&p, root, mf);
    if (st == SR_OK)
        st = parse_files(&p, root, mf);
    yaml_document_delete(&p.doc);
    if (st != SR_OK)
        sr_manifest_free(mf);
    return st;
}

sr_status sr_manifest_load(int dirfd, const char *dir, sr_manifest *mf) {
    *mf = (sr_manifest){0};
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, SR_MANIFEST_NAME) >= sizeof path)
        return sr_error(SR_ERR_DATA, "%s: path too long", dir);
    struct stat sb;
    int fd = sr_fsio_open_file(dirfd, SR_MANIFEST_NAME, false, &sb);
    if (fd < 0 && errno == EINVAL)
        return sr_error(SR_ERR_DATA, "%s: %s, not a regular file", path, sr_fsio_kind(sb.st_mode));
    if (fd < 0)
        return sr_error(SR_ERR_DATA, "%s: %s%s", path, errno == ELOOP ? "a symbolic link" : strerror(errno),
                        errno == ENOENT  ? " (no manifest: not a complete checkpoint)"
                        : errno == ELOOP ? "; the files of a checkpoint must be regular files"
                                         : "");
    if ((size_t)sb.st_size > MANIFEST_MAX) {
        close(fd);
        return sr_error(SR_ERR_DATA, "%s: %lld bytes; a manifest has at most %zu MiB", path, (long long)sb.st_size,
                        MANIFEST_MAX >> 20);
    }
    size_t len = (size_t)sb.st_size;
    char *text = sr_malloc(len + 1);
    if (!text) {
        close(fd);
        return sr_error_oom("the manifest text");
    }
    if (sr_fsio_pread_all(fd, text, len, 0) != 0) {
        sr_status st = sr_error(SR_ERR_DATA, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
        free(text);
        close(fd);
        return st;
    }
    close(fd);
    text[len] = '\0';
    sr_status st = sr_manifest_parse(text, len, path, mf);
    free(text);
    return st;
}
