#!/usr/bin/python3
"""Draws collx's benchmark results: bus bandwidth and time against message size, log-log.

    collx_plot.py bench OUT.png|OUT.svg RUN.json [RUN.json ...]
    collx_plot.py compare OUT.png|OUT.svg RESULTS.csv [RESULTS.csv ...] [--collective C]
    collx_plot.py --check

bench: collx-bench's --json files (collx-bench --plot runs this on its own results). One
line per algorithm (a run of -a all has one per algorithm it ran; a run without -a is one
line, "default", whatever the table chose per size), and per transport, P or dtype where the
runs differ in them; every run must be of one collective.

compare: benchmarks/compare/run.sh's results.csv (collx and its peers). One line per
implementation: per size, its best algorithm in each round, the median over the rounds, and
a band from its fastest to its slowest round where there are several (ratios.py's first
columns take the fastest round: on a noisy machine the band tells how far to trust that); a
row of panels per P, and per file when several are given (run.sh writes one per transport).

Both draw two panels side by side, busbw (GB/s) and time (us) against size (B), labeled like
nccl-tests' columns, both axes logarithmic; the format follows OUT's extension (.png, .svg).
--check only imports matplotlib. Exit codes: 0 drawn; 1 unreadable input or nothing to
draw; 2 bad arguments; 3 matplotlib is missing.
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys

FORMATS = (".png", ".svg")
MISSING_MATPLOTLIB = 3


def fail(message, code=1):
    sys.stderr.write("collx_plot.py: %s\n" % message)
    sys.exit(code)


def load_matplotlib():
    try:
        import matplotlib
    except ImportError as e:
        fail("cannot import matplotlib with %s (%s): install it (Debian: apt-get install "
             "python3-matplotlib), or name a Python that has it" % (sys.executable, e),
             MISSING_MATPLOTLIB)
    matplotlib.use("Agg")  # files only, no display
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, smaller
    matplotlib.rcParams["svg.hashsalt"] = "collx"  # the same input draws the same file
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    return plt, FuncFormatter, FixedLocator, NullFormatter


def size_label(b, _pos=None):
    """4 B, 64 B, 1 KiB, 16 KiB, 1 MiB, ... (the tick labels of the size axis)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            v = b / scale
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.3g %s" % (v, unit))
    return "%d B" % b


def transport_of(transports):
    """'0:self 1:shm 2:shm' (collx-bench's transports seen from rank 0) -> 'shm'."""
    names = []
    for item in transports.split():
        name = item.split(":", 1)[-1]
        if name != "self" and name not in names:
            names.append(name)
    return "+".join(names) if names else "self"


class Line:
    def __init__(self, label, style=None):
        self.label = label
        # (color index, line style): lines that keep a style from picture to picture (an
        # implementation's); None: the next free color, in the order lines come.
        self.style = style
        self.points = {}  # size -> (time_us, busbw_gbps)
        self.band = {}  # size -> ((fastest time, its busbw), (slowest time, its busbw))

    def add(self, size, time_us, busbw):
        if size <= 0 or time_us <= 0:
            return  # nothing a log axis can show (a barrier's size 0)
        old = self.points.get(size)
        if old is None or time_us < old[0]:
            self.points[size] = (time_us, busbw)

    def add_rounds(self, size, rounds):
        """rounds: [(time_us, busbw)], one per round: the median round, and the fastest to
        the slowest as a band where there are several."""
        if size <= 0 or not rounds:
            return
        rounds = sorted(rounds)
        time_us = statistics.median(t for t, _ in rounds)
        self.points[size] = (time_us, statistics.median(b for _, b in rounds))
        if len(rounds) > 1:
            self.band[size] = (rounds[0], rounds[-1])


