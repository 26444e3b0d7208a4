"""Ratio table from run.sh's CSV: per P and size, collx's time against each peer's best
algorithm (peer time / collx time: above 1 means collx is faster), from each one's best
round; and, when the CSV has rounds (a `round` column: run.sh's PER_SIZE=1 runs every
implementation of a size back to back in each round), the median over rounds of the ratio
within each round, with its lowest and highest."""
import csv
import statistics
import sys
from collections import defaultdict

path, coll = sys.argv[1], sys.argv[2]
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
    print(f"| {P} | {b} | {c[0]:.1f} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
