/* test_primitives.c — kernels/mma.cuh's warp-level primitives against the
 * PTX ISA's tables (tests/data) and tile_gemm.cu against the CPU op
 * (tests/primitives.h), on whatever CUDA this build runs on: the emulator
 * in an emulator tree (CI), a GPU elsewhere (test_kernels runs the same
 * checks there); without a device it skips. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "tap.h"

#include "primitives.h"

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        const char *req = getenv("SHARDRUN_TEST_REQUIRE");
        char why[200];
        snprintf(why, sizeof why, "no GPU: cudaGetDeviceCount says %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        if (req && strstr(req, "gpu")) {
            tap_ok(0, "SHARDRUN_TEST_REQUIRE has gpu, but %s", why);
            return tap_done();
        }
        printf("1..0 # SKIP %s\n", why);
        return 0;
    }
    cudaSetDevice(0);
    sr_check_primitives(getenv("SR_SRCDIR"));
    tap_ok(cudaGetLastError() == cudaSuccess, "no CUDA error at the end");
    return tap_done();
}
