/* shardplan.c — unit and shard arithmetic; see shardplan.h. */
#include "srconfig.h"

#include "shardplan.h"

#include <stdlib.h>
#include <string.h>

#include "mem.h"

sr_status sr_shardplan_init(sr_shardplan *p, const size_t *layer_offset, int L, int blocks_per_unit, int S) {
    *p = (sr_shardplan){.S = S, .L = L};
    int bpu = blocks_per_unit, nblock_units = (L + bpu - 1) / bpu;
    p->nunits = nblock_units + 1;
    p->units = sr_calloc((size_t)p->nunits, sizeof *p->units);
    p->unit_of_layer = sr_calloc((size_t)L + 1, sizeof *p->unit_of_layer);
    if (!p->units || !p->unit_of_layer) {
        sr_shardplan_free(p);
        return sr_error_oom("the shard plan");
    }
    size_t local = 0, accum = 0;
    for (int ui = 0; ui < p->nunits; ui++) {
        sr_unit_plan *u = &p->units[ui];
        u->root = ui == nblock_units;
        u->first_layer = u->root ? L : ui * bpu;
        u->last_layer = u->root ? L : (ui * bpu + bpu - 1 < L - 1 ? ui * bpu + bpu - 1 : L - 1);
        u->off = layer_offset[u->first_layer];
        u->n = layer_offset[u->last_layer + 1] - u->off;
        u->P = (u->n + (size_t)S - 1) / (size_t)S;
        u->local = local;
        u->accum_off = accum;
        local += u->P;
        accum += (size_t)S * u->P;
        for (int l = u->first_layer; l <= u->last_layer; l++)
            p->unit_of_layer[l] = ui;
    }
    p->local_size = local;
    p->accum_size = accum;
    p->n_params = layer_offset[L + 1];
    return SR_OK;
}

void sr_shardplan_free(sr_shardplan *p) {
    free(p->units);
    free(p->unit_of_layer);
    *p = (sr_shardplan){0};
}

int sr_shardplan_slices(const sr_shardplan *p, int shard, sr_slice *out) {
    int n = 0;
    for (int ui = 0; ui < p->nunits; ui++) {
        const sr_unit_plan *u = &p->units[ui];
        size_t b = u->off + (size_t)shard * u->P;
        size_t e = b + u->P < u->off + u->n ? b + u->P : u->off + u->n;
        if (b < e)
            out[n++] = (sr_slice){b, e, u->local};
    }
    return n;
}

size_t sr_shardplan_shard_elements(const sr_shardplan *p, int shard) {
    size_t total = 0;
    for (int ui = 0; ui < p->nunits; ui++) {
        const sr_unit_plan *u = &p->units[ui];
        size_t b = (size_t)shard * u->P;
        if (b < u->n)
            total += u->n - b < u->P ? u->n - b : u->P;
    }
    return total;
}

size_t sr_shardplan_largest_block_bytes(const sr_shardplan *p, size_t esize) {
    size_t b = 0;
    for (int ui = 0; ui < p->nunits - 1; ui++) {
        size_t x = (size_t)p->S * p->units[ui].P * esize;
        b = x > b ? x : b;
    }
    return b;
}
