#!/usr/bin/env python3
"""report_check.py — checks a `shardrun report` page and summary against the
metrics file it was made from (stdlib only: json, html.parser).

  report_check.py points METRICS HTML   every series polyline has one point per
                                        record that carries its key
  report_check.py events METRICS HTML   one element of class event-KIND per
                                        event record, in file order, each with
                                        a <title> naming its step
  report_check.py summary METRICS OUT   the printed summary's final/best
                                        validation loss, tokens, wall time and
                                        time lost, recomputed here
  report_check.py png FILE W H          a PNG of W x H that is not blank

Exit status 0 when the check holds; otherwise the reasons on stdout."""
import html.parser
import json
import math
import re
import struct
import sys
import zlib


def records(path):
    out = []
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if not isinstance(o, dict) or not isinstance(o.get("step"), (int, float)):
            continue
        if "event" in o and not isinstance(o["event"], str):
            continue
        if "event" not in o and not isinstance(o.get("loss"), (int, float)):
            continue
        out.append(o)
    return out


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.polylines = {}  # series key -> list of points
        self.events = []  # (kind, title text)
        self._in_event = None
        self._in_title = False
        self._title = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "polyline" and "series" in cls:
            pts = (a.get("points") or "").split()
            self.polylines[a.get("data-series")] = pts
        kinds = [c[len("event-"):] for c in cls if c.startswith("event-")]
        if kinds:
            self._in_event = kinds[0]
            self._title = ""
        if tag == "title" and self._in_event:
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "title" and self._in_title:
            self._in_title = False
            self.events.append((self._in_event, self._title))
            self._in_event = None

    def handle_data(self, data):
        if self._in_title:
            self._title += data


def page(path):
    p = Page()
    p.feed(open(path, encoding="utf-8").read())
    return p


def check_points(metrics, html_path):
    recs = records(metrics)
    p = page(html_path)
    bad = []
    evals = [r for r in recs if r.get("event") == "eval"]
    steps = [r for r in recs if "event" not in r]
    want = {"loss": len(steps), "lr": len(steps), "grad_norm": len(steps), "tokens_per_s": len(steps),
            "comm_exposed_ms": len(steps), "step_ms": len(steps),
            "mfu": sum(1 for r in steps if isinstance(r.get("mfu"), (int, float))),
            "val_loss": len(evals) if evals else sum(1 for r in steps if "val_loss" in r)}
    for c in ("param_shard", "optim_shard", "activations"):
        want["mem_%s_peak" % c] = len(steps)
    for key, n in want.items():
        got = p.polylines.get(key)
        if got is None:
            bad.append("no polyline for %s" % key)
        elif len(got) != n:
            bad.append("%s: %d points, %d records" % (key, len(got), n))
    if not steps:
        bad.append("no step records in %s" % metrics)
    return bad


def check_events(metrics, html_path):
    recs = [r for r in records(metrics) if "event" in r]
    p = page(html_path)
    bad = []
    if [k for k, _ in p.events] != [r["event"] for r in recs]:
        bad.append("event elements %s != event records %s" % ([k for k, _ in p.events], [r["event"] for r in recs]))
    for (k, title), r in zip(p.events, recs):
        if "at step %d" % r["step"] not in title:
            bad.append("event %s: title %r does not name step %d" % (k, title, r["step"]))
        if k == "checkpoint" and "%.2f s" % r["duration_s"] not in title:
            bad.append("checkpoint title %r lacks its duration %.2f s" % (title, r["duration_s"]))
        if k == "preempt" and r.get("signal") and r["signal"] not in title:
            bad.append("preempt title %r lacks the signal %s" % (title, r["signal"]))
        if k == "eval" and "%.4f" % r["val_loss"] not in title:
            bad.append("eval title %r lacks val_loss" % title)
    return bad


def check_summary(metrics, out_path):
    recs = records(metrics)
    text = open(out_path).read()
    bad = []
    evals = [r for r in recs if r.get("event") == "eval"]
    vals = [(r["step"], r["val_loss"]) for r in evals] or \
           [(r["step"], r["val_loss"]) for r in recs if "event" not in r and "val_loss" in r]
    if vals:
        best = min(vals, key=lambda v: v[1])
        want = "final %.4f (step %d), best %.4f (step %d)" % (vals[-1][1], vals[-1][0], best[1], best[0])
        if want not in text:
            bad.append("validation summary: want %r" % want)
    steps = [r for r in recs if "event" not in r]
    want = "tokens: %d (step %d)" % (steps[-1]["tokens"], steps[-1]["step"])
    if want not in text:
        bad.append("want %r" % want)
    times = [r["time"] for r in recs if isinstance(r.get("time"), (int, float))]
    want = "wall time: %.1f s" % (times[-1] - times[0])
    if want not in text:
        bad.append("want %r" % want)
    # time lost: per start after the first, the steps redone since the
    # previous run's furthest step x the median step + the gap since its
    # last record
    ms = sorted(r["step_ms"] for r in steps)
    n = len(ms)
    med = (ms[n // 2] if n % 2 else 0.5 * (ms[n // 2 - 1] + ms[n // 2])) / 1000.0
    redone, gap, prev_max, prev_last, run_max, run_last = 0, 0.0, None, None, None, None
    for r in recs:
        if r.get("event") == "start":
            prev_max, prev_last = run_max, run_last
            if prev_max is not None:
                redone += max(0, prev_max - r["resume_step"])
                if prev_last is not None and r["time"] > prev_last:
                    gap += r["time"] - prev_last
            run_max = None
        run_max = r["step"] if run_max is None else max(run_max, r["step"])
        run_last = r.get("time", run_last)
    want = "time lost to preemption: %.1f s = %d step%s redone x %.3f s (median step) + %.1f s" % (
        redone * med + gap, redone, "" if redone == 1 else "s", med, gap)
    if want not in text:
        bad.append("want %r in %r" % (want, text))
    return bad


def check_png(path, w, h):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return ["%s is not a PNG" % path]
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    width, height, depth, ctype, _, _, interlace = ihdr
    if (width, height) != (w, h):
        return ["%s is %dx%d, expected %dx%d" % (path, width, height, w, h)]
    if depth != 8 or ctype not in (2, 6) or interlace:
        return ["unexpected PNG format: depth %d color type %d interlace %d" % (depth, ctype, interlace)]
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colors, inked = set(), 0
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            for x in range(0, width, 2):
                px = bytes(line[x * bpp:x * bpp + 3])
                colors.add(px)
                inked += px != b"\xff\xff\xff"
        prev = line
    sampled = ((height + 3) // 4) * ((width + 1) // 2)
    bad = []
    if inked < 0.01 * sampled:
        bad.append("%s is blank: %d of %d sampled pixels are not white" % (path, inked, sampled))
    if len(colors) < 8:
        bad.append("%s has %d colours; charts draw many" % (path, len(colors)))
    return bad


def main():
    what = sys.argv[1]
    if what == "png":
        bad = check_png(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        bad = {"points": check_points, "events": check_events, "summary": check_summary}[what](sys.argv[2],
                                                                                                sys.argv[3])
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
