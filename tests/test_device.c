/* test_device.c — GPU choice from the local rank, with fabricated
 * environments (ARCHITECTURE.md §1). */
#include "srconfig.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "mem.h"
#include "metrics.h"
#include "ops.h"
#include "tap.h"
#include "world.h"

int main(void) {
    char phys[32], err[512];
    /* --gpus-per-task=1: one visible GPU, whatever its index, for any local rank */
    tap_ok(sr_device_pick("3", 1, 3, 4, phys, sizeof phys, err, sizeof err) == 0 && strcmp(phys, "3") == 0,
           "one visible GPU (CUDA_VISIBLE_DEVICES=3) is ordinal 0, physical 3");
    /* all node GPUs visible: the local rank picks */
    tap_ok(sr_device_pick("0,1,2,3", 4, 2, 4, phys, sizeof phys, err, sizeof err) == 2 && strcmp(phys, "2") == 0,
           "four visible GPUs, local rank 2 of 4 -> ordinal 2");
    tap_ok(sr_device_pick("4,5,6,7", 4, 1, 2, phys, sizeof phys, err, sizeof err) == 1 && strcmp(phys, "5") == 0,
           "more GPUs than local tasks: the local rank picks (physical 5)");
    tap_ok(sr_device_pick(NULL, 8, 7, 8, phys, sizeof phys, err, sizeof err) == 7 && strcmp(phys, "7") == 0,
           "CUDA_VISIBLE_DEVICES unset with 8 GPUs: local rank 7 -> GPU 7");
    /* too few GPUs: a clear error naming the variables */
    tap_ok(sr_device_pick("0,1", 2, 3, 4, phys, sizeof phys, err, sizeof err) == -1 &&
               strstr(err, "CUDA_VISIBLE_DEVICES=0,1") && strstr(err, "local rank 3 of 4"),
           "two GPUs for four local tasks is an error naming the variables: %s", err);
    tap_ok(sr_device_count_visible("0,1,2") == 3 && sr_device_count_visible("") == 0 &&
               sr_device_count_visible(NULL) == 0,
           "CUDA_VISIBLE_DEVICES entries are counted");
    /* a CPU run never fails device selection and says what it would pick */
    char line[512];
    setenv("CUDA_VISIBLE_DEVICES", "1,2", 1);
    sr_device_describe(line, sizeof line, 1, 2);
    tap_ok(strncmp(line, "cpu (would pick GPU 2, ordinal 1", 32) == 0, "CPU run logs the GPU it would pick: %s", line);
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    sr_device_describe(line, sizeof line, 5, 8);
    tap_ok(strncmp(line, "cpu (would pick GPU 0", 21) == 0, "CPU run, one GPU per task: %s", line);
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    sr_device_describe(line, sizeof line, 3, 4);
    tap_ok(strncmp(line, "cpu", 3) == 0, "CPU run with too few GPUs still runs on the CPU: %s", line);
    unsetenv("CUDA_VISIBLE_DEVICES");

    /* launch rules without PMIx */
    unsetenv("SLURM_STEP_ID");
    tap_ok(!sr_world_in_multitask_srun(), "no SLURM_STEP_ID: not an srun step (single process)");
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    tap_ok(!sr_world_in_multitask_srun(), "a one-task srun step runs as one process");
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    tap_ok(sr_world_in_multitask_srun(), "a four-task srun step without PMIx is detected");
    unsetenv("SLURM_STEP_NUM_TASKS");
    setenv("SLURM_NTASKS", "2", 1);
    tap_ok(sr_world_in_multitask_srun(), "SLURM_NTASKS is the fallback count");

    /* the table and its ops: auto without a usable GPU is the CPU */
    sr_dev *d = NULL;
    if (tap_ok(sr_device_open(&d, SR_DEVICE_AUTO, 1, 0, 1) == SR_OK && d, "device: auto opens a table")) {
        if (d->kind == SR_DEV_CPU)
            tap_ok(sr_device_ops(d, SR_DT_BF16, false) == &sr_ops_cpu &&
                       sr_device_ops(d, SR_DT_F32, false) == &sr_ops_cpu,
                   "on the CPU the ops are the CPU's in either param dtype");
        else
            tap_ok(sr_device_ops(d, SR_DT_BF16, false)->act == SR_DT_BF16 &&
                       sr_device_ops(d, SR_DT_F32, false)->act == SR_DT_F32,
                   "on a GPU the ops compute in the param dtype");
        sr_device_close(d);
    }
    sr_status st = sr_device_open(&d, SR_DEVICE_CUDA, 2, 0, 2);
    /* with NCCL, 2 ranks are allowed and the GPU decides (none here: 78);
     * without it, the build says NCCL is missing */
#ifdef SR_HAVE_NCCL
    const char *want = "no usable GPU";
#elif defined(SR_HAVE_CUDA)
    const char *want = "needs NCCL";
#else
    const char *want = "built without CUDA";
#endif
    bool gpu_here = st == SR_OK;
    if (gpu_here)
        sr_device_close(d);
    tap_ok(gpu_here || (st == SR_ERR_CONFIG && strstr(sr_error_message(), want)),
           "device: cuda with 2 ranks opens the GPU or is 78 saying '%s': %s", want,
           gpu_here ? "a GPU here" : sr_error_message());

    /* memory another allocator hands out (cudaMalloc) is accounted too */
    size_t dev0 = sr_mem_space_current(SR_SPACE_DEVICE), other0 = sr_mem_current(SR_MEM_OTHER);
    sr_mem_account_external(SR_SPACE_DEVICE, SR_MEM_OTHER, 4096, true);
    bool up = sr_mem_space_current(SR_SPACE_DEVICE) == dev0 + 4096 && sr_mem_current(SR_MEM_OTHER) == other0 + 4096 &&
              sr_mem_space_peak(SR_SPACE_DEVICE) >= dev0 + 4096;
    sr_mem_account_external(SR_SPACE_DEVICE, SR_MEM_OTHER, 4096, false);
    tap_ok(up && sr_mem_space_current(SR_SPACE_DEVICE) == dev0 && sr_mem_current(SR_MEM_OTHER) == other0,
           "external allocations are accounted by space and category, and released");

    /* the GPU peaks behind MFU */
    char how[256];
    unsetenv("SHARDRUN_PEAK_GFLOPS");
    const char *h200 = "cuda:0 (GPU 3, NVIDIA H200, sm_90, 139.8 GiB, bus 0000:19:00.0, driver 580, CUDA 13.0)";
    tap_ok(sr_metrics_gpu_peak_flops(h200, true, how, sizeof how) == 989e12 && strstr(how, "H200"),
           "H200 bf16 peak 989 TFLOP/s: %s", how);
    tap_ok(sr_metrics_gpu_peak_flops(h200, false, how, sizeof how) == 67e12, "H200 fp32 (exact mode) peak 67: %s", how);
    tap_ok(sr_metrics_gpu_peak_flops("cuda:0 (GPU 0, NVIDIA H100 PCIe, ...)", true, how, sizeof how) == 756e12,
           "H100 PCIe 756 (not the SXM's 989)");
    tap_ok(sr_metrics_gpu_peak_flops("cuda:0 (GPU 0, NVIDIA A100-SXM4-80GB, ...)", true, how, sizeof how) == 312e12,
           "A100 312");
    tap_ok(sr_metrics_gpu_peak_flops("cuda:0 (GPU 0, Some Future GPU, ...)", true, how, sizeof how) == 0 &&
               strstr(how, "SHARDRUN_PEAK_GFLOPS"),
           "an unknown GPU has no peak (mfu null), and the message names the override");
    setenv("SHARDRUN_PEAK_GFLOPS", "500000", 1);
    tap_ok(sr_metrics_gpu_peak_flops("cuda:0 (GPU 0, Some Future GPU, ...)", true, how, sizeof how) == 500e12,
           "SHARDRUN_PEAK_GFLOPS overrides: %s", how);
    unsetenv("SHARDRUN_PEAK_GFLOPS");
    return tap_done();
}
