#!/usr/bin/env python3
"""report_check.py — checks a `shardrun report` page and summary against the
metrics file it was made from (stdlib only: json, html.parser).

  report_check.py points METRICS HTML   every series path has one point per
                                        record that carries its key, and no
                                        segment steps backwards (no spike)
  report_check.py events METRICS HTML   one element of class event-KIND per
                                        event record, in file order, each with
                                        a <title> naming its step
  report_check.py summary METRICS OUT   the printed summary's final/best
                                        validation loss, tokens, wall time and
                                        time lost, recomputed here
  report_check.py png FILE W H          a PNG of W x H that is not blank
  report_check.py dom HTML DUMPED       the DOM Chromium built (--dump-dom) has
                                        only elements and attributes the
                                        report writes: nothing from the file
                                        became markup or ran
  report_check.py layout DUMPED         the result the layout probe (below)
                                        left in the DOM: no legend box meets
                                        its plot's frame, no two event
                                        markers share a box
  report_check.py probe HTML OUT        a copy of HTML with the layout probe
                                        (a script; the report has none)
  report_check.py bounded HTML N        at most N points per series path, at
                                        most 1000 event markers
Exit status 0 when the check holds; otherwise the reasons on stdout."""
import html
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
        if len(line.rstrip("\n").encode()) > 65536:  # the report skips longer lines
            continue
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


def path_points(d):
    """The points of a path's d attribute, as segments (lists of (x, y))."""
    segs = []
    for tok in d.split():
        if tok[0] in "MLZ":
            if tok[0] == "Z":
                continue
            if tok[0] == "M":
                segs.append([])
            x, y = tok[1:].split(",")
            segs[-1].append((float(x), float(y)))
    return segs


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.paths = {}  # series key -> list of segments
        self.events = []  # (kind, title text)
        self.marks = 0
        self._in_event = None
        self._in_title = False
        self._title = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "path" and "series" in cls:
            self.paths.setdefault(a.get("data-series"), []).extend(path_points(a.get("d") or ""))
        kinds = [c[len("event-"):] for c in cls if c.startswith("event-") and tag == "g"]
        if kinds:
            self.marks += 1
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
        got = p.paths.get(key, [])
        if not got and n:
            bad.append("no path for %s" % key)
        elif sum(len(g) for g in got) != n:
            bad.append("%s: %d points, %d records" % (key, sum(len(g) for g in got), n))
        for seg in got or []:
            if any(b[0] < a[0] for a, b in zip(seg, seg[1:])):
                bad.append("%s: a segment steps backwards (a spike)" % key)
                break
    if not steps:
        bad.append("no step records in %s" % metrics)
    return bad


def check_events(metrics, html_path):
    recs = [r for r in records(metrics) if "event" in r]
    p = page(html_path)
    bad = []
    # the markers are drawn preemptions last (on top): compared as a
    # multiset, each record paired with a marker of its kind and step
    pool = list(p.events)
    if sorted(k for k, _ in pool) != sorted(r["event"] for r in recs):
        bad.append("event elements %s != event records %s" % (sorted(k for k, _ in pool),
                                                              sorted(r["event"] for r in recs)))
    pairs = []
    for r in recs:
        same = [e for e in pool if e[0] == r["event"] and re.search(r"at step %d\b" % r["step"], e[1])]
        detail = [e for e in same if (r["event"] != "checkpoint" or "%.2f s" % r["duration_s"] in e[1])]
        pick = (detail or same or [None])[0]
        if pick is None:
            bad.append("no %s marker at step %d" % (r["event"], r["step"]))
            continue
        pool.remove(pick)
        pairs.append((pick, r))
    for (k, title), r in pairs:
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
    lost = {True: [0, 0.0, 0], False: [0, 0.0, 0]}  # preempted? -> redone, gap, resumes
    prev_max, prev_last, run_max, run_last, preempted = None, None, None, None, False
    for r in recs:
        if r.get("event") == "start":
            prev_max, prev_last = run_max, run_last
            if prev_max is not None:
                acc = lost[preempted]
                acc[0] += max(0, prev_max - r["resume_step"])
                if prev_last is not None and r["time"] > prev_last:
                    acc[1] += r["time"] - prev_last
                acc[2] += 1
            run_max, preempted = None, False
        if r.get("event") == "preempt":
            preempted = True
        run_max = r["step"] if run_max is None else max(run_max, r["step"])
        run_last = r.get("time", run_last)
    for preempted, fmt in ((True, "time lost to preemption: %.1f s = %d step%s redone x %.3f s (median step) + %.1f s "
                                  "between an exit and the next start (%d resume%s after a preemption)"),
                           (False, "time lost to crashes: %.1f s = %d step%s redone x %.3f s + %.1f s between the "
                                   "last record and the next start (%d restart%s without a preemption)")):
        redone, gap, n = lost[preempted]
        want = fmt % (redone * med + gap, redone, "" if redone == 1 else "s", med, gap, n, "" if n == 1 else "s")
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


