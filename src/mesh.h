/* mesh.h — the device mesh: shard x replicate, and which ranks form each
 * group.
 *
 * mesh owns the arithmetic of the 2-D mesh (HSDP, ARCHITECTURE.md §3): world rank =
 * replica * S + shard index.  Shard groups are S consecutive ranks (one
 * replica), replicate groups the R ranks with the same shard index, and a
 * reshard-N group (reshard_after_forward: N) the N consecutive ranks of a
 * shard group that share a kept copy.  Group lists are world ranks in ring
 * order.  Pure arithmetic: no communication, no allocation. */
#ifndef SR_MESH_H
#define SR_MESH_H

#include <stdint.h>

#include "status.h"

typedef struct {
    int world, rank;        /* world size and this rank */
    int S, R;               /* shard group size, number of replicas */
    int shard_idx, rep_idx; /* this rank's place: rank = rep_idx * S + shard_idx */
} sr_mesh;

/* Derives the mesh for `world` ranks seen from `rank`: shard S (0 = world /
 * replicate) x replicate R must equal world.  SR_ERR_CONFIG (message
 * without a place; the caller adds where the keys were set) otherwise. */
sr_status sr_mesh_init(sr_mesh *m, int world, int rank, int64_t shard, int64_t replicate);

/* The world rank holding shard index `shard` of replica `replica`. */
int sr_mesh_world_rank(const sr_mesh *m, int replica, int shard);

/* Fills out[] (room for the group's size) with a group's world ranks in
 * ring order and returns its size: every rank; this rank's shard group (S);
 * its replicate group (R); its reshard group of N ranks (N must divide S:
 * sr_mesh_check_reshard). */
int sr_mesh_world_group(const sr_mesh *m, int *out);
int sr_mesh_shard_group(const sr_mesh *m, int *out);
int sr_mesh_replicate_group(const sr_mesh *m, int *out);
int sr_mesh_reshard_group(const sr_mesh *m, int N, int *out);

/* SR_ERR_CONFIG (no place) unless N divides the shard group size. */
sr_status sr_mesh_check_reshard(const sr_mesh *m, int64_t N, const char *key);

#endif
