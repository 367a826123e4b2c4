/* manifest_impl.h — what the manifest module's files share (manifest.c:
 * the format's rendering and parsing; manifest_data.c: the data record and
 * the mixture's state): the emitter and the parse context, their helpers.
 * Internal to the module. */
#ifndef SR_MANIFEST_IMPL_H
#define SR_MANIFEST_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "manifest.h"
#include "status.h"

/* A libyaml emitter and whether every event so far was emitted. */
typedef struct {
    yaml_emitter_t em;
    bool ok;
} man_emitter;

/* One scalar; a mapping's or a sequence's start or end (flow: on one
 * line); a key and its value (a string, a u64, the shortest double that
 * reads back). */
void man_e_str(man_emitter *e, const char *s);
void man_e_map(man_emitter *e, bool start, bool flow);
void man_e_seq(man_emitter *e, bool start, bool flow);
void man_kv_str(man_emitter *e, const char *k, const char *v);
void man_kv_u64(man_emitter *e, const char *k, uint64_t v);
void man_kv_dbl_short(man_emitter *e, const char *k, double v);

/* The document being parsed and its file's name for messages. */
typedef struct {
    yaml_document_t doc;
    const char *path;
} man_pctx;

/* SR_ERR_DATA "path:line:col: message" at node n (NULL: no place). */
sr_status man_perr(man_pctx *p, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The value of `key` in mapping `map` (NULL: not a mapping or no key). */
yaml_node_t *man_mget(man_pctx *p, yaml_node_t *map, const char *key);
/* A sequence's length and its item i. */
size_t man_seq_len(const yaml_node_t *n);
yaml_node_t *man_seq_item(man_pctx *p, const yaml_node_t *n, size_t i);
/* map's `key` as an integer 0..max, a number, a string (into out[n]);
 * SR_ERR_DATA naming the key and its place otherwise. */
sr_status man_get_u64(man_pctx *p, yaml_node_t *map, const char *key, uint64_t max, uint64_t *out);
sr_status man_get_dbl(man_pctx *p, yaml_node_t *map, const char *key, double *out);
sr_status man_get_str(man_pctx *p, yaml_node_t *map, const char *key, char *out, size_t n);

/* manifest_data.c: data.mixture's state under data (T: the tokens a
 * sequence holds), the data record (provenance); and back. */
void man_render_mixture(man_emitter *e, const sr_mix_state *m, int T);
void man_render_data(man_emitter *e, const sr_data_record *d);
sr_status man_parse_mixture(man_pctx *p, yaml_node_t *mix, sr_mix_state *m);
sr_status man_parse_data(man_pctx *p, yaml_node_t *root, sr_manifest *mf);

#endif
