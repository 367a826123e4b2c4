/* flash.cu — flash attention: causal, grouped-query attention that never
 * writes the T x T matrix (doc/ARCHITECTURE.md §3c), head dim 64, bf16 on
 * the tensor cores through mma.cuh, forward and a deterministic backward.
 *
 * Layouts (ops.h): qkv[B, T, W] with W = (NH + 2 NKV) 64, query head h
 * at column h 64, its key and value heads kv = h / (NH / NKV) at (NH +
 * kv) 64 and (NH + NKV + kv) 64, read in place; out[B, T, NH 64], written
 * where the attention projection reads it; lse[B, NH, T] (f32) the
 * log-sum-exp of each row's scaled, causal scores: all the backward keeps.
 *
 * Forward (fwd_k): a block of 4 warps per (64 query rows, head, sequence),
 * 16 rows per warp.  The query tile's A fragments stay in registers; for
 * each key/value tile of 64 up to the diagonal, S = Q K^T (mma, f32), the
 * scale and the causal and tail masks, the online softmax in f32 (the
 * row's running maximum m and sum l; a new maximum rescales l and the
 * output by exp2(m_old - m_new)), and O += P V with P rounded to bf16 in
 * the A fragment straight from S's accumulators (FlashAttention-2).  Sums
 * run in a fixed order (a lane's columns in order, then the quad's xor
 * 1, 2 shuffles): the same bits on every run.  Exponentials are exp2 of
 * scores pre-multiplied by scale log2(e).
 *
 * Backward, three kernels, no floating-point atomics (our contract is
 * bitwise run to run): rowdot_k computes D = rowsum(dO o O) once per row
 * (f32, into the workspace); dkv_k, a block per (64 keys, key/value head,
 * sequence), recomputes P^T = exp(K Q^T scale - LSE) per query tile and
 * sums dV += P^T dO and dK += dS^T Q with dS = P (dP - D), dP^T = V dO^T,
 * over the R query heads of its group in head order, then the query tiles
 * in order; dq_k, a block per (64 queries, head, sequence), sums dQ += dS
 * K over the key tiles in order.  Each writes its gradient once,
 * accumulating into dqkv (ops.h: the backward adds) in f32 with one
 * rounding.
 *
 * Tiles are 64 x 64 of bf16 in shared memory, rows padded to 72 elements
 * (144 bytes: 16-byte aligned, ldmatrix's rows spread over the banks),
 * loaded by 16-byte cp.async; rows at or past T are zero-filled (a V or Q
 * row of zeros is what makes the masked tail contribute nothing; the
 * emulator's shared memory starts as NaN).  SR_MUTANT names the planted
 * bugs of tests/mutants.sh (none under nvcc). */
#include "common.cuh"

#define FA_D 64     /* head dim */
#define FA_ROWS 64  /* rows of a tile (queries or keys) */
#define FA_PITCH 72 /* elements per shared row */
#define FA_TILE (FA_ROWS * FA_PITCH)
#define FA_THREADS 128 /* 4 warps of 16 rows */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;

/* Rows [r0, r0 + 64) of a 64-wide slice at src (rows ld elements apart)
 * into the tile at sh; rows at or past T are zeros.  Asynchronous: the
 * caller commits and waits. */
template <typename S> __device__ inline void fa_load(S sh, const bf16 *src, long long ld, int r0, int T) {
    T += SR_MUTANT(flash_tail) ? 1 : 0;
    for (int c = threadIdx.x; c < FA_ROWS * 8; c += FA_THREADS) {
        int row = c >> 3, ch = c & 7;
        if (r0 + row < T)
            sr_cp_async_cg(SR_SHPTR(sh, row * FA_PITCH + ch * 8), src + (long long)(r0 + row) * ld + ch * 8);
        else
            for (int e = 0; e < 8; e++)
                sh[row * FA_PITCH + ch * 8 + e] = __float2bfloat16_rn(0.0f);
    }
}

/* Key/value head kv's rows [r0, r0 + 64) of the sequence at base (qkv
 * rows of NH + 2 NKV heads) into sk and sv, landed and visible to the
 * block on return; the caller's barrier before it frees the tiles. */
