#!/usr/bin/env python3
"""check_export.py — the Python side of tests/hf.sh (run by the venv of
tests/hf/setup-venv.sh).

  check_export.py names EXPORT.safetensors MODEL.bin L NH C V T
      the safetensors package reads the export: exactly GPT2LMHeadModel's
      names (transformer. prefix, no lm_head), shapes (Conv1D [in, out],
      vocabulary unpadded), __metadata__ format pt, F32; and every value
      equals the llm.c model file of the same checkpoint (read with numpy,
      its [out, in] matrices transposed here)
  check_export.py transformers DIR TOKENS SHARDRUN_LOGITS
      GPT2LMHeadModel.from_pretrained(DIR) gives shardrun's logits on
      TOKENS (comma list) within 1e-4 of the largest logit
Prints one line; exits 0 when the check holds, 1 when it does not.
"""
import json
import struct
import sys

import numpy as np


def expected(L, NH, C, V, T):
    names = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
             "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for l in range(L):
        p = "transformer.h.%d." % l
        names.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                      p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                      p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                      p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                      p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                      p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    return names


def llmc(path, L, C, V, T):
    """The llm.c file's tensors under HF names, HF layouts."""
    raw = open(path, "rb").read()
    hdr = struct.unpack("<256i", raw[:1024])
    assert hdr[0] == 20240326 and hdr[1] == 3, hdr[:2]
    maxT, Vp = hdr[2], hdr[7]
    x = np.frombuffer(raw, dtype="<f4", offset=1024)
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        out = x[at:at + n].reshape(shape)
        at += n
        return out
    wte = take(Vp, C)[:V]
    wpe = take(maxT, C)[:T]
    block = {}
    for key, shape, conv in [("ln_1.weight", (C,), 0), ("ln_1.bias", (C,), 0),
                             ("attn.c_attn.weight", (3 * C, C), 1), ("attn.c_attn.bias", (3 * C,), 0),
                             ("attn.c_proj.weight", (C, C), 1), ("attn.c_proj.bias", (C,), 0),
                             ("ln_2.weight", (C,), 0), ("ln_2.bias", (C,), 0),
                             ("mlp.c_fc.weight", (4 * C, C), 1), ("mlp.c_fc.bias", (4 * C,), 0),
                             ("mlp.c_proj.weight", (C, 4 * C), 1), ("mlp.c_proj.bias", (C,), 0)]:
        for l in range(L):
            t = take(*shape)
            block["transformer.h.%d.%s" % (l, key)] = t.T if conv else t
    out = {"transformer.wte.weight": wte, "transformer.wpe.weight": wpe,
           "transformer.ln_f.weight": take(C), "transformer.ln_f.bias": take(C)}
    out.update(block)
    assert at == x.size, (at, x.size)
    return out


def names(args):
    path, binpath = args[0], args[1]
    L, NH, C, V, T = map(int, args[2:7])
    from safetensors import safe_open
    from safetensors.numpy import load_file
    got = load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    want = expected(L, NH, C, V, T)
    ref = llmc(binpath, L, C, V, T)
    bad = []
    if meta != {"format": "pt"}:
        bad.append("metadata %r" % meta)
    if set(got) != set(want):
        bad.append("names: extra %s, missing %s" % (sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5]))
    for k in sorted(set(got) & set(want)):
        if got[k].shape != want[k] or got[k].dtype != np.float32:
            bad.append("%s: %s %s, expected %s float32" % (k, got[k].shape, got[k].dtype, want[k]))
        elif not np.array_equal(got[k], ref[k]):
            bad.append("%s: values differ from the llm.c export (max %g)" % (k, np.abs(got[k] - ref[k]).max()))
    # the header: padded with spaces to a multiple of 8, no holes
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    ends = sorted((v["data_offsets"][0], v["data_offsets"][1]) for k, v in hdr.items() if k != "__metadata__")
    if n % 8 or raw[8 + n - 1:8 + n] not in (b"}", b" ") or ends[0][0] != 0 or ends[-1][1] != len(raw) - 8 - n or \
            any(a[1] != b[0] for a, b in zip(ends, ends[1:])):
        bad.append("header length %d or offsets not packed" % n)
    print("safetensors: %d tensors, %s" % (len(got), "; ".join(bad[:5]) if bad else "names, shapes and values as expected"))
    return 1 if bad else 0


def transformers_check(args):
    import torch
    from transformers import GPT2LMHeadModel
    d, tokens, srpath = args
    tok = [int(t) for t in tokens.split(",")]
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    with torch.no_grad():
        lg = model(torch.tensor([tok])).logits[0].double().numpy()
    sr = np.loadtxt(srpath, ndmin=2)
    if sr.shape != lg.shape:
        print("transformers: logits %s, shardrun %s" % (lg.shape, sr.shape))
        return 1
    rel = np.abs(lg - sr).max() / np.abs(lg).max()
    print("transformers %s: max |difference| / max |logit| = %.3g over %s logits" %
          (__import__("transformers").__version__, rel, lg.size))
    return 0 if rel <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(names(sys.argv[2:]) if sys.argv[1] == "names" else transformers_check(sys.argv[2:]))
