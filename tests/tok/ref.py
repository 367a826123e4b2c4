#!/usr/bin/env python3
"""tests/tok/ref.py -- shardrun's tokenizers against the references.

    ref.py corpus DIR [BYTES] writes DIR/docs/NNNN.txt (valid UTF-8, >= 1 MB in
                             all: prose and code, CJK, emoji and ZWJ
                             sequences, combining marks, right-to-left text,
                             Unicode whitespace and long runs, digits,
                             contractions, special-token text, a 100 KB run
                             of one character; BYTES: another size, with a
                             10 KB run) and DIR/invalid/NNNN.bin (invalid
                             UTF-8 among text)
    ref.py train DIR         trains a byte-level BPE with PyPI's tokenizers
                             on DIR/docs: DIR/tokenizer.json, DIR/vocab.json
                             + DIR/merges.txt, DIR/ranks.tiktoken (the same
                             vocabulary as tiktoken's base64 rank file)
    ref.py compare DIR PROBE KIND
                             encodes every document with tests/tok_probe
                             (PROBE) and with the reference of KIND: hf
                             (tokenizer.json, tokenizers' model-level
                             ordinary encoding), pair (vocab.json +
                             merges.txt, the same), tiktoken (the rank
                             file, tiktoken's encode_ordinary, GPT-2's
                             pattern) or llama3 (the same with Llama 3's
                             pattern); prints one line per mismatch and a
                             summary "KIND: N documents, M ids, K differ"
    ref.py shards DIR OUT KIND
                             the shards `data prepare --tokenizer` wrote
                             into OUT from DIR/docs (in name order) hold,
                             in index.json's order, <|endoftext|> and the
                             reference's ids of each non-empty document;
                             index.json's counts, sizes and SHA-256 match

Deterministic: the corpus comes from a seeded generator.  Runs under the
test virtual environment's python (tests/hf/setup-venv.sh).
"""
import json
import os
import random
import subprocess
import sys

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which one "
         "you were all we her she there would their been has when who will more no if out so said what up its "
         "about than into them can only other new some could time these two may then do first any my now such "
         "like our over man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three tokenizer shard "
         "gradient checkpoint rank cluster").split()
CONTRACTIONS = ["don't", "it's", "we'll", "they've", "I'm", "you're", "she'd", "can't", "DON'T", "It'S", "We'LL",
                "o'clock", "rock'n'roll"]


def prose(r, n):
    out = []
    for _ in range(n):
        words = [r.choice(WORDS if r.random() > 0.08 else CONTRACTIONS) for _ in range(r.randint(4, 18))]
        s = " ".join(words)
        s = s[0].upper() + s[1:]
        if r.random() < 0.2:
            s += " " + str(r.randint(0, 10 ** r.randint(1, 9)))
        if r.random() < 0.1:
            s += " (%d.%02d%%)" % (r.randint(0, 99), r.randint(0, 99))
        out.append(s + r.choice([".", "!", "?", ";", "...", ":"]))
    return "  ".join(out) if r.random() < 0.3 else " ".join(out)


CODE = [
    "def f(x, y=2):\n    return x ** y  # power\n\n\nclass A(object):\n\tpass\n",
    "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n        printf(\"%s\\n\", argv[i]);\n"
    "    return 0;\n}\n",
    "if [ -z \"$X\" ]; then\n  echo 'no X' >&2; exit 1\nfi\n",
    "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\r\n",
    "    x = [i*i for i in range(100) if i % 3 == 0]\n\n\n\n",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * 2).collect(); println!(\"{:?}\", v); }\n",
]


def cjk(r, n):
    ranges = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3)]
    out = []
    for _ in range(n):
        a, b = r.choice(ranges)
        out.append(chr(r.randint(a, b)))
        if r.random() < 0.05:
            out.append(r.choice(["\u3002", "\uff0c", "\u3001", " ", "\n", "\u3000"]))
    return "".join(out)


EMOJI = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F3F3\uFE0F\u200D\U0001F308",
         "\U0001F44D\U0001F3FD", "\U0001F1E9\U0001F1EA", "\U0001F600", "\u2764\uFE0F", "\U0001F9D1\u200D\U0001F4BB",
         "\U0001F469\U0001F3FF\u200D\U0001F52C", "\u263A", "\U0001F44B\U0001F3FB"]
