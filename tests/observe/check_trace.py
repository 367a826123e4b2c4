"""check_trace.py MERGED.json RANKS — the structure of a merged trace
(shardrun debug trace; tests/observe.sh).

Checks: a traceEvents array and otherData of format "shardrun-trace-merged
1" with world_size RANKS; a process_name for every rank 0..RANKS-1; every
complete event has a name, pid in range, tid, numeric ts and dur >= 0;
the host phases forward, backward, gradients and optimizer, a layer's
forward and backward, a stream wait, and the checkpoint's snapshot and
write appear on every rank; every collective (group, sequence number,
operation, bytes) appears on every rank of its group (a group of all ranks
here).  Prints one summary line; exits 1 with the first problem."""
import json
import sys
from collections import defaultdict


def main():
    d = json.load(open(sys.argv[1]))
    ranks = int(sys.argv[2])
    od = d.get("otherData", {})
    if od.get("format") != "shardrun-trace-merged 1" or od.get("world_size") != ranks:
        sys.exit(f"otherData: {od}")
    ev = d["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    if sorted(names) != list(range(ranks)):
        sys.exit(f"process names for pids {sorted(names)}, not 0..{ranks - 1}")
    seen = defaultdict(set)
    coll = defaultdict(set)
    for e in ev:
        if e.get("ph") != "X":
            continue
        if not (isinstance(e.get("name"), str) and 0 <= e.get("pid", -1) < ranks and isinstance(e.get("tid"), int)
                and isinstance(e.get("ts"), (int, float)) and e.get("dur", -1) >= 0):
            sys.exit(f"a malformed complete event: {e}")
        name = e["name"]
        seen[e["pid"]].add(name.split(" layer")[0] + (" layer" if " layer" in name else ""))
        if name.startswith("wait "):
            seen[e["pid"]].add("wait")
        if e.get("cat") == "collective":
            a = e["args"]
            if a["group_size"] != ranks:
                continue
            coll[(a["group"], a["seq"], name, a["bytes"])].add(e["pid"])
    for want in ["forward", "backward", "gradients (reductions, norm)", "optimizer", "forward layer", "backward layer",
                 "wait", "checkpoint snapshot"]:
        for r in range(ranks):
            if want not in seen[r]:
                sys.exit(f"rank {r}: no '{want}' span (has {sorted(seen[r])})")
    for r in range(ranks):
        if not any(n.startswith("checkpoint write") for n in seen[r]):
            sys.exit(f"rank {r}: no checkpoint write span")
    if not coll:
        sys.exit("no collectives")
    for k, pids in coll.items():
        if len(pids) != ranks:
            sys.exit(f"collective {k} appears on ranks {sorted(pids)} only")
    print(f"trace: {ranks} ranks, {sum(1 for e in ev if e.get('ph') == 'X')} spans, {len(coll)} collectives each "
          f"on every rank, phases, layers, waits and the checkpoint on each")


main()
