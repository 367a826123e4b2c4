/* probe.cu — kernels that use each warp-level primitive of mma.cuh alone,
 * for tests/test_primitives (and test_kernels on a GPU): their outputs are
 * compared, bit for bit, with tables derived from the PTX ISA
 * (tests/data/primitives.py), on the CUDA emulator and on hardware alike.
 * Off the training path. */
#include "common.cuh"

/* One warp: lane l's mma operands from a[l][4], b[l][2], c[l][4]; its d to
 * d[l][4]. */
__global__ void probe_mma_k(const uint32_t *a, const uint32_t *b, const float *c, float *d) {
    int l = threadIdx.x;
    uint32_t ra[4] = {a[4 * l], a[4 * l + 1], a[4 * l + 2], a[4 * l + 3]}, rb[2] = {b[2 * l], b[2 * l + 1]};
    float rc[4] = {c[4 * l], c[4 * l + 1], c[4 * l + 2], c[4 * l + 3]}, rd[4];
    sr_mma_m16n8k16_bf16(rd, ra, rb, rc);
    for (int i = 0; i < 4; i++)
        d[4 * l + i] = rd[i];
}

/* The 4 matrices of mats (8 x 8 16-bit elements each, row-major) into
 * shared memory with a row pitch of 24 elements (rows need not be
 * contiguous, only 16-byte aligned), then every form of ldmatrix: out
 * [variant][lane][4] for (N, trans) = (1,0) (1,1) (2,0) (2,1) (4,0) (4,1). */
#define PROBE_PITCH 24
__global__ void probe_ldmatrix_k(const uint16_t *mats, uint32_t *out) {
    SR_SHARED(uint16_t, sh, 4 * 8 * PROBE_PITCH);
    int l = threadIdx.x;
    for (int i = l; i < 4 * 8 * 8; i += 32)
        sh[(i / 8) * PROBE_PITCH + i % 8] = mats[i];
    __syncthreads();
    /* lane l gives row l % 8 of matrix l / 8 */
    const void *row = SR_SHPTR(sh, ((l / 8) * 8 + l % 8) * PROBE_PITCH);
    uint32_t r1[1], r2[2], r4[4];
    uint32_t *o = out + 4 * l;
    sr_ldmatrix<1, false>(r1, row);
    o[0] = r1[0];
    sr_ldmatrix<1, true>(r1, row);
    o[32 * 4] = r1[0];
    sr_ldmatrix<2, false>(r2, row);
    o[2 * 32 * 4] = r2[0], o[2 * 32 * 4 + 1] = r2[1];
    sr_ldmatrix<2, true>(r2, row);
    o[3 * 32 * 4] = r2[0], o[3 * 32 * 4 + 1] = r2[1];
    sr_ldmatrix<4, false>(r4, row);
    for (int i = 0; i < 4; i++)
        o[4 * 32 * 4 + i] = r4[i];
    sr_ldmatrix<4, true>(r4, row);
    for (int i = 0; i < 4; i++)
        o[5 * 32 * 4 + i] = r4[i];
}

/* Shuffles and a vote, as tests/data/shfl.txt lists them (kind: 0 xor, 1
 * idx, 2 up, 3 down, 4 ballot): lanes below `active` execute, with input
 * 3 lane + 1; out[lane]. */
__global__ void probe_shfl_k(int kind, unsigned mask, int arg, int active, unsigned *out) {
    int l = threadIdx.x;
    if (l >= active)
        return;
    unsigned v = 3u * (unsigned)l + 1u, r;
    if (kind == 0)
        r = sr_shfl_xor(mask, v, arg);
    else if (kind == 1)
        r = sr_shfl_idx(mask, v, arg);
    else if (kind == 2)
        r = sr_shfl_up(mask, v, arg);
    else if (kind == 3)
        r = sr_shfl_down(mask, v, arg);
    else
        r = sr_ballot(mask, l % arg == 0);
    out[l] = r;
}

