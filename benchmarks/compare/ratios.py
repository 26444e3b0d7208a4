"""Ratio table from run.sh's CSV: per P and size, collx's time against each peer's best
algorithm (peer time / collx time: above 1 means collx is faster), from each one's best
round; and, when the CSV has rounds (a `round` column: run.sh's PER_SIZE=1 runs every
implementation of a size back to back in each round), the median over rounds of the ratio
within each round, with its lowest and highest. Every implementation in the CSV's impl
column gets its columns (Debian 13's mpi5, mpich42 and gloo13 among them). Headed by the
machine of run.sh's machine.txt beside the CSV: CPU model, core count, date."""
import csv
import os
import statistics
import sys
from collections import defaultdict

path, coll = sys.argv[1], sys.argv[2]


def machine(csv_path):
    """'machine: CPU, N cores, date' from run.sh's machine.txt beside the CSV."""
    info = {}
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(csv_path)), "machine.txt")) as f:
            for line in f:
                key, sep, value = line.partition(": ")
                if sep and key in ("cpu", "cores", "date") and key not in info:
                    info[key] = value.strip()
    except OSError:
        return "machine: not recorded (no machine.txt beside the CSV)"
    cores = info.get("cores", "?").split(" ")[0]
    date = info.get("date", "?").replace(" (start)", "")
    return f"machine: {info.get('cpu', 'unknown CPU')}, {cores} cores; run of {date}"


print(machine(path) + "\n")
best = defaultdict(dict)  # (P, bytes) -> impl -> (time, algorithm)
rounds = defaultdict(lambda: defaultdict(dict))  # (P, bytes) -> round -> impl -> best time
for row in csv.DictReader(open(path)):
    # (a barrier has nothing to check: "na")
    if row["collective"] != coll or row["correct"] not in ("1", "na"):
        continue
    key = (int(row["P"]), int(row["bytes"]))
    impl = row["impl"] + "/" + row["transport"]
    t = float(row["time_us"])
    if impl not in best[key] or t < best[key][impl][0]:
        best[key][impl] = (t, row["algorithm"])
    r = row.get("round") or ""
    if r:
        seen = rounds[key][r]
        seen[impl] = min(t, seen.get(impl, t))


def paired(key, peer):
    """The median, lowest and highest over rounds of peer / collx within a round."""
    ratios = []
    for times in rounds[key].values():
        c = next((times[i] for i in times if i.startswith("collx/")), None)
        if c and peer in times:
            ratios.append(times[peer] / c)
    if len(ratios) < 2:
        return "-"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


impls = sorted({i for v in best.values() for i in v if not i.startswith("collx")})
has_rounds = any(len(v) > 1 for v in rounds.values())
print(f"# {coll}: time in us (best algorithm of each peer), and peer/collx (>1: collx faster)\n")
header = ["P", "bytes", "collx"] + impls + [f"{i} / collx" for i in impls]
if has_rounds:
    header += [f"{i} / collx by round" for i in impls]
print("| " + " | ".join(header) + " |")
print("|" + "---|" * len(header))
for (P, b) in sorted(best):
    row = best[(P, b)]
    c = next((row[i] for i in row if i.startswith("collx/")), None)
    if not c:
        continue
    cells = [f"{row[i][0]:.1f} ({row[i][1]})" if i in row else "-" for i in impls]
    ratios = [f"{row[i][0] / c[0]:.2f}" if i in row else "-" for i in impls]
    if has_rounds:
        ratios += [paired((P, b), i) for i in impls]
    print("| " + " | ".join([str(P), str(b), f"{c[0]:.1f}"] + cells + ratios) + " |")
