/* cudamod.h — the CUDA back end as a loadable module: what the module
 * hands the program, and where the program finds it.
 *
 * cudamod owns the seam between the program and its CUDA back end.  The
 * back end (the cuda device table, the CUDA op tables, the cuBLASLt plans,
 * the kernels and the NCCL data plane) is built into a shared module,
 * shardrun-cuda.so, installed under $(pkglibdir); the program has no
 * link-time dependency on any CUDA or NCCL library, and maps none of them
 * until a run needs a GPU.  The module exports one symbol, `sr_cuda_module`
 * (an sr_cudamod); everything the program calls in it goes through that
 * table, and everything it calls in the program (errors, the log, PMIx,
 * the transport) resolves against the program's exported symbols (the
 * program links with -rdynamic).
 *
 * Where the module is looked for, in order (sr_cudamod_get):
 *   1. SHARDRUN_CUDA_MODULE, when set and non-empty: that file and no other;
 *   2. the build tree: when the running program is a file of the build tree
 *      it was configured in, the module built beside it;
 *   3. $(pkglibdir)/shardrun-cuda.so (make install puts it there).
 * A missing, unloadable (a CUDA library it needs is absent) or mismatched
 * module (another shardrun version, or one built from other headers or
 * another configuration: version, interface number and a hash of the
 * shared headers are checked at load) is SR_ERR_CONFIG (78) naming the file
 * and the reason, with a hint.  The test programs of a CUDA build link the
 * back end in instead (they call into its internals): the table is then
 * the linked one and nothing is loaded.
 *
 * Whether a GPU is worth loading the module for (`device: auto`) is
 * sr_cudamod_detect's question, answered without the module or any large
 * library: the device nodes first, then the driver's own count. */
#ifndef SR_CUDAMOD_H
#define SR_CUDAMOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "ops.h"
#include "status.h"

/* The module's file name, in the build tree and in $(pkglibdir). */
#define SR_CUDAMOD_FILE "shardrun-cuda.so"
/* The environment variable that names the module (shardrun(1)). */
#define SR_CUDAMOD_ENV "SHARDRUN_CUDA_MODULE"
/* The table's interface number: bumped when sr_cudamod changes shape. */
#define SR_CUDAMOD_INTERFACE 3

/* What the module hands the program.  The NCCL entries are NULL in a
 * module built without NCCL. */
typedef struct sr_cudamod {
    uint32_t interface;   /* SR_CUDAMOD_INTERFACE */
    uint32_t size;        /* sizeof(sr_cudamod) where the module was built */
    const char *version;  /* PACKAGE_VERSION */
    const char *abi;      /* SR_ABI_HASH: the shared headers and srconfig.h */
    const char *build;    /* SR_CUDAMOD_BUILD */
    const char *versions; /* "CUDA runtime 13.0, cuBLASLt 130000" (the libraries it runs on) */
    /* The GPUs the CUDA runtime sees (cudaGetDeviceCount): >= 0, or -1
     * with the runtime's reason in `why`. */
    int (*device_count)(char *why, size_t n);
    /* The cuda table on GPU `ordinal` (device_cuda.c's sr_dev_cuda_open). */
    sr_status (*open)(sr_dev **out, int ordinal, const char *physical);
    /* The cuda table opened dry (device.h `dry`: counted in the ledger,
     * never issued; no GPU, no CUDA call), bound to the calling thread. */
    sr_status (*open_dry)(sr_dev **out);
    void (*close)(sr_dev *d);
    const sr_ops *ops_f32, *ops_bf16;
    const sr_ops *ops_bf16_flash; /* bf16 with flash attention (model.attention) */
    /* The NCCL plane (an sr_nccl_impl of comm_nccl.h, which dispatches to
     * it), NULL in a module built without NCCL: typed there, above this
     * layer. */
    const void *nccl;
} sr_cudamod;

/* What a module and a program must agree on beyond the headers: the CUDA
 * it runs on (the real one or the emulator) and whether it has NCCL. */
#if defined(SR_CUDA_EMULATED) && defined(SR_HAVE_NCCL)
#define SR_CUDAMOD_BUILD "cuda-emulated+nccl"
#elif defined(SR_CUDA_EMULATED)
#define SR_CUDAMOD_BUILD "cuda-emulated"
#elif defined(SR_HAVE_NCCL)
#define SR_CUDAMOD_BUILD "cuda+nccl"
#else
#define SR_CUDAMOD_BUILD "cuda"
#endif

/* The CUDA back end, loaded on first call (every later call answers the
 * same): SR_OK with *out set, or SR_ERR_CONFIG (78) with *out NULL and the
 * message naming the file looked for or loaded, the reason and a hint (in
 * a build without CUDA: saying so).  Thread-safe. */
sr_status sr_cudamod_get(const sr_cudamod **out);

/* The back end if it is loaded (or linked in), else NULL; never loads. */
const sr_cudamod *sr_cudamod_loaded(void);

/* Where the loaded back end came from: the module's path, or "linked in";
 * NULL when none is loaded. */
const char *sr_cudamod_path(void);

/* The GPUs this task could use, asked without loading the module: 0 with
 * the reason in `why` when no /dev/nvidia<N> device node exists; otherwise
 * the driver's count (libcuda.so.1: cuInit, cuDeviceGetCount), or 0 with
 * its reason when it has none or cannot be loaded.  SHARDRUN_TEST_GPU_DETECT
 * answers instead in tests.  Answers the same on every call. */
int sr_cudamod_detect(char *why, size_t n);

#endif