# What the report writes: every element and attribute name on its pages.
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tbody", "tr", "th", "td",
        "section", "svg", "text", "rect", "line", "path", "g", "circle"}
ATTRS = {"lang", "charset", "class", "id", "width", "height", "viewbox", "x", "y", "x1", "x2", "y1", "y2", "d",
         "fill", "stroke", "data-series", "data-step", "transform", "cx", "cy", "r", "colspan"}


class Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.text = [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.update(k for k, _ in attrs)

    def handle_data(self, data):
        self.text.append(data)


def check_dom(html_path, dumped):
    src, dom = Elements(), Elements()
    src.feed(open(html_path, encoding="utf-8").read())
    dom.feed(open(dumped, encoding="utf-8", errors="replace").read())
    bad = []
    for name, e in (("page", src), ("DOM", dom)):
        tags = set(e.tags) - TAGS
        attrs = e.attrs - ATTRS
        if tags:
            bad.append("the %s has elements the report never writes: %s" % (name, sorted(tags)))
        if attrs:
            bad.append("the %s has attributes the report never writes: %s" % (name, sorted(attrs)))
    if len(dom.tags) < len(src.tags) - 1:
        bad.append("the DOM has %d elements, the page %d" % (len(dom.tags), len(src.tags)))
    return bad


PROBE = """<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
  function meet(a, b) { return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]; }
  var out = {charts: 0, legends: 0, overlaps: [], marks: 0, same: []};
  document.querySelectorAll("svg").forEach(function (svg) {
    var frame = svg.querySelector("rect.frame");
    if (!frame) return;
    out.charts++;
    var f = box(frame);
    svg.querySelectorAll("rect.swatch, text.legend").forEach(function (l) {
      out.legends++;
      if (meet(box(l), f)) out.overlaps.push(svg.parentNode.id + ": " + (l.textContent || "swatch"));
    });
    var seen = {};
    svg.querySelectorAll(".mark").forEach(function (m) {
      out.marks++;
      var k = box(m).map(function (v) { return v.toFixed(1); }).join(",");
      if (seen[k]) out.same.push(k);
      seen[k] = 1;
    });
  });
  var pre = document.createElement("pre");
  pre.id = "sr-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def probe(html_path, out):
    text = open(html_path, encoding="utf-8").read()
    open(out, "w", encoding="utf-8").write(text.replace("</body>", PROBE + "</body>"))
    return []


def check_layout(dumped):
    text = open(dumped, encoding="utf-8", errors="replace").read()
    m = re.search(r'<pre id="sr-probe">(.*?)</pre>', text, re.S)
    if not m:
        return ["the layout probe left no result (did the page render?)"]
    r = json.loads(html.unescape(m.group(1)))
    bad = []
    if r["charts"] < 7 or r["legends"] < 14:
        bad.append("probe saw %d charts, %d legend elements" % (r["charts"], r["legends"]))
    if r["overlaps"]:
        bad.append("legends overlapping their plot: %s" % r["overlaps"][:5])
    if r["marks"] == 0:
        bad.append("no event markers rendered")
    if r["same"]:
        bad.append("%d event markers share a box with another: %s" % (len(r["same"]), r["same"][:3]))
    return bad


def check_bounded(html_path, n):
    p = page(html_path)
    bad = ["%s: %d points" % (k, sum(len(g) for g in v)) for k, v in p.paths.items()
           if sum(len(g) for g in v) > int(n)]
    if p.marks > 1000:
        bad.append("%d event markers" % p.marks)
    return bad


def main():
    what = sys.argv[1]
    if what == "png":
        bad = check_png(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif what == "layout":
        bad = check_layout(sys.argv[2])
    else:
        bad = {"points": check_points, "events": check_events, "summary": check_summary, "dom": check_dom,
               "probe": probe, "bounded": check_bounded}[what](sys.argv[2], sys.argv[3])
    for b in bad:
        print(b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
