/* gpu_gemm.c — the GPU's measured bf16 GEMM rate: cuBLASLt through the same
 * plans and cache as the CUDA ops (gemm_cuda.h), at 8192^3 and at the
 * GPT-2 124M shapes of one micro-batch (B=16, T=1024).  The 8192^3 rate is
 * the denominator of tests/gpu/check.sh's "MFU vs measured GEMM".  Prints
 * one row per shape with the median of 10 timed runs (after 3 warm-ups),
 * the spread and the ratio to 8192^3, and a last line `GEMM_TFLOPS=<x>`.
 * Exit 77 without a GPU. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"

static int cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
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
    dev->memset(dev, SR_STREAM_COMPUTE, A, 0x3c, maxe * 2);
    dev->memset(dev, SR_STREAM_COMPUTE, B, 0x3c, maxe * 2);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double base = 0.0;
    printf("| GEMM (bf16 in, fp32 accumulate) | TFLOP/s median | spread | vs 8192^3 |\n|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int M = shapes[i].M, N = shapes[i].N, K = shapes[i].K, ta = shapes[i].ta, tb = shapes[i].tb;
        bool dw = ta == 1;
        sr_gemm_key k = sr_cuda_rm_key(ta, tb, M, N, K, ta ? M : K, 0, tb ? K : N, 0, N, 0, 1, true, dw, dw);
        k.align_a = k.align_b = k.align_d = 16;
        float ms[13];
        for (int r = 0; r < 13; r++) {
            cudaEventRecord(e0, c->stream);
            if (sr_gemm_run(c->gemm, c->stream, &k, B, A, D, NULL, 1.0f) != SR_OK) {
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
        printf("| %s | %.1f | %.1f-%.1f | %.2f |\n", shapes[i].name, tf, lo, hi, tf / base);
    }
    printf("GEMM_TFLOPS=%.1f\n", base);
    sr_device_close(dev);
    return 0;
}
