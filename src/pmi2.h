/* pmi2.h — Slurm's PMI2 (srun --mpi=pmi2), the second bootstrap: the
 * library, loaded at run time, and what its answers mean.
 *
 * pmi2 owns Slurm's libpmi2: finding and loading it (never linked at build
 * time — it belongs to the site's Slurm version), its calls, the string
 * key-value store and the job's process mapping.  What a bootstrap is for
 * (rank facts, the all-gather the transports use, the watchdogs) stays in
 * world, which chooses between PMIx and PMI2. */
#ifndef SR_PMI2_H
#define SR_PMI2_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

/* The longest value PMI2 stores (PMI2_MAX_VALLEN of Slurm's pmi2.h, with
 * its terminating NUL) and the longest key (PMI2_MAX_KEYLEN). */
#define SR_PMI2_MAX_VALUE 1024
#define SR_PMI2_MAX_KEY 64

/* Whether this process was started with PMI2's environment (Slurm's pmi2
 * plugin sets PMI_FD, the socket to slurmstepd, with PMI_RANK and PMI_SIZE). */
bool sr_pmi2_environment(void);

/* Loads the library (SHARDRUN_PMI2_LIBRARY when set, else libpmi2.so.0,
 * then libpmi2.so) and calls PMI2_Init.  On success *rank, *size and the
 * job id (PMI2_Job_GetId, "" when it has none) are set.  SR_ERR_CONFIG
 * when the library does not load (naming it and the package), SR_ERR_PEER
 * when PMI2_Init fails. */
sr_status sr_pmi2_init(int *rank, int *size, char *job_id, size_t job_id_size);

/* This rank's place from the job attribute PMI_process_mapping: node id,
 * local rank, local size and the number of nodes.  SR_ERR_PEER when the
 * attribute is missing or does not parse. */
sr_status sr_pmi2_placement(int rank, int size, int *node_id, int *local_rank, int *local_size, int *num_nodes);

/* The mapping's grammar, "(vector,(start,nodes,per_node),...)": blocks in
 * rank order, each giving per_node consecutive ranks to each of nodes
 * nodes from node start; the list repeats until every rank is placed
 * (a cyclic distribution).  Exposed for tests.  False when `mapping`
 * does not parse or places no rank. */
bool sr_pmi2_parse_mapping(const char *mapping, int rank, int size, int *node_id, int *local_rank, int *local_size,
                           int *num_nodes);

/* Put of one string value, the fence (every rank's puts visible after it;
 * no timeout of its own: world watches it), and the get of rank r's value
 * (at most SR_PMI2_MAX_VALUE bytes with the NUL).  SR_ERR_PEER naming the
 * call and the PMI2 error code. */
sr_status sr_pmi2_put(const char *key, const char *value);
sr_status sr_pmi2_fence(void);
sr_status sr_pmi2_get(int r, const char *key, char *value, size_t size);

/* PMI2_Finalize, when initialized. */
void sr_pmi2_finalize(void);

#endif
