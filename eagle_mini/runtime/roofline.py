"""The machine's roofline under the cost curve: how far is each forward from physics?

A forward of n new tokens must at least read every weight once (the memory floor, bytes over read
bandwidth) and do its multiply-adds (the compute floor, FLOPs over the GEMM peak); it cannot take
less than the larger of the two (Williams et al., "Roofline", 2009). At batch 1 a decoder's forward
is memory bound until n is large, so on paper c(n) stays near c(1); where the measured c(1) sits
far above its floor, the step is spent in overhead (Python, dispatch, small kernels), not in
reading weights. Both figures are measured here, in the same run as the curve they sit beside.

    >>> roof = measure_roofline(torch.float32)               # doctest: +SKIP
    >>> floor_ms(target, 1, 200, roof)                       # doctest: +SKIP
"""
import statistics
import time

import torch
from torch import nn

from eagle_mini.target import head_dim


def median_seconds(fn, repeats: int, device) -> float:
    def run():
        fn()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
    run()                                                    # warm: first touch, kernel choice
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_roofline(dtype, device="cpu", read_mib: int = 512, gemm: int = 1024,
                     repeats: int = 5) -> dict:
    """Read bandwidth (a sum over `read_mib` MiB of fp32, larger than any cache here) and the GEMM
    peak in `dtype` (a `gemm`-cubed product), each the median of `repeats` runs."""
    a = torch.ones(read_mib * 2 ** 18, device=device)
    read = a.numel() * 4 / median_seconds(a.sum, repeats, device)
    del a
    x, y = (torch.randn(gemm, gemm, device=device).to(dtype) for _ in range(2))
    peak = 2 * gemm ** 3 / median_seconds(lambda: x @ y, repeats, device)
    return {"read_GBps": read / 1e9, "peak_GFLOPs": peak / 1e9, "dtype": str(dtype)[6:],
            "read_MiB": read_mib, "gemm": gemm}


def weight_bytes(model: nn.Module) -> int:
    """Bytes a forward reads from its weights: every parameter once, except an input embedding
    that is not also the output layer (a forward reads only its rows)."""
    params = {id(p): p for p in model.parameters()}
    embed, out = model.get_input_embeddings(), model.get_output_embeddings()
    if out is None or embed.weight is not out.weight:
        params.pop(id(embed.weight), None)
    return sum(p.numel() * p.element_size() for p in params.values())


def forward_flops(model: nn.Module, n: int, context: int) -> float:
    """Multiply-adds x 2 of a forward of n new tokens over `context` cached ones: every linear
    (the output layer included) and attention's two products."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    cfg = model.config
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim(cfg) * (context + n)
    return 2.0 * n * linear + n * attention


def kv_bytes(model: nn.Module, context: int, element_size: int) -> int:
    """Bytes of the cached keys and values a forward reads."""
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim(cfg) * context * element_size


def floor_ms(target, n: int, context: int, roof: dict) -> float:
    """The roofline floor of a forward of n new tokens, in ms: the larger of its memory time and
    its compute time on this machine."""
    size = next(target.model.parameters()).element_size()
    read = weight_bytes(target.model) + kv_bytes(target.model, context, size)
    memory = read / (roof["read_GBps"] * 1e9)
    compute = forward_flops(target.model, n, context) / (roof["peak_GFLOPs"] * 1e9)
    return 1000 * max(memory, compute)
