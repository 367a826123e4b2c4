/* device.h — what compute device this process uses.
 *
 * device owns the decision between a CPU run and a GPU run (DESIGN §7).  In
 * this version every run trains on the CPU; a CUDA-enabled binary probes
 * cudaGetDeviceCount so the log says what it saw. */
#ifndef SR_DEVICE_H
#define SR_DEVICE_H

#include <stddef.h>

/* Describes the device in `buf` ("cpu (...why...)") and returns the number of
 * usable CUDA devices (0 when none or when built without CUDA). */
int sr_device_describe(char *buf, size_t n);

#endif
