"""Ratio table from run.sh's CSV: per P and size, collx's time against each peer's best
algorithm (peer time / collx time: above 1 means collx is faster), from each one's best
round; and, when the CSV has rounds (a `round` column: run.sh's PER_SIZE=1 runs every
implementation of a size back to back in each round), the median over rounds of the ratio
within each round, with its lowest and highest. Every implementation in the CSV's impl
column gets its columns (Debian 13's mpi5, mpich42 and gloo13 among them). Headed by the
machine of run.sh's machine.txt beside the CSV: CPU model, core count, date.

For allreduce, when run.sh measured this machine's limits in the same run (limits.txt beside
the CSV), a last column gives the fraction of them collx reaches: the time the limits allow /
collx's time. Over shared memory the limits allow 2 (P-1)/P n bytes copied at memcpy's rate
plus (P-1)/P of the vector's elements reduced at the reduce loop's rate (both single-core,
memory to memory: a vector in cache can beat them, above 1; from 16 KiB up); over TCP,
2 (P-1)/P n bytes each way at the loopback exchange's rate with the reduction fused
(tcp_exchange reduce=1).
Each limit is the median of its rounds."""
import csv
import os
import re
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


def limits(csv_path):
    """This run's limits from limits.txt beside the CSV: medians over its rounds of memcpy's
    copy rate (B/s), the reduce loop's float32 rate (elements/s) and the TCP exchange's rate
    each way with the reduction fused (B/s); the ones not measured are left out."""
    found = defaultdict(list)
    patterns = {
        "copy": r"^memcpy_bw: .* median ([0-9.]+) GB/s copied",
        "reduce": r"^reduce_bw(?:_native)?: .* ([0-9.]+) Gelem/s",
        "tcp": r"^tcp_exchange: .* reduce=1 .*\(([0-9.]+) GB/s each way\)",
    }
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(csv_path)), "limits.txt")) as f:
            for line in f:
                for name, pattern in patterns.items():
                    m = re.search(pattern, line)
                    if m:
                        found[name].append(float(m.group(1)) * 1e9)
    except OSError:
        pass
    return {name: statistics.median(values) for name, values in found.items()}


def allowed_us(lim, transport, P, n):
    """The time (us) the limits allow an allreduce of n float32 bytes at P, or None."""
    share = (P - 1) / P
    if transport == "tcp":
        return 2 * share * n / lim["tcp"] * 1e6 if "tcp" in lim else None
    if "copy" in lim and "reduce" in lim:
        return (2 * share * n / lim["copy"] + share * n / 4 / lim["reduce"]) * 1e6
    return None


print(machine(path) + "\n")
lim = limits(path) if coll == "allreduce" else {}
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
if lim:
    header += ["collx of the limits"]
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
    if lim:
        transport = next(i for i in row if i.startswith("collx/")).split("/", 1)[1]
        allowed = allowed_us(lim, transport, P, b)
        # (below 16 KiB a call is latency, which bandwidth limits say nothing about)
        ratios.append(f"{allowed / c[0]:.2f}" if allowed and b >= 16384 else "-")
    print("| " + " | ".join([str(P), str(b), f"{c[0]:.1f}"] + cells + ratios) + " |")