def size_ticks(sizes):
    """The sizes to label on the size axis: measured ones, evenly spread on the log axis (at
    most about 10 labels, the smallest and the largest always among them)."""
    sizes = sorted(sizes)
    if not sizes:
        return []
    spacing = (math.log2(sizes[-1]) - math.log2(sizes[0])) / 10
    ticks = [sizes[0]]
    for s in sizes[1:]:
        if math.log2(s) - math.log2(ticks[-1]) >= spacing - 1e-9:
            ticks.append(s)
    if ticks[-1] != sizes[-1]:
        if len(ticks) > 1 and math.log2(sizes[-1]) - math.log2(ticks[-1]) < spacing / 2:
            ticks.pop()
        ticks.append(sizes[-1])
    return ticks


def save(fig, out):
    """Writes the figure in the format of `out`'s extension. PNGs are reduced to a palette of
    128 colors (lines, text and grid need no more): a quarter of the bytes, the same colors."""
    ext = os.path.splitext(out)[1].lower()
    try:
        if ext == ".svg":
            fig.savefig(out, format="svg", metadata={"Date": None})
            return
        import io
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=100)
        try:
            from PIL import Image
        except ImportError:  # matplotlib's own PNG, as it is
            with open(out, "wb") as f:
                f.write(png.getvalue())
            return
        png.seek(0)
        image = Image.open(png).convert("RGB").quantize(colors=128,
                                                        method=Image.Quantize.FASTOCTREE)
        image.save(out, format="PNG", optimize=True)
    except OSError as e:
        fail("cannot write %s: %s" % (out, e))


def draw(out, title, panels, notes=""):
    """panels: [(row title, [Line, ...])]: a row of (busbw, time) panels each."""
    plt, FuncFormatter, FixedLocator, NullFormatter = load_matplotlib()
    labels = []
    for _, lines in panels:
        for line in lines:
            if line.points and line.label not in labels:
                labels.append(line.label)
    if not labels:
        fail("nothing to draw: no result with a size above 0 and a time")
    cmap = plt.get_cmap("tab10")
    markers = "osD^v<>ph*"
    fixed = {line.label: line.style for _, lines in panels for line in lines if line.style}
    style = {}
    free = (i for i in range(1000) if i not in {c for c, _ in fixed.values()})
    for label in labels:
        index, dashes = fixed[label] if label in fixed else (next(free), "-")
        style[label] = (cmap(index % 10), markers[index % len(markers)], dashes)
    # Heights in inches: the title (and its note), the legend's rows, 3.4 per row of panels.
    ncol = min(len(labels), 4)
    legend_rows = (len(labels) + ncol - 1) // ncol
    top = 0.32 + (0.25 if notes else 0)
    bottom = 0.15 + 0.27 * legend_rows
    rows = len(panels)
    height = top + bottom + 3.4 * rows
    fig, axes = plt.subplots(rows, 2, figsize=(11, height), squeeze=False)
    handles = {}
    for row, (row_title, lines) in enumerate(panels):
        measured = {s for line in lines for s in line.points}
        for col, (what, unit, index) in enumerate((("busbw", "GB/s", 1), ("time", "us", 0))):
            ax = axes[row][col]
            for line in lines:
                sizes = sorted(s for s in line.points if line.points[s][index] > 0)
                if not sizes:
                    continue
                color, marker, dashes = style[line.label]
                banded = [s for s in sizes if s in line.band]
                if banded:  # fastest to slowest round (busbw: the other way round)
                    ax.fill_between(banded, [line.band[s][0][index] for s in banded],
                                    [line.band[s][1][index] for s in banded], color=color,
                                    alpha=0.13, linewidth=0)
                h, = ax.plot(sizes, [line.points[s][index] for s in sizes], color=color,
                             marker=marker, markersize=4, linestyle=dashes,
                             linewidth=2.2 if line.label.startswith("collx") else 1.3,
                             label=line.label)
                handles.setdefault(line.label, h)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(FixedLocator(size_ticks(measured)))
            ax.xaxis.set_major_formatter(FuncFormatter(size_label))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.tick_params(axis="x", labelsize=8)
            ax.grid(True, which="major", alpha=0.4)
            ax.grid(True, which="minor", axis="y", alpha=0.3, linewidth=0.5)
            ax.set_xlabel("size (B)")
            ax.set_ylabel("%s (%s)" % (what, unit))
            panel = "%s (higher is better)" % what if index else "%s (lower is better)" % what
            ax.set_title(panel if not row_title else "%s: %s" % (row_title, panel), fontsize=10)
    fig.suptitle(title, fontsize=12, y=1 - 0.08 / height, va="top")
    if notes:
        fig.text(0.5, 1 - 0.42 / height, notes, ha="center", va="top", fontsize=8.5,
                 color="0.25")
    order = [label for label in labels if label in handles]
    fig.legend([handles[label] for label in order], order, loc="lower center", ncol=ncol,
               fontsize=9, frameon=False, bbox_to_anchor=(0.5, 0.05 / height))
    fig.tight_layout(rect=(0, bottom / height, 1, 1 - top / height), h_pad=1.2)
    save(fig, out)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read %s: %s" % (path, e))


