#!/usr/bin/python3
"""oracle.py — one training step of shardrun against an independent PyTorch GPT-2.

tests/gpu/check.sh's `oracle` stage runs shardrun for one step with
SHARDRUN_TEST_ORACLE=DIR (the batch, a logits row, the full gradient and the
step's constants: src/train.c) and SHARDRUN_TEST_DUMP_PARAMS=DIR/after.params,
from initial weights it exported as safetensors.  This script loads the same
weights into bench/bench_torch.py's GPT (read with json and struct alone: no
safetensors package), feeds it the same batch and takes the same step:
TF32 off, the math attention in exact mode, global-norm clipping at
grad_clip, AdamW with weight decay on the tensors of 2+ dimensions (the
step.json's list must say the same).  In bf16 mode the reference computes in
float32 on the bf16-rounded weights (what shardrun's gathered parameters
are) and updates the float32 master.

Compared, with the tolerances of doc/ARCHITECTURE.md §3c:
  loss                       relative          1e-5 exact / 1e-2 bf16
  one logits row             max|d| / max|ref| 1e-4       / 2e-2
  gradients, per tensor      max|d| / max|ref| 1e-4       / 5e-2
  parameters after the step  relative L2 per tensor <= 1e-3 (exact mode;
                             never element by element: Adam turns gradient
                             noise near 0 into +-lr)
A run with flash attention (step.json's attention: flash) is checked
against PyTorch's own fused attention in bf16: scaled_dot_product_attention
on bf16 queries, keys and values, the backend named in the summary (the
first of flash, efficient and math that runs here; a torch without
torch.nn.attention uses its default, and one without the function the math
attention on the bf16-rounded inputs, said so).

Each DIR holds one run's files (SHARDRUN_TEST_ORACLE, with init.safetensors
and after.params); its step.json's param_dtype picks the mode (fp32: exact,
bf16: bf16).  Prints one line per check ("ok ..." / "FAIL ...") and a
summary line per DIR ("oracle DIR (mode, device): N of M checks hold;
loss .., logits .., grads .., params ..", after "oracle-attention DIR: ..."
naming the backend for a flash run); exit 0 when every check of every
DIR holds, 1 when one does not, 2 on bad input.

usage: oracle.py [--device cuda|cpu] DIR...
"""
import contextlib
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_torch import GPT  # noqa: E402  (the same model as the PyTorch rows of the benchmarks)

TOL = {"exact": dict(loss=1e-5, logits=1e-4, grads=1e-4, params=1e-3),
       "bf16": dict(loss=1e-2, logits=2e-2, grads=5e-2, params=None)}


