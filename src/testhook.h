/* testhook.h — the test suite's and benchmarks' hooks into the program, read
 * in one place.
 *
 * testhook owns every SHARDRUN_TEST_* and SHARDRUN_BENCH_* environment
 * variable: it reads and parses them once, and the rest of the program asks
 * this module instead of calling getenv.  They exist so the test suite can
 * reach failure paths (crashes inside a save, allocation failures, signals
 * at a chosen step) and the benchmarks can switch off checksums; a real run
 * has none set, and a run with one set says so in a warning at start.  The
 * variables are documented in shardrun(1), ENVIRONMENT.
 *
 *   SHARDRUN_TEST_CRASH_AT=SITE[:STEP][@RANK]  SIGKILL at a checkpoint crash site
 *   SHARDRUN_TEST_PAUSE_AT=SITE[:STEP][@RANK]  SIGSTOP itself at a crash site or before_connect
 *   SHARDRUN_TEST_PREEMPT_AT=STEP[@RANK]       raise the first preemption signal at STEP (0: at the
 *                                              end of set-up, before the first step)
 *   SHARDRUN_TEST_NAN_AT_STEP=N                make the loss of step N non-finite
 *   SHARDRUN_TEST_DUMP_PARAMS=PATH             write the final full model to PATH
 *   SHARDRUN_TEST_DUMP_SEQS=PATH               every rank appends a line per training sequence
 *                                              it draws: "GLOBAL SOURCE INDEX WINDOW"
 *   SHARDRUN_TEST_ORACLE=DIR                   the first step's batch, a logits row, the
 *                                              full gradient and the step's constants into
 *                                              DIR (tests/gpu/oracle.py compares them with
 *                                              PyTorch; one rank, no offload)
 *   SHARDRUN_TEST_ALLOC_FAIL=N[@RANK]          fail the N-th allocation (1-based)
 *   SHARDRUN_TEST_ISA=LEVEL                    pretend the CPU supports at most LEVEL
 *   SHARDRUN_TEST_MEM_AVAILABLE=BYTES          pretend /proc/meminfo's MemAvailable is BYTES
 *   SHARDRUN_TEST_NODE_MEM=BYTES               pretend the node's physical memory is BYTES
 *   SHARDRUN_TEST_NODE_RANKS=K                 the memory tier (checkpoint.memory) takes blocks
 *                                              of K ranks as nodes, named node0, node1, ... (%n)
 *   SHARDRUN_TEST_NO_PMIX_EVENTS=1             register no PMIx event handler (the parent
 *                                              watch alone must notice a dead launcher)
 *   SHARDRUN_TEST_DEVICE=fake                  the fake device table (device.h)
 *   SHARDRUN_TEST_DEVICE_FREE_MB=N             the fake device's free memory (MiB)
 *   SHARDRUN_TEST_GPU_DETECT=N                 device: auto's detection (cudamod.h) sees N
 *                                              GPUs without asking the device nodes or the
 *                                              driver
 *   SHARDRUN_TEST_POISON=1                     fill device-table allocations with NaN
 *                                              (make check sets it; changes no result of a
 *                                              correct program, so it is not warned about)
 *   SHARDRUN_TEST_HB=1                         the happens-before checker (hbcheck.h; make
 *                                              check sets it; not warned about either)
 *   SHARDRUN_TEST_SKIP_WAIT=SITE[,SITE..]|list skip the named waits (the checker must then
 *                                              report a race); list: print the sites, exit 0
 *   SHARDRUN_TEST_COMM_DELAY_US=N[:comm|compute]
 *                                              sleep N us before every operation on that
 *                                              stream (default comm); results stay bitwise
 *   SHARDRUN_TEST_GPU_HANG_AT=STEP             the cuda table stalls its compute stream at step
 *                                              STEP (a kernel that spins for an hour): the
 *                                              host wait's deadline must end the run
 *   SHARDRUN_TEST_MUTATE=keep_notready|pageable_step
 *                                              a bug planted for the mutation suite
 *                                              (tests/mutants.sh): sr_cuda_query leaves
 *                                              cudaErrorNotReady as the last error; step-path
 *                                              downloads skip the pinned bounce buffer
 *   SHARDRUN_TEST_STALL_SEQ=K                  collective K of the transport never completes on
 *                                              world rank 0 (the watchdog must end the run)
 *   SHARDRUN_TEST_MISMATCH_SEQ=K[@RANK]        world rank RANK (default 0) issues host-transport
 *                                              collective K with another size (one element
 *                                              fewer): the ranks disagree, the run ends, and
 *                                              shardrun debug flight must name the mismatch
 *   SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=N        the background checkpoint writer sleeps N ms
 *                                              before it writes (asynchronous saves)
 *   SHARDRUN_BENCH_NO_SHA256=1                 checkpoints without checksums (benchmarks)
 *   SHARDRUN_BENCH_COUNTS=DIR                  every rank appends its traffic counters
 *                                              (counts.h) to DIR/rank<N>.tsv at start-up and
 *                                              at every logged step (bench/scale.sh) */
