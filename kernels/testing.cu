/* testing.cu — a kernel for the tests: it spins for a given time on its
 * stream (SHARDRUN_TEST_COMM_DELAY_US on the GPU: a late collective or a
 * slow unit, to prove results do not depend on timing). */
#include "common.cuh"

__global__ void spin_k(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while ((long long)(t - t0) < ns);
}

extern "C" int sr_k_spin(cudaStream_t s, long long ns) {
    SR_ENTER(spin);
    return SR_LAUNCH(spin_k, 1, 1, 0, s, ns);
}