template <typename S>
__device__ inline void fa_load_kv(S sk, S sv, const bf16 *base, int NH, int NKV, int kv, int r0, int T) {
    long long W = (long long)(NH + 2 * NKV) * FA_D;
    fa_load(sk, base + (NH + kv) * FA_D, W, r0, T);
    fa_load(sv, base + (NH + NKV + kv) * FA_D, W, r0, T);
    sr_cp_async_commit();
    sr_cp_async_wait<0>();
    __syncthreads();
}

/* A fragments (16 rows from `row0`, all 64 columns: four k16 steps) of a
 * tile: the operand whose rows are the warp's. */
template <typename S> __device__ inline void fa_frag_a(uint32_t (&a)[4][4], S sh, int row0) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    for (int kk = 0; kk < 4; kk++)
        sr_ldmatrix<4, false>(a[kk], SR_SHPTR(sh, (row0 + (q & 1) * 8 + r) * FA_PITCH + kk * 16 + (q >> 1) * 8));
}

/* acc[n][.] (16 x 64: eight n8 tiles) += A B^T, A the warp's fragments
 * (rows x 64) and B the tile's 64 rows (each a column of the product):
 * S = Q K^T, dP = dO V^T. */
template <typename S> __device__ inline void fa_mma_abt(float (&acc)[8][4], const uint32_t (&a)[4][4], S sh) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    for (int kk = 0; kk < 4; kk++)
        for (int nj = 0; nj < 8; nj += 2) {
            uint32_t t[4];
            sr_ldmatrix<4, false>(t, SR_SHPTR(sh, ((nj + (q >> 1)) * 8 + r) * FA_PITCH + kk * 16 + (q & 1) * 8));
            uint32_t b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
            sr_mma_m16n8k16_bf16(acc[nj], a[kk], b0, acc[nj]);
            sr_mma_m16n8k16_bf16(acc[nj + 1], a[kk], b1, acc[nj + 1]);
        }
}

/* acc (16 x 64) += P B, P the warp's 16 x 64 in f32 accumulators (rounded
 * to bf16 into A fragments: a C fragment's pairs are an A fragment's) and
 * B the tile (64 rows of k, 64 columns): O = P V, dV = P^T dO, dK = dS^T
 * Q, dQ = dS K. */
template <typename S> __device__ inline void fa_mma_pb(float (&acc)[8][4], const float (&p)[8][4], S sh) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    for (int j = 0; j < 4; j++) {
        uint32_t a[4] = {sr_pack_bf16x2(p[2 * j][0], p[2 * j][1]), sr_pack_bf16x2(p[2 * j][2], p[2 * j][3]),
                         sr_pack_bf16x2(p[2 * j + 1][0], p[2 * j + 1][1]),
                         sr_pack_bf16x2(p[2 * j + 1][2], p[2 * j + 1][3])};
        for (int nd = 0; nd < 8; nd += 2) {
            uint32_t t[4];
            sr_ldmatrix<4, true>(t, SR_SHPTR(sh, (j * 16 + (q & 1) * 8 + r) * FA_PITCH + (nd + (q >> 1)) * 8));
            uint32_t b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
            sr_mma_m16n8k16_bf16(acc[nd], a, b0, acc[nd]);
            sr_mma_m16n8k16_bf16(acc[nd + 1], a, b1, acc[nd + 1]);
        }
    }
}

__device__ inline void fa_zero(float (&x)[8][4]) {
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++)
            x[n][e] = 0.0f;
}

/* The warp's 16 x 64 accumulator scaled by `mul` and added, with one
 * rounding, into rows [row0, row0 + 16) < T of dst (rows ld apart, from
 * column 0), or (add false) stored. */
__device__ inline void fa_store(bf16 *dst, long long ld, const float (&x)[8][4], int row0, int T, float mul, bool add) {
    int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++) {
            int row = row0 + g + (e >= 2 ? 8 : 0);
            if (row >= T)
                continue;
            bf16 *p = dst + (long long)row * ld + n * 8 + 2 * t4 + (e & 1);
            float v = x[n][e] * mul;
            *p = __float2bfloat16_rn(add ? __bfloat162float(*p) + v : v);
        }
}

