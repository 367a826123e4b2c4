/* yamlload.h — one YAML document from text, with limits enforced while it
 * is read.
 *
 * yamlload owns how the program turns outside YAML (job files, --set values,
 * checkpoint manifests) into libyaml's document tree: it drives libyaml's
 * event parser itself and builds the tree with libyaml's document API, so
 * every limit holds before the input can cost time or memory — nesting
 * depth (libyaml's scanner slows down quadratically with flow depth, so a
 * cap applied after yaml_parser_load would come minutes too late), entries
 * per collection, bytes per document — and so what libyaml's loader
 * forgets stays known: an explicitly tagged scalar (`!!str 3`) keeps its
 * tag, a duplicate mapping key can be refused, aliases of collections
 * (which make walkers exponential: "billion laughs") are refused.
 * Hand-written over the event API because libyaml's loader offers no hook
 * for any of this. */
#ifndef SR_YAMLLOAD_H
#define SR_YAMLLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

typedef struct {
    int max_depth;          /* nested collections; 64 */
    size_t max_entries;     /* items of a sequence, pairs of a mapping; 1e6 */
    size_t max_bytes;       /* of the document's text; 64 MiB */
    bool refuse_duplicates; /* a mapping key given twice */
} sr_yaml_limits;

/* The limits every reader of outside YAML uses (depth 64, 1e6 entries per
 * collection, 64 MiB, duplicates refused). */
extern const sr_yaml_limits sr_yaml_default_limits;

/* Why a load failed: a message and where (0-based line and column). */
typedef struct {
    char msg[512];
    size_t line, column;
    bool syntax; /* libyaml's own syntax error (msg starts "YAML syntax error: ") */
    bool oom;    /* an allocation failed: the input is not at fault */
} sr_yaml_error;

/* Loads the first document of text[0, len) into *doc (delete it with
 * yaml_document_delete).  *has_root is false for an empty stream (doc is
 * then initialised and empty).  A second document in the stream is an
 * error when `single`.  Returns false with *err filled for a syntax error
 * or a broken limit; doc is then not initialised. */
bool sr_yaml_load(const char *text, size_t len, const sr_yaml_limits *lim, bool single, yaml_document_t *doc,
                  bool *has_root, sr_yaml_error *err);

/* True when a scalar node carried an explicit tag other than !!str (e.g.
 * `!!int 3`), or an explicit !!str: such a scalar is never a number or a
 * boolean. */
bool sr_yaml_explicit_str(const yaml_node_t *node);

#endif
