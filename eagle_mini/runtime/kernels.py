"""Which matmul kernels run the target here: prepacked weights (`packed.py`) or the stock ones.

Packing pays on one CPU and not on another, so the choice is measured on the machine at hand, as
`auto` measures its tree (`use_kernels`), and cached per target, CPU model and thread count.
"""
import json

import torch

from eagle_mini.errors import EagleMiniError
from eagle_mini.models import cache_dir
from eagle_mini.results import cpu_tag, results_json
from eagle_mini.runtime.packed import available, pack_linears, unpack_linears
from eagle_mini.runtime.cost import cost_curve

# The forwards a draft tree's verification makes on this CPU (the course's trees carry 4-16 tokens).
CHOICE_SIZES = (4, 8, 16)


def choose_kernels(target, repeats: int = 5, sizes=CHOICE_SIZES) -> dict:
    """Time the packed and the stock kernels side by side (`profile.cost_curve`, rounds
    interleaved) on the verification forwards of `sizes` tokens; the faster in total wins.

    Packing pays on one CPU and not on another (measured in data/results/probe_linear_kernels.json
    and the cost curves; see RESULTS.md), so the choice is measured, as `auto` measures its
    tree. -> {"kernels", "packed_ms", "stock_ms", "sizes", "repeats"}."""
    pack_linears(target.model)
    curve = cost_curve(target, ns=tuple(sizes), repeats=repeats, warmup=1, compare_stock=True,
                       progress=False, prefix_len=min(200, target.context_length // 4))
    packed, stock = sum(curve["median_ms"]), sum(curve["stock"]["median_ms"])
    return {"kernels": "packed" if packed <= stock else "stock", "packed_ms": round(packed, 2),
            "stock_ms": round(stock, 2), "sizes": list(sizes), "repeats": repeats}


def use_kernels(target, kernels: str = "auto") -> dict:
    """Route the target's linears through `kernels`: "packed", "stock" or "auto" (`choose_kernels`,
    measured once per target, CPU model and thread count and cached). Only fp32 on a CPU with
    MKL's packed GEMM has a choice; elsewhere the stock kernels run. -> the record, also kept as
    `target.kernels` (what results files and tables report)."""
    if kernels not in ("auto", "packed", "stock"):
        raise EagleMiniError(f"unknown kernels {kernels!r}; choose auto, packed or stock")
    model = target.model
    if not (available() and model.device.type == "cpu" and target.dtype == torch.float32):
        unpack_linears(model)
        record = {"kernels": "stock", "how": "the only kernels for this dtype and device"}
    elif kernels != "auto":
        (pack_linears if kernels == "packed" else unpack_linears)(model)
        record = {"kernels": kernels, "how": "asked for"}
    else:
        path = (cache_dir() / "kernels" / f"{target.name.replace('/', '_').replace(':', '_')}"
                f"_t{torch.get_num_threads()}_cpu{cpu_tag()}.json")
        if path.exists():
            record = {**json.loads(path.read_text()), "how": f"measured earlier here ({path.name})"}
        else:
            record = {**choose_kernels(target), "how": "measured now"}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(results_json({k: v for k, v in record.items() if k != "how"}, indent=2))
        (pack_linears if record["kernels"] == "packed" else unpack_linears)(model)
    target.kernels = record
    return record


def kernels_note(record: dict | None) -> str:
    """One line for a table: which kernels ran and why.

        >>> kernels_note({"kernels": "stock", "packed_ms": 230.0, "stock_ms": 210.5, "how": "measured now"})
        'stock kernels (faster here: 210.5 ms against 230.0 ms for prepacked weights over 4-16-token forwards, measured now)'
    """
    if not record:
        return ""
    name = {"packed": "prepacked weights", "stock": "stock kernels"}[record["kernels"]]
    if "packed_ms" not in record:
        return f"{name} ({record['how']})"
    mine, other = ((record["packed_ms"], record["stock_ms"]) if record["kernels"] == "packed"
                   else (record["stock_ms"], record["packed_ms"]))
    rival = "stock kernels" if record["kernels"] == "packed" else "prepacked weights"
    sizes = record.get("sizes", CHOICE_SIZES)
    return (f"{name} (faster here: {mine} ms against {other} ms for {rival} over "
            f"{sizes[0]}-{sizes[-1]}-token forwards, {record['how']})")