__global__ void fwd_k(bf16 *out, float *lse, const bf16 *qkv, int T, int NH, int NKV, float scale) {
    SR_SHARED(bf16, sq, FA_TILE);
    SR_SHARED(bf16, sk, FA_TILE);
    SR_SHARED(bf16, sv, FA_TILE);
    const bool m_causal = SR_MUTANT(flash_causal), m_rescale = SR_MUTANT(flash_rescale);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qt * FA_ROWS;
    int kv = (h / (NH / NKV) + (SR_MUTANT(flash_kv_head) ? 1 : 0)) % NKV;
    long long W = (long long)(NH + 2 * NKV) * FA_D;
    const bf16 *base = qkv + (long long)b * T * W;
    float sl2 = scale * FA_LOG2E * (SR_MUTANT(flash_scale) ? 2.0f : 1.0f);
    fa_load(sq, base + h * FA_D, W, q0, T);
    sr_cp_async_commit();
    sr_cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[4][4];
    fa_frag_a(qa, sq, warp * 16);
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero(o);
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads(); /* every warp is done with the last tile */
        fa_load_kv(sk, sv, base, NH, NKV, kv, kt * FA_ROWS, T);
        float s[8][4];
        fa_zero(s);
        fa_mma_abt(s, qa, sk);
        for (int r = 0; r < 2; r++) {
            int row = q0 + warp * 16 + g + 8 * r;
            float mx = -INFINITY;
            for (int n = 0; n < 8; n++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    int col = kt * FA_ROWS + n * 8 + 2 * t4 + (e & 1);
                    bool off = (!m_causal && col > row) || col >= T;
                    s[n][e] = off ? -INFINITY : s[n][e] * sl2;
                    mx = fmaxf(mx, s[n][e]);
                }
            mx = fmaxf(mx, sr_shfl_xor(0xffffffffu, mx, 1));
            mx = fmaxf(mx, sr_shfl_xor(0xffffffffu, mx, 2));
            float mn = fmaxf(m[r], mx), ref = mn == -INFINITY ? 0.0f : mn;
            float alpha = m_rescale ? 1.0f : exp2f(m[r] - ref);
            m[r] = mn;
            l[r] *= alpha;
            for (int n = 0; n < 8; n++)
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    o[n][e] *= alpha;
                    s[n][e] = exp2f(s[n][e] - ref);
                    l[r] += s[n][e];
                }
        }
        fa_mma_pb(o, s, sv);
    }
    for (int r = 0; r < 2; r++) {
        l[r] += sr_shfl_xor(0xffffffffu, l[r], 1);
        l[r] += sr_shfl_xor(0xffffffffu, l[r], 2);
        int row = q0 + warp * 16 + g + 8 * r;
        if (t4 == 0 && row < T)
            lse[((long long)b * NH + h) * T + row] = (m[r] + log2f(l[r])) * FA_LN2;
        for (int n = 0; n < 8; n++)
            for (int e = 2 * r; e < 2 * r + 2; e++)
                o[n][e] /= l[r];
    }
    fa_store(out + (long long)b * T * NH * FA_D + h * FA_D, (long long)NH * FA_D, o, q0 + warp * 16, T, 1.0f, false);
}

/* D[b, h, t] = sum_d dO o O over the head's 64 values: a warp per row. */
__global__ void rowdot_k(float *D, const bf16 *dout, const bf16 *out, int B, int T, int NH) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; /* (b, t, h) */
    int lane = threadIdx.x & 31;
    if (row >= (long long)B * T * NH)
        return;
    const bf16 *x = dout + row * FA_D, *y = out + row * FA_D;
    float v = __bfloat162float(x[lane]) * __bfloat162float(y[lane]) +
              __bfloat162float(x[lane + 32]) * __bfloat162float(y[lane + 32]);
    v = sr_warp_sum(v);
    long long h = row % NH, bt = row / NH, b = bt / T, t = bt % T;
    if (lane == 0)
        D[(b * NH + h) * T + t] = v;
}

