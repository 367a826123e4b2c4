/* config_yaml.c — a job file's YAML (libyaml) and the --set assignments
 * walked against the key table: sections and keys, what each key's value
 * came from (file:line:col, or the --set), another trainer's name for a
 * key pointed at ours, the closest key to a mistyped one, and --set KEY=
 * back to the default.  Part of the config module (config.h,
 * config_impl.h). */
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
#include "mem.h"
#include "suggest.h"
#include "yamlload.h"

/* ------------------------------------------------------------------------ */
/* Where a value came from, for messages. */

void cfg_format_where(char *buf, size_t n, const parse_ctx *ctx, yaml_mark_t mark) {
    if (ctx->file)
        snprintf(buf, n, "%s:%zu:%zu", ctx->file, mark.line + 1, mark.column + 1);
    else
        snprintf(buf, n, "--set %s", ctx->setarg);
}

sr_status cfg_error_at(const parse_ctx *ctx, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

sr_status cfg_error_at(const parse_ctx *ctx, yaml_mark_t mark, const char *fmt, ...) {
    char where[1024], msg[2048];
    cfg_format_where(where, sizeof where, ctx, mark);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sr_error(SR_ERR_CONFIG, "%s: %s", where, msg);
}

/* Names other trainers (nanoGPT, llm.c, Hugging Face, Megatron,
 * torchtitan) give what a key or section here holds: an unknown key whose
 * last component is one of them is pointed at ours (with the note below
 * where there is no one-to-one key). */
static const struct {
    const char *name, *key;
} aliases[] = {
    {"logging", "log"},
    {"warmup", "train.warmup_steps"},
    {"batch", "train.batch_size"},
    {"gradient_accumulation_steps", "train.batch_size"},
    {"grad_accum_steps", "train.batch_size"},
    {"accumulation_steps", "train.batch_size"},
    {"learning_rate", "train.lr"},
    {"max_lr", "train.lr"},
    {"min_learning_rate", "train.min_lr"},
    {"max_steps", "train.steps"},
    {"max_iters", "train.steps"},
    {"num_steps", "train.steps"},
    {"train_steps", "train.steps"},
    {"total_steps", "train.steps"},
    {"block_size", "model.seq_len"},
    {"n_positions", "model.seq_len"},
    {"n_ctx", "model.seq_len"},
    {"max_seq_len", "model.seq_len"},
    {"seq_length", "model.seq_len"},
    {"sequence_length", "model.seq_len"},
    {"context_length", "model.seq_len"},
    {"n_layers", "model.n_layer"},
    {"num_layers", "model.n_layer"},
    {"num_hidden_layers", "model.n_layer"},
    {"n_heads", "model.n_head"},
    {"num_heads", "model.n_head"},
    {"num_attention_heads", "model.n_head"},
    {"n_embed", "model.n_embd"},
    {"d_model", "model.n_embd"},
    {"hidden_size", "model.n_embd"},
    {"embed_dim", "model.n_embd"},
    {"vocab", "model.vocab_size"},
    {"init_from", "model.init"},
    {"gradient_checkpointing", "model.recompute"},
    {"activation_checkpointing", "model.recompute"},
    {"warmup_iters", "train.warmup_steps"},
    {"lr_warmup_steps", "train.warmup_steps"},
    {"lr_scheduler", "train.schedule"},
    {"lr_scheduler_type", "train.schedule"},
    {"max_grad_norm", "train.grad_clip"},
    {"gradient_clipping", "train.grad_clip"},
    {"clip_grad", "train.grad_clip"},
    {"adam_beta1", "train.beta1"},
    {"adam_beta2", "train.beta2"},
    {"adam_epsilon", "train.eps"},
    {"micro_batch_size", "train.micro_batch"},
    {"per_device_train_batch_size", "train.micro_batch"},
    {"global_batch_size", "train.batch_size"},
    {"total_batch_size", "train.batch_size"},
    {"eval_interval", "train.eval_every"},
    {"eval_steps", "train.eval_every"},
    {"eval_iters", "train.eval_batches"},
    {"dataset", "data.train"},
    {"train_data", "data.train"},
    {"train_files", "data.train"},
    {"val_data", "data.val"},
    {"log_interval", "log.every"},
    {"logging_steps", "log.every"},
    {"num_threads", "threads"},
    {"dtype", "sharding.mixed_precision.param_dtype"},
    {"save_interval", "checkpoint.every_steps"},
    {"save_steps", "checkpoint.every_steps"},
    {"checkpoint_interval", "checkpoint.every_steps"},
    {"out_dir", "checkpoint.dir"},
    {"output_dir", "checkpoint.dir"},
    {"save_dir", "checkpoint.dir"},
    {"checkpoint_dir", "checkpoint.dir"},
    {"resume_from_checkpoint", "checkpoint.resume"},
};

/* The key (or section) another trainer's `name` (any case) means, or
 * NULL; *note (when not NULL) its note or NULL. */
const char *cfg_alias_of(const char *name, const char **note) {
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].name) == 0) {
            if (note) /* accumulation: no key; it follows from three */
                *note = strcasestr(name, "accum") ? "shardrun has no accumulation key: accumulation steps = "
                                                    "train.batch_size / (train.micro_batch x ranks), so set "
                                                    "train.batch_size to the sequences of one optimizer step and "
                                                    "train.micro_batch to what fits one forward pass"
                                                  : NULL;
            return aliases[i].key;
        }
    return NULL;
}