def bench(out, paths):
    runs = [read_json(p) for p in paths]
    try:
        keys = [(r["collective"], r["P"], transport_of(r.get("transports", "")), r["dtype"],
                 r.get("op", ""), r["algorithm"]) for r in runs]
        collectives = {k[0] for k in keys}
        if len(collectives) != 1:
            fail("the runs are of different collectives (%s): one picture per collective" %
                 ", ".join(sorted(collectives)))
        differ = [len({k[i] for k in keys}) > 1 for i in range(5)]
        lines = {}
        for run, key in zip(runs, keys):
            # What tells this run's lines apart from the other runs' (the title has the rest).
            extra = []
            if differ[1]:
                extra.append("P=%d" % key[1])
            if differ[2]:
                extra.append(key[2])
            if differ[3]:
                extra.append(key[3])
            if differ[4]:
                extra.append(key[4])
            per_row = key[5] == "all"
            for row in run["results"]:
                name = row["algorithm"] if per_row else (
                    "default" if key[5].startswith("default") else key[5])
                label = name + (" (%s)" % ", ".join(extra) if extra else "")
                line = lines.setdefault(label, Line(label))
                line.add(int(row["size"]), float(row["time_us"]), float(row["busbw_gbps"]))
    except (KeyError, TypeError, ValueError) as e:
        fail("%s is not collx-bench's JSON (%s: %s)" % (", ".join(paths), type(e).__name__, e))
    parts = [keys[0][0]]
    if not differ[1]:
        parts.append("P=%d" % keys[0][1])
    if not differ[2]:
        parts.append(keys[0][2])
    reducing = keys[0][0] in ("allreduce", "reduce", "reduce_scatter")
    if not differ[3] and not differ[4] and reducing:
        parts.append("%s %s" % (keys[0][3], keys[0][4]))
    elif not differ[3]:
        parts.append(keys[0][3])
    draw(out, "collx-bench " + ", ".join(parts), [("", list(lines.values()))])


# run.sh's impl column -> the name in the legend, in the order of their colors (each keeps
# its color in every picture).
IMPL_NAMES = {"collx": "collx", "gloo": "Gloo", "mpich": "MPICH", "ompi": "Open MPI",
              "torch": "torch.distributed (gloo)", "base": "collx (BASE build)",
              # Debian 13's peers (run.sh's ONLY="mpi5 mpich42 gloo13")
              "gloo13": "Gloo (Debian 13)", "mpich42": "MPICH 4.2", "mpi5": "Open MPI 5"}


def bus_factor(collective, P):
    """busbw / algbw, as nccl-tests and collx-bench define it."""
    if collective == "allreduce":
        return 2.0 * (P - 1) / P
    if collective in ("broadcast", "reduce"):
        return 1.0
    if collective == "barrier":
        return 0.0
    return (P - 1) / P


