/* gpu_gemm.c — the GPU's measured bf16 GEMM rate: cuBLASLt through the same
 * plans and cache as the CUDA ops (gemm_cuda.h), at 8192^3 and at the
 * GPT-2 124M shapes of one micro-batch (B=16, T=1024).  The 8192^3 rate is
 * the denominator of tests/gpu/check.sh's "MFU vs measured GEMM".  Prints
 * one row per shape with the median of 10 timed runs (after 3 warm-ups),
 * the spread and the ratio to 8192^3, and a last line `GEMM_TFLOPS=<x>`.
 * The operands are random bf16 in [-1, 1) (a GPU's tensor cores run
 * measurably faster on zeros); D is random too, since the dW shape
 * accumulates into it (beta = 1).  Then kernels/tile_gemm.cu (the tiled
 * GEMM on mma.cuh's primitives, off the training path) at 8192^3 and the
 * fc forward shape, its rate against cuBLASLt's at the same shape (C = A
 * B^T: the linear layers' layout).  Then kernels/flash.cu's forward and
 * backward (causal, bf16, one kv head per query head) at head dim 64, T
 * 1024 (FlashAttention-2's benchmark shape: 16 x 32 heads) and head dim
 * 128 at T 1024 and 8192: TFLOP/s by causal FLOPs (forward 4 B NH hs T^2
 * / 2, backward 2.5 times it, as FlashAttention-2 counts), median and
 * spread of 10, each against the 8192^3 GEMM rate of the same run.  Exit
 * 77 without a GPU. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "dtype.h"

/* Fills `bytes` of device memory at dst with copies of a 64 MiB host chunk
 * of random values in [-1, 1): bf16 when bf16, else f32. */
static int fill_random(sr_dev *dev, void *dst, size_t bytes, bool bf16, uint64_t seed) {
    const size_t chunk = (size_t)64 << 20;
    unsigned char *h = malloc(chunk);
    if (!h)
        return -1;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < chunk / 4; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(x >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
        if (bf16) {
            uint16_t b[2] = {sr_f32_to_bf16(v), sr_f32_to_bf16(-v * 0.5f)};
            memcpy(h + 4 * i, b, 4);
        } else
            memcpy(h + 4 * i, &v, 4);
    }
    size_t first = bytes < chunk ? bytes : chunk;
    sr_status st = sr_dev_upload(dev, dst, h, first, "upload");
    for (size_t at = first; st == SR_OK && at < bytes; at += chunk)
        dev->copy(dev, SR_STREAM_COMPUTE, (char *)dst + at, dst, bytes - at < chunk ? bytes - at : chunk);
    free(h);
    return st == SR_OK && dev->sync(dev, SR_STREAM_COMPUTE) == SR_OK ? 0 : -1;
}

static int cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Times `what` (0 forward, 1 backward) of flash attention 13 times (3
 * warm-ups), the median and extremes of the rest into ms[]. */
static int flash_time(sr_dev *dev, sr_cuda_ctx *c, cudaEvent_t e0, cudaEvent_t e1, int what, void *const buf[6], int B,
                      int T, int NH, int hs, float ms[13]) {
    for (int r = 0; r < 13; r++) {
        cudaEventRecord(e0, c->stream);
        int e = what == 0 ? sr_k_flash_forward(c->stream, buf[1], buf[2], buf[0], B, T, NH, NH, hs)
                          : sr_k_flash_backward(c->stream, buf[3], buf[4], buf[1], buf[0], buf[2], B, T, NH, NH, hs,
                                                buf[5], NULL, 0);
        cudaEventRecord(e1, c->stream);
        if (e != 0 || dev->sync(dev, SR_STREAM_COMPUTE) != SR_OK) {
            fprintf(stderr, "gpu_gemm: flash %s: %s\n", what ? "backward" : "forward",
                    e ? cudaGetErrorString((cudaError_t)e) : sr_error_message());
            return -1;
        }
        cudaEventElapsedTime(&ms[r], e0, e1);
    }
    qsort(ms + 3, 10, sizeof(float), cmp);
    return 0;
}