const char *cfg_suggest(const char *prefix, const char *name, char *out, size_t n) {
    out[0] = '\0';
    const char *note = NULL, *alias = cfg_alias_of(name, &note);
    if (alias) {
        snprintf(out, n, "%s", alias);
        return note;
    }
    size_t pl = strlen(prefix);
    int best = 99;
    char cand[256];
    for (int i = 0; i < NKEYS; i++) {
        const char *k = cfg_keys[i].key;
        if (pl && (strncmp(k, prefix, pl) != 0 || k[pl] != '.'))
            continue;
        const char *rest = pl ? k + pl + 1 : k;
        size_t cl = strcspn(rest, ".");
        if (cl >= sizeof cand)
            continue;
        memcpy(cand, rest, cl);
        cand[cl] = '\0';
        int d = sr_suggest_distance(name, cand);
        if (d < best) {
            best = d;
            snprintf(out, n, "%s%s%s", prefix, pl ? "." : "", cand);
        }
    }
    size_t nl = strlen(name);
    if (sr_suggest_close(name, best))
        return NULL;
    out[0] = '\0';
    /* A key placed in the wrong section: match on the last component. */
    for (int i = 0; i < NKEYS; i++) {
        const char *last = strrchr(cfg_keys[i].key, '.');
        last = last ? last + 1 : cfg_keys[i].key;
        if (sr_suggest_distance(name, last) <= (nl <= 3 ? 0 : 1)) {
            snprintf(out, n, "%s", cfg_keys[i].key);
            return NULL;
        }
    }
    return NULL;
}

/* The unknown key's message: the suggestion `hint` ("" none), its note,
 * and for a section suggested in place of a mapping the key its first
 * child names there ("logging: every:" -> log.every). */
static sr_status unknown_key(const parse_ctx *ctx, yaml_mark_t mark, const char *path, const char *hint,
                             const char *note, yaml_document_t *doc, yaml_node_t *node) {
    if (!hint[0])
        return cfg_error_at(ctx, mark, "unknown key '%s' (see shardrun config keys for the valid keys)", path);
    char child[600] = "";
    if (cfg_is_section(hint) && node && node->type == YAML_MAPPING_NODE &&
        node->data.mapping.pairs.top > node->data.mapping.pairs.start) {
        yaml_node_t *k = yaml_document_get_node(doc, node->data.mapping.pairs.start->key);
        char full[520];
        if (k && k->type == YAML_SCALAR_NODE &&
            (size_t)snprintf(full, sizeof full, "%s.%s", hint, cfg_scalar_text(k)) < sizeof full &&
            cfg_key_index(full) >= 0)
            snprintf(child, sizeof child, " (%s.%s is %s)", path, cfg_scalar_text(k), full);
    }
    return cfg_error_at(ctx, mark, "unknown key '%s'; did you mean '%s'?%s%s%s%s (see shardrun config keys)", path,
                        hint, child, note ? " (" : "", note ? note : "", note ? ")" : "");
}

static sr_status record_origin(sr_config *cfg, int ki, const parse_ctx *ctx, yaml_mark_t mark) {
    struct sr_key_origin *o = &cfg->origin[ki];
    free(o->file);
    free(o->setarg);
    o->file = sr_strdup(ctx->file ? ctx->file : "--set");
    o->setarg = ctx->setarg ? sr_strdup(ctx->setarg) : NULL;
    o->line = (int)mark.line + 1;
    o->col = (int)mark.column + 1;
    if (!o->file || (ctx->setarg && !o->setarg))
        return sr_error_oom("where a key was set");
    return SR_OK;
}

static sr_status walk_mapping(sr_config *cfg, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                              const parse_ctx *ctx);