__global__ void dkv_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D, int T, int NH,
                      int NKV, float scale) {
    SR_SHARED(bf16, sk, FA_TILE);
    SR_SHARED(bf16, sv, FA_TILE);
    SR_SHARED(bf16, sq, FA_TILE);
    SR_SHARED(bf16, sdo, FA_TILE);
    SR_SHARED(float, sl, FA_ROWS);
    SR_SHARED(float, sd, FA_ROWS);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int kt = blockIdx.x, kv = blockIdx.y, b = blockIdx.z, k0 = kt * FA_ROWS, R = NH / NKV;
    long long W = (long long)(NH + 2 * NKV) * FA_D, C = (long long)NH * FA_D;
    const bf16 *base = qkv + (long long)b * T * W, *dbase = dout + (long long)b * T * C;
    float sl2 = scale * FA_LOG2E;
    fa_load_kv(sk, sv, base, NH, NKV, kv, k0, T);
    uint32_t ka[4][4], va[4][4];
    fa_frag_a(ka, sk, warp * 16);
    fa_frag_a(va, sv, warp * 16);
    float dk[8][4], dv[8][4];
    fa_zero(dk);
    fa_zero(dv);
    int tiles = (T + FA_ROWS - 1) / FA_ROWS;
    for (int r = 0; r < R; r++) {
        int h = kv * R + r;
        const float *lh = lse + ((long long)b * NH + h) * T, *dh = D + ((long long)b * NH + h) * T;
        for (int qt = kt; qt < tiles; qt++) {
            int q0 = qt * FA_ROWS;
            __syncthreads(); /* every warp is done with the last tile */
            fa_load(sq, base + h * FA_D, W, q0, T);
            fa_load(sdo, dbase + h * FA_D, C, q0, T);
            sr_cp_async_commit();
            if (threadIdx.x < FA_ROWS) {
                int t = q0 + threadIdx.x;
                sl[threadIdx.x] = t < T ? lh[t] * FA_LOG2E : 0.0f;
                sd[threadIdx.x] = t < T ? dh[t] : 0.0f;
            }
            sr_cp_async_wait<0>();
            __syncthreads();
            float p[8][4], dp[8][4];
            fa_zero(p);
            fa_mma_abt(p, ka, sq); /* S^T: rows keys, columns queries */
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) {
                    int key = k0 + warp * 16 + g + (e >= 2 ? 8 : 0), c = n * 8 + 2 * t4 + (e & 1), query = q0 + c;
                    p[n][e] = query >= key && query < T ? exp2f(p[n][e] * sl2 - sl[c]) : 0.0f;
                }
            fa_mma_pb(dv, p, sdo);
            fa_zero(dp);
            fa_mma_abt(dp, va, sdo); /* dP^T = V dO^T */
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++)
                    dp[n][e] = p[n][e] * (dp[n][e] - sd[n * 8 + 2 * t4 + (e & 1)]);
            fa_mma_pb(dk, dp, sq);
        }
    }
    bf16 *db = dqkv + (long long)b * T * W;
    fa_store(db + (NH + kv) * FA_D, W, dk, k0 + warp * 16, T, scale, true);
    fa_store(db + (NH + NKV + kv) * FA_D, W, dv, k0 + warp * 16, T, 1.0f, true);
}

