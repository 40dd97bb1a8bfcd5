"""Is bf16 faster than fp32 on this CPU? Measured on the machine at hand, never assumed.

CPUs with bf16 units (Intel AMX, AVX512_BF16) multiply bf16 matrices faster than fp32, and so
runs the training recipe's `--mixed-precision bf16 --feature-dtype bf16` (the shipped head's
rounds, in data/heads/smollm2-135m/). CPUs without them (AVX2 only) convert every bf16 operand and
run the same matmul many times *slower* (measured in the head's EXPERIMENTS.md). So `auto` times
one matmul of a head-sized layer in both dtypes and picks bf16 only where it wins by `MARGIN`.

    >>> choice({"speedup": 2.6})[0], choice({"speedup": 0.02})[0]
    ('bf16', 'fp32')
"""
import time
from pathlib import Path

import torch

from eagle_mini.results import COMMITTED, default_out

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


def fastest_exact(load, device: str = "cpu", say=print):
    """The target in the fastest precision whose greedy EAGLE text equals vanilla's here: bf16 in
    exact mode (`runtime.exact`) where this CPU multiplies bf16 faster (`choice`; a GPU does) and
    exact mode's self-check passes, else fp32, exact by itself. `load(dtype)` loads the target in
    "bf16" with exact mode on, or in "fp32"; `say` gets one line per decision. What
    `demo --dtype auto` and notebook 06's live run decode with."""
    pick, why = choice(matmul_speedup()) if device == "cpu" else ("bf16", "a GPU")
    say(f"dtype:  {why}")
    if pick == "bf16":
        target = load("bf16")
        if target.runtime.is_exact:
            return target
        say("dtype:  bf16 is not exact here (above): using fp32, which is")
    return load("fp32")


# --- fp32 matmul precision: a mode offered only with its check-lossless result -------------------
MATMUL_PRECISIONS = ("highest", "high", "medium")


def lossless_file(precision: str) -> str:
    """The name of `check-lossless`'s result for a matmul precision (under `runs/` by default, in
    `data/results/` when committed): the reference, "highest", keeps the course's original name."""
    return ("check_lossless.json" if precision == "highest"
            else f"check_lossless_matmul_{precision}.json")


def set_matmul_precision(precision: str, root: Path = Path(".")) -> str:
    """`torch.set_float32_matmul_precision(precision)`, and one line on what that mode promises.

    "highest" computes every fp32 matmul in fp32: EAGLE's output equals vanilla's token for token.
    "high" and "medium" let oneDNN use bf16-based internals where the CPU has them, which
    can make a multi-token forward cheaper (measure it with `profile-target`). Vanilla then runs in that mode too, and EAGLE
    can only be lossless against it up to ties, so the line reports the mode's own check-lossless
    file, or says how to make it.

        >>> set_matmul_precision("highest")
        'fp32 matmuls in fp32 (highest): exact'
    """
    import json

    from eagle_mini.errors import EagleMiniError
    if precision not in MATMUL_PRECISIONS:
        raise EagleMiniError(f"unknown matmul precision {precision!r}; choose "
                             + ", ".join(MATMUL_PRECISIONS))
    torch.set_float32_matmul_precision(precision)
    if precision == "highest":
        return "fp32 matmuls in fp32 (highest): exact"
    head = f"fp32 matmuls at precision {precision!r} (bf16-based internals where the CPU has them)"
    # this machine's own check (check-lossless writes under runs/ by default), else the committed one
    for path in (default_out(lossless_file(precision)), COMMITTED / lossless_file(precision)):
        try:
            check = json.loads((root / path).read_text())
            rows = check["rows"]
            same = sum(all(v["identical"] for k, v in r.items() if isinstance(v, dict)) for r in rows)
            return (f"{head}: check-lossless in this mode found {same} of {len(rows)} prompts "
                    f"identical to vanilla in the same mode ({path}, {check['machine']['cpu']})")
        except (OSError, KeyError, TypeError, ValueError):
            continue
    return (f"{head}: NOT CHECKED, no check-lossless result for this mode yet; run `python -m "
            f"eagle_mini check-lossless --matmul-precision {precision}` before trusting it")
