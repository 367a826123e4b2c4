/* fuzz_env.c — libFuzzer harness for what the program reads from its
 * environment: CUDA_VISIBLE_DEVICES (GPU choice from the local rank), the
 * SLURM_* variables of a step (is this a multi-task srun without PMIx?),
 * comm.interface values (an address or an interface name), and the
 * SHARDRUN_TEST_* hooks.  The input is NUL-separated values for them. */
#include "srconfig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_tcp.h"
#include "device.h"
#include "testhook.h"
#include "world.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vars[] = {"CUDA_VISIBLE_DEVICES",
                                   "SLURM_STEP_ID",
                                   "SLURM_STEP_NUM_TASKS",
                                   "SLURM_NTASKS",
                                   "SLURM_PROCID",
                                   "SHARDRUN_TEST_CRASH_AT",
                                   "SHARDRUN_TEST_PREEMPT_AT",
                                   "SHARDRUN_TEST_ALLOC_FAIL",
                                   "SHARDRUN_TEST_ISA",
                                   "SHARDRUN_TEST_NAN_AT_STEP",
                                   "SHARDRUN_TEST_MEM_AVAILABLE",
                                   "SHARDRUN_TEST_PAUSE_AT",
                                   "SHARDRUN_TEST_DEVICE",
                                   "SHARDRUN_TEST_DEVICE_FREE_MB",
                                   "SHARDRUN_TEST_POISON",
                                   "SHARDRUN_TEST_HB",
                                   "SHARDRUN_TEST_SKIP_WAIT",
                                   "SHARDRUN_TEST_COMM_DELAY_US"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    const char *field[sizeof vars / sizeof vars[0] + 1] = {0};
    size_t at = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0] + 1; i++) {
        field[i] = at <= size ? text + at : "";
        at += strlen(field[i]) + 1;
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        setenv(vars[i], field[i], 1);
    const char *visible = field[0];
    int n = sr_device_count_visible(visible);
    char phys[64], err[512];
    for (int lr = 0; lr < 3; lr++)
        sr_device_pick(visible, n, lr, 3, phys, sizeof phys, err, sizeof err);
    sr_world_in_multitask_srun();
    char ip[64];
    sr_tcp_resolve_interface(field[sizeof vars / sizeof vars[0]], ip, sizeof ip);
    sr_testhooks h;
    char why[512];
    sr_testhook_parse(&h, why, sizeof why);
    free(text);
    return 0;
}
