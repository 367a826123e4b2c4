/* flash.cu — flash attention: causal, grouped-query attention that never
 * writes the T x T matrix (doc/ARCHITECTURE.md §3c), head dims 64 and 128,
 * bf16 on the tensor cores through mma.cuh, forward and a deterministic
 * backward.  Each kernel is a template on the head dim D.
 *
 * Layouts (ops.h): qkv[B, T, W] with W = (NH + 2 NKV) D, query head h
 * at column h D, its key and value heads kv = h / (NH / NKV) at (NH +
 * kv) D and (NH + NKV + kv) D, read in place; out[B, T, NH D], written
 * where the attention projection reads it; lse[B, NH, T] (f32) the
 * log-sum-exp of each row's scaled, causal scores: all the backward keeps.
 *
 * Forward (fwd_k): a block of 4 warps per (64 MT query rows, head,
 * sequence), 16 MT rows per warp: MT = 2 at head dim 64 (a K or V
 * fragment loaded from shared memory serves both row tiles), 1 at 128
 * (fa_fwd_mt).  The query rows' A fragments stay in registers; for
 * each key/value tile of 64 up to the diagonal, S = Q K^T (mma, f32), the
 * scale (and on the diagonal tile the causal mask), the online softmax in
 * f32 (the row's running maximum m and sum l; a new maximum rescales l and
 * the output by exp2(m_old - m_new)), and O += P V with P rounded to bf16
 * in the A fragment straight from S's accumulators (FlashAttention-2).
 * Sums run in a fixed order (a lane's columns in order, then the quad's
 * xor 1, 2 shuffles): the same bits on every run.  Exponentials are exp2
 * of scores pre-multiplied by scale log2(e).
 *
 * Backward, three kernels, no floating-point atomics (our contract is
 * bitwise run to run): rowdot_k computes D = rowsum(dO o O) once per row
 * (f32, into the workspace); dkv_k, a block per (64 keys, key/value head,
 * sequence), recomputes P^T = exp(K Q^T scale - LSE) per query tile and
 * sums dV += P^T dO and dK += dS^T Q with dS = P (dP - D), dP^T = V dO^T,
 * over the R query heads of its group in head order, then the query tiles
 * in order; dq_k, a block per (64 queries, head, sequence), sums dQ += dS
 * K over the key tiles in order.  Each writes its gradient once, with one
 * rounding: together they assign every element of dqkv (ops.h's
 * attention_backward_assigns; the caller zeroes nothing).
 *
 * Speed.  The tiles the loop walks (keys and values in the forward and
 * dq_k, queries and output gradients in dkv_k) are double-buffered: the
 * next tile's 16-byte cp.async copies are in flight while the tensor cores
 * work on this one (cp.async.wait_group 1).  A causal grid's blocks differ
 * in work (query tile t visits t + 1 key tiles), so the grids run the
 * longest first: the tile is the grid's slowest dimension (z; x the head,
 * y the sequence: blocks are dispatched x fastest), the forward and dq_k
 * take their query tile from the end (blockIdx.z 0 is the last tile of
 * every head and sequence), dkv_k's key tile 0 visits every query tile.
 * Masks are computed only on the diagonal tile and the tail.  At
 * head dim 128 the backward reads its A fragments from shared memory per
 * step (ldmatrix) where head dim 64 holds them in registers: the
 * accumulators of 16 x 128 (dK and dV, or dQ) leave no room (ptxas: no
 * spills, tests/cuda_static.sh).  dqkv is written once and never read.
 * The ledger's flash rows (sr_lc_flash) count each kernel's tensors once:
 * a lower bound, as the blocks of a head re-read K and V (the forward,
 * dq_k) or Q, dO, the LSE and D (dkv_k), mostly from L2.  The dynamic
 * shared memory attribute is set at every launch (a process may drive
 * more than one device; the call is host-side and cheap).
 *
 * Tiles are 64 rows of bf16 in dynamic shared memory, rows padded to D + 8
 * elements (16-byte aligned, ldmatrix's rows spread over the banks): the
 * forward MT + 4 tiles (54 KiB at D 64, 85 KiB at 128), the backward 6
 * (54, 102 KiB), past 48 KiB by cudaFuncSetAttribute.  Loops over
 * register arrays are SR_UNROLL'd (ptxas: no stack frame).  Rows at or past T are
 * zero-filled (a V or Q row of zeros is what makes the masked tail
 * contribute nothing; the emulator's shared memory starts as NaN).
 * SR_MUTANT names the planted bugs of tests/mutants.sh (none under
 * nvcc). */
#include "common.cuh"

#define FA_ROWS 64     /* rows of a tile (queries or keys) */
#define FA_THREADS 128 /* 4 warps of 16 rows */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;

