/* config_values.c — the job file's typed values: each type of the key
 * table (integer, float, bool, string, enum, reshard, string and signal
 * lists) parsed from a YAML scalar or sequence with its range checked,
 * formatted back as YAML, described for `config keys`, and freed.  Part
 * of the config module (config.h, config_impl.h). */
#include "srconfig.h"

#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
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

/* ------------------------------------------------------------------------ */

int cfg_key_index(const char *path) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(cfg_keys[i].key, path) == 0)
            return i;
    return -1;
}

/* True when `path` is a section: some key starts with "path.". */
bool cfg_is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < NKEYS; i++)
        if (strncmp(cfg_keys[i].key, path, n) == 0 && cfg_keys[i].key[n] == '.')
            return true;
    return false;
}

void cfg_strlist_free(sr_strlist *l) {
    for (int i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

const char *cfg_scalar_text(yaml_node_t *node) { return (const char *)node->data.scalar.value; }

bool cfg_scalar_is_plain(yaml_node_t *node) { return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

bool cfg_scalar_is_null(yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || !cfg_scalar_is_plain(node))
        return false;
    const char *s = cfg_scalar_text(node);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

const char *cfg_node_kind(yaml_node_t *node) {
    switch (node->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return cfg_scalar_is_null(node) ? "nothing (null)" : "a scalar";
    }
}

/* Parses a YAML boolean; returns -1 when `s` is not one. */
int cfg_parse_bool(const char *s) {
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    for (int i = 0; t[i]; i++)
        if (strcmp(s, t[i]) == 0)
            return 1;
    for (int i = 0; f[i]; i++)
        if (strcmp(s, f[i]) == 0)
            return 0;
    return -1;
}

/* Parses a whole decimal integer.  Returns 0, or ERANGE on overflow, or
 * EINVAL when `s` is not an integer. */
int cfg_parse_int(const char *s, int64_t *out) {
    if (!*s || isspace((unsigned char)*s))
        return EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return EINVAL;
    if (errno == ERANGE)
        return ERANGE;
    *out = v;
    return 0;
}

int cfg_parse_float(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s))
        return EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0')
        return EINVAL;
    if (errno == ERANGE && fabs(v) > 1.0)
        return ERANGE;
    if (!isfinite(v))
        return EINVAL;
    *out = v;
    return 0;
}

void cfg_fmt_range_int(char *buf, size_t n, const sr_key *k) {
    if (k->max >= I64MAX)
        snprintf(buf, n, "an integer >= %.0f", k->min);
    else
        snprintf(buf, n, "an integer in [%.0f, %.0f]", k->min, k->max);
}

void cfg_fmt_enum(char *buf, size_t n, const char *const *names) {
    sr_line l = sr_line_on(buf, n);
    for (int i = 0; names[i] && !l.cut; i++)
        sr_line_add(&l, "%s%s", i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
}

/* ---- one setter per value type (the type table is below) ---- */

/* An explicitly tagged scalar (`!!str 3`) is never a number or a boolean. */
static sr_status refuse_tagged(const leaf *l, const char *expect) {
    return LEAF_ERR(l, "%s: expected %s, got '%s' with an explicit tag (hint: remove the tag)", l->k->key, expect,
                    cfg_scalar_text(l->node));
}

/* A plain, non-null scalar for a number key; else the error. */
static sr_status need_number(const leaf *l, const char *expect) {
    if (sr_yaml_explicit_str(l->node))
        return refuse_tagged(l, expect);
    if (l->node->type == YAML_SCALAR_NODE && !cfg_scalar_is_plain(l->node))
        return LEAF_ERR(l, "%s: expected %s, got the quoted string \"%s\" (hint: remove the quotes)", l->k->key, expect,
                        cfg_scalar_text(l->node));
    if (l->node->type != YAML_SCALAR_NODE || cfg_scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected %s, got %s", l->k->key, expect, cfg_node_kind(l->node));
    return SR_OK;
}

static sr_status set_int(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    cfg_fmt_range_int(expect, sizeof expect, k);
    sr_status st = need_number(l, expect);
    if (st != SR_OK)
        return st;
    const char *text = cfg_scalar_text(l->node);
    int64_t v;
    int rc = cfg_parse_int(text, &v);
    if (rc == ERANGE)
        return LEAF_ERR(l, "%s: value '%s' overflows a 64-bit integer; expected %s", k->key, text, expect);
    if (rc) {
        double dv;
        return LEAF_ERR(l, "%s: expected %s, got '%s'%s", k->key, expect, text,
                        cfg_parse_float(text, &dv) == 0 ? " (hint: write a whole number)" : "");
    }
    if ((double)v < k->min || (double)v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s", k->key, text, expect);
    *(int64_t *)cfg_field(l->cfg, k) = v;
    return SR_OK;
}

static sr_status set_float(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    snprintf(expect, sizeof expect, "a number in [%g, %g]", k->min, k->max);
    sr_status st = need_number(l, expect);
    if (st != SR_OK)
        return st;
    const char *text = cfg_scalar_text(l->node);
    double v;
    int rc = cfg_parse_float(text, &v);
    if (rc == ERANGE)
        return LEAF_ERR(l, "%s: value '%s' overflows a double; expected %s", k->key, text, expect);
    if (rc)
        return LEAF_ERR(l, "%s: expected %s, got '%s'", k->key, expect, text);
    if (v < k->min || v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s", k->key, text, expect);
    *(double *)cfg_field(l->cfg, k) = v;
    return SR_OK;
}

static sr_status set_bool(const leaf *l) {
    yaml_node_t *node = l->node;
    if (sr_yaml_explicit_str(node))
        return refuse_tagged(l, "true or false");
    bool scalar = node->type == YAML_SCALAR_NODE;
    int b = scalar && cfg_scalar_is_plain(node) ? cfg_parse_bool(cfg_scalar_text(node)) : -1;
    if (b < 0)
        return LEAF_ERR(l, "%s: expected true or false, got %s%s%s", l->k->key, scalar ? "'" : cfg_node_kind(node),
                        scalar ? cfg_scalar_text(node) : "", scalar ? "'" : "");
    *(bool *)cfg_field(l->cfg, l->k) = b;
    return SR_OK;
}

static sr_status set_str(const leaf *l) {
    if (l->node->type != YAML_SCALAR_NODE)
        return LEAF_ERR(l, "%s: expected a string, got %s", l->k->key, cfg_node_kind(l->node));
    const char *text = cfg_scalar_is_null(l->node) ? "" : cfg_scalar_text(l->node);
    if (strlen(text) > 4095)
        return LEAF_ERR(l, "%s: expected a string of at most 4095 bytes", l->k->key);
    char *s = sr_strdup(text);
    if (!s)
        return sr_error_oom("a job-file string");
    char **dst = (char **)cfg_field(l->cfg, l->k);
    free(*dst);
    *dst = s;
    return SR_OK;
}

static sr_status set_enum(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    cfg_fmt_enum(expect, sizeof expect, k->names);
    if (l->node->type != YAML_SCALAR_NODE || cfg_scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected one of %s, got %s", k->key, expect, cfg_node_kind(l->node));
    for (int i = 0; k->names[i]; i++)
        if (strcmp(k->names[i], cfg_scalar_text(l->node)) == 0) {
            *(int64_t *)cfg_field(l->cfg, k) = i;
            return SR_OK;
        }
    return LEAF_ERR(l, "%s: expected one of %s, got '%s'", k->key, expect, cfg_scalar_text(l->node));
}

static sr_status set_reshard(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    snprintf(expect, sizeof expect, "true, false, or an integer N in [%.0f, %.0f]", k->min, k->max);
    if (sr_yaml_explicit_str(l->node))
        return refuse_tagged(l, expect);
    if (l->node->type != YAML_SCALAR_NODE || !cfg_scalar_is_plain(l->node) || cfg_scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected %s, got %s", k->key, expect, cfg_node_kind(l->node));
    const char *text = cfg_scalar_text(l->node);
    int b = cfg_parse_bool(text);
    int64_t v;
    if (b == 1)
        v = SR_RESHARD_TRUE;
    else if (b == 0)
        v = SR_RESHARD_FALSE;
    else if (cfg_parse_int(text, &v))
        return LEAF_ERR(l, "%s: expected %s, got '%s'", k->key, expect, text);
    else if ((double)v < k->min || (double)v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s%s", k->key, text, expect,
                        v == 1 ? " (hint: 1 keeps a full copy on every rank: write false)" : "");
    *(int64_t *)cfg_field(l->cfg, k) = v;
    return SR_OK;
}

/* One list item: a string, or (T_SIGLIST) a signal name without SIG. */
static sr_status list_item(const leaf *l, yaml_node_t *item, int i, const char **out) {
    const sr_key *k = l->k;
    if (!item || item->type != YAML_SCALAR_NODE)
        return cfg_error_at(l->ctx, item ? item->start_mark : l->node->start_mark,
                            "%s: expected a string as list item %d, got %s", k->key, i + 1,
                            item ? cfg_node_kind(item) : "nothing");
    const char *s = cfg_scalar_is_null(item) ? "" : cfg_scalar_text(item);
    if (k->type == T_SIGLIST) {
        const char *name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
        bool ok = false;
        for (int j = 0; cfg_signal_names[j]; j++)
            ok = ok || strcmp(cfg_signal_names[j], name) == 0;
        if (!ok) {
            char e2[256];
            cfg_fmt_enum(e2, sizeof e2, cfg_signal_names);
            return cfg_error_at(
                l->ctx, item->start_mark, "%s: expected signal names among %s, got '%s'%s", k->key, e2, s,
                strcmp(name, "KILL") == 0 || strcmp(name, "STOP") == 0 ? " (hint: SIGKILL and SIGSTOP cannot be caught)"
                                                                       : "");
        }
        s = name;
    }
    *out = s;
    return SR_OK;
}

static sr_status set_list(const leaf *l) {
    const sr_key *k = l->k;
    yaml_node_t *node = l->node;
    yaml_node_item_t *it = NULL, *end = NULL;
    yaml_node_t *one = NULL;
    if (node->type == YAML_SCALAR_NODE && k->type == T_STRLIST) {
        one = node;
    } else if (node->type == YAML_SEQUENCE_NODE) {
        it = node->data.sequence.items.start;
        end = node->data.sequence.items.top;
    } else {
        return LEAF_ERR(l, "%s: expected %s, got %s", k->key,
                        k->type == T_SIGLIST ? "a list of signal names, e.g. [USR1, TERM]"
                                             : "a path, a glob, or a list of them",
                        cfg_node_kind(node));
    }
    int n = one ? 1 : (int)(end - it);
    sr_strlist nl = {0};
    nl.items = sr_calloc((size_t)n + 1, sizeof *nl.items);
    if (!nl.items)
        return sr_error_oom("a job-file list");
    for (int i = 0; i < n; i++) {
        const char *s;
        sr_status st = list_item(l, one ? one : yaml_document_get_node(l->doc, it[i]), i, &s);
        if (st != SR_OK) {
            cfg_strlist_free(&nl);
            return st;
        }
        if (one && s[0] == '\0') /* "" is the empty list */
            break;
        nl.items[nl.count] = sr_strdup(s);
        if (!nl.items[nl.count]) {
            cfg_strlist_free(&nl);
            return sr_error_oom("a job-file list");
        }
        nl.count++;
    }
    sr_strlist *dst = (sr_strlist *)cfg_field(l->cfg, k);
    cfg_strlist_free(dst);
    *dst = nl;
    return SR_OK;
}

/* data.mixture: a list of {name, train, weight} mappings. */
static void free_mixture(void *f) {
    sr_mixture *m = f;
    for (int i = 0; i < m->count; i++) {
        free(m->src[i].name);
        cfg_strlist_free(&m->src[i].train);
    }
    free(m->src);
    m->src = NULL;
    m->count = 0;
}

bool sr_config_mixture_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SR_MIX_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '.' || *s == '-'))
            return false;
    return true;
}

/* One source mapping into *out (zeroed by the caller). */
static sr_status mixture_item(const leaf *l, yaml_node_t *item, int i, const sr_mixture *sofar, sr_mix_source *out) {
    const char *key = l->k->key;
    if (!item || item->type != YAML_MAPPING_NODE)
        return cfg_error_at(l->ctx, item ? item->start_mark : l->node->start_mark,
                            "%s: item %d: expected a mapping {name: NAME, train: PATHS, weight: W}, got %s", key, i + 1,
                            item ? cfg_node_kind(item) : "nothing");
    yaml_node_t *name = NULL, *train = NULL, *weight = NULL;
    for (yaml_node_pair_t *pr = item->data.mapping.pairs.start; pr < item->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(l->doc, pr->key), *v = yaml_document_get_node(l->doc, pr->value);
        const char *ks = k && k->type == YAML_SCALAR_NODE ? cfg_scalar_text(k) : "";
        yaml_node_t **slot = strcmp(ks, "name") == 0     ? &name
                             : strcmp(ks, "train") == 0  ? &train
                             : strcmp(ks, "weight") == 0 ? &weight
                                                         : NULL;
        if (!slot)
            return cfg_error_at(l->ctx, k ? k->start_mark : item->start_mark,
                                "%s: item %d: unknown key '%s'; expected name, train and weight", key, i + 1, ks);
        if (*slot)
            return cfg_error_at(l->ctx, k->start_mark, "%s: item %d: '%s' given twice", key, i + 1, ks);
        *slot = v;
    }
    const char *missing = !name ? "name" : !train ? "train" : !weight ? "weight" : NULL;
    if (missing)
        return cfg_error_at(l->ctx, item->start_mark,
                            "%s: item %d: expected '%s' (each source is {name, train, weight})", key, i + 1, missing);
    const char *ns = name->type == YAML_SCALAR_NODE ? cfg_scalar_text(name) : "";
    if (name->type != YAML_SCALAR_NODE || !sr_config_mixture_name_ok(ns))
        return cfg_error_at(l->ctx, name->start_mark,
                            "%s: item %d: name '%.80s': expected 1 to %d letters, digits, '_', '.' or '-' (it names "
                            "the source in metrics and checkpoints)",
                            key, i + 1, ns, SR_MIX_NAME_MAX);
    for (int j = 0; j < sofar->count; j++)
        if (strcmp(sofar->src[j].name, ns) == 0)
            return cfg_error_at(l->ctx, name->start_mark,
                                "%s: item %d: the name '%s' is item %d's too; expected unique names", key, i + 1, ns,
                                j + 1);
    double w = 0;
    if (weight->type != YAML_SCALAR_NODE || cfg_parse_float(cfg_scalar_text(weight), &w) != 0 || !(w > 0) ||
        !(w <= 1e9))
        return cfg_error_at(l->ctx, weight->start_mark, "%s: item %d (%s): weight %s: expected a number > 0 and <= 1e9",
                            key, i + 1, ns,
                            weight->type == YAML_SCALAR_NODE ? cfg_scalar_text(weight) : cfg_node_kind(weight));
    /* train: what data.train takes, through the list type's own parser */
    sr_key tk = {key, T_STRLIST, 0, NULL, 0, 0, NULL, NULL};
    sr_config scratch = {0};
    leaf tl = {&scratch, &tk, l->doc, train, l->ctx};
    tk.off = offsetof(sr_config, data_train);
    sr_status st = set_list(&tl);
    if (st != SR_OK)
        return st;
    if (scratch.data_train.count == 0) {
        cfg_strlist_free(&scratch.data_train);
        return cfg_error_at(l->ctx, train->start_mark,
                            "%s: item %d (%s): train is empty; expected shards, a glob or a "
                            "data prepare directory",
                            key, i + 1, ns);
    }
    out->train = scratch.data_train;
    out->weight = w;
    out->name = sr_strdup(ns);
    return out->name ? SR_OK : sr_error_oom("data.mixture");
}

static sr_status set_mixture(const leaf *l) {
    yaml_node_t *node = l->node;
    if (node->type == YAML_SCALAR_NODE && cfg_scalar_is_null(node))
        node = NULL; /* null: the empty list */
    else if (node->type != YAML_SEQUENCE_NODE)
        return LEAF_ERR(l, "%s: expected a list of {name, train, weight} mappings, got %s", l->k->key,
                        cfg_node_kind(node));
    int n = node ? (int)(node->data.sequence.items.top - node->data.sequence.items.start) : 0;
    if (n > SR_MIX_MAX_SOURCES)
        return LEAF_ERR(l, "%s: %d sources; at most %d", l->k->key, n, SR_MIX_MAX_SOURCES);
    sr_mixture m = {sr_calloc((size_t)n + 1, sizeof *m.src), 0};
    if (!m.src)
        return sr_error_oom("data.mixture");
    for (int i = 0; i < n; i++) {
        sr_status st =
            mixture_item(l, yaml_document_get_node(l->doc, node->data.sequence.items.start[i]), i, &m, &m.src[m.count]);
        if (st != SR_OK) {
            free_mixture(&m);
            return st;
        }
        m.count++;
    }
    sr_mixture *dst = (sr_mixture *)cfg_field(l->cfg, l->k);
    free_mixture(dst);
    *dst = m;
    return SR_OK;
}

/* data.val: a path or a list (one unnamed set), or {NAME: paths, ...}. */
static void free_valsets(void *f) {
    sr_valsets *v = f;
    for (int i = 0; i < v->count; i++) {
        free(v->set[i].name);
        cfg_strlist_free(&v->set[i].paths);
    }
    free(v->set);
    v->set = NULL;
    v->count = 0;
}

/* paths as data.train takes them, through the list type's own parser */
static sr_status valset_paths(const leaf *l, yaml_node_t *node, sr_strlist *out) {
    sr_key tk = {l->k->key, T_STRLIST, offsetof(sr_config, data_train), NULL, 0, 0, NULL, NULL};
    sr_config scratch = {0};
    leaf tl = {&scratch, &tk, l->doc, node, l->ctx};
    sr_status st = set_list(&tl);
    *out = scratch.data_train;
    return st;
}

static sr_status set_valsets(const leaf *l) {
    yaml_node_t *node = l->node;
    const char *key = l->k->key;
    sr_valsets v = {sr_calloc(SR_VAL_MAX_SETS + 1, sizeof *v.set), 0};
    if (!v.set)
        return sr_error_oom("data.val");
    sr_status st = SR_OK;
    if (node->type != YAML_MAPPING_NODE) { /* the list form: one set without a name */
        sr_strlist paths;
        if ((st = valset_paths(l, node, &paths)) == SR_OK && paths.count)
            v.set[v.count++].paths = paths;
        else
            cfg_strlist_free(&paths);
    }
    for (yaml_node_pair_t *pr = node->type == YAML_MAPPING_NODE ? node->data.mapping.pairs.start : NULL;
         st == SR_OK && pr && pr < node->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(l->doc, pr->key), *val = yaml_document_get_node(l->doc, pr->value);
        const char *ks = k && k->type == YAML_SCALAR_NODE ? cfg_scalar_text(k) : "";
        if (!k || k->type != YAML_SCALAR_NODE || !sr_config_mixture_name_ok(ks)) {
            st = cfg_error_at(l->ctx, k ? k->start_mark : node->start_mark,
                              "%s: set name '%.80s': expected 1 to %d letters, digits, '_', '.' or '-' (it names the "
                              "set's loss, val_loss/NAME)",
                              key, ks, SR_MIX_NAME_MAX);
            break;
        }
        for (int j = 0; st == SR_OK && j < v.count; j++)
            if (strcmp(v.set[j].name, ks) == 0)
                st = cfg_error_at(l->ctx, k->start_mark, "%s: the set '%s' is given twice; expected unique names", key,
                                  ks);
        if (st == SR_OK && v.count == SR_VAL_MAX_SETS)
            st = cfg_error_at(l->ctx, k->start_mark, "%s: more than %d validation sets", key, SR_VAL_MAX_SETS);
        sr_strlist paths = {0};
        if (st == SR_OK && !val)
            st = cfg_error_at(l->ctx, k->start_mark, "%s: the set '%s' has no value", key, ks);
        if (st == SR_OK && (st = valset_paths(l, val, &paths)) == SR_OK && paths.count == 0)
            st =
                cfg_error_at(l->ctx, val->start_mark,
                             "%s: the set '%s' is empty; expected shards, a glob or a data prepare directory", key, ks);
        if (st == SR_OK) {
            v.set[v.count].paths = paths;
            if (!(v.set[v.count++].name = sr_strdup(ks)))
                st = sr_error_oom("data.val");
        } else {
            cfg_strlist_free(&paths);
        }
    }
    if (st == SR_OK && node->type == YAML_MAPPING_NODE && v.count == 0)
        st = LEAF_ERR(l,
                      "%s: an empty mapping names no validation set; expected {NAME: shards, ...} (hint: leave "
                      "data.val out for the default)",
                      key);
    if (st != SR_OK) {
        free_valsets(&v);
        return st;
    }
    sr_valsets *dst = (sr_valsets *)cfg_field(l->cfg, l->k);
    free_valsets(dst);
    *dst = v;
    return SR_OK;
}

/* ---- formatting values ---- */

static void fmt_double(char *buf, size_t n, double v) {
    /* Shortest form that reads back to the same double. */
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* Keep it a YAML float-looking number. */
    if (!strpbrk(buf, ".eEn"))
        strncat(buf, ".0", n - strlen(buf) - 1);
}

static void fmt_yaml_string(char *buf, size_t n, const char *s) {
    size_t used = 0;
    buf[used++] = '"';
    for (; *s && used + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[used++] = '\\';
            buf[used++] = (char)c;
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            buf[used++] = '\\';
            buf[used++] = 'x';
            buf[used++] = hex[c >> 4];
            buf[used++] = hex[c & 15];
        } else {
            buf[used++] = (char)c;
        }
    }
    buf[used++] = '"';
    buf[used] = '\0';
}

bool sr_config_unquote(const char *printed, char *out, size_t n) {
    size_t len = strlen(printed), used = 0;
    if (len < 2 || printed[0] != '"' || printed[len - 1] != '"' || n == 0)
        return false;
    for (size_t i = 1; i + 1 < len; i++) {
        char c = printed[i];
        if (c == '\\') {
            char e = printed[++i];
            if (e == '"' || e == '\\') {
                c = e;
            } else if (e == 'x' && i + 2 < len - 1) {
                char hex[3] = {printed[i + 1], printed[i + 2], '\0'};
                char *end;
                c = (char)strtol(hex, &end, 16);
                if (*end)
                    return false;
                i += 2;
            } else {
                return false;
            }
        }
        if (used + 1 >= n)
            return false;
        out[used++] = c;
    }
    out[used] = '\0';
    return true;
}

static void fmt_int(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%lld", (long long)*(const int64_t *)f);
}

static void fmt_float(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    fmt_double(buf, n, *(const double *)f);
}

static void fmt_bool(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%s", *(const bool *)f ? "true" : "false");
}

static void fmt_str(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    fmt_yaml_string(buf, n, *(char *const *)f ? *(char *const *)f : "");
}

static void fmt_enum_value(const void *f, const sr_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s", k->names[*(const int64_t *)f]);
}

static void fmt_reshard(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    int64_t v = *(const int64_t *)f;
    if (v == SR_RESHARD_TRUE)
        snprintf(buf, n, "true");
    else if (v == SR_RESHARD_FALSE)
        snprintf(buf, n, "false");
    else
        snprintf(buf, n, "%lld", (long long)v);
}

static void fmt_list(const void *f, const sr_key *k, char *buf, size_t n) {
    const sr_strlist *l = f;
    if (k->type == T_STRLIST && l->count == 0) {
        snprintf(buf, n, "\"\"");
        return;
    }
    sr_line out = sr_line_on(buf, n);
    sr_line_add(&out, "[");
    for (int i = 0; i < l->count && !out.cut; i++) {
        char item[4200];
        if (k->type == T_SIGLIST)
            snprintf(item, sizeof item, "%s", l->items[i]);
        else
            fmt_yaml_string(item, sizeof item, l->items[i]);
        sr_line_add(&out, "%s%s", i ? ", " : "", item);
    }
    sr_line_add(&out, "]");
}

static void fmt_mixture(const void *f, const sr_key *k, char *buf, size_t n) {
    const sr_mixture *m = f;
    sr_line out = sr_line_on(buf, n);
    sr_line_add(&out, "[");
    for (int i = 0; i < m->count && !out.cut; i++) {
        char list[4200], w[40];
        sr_key lk = *k;
        lk.type = T_STRLIST;
        fmt_list(&m->src[i].train, &lk, list, sizeof list);
        fmt_double(w, sizeof w, m->src[i].weight);
        sr_line_add(&out, "%s{name: %s, train: %s, weight: %s}", i ? ", " : "", m->src[i].name, list, w);
    }
    sr_line_add(&out, "]");
}

static void fmt_valsets(const void *f, const sr_key *k, char *buf, size_t n) {
    const sr_valsets *v = f;
    sr_key lk = *k;
    lk.type = T_STRLIST;
    if (v->count == 0 || !v->set[0].name) { /* as the list type prints it */
        sr_strlist none = {0};
        fmt_list(v->count ? &v->set[0].paths : &none, &lk, buf, n);
        return;
    }
    sr_line out = sr_line_on(buf, n);
    sr_line_add(&out, "{");
    for (int i = 0; i < v->count && !out.cut; i++) {
        char list[4200];
        fmt_list(&v->set[i].paths, &lk, list, sizeof list);
        sr_line_add(&out, "%s%s: %s", i ? ", " : "", v->set[i].name, list);
    }
    sr_line_add(&out, "}");
}

/* ---- describing types (config keys, shardrun.yaml(5)) ---- */

static void desc_int(const sr_key *k, char *buf, size_t n) {
    if (k->max >= I64MAX)
        snprintf(buf, n, "integer >= %.0f", k->min);
    else
        snprintf(buf, n, "integer %.0f..%.0f", k->min, k->max);
}

static void desc_float(const sr_key *k, char *buf, size_t n) { snprintf(buf, n, "number %g..%g", k->min, k->max); }

static void desc_enum(const sr_key *k, char *buf, size_t n) {
    sr_line l = sr_line_on(buf, n);
    for (int i = 0; k->names[i]; i++)
        sr_line_add(&l, "%s%s", i ? " | " : "", k->names[i]);
}

static void free_str(void *f) {
    free(*(char **)f);
    *(char **)f = NULL;
}

void free_list(void *f) { cfg_strlist_free(f); }

/* ---- the type table: one row per value type ---- */

const value_type cfg_types[] = {
    [T_INT] = {set_int, fmt_int, desc_int, NULL, NULL},
    [T_FLOAT] = {set_float, fmt_float, desc_float, NULL, NULL},
    [T_BOOL] = {set_bool, fmt_bool, NULL, "true | false", NULL},
    [T_STR] = {set_str, fmt_str, NULL, "string", free_str},
    [T_ENUM] = {set_enum, fmt_enum_value, desc_enum, NULL, NULL},
    [T_RESHARD] = {set_reshard, fmt_reshard, NULL, "true | false | N >= 2", NULL},
    [T_STRLIST] = {set_list, fmt_list, NULL, "path | glob | list", free_list},
    [T_SIGLIST] = {set_list, fmt_list, NULL, "list of signal names", free_list},
    [T_MIXTURE] = {set_mixture, fmt_mixture, NULL, "list of {name, train, weight}", free_mixture},
    [T_VALSETS] = {set_valsets, fmt_valsets, NULL, "path | glob | list | {NAME: paths}", free_valsets},
};

/* Sets one leaf key from a YAML node, validating its type and range. */
sr_status cfg_set_leaf(sr_config *cfg, int ki, yaml_document_t *doc, yaml_node_t *node, const parse_ctx *ctx) {
    leaf l = {cfg, &cfg_keys[ki], doc, node, ctx};
    return cfg_types[cfg_keys[ki].type].set(&l);
}

void cfg_fmt_value(const sr_config *cfg, const sr_key *k, char *buf, size_t n) {
    cfg_types[k->type].format(cfg_cfield(cfg, k), k, buf, n);
}

const char *cfg_type_name(const sr_key *k, char *buf, size_t n) {
    if (cfg_types[k->type].describe)
        cfg_types[k->type].describe(k, buf, n);
    else
        snprintf(buf, n, "%s", cfg_types[k->type].text);
    return buf;
}
