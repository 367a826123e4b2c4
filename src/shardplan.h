/* shardplan.h — units, shards and slices: how the unit-major parameter
 * vector is cut for S shards.
 *
 * shardplan owns the layout both the FSDP engine and the checkpoints use,
 * so neither derives it on its own: a unit is sharding.blocks_per_unit
 * consecutive blocks (or the root: embeddings and final LayerNorm, always
 * the last unit); unit u of n floats is padded to S * P with P = ceil(n /
 * S), and shard index k holds floats [off + k P, off + (k+1) P) of it —
 * the part below off + n is real, the rest padding.  A rank's shard buffers
 * (master parameters, gradients, Adam m and v) hold its P of every unit
 * back to back; a slice records where a run of real elements of the global
 * vector sits in them. */
#ifndef SR_SHARDPLAN_H
#define SR_SHARDPLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

/* A slice [begin, end) of the global parameter vector stored at `local` in
 * a rank's shard buffers. */
typedef struct {
    size_t begin, end, local;
} sr_slice;

typedef struct {
    int first_layer, last_layer; /* inclusive; the root is L..L */
    bool root;
    size_t off, n;    /* global offset and size in floats */
    size_t P;         /* padded shard size: ceil(n / S) */
    size_t local;     /* offset of this unit's shard in the shard buffers */
    size_t accum_off; /* offset of this unit in a full-size (S * P per unit) buffer */
} sr_unit_plan;

typedef struct {
    int S, L;
    int nunits;          /* block units, then the root */
    sr_unit_plan *units; /* nunits */
    int *unit_of_layer;  /* L + 1 entries (layer L is the root) */
    size_t local_size;   /* floats per rank in the shard buffers (sum of P) */
    size_t accum_size;   /* floats in a full-size buffer (sum of S * P) */
    size_t n_params;     /* floats in the global vector */
} sr_shardplan;

/* Plans the units of a model whose layer l (0..L-1 blocks, L the root)
 * starts at layer_offset[l] (L + 2 entries, the last the end) for S shards.
 * blocks_per_unit 1..L.  SR_ERR_INTERNAL when out of memory.  Free with
 * sr_shardplan_free. */
sr_status sr_shardplan_init(sr_shardplan *p, const size_t *layer_offset, int L, int blocks_per_unit, int S);
void sr_shardplan_free(sr_shardplan *p);

/* The slices shard index `shard` owns (real elements only), in unit order:
 * out[] needs room for p->nunits; returns how many were written (units
 * whose shard is all padding have none). */
int sr_shardplan_slices(const sr_shardplan *p, int shard, sr_slice *out);
/* Real elements shard index `shard` holds (shard 0 holds the most). */
size_t sr_shardplan_shard_elements(const sr_shardplan *p, int shard);
/* Full-unit bytes: the largest block unit, and the units kept gathered,
 * for elements of `esize` bytes. */
size_t sr_shardplan_largest_block_bytes(const sr_shardplan *p, size_t esize);

#endif