/* The shapes of head dim D: a shared row's pitch, a tile's elements, the
 * k16 steps and n8 tiles across D, whether the backward holds its A
 * fragments in registers. */
template <int D> struct fa_shape {
    static constexpr int P = D + 8;
    static constexpr int TILE = FA_ROWS * P;
    static constexpr int KK = D / 16;
    static constexpr int ND = D / 8;
    static constexpr bool HOLD = D <= 64;
};

/* Rows [r0, r0 + 64) of a D-wide slice at src (rows ld elements apart)
 * into the tile at sh; rows at or past T are zeros.  Asynchronous: the
 * caller commits and waits. */
template <int D, typename S> __device__ inline void fa_load(S sh, const bf16 *src, long long ld, int r0, int T) {
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    T += SR_MUTANT(flash_tail) ? 1 : 0;
    for (int c = threadIdx.x; c < FA_ROWS * CH; c += FA_THREADS) {
        int row = c / CH, ch = c % CH;
        if (r0 + row < T)
            sr_cp_async_cg(SR_SHPTR(sh, row * fa_shape<D>::P + ch * 8), src + (long long)(r0 + row) * ld + ch * 8);
        else
            for (int e = 0; e < 8; e++)
                sh[row * fa_shape<D>::P + ch * 8 + e] = __float2bfloat16_rn(0.0f);
    }
}

/* Key/value head kv's rows [r0, r0 + 64) of the sequence at base (qkv
 * rows of NH + 2 NKV heads) into sk and sv; asynchronous as fa_load. */
template <int D, typename S>
__device__ inline void fa_load_kv(S sk, S sv, const bf16 *base, int NH, int NKV, int kv, int r0, int T) {
    long long W = (long long)(NH + 2 * NKV) * D;
    fa_load<D>(sk, base + (NH + kv) * D, W, r0, T);
    fa_load<D>(sv, base + (NH + NKV + kv) * D, W, r0, T);
}

/* Waits for the tile the loop is about to use: every copy group but the
 * newest when a prefetch is in flight, else all; then the block's
 * barrier makes the landed tiles visible. */
__device__ inline void fa_wait(bool prefetching) {
    if (SR_MUTANT(flash_pipeline))
        sr_cp_async_wait<2>(); /* the planted bug: waits for nothing */
    else if (prefetching)
        sr_cp_async_wait<1>();
    else
        sr_cp_async_wait<0>();
    __syncthreads();
}

/* One k16 step's A fragment (16 rows from `row0`, columns kk 16 ..) of a
 * tile. */
template <int D, typename S> __device__ inline void fa_frag_k(uint32_t (&a)[4], S sh, int row0, int kk) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    sr_ldmatrix<4, false>(a, SR_SHPTR(sh, (row0 + (q & 1) * 8 + r) * fa_shape<D>::P + kk * 16 + (q >> 1) * 8));
}

/* A fragments (16 rows from `row0`, all D columns) of a tile: the operand
 * whose rows are the warp's. */
template <int D, typename S> __device__ inline void fa_frag_a(uint32_t (&a)[D / 16][4], S sh, int row0) {
    for (int kk = 0; kk < D / 16; kk++)
        fa_frag_k<D>(a[kk], sh, row0, kk);
}

/* x as an array of one (the MT = 1 form of the helpers below). */
template <typename A> __device__ inline A (&fa_one(A &x))[1] { return *reinterpret_cast<A(*)[1]>(&x); }

/* acc[m][n][.] (MT row tiles of 16 x 64: eight n8 tiles) += a[m] B^T over
 * k16 step kk, B the tile's 64 rows (each a column of the product): each
 * B fragment loaded once for the MT row tiles. */
template <int D, int MT, typename S>
__device__ inline void fa_mma_abt_k(float (&acc)[MT][8][4], const uint32_t (&a)[MT][4], S sh, int kk) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    for (int nj = 0; nj < 8; nj += 2) {
        uint32_t t[4];
        sr_ldmatrix<4, false>(t, SR_SHPTR(sh, ((nj + (q >> 1)) * 8 + r) * fa_shape<D>::P + kk * 16 + (q & 1) * 8));
        uint32_t b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
        SR_UNROLL
        for (int m = 0; m < MT; m++) {
            sr_mma_m16n8k16_bf16(acc[m][nj], a[m], b0, acc[m][nj]);
            sr_mma_m16n8k16_bf16(acc[m][nj + 1], a[m], b1, acc[m][nj + 1]);
        }
    }
}

/* acc (16 x 64) += A B^T, A the warp's rows (x D) and B the tile's 64
 * rows: S = Q K^T, dP = dO V^T.  A from registers (a), or with `hold`
 * false from the tile sa at row0, fragment by fragment. */
