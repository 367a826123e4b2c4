"""eval_ref.py HF_DIR TASK.jsonl [TOKENIZER.json] [--batch N] [--threads N] [--bench]

The reference for `shardrun eval` (tests/eval.sh, bench/run_eval.sh):
transformers' AutoModelForCausalLM scores each ending of each item of a
HellaSwag-form task file by its summed log-likelihood given the context,
as shardrun(1) EVALUATION TASKS defines it (the context's tokens, then
those of " " + ending, encoded separately with no special token; the
UTF-8 bytes for a byte-level model without a tokenizer; the window cut
from the left to the model's context).  Prints one JSON object: {"task",
"n", "acc", "acc_norm", "items": [{"label", "pred", "pred_norm",
"logprobs", "tokens"}]} (acc_norm: logprob per UTF-8 byte of the ending),
and with --bench {"sequences", "seconds"} of the scoring alone on stderr.
Batches pad on the right, which a causal model's earlier positions do not
see."""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

args = [a for a in sys.argv[1:]]
batch, threads, bench = 16, 0, False
if "--batch" in args:
    i = args.index("--batch"); batch = int(args[i + 1]); del args[i:i + 2]
if "--threads" in args:
    i = args.index("--threads"); threads = int(args[i + 1]); del args[i:i + 2]
if "--bench" in args:
    args.remove("--bench"); bench = True
hf, task = args[0], args[1]
tok = None
if len(args) > 2:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args[2])
if threads:
    torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
T = model.config.max_position_embeddings if hasattr(model.config, "max_position_embeddings") else model.config.n_positions
T = getattr(model.config, "n_positions", T)


def enc(s):
    if tok is None:
        return list(s.encode("utf-8"))
    return tok.encode(s, add_special_tokens=False).ids


items, seqs = [], []
for line in open(task, encoding="utf-8"):
    if not line.strip():
        continue
    o = json.loads(line)
    c = enc(o["ctx"])
    first = len(seqs)
    for e in o["endings"]:
        x = enc(" " + e)
        full = (c + x)[-(T + 1):]
        seqs.append((full, len(x), len(e.encode("utf-8"))))
    items.append((o["label"], first, len(seqs)))

lp = [0.0] * len(seqs)
t0 = time.perf_counter()
with torch.no_grad():
    for b in range(0, len(seqs), batch):
        chunk = seqs[b:b + batch]
        L = max(len(s[0]) - 1 for s in chunk)
        inp = torch.zeros((len(chunk), L), dtype=torch.long)
        for r, (full, _, _) in enumerate(chunk):
            inp[r, :len(full) - 1] = torch.tensor(full[:-1])
        logits = model(inp).logits.double()
        logp = torch.log_softmax(logits, dim=-1)
        for r, (full, n, _) in enumerate(chunk):
            n_in = len(full) - 1
            tgt = torch.tensor(full[1:])
            pos = torch.arange(n_in - n, n_in)
            lp[b + r] = float(logp[r, pos, tgt[n_in - n:]].sum())
t1 = time.perf_counter()

out_items, right, right_n = [], 0, 0
for label, a, z in items:
    v = lp[a:z]
    pred = max(range(len(v)), key=lambda k: (v[k], -k))
    norm = [v[k] / seqs[a + k][2] for k in range(len(v))]
    pred_n = max(range(len(v)), key=lambda k: (norm[k], -k))
    right += pred == label
    right_n += pred_n == label
    out_items.append({"label": label, "pred": pred, "pred_norm": pred_n, "logprobs": v,
                      "tokens": [seqs[a + k][1] for k in range(len(v))]})
name = os.path.basename(task)
for ext in (".jsonl", ".json"):
    if name.endswith(ext):
        name = name[:-len(ext)]
print(json.dumps({"task": name, "n": len(items), "acc": right / len(items), "acc_norm": right_n / len(items),
                  "items": out_items}))
if bench:
    print(json.dumps({"sequences": len(seqs), "seconds": t1 - t0}), file=sys.stderr)
