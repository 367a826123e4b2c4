/* mesh.c — mesh derivation and group lists; see mesh.h. */
#include "srconfig.h"

#include "mesh.h"

sr_status sr_mesh_init(sr_mesh *m, int world, int rank, int64_t shard, int64_t replicate) {
    *m = (sr_mesh){.world = world, .rank = rank};
    int64_t S = shard ? shard : (replicate > 0 && world % replicate == 0 ? world / replicate : 0);
    if (replicate < 1 || S < 1 || S * replicate != world)
        return sr_error(SR_ERR_CONFIG,
                        "sharding.mesh: shard %lld x replicate %lld must equal the %d ranks of the job (hint: shard: 0 "
                        "takes ranks / replicate)",
                        (long long)shard, (long long)replicate, world);
    m->S = (int)S;
    m->R = (int)replicate;
    m->shard_idx = rank % m->S;
    m->rep_idx = rank / m->S;
    return SR_OK;
}

int sr_mesh_world_rank(const sr_mesh *m, int replica, int shard) { return replica * m->S + shard; }

int sr_mesh_world_group(const sr_mesh *m, int *out) {
    for (int i = 0; i < m->world; i++)
        out[i] = i;
    return m->world;
}

int sr_mesh_shard_group(const sr_mesh *m, int *out) {
    for (int i = 0; i < m->S; i++)
        out[i] = sr_mesh_world_rank(m, m->rep_idx, i);
    return m->S;
}

int sr_mesh_replicate_group(const sr_mesh *m, int *out) {
    for (int i = 0; i < m->R; i++)
        out[i] = sr_mesh_world_rank(m, i, m->shard_idx);
    return m->R;
}

int sr_mesh_reshard_group(const sr_mesh *m, int N, int *out) {
    int first = (m->shard_idx / N) * N;
    for (int k = 0; k < N; k++)
        out[k] = sr_mesh_world_rank(m, m->rep_idx, first + k);
    return N;
}

sr_status sr_mesh_check_reshard(const sr_mesh *m, int64_t N, const char *key) {
    if (N >= 2 && (N > m->S || m->S % N != 0))
        return sr_error(SR_ERR_CONFIG,
                        "%s: %lld must divide the shard group size %d (hint: true, false, or a divisor of %d such as "
                        "the ranks per node)",
                        key, (long long)N, m->S, m->S);
    return SR_OK;
}
