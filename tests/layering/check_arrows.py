#!/usr/bin/env python3
"""Layering.Arrows: every #include "<room>/..." in src/ goes to the room itself or to a room it may
use (DESIGN.md's arrows, the table below). A new arrow fails here by name, before anyone builds on it;
the include roots of cmake/modules.cmake make the same arrow fail to compile."""
import pathlib
import re
import sys

# room -> rooms it may include (besides itself). Rooms are src/ folders; backend/cpu, backend/cuda and backend/comm
# are rooms of their own inside src/backend, whose top level is the backend contract.
ALLOWED = {
    "core": set(),
    "io": {"core"},
    "tokenizer": {"core"},
    "chat": {"core"},
    "kv": {"core"},
    "grammar": {"core"},
    # backend.cpp chooses a backend, rank_group.cpp the collectives of its ranks
    "backend": {"core", "backend/cpu", "backend/cuda", "backend/comm"},
    "backend/cpu": {"core", "backend"},
    "backend/cuda": {"core", "backend", "backend/comm"},  # NcclCommunicator
    "backend/comm": {"core", "backend"},
    "model": {"core", "io", "kv", "backend", "backend/comm"},  # a sharded model's collectives
    "model_tools": {"core", "io", "kv", "backend", "backend/comm", "model"},
    "sched": {"core", "kv"},
    "engine": {"core", "io", "kv", "backend", "backend/comm", "model", "sched"},
    "server": {"core", "engine", "chat", "tokenizer", "grammar", "kv", "sched", "backend", "backend/comm", "model"},
    "bench_client": {"core"},
}
NESTED = ("backend/cpu", "backend/cuda", "backend/comm")


def room_of(rel):
    for r in NESTED:
        if rel == r or rel.startswith(r + "/"):
            return r
    return rel.split("/")[0]


def main(src):
    src = pathlib.Path(src)
    bad = []
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        room = room_of(str(f.parent.relative_to(src)))
        if room not in ALLOWED:
            bad.append(f"{f}: room {room} is not in the table of tests/layering/check_arrows.py")
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m or "/" not in m.group(1):
                continue
            target = room_of(str(pathlib.PurePosixPath(m.group(1)).parent))
            if target not in ALLOWED:
                continue  # not a room of src/ (e.g. a local header)
            if target != room and target not in ALLOWED[room]:
                bad.append(f"{f}:{n}: {room} includes {m.group(1)} ({target} is not among its rooms)")
    for b in bad:
        print(b)
    print(f"Layering.Arrows: {len(bad)} forbidden include(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