template <int D, typename S>
__device__ inline void fa_mma_abt(float (&acc)[8][4], const uint32_t (&a)[D / 16][4], S sb, bool hold, S sa, int row0) {
    for (int kk = 0; kk < D / 16; kk++) {
        if (hold) {
            fa_mma_abt_k<D, 1>(fa_one(acc), fa_one(a[kk]), sb, kk);
        } else {
            uint32_t f[4];
            fa_frag_k<D>(f, sa, row0, kk);
            fa_mma_abt_k<D, 1>(fa_one(acc), fa_one(f), sb, kk);
        }
    }
}

/* acc[m] (16 x D) += P[m] B for MT row tiles, P the warp's 16 x 64 in f32
 * accumulators (rounded to bf16 into A fragments: a C fragment's pairs
 * are an A fragment's) and B the tile (64 rows of k, D columns), each B
 * fragment loaded once for the MT: O = P V, dV = P^T dO, dK = dS^T Q,
 * dQ = dS K. */
template <int D, int MT, typename S>
__device__ inline void fa_mma_pb_mt(float (&acc)[MT][D / 8][4], const float (&p)[MT][8][4], S sh) {
    int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
    for (int j = 0; j < 4; j++) {
        uint32_t a[MT][4];
        SR_UNROLL
        for (int m = 0; m < MT; m++) {
            a[m][0] = sr_pack_bf16x2(p[m][2 * j][0], p[m][2 * j][1]);
            a[m][1] = sr_pack_bf16x2(p[m][2 * j][2], p[m][2 * j][3]);
            a[m][2] = sr_pack_bf16x2(p[m][2 * j + 1][0], p[m][2 * j + 1][1]);
            a[m][3] = sr_pack_bf16x2(p[m][2 * j + 1][2], p[m][2 * j + 1][3]);
        }
        for (int nd = 0; nd < D / 8; nd += 2) {
            uint32_t t[4];
            sr_ldmatrix<4, true>(t, SR_SHPTR(sh, (j * 16 + (q & 1) * 8 + r) * fa_shape<D>::P + (nd + (q >> 1)) * 8));
            uint32_t b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
            SR_UNROLL
            for (int m = 0; m < MT; m++) {
                sr_mma_m16n8k16_bf16(acc[m][nd], a[m], b0, acc[m][nd]);
                sr_mma_m16n8k16_bf16(acc[m][nd + 1], a[m], b1, acc[m][nd + 1]);
            }
        }
    }
}
template <int D, typename S> __device__ inline void fa_mma_pb(float (&acc)[D / 8][4], const float (&p)[8][4], S sh) {
    fa_mma_pb_mt<D, 1>(fa_one(acc), fa_one(p), sh);
}

template <int N> __device__ inline void fa_zero(float (&x)[N][4]) {
    for (int n = 0; n < N; n++)
        for (int e = 0; e < 4; e++)
            x[n][e] = 0.0f;
}

/* The warp's 16 x D accumulator scaled by `mul`, rounded once, stored into
 * rows [row0, row0 + 16) < T of dst (rows ld apart, from column 0). */
template <int D>
__device__ inline void fa_store(bf16 *dst, long long ld, const float (&x)[D / 8][4], int row0, int T, float mul) {
    int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    for (int n = 0; n < D / 8; n++)
        for (int e = 0; e < 4; e++) {
            int row = row0 + g + (e >= 2 ? 8 : 0);
            if (row < T)
                dst[(long long)row * ld + n * 8 + 2 * t4 + (e & 1)] = __float2bfloat16_rn(x[n][e] * mul);
        }
}

/* With `part` (the backward's bias gradient): part[0..D) = the column
 * sums of the block's FA_ROWS rows from row0 (those < T) of the D columns
 * at src (row stride ld), which the block's fa_store calls just wrote:
 * after a barrier (the block's stores are then visible to it), a thread
 * per column adds its rows in order, reading them back from the cache
 * (summing the accumulators' fragments instead took registers that
 * dK/dV's kernel at D 128 does not have).  Every thread calls it. */
__device__ inline void fa_colsum(float *part, const bf16 *src, long long ld, int row0, int T, int D) {
    if (!part)
        return;
    __syncthreads();
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float sum = 0.0f;
        for (int r = row0; r < row0 + FA_ROWS && r < T; r++)
            sum += __bfloat162float(src[(long long)r * ld + c]);
        part[c] = sum;
    }
}

/* dK/dV's kernel's two: its key and value head's columns of its
 * (sequence, tile) row of partials, from what it stored. */
template <int D> __device__ __noinline__ void fa_colsum_kv(float *part, const bf16 *dqkv, int T, int NH, int NKV) {
    long long W = (long long)(NH + 2 * NKV) * D;
    int kv = blockIdx.x, b = blockIdx.y, kt = blockIdx.z;
    float *pr = part + ((long long)b * gridDim.z + kt) * W; /* the (sequence, tile) row */
    const bf16 *db = dqkv + (long long)b * T * W;
    fa_colsum(pr + (NH + kv) * D, db + (NH + kv) * D, W, kt * FA_ROWS, T, D);
    fa_colsum(pr + (NH + NKV + kv) * D, db + (NH + NKV + kv) * D, W, kt * FA_ROWS, T, D);
}

