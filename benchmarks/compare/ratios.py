"""Ratio table from run.sh's CSV: per P and size, collx's time against each peer's best
algorithm (peer time / collx time: above 1 means collx is faster)."""
import csv
import sys
from collections import defaultdict

path, coll = sys.argv[1], sys.argv[2]
best = defaultdict(dict)  # (P, bytes) -> impl -> (time, algorithm)
for row in csv.DictReader(open(path)):
    # (a barrier has nothing to check: "na")
    if row["collective"] != coll or row["correct"] not in ("1", "na"):
        continue
    key = (int(row["P"]), int(row["bytes"]))
    impl = row["impl"] + "/" + row["transport"]
    t = float(row["time_us"])
    if impl not in best[key] or t < best[key][impl][0]:
        best[key][impl] = (t, row["algorithm"])
impls = sorted({i for v in best.values() for i in v if not i.startswith("collx")})
print(f"# {coll}: time in us (best algorithm of each peer), and peer/collx (>1: collx faster)\n")
print("| P | bytes | collx | " + " | ".join(impls) + " | " + " | ".join(f"{i} / collx" for i in impls) + " |")
print("|" + "---|" * (3 + 2 * len(impls)))
for (P, b) in sorted(best):
    row = best[(P, b)]
    c = next((row[i] for i in row if i.startswith("collx/")), None)
    if not c:
        continue
    cells = [f"{row[i][0]:.1f} ({row[i][1]})" if i in row else "-" for i in impls]
    ratios = [f"{row[i][0] / c[0]:.2f}" if i in row else "-" for i in impls]
    print(f"| {P} | {b} | {c[0]:.1f} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
