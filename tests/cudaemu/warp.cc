/* warp.cc — the emulated warp-level operations: shuffles (idx, up, down,
 * xor), __ballot_sync, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
 * and ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16, as NVIDIA's
 * PTX ISA states them (kernels/mma.cuh is what kernels call).
 *
 * Every one is a post and a wait of one pass (grid.cc): each lane posts
 * its operands in its slot (the parity of its count of warp-level
 * operations) and waits; every lane of the warp that executes the
 * operation posts in the same pass, so after the wait each lane reads the
 * others' operands and computes its own result.  A shuffle or vote
 * concerns the lanes of its mask; mma and ldmatrix are .sync.aligned:
 * all 32 lanes must arrive at the same operation with the same qualifiers,
 * and a lane that exited, waits elsewhere or executes another operation
 * is reported naming the warp and the lane (on hardware: undefined).
 *
 * mma.m16n8k16 (PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16
 * with floating point type"): groupID = lane >> 2, threadID_in_group =
 * lane % 4; A's a0..a7 (two per 32-bit register, a0 in the low half) at
 * row groupID (a0, a1, a4, a5) or groupID + 8, column 2 threadID_in_group
 * + (i & 1), + 8 for a4..a7; B's b0..b3 at row 2 threadID_in_group + (i &
 * 1), + 8 for b2, b3, column groupID; C's and D's c0..c3 at row groupID
 * (c0, c1) or groupID + 8, column 2 threadID_in_group + (i & 1).  A
 * product of two bf16 is exact in f32; the emulator adds the 16 products
 * of a dot product to C in k order, each addition rounded to f32 (to
 * nearest even): the hardware's order is not specified, so results agree
 * with a GPU exactly where every partial sum is exact (tests/data's
 * integer tables), and to the accumulation's rounding elsewhere.
 *
 * ldmatrix (9.7.14.5.15): lanes 0..8N-1 give the addresses of the rows of
 * matrices 0..N-1 (lane l: row l % 8 of matrix l / 8; 16-byte aligned, in
 * shared memory); lane l receives in register m matrix m's elements
 * (l >> 2, 2 (l % 4)) and (l >> 2, 2 (l % 4) + 1), low half first; with
 * .trans those of the transpose: (2 (l % 4), l >> 2) and (2 (l % 4) + 1,
 * l >> 2).  Its reads go through the shared-memory race detector, as the
 * lane's own.
 *
 * The mutation suite's warp-level mutations (cudaemu.h): frag_off_by_one
 * (the A fragment of lane l read as lane l + 1's: a fragment index off by
 * one), drop_trans (ldmatrix .trans ignored). */
#include "grid_impl.h"

#include <cstring>

using namespace cudaemu_grid;

