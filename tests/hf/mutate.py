#!/usr/bin/env python3
"""mutate.py — damaged and converted model files for tests/hf.sh (plain
Python, no numpy).

  mutate.py KIND IN OUT        a copy of the safetensors file IN, KIND:
      untie      lm_head.weight's first value changed (needs lm_head)
      hdr-huge   the header length set to 100000001
      hdr-past   the header length set past the end of the file
      dtype      the first tensor's dtype set to "Q7" (unknown)
      overlap    the second tensor's offsets moved onto the first's start
      hole       4 unused bytes before the last tensor
      dup        the JSON header given a duplicate key
      extra      an extra tensor transformer.h.9.ln_1.weight appended
      f64        the first tensor stored as F64 (a dtype the importer refuses)
      trunc      the data cut short by 4 bytes
  mutate.py bf16 IN.bin OUT5.bin OUT3.bin
      the llm.c fp32 model file IN as a version-5 bf16 file (round to
      nearest even) and as the fp32 file of those rounded values
  mutate.py seed OUT           a small valid safetensors file (fuzz seed)
"""
import json
import struct
import sys


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])


def write(path, hdr, data, text=None):
    text = text if text is not None else json.dumps(hdr, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text.encode() + bytes(data))


def tensors(hdr):
    return sorted((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"][0])


def bf16(bits):
    lsb = (bits >> 16) & 1
    return ((bits + 0x7FFF + lsb) >> 16) & 0xFFFF


def main():
    kind = sys.argv[1]
    if kind == "bf16":
        raw = open(sys.argv[2], "rb").read()
        hdr = list(struct.unpack("<256i", raw[:1024]))
        n = (len(raw) - 1024) // 4
        words = struct.unpack("<%dI" % n, raw[1024:])
        halves = [bf16(w) for w in words]
        hdr5 = hdr[:]
        hdr5[1] = 5
        open(sys.argv[3], "wb").write(struct.pack("<256i", *hdr5) + struct.pack("<%dH" % n, *halves))
        open(sys.argv[4], "wb").write(raw[:1024] + struct.pack("<%dI" % n, *[h << 16 for h in halves]))
        return
    if kind == "seed":
        hdr = {"__metadata__": {"format": "pt"},
               "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
               "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}
        write(sys.argv[2], hdr, bytes(range(22)))
        return
    hdr, data = read(sys.argv[2])
    out = sys.argv[3]
    order = tensors(hdr)
    text = None
    if kind == "untie":
        b = hdr["lm_head.weight"]["data_offsets"][0]
        data[b] ^= 0x01
    elif kind in ("hdr-huge", "hdr-past"):
        text = json.dumps(hdr, separators=(",", ":"))
        text += " " * (-len(text) % 8)
        n = 100000001 if kind == "hdr-huge" else len(text) + len(data) + 8
        open(out, "wb").write(struct.pack("<Q", n) + text.encode() + bytes(data))
        return
    elif kind == "dtype":
        hdr[order[0]]["dtype"] = "Q7"
    elif kind == "overlap":
        b0 = hdr[order[0]]["data_offsets"][0]
        b1, e1 = hdr[order[1]]["data_offsets"]
        hdr[order[1]]["data_offsets"] = [b0, b0 + e1 - b1]
    elif kind == "hole":
        t = hdr[order[-1]]
        t["data_offsets"] = [t["data_offsets"][0] + 4, t["data_offsets"][1] + 4]
        data += bytes(4)
    elif kind == "dup":
        text = json.dumps(hdr, separators=(",", ":"))
        k = order[0]
        text = text[:-1] + ',"%s":%s}' % (k, json.dumps(hdr[k], separators=(",", ":")))
    elif kind == "extra":
        end = len(data)
        c = hdr[order[0]]["shape"][-1]
        hdr["transformer.h.9.ln_1.weight"] = {"dtype": "F32", "shape": [c], "data_offsets": [end, end + 4 * c]}
        data += bytes(4 * c)
    elif kind == "f64":
        t = hdr[order[-1]]
        b, e = t["data_offsets"]
        n = 1
        for d in t["shape"]:
            n *= d
        t["dtype"] = "F64"
        t["data_offsets"] = [b, b + 8 * n]
        data += bytes(8 * n - (e - b))
    elif kind == "trunc":
        write(out, hdr, data[:-4])
        return
    else:
        sys.exit("mutate.py: unknown kind " + kind)
    write(out, hdr, data, text)


if __name__ == "__main__":
    main()