def compare(out, paths, collective):
    groups = []  # (path, rows)
    for path in paths:
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as e:
            fail("cannot read %s: %s" % (path, e))
        groups.append((path, rows))
    try:
        present = sorted({r["collective"] for _, rows in groups for r in rows})
        if not collective:
            if len(present) != 1:
                fail("the files hold %s: name one with --collective" %
                     (", ".join(present) if present else "no results"))
            collective = present[0]
        panels = []
        transports = []
        rounds = 1
        for path, rows in groups:
            mine = [r for r in rows if r["collective"] == collective and
                    r["correct"] in ("1", "na")]
            # The run's transport is collx's (run.sh's TRANSPORT); each peer's is in its label.
            group = "/".join(sorted({r["transport"] for r in mine if r["impl"] in
                                     ("collx", "base")})) or os.path.basename(path)
            transports.append(group)
            for P in sorted({int(r["P"]) for r in mine}):
                lines = {}
                best = {}  # (label, size) -> round -> the best algorithm's time in it
                for r in (r for r in mine if int(r["P"]) == P):
                    impl = r["impl"]
                    transport = r["transport"].replace("gloo-", "")  # torch's "gloo-tcp"
                    label = "%s over %s" % (IMPL_NAMES.get(impl, impl), transport)
                    line = lines.setdefault(label, Line(label))
                    line.impl, line.transport = impl, transport
                    t = float(r["time_us"])
                    if t > 0:
                        times = best.setdefault((label, int(r["bytes"])), {})
                        key = r.get("round") or ""
                        times[key] = min(t, times.get(key, t))
                for (label, size), times in best.items():
                    # busbw from bytes and time: the peers' CSVs round it to 4 decimals.
                    lines[label].add_rounds(size, [
                        (t, size / (t * 1e3) * bus_factor(collective, P)) for t in times.values()])
                    rounds = max(rounds, len(times))
                # collx first, then the peers by name: the same colors in every panel.
                order = sorted(lines, key=lambda l: (not l.startswith("collx"), l))
                title = "P=%d" % P if len(groups) == 1 else "%s, P=%d" % (group, P)
                panels.append((title, [lines[l] for l in order]))
    except (KeyError, ValueError) as e:
        fail("%s is not run.sh's results.csv (%s: %s)" % (", ".join(paths), type(e).__name__, e))
    if not panels:
        fail("no correct %s results in %s" % (collective, ", ".join(paths)))
    # Each implementation keeps its color in every picture; over a second transport, dashed.
    seen = {}
    for _, lines in panels:
        for line in lines:
            seen.setdefault(line.impl, set()).add(line.transport)
    for _, lines in panels:
        for line in lines:
            if line.impl in IMPL_NAMES:
                first = sorted(seen[line.impl])[0]
                line.style = (list(IMPL_NAMES).index(line.impl),
                              "-" if line.transport == first else "--")
    title = "%s, float32: collx against its peers (collx over %s)" % (
        collective, ", ".join(transports))
    if rounds > 1:
        notes = ("lines: the median over %d rounds of each implementation's best algorithm in "
                 "the round; shaded: its fastest to its slowest round; time = max over ranks "
                 "of the median call" % rounds)
    else:
        notes = ("each implementation's best algorithm per size; time = max over ranks of the "
                 "median call")
    draw(out, title, panels, notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that matplotlib imports")
    ap.add_argument("mode", nargs="?", choices=("bench", "compare"),
                    help="what the inputs are: collx-bench's JSON, or run.sh's CSV")
    ap.add_argument("out", nargs="?", help="the picture to write: .png or .svg")
    ap.add_argument("inputs", nargs="*", help="collx-bench JSON (bench) or run.sh CSV (compare)")
    ap.add_argument("--collective", default="", help="compare: the collective to draw")
    ap.add_argument("--base-label", default="",
                    help="compare: the legend's name for run.sh's base (default: collx (BASE "
                         "build))")
    a = ap.parse_args()
    if a.check:
        load_matplotlib()
        return 0
    if not a.mode or not a.out or not a.inputs:
        ap.error("expected a mode (bench or compare), the picture to write and its inputs")
    if os.path.splitext(a.out)[1].lower() not in FORMATS:
        ap.error("%s: the picture's format follows its extension: .png or .svg" % a.out)
    if a.base_label:
        IMPL_NAMES["base"] = a.base_label
    if a.mode == "bench":
        bench(a.out, a.inputs)
    else:
        compare(a.out, a.inputs, a.collective)
    return 0


if __name__ == "__main__":
    sys.exit(main())
