/* yamlload.c — libyaml's event parser driven by hand, building a document
 * under limits; see yamlload.h. */
#include "srconfig.h"

#include "yamlload.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

const sr_yaml_limits sr_yaml_default_limits = {64, 1000000, (size_t)64 << 20, true};

#define MAX_DEPTH_HARD 256
#define MAX_ANCHORS 1024
#define EXPLICIT "explicit:" /* prefix of the tag of an explicitly tagged scalar */

typedef struct {
    int node; /* the collection's node id */
    bool mapping;
    size_t entries; /* items, or pairs */
    int key;        /* mapping: the key node waiting for its value (0 = none) */
} frame;

typedef struct {
    char *name;
    int node;
    bool scalar;
} anchor;

typedef struct {
    yaml_parser_t parser;
    yaml_document_t *doc;
    const sr_yaml_limits *lim;
    sr_yaml_error *err;
    frame stack[MAX_DEPTH_HARD + 1];
    int depth;
    anchor anchors[MAX_ANCHORS];
    int nanchors;
} loader;

static bool fail(loader *l, yaml_mark_t mark, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(loader *l, yaml_mark_t mark, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->err->msg, sizeof l->err->msg, fmt, ap);
    va_end(ap);
    l->err->line = mark.line;
    l->err->column = mark.column;
    return false;
}

/* An allocation failed (ours or libyaml's): not the input's fault. */
static bool fail_oom(loader *l, yaml_mark_t mark, const char *what) {
    l->err->oom = true;
    return fail(l, mark, "out of memory %s", what);
}

static bool syntax_error(loader *l) {
    yaml_parser_t *p = &l->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return fail_oom(l, p->problem_mark, "parsing the document");
    snprintf(l->err->msg, sizeof l->err->msg, "YAML syntax error: %s%s%s", p->problem ? p->problem : "syntax error",
             p->context ? " " : "", p->context ? p->context : "");
    l->err->line = p->problem_mark.line;
    l->err->column = p->problem_mark.column;
    l->err->syntax = true;
    return false;
}

static int cmp_key(const void *a, const void *b) {
    const yaml_node_t *x = *(yaml_node_t *const *)a, *y = *(yaml_node_t *const *)b;
    int c = strcmp((const char *)x->data.scalar.value, (const char *)y->data.scalar.value);
    if (c)
        return c;
    return x->start_mark.index < y->start_mark.index ? -1 : x->start_mark.index > y->start_mark.index;
}

/* At the end of a mapping: refuse a scalar key given twice (sorted, so a
 * million keys cost n log n, not n^2). */
static bool check_duplicates(loader *l, yaml_node_t *map) {
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (n < 2)
        return true;
    yaml_node_t **keys = sr_malloc(n * sizeof *keys);
    if (!keys)
        return fail_oom(l, map->start_mark, "checking for duplicate keys");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *key = yaml_document_get_node(l->doc, map->data.mapping.pairs.start[i].key);
        if (key && key->type == YAML_SCALAR_NODE)
            keys[k++] = key;
    }
    qsort(keys, k, sizeof *keys, cmp_key);
    bool ok = true;
    for (size_t i = 1; i < k && ok; i++)
        if (strcmp((const char *)keys[i]->data.scalar.value, (const char *)keys[i - 1]->data.scalar.value) == 0)
            ok = fail(l, keys[i]->start_mark, "duplicate key '%s' (first given at line %zu)",
                      (const char *)keys[i]->data.scalar.value, keys[i - 1]->start_mark.line + 1);
    free(keys);
    return ok;
}

/* Hands a finished node to the collection it is in. */
static bool attach(loader *l, int node, yaml_mark_t mark) {
    if (l->depth == 0)
        return true; /* the root */
    frame *f = &l->stack[l->depth - 1];
    if (f->mapping && f->key == 0) {
        f->key = node;
        return true;
    }
    if (++f->entries > l->lim->max_entries)
        return fail(l, mark, "a %s with more than %zu entries (the most a reader of this file accepts)",
                    f->mapping ? "mapping" : "list", l->lim->max_entries);
    int ok = f->mapping ? yaml_document_append_mapping_pair(l->doc, f->node, f->key, node)
                        : yaml_document_append_sequence_item(l->doc, f->node, node);
    f->key = 0;
    return ok ? true : fail_oom(l, mark, "building the document");
}

static bool remember_anchor(loader *l, const yaml_char_t *name, int node, bool scalar, yaml_mark_t mark) {
    if (!name)
        return true;
    if (l->nanchors == MAX_ANCHORS)
        return fail(l, mark, "more than %d anchors", MAX_ANCHORS);
    char *copy = sr_strdup((const char *)name);
    if (!copy)
        return fail_oom(l, mark, "for an anchor");
    l->anchors[l->nanchors++] = (anchor){copy, node, scalar};
    return true;
}

static bool on_alias(loader *l, const yaml_event_t *ev) {
    const char *name = (const char *)ev->data.alias.anchor;
    for (int i = l->nanchors - 1; i >= 0; i--)
        if (strcmp(l->anchors[i].name, name) == 0) {
            if (!l->anchors[i].scalar)
                return fail(l, ev->start_mark,
                            "an alias (*%s) of a list or mapping is not accepted (hint: write the value out)", name);
            return attach(l, l->anchors[i].node, ev->start_mark);
        }
    return fail(l, ev->start_mark, "alias *%s names no anchor", name);
}

