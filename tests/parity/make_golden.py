#!/usr/bin/python3
"""make_golden.py — computes the PyTorch golden values for test_parity.

An independent GPT-2 written directly in PyTorch (float64) reads the weights
and batch that shardrun exports (tests/parity_dump, see tests/parity.h for
the layout), computes the mean cross-entropy loss, the logits over the real
vocabulary and the gradient of the loss with respect to every parameter, and
writes golden.bin = state + results.  Run with Debian's python3-torch:

    ./tests/parity_dump /tmp/state.bin
    /usr/bin/python3 tests/parity/make_golden.py /tmp/state.bin tests/parity/golden.bin
"""
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_state(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"SRGOLD1\0", "not a shardrun parity state"
    L, NH, C, V, Vp, T, B, seed, n = struct.unpack_from("<9i", data, 8)
    off = 8 + 36
    params = np.frombuffer(data, "<f4", n, off).copy()
    off += 4 * n
    inputs = np.frombuffer(data, "<i4", B * T, off).copy()
    off += 4 * B * T
    targets = np.frombuffer(data, "<i4", B * T, off).copy()
    return dict(L=L, NH=NH, C=C, V=V, Vp=Vp, T=T, B=B, seed=seed, n=n), params, inputs, targets, data[: off + 4 * B * T]


def unpack(cfg, flat):
    """Views of the unit-major buffer: blocks, then the root (model.h)."""
    L, C, Vp, T = cfg["L"], cfg["C"], cfg["Vp"], cfg["T"]
    block = [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (3 * C, C)),
             ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
             ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (4 * C, C)),
             ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (C, 4 * C)), ("mlp.c_proj.bias", (C,))]
    root = [("wte.weight", (Vp, C)), ("wpe.weight", (T, C)), ("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    out, off = {}, 0
    for l in range(L):
        for name, shape in block:
            k = int(np.prod(shape))
            out[f"h.{l}.{name}"] = flat[off:off + k].view(*shape)
            off += k
    for name, shape in root:
        k = int(np.prod(shape))
        out[name] = flat[off:off + k].view(*shape)
        off += k
    assert off == flat.numel()
    return out


def gpt2(cfg, p, idx, tgt):
    L, NH, C, V, T = cfg["L"], cfg["NH"], cfg["C"], cfg["V"], cfg["T"]
    B = idx.shape[0]
    hs = C // NH
    x = p["wte.weight"][idx] + p["wpe.weight"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        q = lambda n: p[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), q("ln_1.weight"), q("ln_1.bias"), 1e-5)
        qkv = F.linear(h, q("attn.c_attn.weight"), q("attn.c_attn.bias"))
        qq, kk, vv = qkv.split(C, dim=2)
        qq = qq.view(B, T, NH, hs).transpose(1, 2)
        kk = kk.view(B, T, NH, hs).transpose(1, 2)
        vv = vv.view(B, T, NH, hs).transpose(1, 2)
        att = (qq @ kk.transpose(-2, -1)) / (hs ** 0.5)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ vv).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, q("attn.c_proj.weight"), q("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), q("ln_2.weight"), q("ln_2.bias"), 1e-5)
        h = F.gelu(F.linear(h, q("mlp.c_fc.weight"), q("mlp.c_fc.bias")), approximate="tanh")
        x = x + F.linear(h, q("mlp.c_proj.weight"), q("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte.weight"][:V].T          # tied head over the real vocabulary
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    return loss, logits


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_golden.py STATE.bin GOLDEN.bin")
    cfg, params, inputs, targets, state_bytes = read_state(sys.argv[1])
    flat = torch.tensor(params, dtype=torch.float64, requires_grad=True)
    p = unpack(cfg, flat)
    B, T = cfg["B"], cfg["T"]
    idx = torch.tensor(inputs, dtype=torch.long).view(B, T)
    tgt = torch.tensor(targets, dtype=torch.long).view(B, T)
    loss, logits = gpt2(cfg, p, idx, tgt)
    loss.backward()
    with open(sys.argv[2], "wb") as f:
        f.write(state_bytes)
        f.write(struct.pack("<d", loss.item()))
        f.write(logits.detach().numpy().astype("<f4").tobytes())
        f.write(flat.grad.numpy().astype("<f4").tobytes())
    print(f"golden: loss {loss.item():.9f}, {cfg['n']} parameters, torch {torch.__version__}")


if __name__ == "__main__":
    main()
