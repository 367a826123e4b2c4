/* test_device.c — GPU choice from the local rank, with fabricated
 * environments (ARCHITECTURE.md §1). */
#include "srconfig.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
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
    return tap_done();
}