namespace {

/* The tags of the operations (slot.op): a shuffle's kind + 1, a vote, an
 * mma, an ldmatrix with its count and .trans. */
enum { OP_SHFL = 0x100, OP_BALLOT = 0x200, OP_MMA = 0x300, OP_LDM = 0x400 };

const char *op_name(int op) {
    /* constant strings: a shuffle asks for its name on every call, and
     * formatting it there once took half an emulated step */
    static const char *const shfl[] = {"__shfl_xor_sync", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync"};
    static const char *const ldm[] = {
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16",       "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",       "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"};
    if ((op & 0xf00) == OP_SHFL)
        return shfl[op & 3];
    if (op == OP_BALLOT)
        return "__ballot_sync";
    if (op == OP_MMA)
        return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    if ((op & 0xf00) == OP_LDM) {
        int x = op & 7;
        if (x == 1 || x == 2 || x == 4)
            return ldm[(x == 4 ? 2 : x - 1) + (op & 8 ? 3 : 0)];
    }
    return "a warp-level operation";
}

/* Posts the running lane's operands for `op` and waits one pass; returns
 * the operation's count. */
unsigned post(runner *r, int op, uint64_t val, const void *pay, size_t n) {
    int i = r->cur;
    fiber &f = r->f[i];
    unsigned g = f.shfl++, p = g & 1u;
    slot &s = r->slots[p][i];
    s.gen = g;
    s.op = op;
    s.val = val;
    if (pay)
        memcpy(s.pay, pay, n);
    wait(r);
    return g;
}

/* Whether lane j (of the block) is at operation count g with `op`, and
 * why not when it is not (into why[n]). */
bool at_op(const runner *r, int j, unsigned g, int op, char *why, size_t n) {
    if (j >= r->n) {
        snprintf(why, n, "does not exist (the block has %d threads)", r->n);
        return false;
    }
    /* (a lane that posted may have run on and exited since: its post stays) */
    const slot &s = r->slots[g & 1u][j];
    if (s.gen != g) {
        snprintf(why, n, "is not at it (it exited, or waits at another warp-level operation or a __syncthreads)");
        return false;
    }
    if (s.op != op) {
        snprintf(why, n, "executes %s there, this lane %s", op_name(s.op), op_name(op));
        return false;
    }
    return true;
}

/* The .sync.aligned rule: every lane of the running lane's warp is at this
 * operation (else a report naming the warp and the lane). */
/* Every lane of the calling thread's warp is at operation `op` of count
 * g, or a fault.  The warp's first lane past it checks (and returns true:
 * it computes what the warp shares); the others find it checked. */
bool all_lanes(runner *r, unsigned g, int op) {
    int w0 = r->cur & ~31;
    warp_done &w = r->wd[(size_t)w0 / 32];
    if (w.gen == g && w.op == op)
        return false;
    char why[256];
    for (int j = w0; j < w0 + 32; j++)
        if (!at_op(r, j, g, op, why, sizeof why))
            fault("%s of warp %d: lane %d %s; every lane of the warp must execute the same one (.sync.aligned)",
                  op_name(op), w0 / 32, j - w0, why);
    w.gen = g;
    w.op = op;
    return true;
}

float bf16_at(const uint32_t *regs, int i) {
    uint32_t u = regs[i / 2] >> (16 * (i % 2)) & 0xffffu;
    u <<= 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

} // namespace

extern "C" uint64_t cudaemu_shfl_bits(int kind, unsigned mask, uint64_t bits, int arg) {
    runner *r = me;
    if (r->l->narrow)
        mask &= 0x0000ffffu; /* CUDAEMU_MUTATE narrow_mask */
    int i = r->cur;
    unsigned lane = (unsigned)i & 31u;
    int op = OP_SHFL | (kind & 3);
    const char *name = op_name(op);
    if (!(mask >> lane & 1u))
        fault("%s with mask 0x%08x, which omits lane %u: this lane executes the shuffle", name, mask, lane);
    unsigned g = post(r, op, bits, nullptr, 0);
    /* the lane read: xor lane ^ arg; idx arg % 32; up lane - arg and down
     * lane + arg, the own value when that leaves the warp */
    int src;
    switch (kind) {
    case CUDAEMU_SHFL_IDX:
        src = arg & 31;
        break;
    case CUDAEMU_SHFL_UP:
        src = (int)lane - arg;
        break;
    case CUDAEMU_SHFL_DOWN:
        src = (int)lane + arg;
        break;
    default:
        src = (int)lane ^ (arg & 31);
        break;
    }
    if (src < 0 || src > 31)
        return bits;
    int j = (i & ~31) | src;
    if (!(mask >> src & 1u))
        fault("%s (mask 0x%08x, %s %d): lane %u reads lane %d, outside the mask", name, mask,
              kind == CUDAEMU_SHFL_XOR   ? "lane mask"
              : kind == CUDAEMU_SHFL_IDX ? "source lane"
                                         : "delta",
              arg, lane, src);
    char why[256];
    if (!at_op(r, j, g, op, why, sizeof why))
        fault("%s (mask 0x%08x, %s %d): lane %u reads lane %d, which is inactive: it %s", name, mask,
              kind == CUDAEMU_SHFL_XOR   ? "lane mask"
              : kind == CUDAEMU_SHFL_IDX ? "source lane"
                                         : "delta",
              arg, lane, src, why);
    return r->slots[g & 1u][j].val;
}

extern "C" unsigned cudaemu_ballot(unsigned mask, int pred) {
    runner *r = me;
    int i = r->cur, w0 = i & ~31;
    unsigned lane = (unsigned)i & 31u;
    if (!(mask >> lane & 1u))
        fault("__ballot_sync with mask 0x%08x, which omits lane %u: this lane executes the vote", mask, lane);
    unsigned g = post(r, OP_BALLOT, pred != 0, nullptr, 0);
    unsigned out = 0;
    char why[256];
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        if (!at_op(r, w0 + l, g, OP_BALLOT, why, sizeof why))
            fault("__ballot_sync (mask 0x%08x) of warp %d: lane %d of the mask %s; every lane the mask names must "
                  "execute it",
                  mask, w0 / 32, l, why);
        if (r->slots[g & 1u][w0 + l].val)
            out |= 1u << l;
    }
    return out;
}

extern "C" void cudaemu_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    runner *r = me;
    uint32_t ops[10];
    memcpy(ops, a, 16);
    memcpy(ops + 4, b, 8);
    memcpy(ops + 6, c, 16);
    unsigned g = post(r, OP_MMA, 0, ops, sizeof ops);
    int w0 = r->cur & ~31, lane = r->cur & 31;
    warp_done &w = r->wd[(size_t)w0 / 32];
    if (all_lanes(r, g, OP_MMA)) { /* the warp's first lane computes every lane's D */
        const std::vector<slot> &sl = r->slots[g & 1u];
        int off = r->l->frag_off ? 1 : 0; /* CUDAEMU_MUTATE frag_off_by_one */
        /* A(row, k): lane (row % 8) * 4 + (k % 8) / 2, element 4 (k >= 8) + 2
         * (row >= 8) + k % 2; B(k, col): lane col * 4 + (k % 8) / 2, element
         * 2 (k >= 8) + k % 2 */
        float A[16][16], Bm[16][8];
        for (int row = 0; row < 16; row++)
            for (int k = 0; k < 16; k++)
                A[row][k] = bf16_at(sl[w0 + (((row % 8) * 4 + (k % 8) / 2 + off) & 31)].pay,
                                    4 * (k >= 8) + 2 * (row >= 8) + (k & 1));
        for (int k = 0; k < 16; k++)
            for (int col = 0; col < 8; col++)
                Bm[k][col] = bf16_at(sl[w0 + col * 4 + (k % 8) / 2].pay + 4, 2 * (k >= 8) + (k & 1));
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 4; e++) {
                int row = (l >> 2) + (e >= 2 ? 8 : 0), col = 2 * (l & 3) + (e & 1);
                float acc;
                memcpy(&acc, &sl[w0 + l].pay[6 + e], sizeof acc);
                for (int k = 0; k < 16; k++)
                    acc = acc + A[row][k] * Bm[k][col]; /* the product exact, each addition rounded */
                w.d[l][e] = acc;
            }
    }
    memcpy(d, w.d[lane], 4 * sizeof(float));
}

