/* ledger.h — what each GPU operation costs, stated once: the kernels it
 * launches, its floating-point operations and the HBM bytes its contract
 * must read and write (the minimum, not a cache model), as a function of
 * its arguments; and the tally of a step's operations by family.
 *
 * ledger owns the cost table of every CUDA launcher (kernels/sr_cuda.h's
 * SR_CUDA_LAUNCHERS: each launcher states its cost here as it is entered),
 * of the cuBLASLt calls (gemm_cuda.c), of the device table's copies and
 * memsets (device_cuda.c) and of the collectives (plane.c).  It is
 * CUDA-free: kernels/sr_cuda.h includes it, and the program reads it in
 * every build.  A tally (sr_ledger) sums what the operations of one
 * thread record while it is bound (sr_ledger_bind): `shardrun plan
 * --ledger` binds one to a dry cuda table that executes nothing (a
 * counting executor of the same table: device.h's cuda table opened dry),
 * a profiled run (SHARDRUN_CUDA_PROFILE) one to the real table; the same
 * records, so the counts of both are one description of the step.
 *
 * Families: the rows of the ledger's table and of the profile (the names
 * in SR_LEDGER_FAMILY_NAMES, in this order). */
#ifndef SR_LEDGER_H
#define SR_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SR_LF_GEMM_LINEAR,
    SR_LF_GEMM_ATTENTION,
    SR_LF_SOFTMAX,
    SR_LF_ATTENTION_OTHER,
    SR_LF_NORM,
    SR_LF_ELEMENTWISE,
    SR_LF_CLASSIFIER,
    SR_LF_OPTIMIZER,
    SR_LF_FSDP_COPY,
    SR_LF_MEMSET,
    SR_LF_OTHER,
    SR_LF_COLLECTIVE,
    SR_LF_COUNT
} sr_ledger_family;
#define SR_LEDGER_FAMILY_NAMES                                                                                         \
    {                                                                                                                  \
        "gemm-linear", "gemm-attention", "softmax", "attention-other", "norm", "elementwise", "classifier",            \
            "optimizer", "fsdp-copy", "memset", "other", "collective"                                                  \
    }
extern const char *const sr_ledger_family_names[SR_LF_COUNT];

/* What one call costs. */
typedef struct {
    double flops; /* floating-point operations */
    double bytes; /* HBM bytes read and written, at the least */
} sr_ledger_cost;

/* One family's tally. */
typedef struct {
    long long launches;   /* kernels launched (a launcher may launch several) */
    long long gemm_calls; /* cuBLASLt matmuls */
    long long calls;      /* operations of any kind (launcher calls, GEMMs, copies, memsets, collectives) */
    double flops, bytes;
    double bound_s; /* the roofline bound at the tally's rates (sr_ledger_roofline) */
    double ms;      /* measured device time (the profile), milliseconds */
} sr_ledger_row;

/* Every launcher of kernels/ and its family, X(name, family): the one list
 * (kernels/sr_cuda.h's SR_CUDA_LAUNCHERS is this list: the call counts,
 * the static check and the ledger's rows all index it). */