__global__ void dq_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D, int T, int NH,
                     int NKV, float scale) {
    SR_SHARED(bf16, sq, FA_TILE);
    SR_SHARED(bf16, sdo, FA_TILE);
    SR_SHARED(bf16, sk, FA_TILE);
    SR_SHARED(bf16, sv, FA_TILE);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qt * FA_ROWS, kv = h / (NH / NKV);
    long long W = (long long)(NH + 2 * NKV) * FA_D, C = (long long)NH * FA_D;
    const bf16 *base = qkv + (long long)b * T * W;
    float sl2 = scale * FA_LOG2E;
    fa_load(sq, base + h * FA_D, W, q0, T);
    fa_load(sdo, dout + (long long)b * T * C + h * FA_D, C, q0, T);
    sr_cp_async_commit();
    sr_cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[4][4], da[4][4];
    fa_frag_a(qa, sq, warp * 16);
    fa_frag_a(da, sdo, warp * 16);
    float rl[2], rd[2]; /* the lane's two rows' LSE (log2 units) and D */
    for (int r = 0; r < 2; r++) {
        int row = q0 + warp * 16 + g + 8 * r;
        long long i = ((long long)b * NH + h) * T + row;
        rl[r] = row < T ? lse[i] * FA_LOG2E : 0.0f;
        rd[r] = row < T ? D[i] : 0.0f;
    }
    float dq[8][4];
    fa_zero(dq);
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads(); /* every warp is done with the last tile */
        fa_load_kv(sk, sv, base, NH, NKV, kv, kt * FA_ROWS, T);
        float p[8][4], dp[8][4];
        fa_zero(p);
        fa_zero(dp);
        fa_mma_abt(p, qa, sk);
        fa_mma_abt(dp, da, sv);
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                int r = e >= 2, row = q0 + warp * 16 + g + 8 * r, col = kt * FA_ROWS + n * 8 + 2 * t4 + (e & 1);
                float pe = col <= row && row < T ? exp2f(p[n][e] * sl2 - rl[r]) : 0.0f;
                p[n][e] = pe * (dp[n][e] - rd[r]);
            }
        fa_mma_pb(dq, p, sk);
    }
    fa_store(dqkv + (long long)b * T * W + h * FA_D, W, dq, q0 + warp * 16, T, scale, true);
}

/* Shapes flash attention runs (the ops' choice checks the same:
 * sr_cuda_flash_supported). */
static bool fa_shape_ok(int B, int T, int NH, int NKV, int hs) {
    return B > 0 && T > 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && hs == FA_D;
}

extern "C" int sr_k_flash_forward(cudaStream_t s, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                  int hs) {
    SR_ENTER(flash_forward, sr_lc_flash(B, T, NH, NKV, hs, false));
    if (!fa_shape_ok(B, T, NH, NKV, hs))
        return (int)cudaErrorInvalidValue;
    dim3 grid((T + FA_ROWS - 1) / FA_ROWS, NH, B);
    return SR_LAUNCH(fwd_k, grid, FA_THREADS, 0, s, (bf16 *)out, lse, (const bf16 *)qkv, T, NH, NKV,
                     1.0f / sqrtf((float)hs));
}

extern "C" int sr_k_flash_backward(cudaStream_t s, void *dqkv, const void *dout, const void *out, const void *qkv,
                                   const float *lse, int B, int T, int NH, int NKV, int hs, float *ws) {
    SR_ENTER(flash_backward, sr_lc_flash(B, T, NH, NKV, hs, true));
    if (!fa_shape_ok(B, T, NH, NKV, hs))
        return (int)cudaErrorInvalidValue;
    long long rows = (long long)B * T * NH;
    float scale = 1.0f / sqrtf((float)hs);
    int rc =
        SR_LAUNCH(rowdot_k, (unsigned)((rows + 7) / 8), 256, 0, s, ws, (const bf16 *)dout, (const bf16 *)out, B, T, NH);
    unsigned tiles = (unsigned)((T + FA_ROWS - 1) / FA_ROWS);
    if (rc == 0)
        rc = SR_LAUNCH(dkv_k, dim3(tiles, NKV, B), FA_THREADS, 0, s, (bf16 *)dqkv, (const bf16 *)dout,
                       (const bf16 *)qkv, lse, (const float *)ws, T, NH, NKV, scale);
    if (rc == 0)
        rc = SR_LAUNCH(dq_k, dim3(tiles, NH, B), FA_THREADS, 0, s, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv,
                       lse, (const float *)ws, T, NH, NKV, scale);
    return rc;
}

extern "C" size_t sr_cuda_flash_ws_bytes(int B, int T, int NH) {
    return ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256;
}