/* The forward at head dim D, MT row tiles of 16 per warp: a block of 64
 * MT query rows (fa_fwd_mt: the tile shape per head dim). */
template <int D, int MT>
__global__ void fwd_k(bf16 *out, float *lse, const bf16 *qkv, int T, int NH, int NKV, float scale) {
    typedef fa_shape<D> F;
    constexpr int BM = FA_ROWS * MT, KV0 = MT * F::TILE; /* query rows; the first K/V stage's offset */
    SR_SHARED_DYN(bf16, smem);                           /* Q (MT tiles), then (K, V) twice */
    const bool m_causal = SR_MUTANT(flash_causal), m_rescale = SR_MUTANT(flash_rescale);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y, q0 = qt * BM; /* longest first */
    int kv = (h / (NH / NKV) + (SR_MUTANT(flash_kv_head) ? 1 : 0)) % NKV;
    int w0 = q0 + warp * 16 * MT;                                     /* the warp's first row */
    int kend = ((q0 + BM < T ? q0 + BM : T) + FA_ROWS - 1) / FA_ROWS; /* key tiles to the diagonal */
    long long W = (long long)(NH + 2 * NKV) * D;
    const bf16 *base = qkv + (long long)b * T * W;
    float sl2 = scale * FA_LOG2E * (SR_MUTANT(flash_scale) ? 2.0f : 1.0f);
    auto sq = SR_SHSLICE(smem, 0, MT * F::TILE);
    SR_UNROLL
    for (int m = 0; m < MT; m++)
        fa_load<D>(SR_SHSLICE(smem, m * F::TILE, F::TILE), base + h * D, W, q0 + m * FA_ROWS, T);
    fa_load_kv<D>(SR_SHSLICE(smem, KV0, F::TILE), SR_SHSLICE(smem, KV0 + F::TILE, F::TILE), base, NH, NKV, kv, 0, T);
    sr_cp_async_commit();
    uint32_t qa[MT][D / 16][4];
    float o[MT][D / 8][4], m_[MT][2], l[MT][2];
    SR_UNROLL
    for (int m = 0; m < MT; m++) {
        fa_zero(o[m]);
        m_[m][0] = m_[m][1] = -INFINITY;
        l[m][0] = l[m][1] = 0.0f;
    }
    for (int kt = 0; kt < kend; kt++) {
        int st = kt & 1;
        if (kt + 1 < kend) { /* the next tile's copies, into the other stage */
            int nx = KV0 + (st ^ 1) * 2 * F::TILE;
            fa_load_kv<D>(SR_SHSLICE(smem, nx, F::TILE), SR_SHSLICE(smem, nx + F::TILE, F::TILE), base, NH, NKV, kv,
                          (kt + 1) * FA_ROWS, T);
            sr_cp_async_commit();
        }
        fa_wait(kt + 1 < kend);
        if (kt == 0) { /* Q landed with the first group */
            SR_UNROLL
            for (int m = 0; m < MT; m++)
                fa_frag_a<D>(qa[m], sq, warp * 16 * MT + m * 16);
        }
        auto sk = SR_SHSLICE(smem, KV0 + st * 2 * F::TILE, F::TILE);
        auto sv = SR_SHSLICE(smem, KV0 + st * 2 * F::TILE + F::TILE, F::TILE);
        float s[MT][8][4];
        SR_UNROLL
        for (int m = 0; m < MT; m++)
            fa_zero(s[m]);
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t a[MT][4];
            SR_UNROLL
            for (int m = 0; m < MT; m++)
                for (int e = 0; e < 4; e++)
                    a[m][e] = qa[m][kk][e];
            fa_mma_abt_k<D, MT>(s, a, sk, kk);
        }
        /* masks only where a column can pass a row or T: the tiles that
         * reach the block's first row (every key before q0 is < T) */
        bool edge = (kt + 1) * FA_ROWS > q0;
        SR_UNROLL
        for (int m = 0; m < MT; m++)
            for (int r = 0; r < 2; r++) {
                int row = w0 + m * 16 + g + 8 * r;
                float mx = -INFINITY;
                for (int n = 0; n < 8; n++)
                    for (int e = 2 * r; e < 2 * r + 2; e++) {
                        int col = kt * FA_ROWS + n * 8 + 2 * t4 + (e & 1);
                        bool off = edge && ((!m_causal && col > row) || col >= T);
                        s[m][n][e] = off ? -INFINITY : s[m][n][e] * sl2;
                        mx = fmaxf(mx, s[m][n][e]);
                    }
                mx = fmaxf(mx, sr_shfl_xor(0xffffffffu, mx, 1));
                mx = fmaxf(mx, sr_shfl_xor(0xffffffffu, mx, 2));
                float mn = fmaxf(m_[m][r], mx), ref = mn == -INFINITY ? 0.0f : mn;
                float alpha = m_rescale ? 1.0f : exp2f(m_[m][r] - ref);
                m_[m][r] = mn;
                l[m][r] *= alpha;
                for (int n = 0; n < D / 8; n++)
                    for (int e = 2 * r; e < 2 * r + 2; e++)
                        o[m][n][e] *= alpha;
                for (int n = 0; n < 8; n++)
                    for (int e = 2 * r; e < 2 * r + 2; e++) {
                        s[m][n][e] = exp2f(s[m][n][e] - ref);
                        l[m][r] += s[m][n][e];
                    }
            }
        fa_mma_pb_mt<D, MT>(o, s, sv);
        __syncthreads(); /* every warp is done with this stage before the next prefetch refills it */
    }
    SR_UNROLL
    for (int m = 0; m < MT; m++) {
        for (int r = 0; r < 2; r++) {
            l[m][r] += sr_shfl_xor(0xffffffffu, l[m][r], 1);
            l[m][r] += sr_shfl_xor(0xffffffffu, l[m][r], 2);
            int row = w0 + m * 16 + g + 8 * r;
            if (t4 == 0 && row < T)
                lse[((long long)b * NH + h) * T + row] = (m_[m][r] + log2f(l[m][r])) * FA_LN2;
            for (int n = 0; n < D / 8; n++)
                for (int e = 2 * r; e < 2 * r + 2; e++)
                    o[m][n][e] /= l[m][r];
        }
        fa_store<D>(out + (long long)b * T * NH * D + h * D, (long long)NH * D, o[m], w0 + m * 16, T, 1.0f);
    }
}