#define SR_LEDGER_LAUNCHERS(X)                                                                                         \
    X(encoder_forward, SR_LF_OTHER)                                                                                    \
    X(encoder_backward, SR_LF_OTHER)                                                                                   \
    X(layernorm_forward, SR_LF_NORM)                                                                                   \
    X(layernorm_backward, SR_LF_NORM)                                                                                  \
    X(residual_layernorm_forward, SR_LF_NORM)                                                                          \
    X(gelu_forward, SR_LF_ELEMENTWISE)                                                                                 \
    X(gelu_backward, SR_LF_ELEMENTWISE)                                                                                \
    X(residual_forward, SR_LF_ELEMENTWISE)                                                                             \
    X(bias_backward, SR_LF_ELEMENTWISE)                                                                                \
    X(bias_forward, SR_LF_ELEMENTWISE)                                                                                 \
    X(softmax_causal_forward, SR_LF_SOFTMAX)                                                                           \
    X(softmax_causal_backward, SR_LF_SOFTMAX)                                                                          \
    X(gqa_expand, SR_LF_ATTENTION_OTHER)                                                                               \
    X(gqa_reduce, SR_LF_ATTENTION_OTHER)                                                                               \
    X(crossentropy_forward, SR_LF_CLASSIFIER)                                                                          \
    X(crossentropy_backward, SR_LF_CLASSIFIER)                                                                         \
    X(crossentropy_fused, SR_LF_CLASSIFIER)                                                                            \
    X(rmsnorm_forward, SR_LF_NORM)                                                                                     \
    X(rmsnorm_backward, SR_LF_NORM)                                                                                    \
    X(residual_rmsnorm_forward, SR_LF_NORM)                                                                            \
    X(rope_forward, SR_LF_ATTENTION_OTHER)                                                                             \
    X(rope_backward, SR_LF_ATTENTION_OTHER)                                                                            \
    X(swiglu_forward, SR_LF_ELEMENTWISE)                                                                               \
    X(swiglu_backward, SR_LF_ELEMENTWISE)                                                                              \
    X(adamw, SR_LF_OPTIMIZER)                                                                                          \
    X(cast_f32_bf16, SR_LF_FSDP_COPY)                                                                                  \
    X(fold_bf16, SR_LF_FSDP_COPY)                                                                                      \
    X(add_f32, SR_LF_FSDP_COPY)                                                                                        \
    X(sum_squares, SR_LF_OPTIMIZER)                                                                                    \
    X(loss_sum, SR_LF_CLASSIFIER)                                                                                      \
    X(spin, SR_LF_OTHER)                                                                                               \
    X(probe, SR_LF_OTHER)                                                                                              \
    X(tile_gemm, SR_LF_GEMM_LINEAR)                                                                                    \
    X(flash_forward, SR_LF_GEMM_ATTENTION)                                                                             \
    X(flash_backward, SR_LF_GEMM_ATTENTION)
enum {
#define SR_LEDGER_ENUM(n, f) SR_LEDGER_L_##n,
    SR_LEDGER_LAUNCHERS(SR_LEDGER_ENUM)
#undef SR_LEDGER_ENUM
        SR_LEDGER_NLAUNCHERS,
    /* the rows of the operations that are not launchers of kernels/ */
    SR_LEDGER_ROW_GEMM_LINEAR = SR_LEDGER_NLAUNCHERS, /* cuBLASLt matmuls of the linear layers */
    SR_LEDGER_ROW_GEMM_ATTENTION,                     /* cuBLASLt matmuls of attention */
    SR_LEDGER_ROW_COPY_DEVICE,                        /* copies within device memory */
    SR_LEDGER_ROW_COPY_HOST,                          /* copies between host and device */
    SR_LEDGER_ROW_MEMSET,                             /* memsets */
    SR_LEDGER_ROW_COLLECTIVE,                         /* collectives of more than one rank */
    SR_LEDGER_NROWS
};

/* A tally: per family, and per launcher (the profile's rows). */
typedef struct sr_ledger {
    sr_ledger_row fam[SR_LF_COUNT];
    sr_ledger_row row[SR_LEDGER_NROWS]; /* per launcher, then the other operations' rows */
    int current;                        /* the launcher entered last (-1: none since the last other operation) */
} sr_ledger;

/* Binds `l` to the calling thread (NULL unbinds): every record of this
 * thread adds to it.  sr_ledger_bound: the bound tally or NULL. */
void sr_ledger_bind(sr_ledger *l);
sr_ledger *sr_ledger_bound(void);
void sr_ledger_clear(sr_ledger *l);

/* A launcher is entered (its index in SR_CUDA_LAUNCHERS and its cost):
 * one call of its family; its kernels are counted by sr_ledger_kernel as
 * they launch. */
void sr_ledger_enter(int launcher, sr_ledger_cost c);
/* One kernel launched (SR_LAUNCH: every launch of kernels/ passes here),
 * counted to the launcher entered last. */
void sr_ledger_kernel(void);
/* The row the bound tally counts a kernel launched now to (the launcher
 * entered last), or -1 (none bound, or none entered). */