COMBINING = ["e\u0301", "a\u0308\u0323", "n\u0303", "Z\u0351\u0352\u0353\u0354\u0355", "\u0915\u094D\u0937",
             "o\u0302\u0300", "\u05E9\u05C1\u05B8"]
RTL = ["\u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
       "\u05E9\u05DC\u05D5\u05DD \u05E2\u05D5\u05DC\u05DD", "\u0627\u0644\u0639\u0631\u0628\u064A\u0629 123",
       "\u202Bembedded\u202C \u200Fmark\u200E"]
SPACES = ["\u00A0", "\u2003", "\u3000", "\u0085", "\u2028", "\u2029", "\u202F", "\u205F", "\u1680", "\t", "\r\n",
          "\x0b", "\x0c"]


def mixed(r):
    parts = []
    for _ in range(r.randint(20, 60)):
        k = r.random()
        if k < 0.35:
            parts.append(prose(r, r.randint(1, 3)))
        elif k < 0.45:
            parts.append(r.choice(CODE))
        elif k < 0.55:
            parts.append(cjk(r, r.randint(5, 80)))
        elif k < 0.62:
            parts.append("".join(r.choice(EMOJI) for _ in range(r.randint(1, 6))))
        elif k < 0.68:
            parts.append(" ".join(r.choice(COMBINING) for _ in range(r.randint(1, 8))))
        elif k < 0.74:
            parts.append(r.choice(RTL))
        elif k < 0.82:
            parts.append(r.choice(SPACES) * r.randint(1, 5) + " " * r.randint(0, 40) + "\n" * r.randint(0, 4))
        elif k < 0.88:
            parts.append("".join(r.choice("0123456789") for _ in range(r.randint(1, 30))))
        elif k < 0.92:
            parts.append(r.choice([EOT, " " + EOT + " ", EOT + EOT, "<|end_of_text|>", "<|"]))
        else:
            parts.append(r.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"]) + r.choice(["", " ", "x"]))
        parts.append(r.choice([" ", "", "\n", "  ", "\n\n"]))
    return "".join(parts)


def corpus(d, size):
    r = random.Random(20261203)
    os.makedirs(os.path.join(d, "docs"), exist_ok=True)
    os.makedirs(os.path.join(d, "invalid"), exist_ok=True)
    docs = []
    total = 0
    while total < size:
        doc = mixed(r)
        docs.append(doc)
        total += len(doc.encode())
    run = 100_000 if size >= 1_000_000 else 10_000
    docs.append("a" * run)  # a 100 KB run of one character (full size): one piece
    docs.append(" " * 5000 + "x" + "\n" * 3000 + "\t \t" * 1000)
    total += run + 11001
    docs.append("")
    for i, doc in enumerate(docs):
        with open(os.path.join(d, "docs", "%04d.txt" % i), "w", encoding="utf-8", newline="") as f:
            f.write(doc)
    bad = [b"\xff", b"\xc3\x28", b"\x80", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xfe\xfe"]
    for i in range(40):
        chunks = []
        for _ in range(r.randint(5, 30)):
            chunks.append(r.choice(bad) if r.random() < 0.3 else mixed(r)[: r.randint(1, 200)].encode())
        with open(os.path.join(d, "invalid", "%04d.bin" % i), "wb") as f:
            f.write(b"".join(chunks))
    print("corpus: %d documents, %d bytes of valid UTF-8; 40 documents with invalid UTF-8" % (len(docs), total))


def byte_maps():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def docs_of(d):
    names = sorted(os.listdir(os.path.join(d, "docs")))
    return [os.path.join(d, "docs", n) for n in names]


def train(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)

    def texts():
        for p in docs_of(d):
            with open(p, encoding="utf-8", newline="") as f:
                yield f.read()
    tok.train_from_iterator(texts(), tr)
    tok.add_special_tokens([EOT])
    tok.save(os.path.join(d, "tokenizer.json"))
    tok.model.save(d)  # vocab.json, merges.txt
    unmap = byte_maps()
    import base64
    with open(os.path.join(d, "ranks.tiktoken"), "w") as f:
        for s, i in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
            if s == EOT:
                continue
            f.write("%s %d\n" % (base64.b64encode(bytes(unmap[ch] for ch in s)).decode(), i))
    print("trained: %d ids (%s at %d)" % (tok.get_vocab_size(), EOT, tok.token_to_id(EOT)))


def reference(d, kind):
    """A function text -> ids for the reference of kind."""
    if kind in ("hf", "pair"):
        from tokenizers import Tokenizer
        from tokenizers.models import BPE
        if kind == "hf":
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        else:
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            tok.model = BPE.from_file(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt"))

        def enc(text):
            # the model-level (ordinary) encoding: added tokens are not
            # matched in the text, as tiktoken's encode_ordinary
            ids = []
            for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text):
                ids.extend(t.id for t in tok.model.tokenize(piece))
            return ids
        return enc
    import base64
    import tiktoken
    ranks = {}
    with open(os.path.join(d, "ranks.tiktoken")) as f:
        for line in f:
            b, r = line.split()
            ranks[base64.b64decode(b)] = int(r)
    pat = LLAMA3_PATTERN if kind == "llama3" else GPT2_PATTERN
    e = tiktoken.Encoding("test", pat_str=pat, mergeable_ranks=ranks, special_tokens={EOT: len(ranks)})
    return e.encode_ordinary


def compare(d, probe, kind):
    spec = {"hf": os.path.join(d, "tokenizer.json"), "pair": os.path.join(d, "vocab.json"),
            "tiktoken": "gpt2:" + os.path.join(d, "ranks.tiktoken"),
            "llama3": "llama3:" + os.path.join(d, "ranks.tiktoken")}[kind]
    paths = docs_of(d)
    out = subprocess.run([probe, spec] + paths, check=True, capture_output=True, text=True).stdout.split("\n")
    enc = reference(d, kind)
    bad = 0
    nids = 0
    for i, p in enumerate(paths):
        with open(p, encoding="utf-8", newline="") as f:
            text = f.read()
        want = enc(text)
        got = [int(x) for x in out[i].split()]
        nids += len(want)
        if got != want:
            bad += 1
            k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
            print("%s: %s: differs at id %d: shardrun %s, reference %s" % (kind, os.path.basename(p), k,
                                                                          got[k:k + 6], want[k:k + 6]))
    print("%s: %d documents, %d ids, %d differ" % (kind, len(paths), nids, bad))
    return 1 if bad else 0


def shards(d, out, kind):
    import hashlib
    import struct
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    got = []
    bad = 0
    for sh in index["shards"]:
        with open(os.path.join(out, sh["name"]), "rb") as f:
            data = f.read()
        magic, version, count = struct.unpack("<3i", data[:12])
        width = 2 if magic == 20240520 else 4
        if len(data) != 1024 + width * count or count != sh["tokens"] or len(data) != sh["bytes"] or \
                hashlib.sha256(data).hexdigest() != sh["sha256"]:
            print("%s: header, size or SHA-256 differ from index.json" % sh["name"])
            bad += 1
        got.extend(struct.unpack("<%d%s" % (count, "H" if width == 2 else "I"), data[1024:]))
    enc = reference(d, kind)
    eot = json.load(open(os.path.join(d, "tokenizer.json")))["added_tokens"][0]["id"]
    want = []
    for p in docs_of(d):
        with open(p, encoding="utf-8", newline="") as f:
            text = f.read()
        if text:
            want.append(eot)
            want.extend(enc(text))
    if got != want:
        k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
        print("the shards differ from the reference at token %d of %d/%d" % (k, len(got), len(want)))
        bad += 1
    print("shards: %d, %d tokens, %d problems" % (len(index["shards"]), len(got), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "corpus":
        corpus(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1_100_000)
    elif len(sys.argv) >= 5 and sys.argv[1] == "shards":
        sys.exit(shards(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "train":
        train(sys.argv[2])
    elif len(sys.argv) >= 5 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        sys.exit(__doc__)