#ifndef SR_TESTHOOK_H
#define SR_TESTHOOK_H

/* The crash sites of a checkpoint save, in the order a save reaches them
 * (ckpt.c calls them; SHARDRUN_TEST_CRASH_AT and PAUSE_AT name one;
 * PAUSE_AT also takes before_connect, train.c's). */
#define SR_TESTHOOK_CRASH_SITES                                                                                        \
    "after_shard_write, before_manifest, after_manifest, before_rename, after_rename, before_latest, after_latest, "   \
    "memory_committed"

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef struct {
    /* SHARDRUN_TEST_CRASH_AT: site name ("" = off), step (-1 = any), rank (-1 = any) */
    char crash_site[32];
    int64_t crash_step;
    int crash_rank;
    /* SHARDRUN_TEST_PAUSE_AT: the same fields, for a stop instead of a kill */
    char pause_site[32];
    int64_t pause_step;
    int pause_rank;
    /* SHARDRUN_TEST_PREEMPT_AT: step (-1 = off), rank (-1 = any) */
    int64_t preempt_step;
    int preempt_rank;
    int64_t nan_step;        /* -1 = off */
    char dump_params[4096];  /* "" = off */
    char dump_seqs[4096];    /* SHARDRUN_TEST_DUMP_SEQS: "" = off */
    char bench_counts[4096]; /* SHARDRUN_BENCH_COUNTS: "" = off */
    char oracle_dir[4096];   /* SHARDRUN_TEST_ORACLE: "" = off */
    int64_t alloc_fail;      /* 0 = off */
    int alloc_fail_rank;     /* -1 = every rank */
    char isa[16];            /* "" = off */
    int64_t mem_available;   /* -1 = off */
    int64_t node_mem;        /* -1 = off */
    int64_t node_ranks;      /* SHARDRUN_TEST_NODE_RANKS: the memory tier's nodes of K ranks; -1 = off */
    bool no_pmix_events;
    char device[8];         /* "" = off, "fake" */
    int64_t device_free_mb; /* -1 = off */
    int64_t gpu_detect;     /* SHARDRUN_TEST_GPU_DETECT: -1 = off */
    bool poison;
    bool hb;               /* SHARDRUN_TEST_HB */
    char skip_wait[256];   /* "" = off; "list"; or a comma list of wait sites */
    int64_t comm_delay_us; /* 0 = off */
    int comm_delay_stream; /* 0: comm, 1: compute */
    int64_t stall_seq;     /* -1 = off */
    int64_t mismatch_seq;  /* SHARDRUN_TEST_MISMATCH_SEQ: -1 = off */
    int mismatch_rank;     /* its rank (default 0) */
    int64_t gpu_hang_step; /* SHARDRUN_TEST_GPU_HANG_AT: -1 = off */
    char mutate[16];       /* SHARDRUN_TEST_MUTATE: "" = off, "keep_notready", "pageable_step" */
    bool bench_no_sha256;
    int64_t ckpt_write_delay_ms; /* 0 = off */
    bool nccl_size1;             /* SHARDRUN_TEST_NCCL_SIZE1=1: size-1 groups get an NCCL communicator */
    bool staged; /* SHARDRUN_TEST_STAGED_COLLECTIVES=1: the fake device stages collectives as one GPU's virtual ranks do
                  */
} sr_testhooks;

/* Parses every hook variable of the current environment into *h; on a
 * value that does not parse, SR_ERR_CONFIG with why (the others still
 * parsed).  Pure: also fuzzed. */
sr_status sr_testhook_parse(sr_testhooks *h, char *why, size_t n);
/* Reads and parses every hook variable (once; later calls return the first
 * result).  SR_ERR_CONFIG naming the variable when a value does not parse;
 * the hooks that did parse stay in effect. */
sr_status sr_testhook_init(void);
/* The parsed hooks (read on first use when sr_testhook_init was not called). */
const sr_testhooks *sr_testhook(void);
/* Logs one warning naming every hook in effect (nothing when none is). */
void sr_testhook_warn_active(void);
/* True when SHARDRUN_TEST_CRASH_AT names `site`, and its step and rank (if
 * given) match. */
bool sr_testhook_crash_here(const char *site, int64_t step, int rank);
/* When SHARDRUN_TEST_PAUSE_AT names this point (site, step and rank
 * matched as for SHARDRUN_TEST_CRASH_AT): says so on stderr and stops
 * the process (SIGSTOP) until a test continues or kills it.  Points: the
 * checkpoint crash sites, and before_connect (step 0: before the transport
 * connects to its peers). */
void sr_testhook_pause_point(const char *site, int64_t step, int rank);

#endif