/* The flash attention table (see the file's comment); gemm the 8192^3
 * rate of this run. */
static int flash_rates(sr_dev *dev, sr_cuda_ctx *c, cudaEvent_t e0, cudaEvent_t e1, double gemm) {
    const struct { int B, T, NH, hs; } shapes[] = {{16, 1024, 32, 64}, {16, 1024, 16, 128}, {2, 8192, 16, 128}};
    printf(
        "\n| flash.cu (causal, B x NH x T, hs) | forward TFLOP/s | spread | vs GEMM | backward TFLOP/s | spread | vs "
        "GEMM |\n|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int B = shapes[i].B, T = shapes[i].T, NH = shapes[i].NH, hs = shapes[i].hs;
        size_t rows = (size_t)B * T * NH, qkv = rows * 3 * hs * 2, o = rows * hs * 2;
        void *buf[6] = {dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, qkv),
                        dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, o),
                        dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, rows * 4),
                        dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, qkv),
                        dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, o),
                        dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, sr_cuda_flash_ws_bytes(B, T, NH, NH, hs))};
        for (int k = 0; k < 6; k++)
            if (!buf[k])
                return -1;
        if (fill_random(dev, buf[0], qkv, true, 11 + i) != 0 || fill_random(dev, buf[4], o, true, 12 + i) != 0)
            return -1;
        float f[13], b[13];
        if (flash_time(dev, c, e0, e1, 0, buf, B, T, NH, hs, f) != 0 ||
            flash_time(dev, c, e0, e1, 1, buf, B, T, NH, hs, b) != 0)
            return -1;
        double fl = 4.0 * B * NH * hs * (double)T * T / 2, bl = 2.5 * fl;
        double fm = fl / ((f[7] + f[8]) / 2 * 1e-3) / 1e12, bm = bl / ((b[7] + b[8]) / 2 * 1e-3) / 1e12;
        printf("| %d x %d x %d, %d | %.1f | %.1f-%.1f | %.2f | %.1f | %.1f-%.1f | %.2f |\n", B, NH, T, hs, fm,
               fl / (f[12] * 1e-3) / 1e12, fl / (f[3] * 1e-3) / 1e12, fm / gemm, bm, bl / (b[12] * 1e-3) / 1e12,
               bl / (b[3] * 1e-3) / 1e12, bm / gemm);
        for (int k = 0; k < 6; k++)
            dev->free(dev, buf[k]);
    }
    return 0;
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("gpu_gemm: no GPU (cudaGetDeviceCount)\n");
        return 77;
    }
    sr_dev *dev;
    if (sr_dev_cuda_open(&dev, 0, "0") != SR_OK) {
        fprintf(stderr, "gpu_gemm: %s\n", sr_error_message());
        return 1;
    }
    sr_cuda_ctx *c = sr_dev_cuda_ctx(dev);
    /* row-major M x N x K: (name, M, N, K, ta, tb) */
    const struct {
        const char *name;
        int M, N, K, ta, tb;
    } shapes[] = {
        {"8192^3", 8192, 8192, 8192, 0, 1},
        {"qkv fwd 16384x2304x768", 16384, 2304, 768, 0, 1},
        {"fc fwd 16384x3072x768", 16384, 3072, 768, 0, 1},
        {"fcproj fwd 16384x768x3072", 16384, 768, 3072, 0, 1},
        {"lm head 16384x50304x768", 16384, 50304, 768, 0, 1},
        {"fc dW 3072x768x16384", 3072, 768, 16384, 1, 0},
    };
    size_t maxe = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t a = (size_t)shapes[i].M * shapes[i].K, b = (size_t)shapes[i].N * shapes[i].K,
               d = (size_t)shapes[i].M * shapes[i].N;
        maxe = a > maxe ? a : maxe, maxe = b > maxe ? b : maxe, maxe = d > maxe ? d : maxe;
    }
    void *A = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, maxe * 2);
    void *B = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, maxe * 2);
    void *D = dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, maxe * 4);
    if (!A || !B || !D)
        return 1;
    if (fill_random(dev, A, maxe * 2, true, 1) != 0 || fill_random(dev, B, maxe * 2, true, 2) != 0 ||
        fill_random(dev, D, maxe * 4, false, 3) != 0) {
        fprintf(stderr, "gpu_gemm: filling the operands failed: %s\n", sr_error_message());
        return 1;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double base = 0.0, tf_at[sizeof shapes / sizeof shapes[0]] = {0};
    printf("| GEMM (random bf16 in, fp32 accumulate) | TFLOP/s median | spread | vs 8192^3 |\n|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int M = shapes[i].M, N = shapes[i].N, K = shapes[i].K, ta = shapes[i].ta, tb = shapes[i].tb;
        bool dw = ta == 1;
        sr_gemm_key k = sr_cuda_rm_key(ta, tb, M, N, K, ta ? M : K, 0, tb ? K : N, 0, N, 0, 1, true, dw, dw);
        k.align_a = k.align_b = k.align_d = 16;
        float ms[13];
        for (int r = 0; r < 13; r++) {
            cudaEventRecord(e0, c->stream);
            if (sr_gemm_run(c->gemm, c->stream, &k, B, A, D, NULL, 1.0f, SR_LF_GEMM_LINEAR) != SR_OK) {
                fprintf(stderr, "gpu_gemm: %s\n", sr_error_message());
                return 1;
            }
            cudaEventRecord(e1, c->stream);
            if (dev->sync(dev, SR_STREAM_COMPUTE) != SR_OK) {
                fprintf(stderr, "gpu_gemm: %s\n", sr_error_message());
                return 1;
            }
            cudaEventElapsedTime(&ms[r], e0, e1);
        }
        qsort(ms + 3, 10, sizeof(float), cmp);
        double flops = 2.0 * M * N * K, med = (ms[7] + ms[8]) / 2, tf = flops / (med * 1e-3) / 1e12;
        double lo = flops / (ms[12] * 1e-3) / 1e12, hi = flops / (ms[3] * 1e-3) / 1e12;
        if (i == 0)
            base = tf;
        tf_at[i] = tf;
        printf("| %s | %.1f | %.1f-%.1f | %.2f |\n", shapes[i].name, tf, lo, hi, tf / base);
    }
    /* the tiled GEMM on the tensor-core primitives, against cuBLASLt */
    printf("\n| tile_gemm.cu (mma.cuh) | TFLOP/s median | spread | vs cuBLASLt same shape |\n|---|---|---|---|\n");
    for (size_t i = 0; i < 3; i++) {
        int M = shapes[i].M, N = shapes[i].N, K = shapes[i].K;
        float ms[13];
        for (int r = 0; r < 13; r++) {
            cudaEventRecord(e0, c->stream);
            int e = sr_k_tile_gemm_bf16(c->stream, D, A, B, M, N, K);
            cudaEventRecord(e1, c->stream);
            if (e != 0 || dev->sync(dev, SR_STREAM_COMPUTE) != SR_OK) {
                fprintf(stderr, "gpu_gemm: tile_gemm %s: %s\n", shapes[i].name,
                        e ? cudaGetErrorString((cudaError_t)e) : sr_error_message());
                return 1;
            }
            cudaEventElapsedTime(&ms[r], e0, e1);
        }
        qsort(ms + 3, 10, sizeof(float), cmp);
        double flops = 2.0 * M * N * K, med = (ms[7] + ms[8]) / 2, tf = flops / (med * 1e-3) / 1e12;
        double lo = flops / (ms[12] * 1e-3) / 1e12, hi = flops / (ms[3] * 1e-3) / 1e12;
        printf("| %s | %.1f | %.1f-%.1f | %.2f |\n", shapes[i].name, tf, lo, hi, tf / tf_at[i]);
    }
    if (flash_rates(dev, c, e0, e1, base) != 0)
        return 1;
    printf("GEMM_TFLOPS=%.1f\n", base);
    sr_device_close(dev);
    return 0;
}
