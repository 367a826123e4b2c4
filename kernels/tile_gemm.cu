/* tile_gemm.cu — a small tiled bf16 GEMM on the tensor cores, the first
 * user of mma.cuh's primitives (off the training path: it joins it only
 * once a GPU has confirmed it).  C[M, N] (f32, row-major) = A[M, K] B[N,
 * K]^T, A and B bf16 row-major (each output the dot product of a row of A
 * and a row of B: the layout of a linear layer's weight).
 *
 * A block of 4 warps (2 x 2) computes a 64 x 64 tile of C, 32 x 32 per
 * warp (2 x 4 mma.m16n8k16 tiles), over K in steps of 32: the next step's
 * A and B tiles load with 16-byte cp.async.cg into the other of two shared
 * buffers (rows padded to 40 elements: 80 bytes, 16-byte aligned) while
 * this step's are read by ldmatrix.x4 (A: the four 8 x 8 quarters of a 16
 * x 16 tile in the order of a0..a7; B: two n8 tiles' k halves) and
 * multiplied.  M and N multiples of 64, K of 32 (the launcher refuses
 * others). */
#include "common.cuh"

#define TG_BM 64
#define TG_BN 64
#define TG_BK 32
#define TG_PITCH 40 /* elements per shared row: 32 + 8 of padding */
#define TG_TILE (TG_BM * TG_PITCH)

__global__ void tile_gemm_k(float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int M, int N, int K) {
    SR_SHARED(__nv_bfloat16, sa, 2 * TG_TILE);
    SR_SHARED(__nv_bfloat16, sb, 2 * TG_TILE);
    (void)M;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
    long long m0 = (long long)blockIdx.y * TG_BM, n0 = (long long)blockIdx.x * TG_BN;
    float acc[2][4][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    /* a step's tiles: 64 rows x 4 chunks of 16 bytes, each of A and B; 128
     * threads, two chunks of each */
    auto load = [&](int kt, int buf) {
        for (int c = tid; c < TG_BM * 4; c += 128) {
            int row = c >> 2, chunk = c & 3;
            long long k = (long long)kt * TG_BK + chunk * 8;
            sr_cp_async_cg(SR_SHPTR(sa, buf * TG_TILE + row * TG_PITCH + chunk * 8), A + (m0 + row) * K + k);
            sr_cp_async_cg(SR_SHPTR(sb, buf * TG_TILE + row * TG_PITCH + chunk * 8), B + (n0 + row) * K + k);
        }
        sr_cp_async_commit();
    };
    int steps = K / TG_BK;
    load(0, 0);
    for (int kt = 0; kt < steps; kt++) {
        int buf = kt & 1;
        if (kt + 1 < steps) {
            load(kt + 1, buf ^ 1);
            sr_cp_async_wait<1>(); /* this step's group landed, the next in flight */
        } else
            sr_cp_async_wait<0>();
        __syncthreads();
        for (int kk = 0; kk < TG_BK; kk += 16) {
            uint32_t a[2][4], b[4][2];
            int q = lane >> 3, r = lane & 7;
            for (int mi = 0; mi < 2; mi++) {
                /* quarters: rows +0/+8 (q & 1), k +0/+8 (q >> 1): a0..a7's order */
                int row = wm * 32 + mi * 16 + (q & 1) * 8 + r, col = kk + (q >> 1) * 8;
                sr_ldmatrix<4, false>(a[mi], SR_SHPTR(sa, buf * TG_TILE + row * TG_PITCH + col));
            }
            for (int nj = 0; nj < 4; nj += 2) {
                /* matrices: n tile nj (k +0, +8), n tile nj + 1 (k +0, +8) */
                int row = wn * 32 + (nj + (q >> 1)) * 8 + r, col = kk + (q & 1) * 8;
                uint32_t t[4];
                sr_ldmatrix<4, false>(t, SR_SHPTR(sb, buf * TG_TILE + row * TG_PITCH + col));
                b[nj][0] = t[0], b[nj][1] = t[1], b[nj + 1][0] = t[2], b[nj + 1][1] = t[3];
            }
            for (int mi = 0; mi < 2; mi++)
                for (int nj = 0; nj < 4; nj++)
                    sr_mma_m16n8k16_bf16(acc[mi][nj], a[mi], b[nj], acc[mi][nj]);
        }
        __syncthreads(); /* every warp has read `buf` before the next step's load overwrites it */
    }
    int g = lane >> 2, t4 = lane & 3;
    for (int mi = 0; mi < 2; mi++)
        for (int nj = 0; nj < 4; nj++)
            for (int e = 0; e < 4; e++) {
                long long row = m0 + wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
                long long col = n0 + wn * 32 + nj * 8 + 2 * t4 + (e & 1);
                C[row * N + col] = acc[mi][nj][e];
            }
}

extern "C" int sr_k_tile_gemm_bf16(cudaStream_t s, float *C, const void *A, const void *B, int M, int N, int K) {
    SR_ENTER(tile_gemm, sr_lc_tile_gemm(M, N, K));
    if (M <= 0 || N <= 0 || K <= 0 || M % TG_BM || N % TG_BN || K % TG_BK)
        return (int)cudaErrorInvalidValue;
    return SR_LAUNCH(tile_gemm_k, dim3(N / TG_BN, M / TG_BM), 128, 0, s, C, (const __nv_bfloat16 *)A,
                     (const __nv_bfloat16 *)B, M, N, K);
}
