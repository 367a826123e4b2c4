/* device.c — the choice of the device table, the blocking copies, GPU
 * choice from the local rank and the run's device line; see device.h.  The
 * cpu and fake tables are in device_cpu.c. */
#include "srconfig.h"

#include "device.h"

#include "testhook.h"

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

sr_status sr_device_open(sr_dev **out, sr_device_want want) {
    *out = NULL;
    if (want == SR_DEVICE_CUDA) {
#ifdef SR_HAVE_CUDA
        return sr_error(SR_ERR_CONFIG, "device: cuda is not implemented yet: the CUDA back end is a later release "
                                       "(hint: device: auto or cpu)");
#else
        return sr_error(SR_ERR_CONFIG, "device: cuda, but this shardrun was built without CUDA (hint: device: auto "
                                       "or cpu, or a build configured --with-cuda)");
#endif
    }
    bool fake = strcmp(sr_testhook()->device, "fake") == 0;
    *out = fake ? sr_dev_fake_open() : sr_dev_cpu_open();
    return *out ? SR_OK : sr_error_oom("the device table");
}

void sr_device_close(sr_dev *d) { free(d); }

sr_status sr_dev_download(sr_dev *d, void *host_dst, const void *src, size_t bytes) {
    d->copy(d, SR_STREAM_D2H, host_dst, src, bytes);
    return d->sync(d, SR_STREAM_D2H);
}

sr_status sr_dev_upload(sr_dev *d, void *dst, const void *host_src, size_t bytes) {
    d->copy(d, SR_STREAM_H2D, dst, host_src, bytes);
    return d->sync(d, SR_STREAM_H2D);
}

bool sr_device_gpus_unusable(char *buf, size_t n) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!visible || !*visible)
        return false;
#ifdef SR_HAVE_CUDA
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0)
        return false;
    if (e != cudaSuccess)
        snprintf(buf, n, "cudaGetDeviceCount: %s (error %d)", cudaGetErrorString(e), (int)e);
    else
        snprintf(buf, n, "cudaGetDeviceCount: 0 devices");
#else
    snprintf(buf, n, "this shardrun was built without CUDA");
#endif
    return true;
}
