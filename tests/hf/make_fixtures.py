#!/usr/bin/env python3
"""make_fixtures.py — the Hugging Face fixtures of tests/hf.sh.

Run with a Python that has torch, transformers and safetensors (the venv of
tests/hf/setup-venv.sh):  .venv-hf/bin/python tests/hf/make_fixtures.py tests/hf

It writes, from one seeded GPT2LMHeadModel (vocab 300, so the vocabulary is
padded by shardrun; n_positions 48, n_embd 48, n_layer 2, n_head 4) whose
every parameter is random — LayerNorm weights and biases included, and no
weight matrix symmetric, so a missing transpose of the square attn.c_proj
changes the logits:

  tiny/      save_pretrained's model.safetensors and config.json
             (transformer. prefix, no lm_head, F32)
  tiny/logits.txt   the model's logits on TOKENS (one row of 300 per token)
  hub/model.safetensors   the hub's style: names without the prefix, the
             causal-mask buffers h.N.attn.bias and h.N.attn.masked_bias,
             lm_head.weight equal to wte; weight matrices BF16, the rest F16
  hub/logits.txt    the logits of the model with those rounded weights
  tokens.txt        TOKENS
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

TOKENS = [5, 299, 17, 42, 256, 0, 128, 77, 3, 200, 150, 9, 64, 31, 250, 1]


def logits_of(model):
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits[0]


def write_logits(path, lg):
    with open(path, "w") as f:
        for row in lg.tolist():
            f.write(" ".join("%.9g" % v for v in row) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(20261202)
    cfg = GPT2Config(vocab_size=300, n_positions=48, n_embd=48, n_layer=2, n_head=4,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    tiny = os.path.join(out, "tiny")
    os.makedirs(tiny, exist_ok=True)
    model.save_pretrained(tiny, safe_serialization=True)
    gen = os.path.join(tiny, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    write_logits(os.path.join(tiny, "logits.txt"), logits_of(model))

    # the hub's style, with rounded weights
    sd = {}
    for name, p in model.transformer.state_dict().items():
        if name.endswith(".attn.bias") and p.dim() == 4:
            continue
        dt = torch.bfloat16 if p.dim() == 2 else torch.float16
        sd[name] = p.detach().to(dt).contiguous()
    n = cfg.n_positions
    for layer in range(cfg.n_layer):
        sd["h.%d.attn.bias" % layer] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        sd["h.%d.attn.masked_bias" % layer] = torch.tensor(-1e4)
    sd["lm_head.weight"] = sd["wte.weight"].clone()
    hub = os.path.join(out, "hub")
    os.makedirs(hub, exist_ok=True)
    save_file(sd, os.path.join(hub, "model.safetensors"), metadata={"format": "pt"})
    rounded = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in rounded.transformer.named_parameters():
            p.copy_(sd[name].float())
    write_logits(os.path.join(hub, "logits.txt"), logits_of(rounded))
    with open(os.path.join(out, "tokens.txt"), "w") as f:
        f.write(",".join(map(str, TOKENS)) + "\n")
    json.dump({"transformers": __import__("transformers").__version__, "torch": torch.__version__},
              open(os.path.join(out, "made-with.json"), "w"))


if __name__ == "__main__":
    main()
