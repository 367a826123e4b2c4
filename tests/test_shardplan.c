/* test_shardplan.c — units, padding and slices for 1..8 shards: the slices
 * of all shard indices tile the parameter vector exactly once, sit inside
 * the shard buffers at their unit's place, every unit pads to S * ceil(n/S),
 * shard 0 holds the most, and a unit whose shard is all padding contributes
 * no slice.  Uneven sizes throughout (a 37-token vocabulary, 3 and 5 blocks,
 * up to 3 blocks per unit). */
#include "srconfig.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "shardplan.h"
#include "tap.h"

/* Checks one plan; returns a description of the first problem or NULL. */
static const char *check_plan(const sr_model *m, const sr_shardplan *p, int S, int bpu) {
    static char why[256];
    int L = m->d.L, want_units = (L + bpu - 1) / bpu + 1;
    if (p->nunits != want_units)
        return "unit count";
    size_t local = 0, accum = 0;
    for (int ui = 0; ui < p->nunits; ui++) {
        const sr_unit_plan *u = &p->units[ui];
        if (u->P != (u->n + (size_t)S - 1) / (size_t)S || u->local != local || u->accum_off != accum)
            return "padding or offsets";
        if (u->root != (ui == p->nunits - 1) || (u->root && (u->first_layer != L || u->last_layer != L)))
            return "the root is not the last unit";
        for (int l = u->first_layer; l <= u->last_layer; l++)
            if (p->unit_of_layer[l] != ui)
                return "unit_of_layer";
        if (u->off != m->layer_offset[u->first_layer] || u->off + u->n != m->layer_offset[u->last_layer + 1])
            return "unit extent";
        local += u->P;
        accum += (size_t)S * u->P;
    }
    if (p->local_size != local || p->accum_size != accum || p->n_params != m->n_params)
        return "sizes";
    unsigned char *seen = calloc(m->n_params, 1);
    sr_slice *sl = malloc(sizeof *sl * (size_t)p->nunits);
    size_t most = 0;
    for (int k = 0; k < S; k++) {
        int n = sr_shardplan_slices(p, k, sl);
        size_t held = 0;
        for (int i = 0; i < n; i++) {
            if (sl[i].begin >= sl[i].end || sl[i].end > m->n_params ||
                sl[i].local + (sl[i].end - sl[i].begin) > local) {
                free(seen);
                free(sl);
                snprintf(why, sizeof why, "shard %d slice %d out of bounds", k, i);
                return why;
            }
            /* the slice sits at its unit's place: local = unit.local + (begin - unit.off - k P) */
            const sr_unit_plan *u = &p->units[p->unit_of_layer[0]];
            for (int ui = 0; ui < p->nunits; ui++)
                if (sl[i].begin >= p->units[ui].off && sl[i].begin < p->units[ui].off + p->units[ui].n)
                    u = &p->units[ui];
            if (sl[i].local != u->local || sl[i].begin != u->off + (size_t)k * u->P) {
                free(seen);
                free(sl);
                snprintf(why, sizeof why, "shard %d slice %d not at its unit's place", k, i);
                return why;
            }
            for (size_t e = sl[i].begin; e < sl[i].end; e++)
                seen[e]++;
            held += sl[i].end - sl[i].begin;
        }
        if (held != sr_shardplan_shard_elements(p, k)) {
            free(seen);
            free(sl);
            return "shard_elements disagrees with the slices";
        }
        if (k == 0)
            most = held;
        else if (held > most) {
            free(seen);
            free(sl);
            return "a shard holds more than shard 0";
        }
    }
    for (size_t e = 0; e < m->n_params; e++)
        if (seen[e] != 1) {
            snprintf(why, sizeof why, "element %zu is held %d times", e, seen[e]);
            free(seen);
            free(sl);
            return why;
        }
    free(seen);
    free(sl);
    return NULL;
}

int main(void) {
    const sr_model_dims dims[] = {{.L = 3, .NH = 2, .C = 8, .V = 37, .T = 5},
                                  {.L = 5, .NH = 1, .C = 4, .V = 3, .T = 2}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        sr_model m;
        sr_model_init(&m, dims[di], &sr_ops_cpu, NULL, 0, false);
        for (int bpu = 1; bpu <= 3; bpu++) {
            const char *bad = NULL;
            int bad_S = 0;
            for (int S = 1; S <= 8 && !bad; S++) {
                sr_shardplan p;
                if (sr_shardplan_init(&p, m.layer_offset, m.d.L, bpu, S) != SR_OK) {
                    bad = "init failed";
                    bad_S = S;
                    break;
                }
                bad = check_plan(&m, &p, S, bpu);
                bad_S = S;
                sr_shardplan_free(&p);
            }
            tap_ok(!bad, "%d blocks of %zu floats in all, %d per unit, 1..8 shards: slices tile the vector once%s%s",
                   m.d.L, m.n_params, bpu, bad ? "; at S = " : "", bad ? bad : "");
            if (bad)
                tap_diag("S = %d", bad_S);
        }
        sr_model_free(&m);
    }
    /* a shard that is all padding holds no slice: 3 floats over 8 shards */
    size_t offs[] = {0, 3, 6};
    sr_shardplan p;
    sr_shardplan_init(&p, offs, 1, 1, 8);
    sr_slice sl[4];
    tap_ok(p.units[0].P == 1 && sr_shardplan_slices(&p, 2, sl) == 2 && sr_shardplan_slices(&p, 5, sl) == 0 &&
               sr_shardplan_shard_elements(&p, 7) == 0,
           "3 floats per unit over 8 shards: shards 0..2 hold one each, 3..7 only padding");
    tap_ok(sr_shardplan_largest_block_bytes(&p, 4) == 8 * 4, "the largest block unit is S x P elements (32 bytes)");
    sr_shardplan_free(&p);
    return tap_done();
}
