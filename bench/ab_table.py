#!/usr/bin/env python3
"""A change against its base, from bench/run-gpu.sh's DSV4_GPU_AB runs: the logs ab-RUN-SIDE-ROUND.log
(SIDE base or new, rounds in turn) of `dsv4 bench step`, whose lines "decode batch B context C: X ms",
"mixed batch B context C + a N-token chunk at P: X ms" and "prefill N: X ms" give each row's time. One table
row per (run, row): every round's base and new time in order, and new - base over the rounds' means."""
import collections
import pathlib
import re
import sys

ROW = re.compile(r"((?:decode|mixed) batch \d+ context \d+(?: \+ a \d+-token chunk(?: at \d+)?)?|prefill \d+): ([0-9.]+) ms")
LOG = re.compile(r"ab-(\d+)-(base|new)-(\d+)\.log$")


def read(folder):
    """{(run, row): {side: [ms by round]}} from the folder's A/B logs."""
    times = collections.defaultdict(lambda: {"base": {}, "new": {}})
    for path in sorted(pathlib.Path(folder).glob("ab-*.log")):
        m = LOG.search(path.name)
        if not m:
            continue
        run, side, rnd = int(m.group(1)), m.group(2), int(m.group(3))
        for line in path.read_text(errors="replace").splitlines():
            r = ROW.search(line)
            if r:
                times[(run, r.group(1))][side][rnd] = float(r.group(2))
    return {k: {s: [v[s][i] for i in sorted(v[s])] for s in v} for k, v in times.items()}


def table(times):
    lines = ["| run | row | base ms | new ms | new - base |", "|---:|---|---|---|---:|"]
    for (run, row), sides in sorted(times.items()):
        base, new = sides["base"], sides["new"]
        delta = f"{sum(new) / len(new) - sum(base) / len(base):+.3f}" if base and new else "-"
        fmt = lambda v: " / ".join(f"{x:.3f}" for x in v) or "-"
        lines.append(f"| {run} | {row} | {fmt(base)} | {fmt(new)} | {delta} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ab_table.py FOLDER (holding ab-RUN-SIDE-ROUND.log files)")
    found = read(sys.argv[1])
    if not found:
        sys.exit(f"ab_table.py: no A/B rows in {sys.argv[1]}")
    print(table(found))
