"""Probe: ways to compute exact mode's fixed-K linear (`runtime/exact/linears.FixedKLinear`)
without a copy of the weight, timed against the stock `F.linear` on SmolLM2-135M's shapes.

Why: exact mode sums each linear over fixed K-chunks so every row count gives a row the same
bits. A copy of the weight laid out by chunk costs memory (1.2x the target's bytes on the
embedded target, up to 2x on a 7B one where every linear needs chunks, #49), so the chunks are
views of the shared weight. Two ways to multiply views:

* `per-chunk`: one `F.linear` per chunk on a column slice of the weight (what `FixedKLinear` does);
* `bmm-views`: all whole chunks in one `torch.bmm` over a `[chunks, chunk, out]` strided view.

It prints, per shape and row count, the median microseconds of each against `F.linear` on the
whole weight, and whether each way gives every row the bits it gets alone (row-invariance, what
exact mode needs; `chunk_for` measures this on the machine before using a chunk).

    python scripts/probe_exact_linear.py --threads 2
"""
import argparse
import time

import torch
import torch.nn.functional as F

from eagle_mini.results import machine_info

# SmolLM2-135M's linears (K, out) and the chunk exact mode picks for each on a Xeon (AMX)
SHAPES = [(576, 576, 512), (576, 192, 512), (576, 1536, 512), (1536, 576, 512), (576, 49152, 256)]


def per_chunk(w, chunk):
    def f(x):
        total = None
        for start in range(0, w.shape[1], chunk):
            part = F.linear(x[:, start:start + chunk], w[:, start:start + chunk]).float()
            total = part if total is None else total.add_(part)
        return total.to(x.dtype)
    return f


def bmm_views(w, chunk):
    out, k = w.shape
    whole = k // chunk
    def f(x):
        cut = whole * chunk
        view = w[:, :cut].view(out, whole, chunk).permute(1, 2, 0)
        parts = list(torch.bmm(x[:, :cut].reshape(-1, whole, chunk).transpose(0, 1), view))
        if cut < k:
            parts.append(F.linear(x[:, cut:], w[:, cut:]))
        total = parts[0].float()
        for p in parts[1:]:
            total += p.float()
        return total.to(x.dtype)
    return f


def median_us(f, x, repeats):
    for _ in range(3):
        f(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f(x)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e6


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    m = machine_info()
    print(f"machine: {m.get('cpu')} | {args.threads} threads | torch {torch.__version__} | bf16")
    print(f"{'K x out':>12} {'rows':>4} {'stock us':>9} {'per-chunk':>10} {'bmm-views':>10}  row-invariant")
    g = torch.Generator().manual_seed(0)
    for k, out, chunk in SHAPES:
        w = torch.randn(out, k, generator=g).to(torch.bfloat16)
        ways = {"per-chunk": per_chunk(w, chunk), "bmm-views": bmm_views(w, chunk)}
        for rows in (1, 2, 16):
            x = torch.randn(rows, k, generator=g).to(torch.bfloat16)
            stock = median_us(lambda v: F.linear(v, w), x, args.repeats)
            cells, same = [], []
            for name, f in ways.items():
                cells.append(f"{median_us(f, x, args.repeats) / stock:9.2f}x")
                alone = torch.cat([f(x[i:i + 1]) for i in range(rows)])
                same.append(f"{name} {torch.equal(alone, f(x))}")
            print(f"{k:>5} x {out:<5} {rows:>4} {stock:9.1f} {' '.join(cells)}  {', '.join(same)}")


if __name__ == "__main__":
    main()
