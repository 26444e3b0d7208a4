#!/usr/bin/python3
"""Many ranks on one host: the time from launch to the first collective, and what a rank
costs, at P = 64, 128, 256, 512 (by default).

Per P and round: `collx-run -n P -- collx-bench --stamp -c barrier --sizes 0 -n 1 -w 0
--no-check` (start the store, spawn P ranks, join, connect every pair, one 4-byte allreduce
that rank 0 stamps with the wall clock, a barrier, leave). The clock starts just before
collx-run is started; "first" is rank 0's stamp, "exit" collx-run's end.

Then, at the largest P, one job that stays up (a 1 MiB allreduce for a few seconds): once
its first collective returned, every rank's resident memory (RSS, and PSS: its share of
pages that ranks share, such as the libraries and the shared-memory arena), descriptors
and threads, read from /proc, and the bytes of collx's files in /dev/shm.

    benchmarks/compare/scale_start.py [BUILD_DIR] [--ps 64,128,256,512] [--rounds 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def status_of(pid):
    """/proc's status fields and the count of descriptors (cheap), or None once it ended."""
    fields = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        fields["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None
    return fields


def pss_of(pid, fields):
    """Adds Pss (smaps_rollup: slow, it walks the mappings); False once it ended."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    fields["Pss"] = line.split(":")[1].strip()
    except OSError:
        return False
    return "Pss" in fields


def kib(text):
    return int(text.split()[0])


def shm_bytes():
    total = 0
    for name in os.listdir("/dev/shm"):
        if "collx" in name:
            try:
                total += os.stat(os.path.join("/dev/shm", name)).st_blocks * 512
            except OSError:
                pass
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?",
                        default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    parser.add_argument("--ps", default="64,128,256,512")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", default="600s", help="collx-run --timeout")
    args = parser.parse_args()
    bindir = os.path.join(os.path.abspath(args.build), "bin")
    run = os.path.join(bindir, "collx-run")
    bench = os.path.join(bindir, "collx-bench")
    ps = [int(p) for p in args.ps.split(",")]
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print("# %s, %d CPUs, %s" % (cpu, os.cpu_count(), time.strftime("%Y-%m-%d %H:%M")))
    print("| P | launch to first collective (s) | launch to exit (s) |")
    print("|---|---|---|")
    for p in ps:
        first, whole = [], []
        for _ in range(args.rounds):
            start = time.time()
            done = subprocess.run([run, "-n", str(p), "--timeout", args.timeout, "--", bench,
                                   "--stamp", "-c", "barrier", "--sizes", "0", "-n", "1", "-w",
                                   "0", "--no-check"], capture_output=True, text=True)
            end = time.time()
            if done.returncode != 0:
                sys.stderr.write(done.stdout[-2000:] + done.stderr[-4000:])
                sys.exit("scale_start.py: P=%d failed (exit %d)" % (p, done.returncode))
            stamp = re.search(r"first collective returned at ([0-9.]+)", done.stdout)
            first.append(float(stamp.group(1)) - start)
            whole.append(end - start)
        print("| %d | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) |" %
              (p, statistics.median(first), min(first), max(first), statistics.median(whole),
               min(whole), max(whole)))
        sys.stdout.flush()
    # What a rank costs at the largest P.
    p = ps[-1]
    job = subprocess.Popen([run, "-n", str(p), "--timeout", args.timeout, "--", bench,
                            "--stamp", "-c", "allreduce", "--sizes", "1M", "--min-time", "10",
                            "--no-check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    for line in job.stdout:
        if "first collective returned" in line:
            break
    time.sleep(1.0)
    # Every rank's cheap fields first, then PSS: reading smaps_rollup of 512 ranks that share
    # 2 CPUs took longer than the job, and ranks read late had ended (168 of 512 read on
    # 2026-12-06, their descriptors closed).
    pids = children(job.pid)
    read = [(c, s) for c, s in ((c, status_of(c)) for c in pids) if s]
    ranks = [s for _, s in read]
    shm = shm_bytes()
    launcher = status_of(job.pid)
    pss = [s for c, s in read if pss_of(c, s)]
    job.communicate()
    if job.returncode != 0 or not ranks:
        sys.exit("scale_start.py: the job at P=%d failed (exit %s)" % (p, job.returncode))
    med = lambda key, f=kib, of=ranks: statistics.median(f(r[key]) for r in of)  # noqa: E731
    print("\nper rank at P=%d (%d ranks read, median): RSS %.1f MiB, PSS %.1f MiB (%d ranks), "
          "%d descriptors, %d threads; /dev/shm (collx): %.1f MiB in all, %.2f MiB per rank; "
          "collx-run: RSS %.1f MiB, %d descriptors" %
          (p, len(ranks), med("VmRSS") / 1024,
           med("Pss", of=pss) / 1024 if pss else float("nan"), len(pss), med("fds", int),
           med("Threads", int), shm / 2**20, shm / 2**20 / p,
           kib(launcher["VmRSS"]) / 1024 if launcher else -1,
           launcher["fds"] if launcher else -1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
