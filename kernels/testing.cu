/* testing.cu — a kernel for the tests: it spins for a given time on its
 * stream (SHARDRUN_TEST_COMM_DELAY_US on the GPU: a late collective or a
 * slow unit, to prove results do not depend on timing). */
#include "common.cuh"

__global__ void spin_k(long long ns) {
    unsigned long long t0 = sr_globaltimer(), t;
    do
        t = sr_globaltimer();
    while ((long long)(t - t0) < ns);
}

extern "C" int sr_k_spin(cudaStream_t s, long long ns) {
    SR_ENTER(spin, sr_ledger_cost{0, 0});
    return SR_LAUNCH(spin_k, 1, 1, 0, s, ns);
}