/* D[b, h, t] = sum_d dO o O over the head's values (each lane's in order,
 * then the warp's tree): a warp per row. */
template <int D> __global__ void rowdot_k(float *Dv, const bf16 *dout, const bf16 *out, int B, int T, int NH) {
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; /* (b, t, h) */
    int lane = threadIdx.x & 31;
    if (row >= (long long)B * T * NH)
        return;
    const bf16 *x = dout + row * D, *y = out + row * D;
    float v = 0.0f;
    for (int i = lane; i < D; i += 32)
        v += __bfloat162float(x[i]) * __bfloat162float(y[i]);
    v = sr_warp_sum(v);
    long long h = row % NH, bt = row / NH, b = bt / T, t = bt % T;
    if (lane == 0)
        Dv[(b * NH + h) * T + t] = v;
}

/* dkv_k's step into stage tiles sq, sdo and rows sl, sd: head h's query
 * and output-gradient rows [q0, q0 + 64) (asynchronous), their LSE (log2
 * units) and D (stored; zeros past T). */
template <int D, typename S, typename SF>
__device__ inline void fa_dkv_stage(S sq, S sdo, SF sl, SF sd, const bf16 *base, const bf16 *dbase, const float *lh,
                                    const float *dh, int h, int q0, int T, long long W, long long C) {
    fa_load<D>(sq, base + h * D, W, q0, T);
    fa_load<D>(sdo, dbase + h * D, C, q0, T);
    if (threadIdx.x < FA_ROWS) {
        int t = q0 + threadIdx.x;
        sl[threadIdx.x] = t < T ? lh[t] * FA_LOG2E : 0.0f;
        sd[threadIdx.x] = t < T ? dh[t] : 0.0f;
    }
}

