"""Which matmul kernels run the target here: weights packed once (`packed.py`, oneDNN's layout or
MKL's) or the stock kernels.

Which pays differs from CPU to CPU, so the choice is measured on the machine at hand, as `auto`
measures its tree (`use_kernels`), and cached per target, dtype, CPU model and thread count.
"""
import statistics
import time

import torch

from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.cost import chain_tokens, prefilled_cache
from eagle_mini.runtime.machine_cache import cached_finding, machine_key
from eagle_mini.runtime.packed import KINDS, available, pack_linears, packed_as, unpack_linears
from eagle_mini.target import crop_cache

# The forwards decoding makes: vanilla's one token and a draft tree's verification (the course's
# trees carry 4-16 tokens).
CHOICE_SIZES = (1, 4, 8, 16)
NAMES = ("auto", "packed", *KINDS, "stock")   # what --kernels accepts ("packed": the first kind here)
LABELS = {"onednn": "oneDNN-packed weights", "mkl": "MKL-packed weights",
          "packed": "MKL-packed weights", "stock": "stock kernels"}   # "packed": older records' MKL


def kinds_here(dtype) -> list[str]:
    """The kernels there is a choice between for `dtype` on this CPU, the packed kinds first."""
    return [k for k in KINDS if available(dtype, k)] + ["stock"]


@torch.no_grad()
def time_kernels(target, kinds, sizes=CHOICE_SIZES, repeats: int = 5, seed: int = 0) -> dict:
    """{kind: median ms} of one forward of each of `sizes` tokens (a causal chain over a cached
    prefix), in total, each kind timed in every round, the order alternating from round to round."""
    g = torch.Generator().manual_seed(seed)
    prefix_len = min(200, target.context_length // 4)
    cache = prefilled_cache(target, prefix_len, g)
    times = {k: [] for k in kinds}
    for r in range(1 + repeats):   # round 0 warms up and packs
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            with packed_as(target.model, None if kind == "stock" else kind):
                total = 0.0
                for n in sizes:
                    tokens, mask = chain_tokens(target, n, g)
                    t = time.perf_counter()
                    target.forward(tokens, cache, tree_mask=mask)
                    total += time.perf_counter() - t
                    crop_cache(cache, prefix_len)
            if r:
                times[kind].append(1e3 * total)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def choose_kernels(target, repeats: int = 5, sizes=CHOICE_SIZES) -> dict:
    """Time every kernel choice here side by side (`time_kernels`) on forwards of `sizes` tokens;
    the fastest in total wins. -> {"kernels", "ms": {kind: ms}, "sizes", "repeats"}."""
    kinds = kinds_here(target.dtype)
    pack_linears(target.model, kinds[0])
    ms = time_kernels(target, kinds, sizes, repeats)
    return {"kernels": min(ms, key=ms.get), "ms": ms, "sizes": list(sizes), "repeats": repeats}


def use_kernels(target, kernels: str = "auto") -> dict:
    """Route the target's linears through `kernels`: a packed kind ("onednn", "mkl"; "packed": the
    first available here), "stock", or "auto" (`choose_kernels`, measured once per target, dtype,
    CPU model and thread count and cached). Only a CPU has a choice (`packed.available`); elsewhere
    the stock kernels run. -> the record, also kept as `target.kernels` (what results files and
    tables report)."""
    if kernels not in NAMES:
        raise EagleMiniError(f"unknown kernels {kernels!r}; choose one of {', '.join(NAMES)}")
    model = target.model
    kinds = kinds_here(target.dtype) if model.device.type == "cpu" else ["stock"]
    if kernels == "packed":
        kernels = kinds[0]
    if len(kinds) == 1 or (kernels != "auto" and kernels not in kinds):
        unpack_linears(model)
        record = {"kernels": "stock", "how": "the only kernels for this dtype and device"
                  if len(kinds) == 1 else f"{kernels} is not available here"}
    elif kernels != "auto":
        record = {"kernels": kernels, "how": "asked for"}
    else:
        record, how = cached_finding("kernels", machine_key(target, "v2"),
                                     lambda: choose_kernels(target))
        record = {**record, "how": how}
    if record["kernels"] == "stock":
        unpack_linears(model)
    else:
        pack_linears(model, record["kernels"])
    target.kernels = record
    return record


def kernels_note(record: dict | None) -> str:
    """One line for a table: which kernels ran and why (older records timed two: packed_ms, stock_ms).

        >>> kernels_note({"kernels": "onednn", "ms": {"onednn": 120.0, "stock": 210.5}, "sizes": [1, 16], "how": "measured now"})
        'oneDNN-packed weights (fastest here: 120.0 ms against stock kernels 210.5 ms over 1-16-token forwards, measured now)'
    """
    if not record:
        return ""
    name = LABELS[record["kernels"]]
    ms = record.get("ms") or ({"packed": record["packed_ms"], "stock": record["stock_ms"]}
                              if "packed_ms" in record else None)
    if not ms:
        return f"{name} ({record['how']})"
    rivals = ", ".join(f"{LABELS[k]} {v} ms" for k, v in ms.items() if k != record["kernels"])
    sizes = record.get("sizes", (4, 8, 16))
    return (f"{name} (fastest here: {ms[record['kernels']]} ms against {rivals} over "
            f"{sizes[0]}-{sizes[-1]}-token forwards, {record['how']})")