def die(msg):
    print(f"oracle: {msg}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    """{name: float32 tensor} from a safetensors file of F32 tensors."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            die(f"{path}: not a safetensors file")
        (hlen,) = struct.unpack("<Q", head)
        header = json.loads(f.read(hlen))
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            die(f"{path}: {name} is {e['dtype']}, expected F32")
        a, b = e["data_offsets"]
        t = np.fromfile(path, dtype="<f4", count=(b - a) // 4, offset=8 + hlen + a)
        out[name] = torch.from_numpy(t).reshape(e["shape"])
    return out


def read_params(path):
    """{name: flat float32 tensor} from a shardrun parameter or gradient dump."""
    with open(path, "rb") as f:
        head = f.read(12)
        if head[:8] != b"SRPARAMS":
            die(f"{path}: not a shardrun parameter dump")
        (n,) = struct.unpack_from("<i", head, 8)
        table = f.read(72 * n)
    names = []
    for i in range(n):
        name = table[72 * i:72 * i + 64].split(b"\0")[0].decode()
        (numel,) = struct.unpack_from("<q", table, 72 * i + 64)
        names.append((name, numel))
    flat = torch.from_numpy(np.fromfile(path, dtype="<f4", offset=12 + 72 * n))
    out, at = {}, 0
    for name, numel in names:
        out[name] = flat[at:at + numel]
        at += numel
    return out


def module_param(model, name):
    """The model's parameter for a shardrun tensor name (h.3.attn.c_attn.weight ...)."""
    parts = name.split(".")
    if parts[0] == "h":
        blk = model.h[int(parts[1])]
        rest = ".".join(parts[2:])
        mod = {"ln_1": blk.ln_1, "attn.c_attn": blk.c_attn, "attn.c_proj": blk.c_proj, "ln_2": blk.ln_2,
               "mlp.c_fc": blk.c_fc, "mlp.c_proj": blk.mlp_proj}[rest.rsplit(".", 1)[0]]
        return getattr(mod, rest.rsplit(".", 1)[1])
    return getattr({"wte": model.wte, "wpe": model.wpe, "ln_f": model.ln_f}[parts[0]], parts[1])


def load_init(model, st, V):
    """The Hugging Face GPT-2 names and layouts (Conv1D weights [in, out]) into the model."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for hf, t in st.items():
            name = hf[len("transformer."):] if hf.startswith("transformer.") else hf
            p = module_param(model, name)
            if name == "wte.weight":
                p[:V].copy_(t)
            elif t.dim() == 2 and name.startswith("h."):
                p.copy_(t.t())
            else:
                p.copy_(t.reshape(p.shape))


def max_rel(got, ref):
    d = (got.double() - ref.double()).abs().max().item()
    m = ref.double().abs().max().item()
    return d / m if m > 0 else d


def main():
    args = sys.argv[1:]
    device = "cpu"
    if args[:1] == ["--device"]:
        if len(args) < 2 or args[1] not in ("cuda", "cpu"):
            die("--device: expected cuda or cpu")
        device, args = args[1], args[2:]
    if not args:
        die("usage: oracle.py [--device cuda|cpu] DIR...")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    ok = [one(d, device) for d in args]
    sys.exit(0 if all(ok) else 1)


def sdpa_bf16(q, k, v):
    """Causal attention in bf16 through PyTorch's SDPA; its output in float32
    and the backend's name."""
    qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
    F = torch.nn.functional
    if not hasattr(F, "scaled_dot_product_attention"):
        T, hs = q.shape[-2], q.shape[-1]
        att = (qb.float() @ kb.float().transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        y = att.masked_fill(mask, float("-inf")).softmax(dim=-1).to(torch.bfloat16).float() @ vb.float()
        return y, "math on bf16 inputs (this torch has no scaled_dot_product_attention)"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True).float(), "this torch's default SDPA"
    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True).float(), f"SDPA {b.name.lower()}"
        except RuntimeError:
            continue
    die("no SDPA backend runs bf16 attention here")


def flash_block(blk, x, used):
    """bench_torch.py's Block.forward with its attention in bf16 through SDPA
    (the reference of shardrun's flash attention); `used` gets the backend."""
    B, T, C = x.shape
    q, k, v = blk.c_attn(blk.ln_1(x)).split(C, dim=2)
    q, k, v = (t.view(B, T, blk.NH, C // blk.NH).transpose(1, 2) for t in (q, k, v))
    y, used[0] = sdpa_bf16(q, k, v)
    x = x + blk.c_proj(y.transpose(1, 2).reshape(B, T, C))
    return x + blk.mlp_proj(torch.nn.functional.gelu(blk.c_fc(blk.ln_2(x)), approximate="tanh"))


def one(d, device):
    """The checks of one run's DIR; whether they all hold."""
    init = os.path.join(d, "init.safetensors")
    with open(os.path.join(d, "step.json")) as f:
        s = json.load(f)
    mode = "exact" if s["param_dtype"] == "fp32" else "bf16"
    tol = TOL[mode]
    L, NH, C, V, T, B = s["L"], s["NH"], s["C"], s["V"], s["T"], s["B"]
    batch = torch.from_numpy(np.fromfile(os.path.join(d, "batch.bin"), dtype="<i4"))
    if batch.numel() != 2 * B * T:
        die(f"batch.bin holds {batch.numel()} tokens, expected {2 * B * T}")
    idx = batch[:B * T].reshape(B, T).long().to(device)
    tgt = batch[B * T:].reshape(B, T).long().to(device)

    model = GPT(L, NH, C, V, T)
    if model.Vp != s["Vp"]:
        die(f"padded vocabulary {model.Vp} here, {s['Vp']} in shardrun")
    load_init(model, read_safetensors(init), V)
    model = model.to(device)
    names = [n for n, _ in read_params(os.path.join(d, "grads.params")).items()]
    params = {n: module_param(model, n) for n in names}
    decay = {n for n, p in params.items() if p.dim() >= 2}
    if decay != set(s["decay"]):
        die(f"shardrun decays {sorted(set(s['decay']) ^ decay)} differently from the 2+ dimension rule")
    master = {n: p.detach().clone() for n, p in params.items()}
    if mode == "bf16":  # the forward sees the bf16-rounded weights
        with torch.no_grad():
            for p in params.values():
                p.copy_(p.to(torch.bfloat16).float())

    # forward and backward: the model's own modules, the logits kept
    # (on the CPU the model's attention is the math one already; an older
    # torch without torch.nn.attention runs here only on the CPU)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        attention = sdpa_kernel([SDPBackend.MATH] if mode == "exact" else
                                [SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION])
    except ImportError:
        if device != "cpu":
            die("this torch has no torch.nn.attention.sdpa_kernel to pick the math attention on the GPU")
        attention = contextlib.nullcontext()
    flash = s.get("attention") == "flash"
    used = ["the model's own attention"]
    with attention:
        x = model.wte(idx) + model.wpe(torch.arange(T, device=device))
        for blk in model.h:
            x = flash_block(blk, x, used) if flash else blk(x, model.mask)
        logits = model.ln_f(x) @ model.wte.weight[:V].T
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
        loss.backward()

    results, short = [], []

    def report(what, value, limit, note="", key=""):
        ok = limit is None or value <= limit
        results.append(ok)
        bound = "reported" if limit is None else f"<= {limit:g}"
        print(f"{'ok' if ok else 'FAIL'} {what}: {value:.3e} ({bound}){note}")
        if key:
            short.append(f"{key} {value:.1e}{'' if ok else ' FAIL'}")

    report("loss, relative", abs(s["loss"] - loss.item()) / abs(loss.item()), tol["loss"],
           f"; shardrun {s['loss']:.7f}, PyTorch {loss.item():.7f}", "loss")
    row = torch.from_numpy(np.fromfile(os.path.join(d, "logits.bin"), dtype="<f4"))
    report("logits of sequence 0, position T-1, max-relative", max_rel(row, logits[0, T - 1].detach().cpu()),
           tol["logits"], key="logits")
    grads = read_params(os.path.join(d, "grads.params"))
    worst, worst_name = 0.0, ""
    for n, g in grads.items():
        ref = params[n].grad.detach().cpu().reshape(-1)
        if n == "wte.weight":  # the padded rows: zero in both
            ref = torch.cat([ref, torch.zeros(g.numel() - ref.numel())]) if ref.numel() < g.numel() else ref
        r = max_rel(g, ref)
        if not r <= worst:
            worst, worst_name = r, n
    report(f"gradients, per tensor max-relative, worst of {len(grads)}", worst, tol["grads"], f" ({worst_name})",
           "grads")
    norm = math.sqrt(sum(p.grad.double().pow(2).sum().item() for p in params.values()))
    report("gradient norm, relative", abs(s["grad_norm"] - norm) / norm, tol["grads"])

    # the step: clip by the global norm, AdamW on the float32 master
    scale = s["grad_clip"] / norm if s["grad_clip"] > 0 and norm > s["grad_clip"] else 1.0
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(master[n])
            p.grad.mul_(scale)
    groups = [{"params": [params[n] for n in names if n in decay], "weight_decay": s["weight_decay"]},
              {"params": [params[n] for n in names if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"], foreach=False)
    opt.step()
    after = read_params(os.path.join(d, "after.params"))
    worst, worst_name, worst_upd = 0.0, "", 0.0
    for n, p in params.items():
        got, ref, before = after[n], p.detach().cpu().reshape(-1), master[n].cpu().reshape(-1)
        if got.numel() != ref.numel():
            got = got[:ref.numel()]
        r = (got.double() - ref.double()).norm().item() / max(ref.double().norm().item(), 1e-30)
        du = (ref.double() - before.double()).norm().item()
        u = (got.double() - ref.double()).norm().item() / du if du > 0 else 0.0
        worst_upd = max(worst_upd, u)
        if not r <= worst:
            worst, worst_name = r, n
    report("parameters after one AdamW step, relative L2 per tensor, worst", worst, tol["params"],
           f" ({worst_name}; the update itself differs by at most {worst_upd:.2e} of its L2 norm, reported)",
           "params")
    if flash:
        print(f"oracle-attention {d}: shardrun's flash attention against PyTorch's {used[0]}")
    print(f"oracle {d} ({mode}, {device}): {sum(results)} of {len(results)} checks hold; {', '.join(short)}")
    return all(results)


if __name__ == "__main__":
    main()