/* in[2 i], in[2 i + 1] packed as bf16x2 into out[i], and unpacked back
 * into back[2 i], back[2 i + 1]. */
__global__ void probe_bf16x2_k(const float *in, uint32_t *out, float *back, int n) {
    int i = threadIdx.x;
    if (i >= n)
        return;
    out[i] = sr_pack_bf16x2(in[2 * i], in[2 * i + 1]);
    float2 f = sr_unpack_bf16x2(out[i]);
    back[2 * i] = f.x;
    back[2 * i + 1] = f.y;
}

/* cp.async through dynamic shared memory: n (a multiple of 64) 32-bit
 * words of src copied by one warp in three groups — 4-byte .ca copies,
 * 8-byte .ca, 16-byte .cg — each group's words read back (into dst) only
 * after the wait that lands it: wait_group 2, 1, then wait_all. */
__global__ void probe_cp_async_k(const uint32_t *src, uint32_t *dst, int n) {
    SR_SHARED_DYN(uint32_t, sh);
    int l = threadIdx.x, third = n / 4; /* words: [0, q) 4-byte, [q, 2q) 8-byte, [2q, 4q) 16-byte */
    for (int i = l; i < third; i += 32)
        sr_cp_async_ca<4>(SR_SHPTR(sh, i), src + i);
    sr_cp_async_commit();
    for (int i = third + 2 * l; i < 2 * third; i += 64)
        sr_cp_async_ca<8>(SR_SHPTR(sh, i), src + i);
    sr_cp_async_commit();
    for (int i = 2 * third + 4 * l; i < n; i += 128)
        sr_cp_async_cg(SR_SHPTR(sh, i), src + i);
    sr_cp_async_commit();
    sr_cp_async_wait<2>(); /* the 4-byte group landed */
    for (int i = l; i < third; i += 32)
        dst[i] = sh[i];
    sr_cp_async_wait<1>(); /* and the 8-byte one */
    for (int i = third + 2 * l; i < 2 * third; i += 64)
        dst[i] = sh[i], dst[i + 1] = sh[i + 1];
    sr_cp_async_wait_all();
    for (int i = 2 * third + 4 * l; i < n; i += 128)
        for (int k = 0; k < 4; k++)
            dst[i + k] = sh[i + k];
}

extern "C" int sr_k_probe(cudaStream_t s, int what, const void *in0, const void *in1, const void *in2, void *out0,
                          void *out1, int n, unsigned mask, int arg) {
    SR_ENTER(probe, sr_ledger_cost{0, 0});
    switch (what) {
    case SR_PROBE_MMA:
        return SR_LAUNCH(probe_mma_k, 1, 32, 0, s, (const uint32_t *)in0, (const uint32_t *)in1, (const float *)in2,
                         (float *)out0);
    case SR_PROBE_LDMATRIX:
        return SR_LAUNCH(probe_ldmatrix_k, 1, 32, 0, s, (const uint16_t *)in0, (uint32_t *)out0);
    case SR_PROBE_BF16X2:
        return SR_LAUNCH(probe_bf16x2_k, 1, 32, 0, s, (const float *)in0, (uint32_t *)out0, (float *)out1, n);
    case SR_PROBE_CP_ASYNC: {
        /* above 48 KiB of dynamic shared memory: the kernel's attribute first */
        size_t bytes = (size_t)n * sizeof(uint32_t);
        cudaError_t e = cudaFuncSetAttribute(probe_cp_async_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess)
            return (int)e;
        return SR_LAUNCH(probe_cp_async_k, 1, 32, bytes, s, (const uint32_t *)in0, (uint32_t *)out0, n);
    }
    default: /* SR_PROBE_SHFL + kind */
        return SR_LAUNCH(probe_shfl_k, 1, 32, 0, s, what - SR_PROBE_SHFL, mask, arg, n, (unsigned *)out0);
    }
}
