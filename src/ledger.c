/* ledger.c — the cost table of the GPU's operations and the tallies; see
 * ledger.h.
 *
 * Each cost is the contract's minimum: the bytes an operation must read
 * and write in HBM (every input once, every output once; an accumulation
 * `+=` reads its output too) and its floating-point operations, counted
 * as the op's arithmetic (a multiply-add is two).  es is the activations'
 * element size; parameter gradients, statistics and the optimizer's state
 * are float (ops.h). */
#include "srconfig.h"

#include "ledger.h"

#include <string.h>

const char *const sr_ledger_family_names[SR_LF_COUNT] = SR_LEDGER_FAMILY_NAMES;

static const char *const row_names[SR_LEDGER_NROWS] = {
#define SR_LEDGER_NAME(n, f) #n,
    SR_LEDGER_LAUNCHERS(SR_LEDGER_NAME)
#undef SR_LEDGER_NAME
        "cublasLt_linear",
    "cublasLt_attention",
    "copy_device",
    "copy_host",
    "memset",
    "collective"};

static const sr_ledger_family row_families[SR_LEDGER_NROWS] = {
#define SR_LEDGER_FAM(n, f) f,
    SR_LEDGER_LAUNCHERS(SR_LEDGER_FAM)
#undef SR_LEDGER_FAM
        SR_LF_GEMM_LINEAR,
    SR_LF_GEMM_ATTENTION,
    SR_LF_FSDP_COPY,
    SR_LF_OTHER,
    SR_LF_MEMSET,
    SR_LF_COLLECTIVE};

static _Thread_local sr_ledger *bound;

void sr_ledger_bind(sr_ledger *l) { bound = l; }
sr_ledger *sr_ledger_bound(void) { return bound; }

void sr_ledger_clear(sr_ledger *l) {
    memset(l, 0, sizeof *l);
    l->current = -1;
}

const char *sr_ledger_row_name(int i) { return i >= 0 && i < SR_LEDGER_NROWS ? row_names[i] : "?"; }
sr_ledger_family sr_ledger_row_family(int i) { return i >= 0 && i < SR_LEDGER_NROWS ? row_families[i] : SR_LF_OTHER; }
int sr_ledger_gemm_row(sr_ledger_family f) {
    return f == SR_LF_GEMM_ATTENTION ? SR_LEDGER_ROW_GEMM_ATTENTION : SR_LEDGER_ROW_GEMM_LINEAR;
}

/* One operation on row r (of the row's family). */
static void note(sr_ledger *l, int r, sr_ledger_cost c, long long launches, long long gemms) {
    sr_ledger_row *rows[2] = {&l->fam[row_families[r]], &l->row[r]};
    for (int i = 0; i < 2; i++) {
        rows[i]->calls++;
        rows[i]->launches += launches;
        rows[i]->gemm_calls += gemms;
        rows[i]->flops += c.flops;
        rows[i]->bytes += c.bytes;
    }
}

void sr_ledger_enter(int launcher, sr_ledger_cost c) {
    sr_ledger *l = bound;
    if (!l || launcher < 0 || launcher >= SR_LEDGER_NLAUNCHERS)
        return;
    l->current = launcher;
    note(l, launcher, c, 0, 0);
}

void sr_ledger_kernel(void) {
    sr_ledger *l = bound;
    if (!l)
        return;
    /* (every launch is inside a launcher: kernels/ enters one first) */
    int r = l->current >= 0 ? l->current : SR_LEDGER_L_spin;
    l->fam[row_families[r]].launches++;
    l->row[r].launches++;
}

int sr_ledger_current_row(void) { return bound ? bound->current : -1; }

void sr_ledger_gemm(sr_ledger_family f, double m, double n, double k, double batch, int es, int es_d, bool accumulate) {
    sr_ledger *l = bound;
    if (!l)
        return;
    sr_ledger_cost c = {2.0 * m * n * k * batch,
                        ((double)es * (m * k + k * n) + (double)es_d * m * n * (accumulate ? 2 : 1)) * batch};
    note(l, sr_ledger_gemm_row(f), c, 0, 1);
    l->current = -1;
}

void sr_ledger_copy(double bytes, bool device_to_device) {
    sr_ledger *l = bound;
    if (l) {
        note(l, device_to_device ? SR_LEDGER_ROW_COPY_DEVICE : SR_LEDGER_ROW_COPY_HOST,
             (sr_ledger_cost){0, device_to_device ? 2 * bytes : bytes}, 1, 0);
        l->current = -1;
    }
}

void sr_ledger_memset(double bytes) {
    sr_ledger *l = bound;
    if (l) {
        note(l, SR_LEDGER_ROW_MEMSET, (sr_ledger_cost){0, bytes}, 1, 0);
        l->current = -1;
    }
}

