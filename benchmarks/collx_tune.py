#!/usr/bin/python3
"""collx-tune: measures every algorithm of each collective on this machine and writes the
rules file collx then chooses from.

For each transport (shm: the ranks over shared memory; tcp: over loopback TCP), each P and
each collective, it runs `collx-run -n P -- collx-bench -c COLL -a all --interleave` over
the sizes (every algorithm at a size before the next size), once per round, and keeps per point (transport, P, collective, size) the algorithm with the
lowest median time over the rounds. Those choices become the rows of a rules file in the
schema COLLX_RULES reads (algorithms/include/collx/algorithms/selection.h):
  - a row per run of sizes with the same choice; a size between two measured ones takes the
    nearer one's choice (the boundary is their geometric mean); above the largest, the
    largest's;
  - a P between two measured ones takes the lower one's choice; beyond the largest measured
    P, and at P=1, the built-in table decides;
  - "shared_memory": true for what shm measured, false for tcp (ibverbs, which this machine
    may not have, takes tcp's choice);
  - "max_hosts": 1: one host measured it; a job across hosts keeps the host rule.
By default the file goes where collx looks for one (COLLX_RULES unset):
$XDG_CONFIG_HOME/collx/rules.json, else ~/.config/collx/rules.json.

It then prints the regret table: at every point, the time of what collx would pick divided
by the time of the fastest algorithm there, for the built-in table, for what
COLLX_SELECTION=learn learned in a run of 160 calls per size, and for the tuned rules.
The tuned rules' regret is held out: with R >= 2 rounds, round r is judged by a choice made
from the other rounds only (what a new run of the same machine would see); with 1 round it
would be 1.00 by construction, and is not shown. A built-in or learned regret above 1.05
whose pick was slower than the fastest algorithm in every round is marked "*" and listed:
a loss the run's own noise does not explain. It draws what it measured
(collx_plot.py: busbw and time against size, a line per algorithm) unless --plot none.

On a terminal it shows its progress on stderr: point k of n, elapsed, left.
Exit codes: 0 written; 1 a run failed (its output is shown); 2 bad arguments.
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Collectives whose rows cannot split by size (selection.h: their bytes are 0, or differ
# between ranks): one choice per P, the algorithm with the lowest mean ratio to the best.
SIZELESS = {"barrier", "alltoallv", "gatherv", "scatterv"}
# Their rows match the bytes of one rank's block, collx-bench's sizes are the whole buffer.
PER_BLOCK = {"gather", "scatter", "alltoall"}
DEFAULT_SIZES = "4,64,1K,4K,16K,64K,256K,1M,4M,16M"


def fail(message, code=2):
    sys.stderr.write("collx-tune: %s\n" % message)
    sys.exit(code)


def parse_bytes(text):
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text and text[-1].upper() in scale:
            return int(text[:-1]) * scale[text[-1].upper()]
        return int(text)
    except ValueError:
        fail("not a size: %r (a number of bytes, or with a K, M or G suffix)" % text)


def default_output():
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "collx", "rules.json")
    return os.path.join(os.path.expanduser("~"), ".config", "collx", "rules.json")


def tool(name):
    """collx-run, collx-bench: beside this script (bin/), else on PATH."""
    path = os.path.join(HERE, name)
    if os.access(path, os.X_OK):
        return path
    found = shutil.which(name)
    if not found:
        fail("cannot find %s beside %s or on PATH" % (name, HERE), 1)
    return found


def algorithms_of():
    out = subprocess.run([tool("collx-bench"), "-a", "list"], capture_output=True, text=True,
                         check=True).stdout
    algos = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            algos.setdefault(parts[0], []).append(parts[1])
    return algos


class Progress:
    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()

    @staticmethod
    def human(seconds):
        seconds = int(seconds)
        return "%ds" % seconds if seconds < 60 else "%dm%02ds" % (seconds // 60, seconds % 60)

    def step(self, what):
        self.done += 1
        if not self.tty:
            return
        elapsed = time.monotonic() - self.start
        left = "?"
        if self.done > 1:
            left = "~" + self.human(elapsed * (self.total - self.done + 1) / (self.done - 1))
        sys.stderr.write("\rcollx-tune: point %d of %d (%s), elapsed %s, left %s\033[K" %
                         (self.done, self.total, what, self.human(elapsed), left))
        sys.stderr.flush()

    def clear(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def run_bench(args, transport, p, coll, sizes, json_path, algorithm="all", rules=None):
    env = dict(os.environ)
    env["COLLX_TRANSPORT"] = "tcp" if transport == "tcp" else "auto"
    env["COLLX_RULES"] = rules or "none"
    cmd = [tool("collx-run"), "-n", str(p), "--timeout", args.run_timeout, "--",
           tool("collx-bench"), "-c", coll, "--sizes", ",".join(str(s) for s in sizes),
           "--json", json_path]
    if algorithm == "all":
        cmd += ["-a", "all", "--interleave", "--min-time", str(args.min_time)]
    else:
        # Which algorithm the table picks (the algo column), and what COLLX_SELECTION=learn
        # learns in 160 calls of each size (rank 0's debug log: "... (from learned)").
        cmd += ["-n", "160", "-w", "0", "--no-check"]
        env["COLLX_SELECTION"] = "learn"
        env["COLLX_LOG_LEVEL"] = "warn,collx.algo=debug"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write("\n" + done.stdout + done.stderr[-5000:])
        fail("%s at P=%d over %s failed (exit %d): %s" %
             (coll, p, transport, done.returncode, " ".join(cmd)), 1)
    with open(json_path) as f:
        doc = json.load(f)
    doc["learned"] = {}
    for m in re.finditer(r"rank 0: (\w+) of (\d+) bytes over \d+ ranks: (\w+) \(from learned\)",
                         done.stderr):
        if m.group(1) == coll:
            doc["learned"][int(m.group(2))] = m.group(3)
    return doc


def selection_bytes(coll, size, p):
    return size // p if coll in PER_BLOCK else size


def best(times):
    """The algorithm with the lowest time, of {algorithm: time}."""
    return min(times, key=lambda a: (times[a], a))


def choose(measured, rounds):
    """{algorithm: [time per round]} -> the algorithm with the lowest median over `rounds`."""
    medians = {a: statistics.median(t[r] for r in rounds) for a, t in measured.items()}
    return best(medians)


def choose_sizeless(points, rounds):
    """[{algorithm: [times]}] over sizes -> the lowest geometric mean ratio to the best."""
    score = {}
    for measured in points:
        medians = {a: statistics.median(t[r] for r in rounds) for a, t in measured.items()}
        fastest = min(medians.values())
        for a, m in medians.items():
            score.setdefault(a, []).append(math.log(m / fastest) if fastest > 0 else 0.0)
    return min(score, key=lambda a: (sum(score[a]) / len(score[a]), a))


def bands(sizes, picks):
    """Measured sizes and their picks -> [(min_bytes, max_bytes or None, algorithm)] merged."""
    rows = []
    for i, (size, algo) in enumerate(zip(sizes, picks)):
        low = 0 if i == 0 else int(math.sqrt(sizes[i - 1] * size)) + 1
        high = None if i == len(sizes) - 1 else int(math.sqrt(size * sizes[i + 1]))
        if rows and rows[-1][2] == algo:
            rows[-1] = (rows[-1][0], high, algo)
        else:
            rows.append((low, high, algo))
    return rows


def main():
    parser = argparse.ArgumentParser(
        prog="collx-tune", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("-n", "--ranks", default=None,
                        help="the P to measure, e.g. 2,4,8 (default: 2, 4, and doubling up to "
                        "this machine's CPUs)")
    parser.add_argument("-c", "--collectives", default=None,
                        help="default: every collective with more than one algorithm")
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help="collx-bench's sizes (default %(default)s)")
    parser.add_argument("-t", "--transports", default="shm,tcp",
                        help="shm, tcp or both (default %(default)s)")
    parser.add_argument("-r", "--rounds", type=int, default=3,
                        help="runs of every point; 2 or more also give the tuned rules' "
                        "held-out regret (default %(default)s)")
    parser.add_argument("--min-time", type=float, default=0.03,
                        help="seconds per algorithm and size in a run (default %(default)s)")
    parser.add_argument("-o", "--output", default=None,
                        help="the rules file (default: %s)" % default_output())
    parser.add_argument("--plot", default=None,
                        help="the pictures, .png or .svg, one per collective: PLOT's name with "
                        "_COLLECTIVE added (default: beside the rules file, collx-tune.png; "
                        "none: no picture)")
    parser.add_argument("--results", default=None,
                        help="keep every run's JSON and a measurements.json in this folder "
                        "(default: beside the rules file, collx-tune-results/)")
    parser.add_argument("--run-timeout", default="600s",
                        help="collx-run --timeout for each run (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would run and how many points, run nothing")
    args = parser.parse_args()

    algos = algorithms_of()
    if args.collectives:
        colls = [c.strip() for c in args.collectives.split(",") if c.strip()]
        for c in colls:
            if c not in algos:
                fail("unknown collective %r (valid: %s)" % (c, ", ".join(algos)))
    else:
        colls = [c for c, a in algos.items() if len(a) > 1]
    if args.ranks:
        try:
            ranks = sorted({int(p) for p in args.ranks.split(",")})
        except ValueError:
            fail("--ranks takes numbers, e.g. 2,4,8, not %r" % args.ranks)
        if ranks[0] < 2:
            fail("--ranks: every P must be at least 2")
    else:
        ranks, p = [], 2
        while p <= max(4, os.cpu_count() or 1):
            ranks.append(p)
            p *= 2
    sizes = sorted({parse_bytes(s) for s in args.sizes.split(",") if s.strip()})
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    for t in transports:
        if t not in ("shm", "tcp"):
            fail("unknown transport %r (shm, tcp)" % t)
    if args.rounds < 1:
        fail("--rounds must be at least 1")
    output = os.path.abspath(args.output or default_output())
    outdir = os.path.dirname(output)
    plot = args.plot or os.path.join(outdir, "collx-tune.png")
    results = os.path.abspath(args.results or os.path.join(outdir, "collx-tune-results"))

    runs = [(r, t, p, c) for r in range(args.rounds) for t in transports for p in ranks
            for c in colls]
    if args.dry_run:
        print("collx-tune: %d runs (%d rounds x transports %s x P %s x %d collectives), "
              "sizes %s; rules to %s" % (len(runs), args.rounds, ",".join(transports),
                                         ",".join(map(str, ranks)), len(colls),
                                         ",".join(map(str, sizes)), output))
        return 0
    os.makedirs(results, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    started = time.monotonic()
    progress = Progress(len(runs) + len(transports) * len(ranks) * len(colls))
    # measured[(t, p, c, size)][algorithm] = [time per round]
    measured = {}
    for r, t, p, c in runs:
        progress.step("round %d, %s, P=%d, %s" % (r + 1, t, p, c))
        path = os.path.join(results, "%s_p%d_%s_r%d.json" % (t, p, c, r + 1))
        doc = run_bench(args, t, p, c, sizes, path)
        for row in doc["results"]:
            key = (t, p, c, row["size"])
            measured.setdefault(key, {}).setdefault(row["algorithm"], [None] * args.rounds)
            measured[key][row["algorithm"]][r] = row["time_us"]
    # What the built-in table picks, per point.
    builtin, learned = {}, {}
    for t in transports:
        for p in ranks:
            for c in colls:
                progress.step("the built-in table's and learning's choices, %s, P=%d, %s" %
                              (t, p, c))
                path = os.path.join(results, "%s_p%d_%s_builtin.json" % (t, p, c))
                doc = run_bench(args, t, p, c, sizes, path, algorithm="default")
                for row in doc["results"]:
                    builtin[(t, p, c, row["size"])] = row["algorithm"]
                    if c in SIZELESS:
                        pick = next(iter(doc["learned"].values()), None)
                    else:
                        pick = doc["learned"].get(selection_bytes(c, row["size"], p))
                    if pick:
                        learned[(t, p, c, row["size"])] = pick
    progress.clear()
    # Keep only algorithms measured in every round (one that failed to run is left out).
    for key in measured:
        measured[key] = {a: v for a, v in measured[key].items() if None not in v}
    every = list(range(args.rounds))

    # The rules.
    doc = {}
    for c in colls:
        rows = []
        for t in transports:
            for i, p in enumerate(ranks):
                pmax = ranks[i + 1] - 1 if i + 1 < len(ranks) else p
                points = [s for s in sizes if measured.get((t, p, c, s))]
                if not points:
                    continue
                base = {"min_ranks": p, "max_ranks": pmax, "max_hosts": 1,
                        "shared_memory": t == "shm"}
                if c in SIZELESS:
                    algo = choose_sizeless([measured[(t, p, c, s)] for s in points], every)
                    rows.append(dict(base, algorithm=algo))
                    continue
                picks = [choose(measured[(t, p, c, s)], every) for s in points]
                sel = [selection_bytes(c, s, p) for s in points]
                for low, high, algo in bands(sel, picks):
                    row = dict(base)
                    if low > 0:
                        row["min_bytes"] = low
                    if high is not None:
                        row["max_bytes"] = high
                    row["algorithm"] = algo
                    rows.append(row)
        if rows:
            doc[c] = rows
    # One rule per line, as people write them.
    text = "{\n" + ",\n".join(
        '  "%s": [\n%s\n  ]' % (c, ",\n".join("    " + json.dumps(row) for row in rows))
        for c, rows in doc.items()) + "\n}\n"
    tmp = output + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, output)
    with open(os.path.join(results, "measurements.json"), "w") as f:
        json.dump([{"transport": t, "P": p, "collective": c, "size": s, "times_us": v,
                    "builtin": builtin.get((t, p, c, s))}
                   for (t, p, c, s), v in sorted(measured.items())], f, indent=1)

    # The regret table.
    print("collx-tune: regret, the time of what collx picks / the fastest algorithm's, per "
          "point (median over %d round(s))" % args.rounds)
    heldout = args.rounds >= 2
    print("| transport | P | collective | size | fastest | built-in picks | built-in regret | "
          "learned | learned regret |" + (" tuned regret (held out) |" if heldout else ""))
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if heldout else ""))
    worst = {"builtin": 1.0, "tuned": 1.0, "learned": 1.0}
    counts = {"points": 0, "builtin": 0, "tuned": 0, "learned": 0}
    # Above 1.05 and slower than the fastest in every round: a loss this run's noise does
    # not explain (with 5 rounds, equal algorithms do that 1 time in 32), marked "*".
    clear = {"builtin": [], "learned": []}

    def beyond_noise(times, pick, fastest, regret):
        return (heldout and regret > 1.05 and pick != fastest and
                all(times[pick][r] > times[fastest][r] for r in every))
    for (t, p, c, s), times in sorted(measured.items()):
        if not times:
            continue
        medians = {a: statistics.median(v) for a, v in times.items()}
        fastest = best(medians)
        pick = builtin.get((t, p, c, s))
        regret = medians[pick] / medians[fastest] if pick in medians else float("nan")
        counts["points"] += 1
        got = learned.get((t, p, c, s))
        learned_regret = medians[got] / medians[fastest] if got in medians else float("nan")
        cells = [t, str(p), c, str(s), fastest]
        for who, algo, value in (("builtin", pick, regret), ("learned", got, learned_regret)):
            mark = ""
            if value == value:
                worst[who] = max(worst[who], value)
                counts[who] += value > 1.05
                if beyond_noise(times, algo, fastest, value):
                    clear[who].append("%s P=%d %s %d: %s %.2f" % (t, p, c, s, algo, value))
                    mark = "*"
            cells += [algo or "?", "%.2f%s" % (value, mark)]
        if heldout:
            ratios = []
            for r in every:
                others = [o for o in every if o != r]
                chosen = choose(times, others)
                ratios.append(times[chosen][r] / min(v[r] for v in times.values()))
            held = statistics.median(ratios)
            worst["tuned"] = max(worst["tuned"], held)
            counts["tuned"] += held > 1.05
            cells.append("%.2f" % held)
        print("| " + " | ".join(cells) + " |")
    print("collx-tune: worst regret: built-in %.2f, learned %.2f%s" %
          (worst["builtin"], worst["learned"],
           ", tuned %.2f (held out)" % worst["tuned"] if heldout else ""))
    print("collx-tune: points above 1.05 of %d: built-in %d, learned %d%s" %
          (counts["points"], counts["builtin"], counts["learned"],
           ", tuned %d (held out)" % counts["tuned"] if heldout else ""))
    if heldout:
        print("collx-tune: of those, slower than the fastest in every one of %d rounds (*): "
              "built-in %d, learned %d" % (args.rounds, len(clear["builtin"]),
                                           len(clear["learned"])))
        for line in clear["builtin"]:
            print("collx-tune:   built-in %s" % line)
    if plot != "none":
        # One picture per collective (collx_plot.py draws one collective at a time), of the
        # first round: a line per algorithm, transport and P.
        script = os.path.join(HERE, "..", "share", "collx", "collx_plot.py")
        if not os.path.exists(script):
            script = os.path.join(HERE, "plot", "collx_plot.py")
        stem, ext = os.path.splitext(plot)
        for c in colls:
            if c in SIZELESS:
                continue  # (no sizes to draw against)
            picture = "%s_%s%s" % (stem, c, ext or ".png")
            mine = [os.path.join(results, "%s_p%d_%s_r1.json" % (t, p, c))
                    for t in transports for p in ranks]
            drawn = subprocess.run([sys.executable, script, "bench", picture] + mine,
                                   capture_output=True, text=True)
            if drawn.returncode != 0:
                sys.stderr.write("collx-tune: no picture of %s (%s)\n" %
                                 (c, drawn.stderr.strip() or "collx_plot.py failed"))
                break
            print("collx-tune: the picture of %s: %s" % (c, picture))
    print("collx-tune: %d rules for %d collectives to %s in %s (measurements: %s)" %
          (sum(len(v) for v in doc.values()), len(doc), output,
           Progress.human(time.monotonic() - started), results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
