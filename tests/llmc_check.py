#!/usr/bin/env python3
"""llmc_check.py — reads a model file the way llm.c's train_gpt2.c does
(gpt2_build_from_checkpoint: 256 x int32 header, magic 20240326, version 3,
then the fp32 tensors wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb, each over all layers)
and compares it with a shardrun parameter dump (SHARDRUN_TEST_DUMP_PARAMS,
format in src/fsdp.h: "SRPARAMS", int32 n, n x {char name[64], int64
numel}, floats in table order).  Exit 0 when every tensor is bitwise equal.

usage: llmc_check.py MODEL.bin PARAMS.dump
Standard library only, so any python3 runs it."""
import struct
import sys
from array import array


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"SRPARAMS", "not a parameter dump"
    (n,) = struct.unpack_from("<i", data, 8)
    off, table = 12, []
    for _ in range(n):
        name = data[off:off + 64].split(b"\0")[0].decode()
        (numel,) = struct.unpack_from("<q", data, off + 64)
        table.append((name, numel))
        off += 72
    tensors = {}
    for name, numel in table:
        a = array("f")
        a.frombytes(data[off:off + 4 * numel])
        tensors[name] = a
        off += 4 * numel
    return tensors


def main():
    model_path, dump_path = sys.argv[1], sys.argv[2]
    with open(model_path, "rb") as f:
        data = f.read()
    header = struct.unpack_from("<256i", data, 0)
    if header[0] != 20240326 or header[1] != 3:
        print("bad magic/version", header[:2])
        return 1
    maxT, V, L, NH, C, Vp = header[2:8]
    print(f"# llm.c header: max_seq_len {maxT} vocab {V} layers {L} heads {NH} channels {C} padded vocab {Vp}")
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln_1.weight", L * C), ("ln_1.bias", L * C),
             ("attn.c_attn.weight", L * 3 * C * C), ("attn.c_attn.bias", L * 3 * C),
             ("attn.c_proj.weight", L * C * C), ("attn.c_proj.bias", L * C),
             ("ln_2.weight", L * C), ("ln_2.bias", L * C), ("mlp.c_fc.weight", L * 4 * C * C),
             ("mlp.c_fc.bias", L * 4 * C), ("mlp.c_proj.weight", L * C * 4 * C), ("mlp.c_proj.bias", L * C),
             ("ln_f.weight", C), ("ln_f.bias", C)]
    total = sum(n for _, n in sizes)
    if len(data) != 1024 + 4 * total:
        print(f"file has {len(data)} bytes, llm.c expects {1024 + 4 * total}")
        return 1
    ref = read_dump(dump_path)
    off, bad = 1024, 0
    for name, n in sizes:
        got = array("f")
        got.frombytes(data[off:off + 4 * n])
        off += 4 * n
        if name in ("wte", "wpe", "ln_f.weight", "ln_f.bias"):
            want = ref[name if name.startswith("ln_f") else name + ".weight"]
        else:
            want = array("f")
            for layer in range(L):
                want.extend(ref[f"h.{layer}.{name}"])
        if got != want:
            print(f"{name}: differs")
            bad += 1
    print(f"# {len(sizes)} llm.c tensors compared, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
