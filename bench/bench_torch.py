#!/usr/bin/python3
"""bench_torch.py — the PyTorch eager row of bench/run.sh.

The same models as shardrun — GPT-2 (pre-LayerNorm, GELU-tanh MLP, tied
head) and Llama (pre-RMSNorm, rotary positions, grouped-query attention,
SwiGLU, no biases, tied or untied head), the padded vocabulary masked out of
the loss — float32, eager mode, the same batch (4
sequences of 256 tokens), the same step (forward, backward, global-norm
clipping, AdamW with decoupled weight decay).  Prints one RESULT line with
every timed step's ms (bench/run.sh computes median and spread).

usage: bench_torch.py MODEL THREADS STEPS [--device cuda] [--bf16] [--batch B] [--seq T]
(MODEL: tiny | gpt2-124m | llama-tiny | llama-125m).  Run with OMP_WAIT_POLICY=PASSIVE (PyTorch's
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
# the Llama presets: (L, NH, C, V, NKV, F, tied)
LLAMA = {"llama-tiny": (4, 4, 256, 256, 2, 704, True), "llama-125m": (12, 12, 768, 32000, 4, 2048, False)}


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


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaBlock(nn.Module):
    """shardrun's Llama block as transformers' LlamaDecoderLayer computes it:
    pre-RMSNorm, rotary queries and keys (rotate-half), grouped-query
    attention, SwiGLU, no biases."""

    def __init__(self, C, NH, NKV, F):
        super().__init__()
        self.NH, self.NKV, self.hs = NH, NKV, C // NH
        self.input_layernorm = RMSNorm(C)
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, NKV * self.hs, bias=False)
        self.v_proj = nn.Linear(C, NKV * self.hs, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C)
        self.gate_proj = nn.Linear(C, F, bias=False)
        self.up_proj = nn.Linear(C, F, bias=False)
        self.down_proj = nn.Linear(F, C, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.NH, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.NKV, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.NKV, self.hs).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.NH // self.NKV, dim=1)
        v = v.repeat_interleave(self.NH // self.NKV, dim=1)
        if x.is_cuda:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
            y = att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, L, NH, C, V, NKV, Fd, tied, T, theta=10000.0):
        super().__init__()
        self.V, self.Vp = V, (V + 63) // 64 * 64
        self.embed_tokens = nn.Embedding(self.Vp, C)
        self.layers = nn.ModuleList(LlamaBlock(C, NH, NKV, Fd) for _ in range(L))
        self.norm = RMSNorm(C)
        self.lm_head = None if tied else nn.Linear(C, self.Vp, bias=False)
        hs = C // NH
        inv = 1.0 / (theta ** (torch.arange(0, hs, 2).float() / hs))
        ang = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", ~torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, idx, tgt):
        x = self.embed_tokens(idx)
        for b in self.layers:
            x = b(x, self.mask, self.cos, self.sin)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = self.norm(x) @ head[: self.V].T
        return F.cross_entropy(logits.view(-1, self.V), tgt.view(-1))


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    model_name, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    device = option("--device", "cpu")
    bf16 = "--bf16" in sys.argv
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, T = int(option("--batch", 4)), int(option("--seq", 256))
    if model_name in LLAMA:
        L, NH, C, V, NKV, Fd, tied = LLAMA[model_name]
        model = Llama(L, NH, C, V, NKV, Fd, tied, T).to(device)
    else:
        L, NH, C, V = DIMS[model_name]
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
    if device == "cuda":
        peak = f" peak_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}"
    else:  # the process's peak resident memory, as bench_train reports its own
        import resource
        peak = f" peak_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}"
    print(f"RESULT impl=torch model={model_name} threads={threads} setting={setting.replace(' ', '~')} "
          f"torch={torch.__version__} device={device} bf16={int(bf16)} batch={B} seq={T}{peak} ms="
          + ",".join(f"{t:.3f}" for t in times))


if __name__ == "__main__":
    main()
