"""Where a forward's time goes: the profiler's self time per op family, for n new tokens.

The cost curve itself, c(n)/c(1), is the runtime's (`eagle_mini/runtime/cost.py`): `auto` and the
kernel choice read it. This module takes one forward of that curve apart, op by op, so that a
reader can see whether the matmuls, attention or the Python between ops make a step slow.
"""
import contextlib
import os
import sys
import time

import torch

from eagle_mini.results import machine_info
from eagle_mini.runtime.cost import chain_tokens, prefilled_cache
from eagle_mini.target import crop_cache


# Op families of a Llama forward, by the op's name without its namespace ("aten::mm" -> "mm").
OP_FAMILIES = {
    "matmul": {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_mkl_linear",
               "_linear_pointwise"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                  "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_flash_attention_for_cpu_backward", "softmax", "_softmax",
                  "_safe_softmax"},
    "mask and positions": {"tril", "triu", "where", "arange", "index", "index_put_", "masked_fill",
                           "masked_fill_", "logical_not", "logical_and", "logical_or", "eq", "ne",
                           "ge", "le", "lt", "gt", "bitwise_and", "bitwise_or", "bitwise_not",
                           "any", "all", "nonzero"},
    "norm, rope, activation": {"pow", "mean", "rsqrt", "silu", "neg", "cos", "sin", "mul", "mul_",
                               "add", "add_", "sub", "div", "embedding"},
    "copies and cache": {"cat", "copy_", "to", "_to_copy", "contiguous", "clone", "empty",
                         "empty_like", "empty_strided", "slice", "view", "reshape", "transpose",
                         "expand", "select", "stack", "unsqueeze", "as_strided", "_unsafe_view",
                         "t", "narrow", "split", "chunk", "zeros", "ones", "fill_", "zero_",
                         "resize_", "detach", "alias"},
}


def op_family(name: str) -> str:
    """The family of a profiled op (`OP_FAMILIES`), "other ops" when none.

        >>> op_family("mkl::_mkl_linear"), op_family("aten::_safe_softmax"), op_family("aten::select")
        ('matmul', 'attention', 'copies and cache')
    """
    base = name.split("::")[-1]
    return next((f for f, names in OP_FAMILIES.items() if base in names), "other ops")


@contextlib.contextmanager
def quiet_native_stderr():
    """Silence what native code writes to file descriptor 2 meanwhile: the profiler's library
    (Kineto) prints "STAGE ..." and "USDT ... profiler_start" lines there on every start and stop,
    below Python's `sys.stderr`, and reads its log level (`KINETO_LOG_LEVEL`) only where the
    process started. A Python exception still reaches the user: its traceback prints after."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@torch.no_grad()
def op_breakdown(target, ns=(1, 2, 16), prefix_len: int = 200, repeats: int = 5, warmup: int = 2,
                 seed: int = 0) -> dict:
    """Where a forward of n new tokens spends its time, per op family, for each n (the same
    forward as `cost_curve`'s). The profiler's self time of every op is summed by family; what the
    wall time holds beyond all ops is Python and framework work between them ("outside ops"),
    which does not grow with n. Per n: mean wall ms and ms per family over `repeats` forwards.
    The profiler adds its own overhead, so read the families against each other and across n,
    and take c(n)/c(1) itself from `cost_curve`."""
    from torch.profiler import ProfilerActivity, profile
    g = torch.Generator().manual_seed(seed)
    cache = prefilled_cache(target, prefix_len, g)
    out = []
    for n in ns:
        tokens, mask = chain_tokens(target, n, g)
        for _ in range(warmup):
            target.forward(tokens, cache, tree_mask=mask)
            crop_cache(cache, prefix_len)
        with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            for _ in range(repeats):
                target.forward(tokens, cache, tree_mask=mask)
                crop_cache(cache, prefix_len)
            wall = (time.perf_counter() - t) / repeats
        families, ops = {}, {}
        for e in prof.key_averages():
            ms = e.self_cpu_time_total / 1000 / repeats
            families[op_family(e.key)] = families.get(op_family(e.key), 0.0) + ms
            ops[e.key] = ms
        families["outside ops"] = max(0.0, 1000 * wall - sum(families.values()))
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
        out.append({"n": n, "wall_ms": 1000 * wall, "family_ms": families,
                    "top_ops_ms": dict(top)})
    return {"target": target.name, "dtype": str(target.dtype).replace("torch.", ""),
            "prefix_len": prefix_len, "repeats": repeats, "by_n": out, "machine": machine_info()}
