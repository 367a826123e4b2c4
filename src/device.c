/* device.c — GPU choice from the local rank and the run's device line; see
 * device.h. */
#include "srconfig.h"

#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef SR_HAVE_CUDA
#include <cuda_runtime.h>
#endif

int sr_device_count_visible(const char *visible) {
    if (!visible || !*visible)
        return 0;
    int n = 1;
    for (const char *p = visible; *p; p++)
        n += *p == ',';
    return n;
}

/* The i-th comma-separated entry of `list`. */
static void nth_entry(const char *list, int i, char *out, size_t n) {
    out[0] = '\0';
    if (!list)
        return;
    const char *p = list;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p)
        return;
    size_t len = strcspn(p, ",");
    if (len >= n)
        len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
}

int sr_device_pick(const char *visible, int n_visible, int local_rank, int local_size, char *physical,
                   size_t physical_len, char *err, size_t err_len) {
    int pick = -1;
    if (n_visible == 1)
        pick = 0;
    else if (n_visible >= local_size && local_rank < n_visible)
        pick = local_rank;
    if (pick < 0) {
        snprintf(err, err_len,
                 "this task sees %d GPU%s (CUDA_VISIBLE_DEVICES=%s) but is local rank %d of %d on its node; expected "
                 "exactly one GPU per task or at least one per local task (hint: srun --gpus-per-task=1)",
                 n_visible, n_visible == 1 ? "" : "s", visible ? visible : "(unset)", local_rank, local_size);
        return -1;
    }
    if (physical) {
        if (visible && *visible)
            nth_entry(visible, pick, physical, physical_len);
        else
            snprintf(physical, physical_len, "%d", pick);
    }
    return pick;
}

void sr_device_describe(char *buf, size_t n, int local_rank, int local_size) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    int n_visible = sr_device_count_visible(visible);
    const char *why = "built without CUDA";
#ifdef SR_HAVE_CUDA
    char cuda_why[160];
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        snprintf(cuda_why, sizeof cuda_why, "no usable GPU: %s", cudaGetErrorString(e));
    else if (count == 0)
        snprintf(cuda_why, sizeof cuda_why, "no usable GPU");
    else
        snprintf(cuda_why, sizeof cuda_why, "%d GPU%s usable; the CUDA back end has not landed yet", count,
                 count == 1 ? "" : "s");
    why = cuda_why;
    if (e == cudaSuccess && count > 0 && n_visible == 0)
        n_visible = count;
#endif
    char phys[64], err[512];
    int pick = n_visible > 0
                   ? sr_device_pick(visible, n_visible, local_rank, local_size, phys, sizeof phys, err, sizeof err)
                   : -1;
    if (pick >= 0)
        snprintf(buf, n, "cpu (would pick GPU %s, ordinal %d, from CUDA_VISIBLE_DEVICES=%s; %s)", phys, pick,
                 visible ? visible : "(unset)", why);
    else if (n_visible > 0)
        snprintf(buf, n, "cpu (would pick no GPU: %d visible for local rank %d of %d; %s)", n_visible, local_rank,
                 local_size, why);
    else
        snprintf(buf, n, "cpu (no GPU visible; %s)", why);
}
