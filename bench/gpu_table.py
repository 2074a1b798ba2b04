#!/usr/bin/env python3
"""Joins the GPU benchmark rows (JSON lines from gpu_kernels_bench, peer_torch.py and
`dsv4 bench step --json`) into one markdown table: for every row the bytes and FLOPs it is judged
by, the fraction of the measured ceiling (copy bandwidth, or the FP8 / bf16 matrix rate for
compute-bound rows), and PyTorch's time for the same math in the same call."""
import json
import sys


def load(paths):
    rows = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass
        except OSError:
            pass
    return rows


def main(paths):
    rows = load(paths)
    ceil = {}
    for r in rows:
        if r.get("row", "").startswith("ceiling"):
            rate = (r["bytes"] if r.get("kind") == "bandwidth" else r["flops"]) / (r["ms"] * 1e-3)
            ceil[r["kind"]] = rate
    bw, fp8, bf16 = ceil.get("bandwidth"), ceil.get("fp8"), ceil.get("bf16")
    print(f"ceilings (measured here): copy {bw / 1e12 if bw else float('nan'):.2f} TB/s, "
          f"bf16 {bf16 / 1e12 if bf16 else float('nan'):.0f} TFLOP/s, fp8 {fp8 / 1e12 if fp8 else float('nan'):.0f} TFLOP/s")
    ours = {r["row"]: r for r in rows if r.get("side") == "dsv4" and "ms" in r}
    torch = {r["row"]: r for r in rows if r.get("side") == "torch" and "ms" in r and not r["row"].startswith("ceiling")}
    # GEMM rows have two peers: bf16 cuBLAS on bf16 weights, and the tier's own math: for the exact
    # tier the reference's ("same-math": quantization, block scales, fp32 products), for the fast tier's
    # rows (" fast") PyTorch's blockwise-scaled FP8 _scaled_mm ("scaled-mm").
    # The fast rows' last peer: _scaled_mm from bf16 rows quantized first (torch), our op's whole work.
    print("| row | dsv4 ms | MB moved | GFLOP | % of copy BW | % of FP8 rate | torch ms | torch/dsv4 | "
          "torch same-math / scaled-mm ms | that/dsv4 | scaled-mm from bf16 ms | that/dsv4 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in ours.items():
        base = name.replace(" fast", "")
        t = torch.get(base)
        fast = name.endswith(" fast") or " fast " in name
        same = torch.get(base + " scaled-mm") if fast else torch.get(name + " same-math")
        ms = r["ms"]
        bw_frac = 100.0 * r["bytes"] / (ms * 1e-3) / bw if bw and r.get("bytes") else float("nan")
        fl_frac = 100.0 * r["flops"] / (ms * 1e-3) / fp8 if fp8 and r.get("flops") else float("nan")
        tms = t["ms"] if t else float("nan")
        sms = same["ms"] if same else float("nan")
        whole = torch.get(base + " scaled-mm from bf16") if fast else None  # the exact rows' peer is same-math
        wms = whole["ms"] if whole else float("nan")
        print(f"| {name} | {ms:.4f} | {r.get('bytes', 0) / 1e6:.1f} | {r.get('flops', 0) / 1e9:.2f} | "
              f"{bw_frac:.1f} | {fl_frac:.1f} | {tms:.4f} | {tms / ms:.2f} | {sms:.4f} | {sms / ms:.2f} | "
              f"{wms:.4f} | {wms / ms:.2f} |")
    steps = [r for r in rows if r.get("test") in ("decode", "mixed", "prefill")]
    if steps:
        print()
        # mode: graphs (replayed), padded or eager; "vs eager": the row's last step rerun eagerly
        # (normalised logit error / argmax agreement), from `bench step --compare-eager`.
        # host issued: the host's whole issue of the step; of which its index (page maps, upload) and the
        # graph launch (graphs mode).
        print("| model step | mode | batch | context | ms | host issued stack ms (index / launch) | tok/s | "
              "GB must read | roofline ms (copy BW) | x roofline | TFLOP | % of FP8 rate | vs eager err / argmax |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in steps:
            roof = r["bytes"] / bw * 1e3 if bw and r["bytes"] else float("nan")
            fl = 100.0 * r["flops"] / (r["ms"] * 1e-3) / fp8 if fp8 and r["flops"] else float("nan")
            enq = r.get("enqueue_ms") or float("nan")
            parts = f" ({r.get('index_ms', 0):.2f} / {r.get('launch_ms', 0):.2f})" if r.get("index_ms") else ""
            err, agree = r.get("eager_error", -1), r.get("eager_argmax", -1)
            vs = f"{err:.1e} / {agree:.3f}" if err is not None and err >= 0 else "-"
            test = f"{r['test']} +{r['chunk']}" if r.get("chunk") else r["test"]  # mixed: the prompt chunk
            if r.get("chunk_at"):
                test += f"@{r['chunk_at']}"  # ... from that position of its prompt
            print(f"| {test} | {r.get('mode', '?')} | {r['batch']} | {r['context']} | {r['ms']:.2f} | {enq:.2f}{parts} | "
                  f"{r['tokens_per_s']:.1f} | {r['bytes'] / 1e9:.2f} | {roof:.3f} | "
                  f"{r['ms'] / roof if roof == roof and roof else float('nan'):.1f} | "
                  f"{r['flops'] / 1e12:.2f} | {fl:.1f} | {vs} |")


if __name__ == "__main__":
    main(sys.argv[1:])
