/* cuda_module.c — the CUDA module's one export: sr_cuda_module, the table
 * through which the program reaches the back end (cudamod.h says how it is
 * found, loaded and checked).  Built into shardrun-cuda.so, and linked
 * into the test programs of a CUDA build, which reach the back end
 * directly too.  Its version, interface and ABI hash are those of the
 * build that made it: the loader refuses a module whose differ from its
 * own. */
#include "srconfig.h"

#include "cudamod.h"

#include <stdio.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "comm_nccl.h"
#include "cuda_backend.h"
#include "sr_abi.h"

/* cudaGetDeviceCount's answer, its error clearing the thread's last error
 * (the next call must not see it). */
static int device_count(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess)
        return count;
    (void)cudaGetLastError();
    snprintf(why, n, "cudaGetDeviceCount says %s (error %d)", cudaGetErrorString(e), (int)e);
    return -1;
}

/* The CUDA runtime and cuBLASLt this module runs on: the versions of the
 * libraries the loader resolved, not of the headers it was built with. */
static char versions[96];
static const char *describe_versions(void) {
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
#ifdef SR_CUDA_EMULATED
    snprintf(versions, sizeof versions, "the CUDA emulator of tests/cudaemu as CUDA runtime %d.%d", rt / 1000,
             rt % 1000 / 10);
#else
    snprintf(versions, sizeof versions, "CUDA runtime %d.%d, cuBLASLt %zu", rt / 1000, rt % 1000 / 10,
             cublasLtGetVersion());
#endif
    return versions;
}

/* (a constructor fills `versions` at load, before the loader reads it) */
__attribute__((constructor)) static void at_load(void) { (void)describe_versions(); }

const sr_cudamod sr_cuda_module = {
    .interface = SR_CUDAMOD_INTERFACE,
    .size = sizeof(sr_cudamod),
    .version = PACKAGE_VERSION,
    .abi = SR_ABI_HASH,
    .build = SR_CUDAMOD_BUILD,
    .versions = versions,
    .device_count = device_count,
    .open = sr_dev_cuda_open,
    .open_dry = sr_dev_cuda_open_dry,
    .close = sr_dev_cuda_close,
    .ops_f32 = &sr_ops_cuda_f32,
    .ops_bf16 = &sr_ops_cuda_bf16,
    .ops_bf16_flash = &sr_ops_cuda_bf16_flash,
#ifdef SR_HAVE_NCCL
    .nccl = &sr_nccl_cuda_impl,
#endif
};