static bool on_scalar(loader *l, const yaml_event_t *ev) {
    const yaml_char_t *tag = ev->data.scalar.tag;
    bool explicit_tag = tag && !ev->data.scalar.plain_implicit && !ev->data.scalar.quoted_implicit;
    char buf[256];
    /* every reader treats a value as a C string: a NUL ("\0" in a quoted
     * scalar) would cut it silently */
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
        return fail(l, ev->start_mark,
                    "a NUL character (\\0) inside a value; expected text without NUL (hint: remove the \\0 "
                    "escape)");
    if (explicit_tag)
        snprintf(buf, sizeof buf, EXPLICIT "%s", (const char *)tag);
    int node = yaml_document_add_scalar(l->doc, explicit_tag ? (yaml_char_t *)buf : NULL, ev->data.scalar.value,
                                        (int)ev->data.scalar.length, ev->data.scalar.style);
    if (!node)
        return fail_oom(l, ev->start_mark, "building the document");
    yaml_node_t *n = yaml_document_get_node(l->doc, node);
    n->start_mark = ev->start_mark;
    n->end_mark = ev->end_mark;
    return remember_anchor(l, ev->data.scalar.anchor, node, true, ev->start_mark) && attach(l, node, ev->start_mark);
}

static bool on_start(loader *l, const yaml_event_t *ev, bool mapping) {
    if (l->depth >= l->lim->max_depth || l->depth >= MAX_DEPTH_HARD)
        return fail(l, ev->start_mark, "nesting deeper than %d levels (the most a reader of this file accepts)",
                    l->lim->max_depth);
    int node = mapping ? yaml_document_add_mapping(l->doc, NULL, ev->data.mapping_start.style)
                       : yaml_document_add_sequence(l->doc, NULL, ev->data.sequence_start.style);
    if (!node)
        return fail_oom(l, ev->start_mark, "building the document");
    yaml_document_get_node(l->doc, node)->start_mark = ev->start_mark;
    const yaml_char_t *name = mapping ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
    if (!remember_anchor(l, name, node, false, ev->start_mark))
        return false;
    l->stack[l->depth++] = (frame){node, mapping, 0, 0};
    return true;
}

static bool on_end(loader *l, const yaml_event_t *ev) {
    frame f = l->stack[--l->depth];
    yaml_node_t *n = yaml_document_get_node(l->doc, f.node);
    n->end_mark = ev->end_mark;
    if (f.mapping && l->lim->refuse_duplicates && !check_duplicates(l, n))
        return false;
    return attach(l, f.node, n->start_mark);
}

/* One event; *done set at the end of the document (or stream). */
static bool step(loader *l, yaml_event_t *ev, bool *in_doc, bool *done, bool *has_root, bool single) {
    switch (ev->type) {
    case YAML_STREAM_START_EVENT:
        return true;
    case YAML_DOCUMENT_START_EVENT:
        if (*in_doc || *has_root)
            return single ? fail(l, ev->start_mark,
                                 "expected one YAML document, found a second one (hint: remove the '---' line)")
                          : (*done = true);
        *in_doc = true;
        return true;
    case YAML_DOCUMENT_END_EVENT:
        *in_doc = false;
        *has_root = true;
        if (!single)
            *done = true;
        return true;
    case YAML_STREAM_END_EVENT:
        *done = true;
        return true;
    case YAML_ALIAS_EVENT:
        return on_alias(l, ev);
    case YAML_SCALAR_EVENT:
        return on_scalar(l, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(l, ev, false);
    case YAML_MAPPING_START_EVENT:
        return on_start(l, ev, true);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(l, ev);
    default:
        return true;
    }
}

bool sr_yaml_load(const char *text, size_t len, const sr_yaml_limits *lim, bool single, yaml_document_t *doc,
                  bool *has_root, sr_yaml_error *err) {
    *has_root = false;
    *err = (sr_yaml_error){{0}, 0, 0, false, false};
    loader *l = sr_calloc(1, sizeof *l);
    if (!l) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        err->oom = true;
        return false;
    }
    l->doc = doc;
    l->lim = lim;
    l->err = err;
    bool ok = true;
    if (len > lim->max_bytes) {
        yaml_mark_t zero = {0, 0, 0};
        ok = fail(l, zero, "%zu bytes; a document may have at most %zu MiB", len, lim->max_bytes >> 20);
    }
    if (ok && (!yaml_document_initialize(doc, NULL, NULL, NULL, 1, 1) || !yaml_parser_initialize(&l->parser))) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        err->oom = true;
        free(l);
        return false;
    }
    if (!ok) {
        free(l);
        return false;
    }
    yaml_parser_set_input_string(&l->parser, (const unsigned char *)text, len);
    bool in_doc = false, done = false, saw_root_node = false;
    while (ok && !done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&l->parser, &ev)) {
            ok = syntax_error(l);
            break;
        }
        if (in_doc && ev.type != YAML_DOCUMENT_END_EVENT && ev.type != YAML_DOCUMENT_START_EVENT)
            saw_root_node = true;
        ok = step(l, &ev, &in_doc, &done, has_root, single);
        yaml_event_delete(&ev);
    }
    *has_root = ok && saw_root_node && yaml_document_get_root_node(doc) != NULL;
    yaml_parser_delete(&l->parser);
    for (int i = 0; i < l->nanchors; i++)
        free(l->anchors[i].name);
    free(l);
    if (!ok)
        yaml_document_delete(doc);
    return ok;
}

bool sr_yaml_explicit_str(const yaml_node_t *node) {
    return node->type == YAML_SCALAR_NODE && node->tag &&
           strncmp((const char *)node->tag, EXPLICIT, strlen(EXPLICIT)) == 0;
}
