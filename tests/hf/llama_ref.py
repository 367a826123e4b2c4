#!/usr/bin/env python3
"""llama_ref.py — transformers' LlamaForCausalLM, the reference of
tests/hf_llama.sh (run by the venv of tests/hf/setup-venv.sh; torch on the
CPU, float32, attn_implementation="eager", which torch 1.13 needs).

  llama_ref.py refs TOKENS20 TOKENS65 PROMPT
      in the current directory: the models untied, tied and sharded (as
      make), and untied stored in bf16 and tied in f16; each one's logits of TOKENS20 (NAME.ref.logits), loss and
      gradients on TOKENS65 (NAME.ref.loss, NAME.ref.st), and 32 greedy
      tokens after PROMPT of untied and tied (NAME.greedy)
  llama_ref.py export DIR TOKENS LOGITS IDS TEXT
      logits of DIR (as logits) and AutoTokenizer(DIR)'s ids of TEXT
  llama_ref.py make DIR tied|untied [SHARD_BYTES]
      a small random LlamaForCausalLM (2 layers, hidden 64, 4 query heads
      on 2 key/value heads, SwiGLU 96, vocabulary 300, 64 positions,
      Llama-3 rope scaling) saved with save_pretrained (safetensors; with
      SHARD_BYTES, sharded: model.safetensors.index.json)
  llama_ref.py logits DIR TOKENS OUT
      the logits of every position of TOKENS (comma list), one row per line
  llama_ref.py grads DIR TOKENS OUT.safetensors
      T + 1 tokens: the mean cross-entropy of predicting tokens 1..T from
      0..T-1 (printed), and every parameter's gradient saved under its name
  llama_ref.py greedy DIR TOKENS N OUT
      N greedy tokens after TOKENS (a full forward each time), one line:
      the tokens; a second line: each step's gap between the top two logits
  llama_ref.py tokenizer DIR
      a byte-level BPE tokenizer.json of at most 300 ids (tokenizers,
      trained on a few sentences) in DIR
  llama_ref.py autotokenizer DIR TEXT
      AutoTokenizer.from_pretrained(DIR) encodes TEXT: prints the ids
  llama_ref.py compare A.safetensors B.safetensors TOL
      every tensor of B present in A, same shape, max|a-b| <= TOL x max|b|
      per tensor; prints the worst
  llama_ref.py close A B TOL
      the numbers of text files A and B: max|a-b| <= TOL x max|b|
"""
import sys

# torch and transformers are imported where needed: the comparisons run
# without them (numpy), so each check costs no second of imports


def load(d):
    import torch
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def toks(s):
    import torch
    return torch.tensor([[int(x) for x in s.split(",")]])


def make(d, kind, shard=None, dtype=None):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(7 if kind == "tied" else 11)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=(kind == "tied"),
                      rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so their gradients are generic
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    kw = {"safe_serialization": True}
    if shard:
        kw["max_shard_size"] = int(shard)
    if dtype:  # stored in bf16 or f16; the reference reads it back as float32, as shardrun widens it
        m = m.to(getattr(torch, dtype))
    m.save_pretrained(d, **kw)


def logits(d, tokens, out):
    import torch
    with torch.no_grad():
        lg = load(d)(toks(tokens)).logits[0]
    with open(out, "w") as f:
        for row in lg.tolist():
            f.write(" ".join("%.9g" % x for x in row) + "\n")


def grads(d, tokens, out):
    import torch
    from safetensors.torch import save_file
    m = load(d)
    t = toks(tokens)
    lg = m(t[:, :-1]).logits[0]
    loss = torch.nn.functional.cross_entropy(lg, t[0, 1:])
    loss.backward()
    save_file({n: p.grad.detach().clone().contiguous() for n, p in m.named_parameters()}, out)
    return "%.9g" % loss.item()


def greedy(d, tokens, n, out):
    import torch
    m = load(d)
    t = toks(tokens)
    ids, gaps = [], []
    with torch.no_grad():
        for _ in range(n):
            row = m(t).logits[0, -1]
            top = torch.topk(row, 2)
            ids.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            t = torch.cat([t, top.indices[:1].view(1, 1)], dim=1)
    with open(out, "w") as f:
        f.write(" ".join(str(x) for x in ids) + "\n" + " ".join("%.6g" % x for x in gaps) + "\n")


def main(a):
    if a[0] == "refs":  # everything tests/llama.sh needs of the reference, in one process
        tok20, tok, prompt = a[1], a[2], a[3]
        make("untied", "untied")
        make("tied", "tied")
        make("sharded", "untied", 60000)
        make("bf16", "untied", None, "bfloat16")
        make("f16", "tied", None, "float16")
        for d in ("untied", "tied", "sharded", "bf16", "f16"):
            logits(d, tok20, d + ".ref.logits")
            with open(d + ".ref.loss", "w") as f:
                f.write(grads(d, tok, d + ".ref.st") + "\n")
        for d in ("untied", "tied"):
            greedy(d, prompt, 32, d + ".greedy")
        return 0
    if a[0] == "make":
        make(a[1], a[2], a[3] if len(a) > 3 else None)
        return 0
    if a[0] == "logits":
        logits(a[1], a[2], a[3])
        return 0
    if a[0] == "grads":
        print(grads(a[1], a[2], a[3]))
        return 0
    if a[0] == "greedy":
        greedy(a[1], a[2], int(a[3]), a[4])
        return 0
    if a[0] == "tokenizer":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=290, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 special_tokens=["<|end_of_text|>"])
        tk.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 20 +
                               ["a small llama trains on the cluster"] * 20, trainer=tr)
        import os
        os.makedirs(a[1], exist_ok=True)
        tk.save(os.path.join(a[1], "tokenizer.json"))
        return 0
    if a[0] == "export":  # from_pretrained's logits of an export, and AutoTokenizer on it
        logits(a[1], a[2], a[3])
        from transformers import AutoTokenizer
        with open(a[4], "w") as f:
            f.write(" ".join(str(i) for i in AutoTokenizer.from_pretrained(a[1])(a[5])["input_ids"]) + "\n")
        return 0
    if a[0] == "autotokenizer":
        from transformers import AutoTokenizer
        print(" ".join(str(i) for i in AutoTokenizer.from_pretrained(a[1])(a[2])["input_ids"]))
        return 0
    if a[0] == "compare":
        import numpy as np
        from safetensors.numpy import load_file
        A, B, tol = load_file(a[1]), load_file(a[2]), float(a[3])
        worst, name = 0.0, ""
        for n, b in B.items():
            if n not in A or A[n].shape != b.shape:
                print("# %s: %s in the reference, %s in shardrun's" % (n, tuple(b.shape),
                                                                     tuple(A[n].shape) if n in A else "missing"))
                return 1
            r = float(np.abs(A[n] - b).max() / max(float(np.abs(b).max()), 1e-30))
            if r > worst:
                worst, name = r, n
        print("# %d tensors, worst max|a-b|/max|b| %.3g (%s)" % (len(B), worst, name))
        return 0 if worst <= tol else 1
    if a[0] == "close":
        x = [float(v) for v in open(a[1]).read().split()]
        y = [float(v) for v in open(a[2]).read().split()]
        if not x or len(x) != len(y):
            print("# %d and %d values" % (len(x), len(y)))
            return 1
        rel = max(abs(p - q) for p, q in zip(x, y)) / max(abs(q) for q in y)
        print("# %d values, max |difference| / max |reference| = %.3g" % (len(x), rel))
        return 0 if rel <= float(a[3]) else 1
    print(__doc__)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
