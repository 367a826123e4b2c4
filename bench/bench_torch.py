#!/usr/bin/python3
"""bench_torch.py — the PyTorch eager row of bench/run.sh.

The same GPT-2 as shardrun (pre-LayerNorm, GELU-tanh MLP, tied head, padded
vocabulary masked out of the loss), float32, eager mode, the same batch (4
sequences of 256 tokens), the same step (forward, backward, global-norm
clipping, AdamW with decoupled weight decay).  Prints one RESULT line with
every timed step's ms (bench/run.sh computes median and spread).

usage: bench_torch.py MODEL THREADS STEPS [--device cuda] [--bf16] [--batch B] [--seq T]
(MODEL: tiny | gpt2-124m).  Run with OMP_WAIT_POLICY=PASSIVE (PyTorch's
best setting on 2 cores).  With --device cuda (tests/gpu/check.sh's peer
row): the model on the GPU, scaled_dot_product_attention(is_causal=True),
fused AdamW, autocast to bf16 with --bf16, timed between
torch.cuda.synchronize() calls; the RESULT line adds the peak device
memory (torch.cuda.max_memory_allocated).
"""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DIMS = {"tiny": (4, 4, 256, 256), "gpt2-124m": (12, 12, 768, 50257)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if x.is_cuda:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, V, T):
        super().__init__()
        self.V, self.Vp = V, (V + 63) // 64 * 64
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", ~torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight[: self.V].T
        return F.cross_entropy(logits.view(-1, self.V), tgt.view(-1))


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    model_name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    device = option("--device", "cpu")
    bf16 = "--bf16" in sys.argv
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    L, NH, C, V = DIMS[model_name]
    B, T = int(option("--batch", 4)), int(option("--seq", 256))
    model = GPT(L, NH, C, V, T).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    extra = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    idx = torch.randint(0, V, (B, T), device=device)
    tgt = torch.randint(0, V, (B, T), device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    times = []
    warm = 3 if device == "cuda" else 1
    for s in range(warm + steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if s >= warm:
            times.append((time.perf_counter() - t0) * 1e3)
    setting = os.environ.get("SR_TORCH_SETTING", f"torch threads {threads}")
    peak = f" peak_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}" if device == "cuda" else ""
    print(f"RESULT impl=torch model={model_name} threads={threads} setting={setting.replace(' ', '~')} "
          f"torch={torch.__version__} device={device} bf16={int(bf16)} batch={B} seq={T}{peak} ms="
          + ",".join(f"{t:.3f}" for t in times))


if __name__ == "__main__":
    main()
