#!/usr/bin/env python3
"""funcsize.py — the extent of every function defined in C sources, as
tests/layers.sh's size budgets read them.

A definition is what the house style (.clang-format) writes at file scope:
a signature that starts in column 0 (possibly over several lines) and whose
line ends with "{", the body closed by a "}" alone in column 0 (or a
one-line definition with its body on the signature's line).  A
function's length is its lines from the first of its signature to that
closing brace, both included.  Prototypes (ending with ";"), struct and
enum bodies, initialisers ("= {") and macros are not functions.

usage: funcsize.py FILE...         one line per function: LINES FILE FUNCTION
       funcsize.py --files FILE... one line per file: LINES FILE
"""
import re
import sys

SIG_START = re.compile(r"^[A-Za-z_][A-Za-z0-9_ \t\*\(\),\[\]]*$")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
NOT_FUNCS = ("struct", "union", "enum", "typedef", "static const", "const", "#")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if not line or line[0] in " \t#/*}" or line.rstrip().endswith(";"):
            i += 1
            continue
        # gather a signature of up to 6 lines ending with "{" (a one-line
        # definition, "{ ... }" on its signature's line, is one line long)
        sig, j = line, i
        while not sig.rstrip().endswith(("{", ";", "}")) and j + 1 < n and j - i < 6:
            j += 1
            sig += " " + lines[j].strip()
        s = sig.rstrip()
        if s.endswith("}") and "{" in s:
            head = s.split("(")[0]
            m = NAME.search(head + "(")
            if m and "=" not in head and not s.startswith(NOT_FUNCS):
                out.append((j - i + 1, m.group(1), i + 1))
            i = j + 1
            continue
        if not s.endswith("{") or "=" in s.split("(")[0] or "(" not in s or s.startswith(NOT_FUNCS):
            i += 1
            continue
        head = s.split("(")[0]
        m = NAME.search(head + "(")
        if not m:
            i += 1
            continue
        name = m.group(1)
        if name in ("if", "for", "while", "switch", "return", "sizeof", "asm"):
            i += 1
            continue
        # the body: to the first "}" alone in column 0
        k = j + 1
        while k < n and not lines[k].startswith("}"):
            k += 1
        out.append((k - i + 1, name, i + 1))
        i = k + 1
    return out


def main(argv):
    if argv and argv[0] == "--files":
        for p in argv[1:]:
            with open(p, encoding="utf-8", errors="replace") as f:
                print(sum(1 for _ in f), p)
        return 0
    for p in argv:
        for length, name, line in functions(p):
            print(length, p, name, line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