void sr_ledger_collective(bool allreduce, double bytes, int size) {
    /* all-gather, reduce-scatter: (S - 1) / S of the buffer; all-reduce twice that */
    sr_ledger *l = bound;
    if (!l || size < 1)
        return;
    double moved = bytes * (double)(size - 1) / (double)size * (allreduce ? 2.0 : 1.0);
    note(l, SR_LEDGER_ROW_COLLECTIVE, (sr_ledger_cost){0, moved}, 1, 0);
}

/* ---- the launchers' costs ------------------------------------------------ */

sr_ledger_cost sr_lc_encoder_forward(int B, int T, int C, int es, bool wpe) {
    double BT = (double)B * T, BTC = BT * C;
    return (sr_ledger_cost){wpe ? BTC : 0, es * (2 * BTC + (wpe ? (double)T * C : 0)) + 4 * BT};
}

sr_ledger_cost sr_lc_encoder_backward(int B, int T, int C, int es, bool wpe, bool add_wpe) {
    double BT = (double)B * T, BTC = BT * C;
    /* dout read; dwte's rows read and written in float, dwpe written (and
     * read: add_wpe); the (token, position) keys sorted: written and read
     * twice */
    return (sr_ledger_cost){BTC * (wpe ? 2 : 1),
                            es * BTC + 8 * BTC + (wpe ? (add_wpe ? 8 : 4) * (double)T * C : 0) + 4 * 4 * BT};
}

sr_ledger_cost sr_lc_norm_forward(int N, int C, int es, bool mean_and_bias, bool residual) {
    double NC = (double)N * C;
    /* input read, output written, weight (and bias) read; rstd (and mean)
     * written; the residual form reads two inputs and writes their sum too
     * (what residual_forward and the norm would move, less the norm's read
     * of the sum) */
    return (sr_ledger_cost){(mean_and_bias ? 8 : 6) * NC + (residual ? NC : 0),
                            es * ((residual ? 4 : 2) * NC + (mean_and_bias ? 2 : 1) * (double)C) +
                                (mean_and_bias ? 8 : 4) * (double)N};
}

sr_ledger_cost sr_lc_norm_backward(int N, int C, int es, bool mean_and_bias, bool add_dinp, bool add_dw, int sums,
                                   bool add_sum) {
    double NC = (double)N * C;
    /* dout and input read, dinp written (and read: add_dinp), weight read;
     * dw (and db) written in float (and read: add_dw); the statistics read;
     * `sums` column sums of the input gradient (as it came in, as it
     * leaves) written (and read: add_sum), summed as dinp is read and
     * written */
    return (sr_ledger_cost){(mean_and_bias ? 14 : 11) * NC + sums * NC,
                            es * ((add_dinp ? 4 : 3) * NC + (double)C) +
                                (add_dw ? 8 : 4) * (mean_and_bias ? 2 : 1) * (double)C +
                                sums * (add_sum ? 8 : 4) * (double)C + (mean_and_bias ? 8 : 4) * (double)N};
}

sr_ledger_cost sr_lc_gelu_backward(size_t n, int OC, int es, bool acc, bool dbias, bool add_bias) {
    /* inp and dout read, dinp written (and read: acc); with the bias: its
     * column sums of dinp written (and read: add_bias) in float, summed as
     * dinp is written (what bias_backward's read of dinp cost before) */
    return (sr_ledger_cost){16 * (double)n + (dbias ? (double)n : 0),
                            (double)es * (double)n * (acc ? 4 : 3) + (dbias ? (add_bias ? 8 : 4) * (double)OC : 0)};
}

sr_ledger_cost sr_lc_elementwise(size_t n, int es, int reads, int writes, double flops_per) {
    return (sr_ledger_cost){flops_per * (double)n, (double)es * (double)n * (reads + writes)};
}

sr_ledger_cost sr_lc_bias_backward(int N, int OC, int es, bool add) {
    double NO = (double)N * OC;
    return (sr_ledger_cost){NO, es * NO + (add ? 8 : 4) * (double)OC};
}

sr_ledger_cost sr_lc_softmax(long long rows, int T, int es, bool backward) {
    /* every row of T written (zeros above the diagonal); the causal half computed */
    double RT = (double)rows * T;
    return backward ? (sr_ledger_cost){4 * RT / 2, es * 3 * RT} : (sr_ledger_cost){5 * RT / 2, es * 2 * RT};
}

sr_ledger_cost sr_lc_gqa(int T, int NKV, int R, int hs, int es, bool reduce) {
    double kv = (double)T * NKV * hs, q = kv * R;
    /* expand: a sequence's heads read once, written R times; reduce: R
     * gradients read, the head's read and written */
    return reduce ? (sr_ledger_cost){q, es * (q + 2 * kv)} : (sr_ledger_cost){0, es * (kv + q)};
}

