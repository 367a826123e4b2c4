/* config_impl.h — what the config module's files share (config.c: the
 * key table; config_values.c: typed values; config_yaml.c:
 * YAML and --set; config_model.c: the model family's finalization): the
 * table's row, where a value came from, a value being set, the type table's
 * row.  Internal to the module. */
#ifndef SR_CONFIG_IMPL_H
#define SR_CONFIG_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config.h"
#include "family.h"
#include "status.h"

typedef enum { T_INT, T_FLOAT, T_BOOL, T_STR, T_ENUM, T_RESHARD, T_STRLIST, T_SIGLIST, T_MIXTURE, T_VALSETS } key_type;

typedef struct {
    const char *key; /* dotted path */
    key_type type;
    size_t off;               /* offset in sr_config */
    const char *def;          /* default as YAML text; NULL: from model.preset */
    double min, max;          /* inclusive range for T_INT, T_FLOAT, T_RESHARD */
    const char *const *names; /* T_ENUM values */
    const char *doc;
} sr_key;

struct sr_key_origin {
    char *file; /* NULL: never set */
    int line, col;
    char *setarg; /* the --set argument, when set by --set */
};

typedef struct {
    const char *file;   /* file name, or NULL for --set */
    const char *setarg; /* the --set argument */
} parse_ctx;

typedef struct {
    sr_config *cfg;
    const sr_key *k;
    yaml_document_t *doc;
    yaml_node_t *node;
    const parse_ctx *ctx;
} leaf;

#define LEAF_ERR(l, ...) cfg_error_at((l)->ctx, (l)->node->start_mark, __VA_ARGS__)

typedef struct {
    sr_status (*set)(const leaf *l);
    void (*format)(const void *field, const sr_key *k, char *buf, size_t n);
    void (*describe)(const sr_key *k, char *buf, size_t n); /* NULL: the fixed text */
    const char *text;
    void (*release)(void *field); /* NULL: nothing owned */
} value_type;

/* The largest int64 a key's range may name (config.c's table). */
#define I64MAX 9.2e18

/* One row per key_type: config_values.c's. */
extern const value_type cfg_types[];

/* The key table and its size, the signals preemption.signals accepts
 * (NULL-ended): config.c's.  The presets and the families: family.h. */
extern const sr_key cfg_keys[];
extern const int cfg_nkeys;
#define NKEYS cfg_nkeys
extern const char *const cfg_signal_names[];

/* Where key k's value lives in cfg. */
static inline void *cfg_field(sr_config *cfg, const sr_key *k) { return (char *)cfg + k->off; }
static inline const void *cfg_cfield(const sr_config *cfg, const sr_key *k) { return (const char *)cfg + k->off; }

sr_status cfg_error_at(const parse_ctx *ctx, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cfg_key_index(const char *path);
/* True when `path` is a section: some key starts with "path.". */
bool cfg_is_section(const char *path);
void cfg_strlist_free(sr_strlist *l);
const char *cfg_scalar_text(yaml_node_t *node);
bool cfg_scalar_is_plain(yaml_node_t *node);
bool cfg_scalar_is_null(yaml_node_t *node);
const char *cfg_node_kind(yaml_node_t *node);
/* Parses a YAML boolean; returns -1 when `s` is not one. */
int cfg_parse_bool(const char *s);
/* Parses a whole decimal integer.  Returns 0, or ERANGE on overflow, or
 * EINVAL when `s` is not an integer. */
int cfg_parse_int(const char *s, int64_t *out);
int cfg_parse_float(const char *s, double *out);
void cfg_fmt_range_int(char *buf, size_t n, const sr_key *k);
void cfg_fmt_enum(char *buf, size_t n, const char *const *names);
/* Sets one leaf key from a YAML node, validating its type and range. */
sr_status cfg_set_leaf(sr_config *cfg, int ki, yaml_document_t *doc, yaml_node_t *node, const parse_ctx *ctx);
void cfg_fmt_value(const sr_config *cfg, const sr_key *k, char *buf, size_t n);
const char *cfg_type_name(const sr_key *k, char *buf, size_t n);
/* The key (or section) another trainer's `name` (any case) means, or
 * NULL; *note (when note is not NULL) the alias's note, or NULL. */
const char *cfg_alias_of(const char *name, const char **note);
/* Suggests the closest key for an unknown `name` under section `prefix`
 * ("" for the top level) into out ("" none): another trainer's name for
 * it, else the closest among siblings, else among all leaf keys whose
 * last component matches.  Returns the suggestion's note (how a key
 * with no counterpart here follows from ours), or NULL. */
const char *cfg_suggest(const char *prefix, const char *name, char *out, size_t n);
/* Loads one YAML document from `text` under the limits every reader of
 * outside YAML uses (yamlload.h); a second document is refused.  On success
 * *doc is initialised (delete it) and *has_root false for an empty stream.
 * Returns SR_ERR_CONFIG with the problem and its place. */
sr_status cfg_load_document(yaml_document_t *doc, const char *text, size_t len, const parse_ctx *ctx, bool *has_root);
/* Key ki back to its built-in default (or, without one, the zero its
 * rules derive from: the preset's dimensions), and "not set". */
sr_status cfg_reset_key(sr_config *cfg, int ki);
bool cfg_was_set(const sr_config *cfg, const char *name);
/* The divisor of n closest to want (ties: the smaller). */
int64_t cfg_nearest_divisor(int64_t n, int64_t want);
/* "A-B" or "A" with 1 <= A <= B: log.trace_steps. */
bool cfg_parse_step_range(const char *s, int64_t *a, int64_t *b);
void cfg_format_where(char *buf, size_t n, const parse_ctx *ctx, yaml_mark_t mark);

#endif
