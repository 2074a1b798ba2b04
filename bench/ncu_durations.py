#!/usr/bin/env python3
"""Kernel by kernel durations from Nsight Compute's CSV (`ncu --csv --page details --section
SpeedOfLight`): one line a launch in launch order (duration, grid, block, name), then the launches
summed by kernel name, longest first. Used by bench/run-gpu.sh's DSV4_GPU_NCU_STEP."""
import collections
import csv
import sys


def main(path):
    rows = []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are not CSV
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "Duration":
            continue
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}
        us = float(r["Metric Value"].replace(",", "")) * scale.get(r["Metric Unit"], 1.0)
        name = r["Kernel Name"].replace("void ", "").replace("(anonymous namespace)::", "")
        name = name.replace("<unnamed>::", "").replace("dsv4::", "").replace("cuda::", "").split("(")[0]
        rows.append((int(r["ID"]), name, r["Grid Size"], r["Block Size"], us))
    total = sum(r[4] for r in rows)
    print(f"{len(rows)} launches, {total:.1f} us of kernel time (each launch alone, serialized by ncu)")
    for i, name, grid, block, us in rows:
        print(f"  {i:5} {us:9.2f} us  grid {grid:>16} block {block:>12}  {name}")
    by = collections.defaultdict(lambda: [0, 0.0])
    for _, name, _, _, us in rows:
        by[name][0] += 1
        by[name][1] += us
    print("by kernel:")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"  {us:9.1f} us  {n:4} launches  {us / n:8.2f} us each  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