template <int D>
__global__ void dkv_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *Dv, int T, int NH,
                      int NKV, float scale, float *part) {
    typedef fa_shape<D> F;
    SR_SHARED_DYN(bf16, smem); /* K, V, then (Q, dO) twice */
    SR_SHARED(float, sl, 2 * FA_ROWS);
    SR_SHARED(float, sd, 2 * FA_ROWS);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int kt = blockIdx.z, kv = blockIdx.x, b = blockIdx.y, k0 = kt * FA_ROWS, R = NH / NKV; /* longest first */
    long long W = (long long)(NH + 2 * NKV) * D, C = (long long)NH * D;
    const bf16 *base = qkv + (long long)b * T * W, *dbase = dout + (long long)b * T * C;
    float sl2 = scale * FA_LOG2E;
    auto sk = SR_SHSLICE(smem, 0, F::TILE);
    auto sv = SR_SHSLICE(smem, F::TILE, F::TILE);
    int tiles = (T + FA_ROWS - 1) / FA_ROWS, n = tiles - kt,
        steps = R * n; /* step i: head kv R + i / n, tile kt + i % n */
    const float *lb = lse + (long long)b * NH * T, *db_ = Dv + (long long)b * NH * T;
    fa_load_kv<D>(sk, sv, base, NH, NKV, kv, k0, T);
    fa_dkv_stage<D>(SR_SHSLICE(smem, 2 * F::TILE, F::TILE), SR_SHSLICE(smem, 3 * F::TILE, F::TILE),
                    SR_SHSLICE(sl, 0, FA_ROWS), SR_SHSLICE(sd, 0, FA_ROWS), base, dbase, lb + (long long)kv * R * T,
                    db_ + (long long)kv * R * T, kv * R, k0, T, W, C);
    sr_cp_async_commit();
    uint32_t ka[D / 16][4], va[D / 16][4];
    float dk[D / 8][4], dv[D / 8][4];
    fa_zero(dk);
    fa_zero(dv);
    for (int i = 0; i < steps; i++) {
        int st = i & 1, q0 = (kt + i % n) * FA_ROWS;
        if (i + 1 < steps) { /* the next step's copies, into the other stage */
            int h1 = kv * R + (i + 1) / n, q1 = (kt + (i + 1) % n) * FA_ROWS, nx = (st ^ 1) * 2 * F::TILE;
            fa_dkv_stage<D>(SR_SHSLICE(smem, 2 * F::TILE + nx, F::TILE), SR_SHSLICE(smem, 3 * F::TILE + nx, F::TILE),
                            SR_SHSLICE(sl, (st ^ 1) * FA_ROWS, FA_ROWS), SR_SHSLICE(sd, (st ^ 1) * FA_ROWS, FA_ROWS),
                            base, dbase, lb + (long long)h1 * T, db_ + (long long)h1 * T, h1, q1, T, W, C);
            sr_cp_async_commit();
        }
        fa_wait(i + 1 < steps);
        if (i == 0 && F::HOLD) {
            fa_frag_a<D>(ka, sk, warp * 16);
            fa_frag_a<D>(va, sv, warp * 16);
        }
        auto sq = SR_SHSLICE(smem, 2 * F::TILE + st * 2 * F::TILE, F::TILE);
        auto sdo = SR_SHSLICE(smem, 3 * F::TILE + st * 2 * F::TILE, F::TILE);
        int so = st * FA_ROWS;
        bool edge = q0 == k0 || q0 + FA_ROWS > T; /* the diagonal tile or the tail */
        float p[8][4], dp[8][4];
        fa_zero(p);
        fa_mma_abt<D>(p, ka, sq, F::HOLD, sk, warp * 16); /* S^T: rows keys, columns queries */
        for (int nn = 0; nn < 8; nn++)
            for (int e = 0; e < 4; e++) {
                int key = k0 + warp * 16 + g + (e >= 2 ? 8 : 0), c = nn * 8 + 2 * t4 + (e & 1), query = q0 + c;
                p[nn][e] = !edge || (query >= key && query < T) ? exp2f(p[nn][e] * sl2 - sl[so + c]) : 0.0f;
            }
        fa_mma_pb<D>(dv, p, sdo);
        fa_zero(dp);
        fa_mma_abt<D>(dp, va, sdo, F::HOLD, sv, warp * 16); /* dP^T = V dO^T */
        for (int nn = 0; nn < 8; nn++)
            for (int e = 0; e < 4; e++)
                dp[nn][e] = p[nn][e] * (dp[nn][e] - sd[so + nn * 8 + 2 * t4 + (e & 1)]);
        fa_mma_pb<D>(dk, dp, sq);
        __syncthreads(); /* every warp is done with this stage before the next prefetch refills it */
    }
    bf16 *db = dqkv + (long long)b * T * W;
    fa_store<D>(db + (NH + kv) * D, W, dk, k0 + warp * 16, T, scale);
    fa_store<D>(db + (NH + NKV + kv) * D, W, dv, k0 + warp * 16, T, 1.0f);
    if (part) /* (everything from the parameters again: at D 128 the loop holds every register) */
        fa_colsum_kv<D>(part, dqkv, T, NH, NKV);
}