sr_ledger_cost sr_lc_crossentropy(int N, int V, int es, bool backward) {
    double NV = (double)N * V;
    /* forward: the logits read, a loss and a log-sum-exp per row written;
     * backward: the logits read and overwritten in place */
    return backward ? (sr_ledger_cost){3 * NV, es * 2 * NV + 4 * (double)N}
                    : (sr_ledger_cost){4 * NV, es * NV + 8 * (double)N};
}

sr_ledger_cost sr_lc_crossentropy_fused(int N, int V, int Vp, int es) {
    /* the logits read once (the row's later passes on chip) and the
     * gradient written over all Vp columns; the targets read, a loss and a
     * log-sum-exp per row written: the two-kernel form's 3 N V es less
     * N V es, less its separate forward pass */
    double NV = (double)N * V;
    return (sr_ledger_cost){7 * NV, es * (NV + (double)N * Vp) + 12 * (double)N};
}

sr_ledger_cost sr_lc_rope(int B, int T, int NH, int NKV, int hs, int es) {
    double x = (double)B * T * (NH + NKV) * hs;
    return (sr_ledger_cost){3 * x, es * 2 * x + 4 * (double)T * hs};
}

sr_ledger_cost sr_lc_swiglu(int N, int F, int es, int pass) {
    double NF = (double)N * F;
    /* pass 0, forward: gate and up read, out written; 1, the backward's
     * overwrite form: dout, gate and up read, both halves of dgu written;
     * 2, its += form: dgu's halves read as well */
    if (pass == 0)
        return (sr_ledger_cost){6 * NF, es * 3 * NF};
    return (sr_ledger_cost){10 * NF, es * (pass == 2 ? 7 : 5) * NF};
}

sr_ledger_cost sr_lc_adamw(size_t n, bool copy16) {
    /* parameter, gradient, m and v read; parameter, m and v written; float;
     * the bf16 copy written */
    return (sr_ledger_cost){15 * (double)n, (copy16 ? 30 : 28) * (double)n};
}

sr_ledger_cost sr_lc_tile_gemm(int M, int N, int K) {
    double m = M, n = N, k = K;
    return (sr_ledger_cost){2 * m * n * k, 2 * (m * k + n * k) + 4 * m * n};
}

sr_ledger_cost sr_lc_flash(int B, int T, int NH, int NKV, int hs, bool backward) {
    double pairs = (double)T * (T + 1) / 2, heads = (double)B * NH, rows = heads * T;
    double q = rows * hs * 2, kv = (double)B * T * NKV * hs * 2; /* bf16: queries (or outputs); keys (or values) */
    if (!backward)                                               /* q, k, v read; o and the LSE written */
        return (sr_ledger_cost){4 * pairs * hs * heads, 2 * q + 2 * kv + 4 * rows};
    /* each kernel's own traffic, every tensor once: rowdot_k reads dO and
     * O and writes D; dkv_k reads K, V, Q, dO, the LSE and D and writes
     * dK, dV; dq_k reads Q, dO, K, V, the LSE and D and writes dQ (the
     * backward assigns, ops.h: dqkv neither zeroed nor read) */
    return (sr_ledger_cost){14 * pairs * hs * heads + 2 * rows * hs, (2 * q + 4 * rows) +
                                                                         (2 * kv + 2 * q + 8 * rows + 2 * kv) +
                                                                         (2 * q + 2 * kv + 8 * rows + q)};
}

/* ---- the report ------------------------------------------------------------ */

double sr_ledger_roofline(sr_ledger *l, double gemm_tflops, double hbm_tbps) {
    double total = 0, peak = gemm_tflops * 1e12, bw = hbm_tbps * 1e12;
    for (int f = 0; f < SR_LF_COUNT; f++) {
        sr_ledger_row *r = &l->fam[f];
        bool gemm = f == SR_LF_GEMM_LINEAR || f == SR_LF_GEMM_ATTENTION;
        double t = f == SR_LF_COLLECTIVE ? 0 : bw > 0 ? r->bytes / bw : 0;
        if (gemm && peak > 0 && r->flops / peak > t)
            t = r->flops / peak;
        r->bound_s = t;
        total += t;
    }
    return total;
}

void sr_ledger_row_add(sr_ledger_row *to, const sr_ledger_row *r) {
    to->launches += r->launches;
    to->gemm_calls += r->gemm_calls;
    to->calls += r->calls;
    to->flops += r->flops;
    to->bytes += r->bytes;
    to->bound_s += r->bound_s;
    to->ms += r->ms;
}

sr_ledger_row sr_ledger_total(const sr_ledger *l) {
    sr_ledger_row t = {0};
    for (int f = 0; f < SR_LF_COUNT; f++)
        sr_ledger_row_add(&t, &l->fam[f]);
    return t;
}