extern "C" void cudaemu_ldmatrix(uint32_t *regs, int n, int trans, const void *row) {
    runner *r = me;
    if (r->l->drop_trans)
        trans = 0; /* CUDAEMU_MUTATE drop_trans */
    int op = OP_LDM | n | (trans ? 8 : 0);
    uint64_t addr = (uint64_t)(uintptr_t)row;
    unsigned g = post(r, op, addr, nullptr, 0);
    all_lanes(r, g, op);
    const std::vector<slot> &sl = r->slots[g & 1u];
    int w0 = r->cur & ~31, lane = r->cur & 31;
    const char *name = op_name(op);
    /* the rows the lanes give: 16-byte aligned, 16 bytes in shared memory */
    for (int l = 0; l < 8 * n; l++) {
        const char *p = (const char *)(uintptr_t)sl[w0 + l].val;
        if ((uintptr_t)p % 16 != 0)
            fault("%s of warp %d: lane %d gives row address %p, not 16-byte aligned (each row of 8 16-bit elements "
                  "is)",
                  name, w0 / 32, l, (const void *)p);
        if (!smem_holds(r, p, 16))
            fault("%s of warp %d: lane %d gives row address %p, outside the block's shared memory", name, w0 / 32, l,
                  (const void *)p);
    }
    for (int m = 0; m < n; m++) {
        uint16_t h[2];
        for (int k = 0; k < 2; k++) {
            /* element (lane >> 2, 2 (lane % 4) + k), or the transpose's */
            int rr = trans ? 2 * (lane % 4) + k : lane >> 2, cc = trans ? lane >> 2 : 2 * (lane % 4) + k;
            const char *p = (const char *)(uintptr_t)sl[w0 + 8 * m + rr].val + 2 * cc;
            cudaemu_shared_access(p, 2, 0, "ldmatrix's rows");
            memcpy(&h[k], p, 2);
        }
        regs[m] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    }
}