template <int D>
__global__ void dq_k(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *Dv, int T, int NH,
                     int NKV, float scale, float *part) {
    typedef fa_shape<D> F;
    SR_SHARED_DYN(bf16, smem); /* Q, dO, then (K, V) twice */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    int qt = gridDim.z - 1 - blockIdx.z, h = blockIdx.x, b = blockIdx.y, q0 = qt * FA_ROWS; /* longest first */
    int kv = h / (NH / NKV);
    long long W = (long long)(NH + 2 * NKV) * D, C = (long long)NH * D;
    const bf16 *base = qkv + (long long)b * T * W;
    float sl2 = scale * FA_LOG2E;
    auto sq = SR_SHSLICE(smem, 0, F::TILE);
    auto sdo = SR_SHSLICE(smem, F::TILE, F::TILE);
    fa_load<D>(sq, base + h * D, W, q0, T);
    fa_load<D>(sdo, dout + (long long)b * T * C + h * D, C, q0, T);
    fa_load_kv<D>(SR_SHSLICE(smem, 2 * F::TILE, F::TILE), SR_SHSLICE(smem, 3 * F::TILE, F::TILE), base, NH, NKV, kv, 0,
                  T);
    sr_cp_async_commit();
    float rl[2], rd[2]; /* the lane's two rows' LSE (log2 units) and D */
    for (int r = 0; r < 2; r++) {
        int row = q0 + warp * 16 + g + 8 * r;
        long long i = ((long long)b * NH + h) * T + row;
        rl[r] = row < T ? lse[i] * FA_LOG2E : 0.0f;
        rd[r] = row < T ? Dv[i] : 0.0f;
    }
    uint32_t qa[D / 16][4], da[D / 16][4];
    float dq[D / 8][4];
    fa_zero(dq);
    for (int kt = 0; kt <= qt; kt++) {
        int st = kt & 1;
        if (kt < qt) { /* the next tile's copies, into the other stage */
            int nx = (st ^ 1) * 2 * F::TILE;
            fa_load_kv<D>(SR_SHSLICE(smem, 2 * F::TILE + nx, F::TILE), SR_SHSLICE(smem, 3 * F::TILE + nx, F::TILE),
                          base, NH, NKV, kv, (kt + 1) * FA_ROWS, T);
            sr_cp_async_commit();
        }
        fa_wait(kt < qt);
        if (kt == 0 && F::HOLD) {
            fa_frag_a<D>(qa, sq, warp * 16);
            fa_frag_a<D>(da, sdo, warp * 16);
        }
        auto sk = SR_SHSLICE(smem, 2 * F::TILE + st * 2 * F::TILE, F::TILE);
        auto sv = SR_SHSLICE(smem, 3 * F::TILE + st * 2 * F::TILE, F::TILE);
        bool edge = kt == qt || q0 + FA_ROWS > T; /* the diagonal tile or the tail */
        float p[8][4], dp[8][4];
        fa_zero(p);
        fa_zero(dp);
        fa_mma_abt<D>(p, qa, sk, F::HOLD, sq, warp * 16);
        fa_mma_abt<D>(dp, da, sv, F::HOLD, sdo, warp * 16);
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                int r = e >= 2, row = q0 + warp * 16 + g + 8 * r, col = kt * FA_ROWS + n * 8 + 2 * t4 + (e & 1);
                float pe = !edge || (col <= row && row < T) ? exp2f(p[n][e] * sl2 - rl[r]) : 0.0f;
                p[n][e] = pe * (dp[n][e] - rd[r]);
            }
        fa_mma_pb<D>(dq, p, sk);
        __syncthreads(); /* every warp is done with this stage before the next prefetch refills it */
    }
    fa_store<D>(dqkv + (long long)b * T * W + h * D, W, dq, q0 + warp * 16, T, scale);
    fa_colsum(part ? part + ((long long)b * gridDim.z + qt) * W + h * D : nullptr, dqkv + (long long)b * T * W + h * D,
              W, q0, T, D);
}

/* Shapes flash attention runs (the ops' choice checks the same:
 * sr_cuda_flash_supported). */
static bool fa_shape_ok(int B, int T, int NH, int NKV, int hs) {
    return B > 0 && B <= 65535 && T > 0 && (T + FA_ROWS - 1) / FA_ROWS <= 65535 && NH > 0 && NKV > 0 && NH % NKV == 0 &&
           (hs == 64 || hs == 128); /* (the grid's y and z limits) */
}

/* The row statistic's floats in the backward's workspace, rounded up to
 * 64 (256 bytes: the partial rows after it stay aligned). */
static size_t fa_stat_floats(int B, int T, int NH) { return ((size_t)B * NH * T + 63) / 64 * 64; }

/* A kernel's dynamic shared memory: its attribute first (past 48 KiB a
 * launch fails without it; a failure shows at the launch), not on a dry
 * table (no GPU to ask). */
