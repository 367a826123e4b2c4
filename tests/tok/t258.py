"""t258.py — writes PATH: a byte-level BPE tokenizer.json of 258 ids (GPT-2's
byte-to-character map for the 256 bytes, one merge "h h" -> 256, and the
special <|endoftext|> as 257), the smallest tokenizer with more ids than a
byte vocabulary.  Used by tests/newuser.sh and tests/newuser2.sh."""
import json
import sys

bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["hh"], vocab["<|endoftext|>"] = 256, 257
with open(sys.argv[1], "w") as f:
    json.dump({"version": "1.0", "added_tokens": [{"id": 257, "content": "<|endoftext|>", "special": True}],
               "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
               "model": {"type": "BPE", "vocab": vocab, "merges": ["h h"]}}, f)
