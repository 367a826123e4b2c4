/* test_mesh.c — the 2-D mesh: shard x replicate from the job's keys, each
 * rank's place, its shard, replicate and reshard-N groups, and the
 * refusals (a mesh that does not fill the world, N that does not divide
 * the shard group). */
#include "srconfig.h"

#include <string.h>

#include "mesh.h"
#include "tap.h"

static int same(const int *a, const int *b, int n) { return memcmp(a, b, sizeof(int) * (size_t)n) == 0; }

int main(void) {
    sr_mesh m;
    int g[16];
    tap_ok(sr_mesh_init(&m, 4, 2, 0, 1) == SR_OK && m.S == 4 && m.R == 1 && m.shard_idx == 2 && m.rep_idx == 0,
           "shard 0 takes ranks / replicate: 4 ranks are one shard group of 4");
    tap_ok(sr_mesh_init(&m, 8, 5, 0, 2) == SR_OK && m.S == 4 && m.R == 2 && m.shard_idx == 1 && m.rep_idx == 1,
           "8 ranks, replicate 2: rank 5 is shard 1 of replica 1");
    tap_ok(sr_mesh_shard_group(&m, g) == 4 && same(g, (int[]){4, 5, 6, 7}, 4),
           "its shard group is the 4 consecutive ranks of its replica");
    tap_ok(sr_mesh_replicate_group(&m, g) == 2 && same(g, (int[]){1, 5}, 2),
           "its replicate group is the ranks with its shard index (1, 5)");
    tap_ok(sr_mesh_world_group(&m, g) == 8 && g[0] == 0 && g[7] == 7, "the world group is every rank in order");
    tap_ok(sr_mesh_world_rank(&m, 1, 3) == 7 && sr_mesh_world_rank(&m, 0, 0) == 0,
           "world rank = replica x S + shard index");
    tap_ok(sr_mesh_check_reshard(&m, 2, "k") == SR_OK && sr_mesh_reshard_group(&m, 2, g) == 2 &&
               same(g, (int[]){4, 5}, 2),
           "reshard 2: rank 5 keeps a copy with rank 4");
    tap_ok(sr_mesh_init(&m, 6, 0, 3, 2) == SR_OK && m.S == 3 && m.R == 2, "shard 3 x replicate 2 = 6 ranks");
    tap_ok(sr_mesh_init(&m, 6, 0, 4, 1) == SR_ERR_CONFIG && strstr(sr_error_message(), "shard 4 x replicate 1") &&
               strstr(sr_error_message(), "6 ranks"),
           "shard 4 on 6 ranks is refused naming both: %s", sr_error_message());
    tap_ok(sr_mesh_init(&m, 6, 0, 0, 4) == SR_ERR_CONFIG, "replicate 4 does not divide 6 ranks: refused");
    sr_mesh_init(&m, 6, 0, 6, 1);
    tap_ok(sr_mesh_check_reshard(&m, 4, "sharding.reshard_after_forward.blocks") == SR_ERR_CONFIG &&
               strstr(sr_error_message(), "must divide the shard group size 6"),
           "reshard 4 on a shard group of 6 is refused: %s", sr_error_message());
    tap_ok(sr_mesh_check_reshard(&m, -1, "k") == SR_OK && sr_mesh_check_reshard(&m, 0, "k") == SR_OK &&
               sr_mesh_check_reshard(&m, 3, "k") == SR_OK,
           "true, false and a divisor are accepted");
    int ok = 1;
    for (int W = 1; W <= 12; W++)
        for (int R = 1; R <= W; R++) {
            if (W % R)
                continue;
            for (int r = 0; r < W; r++) {
                sr_mesh_init(&m, W, r, 0, R);
                ok = ok && sr_mesh_world_rank(&m, m.rep_idx, m.shard_idx) == r;
                int n = sr_mesh_shard_group(&m, g);
                int in = 0;
                for (int i = 0; i < n; i++)
                    in += g[i] == r;
                ok = ok && in == 1;
            }
        }
    tap_ok(ok, "every rank of every mesh up to 12 ranks is in its shard group, at world rank = R x S + index");
    return tap_done();
}
