/* index_math.cu — the __host__ __device__ index helpers of kernels/common.cuh,
 * run on the host (no GPU needed: nvcc compiles this file into a plain host
 * program) against brute-force loops.  An off-by-one in a grid, a chunk
 * bound, a causal mask, a sort key or a qkv offset fails here, in CI,
 * before any GPU sees it.  TAP output. */
#include <algorithm>
#include <stdio.h>
#include <string.h>
#include <vector>

#include "../../kernels/common.cuh"
#include "../../src/dtype.h"
#include "../tap.h"

int main(void) {
    /* grids */
    tap_ok(sr_grid_1d(0, 256, 100) == 1, "an empty range still gets one block");
    tap_ok(sr_grid_1d(1000, 256, 100) == 4 && sr_grid_1d(1024, 256, 100) == 4 && sr_grid_1d(1025, 256, 100) == 5,
           "blocks cover n exactly (1000, 1024, 1025 over 256)");
    tap_ok(sr_grid_1d((size_t)1 << 40, 256, 1000) == 1000, "the grid is capped (grid-stride loops cover the rest)");

    /* fixed-order column-sum chunks cover every row exactly once, in order */
    const int Ns[] = {1, 31, 32, 33, 100, 1024, 16384, 16385};
    bool cover = true;
    for (int N : Ns) {
        int chunks = sr_colsum_chunks(N), next = 0;
        for (int k = 0; k < chunks; k++) {
            int lo, hi;
            sr_colsum_bounds(k, N, &lo, &hi);
            cover = cover && lo == next && hi > lo && hi - lo <= SR_COLSUM_ROWS;
            next = hi;
        }
        cover = cover && next == N;
    }
    tap_ok(cover, "column-sum chunks tile [0, N) in order for N in 1..16385");

    /* the causal query of a score row */
    bool causal = true;
    for (long long r = 0; r < 3 * 4 * 7; r++)
        causal = causal && sr_causal_query(r, 7) == (int)(r % 7);
    tap_ok(causal, "row r of [B*NH*T, T] scores is query r %% T");

    /* sort keys: tokens grouped, positions ascending, runs found */
    const int inp[] = {5, 3, 5, 50256, 0, 3, 5, 7, 0};
    int n = (int)(sizeof inp / sizeof inp[0]);
    std::vector<unsigned long long> keys;
    for (int i = 0; i < n; i++)
        keys.push_back(sr_key_pack(inp[i], i));
    bool round = true;
    for (int i = 0; i < n; i++)
        round = round && sr_key_token(keys[i]) == inp[i] && sr_key_pos(keys[i]) == i;
    tap_ok(round, "a key packs a token and a position and gives both back");
    std::sort(keys.begin(), keys.end());
    int runs = 0;
    bool ordered = true;
    for (int i = 0; i < n; i++) {
        runs += sr_key_run_start(keys.data(), i);
        if (i && sr_key_token(keys[i]) == sr_key_token(keys[i - 1]))
            ordered = ordered && sr_key_pos(keys[i]) > sr_key_pos(keys[i - 1]);
    }
    tap_ok(runs == 5, "sorted keys start one run per distinct token (%d runs, expected 5)", runs);
    tap_ok(ordered, "within a run, positions ascend (the fixed summation order)");

    /* qkv offsets: every element once, q k v parts C apart, heads hs apart */
    const int B = 2, T = 3, NH = 4, hs = 5, C = NH * hs;
    std::vector<int> seen((size_t)B * T * 3 * C, 0);
    bool inside = true, layout = true;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 3; part++)
                for (int h = 0; h < NH; h++)
                    for (int d = 0; d < hs; d++) {
                        size_t o = sr_qkv_offset(b, t, part, h, d, T, C, hs);
                        inside = inside && o < seen.size();
                        if (o < seen.size())
                            seen[o]++;
                        layout = layout && o == (size_t)(b * T + t) * 3 * C + part * C + h * hs + d;
                    }
    tap_ok(inside && std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }),
           "qkv offsets cover [B, T, 3C] exactly once");
    tap_ok(layout, "qkv offsets follow ops.h's layout (parts C wide, heads contiguous)");

    /* bf16 rounding: the same bits as the host's sr_f32_to_bf16 */
    const float vals[] = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -3.14159265f, 1e-40f, 3.4e38f, 65504.0f,
                          1.0f / 3.0f};
    bool same = true;
    for (float v : vals)
        same = same && sr_bf16_bits_rne(v) == sr_f32_to_bf16(v);
    tap_ok(same, "the device's f32->bf16 rounding gives the host's bits (ties to even, subnormals, large values)");
    tap_ok(sr_bf16_bits_rne(1.00390625f) == 0x3f80 && sr_bf16_bits_rne(1.01171875f) == 0x3f82,
           "ties round to even: 1 + 2^-8 -> 1.0, 1 + 3*2^-8 -> 1 + 2^-6");
    return tap_done();
}
