#!/usr/bin/env python3
"""primitives.py — writes the tables tests/test_primitives checks the
warp-level primitives of kernels/mma.cuh against (on the CUDA emulator in
CI, and on a GPU through test_kernels, bit for bit): each derived here from
NVIDIA's PTX ISA text alone, never from the emulator's code.

  mma_m16n8k16.txt  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32:
                    PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16
                    with floating point type" (the figures of A, B and C/D
                    for .bf16 / .f32): per lane its a0..a3, b0, b1, c0..c3
                    registers and the d0..d3 it must receive
  ldmatrix.txt      ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared
                    .b16: PTX ISA 9.7.14.5.15 (its fragment figure: lane l
                    holds row l >> 2, elements 2 (l % 4) and 2 (l % 4) + 1;
                    .trans the column-major read)
  shfl.txt          __shfl_sync / _up / _down / _xor and __ballot_sync (the
                    CUDA C++ Programming Guide's warp shuffle and vote
                    functions), per lane
  bf16x2.txt        two floats packed as bf16 rounded to nearest even, the
                    first in the low half (cvt.rn.bf16x2.f32's order)

Every value is an integer small enough that any order of the 16 products'
sum is exact in f32: the hardware's accumulation order (unspecified) and
the emulator's give the same bits.

usage: python3 tests/data/primitives.py [DIR]   (default: this file's folder)
"""
import os
import struct
import sys


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_rn(x):
    """The bf16 bits of float x, rounded to nearest even (x finite)."""
    u = f32_bits(x)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def mma_table():
    # A 16 x 16, B 16 x 8, C 16 x 8 (integers, exact as bf16 / f32)
    A = [[((r * 16 + k) % 13) - 6 for k in range(16)] for r in range(16)]
    B = [[((k * 8 + n) % 11) - 5 for n in range(8)] for k in range(16)]
    C = [[r - 2 * n for n in range(8)] for r in range(16)]
    D = [[C[r][n] + sum(A[r][k] * B[k][n] for k in range(16)) for n in range(8)] for r in range(16)]
    lines = [
        "# mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, PTX ISA 9.7.14.5.8 (Matrix Fragments for",
        "# mma.m16n8k16 with floating point type): groupID = lane >> 2, threadID_in_group = lane % 4;",
        "# A: a_i at row groupID for 0 <= i < 2 || 4 <= i < 6, else groupID + 8; col 2 threadID_in_group",
        "#    + (i & 1), + 8 for i >= 4; two per register, the lower i in the low half",
        "# B: b_i at row 2 threadID_in_group + (i & 1), + 8 for i >= 2; col groupID",
        "# C, D: c_i at row groupID for i < 2, else groupID + 8; col 2 threadID_in_group + (i & 1)",
        "# A[r][k] = (16 r + k) % 13 - 6, B[k][n] = (8 k + n) % 11 - 5, C[r][n] = r - 2 n; D = A B + C",
        "# lane a0 a1 a2 a3 b0 b1 c0 c1 c2 c3 d0 d1 d2 d3 (a, b: bf16 pairs; c, d: f32 bits; hex)",
    ]
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        a = []
        for i in range(8):
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
            a.append(bf16_rn(A[row][col]))
        b = []
        for i in range(4):
            row = 2 * t + (i & 1) + (8 if i >= 2 else 0)
            b.append(bf16_rn(B[row][g]))
        c, d = [], []
        for i in range(4):
            row = g if i < 2 else g + 8
            col = 2 * t + (i & 1)
            c.append(f32_bits(C[row][col]))
            d.append(f32_bits(D[row][col]))
        regs = [a[2 * j] | a[2 * j + 1] << 16 for j in range(4)] + [b[2 * j] | b[2 * j + 1] << 16 for j in range(2)]
        lines.append(" ".join([str(lane)] + ["0x%08x" % v for v in regs + c + d]))
    return lines


