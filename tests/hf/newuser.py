"""newuser.py — the reference packages' side of tests/newuser.sh, in one
process (transformers, tokenizers and tensorboard start slowly).

    newuser.py PROMPT EXPORT... [--tokenizer EXPORT] [--pair DIR TEXT] [--tb TBDIR METRICS]

For each exported Hugging Face directory EXPORT: AutoTokenizer and
AutoModelForCausalLM load it; the prompt's ids, 20 tokens generated
greedily by generate() (transformers' pad/eos handling included), and the
continuation decoded, as one JSON line {"dir", "tokenizer", "prompt_ids",
"ids", "text", "config": {bos, eos, pad}}; --tokenizer: the same without the model
(its "ids" and "text" empty).  --pair: GPT2TokenizerFast built
from DIR/vocab.json + DIR/merges.txt (GPT-2's own files) encodes TEXT with
its end-of-text token first, and PROMPT: {"pair": [...], "eos": ID, "prompt":
[...]}.  --tb: TensorBoard's
EventAccumulator reads TBDIR: {"tb_val_steps": [...], "tb_val": [...]}
against the metrics file's eval events {"eval_steps": [...], "eval":
[...]}.

generate() imports torch.distributed.fsdp to ask whether the model is
FSDP-managed, which Debian's torch 1.13 cannot import under Python 3.11
(a dataclass with a mutable default): that question is answered "no" here,
nothing else of generate() changes."""
import json
import sys

import transformers.generation.utils as gen_utils

gen_utils.is_fsdp_managed_module = lambda module: False

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2TokenizerFast  # noqa: E402


def export(d, prompt, generate=True):
    tok = AutoTokenizer.from_pretrained(d)
    ids = tok(prompt)["input_ids"]
    if not generate:
        c = json.load(open(f"{d}/config.json"))
        return {"dir": d, "tokenizer": type(tok).__name__, "prompt_ids": ids, "ids": [], "text": "",
                "config": {"bos": c.get("bos_token_id"), "eos": c.get("eos_token_id"), "pad": c.get("pad_token_id")}}
    model = AutoModelForCausalLM.from_pretrained(d)
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=20, min_new_tokens=20,
                         do_sample=False)
    new = out[0].tolist()[len(ids):]
    c = model.config
    return {"dir": d, "tokenizer": type(tok).__name__, "prompt_ids": ids, "ids": new, "text": tok.decode(new),
            "config": {"bos": c.bos_token_id, "eos": c.eos_token_id, "pad": c.pad_token_id}}


def tensorboard(tbdir, metrics):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(tbdir, size_guidance={"scalars": 0})
    acc.Reload()
    ev = acc.Scalars("val_loss") if "val_loss" in acc.Tags()["scalars"] else []
    evals = [json.loads(line) for line in open(metrics)]
    evals = [r for r in evals if r.get("event") == "eval"]
    return {"tb_val_steps": [e.step for e in ev], "tb_val": [e.value for e in ev],
            "eval_steps": [r["step"] for r in evals], "eval": [r["val_loss"] for r in evals]}


def main():
    args = sys.argv[1:]
    prompt = args.pop(0)
    while args:
        a = args.pop(0)
        if a == "--pair":
            d, text = args.pop(0), args.pop(0)
            tok = GPT2TokenizerFast(vocab_file=f"{d}/vocab.json", merges_file=f"{d}/merges.txt")
            print(json.dumps({"pair": [tok.eos_token_id] + tok(text)["input_ids"], "eos": tok.eos_token_id,
                              "prompt": tok(prompt)["input_ids"]}))
        elif a == "--tokenizer":
            print(json.dumps(export(args.pop(0), prompt, generate=False)))
        elif a == "--tb":
            print(json.dumps(tensorboard(args.pop(0), args.pop(0))))
        else:
            print(json.dumps(export(a, prompt)))
    sys.stdout.flush()


main()
