"""check_tb.py TBDIR METRICS.jsonl — TensorBoard's own reader against the
metrics file (tests/observe.sh).

Reads TBDIR with tensorboard's EventAccumulator (purging orphaned data, as
TensorBoard does) keeping every event, and the metrics file's step records,
the last record of each step winning (a resumed run redoes steps and
appends).  Checks: every tag's steps are exactly the file's logged steps,
each once (val_loss: exactly the steps of the file's eval events, logged
steps or not: every evaluation is a scalar at its own step); every value equals the file's as a float32 (within 1e-5
relative for the values the file writes with 6 significant digits); every event record
kind of the file has a text summary "event/<kind>"; with --events KIND...
those kinds must be among them.  The text summaries are read as the
TensorBoard server reads them (plugin_event_accumulator, which also drops
tensors at a session start; the EventAccumulator above keeps them):
every tag, scalars included, has each step once.  Prints one summary line; exits 1 with the
first difference."""
import json
import struct
import sys

from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    tbdir, metrics = sys.argv[1], sys.argv[2]
    want_events = sys.argv[4:] if len(sys.argv) > 3 and sys.argv[3] == "--events" else []
    last, kinds, evals = {}, set(), {}
    for line in open(metrics):
        r = json.loads(line)
        if "event" in r:
            kinds.add(r["event"])
            if r["event"] == "eval" and "val_loss" in r:  # (a run with eval tasks alone has none)
                evals[r["step"]] = {"val_loss": r["val_loss"]}
        else:
            last[r["step"]] = r
    acc = EventAccumulator(tbdir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    steps = sorted(last)
    keys = ["loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "comm_exposed_ms", "mem_total", "mem_total_peak"]
    # the file writes these with 6 significant digits, the rest exactly
    six = {"tokens_per_s", "step_ms", "comm_exposed_ms", "mfu", "busy_ms_median"}
    n = 0
    for k in keys + ["mfu", "val_loss", "busy_ms_median"]:
        src = evals if k == "val_loss" else last
        have = sorted(evals) if k == "val_loss" else [s for s in steps if last[s].get(k) is not None]
        if k not in keys and not have:
            continue
        if k not in tags["scalars"]:
            sys.exit(f"tag {k}: not in TensorBoard's scalars {tags['scalars']}")
        ev = acc.Scalars(k)
        got = [e.step for e in ev]
        if got != have:
            sys.exit(f"tag {k}: TensorBoard has steps {got}, the metrics file {have}")
        for e in ev:
            want = f32(src[e.step][k])
            if e.value != want and not (k in six and abs(e.value - want) <= 1e-5 * abs(want)):
                sys.exit(f"tag {k} step {e.step}: TensorBoard {e.value!r}, the metrics file {src[e.step][k]!r}")
            n += 1
    for kind in sorted(kinds | set(want_events)):
        if f"event/{kind}" not in tags["tensors"]:
            sys.exit(f"event {kind}: no text summary event/{kind} (have {tags['tensors']})")
        for t in acc.Tensors(f"event/{kind}"):
            rec = json.loads(t.tensor_proto.string_val[0])
            if rec["event"] != kind:
                sys.exit(f"event/{kind} at step {t.step} holds a {rec['event']} record")
    server = plugin_event_accumulator.EventAccumulator(tbdir, size_guidance={"tensors": 0})
    server.Reload()
    for tag in server.Tags()["tensors"]:
        got = [t.step for t in server.Tensors(tag)]
        if len(got) != len(set(got)):
            sys.exit(f"tag {tag}: a step twice in TensorBoard's server view: {got}")
    print(f"tensorboard: {n} scalars at {len(steps)} steps ({steps[0]}-{steps[-1]}), each step once, "
          f"as the metrics file says; events {' '.join(sorted(kinds))}")


main()
