/* device.c — CPU/GPU run decision and its log line; see device.h. */
#include "device.h"

#include <stdio.h>

#include "srconfig.h"
#ifdef SR_HAVE_CUDA
#include <cuda_runtime.h>
#endif

int sr_device_describe(char *buf, size_t n) {
#ifdef SR_HAVE_CUDA
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(buf, n, "cpu (CUDA build, no usable GPU: %s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no devices");
        return 0;
    }
    snprintf(buf, n, "cpu (%d GPU%s visible; GPU training arrives with the CUDA back end)", count,
             count == 1 ? "" : "s");
    return count;
#else
    snprintf(buf, n, "cpu (built without CUDA)");
    return 0;
#endif
}
