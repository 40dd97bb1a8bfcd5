"""How much does verifying n tokens cost compared to one? The target's cost curve c(n)/c(1).

EAGLE's speedup is bounded by tau / (c(tree)/c(1) + draft cost): a draft tree pays off only while a
forward of n new tokens costs about as much as a forward of one. On a GPU at batch 1 that holds up to
tens of tokens (decoding is bandwidth bound); on a small CPU it breaks down much earlier. This
module measures the curve on the machine at hand: a forward of n new tokens over a cached prefix,
for n = 1, 2, 4, ..., repeated with the n values interleaved, medians reported relative to n = 1.
"""
import statistics
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from eagle_mini.errors import EagleMiniError
from eagle_mini.results import machine_info, results_json
from eagle_mini.runtime.roofline import floor_ms, measure_roofline
from eagle_mini.target import crop_cache


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def prefilled_cache(target, prefix_len: int, g):
    """A target cache holding `prefix_len` random tokens: the prefix every timed forward extends."""
    prefix = torch.randint(0, target.vocab_size, (prefix_len,), generator=g)
    cache = target.new_cache()
    target.forward(prefix, cache, all_logits=False)
    return cache


def chain_tokens(target, n: int, g):
    """n random new tokens and their causal mask (a chain of n drafts)."""
    return (torch.randint(0, target.vocab_size, (n,), generator=g),
            torch.tril(torch.ones(n, n, dtype=torch.bool)))


@torch.no_grad()
def cost_curve(target, ns=(1, 2, 4, 8, 16, 32, 64), prefix_len: int = 200, repeats: int = 7,
               warmup: int = 2, seed: int = 0, with_head: bool = False,
               compare_stock: bool = False, compare_exact: bool = False,
               progress: bool = True) -> dict:
    """Median forward time of n new tokens (causal tree mask) over a cached prefix, per n.

    With `compare_stock` (and a target loaded with packed weights, `packed.py`) the stock kernels
    are timed in the same run, rounds interleaved, and reported under `"stock"`: the before/after
    of the packing on one machine at one moment. With `compare_exact` (on an exact target,
    `exact.py`) the stock forward is timed the same way, under `"stock_forward"`: what exactness
    costs. progress: a bar over the forwards, warm-up included.
    """
    from contextlib import nullcontext

    from eagle_mini.runtime.exact import exact_of, stock_forward
    from eagle_mini.runtime.packed import is_packed, stock_kernels
    packed = is_packed(target.model)
    variants = ["packed", "stock"] if compare_stock and packed else ["packed" if packed else "stock"]
    if compare_exact and target.runtime.is_exact:
        variants = [variants[0], "stock forward"]
    g = torch.Generator().manual_seed(seed)
    cache = prefilled_cache(target, prefix_len, g)
    times = {(v, n): [] for v in variants for n in ns}
    bar = tqdm(total=(warmup + repeats) * len(variants) * len(ns), desc="cost curve",
               unit="forward", disable=not progress)
    for r in range(warmup + repeats):  # warm-up rounds also pack the weights once per size
        for v in variants if r % 2 == 0 else variants[::-1]:
            with (stock_kernels(target.model) if v == "stock" else
                  stock_forward(target) if v == "stock forward" else nullcontext()):
                for n in list(ns) if r % 2 == 0 else list(reversed(ns)):  # alternate direction
                    tokens, mask = chain_tokens(target, n, g)
                    sync(target.device)
                    t = time.perf_counter()
                    target.forward(tokens, cache, tree_mask=mask)
                    sync(target.device)
                    if r >= warmup:
                        times[v, n].append(time.perf_counter() - t)
                    crop_cache(cache, prefix_len)
                    bar.update()
    bar.close()

    def curve(v):
        median = [statistics.median(times[v, n]) for n in ns]
        return {"median_ms": [1000 * m for m in median], "relative": [m / median[0] for m in median],
                "samples_ms": [[round(1000 * t, 3) for t in times[v, n]] for n in ns]}

    head_ms = _head_cost(target, ns, repeats, g) if with_head else None
    roof = measure_roofline(target.dtype, target.device)
    roof["floor_ms"] = [floor_ms(target, n, prefix_len, roof) for n in ns]
    out = {"head_median_ms": head_ms, "target": target.name,
           "dtype": str(target.dtype).replace("torch.", ""), "device": str(target.device),
           "packed": packed, "prefix_len": prefix_len, "repeats": repeats, "ns": list(ns),
           **curve(variants[0]), "exact": exact_of(target), "roofline": roof,
           "machine": machine_info()}
    if len(variants) == 2:
        out[variants[1].replace(" ", "_")] = curve(variants[1])
    return out


CHEAP = 1.25  # a forward of n tokens "costs about one forward" while c(n)/c(1) stays under this