int sr_ledger_current_row(void);
/* One cuBLASLt matmul: D[m, n] = op(A) op(B) (+ D when accumulate) over
 * `batch` products of k terms, A and B of es bytes an element, D of
 * es_d, in a family (gemm-linear or gemm-attention). */
void sr_ledger_gemm(sr_ledger_family f, double m, double n, double k, double batch, int es, int es_d, bool accumulate);
/* One stream-ordered copy or memset of `bytes` (a copy within device
 * memory reads and writes them; one to or from the host moves them once). */
void sr_ledger_copy(double bytes, bool device_to_device);
void sr_ledger_memset(double bytes);
/* One collective of a group of `size` ranks over `bytes` (the full
 * buffer: an all-gather's output, a reduce-scatter's input, an
 * all-reduce's buffer): what a rank moves by the ring algorithm. */
void sr_ledger_collective(bool allreduce, double bytes, int size);

/* The launchers' costs: each launcher of kernels/ enters with its own
 * (es: element bytes of its activations, 2 for bf16, 4 for f32). */
sr_ledger_cost sr_lc_encoder_forward(int B, int T, int C, int es, bool wpe);
sr_ledger_cost sr_lc_encoder_backward(int B, int T, int C, int es, bool wpe, bool add_wpe);
sr_ledger_cost sr_lc_norm_forward(int N, int C, int es, bool mean_and_bias, bool residual);
sr_ledger_cost sr_lc_norm_backward(int N, int C, int es, bool mean_and_bias, bool add_dinp, bool add_dw, int sums,
                                   bool add_sum);
sr_ledger_cost sr_lc_gelu_backward(size_t n, int OC, int es, bool acc, bool dbias, bool add_bias);
sr_ledger_cost sr_lc_elementwise(size_t n, int es, int reads, int writes, double flops_per);
sr_ledger_cost sr_lc_bias_backward(int N, int OC, int es, bool add);
sr_ledger_cost sr_lc_softmax(long long rows, int T, int es, bool backward);
sr_ledger_cost sr_lc_gqa(int T, int NKV, int R, int hs, int es, bool reduce);
sr_ledger_cost sr_lc_crossentropy(int N, int V, int es, bool backward);
sr_ledger_cost sr_lc_crossentropy_fused(int N, int V, int Vp, int es);
sr_ledger_cost sr_lc_rope(int B, int T, int NH, int NKV, int hs, int es);
sr_ledger_cost sr_lc_swiglu(int N, int F, int es, int pass);
sr_ledger_cost sr_lc_adamw(size_t n, bool copy16);
/* tile_gemm.cu's C[M, N] (f32) = A[M, K] B[N, K]^T (bf16) */
sr_ledger_cost sr_lc_tile_gemm(int M, int N, int K);
/* flash.cu's attention of B sequences of T tokens, NH query and NKV
 * key/value heads of hs: the FLOPs its tensor cores execute over the
 * causal half (forward: S and P V; backward: S and dP in each of its two
 * kernels, dV, dK and dQ) and the HBM bytes of its inputs and outputs
 * (no T x T matrix: the LSE and the row statistic D, f32, per row). */
sr_ledger_cost sr_lc_flash(int B, int T, int NH, int NKV, int hs, bool backward);

/* The roofline bound of every row of `l` at `gemm_tflops` (a GEMM's: its
 * FLOPs or its bytes, whichever takes longer) and `hbm_tbps` (every
 * other op: its bytes); collectives are not bounded here (0).  Fills
 * bound_s and returns the total. */
double sr_ledger_roofline(sr_ledger *l, double gemm_tflops, double hbm_tbps);
/* The sum of every family's row. */
sr_ledger_row sr_ledger_total(const sr_ledger *l);
/* Adds row r into *to, every count and sum. */
void sr_ledger_row_add(sr_ledger_row *to, const sr_ledger_row *r);
/* The name of row i of l->row (a launcher's, or "cublasLt_linear",
 * "cublasLt_attention", "copy_device", "copy_host", "memset",
 * "collective") and its family; the row of a GEMM of family f. */
const char *sr_ledger_row_name(int i);
sr_ledger_family sr_ledger_row_family(int i);
int sr_ledger_gemm_row(sr_ledger_family f);

#ifdef __cplusplus
}
#endif

#endif