/* Applies `node` at dotted `path` (a leaf or a section). */
static sr_status apply_at(sr_config *cfg, yaml_document_t *doc, const char *path, yaml_node_t *node,
                          yaml_mark_t keymark, const char *prefix, const char *name, const parse_ctx *ctx) {
    int ki = cfg_key_index(path);
    if (ki >= 0) {
        sr_status st = cfg_set_leaf(cfg, ki, doc, node, ctx);
        return st == SR_OK ? record_origin(cfg, ki, ctx, node->start_mark) : st;
    }
    if (cfg_is_section(path)) {
        if (node->type != YAML_MAPPING_NODE)
            return cfg_error_at(ctx, node->start_mark, "%s: expected a mapping of keys (a section), got %s", path,
                                cfg_node_kind(node));
        return walk_mapping(cfg, doc, node, path, ctx);
    }
    char hint[300];
    const char *note = cfg_suggest(prefix, name, hint, sizeof hint);
    return unknown_key(ctx, keymark, path, hint, note, doc, node);
}

static sr_status walk_mapping(sr_config *cfg, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                              const parse_ctx *ctx) {
    yaml_node_pair_t *start = map->data.mapping.pairs.start, *top = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = start; p < top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v)
            return sr_error(SR_ERR_INTERNAL, "libyaml returned a broken document");
        if (k->type != YAML_SCALAR_NODE)
            return cfg_error_at(ctx, k->start_mark, "expected a key name, got %s", cfg_node_kind(k));
        const char *name = cfg_scalar_text(k);
        for (yaml_node_pair_t *q = start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(cfg_scalar_text(k2), name) == 0)
                return cfg_error_at(ctx, k->start_mark, "duplicate key '%s%s%s' (first given at line %zu)", prefix,
                                    prefix[0] ? "." : "", name, k2->start_mark.line + 1);
        }
        char path[512];
        if ((size_t)snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", name) >= sizeof path)
            return cfg_error_at(ctx, k->start_mark, "key name too long");
        sr_status st = apply_at(cfg, doc, path, v, k->start_mark, prefix, name, ctx);
        if (st != SR_OK)
            return st;
    }
    return SR_OK;
}

/* Loads one YAML document from `text` under the limits every reader of
 * outside YAML uses (yamlload.h); a second document is refused.  On success
 * *doc is initialised (delete it) and *has_root false for an empty stream.
 * Returns SR_ERR_CONFIG with the problem and its place. */
sr_status cfg_load_document(yaml_document_t *doc, const char *text, size_t len, const parse_ctx *ctx, bool *has_root) {
    sr_yaml_limits lim = sr_yaml_default_limits;
    lim.refuse_duplicates = false; /* walk_mapping refuses them naming the dotted key */
    sr_yaml_error err;
    if (sr_yaml_load(text, len, &lim, true, doc, has_root, &err))
        return SR_OK;
    if (err.oom)
        return sr_error_oom("reading a job file");
    yaml_mark_t mark = {0, err.line, err.column};
    if (err.syntax)
        return cfg_error_at(
            ctx, mark, "%s (hint: check indentation and that every 'key: value' has a space after the colon)", err.msg);
    return cfg_error_at(ctx, mark, "%s", err.msg);
}

sr_status sr_config_load_text(sr_config *cfg, const char *text, size_t len, const char *name) {
    parse_ctx ctx = {name, NULL};
    yaml_document_t doc;
    bool has_root = false;
    sr_status st = cfg_load_document(&doc, text, len, &ctx, &has_root);
    if (st != SR_OK)
        return st;
    if (has_root) {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root->type != YAML_MAPPING_NODE && !cfg_scalar_is_null(root))
            st = cfg_error_at(&ctx, root->start_mark,
                              "expected a mapping of sections (model:, train:, ...) at the top level, got %s",
                              cfg_node_kind(root));
        else if (root->type == YAML_MAPPING_NODE)
            st = walk_mapping(cfg, &doc, root, "", &ctx);
    }
    yaml_document_delete(&doc);
    if (st == SR_OK) {
        free(cfg->source);
        cfg->source = sr_strdup(name);
        if (!cfg->source)
            st = sr_error_oom("the job's name");
    }
    return st;
}

sr_status sr_config_load_file(sr_config *cfg, const char *path) {
    if (!path)
        return sr_config_load_text(cfg, sr_default_job, sr_default_job_len, SR_CONFIG_DEFAULT_JOB);
    FILE *f;
    sr_status ost = sr_fsio_open_input_file(path, "the job file", NULL, &f);
    if (ost != SR_OK)
        return ost;
    size_t cap = 1 << 16, len = 0;
    char *buf = sr_malloc(cap);
    if (!buf) {
        fclose(f);
        return sr_error_oom("the job file");
    }
    for (;;) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
        if (len == cap) {
            if (cap >= (size_t)16 << 20) {
                free(buf);
                fclose(f);
                return sr_error(SR_ERR_CONFIG, "%s: job file larger than 16 MiB; expected a small YAML file", path);
            }
            char *nb = sr_realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return sr_error_oom("the job file");
            }
            buf = nb;
            cap *= 2;
        }
    }
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (rerr) {
        free(buf);
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read job file: %s", path, strerror(rerr));
    }
    if (memchr(buf, '\0', len)) {
        free(buf);
        return sr_error(SR_ERR_CONFIG, "%s: contains a NUL byte; expected a YAML text file", path);
    }
    sr_status st = sr_config_load_text(cfg, buf, len, path);
    free(buf);
    return st;
}