def cheap_until(curve: dict, limit: float = CHEAP) -> int:
    """The largest n of a `cost_curve` such that c(k)/c(1) < limit for every measured k <= n.

    This is the number of tokens a verification forward can carry almost for free: the width a
    draft tree may have before the target's cost grows with it (EAGLE section 4's trade-off).
    """
    rel = dict(zip(curve["ns"], curve["relative"]))
    return max(n for n in curve["ns"] if all(rel[k] < limit for k in curve["ns"] if k <= n))


def pool_cost_curves(curves: list[dict]) -> dict:
    """One cost curve from several `cost_curve` rounds of one run (same target, sizes, prefix):
    medians over every round's samples, and each round's own medians under `"rounds_ms"`.

    A bench measures its curve in rounds spread over the run (`bench(curve_rounds=...)`), so the
    curve sees the same moments of a noisy machine as the generations it is compared with: one
    round at the start read c(1) noticeably apart on two runs of one machine within the hour.

        >>> a = {"ns": [1, 2], "prefix_len": 8, "repeats": 2, "median_ms": [10.0, 20.0],
        ...      "samples_ms": [[9.0, 11.0], [19.0, 21.0]]}
        >>> b = {"ns": [1, 2], "prefix_len": 8, "repeats": 2, "median_ms": [30.0, 40.0],
        ...      "samples_ms": [[29.0, 31.0], [39.0, 41.0]]}
        >>> c = pool_cost_curves([a, b])
        >>> c["median_ms"], c["relative"], c["repeats"], c["rounds_ms"]
        ([20.0, 30.0], [1.0, 1.5], 4, [[10.0, 20.0], [30.0, 40.0]])
    """
    first = curves[0]
    for c in curves[1:]:
        if c["ns"] != first["ns"] or c["prefix_len"] != first["prefix_len"]:
            raise EagleMiniError("cost curves pool only over the same sizes and prefix")
    samples = [[t for c in curves for t in c["samples_ms"][i]] for i in range(len(first["ns"]))]
    median = [statistics.median(s) for s in samples]
    return {**first, "median_ms": median, "relative": [m / median[0] for m in median],
            "samples_ms": samples, "repeats": len(samples[0]), "rounds": len(curves),
            "rounds_ms": [c["median_ms"] for c in curves]}


def _head_cost(target, ns, repeats, g) -> list[float]:
    """Median time of one draft-head forward of n tokens (a random head of this target's shape)."""
    from eagle_mini.heads.eagle1 import new_head
    head = new_head(target).to(target.dtype)
    prefix = 200
    feats = torch.randn(1, prefix, target.hidden_size, generator=g).to(target.device, target.dtype)
    toks = torch.randint(0, target.vocab_size, (1, prefix), generator=g).to(target.device)
    out = []
    with torch.no_grad():
        cache = head.new_cache()
        head(feats, toks, cache=cache)
        for n in ns:
            times = []
            for _ in range(repeats + 1):
                sync(target.device)
                t = time.perf_counter()
                pred = head(feats[:, :n], toks[:, :n], cache=cache)
                head.draft_logits(pred[0])
                sync(target.device)
                times.append(time.perf_counter() - t)
                crop_cache(cache, prefix)
            out.append(1000 * statistics.median(times[1:]))
    return out


def save_curve(curve: dict, out: Path, title: str | None = None) -> tuple[Path, Path]:
    """Write the curve as JSON and a PNG plot next to it."""
    from matplotlib.figure import Figure   # no pyplot: leaves a notebook's backend alone
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(curve))
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    label = ("measured c(n)/c(1)" + (", packed weights" if curve.get("packed") else "")
             + (", exact mode" if (curve.get("exact") or {}).get("exact") else ""))
    ax.plot(curve["ns"], curve["relative"], "o-", label=label)
    if "stock" in curve:
        ax.plot(curve["ns"], curve["stock"]["relative"], "s--", label="same run, stock kernels")
    if "stock_forward" in curve:
        c1 = curve["median_ms"][0]
        ax.plot(curve["ns"], [m / c1 for m in curve["stock_forward"]["median_ms"]], "s--",
                label="same run, stock (not exact) forward, over exact c(1)")
    ax.axhline(1.0, color="gray", ls="--", lw=1, label="flat (bandwidth bound ideal)")
    if curve.get("roofline"):
        c1 = curve["median_ms"][0]
        ax.plot(curve["ns"], [f / c1 for f in curve["roofline"]["floor_ms"]], "k:",
                label=f"roofline floor / measured c(1), measured here "
                      f"({curve['roofline']['read_GBps']:.0f} GB/s, "
                      f"{curve['roofline']['peak_GFLOPs']:.0f} GFLOP/s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("new tokens per forward (n)")
    ax.set_ylabel("forward time relative to measured n = 1")
    ax.set_title(title or f"Verification cost curve: {curve['target']} ({curve['dtype']}, "
                 f"{curve['machine']['threads']} threads, prefix {curve['prefix_len']})", fontsize=9)
    ax.legend()
    fig.tight_layout()
    png = out.with_suffix(".png")
    fig.savefig(png, dpi=110)
    return out, png
