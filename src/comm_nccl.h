/* comm_nccl.h — the NCCL data plane of multi-GPU runs.
 *
 * comm_nccl owns everything that talks to NCCL: the bootstrap (a
 * duplicate-GPU check, rank 0's unique id through the PMIx all-gather, a
 * nonblocking ncclCommInitRankConfig polled up to comm.timeout_s, a check
 * that every rank declared the same groups, then one ncclCommSplit per
 * group in declared order), the typed collectives on the device table's
 * comm stream, a ring of issued collectives that a watchdog thread
 * watches, and the abort that ends a stalled or failed plane (ncclCommAbort
 * from a helper thread with a 5 s deadline, then a post-mortem over the
 * TCP transport and exit 69).  The TCP transport stays the control plane
 * (host all-reduces, barriers, the checkpoint agreement).
 *
 * The pieces that link no NCCL (the duplicate-GPU and group checks, the
 * status mapping) are the program's (comm_nccl.c), in every build, so
 * tests/test_nccl_boot runs them under mpirun in CI.  Everything that calls
 * NCCL is in the CUDA module (comm_nccl_cuda.c, an sr_nccl_impl, cudamod.h):
 * the functions below that need it dispatch to the loaded module, and
 * return SR_ERR_CONFIG (78) saying so when there is none with NCCL.
 *
 * Errors map to statuses as doc/ARCHITECTURE.md §3c says: NCCL system, remote
 * and internal errors, watchdog timeouts and an init past its deadline are
 * SR_ERR_PEER (69); invalid argument or usage and unhandled CUDA errors
 * are SR_ERR_INTERNAL (70); a duplicate GPU, a bad interface and planned
 * memory above free memory are SR_ERR_CONFIG (78). */
#ifndef SR_COMM_NCCL_H
#define SR_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "comm.h"
#include "device.h"
#include "dtype.h"
#include "status.h"
#include "world.h"

#define SR_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct sr_nccl sr_nccl;

/* "2.28.9", or NULL when no module with NCCL is loaded. */
const char *sr_nccl_version(void);

/* The status of an ncclResult_t (an int, so builds without NCCL and the
 * tests can ask): 0 success and 7 in progress are SR_OK; 1 unhandled CUDA
 * error, 4 invalid argument, 5 invalid usage are SR_ERR_INTERNAL; 2
 * system, 3 internal, 6 remote error (and anything unknown) are
 * SR_ERR_PEER. */
sr_status sr_nccl_status(int result);

/* Rank 0's unique id on every rank: rank 0 calls ncclGetUniqueId (it needs
 * no GPU), every rank all-gathers through PMIx under "shardrun.nccl_id"
 * and keeps rank 0's.  SR_ERR_PEER when PMIx fails, SR_ERR_CONFIG without
 * NCCL. */
sr_status sr_nccl_exchange_id(sr_world *w, unsigned char id[SR_NCCL_ID_BYTES], double timeout_s);

/* Before NCCL init: every rank's (host, PCI bus id) through PMIx; two ranks
 * on one GPU is SR_ERR_CONFIG naming both ranks, the host and the bus id
 * with the hint --gpus-per-task=1 or --gpu-bind (NCCL would refuse them
 * later with "Duplicate GPU detected").  busid NULL: this rank could not
 * tell its bus id and has its own message; it still takes part, so every
 * rank ends with SR_ERR_CONFIG (the others naming it), none with a PMIx
 * timeout.  SHARDRUN_TEST_GPU_BUSID=<a comma list indexed by local rank>
 * stands in for the GPU's bus id in tests (sr_nccl_test_busid). */
sr_status sr_nccl_check_unique_gpu(sr_world *w, const char *busid, double timeout_s);

/* The bus id SHARDRUN_TEST_GPU_BUSID gives this local rank, or `real`
 * when it is unset; SR_ERR_CONFIG for a list without this local rank. */
sr_status sr_nccl_test_busid(int local_rank, const char *real, char *out, size_t size);

/* Every rank declared the same groups (number, names, sizes, in order):
 * the splits are collective over the world, so a rank with one group more
 * would deadlock them.  Compared through PMIx; a difference is
 * SR_ERR_INTERNAL naming the first rank that differs from rank 0 and both
 * declarations. */
sr_status sr_nccl_check_groups(sr_world *w, sr_group *const *groups, int ngroups, double timeout_s);

/* What the plane needs from the job. */
typedef struct {
    double timeout_s;      /* comm.timeout_s: init, splits, the watchdog */
    const char *interface; /* comm.interface: NCCL_SOCKET_IFNAME when unset */
    bool size1_comms;      /* SHARDRUN_TEST_NCCL_SIZE1=1: size-1 groups get a communicator too */
} sr_nccl_opts;

/* Opens the plane on the cuda table `d` (world size >= 1): the bootstrap
 * above, then a communicator for every group of `groups` with more than
 * one rank (or every group with size1_comms), attached to the group
 * (sr_group_set_device_comm).  Logs NCCL's device memory (the
 * cudaMemGetInfo delta).  Starts the watchdog.  *out is set even on
 * failure (NULL or a plane to close). */
sr_status sr_nccl_open(sr_nccl **out, sr_world *w, sr_dev *d, sr_transport *tp, sr_group *const *groups, int ngroups,
                       const sr_nccl_opts *o);
/* Stops the watchdog and destroys the communicators.  NULL is fine. */
void sr_nccl_close(sr_nccl *n);
/* Device bytes NCCL took at init (the cudaMemGetInfo delta), for the
 * memory check of tests/gpu/check.sh. */
size_t sr_nccl_device_bytes(const sr_nccl *n);

typedef enum { SR_NCCL_ALLGATHER, SR_NCCL_REDUCE_SCATTER, SR_NCCL_ALLREDUCE } sr_nccl_kind;

/* One collective over g's communicator on the device's comm stream, in
 * the shapes of comm.h (all-gather: recv[n*count] from send[count];
 * reduce-scatter: recv[count] from send[n*count]; all-reduce: in place,
 * recv == send, count elements), SUM for the reductions.  The host checks
 * count x element size against both buffers' bytes (sbytes, rbytes)
 * before NCCL sees them: a wrong count is SR_ERR_INTERNAL naming the
 * collective, never an overrun.  The collective enters the watchdog's
 * ring.  Returns the plane's sticky status. */
sr_status sr_nccl_collective(sr_nccl *n, sr_nccl_kind kind, sr_group *g, void *recv, size_t rbytes, const void *send,
                             size_t sbytes, size_t count, sr_dtype dt);

/* The NCCL-calling half, as the CUDA module implements it
 * (comm_nccl_cuda.c: sr_nccl_cuda_impl; cudamod.h's `nccl`): one entry per
 * function above of the same name. */
typedef struct {
    const char *(*version)(void);
    sr_status (*exchange_id)(sr_world *w, unsigned char id[SR_NCCL_ID_BYTES], double timeout_s);
    sr_status (*open)(sr_nccl **out, sr_world *w, sr_dev *d, sr_transport *tp, sr_group *const *groups, int ngroups,
                      const sr_nccl_opts *o);
    void (*close)(sr_nccl *n);
    size_t (*device_bytes)(const sr_nccl *n);
    sr_status (*collective)(sr_nccl *n, sr_nccl_kind kind, sr_group *g, void *recv, size_t rbytes, const void *send,
                            size_t sbytes, size_t count, sr_dtype dt);
} sr_nccl_impl;
/* (defined in the CUDA module only) */
extern const sr_nccl_impl sr_nccl_cuda_impl;

#endif