def ldmatrix_table():
    # matrix m, row r, column c: the 16-bit value 0x100 m + 0x10 r + c
    M = [[[0x100 * m + 0x10 * r + c for c in range(8)] for r in range(8)] for m in range(4)]
    lines = [
        "# ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16, PTX ISA 9.7.14.5.15: lanes 0..8N-1 give the",
        "# rows of matrices 0..N-1 (lane l: row l % 8 of matrix l / 8); lane l receives in register m",
        "# matrix m's (l >> 2, 2 (l % 4)) and (l >> 2, 2 (l % 4) + 1), low half first; .trans: the",
        "# transpose's, (2 (l % 4), l >> 2) and (2 (l % 4) + 1, l >> 2)",
        "# matrix m, row r, column c holds 0x100 m + 0x10 r + c",
        "# N trans lane r0 .. r(N-1) (hex)",
    ]
    for n in (1, 2, 4):
        for trans in (0, 1):
            for lane in range(32):
                regs = []
                for m in range(n):
                    h = []
                    for k in range(2):
                        if trans:
                            h.append(M[m][2 * (lane % 4) + k][lane >> 2])
                        else:
                            h.append(M[m][lane >> 2][2 * (lane % 4) + k])
                    regs.append(h[0] | h[1] << 16)
                lines.append(" ".join([str(n), str(trans), str(lane)] + ["0x%08x" % v for v in regs]))
    return lines


# (kind, mask, argument, lanes that execute it): every lane's input is 3 lane + 1
SHUFFLES = [
    ("xor", 0xFFFFFFFF, 5, 32),
    ("idx", 0xFFFFFFFF, 7, 32),
    ("up", 0xFFFFFFFF, 3, 32),
    ("down", 0xFFFFFFFF, 2, 32),
    ("xor", 0x0000FFFF, 4, 16),
    ("idx", 0x0000FFFF, 13, 16),
    ("ballot", 0xFFFFFFFF, 3, 32),
]


def shfl_table():
    lines = [
        "# warp shuffles and votes (CUDA C++ Programming Guide, Warp Shuffle Functions and Warp Vote",
        "# Functions): lane l's input is 3 l + 1; xor reads lane l ^ arg, idx lane arg, up lane l - arg",
        "# and down lane l + arg (the own input when that leaves the warp); ballot(pred: l % arg == 0)",
        "# sets bit l for every lane of the mask with pred true; lanes at or past `active` do not execute",
        "# kind mask arg active lane out (hex; lanes past active: none)",
    ]
    for kind, mask, arg, active in SHUFFLES:
        v = [3 * l + 1 for l in range(32)]
        for lane in range(active):
            if kind == "xor":
                out = v[lane ^ arg]
            elif kind == "idx":
                out = v[arg]
            elif kind == "up":
                out = v[lane - arg] if lane - arg >= 0 else v[lane]
            elif kind == "down":
                out = v[lane + arg] if lane + arg < 32 else v[lane]
            else:
                out = sum(1 << l for l in range(32) if (mask >> l & 1) and l % arg == 0)
            lines.append("%s 0x%08x %d %d %d 0x%08x" % (kind, mask, arg, active, lane, out))
    return lines


PACKS = [(1.0, -2.0), (1.00390625, 1.01171875), (3.0, 0.1), (65504.0, -1e-3), (-0.0, 1.5e-40), (3.4e38, 2.5)]


def bf16x2_table():
    lines = [
        "# two floats as bf16 rounded to nearest even in one register, the first in the low half",
        "# (1.00390625 and 1.01171875 are ties: to the even bf16)",
        "# lo hi packed (f32 bits, f32 bits, bf16x2; hex)",
    ]
    for lo, hi in PACKS:
        lines.append("0x%08x 0x%08x 0x%08x" % (f32_bits(lo), f32_bits(hi), bf16_rn(lo) | bf16_rn(hi) << 16))
    return lines


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, lines in (("mma_m16n8k16.txt", mma_table()), ("ldmatrix.txt", ldmatrix_table()),
                        ("shfl.txt", shfl_table()), ("bf16x2.txt", bf16x2_table())):
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