template <typename K> static size_t fa_smem(K kernel, int tiles, int D) {
    size_t bytes = (size_t)tiles * FA_ROWS * (D + 8) * sizeof(bf16);
    if (!sr_cuda_dry())
        (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    return bytes;
}

/* The forward's tile per head dim: at 64, 128 query rows a block (32 a
 * warp: each K and V fragment serves two row tiles, halving the shared
 * memory reads per mma); at 128, 64 (the 16 x 128 output already takes
 * 64 registers a lane; ptxas: no spills). */
template <int D> struct fa_fwd_mt { static constexpr int MT = D == 64 ? 2 : 1; };

template <int D>
static int fa_forward(cudaStream_t s, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV) {
    constexpr int MT = fa_fwd_mt<D>::MT;
    dim3 grid(NH, B, (T + FA_ROWS * MT - 1) / (FA_ROWS * MT));
    size_t sh = fa_smem(fwd_k<D, MT>, MT + 4, D);
    return SR_LAUNCH((fwd_k<D, MT>), grid, FA_THREADS, sh, s, (bf16 *)out, lse, (const bf16 *)qkv, T, NH, NKV,
                     1.0f / sqrtf((float)D));
}

extern "C" int sr_k_flash_forward(cudaStream_t s, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                                  int hs) {
    SR_ENTER(flash_forward, sr_lc_flash(B, T, NH, NKV, hs, false));
    if (!fa_shape_ok(B, T, NH, NKV, hs))
        return (int)cudaErrorInvalidValue;
    return hs == 64 ? fa_forward<64>(s, out, lse, qkv, B, T, NH, NKV)
                    : fa_forward<128>(s, out, lse, qkv, B, T, NH, NKV);
}

template <int D>
static int fa_backward(cudaStream_t s, void *dqkv, const void *dout, const void *out, const void *qkv, const float *lse,
                       int B, int T, int NH, int NKV, float *ws, float *dbias, int add_bias) {
    long long rows = (long long)B * T * NH;
    float scale = 1.0f / sqrtf((float)D);
    unsigned tiles = (unsigned)((T + FA_ROWS - 1) / FA_ROWS);
    int W = (NH + 2 * NKV) * D;
    /* the workspace: the row statistic, then the bias gradient's partial
     * rows, one per (sequence, 64-row tile) */
    float *part = dbias ? ws + fa_stat_floats(B, T, NH) : nullptr;
    int rc = SR_LAUNCH(rowdot_k<D>, (unsigned)((rows + 7) / 8), 256, 0, s, ws, (const bf16 *)dout, (const bf16 *)out, B,
                       T, NH);
    if (rc == 0) {
        size_t sh = fa_smem(dkv_k<D>, 6, D);
        rc = SR_LAUNCH(dkv_k<D>, dim3(NKV, B, tiles), FA_THREADS, sh, s, (bf16 *)dqkv, (const bf16 *)dout,
                       (const bf16 *)qkv, lse, (const float *)ws, T, NH, NKV, scale, part);
    }
    if (rc == 0) {
        size_t sh = fa_smem(dq_k<D>, 6, D);
        rc = SR_LAUNCH(dq_k<D>, dim3(NH, B, tiles), FA_THREADS, sh, s, (bf16 *)dqkv, (const bf16 *)dout,
                       (const bf16 *)qkv, lse, (const float *)ws, T, NH, NKV, scale, part);
    }
    if (rc == 0 && dbias) /* the rows' partials in order */
        rc = SR_LAUNCH(sr_colsum_finish_k, (W + 255) / 256, 256, 0, s, dbias, part, B * (int)tiles, W, W, add_bias);
    return rc;
}

/* The bias gradient's extra cost: each (sequence, tile) row of partials
 * written and read, the gradient written (and read: add) in float. */
static sr_ledger_cost fa_bias_cost(sr_ledger_cost c, int B, int T, int W, bool dbias, bool add) {
    double rows = (double)B * ((T + FA_ROWS - 1) / FA_ROWS);
    if (dbias) {
        c.flops += (double)B * T * W;
        c.bytes += 8 * rows * W + (add ? 8 : 4) * (double)W;
    }
    return c;
}

extern "C" int sr_k_flash_backward(cudaStream_t s, void *dqkv, const void *dout, const void *out, const void *qkv,
                                   const float *lse, int B, int T, int NH, int NKV, int hs, float *ws, float *dbias,
                                   int add_bias) {
    SR_ENTER(flash_backward,
             fa_bias_cost(sr_lc_flash(B, T, NH, NKV, hs, true), B, T, (NH + 2 * NKV) * hs, dbias, add_bias));
    if (!fa_shape_ok(B, T, NH, NKV, hs))
        return (int)cudaErrorInvalidValue;
    return hs == 64 ? fa_backward<64>(s, dqkv, dout, out, qkv, lse, B, T, NH, NKV, ws, dbias, add_bias)
                    : fa_backward<128>(s, dqkv, dout, out, qkv, lse, B, T, NH, NKV, ws, dbias, add_bias);
}

extern "C" size_t sr_cuda_flash_ws_bytes(int B, int T, int NH, int NKV, int hs) {
    size_t tiles = (size_t)(T + FA_ROWS - 1) / FA_ROWS;
    return (fa_stat_floats(B, T, NH) + (size_t)B * tiles * (size_t)(NH + 2 * NKV) * hs) * sizeof(float);
}
