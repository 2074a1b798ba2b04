#!/usr/bin/env python3
"""PyTorch on the same GPU: the ceilings (copy bandwidth, bf16 and FP8 matrix rates) and the eager
PyTorch equivalent of each kernel row of bench/gpu_kernels_bench.cpp, composing the same math from
gathers, matmuls and softmax. Prints one JSON object per row (same names as the C++ bench); the
peer is a yardstick only, never part of the product. Timing: CUDA events, warm-up, median of reps,
inputs rotated among several copies when they would fit in L2."""
import argparse
import json
import math

import torch

DEV = "cuda"
E4M3_MAX = 448.0


def median_ms(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def emit(name, ms, bytes_=0.0, flops=0.0, **extra):
    print(json.dumps({"row": name, "side": "torch", "ms": ms, "bytes": bytes_, "flops": flops, **extra}), flush=True)


def ceilings():
    n = 1 << 30  # 1 GiB each way
    src = torch.randn(n // 2, dtype=torch.bfloat16, device=DEV)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    emit("ceiling copy", ms, bytes_=2.0 * n, kind="bandwidth")
    del src, dst
    m = 8192
    a = torch.randn(m, m, dtype=torch.bfloat16, device=DEV)
    b = torch.randn(m, m, dtype=torch.bfloat16, device=DEV)
    ms = median_ms(lambda: a @ b)
    emit("ceiling bf16 gemm", ms, flops=2.0 * m**3, kind="bf16")
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones((), device=DEV)
    ms = median_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    emit("ceiling fp8 gemm", ms, flops=2.0 * m**3, kind="fp8")


def attention_rows(batches, contexts):
    heads, d, window, topk = 64, 512, 128, 512
    entry_bytes = 584  # FP8 nope + bf16 rope + scales, what our kernel reads
    for kind in ("csa", "hca"):
        for ctx in contexts:
            for b in batches:
                n_cmp = min(topk, ctx // 4) if kind == "csa" else ctx // 128
                pool_n = b * (window + (ctx // 4 if kind == "csa" else ctx // 128))
                if pool_n * d * 2 > 40e9:
                    continue
                pool = torch.randn(pool_n, d, dtype=torch.bfloat16, device=DEV)
                idx = torch.randint(0, pool_n, (b, window + n_cmp), device=DEV)
                q = torch.randn(b, heads, d, dtype=torch.bfloat16, device=DEV)
                sink = torch.randn(heads, device=DEV)
                scale = d**-0.5

                def step():
                    kv = pool[idx]  # [b, L, d]
                    s = torch.einsum("bhd,bld->bhl", q.float(), kv.float()) * scale
                    s = torch.cat([s, sink.view(1, heads, 1).expand(b, heads, 1)], dim=-1)
                    p = torch.softmax(s, dim=-1)[..., :-1]
                    return torch.einsum("bhl,bld->bhd", p.to(torch.bfloat16).float(), kv.float()).to(torch.bfloat16)

                ms = median_ms(step)
                bytes_ = b * ((window + n_cmp) * entry_bytes + 2 * heads * d * 2)
                emit(f"attn {kind} b{b} ctx{ctx}", ms, bytes_=bytes_)
                del pool


def indexer_rows(batches, contexts):
    heads, d, topk = 64, 128, 512
    key_bytes = 68  # FP4 key + scales
    for ctx in contexts:
        for b in batches:
            n = ctx // 4
            keys = torch.randn(b, n, d, dtype=torch.bfloat16, device=DEV)
            q = torch.randn(b, heads, d, dtype=torch.bfloat16, device=DEV)
            w = torch.randn(b, heads, device=DEV)

            def step():
                s = torch.relu(torch.einsum("bhd,bnd->bhn", q, keys).float()) * w.unsqueeze(-1)
                return torch.topk(s.sum(dim=1), topk, dim=-1)

            ms = median_ms(step)
            emit(f"indexer b{b} ctx{ctx}", ms, bytes_=b * n * key_bytes, flops=2.0 * b * heads * n * d)
            del keys


def quant_sim(x, block):
    shape = x.shape
    v = x.float().view(-1, block)
    amax = v.abs().amax(dim=-1, keepdim=True).clamp_min(1e-4)
    s = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    return ((v / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * s).view(shape)


def compressor_rows(batches):
    dim, dc, ratio, rope = 4096, 512, 4, 64
    wkv = torch.randn(2 * dc, dim, dtype=torch.bfloat16, device=DEV) * 0.02
    wgate = torch.randn(2 * dc, dim, dtype=torch.bfloat16, device=DEV) * 0.02
    ape = torch.randn(ratio, 2 * dc, device=DEV)
    norm_w = torch.ones(dc, dtype=torch.bfloat16, device=DEV)
    for b in batches:
        x = torch.randn(b, dim, dtype=torch.bfloat16, device=DEV)
        state = torch.randn(b, 2 * ratio, 4 * dc, device=DEV)  # kv and gate rows the entries pool
        pos = torch.arange(b, device=DEV) * ratio
        freqs = torch.rand(rope // 2, device=DEV)

        def step():
            a = x.float() @ wkv.float().t()
            g = x.float() @ wgate.float().t() + ape[0]
            st = torch.cat([state[:, 1:], torch.cat([a, g], -1).unsqueeze(1)], 1)
            prev, cur = st[:, :ratio], st[:, ratio:]
            vals = torch.cat([prev[..., :dc], cur[..., dc : 2 * dc]], 1)
            gates = torch.cat([prev[..., 2 * dc : 3 * dc], cur[..., 3 * dc :]], 1)
            e = (torch.softmax(gates, dim=1) * vals).sum(1).to(torch.bfloat16).float()
            e = (e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w.float()).to(torch.bfloat16).float()
            ang = pos.float().unsqueeze(-1) * freqs
            re, im = e[:, dc - rope :: 2], e[:, dc - rope + 1 :: 2]
            c, s = torch.cos(ang), torch.sin(ang)
            e = torch.cat([e[:, : dc - rope], torch.stack([re * c - im * s, re * s + im * c], -1).flatten(1)], -1)
            return quant_sim(e[:, : dc - rope].to(torch.bfloat16), 64)

        ms = median_ms(step)
        emit(f"compressor b{b}", ms, bytes_=2 * (2 * 2 * dc * dim) + b * 2 * ratio * 4 * dc * 4, flops=2.0 * b * 4 * dc * dim)


FP8_SHAPES = {"wq_a": (1024, 4096), "wq_b": (32768, 1024), "wkv": (512, 4096), "wo_b": (4096, 8192),
              "shared_w1": (2048, 4096), "shared_w2": (4096, 2048)}


def fp8_block_weight(n, k):
    """An FP8 weight as the checkpoint stores it: e4m3 codes and fp32 scales per 128x128 block."""
    blocks = (torch.randn(n, k, device=DEV) * 0.02).view(n // 128, 128, k // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-4)
    s = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    return (blocks / s).to(torch.float8_e4m3fn).view(n, k), s.view(n // 128, k // 128)


def fp8_gemm_same_math(x, codes, scale):
    """The reference's fp8_gemm as MODEL.md's plain-PyTorch kernel shim computes it: the 1x128
    activation quantization, the weight dequantized by its block scales, an fp32 matmul, bf16 out."""
    w = codes.float() * scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
    return (quant_sim(x, 128) @ w.t()).to(torch.bfloat16)


def blockwise_scaled_mm(m, n, k):
    """PyTorch's blockwise-scaled FP8 GEMM (1x128 activation scales, 128x128 weight scales: the fast
    tier's arithmetic) as two closures, or None where this torch or shape lacks it: from FP8 codes
    given, and from bf16 rows quantized first per 1x128 block (our op's whole work). Scale layouts are
    tried in the forms torch's versions have asked for."""
    a = (torch.randn(m, k, device=DEV) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=DEV) * 8).to(torch.float8_e4m3fn).t()  # (k, n), column-major
    sa_rows = torch.rand(k // 128, m, device=DEV) + 0.5
    sb_blocks = torch.rand(n // 128, k // 128, device=DEV) + 0.5
    x = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
    errors = []
    for col_major, sa, sb in ((True, sa_rows.t(), sb_blocks.t()), (False, sa_rows.t().contiguous(),
                                                                    sb_blocks.t().contiguous()),
                              (True, sa_rows.t(), sb_blocks)):
        fn = lambda sa=sa, sb=sb: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        def from_bf16(sb=sb, col_major=col_major):
            blocks = x.view(m, k // 128, 128).float()
            s = blocks.abs().amax(-1).clamp_min(1e-4) / E4M3_MAX
            codes = (blocks / s.unsqueeze(-1)).to(torch.float8_e4m3fn).view(m, k)
            s = s.t().contiguous().t() if col_major else s
            return torch._scaled_mm(codes, b, scale_a=s, scale_b=sb, out_dtype=torch.bfloat16)
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (any refusal: try the next layout)
            errors.append(str(e).splitlines()[0][:160])
            continue
        try:  # the codes-given row stays if only this one fails
            from_bf16()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"row": f"note scaled-mm from bf16 m{m} n{n} k{k}", "side": "torch",
                              "text": str(e).splitlines()[0][:160]}), flush=True)
            from_bf16 = None
        return fn, from_bf16
    print(json.dumps({"row": f"note scaled-mm m{m} n{n} k{k}", "side": "torch", "text": " | ".join(errors)}), flush=True)
    return None


def gemm_rows(ms_list):
    """Three peers per shape: `x @ w.t()` on bf16 weights (cuBLAS; skips the FP8 arithmetic), the same
    math as the exact tier ("same-math": quantization, block scales, fp32 products), and PyTorch's
    blockwise-scaled FP8 `_scaled_mm` ("scaled-mm", the fast tier's arithmetic, codes given)."""
    for name, (n, k) in FP8_SHAPES.items():
        w = torch.randn(n, k, dtype=torch.bfloat16, device=DEV)
        codes, scale = fp8_block_weight(n, k)
        for m in ms_list:
            x = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            bytes_ = n * k + m * k * 2 + m * n * 2
            ms = median_ms(lambda: x @ w.t())
            emit(f"gemm {name} m{m}", ms, bytes_=bytes_, flops=2.0 * m * n * k)
            ms = median_ms(lambda: fp8_gemm_same_math(x, codes, scale))
            emit(f"gemm {name} m{m} same-math", ms, bytes_=bytes_, flops=2.0 * m * n * k)
            fns = blockwise_scaled_mm(m, n, k)
            if fns is not None:
                emit(f"gemm {name} m{m} scaled-mm", median_ms(fns[0]), bytes_=n * k + m * k + m * n * 2,
                     flops=2.0 * m * n * k)
                if fns[1] is not None:
                    emit(f"gemm {name} m{m} scaled-mm from bf16", median_ms(fns[1]), bytes_=bytes_,
                         flops=2.0 * m * n * k)
        del w, codes, scale


def moe_rows(batches):
    experts, topk, dim, inter = 256, 6, 4096, 2048
    w1 = torch.randn(experts, inter, dim, dtype=torch.bfloat16, device=DEV) * 0.02
    w3 = torch.randn(experts, inter, dim, dtype=torch.bfloat16, device=DEV) * 0.02
    w2 = torch.randn(experts, dim, inter, dtype=torch.bfloat16, device=DEV) * 0.02
    per_expert_fp4 = 3 * inter * dim // 2 + 3 * inter * dim // 32
    for b in batches:
        x = torch.randn(b, dim, dtype=torch.bfloat16, device=DEV)
        idx = torch.stack([torch.randperm(experts, device=DEV)[:topk] for _ in range(b)])
        wts = torch.rand(b, topk, device=DEV)

        def step():
            y = torch.zeros(b, dim, device=DEV)
            flat = idx.flatten()
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=experts).tolist()
            tok = (order // topk)
            start = 0
            for e, c in enumerate(counts):
                if c == 0:
                    continue
                t = tok[start : start + c]
                xe = x[t]
                h = torch.nn.functional.silu(xe @ w1[e].t()) * (xe @ w3[e].t())
                h = (h.float() * wts.flatten()[order[start : start + c]].unsqueeze(-1)).to(torch.bfloat16)
                y.index_add_(0, t, (h @ w2[e].t()).float())
                start += c
            return y.to(torch.bfloat16)

        ms = median_ms(step, reps=10)
        touched = min(experts, b * topk)
        emit(f"moe b{b}", ms, bytes_=touched * per_expert_fp4, flops=2.0 * b * topk * 3 * inter * dim)
    del w1, w2, w3


def hc_pre_rows(tokens_list):
    """hc_pre (MODEL.md 4.1-4.2): fp32 mix GEMM with the RMS factor, sigmoids, Sinkhorn (20 iterations),
    the weighted stream sum; eager, as the reference writes it."""
    hc, dim, iters, eps = 4, 4096, 20, 1e-6
    mix, width = (2 + hc) * hc, hc * dim
    fn = torch.randn(mix, width, device=DEV) / 128
    scale = torch.rand(3, device=DEV) + 0.5
    base = torch.randn(mix, device=DEV) * 0.3
    for t in tokens_list:
        h = torch.randn(t, hc, dim, device=DEV).to(torch.bfloat16)

        def step():
            x = h.flatten(1).float()
            rs = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
            m = (x @ fn.t()) * rs
            pre = torch.sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
            post = 2 * torch.sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
            c = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).view(t, hc, hc).softmax(-1) + eps
            c = c / (c.sum(-2, keepdim=True) + eps)
            for _ in range(iters - 1):
                c = c / (c.sum(-1, keepdim=True) + eps)
                c = c / (c.sum(-2, keepdim=True) + eps)
            y = (pre.unsqueeze(-1) * h.float()).sum(1).to(torch.bfloat16)
            return y, post, c

        ms = median_ms(step)
        emit(f"hc_pre t{t}", ms, bytes_=4.0 * mix * width + 2.0 * t * width + 2.0 * t * dim,
             flops=2.0 * t * mix * width)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rows")
    ap.add_argument("--ceilings", action="store_true", help="the ceilings only (no peer rows)")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(json.dumps({"row": "device", "side": "torch", "name": torch.cuda.get_device_name(), "torch": torch.__version__}))
    ceilings()
    if args.ceilings:
        return
    contexts = [8192, 131072] if args.quick else [8192, 131072, 1048576]
    attention_rows([1, 8, 32], contexts)
    indexer_rows([1, 8], [131072, 1048576])
    compressor_rows([1, 32])
    gemm_rows([1, 32, 256, 8192])
    moe_rows([1, 32, 256])
    hc_pre_rows([1, 4, 32, 2048])


if __name__ == "__main__":
    main()
