#!/usr/bin/env python3
"""The instruction mix of a CUDA source's kernels as compiled for sm_90a, without a GPU.

Compiles one .cu of the build (its own nvcc command from build/build.ninja) to a cubin, disassembles it
with nvdisasm and prints, per kernel, the loop holding the most tensor-core instructions: its length and
its opcodes, per tensor-core instruction. A static count, not a timing: it says how many instructions a kernel's hot loop
issues (what bounds the FP4 decode kernels, docs/perf.md), so a change to that loop can be weighed on a
machine without a GPU and then measured on one. A loop nested inside the hot loop counts once: unroll it
(compile-time trip counts) before comparing.

  python3 bench/sass_mix.py src/backend/cuda/gemm/fast_gemv.cu [--build build] [--kernel REGEX]

nvdisasm: the CUDA toolkit's, or PyPI's `nvidia-cuda-nvdisasm` wheel (pip install nvidia-cuda-nvdisasm);
found on PATH, in the toolkit, or in that wheel's folder; NVDISASM=path overrides.
"""
import argparse
import collections
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile


def nvdisasm():
    found = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if found:
        return found
    for pattern in ["/usr/local/cuda*/bin/nvdisasm", os.path.join(sys.prefix, "lib/python3*/site-packages/nvidia/*/bin/nvdisasm"),
                    os.path.expanduser("~/.local/lib/python3*/site-packages/nvidia/*/bin/nvdisasm"),
                    "/usr/local/lib/python3*/dist-packages/nvidia/*/bin/nvdisasm"]:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    sys.exit("sass_mix: no nvdisasm (pip install nvidia-cuda-nvdisasm, or set NVDISASM)")


def cubin(source, build, out):
    rel = os.path.relpath(os.path.abspath(source), os.path.dirname(os.path.abspath(build)))
    objs = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], capture_output=True, text=True, check=True)
    name = rel.split("src/", 1)[-1] if "src/" in rel else rel
    target = next((line.split(":")[0] for line in objs.stdout.splitlines()
                   if line.split(":")[0].endswith(name.split("/", 2)[-1] + ".o") and "/" + os.path.basename(source) in line),
                  None)
    if target is None:
        sys.exit(f"sass_mix: no object of {source} in {build}")
    cmd = subprocess.run(["ninja", "-C", build, "-t", "commands", target], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    args = shlex.split(cmd)
    drop = {"-MD": 0, "-MT": 1, "-MF": 1, "-o": 1, "-c": 0}
    kept, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in drop:
            skip = drop[a]
            continue
        kept.append(a)
    subprocess.run(kept + ["-cubin", "-o", out], cwd=build, check=True)


def parse(sass):
    kernels, cur = {}, None
    for line in sass.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = kernels.setdefault(m.group(1), {"ins": [], "labels": {}})
            continue
        if cur is None:
            continue
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            cur["labels"][m.group(1)] = len(cur["ins"])
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            cur["ins"].append(re.sub(r"^@!?U?P\w+\s+", "", m.group(1).strip()))
    return kernels


def is_mma(instruction):
    """A tensor-core instruction: mma.sync (HMMA, IMMA) or wgmma (HGMMA, QGMMA, IGMMA)."""
    return re.match(r"(HMMA|IMMA|[HQI]GMMA)\b", instruction.split(".")[0]) is not None


def hot_loop(k):
    """The backward branch's span with the most tensor-core instructions (the shortest on ties)."""
    ins, best = k["ins"], None
    for i, x in enumerate(ins):
        m = re.search(r"(\.L_x_\d+)", x) if x.startswith("BRA") else None
        if not m or k["labels"].get(m.group(1), i + 1) > i:
            continue
        s = k["labels"][m.group(1)]
        h = sum(1 for y in ins[s:i + 1] if is_mma(y))
        if h and (best is None or (h, s - i) > (best[0], best[1] - best[2])):
            best = (h, s, i)
    return best


def short_name(mangled):
    """The kernel's own name (a length-prefixed identifier ending in "kernel") and its raw template args."""
    at = mangled.find("kernelI")
    if at < 0:
        return mangled
    head = mangled[:at + 6]
    for m in re.finditer(r"\d+", head):  # a run's tail digits may be the length (hex hashes precede it)
        for i in range(m.start(), m.end()):
            if int(head[i:m.end()]) == len(head) - m.end():
                return f"{head[m.end():]}<{mangled[at + 7:].split('EEv', 1)[0]}>"
    return mangled


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("--build", default="build")
    ap.add_argument("--kernel", default=".", help="only kernels whose mangled name matches")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "k.cubin")
        cubin(a.source, a.build, out)
        sass = subprocess.run([nvdisasm(), "-c", out], capture_output=True, text=True, check=True).stdout
    for name, k in parse(sass).items():
        if not re.search(a.kernel, name):
            continue
        loop = hot_loop(k)
        if not loop:
            continue
        h, s, e = loop
        ops = collections.Counter(y.split()[0].split(".")[0] for y in k["ins"][s:e + 1])
        print(f"{short_name(name)}\n  hot loop {e - s + 1} instructions, {h} MMA ({(e - s + 1) / h:.1f} each): "
              + " ".join(f"{o}:{v}" for o, v in ops.most_common(12)))


if __name__ == "__main__":
    main()