/* Key ki back to its built-in default (or, without one, the zero its
 * rules derive from: the preset's dimensions), and "not set". */
sr_status cfg_reset_key(sr_config *cfg, int ki) {
    const sr_key *k = &cfg_keys[ki];
    if (cfg_types[k->type].release)
        cfg_types[k->type].release(cfg_field(cfg, k));
    sr_status st = SR_OK;
    if (k->def) {
        parse_ctx ctx = {"<built-in defaults>", NULL};
        yaml_document_t doc;
        bool has_root = false;
        st = cfg_load_document(&doc, k->def, strlen(k->def), &ctx, &has_root);
        if (st == SR_OK) {
            st = has_root ? cfg_set_leaf(cfg, ki, &doc, yaml_document_get_root_node(&doc), &ctx)
                          : sr_error(SR_ERR_INTERNAL, "empty built-in default for %s", k->key);
            yaml_document_delete(&doc);
        }
    } else if (k->type == T_FLOAT) {
        *(double *)cfg_field(cfg, k) = 0;
    } else if (k->type == T_BOOL) {
        *(bool *)cfg_field(cfg, k) = false;
    } else {
        *(int64_t *)cfg_field(cfg, k) = 0; /* T_INT, T_ENUM */
    }
    struct sr_key_origin *o = &cfg->origin[ki];
    free(o->file);
    free(o->setarg);
    *o = (struct sr_key_origin){0};
    return st;
}

sr_status sr_config_set(sr_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return sr_error(SR_ERR_USAGE, "--set %s: expected key=value, e.g. --set train.lr=3e-4", assignment);
    char path[512];
    size_t kl = (size_t)(eq - assignment);
    if (kl >= sizeof path)
        return sr_error(SR_ERR_CONFIG, "--set %s: key too long", assignment);
    memcpy(path, assignment, kl);
    path[kl] = '\0';
    parse_ctx ctx = {NULL, assignment};
    const char *value = eq + 1;
    int ki = cfg_key_index(path);
    if (!*value && ki >= 0)
        return cfg_reset_key(cfg, ki); /* "KEY=": as if the job file had not named it */
    yaml_document_t doc;
    bool has_root = false;
    sr_status st = cfg_load_document(&doc, value, strlen(value), &ctx, &has_root);
    if (st != SR_OK)
        return st;
    yaml_mark_t zero = {0, 0, 0};
    if (!has_root && !yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE)) {
        /* "key=" : an empty (null) scalar */
        yaml_document_delete(&doc);
        return sr_error_oom("a --set value");
    }
    const char *dot = strrchr(path, '.');
    char prefix[512] = "";
    if (dot) {
        memcpy(prefix, path, (size_t)(dot - path));
        prefix[dot - path] = '\0';
    }
    if (dot && prefix[0] && !cfg_is_section(prefix)) {
        /* Unknown section: another trainer's name for a key, else the
         * closest of the full key list. */
        char hint[600] = "";
        int best = 99;
        const char *note = NULL, *alias = cfg_alias_of(dot + 1, &note);
        /* another trainer's section: logging.every is log.every */
        size_t first = strcspn(path, ".");
        char head[512];
        memcpy(head, path, first);
        head[first] = '\0';
        const char *sec = alias ? NULL : cfg_alias_of(head, NULL);
        if (sec && cfg_is_section(sec) &&
            (size_t)snprintf(hint, sizeof hint, "%s%s", sec, path + first) < sizeof hint &&
            (cfg_key_index(hint) >= 0 || cfg_is_section(hint)))
            best = 0;
        for (int i = 0; i < NKEYS && !alias && best > 0; i++) {
            int d = sr_suggest_distance(path, cfg_keys[i].key);
            if (d < best) {
                best = d;
                snprintf(hint, sizeof hint, "%s", cfg_keys[i].key);
            }
        }
        if (alias) {
            snprintf(hint, sizeof hint, "%s", alias);
            best = 0;
        }
        yaml_document_delete(&doc);
        if (best > 3)
            hint[0] = '\0';
        return unknown_key(&ctx, zero, path, hint, note, NULL, NULL);
    }
    st = apply_at(cfg, &doc, path, yaml_document_get_root_node(&doc), zero, prefix, dot ? dot + 1 : path, &ctx);
    yaml_document_delete(&doc);
    return st;
}
