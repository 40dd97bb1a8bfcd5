"""Is bf16 faster than fp32 on this CPU? Measured on the machine at hand, never assumed.

CPUs with bf16 units (Intel AMX, AVX512_BF16 on AMD Zen 4) multiply bf16 matrices 2-3x faster than
fp32, and the training recipe's `--mixed-precision bf16 --feature-dtype bf16` was 2.4x faster on a
Xeon (the shipped head's round 6). CPUs without them (AMD Zen 2: AVX2 only) convert every bf16
operand and run the same matmul tens of times *slower*: a [2048, 576] @ [576, 1536] product took
0.48 s in fp32 and 21.5 s in bf16 on one (the head's EXPERIMENTS.md). So `auto` times one matmul of
a head-sized layer in both dtypes and picks bf16 only where it wins by `MARGIN`.

    >>> choice({"speedup": 2.6})[0], choice({"speedup": 0.02})[0]
    ('bf16', 'fp32')
"""
import time

import torch

MARGIN = 1.2  # bf16 must be this much faster to be worth its rounding


def matmul_speedup(rows: int = 512, inner: int = 576, cols: int = 1536, repeats: int = 3,
                   dtype=torch.bfloat16) -> dict:
    """fp32 time / `dtype` time of one [rows, inner] @ [inner, cols] product (best of `repeats`,
    after a warm-up each), on the CPU with torch's current thread count."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(rows, inner, generator=g), torch.randn(inner, cols, generator=g)
    best = {}
    for name, x, y in (("fp32", a, b), ("bf16", a.to(dtype), b.to(dtype))):
        x @ y  # warm-up: the first call picks and may pack the kernel
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            x @ y
            times.append(time.perf_counter() - t)
        best[name] = min(times)
    return {"shape": [rows, inner, cols], "fp32_ms": best["fp32"] * 1e3,
            "bf16_ms": best["bf16"] * 1e3, "speedup": best["fp32"] / best["bf16"],
            "threads": torch.get_num_threads()}


def choice(probe: dict) -> tuple[str, str]:
    """("bf16" or "fp32", one line saying why) from a `matmul_speedup` result."""
    s = probe["speedup"]
    pick = "bf16" if s >= MARGIN else "fp32"
    how = f"{s:.2f}x fp32's speed" if s >= 1 else f"{1 / s:.1f}x slower than fp32"
    return pick, f"bf16 matmuls run at {how} on this CPU (measured): using {pick}"
