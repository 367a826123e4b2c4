#!/usr/bin/python3
"""bench_torch.py — the PyTorch eager row of bench/run.sh.

The same GPT-2 as shardrun (pre-LayerNorm, GELU-tanh MLP, tied head, padded
vocabulary masked out of the loss), float32, eager mode, the same batch (4
sequences of 256 tokens), the same step (forward, backward, global-norm
clipping, AdamW with decoupled weight decay).  Prints one RESULT line with
every timed step's ms (bench/run.sh computes median and spread).

usage: bench_torch.py MODEL THREADS STEPS   (MODEL: tiny | gpt2-124m)
Run with OMP_WAIT_POLICY=PASSIVE (PyTorch's best setting on 2 cores).
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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
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
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight[: self.V].T
        return F.cross_entropy(logits.view(-1, self.V), tgt.view(-1))


def main():
    model_name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    L, NH, C, V = DIMS[model_name]
    B, T = 4, 256
    model = GPT(L, NH, C, V, T)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    times = []
    for s in range(1 + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if s > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    setting = os.environ.get("SR_TORCH_SETTING", f"torch threads {threads}")
    print(f"RESULT impl=torch model={model_name} threads={threads} setting={setting.replace(' ', '~')} "
          f"torch={torch.__version__} ms=" + ",".join(f"{t:.3f}" for t in times))

if __name__ == "__main__":
    main()
