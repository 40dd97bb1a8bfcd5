"""Prepacked weights: cheaper forwards on a CPU, for vanilla decoding and tree verification alike.

EAGLE's speedup is bounded by tau / (c(tree)/c(1) + draft cost) (EAGLE §3.3, and `profile.py`). At
batch 1 a forward reads every weight once whatever the number of new tokens, so on paper c(1) sits
at the memory floor and c(n) stays near it until the matmuls become compute bound. Stock CPU
kernels get nowhere near: they lay the weight matrix out in their blocked format on *every* call,
so a forward pays for reading each weight, writing the copy and reading that again (profiled on the
course's CPUs: data/results/probe_linear_kernels.json, `profile-target --by-op`; see RESULTS.md).

This module lays each `nn.Linear`'s weight out once, in one of two ways (`KINDS`):

* **onednn**: oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's
  weight freezing does for a CPU linear), used by every row count (`_linear_pointwise`), in fp32
  and, where the CPU has bf16 support, bf16. On the course's CPUs it cut the matmuls' time at
  every row count in both dtypes, the vocabulary-sized lm_head's most of all (RESULTS.md, "Weights
  laid out once by oneDNN", has the curves and the machine);
* **mkl**: MKL's packed GEMM (`cblas_sgemm_pack`, fp32 only), which is specific to the number of
  rows: packed for a few row counts, a forward's rows padded up to the next one; 1-2 rows and long
  inputs keep the stock path. The first of the two this course had; it pays on some CPUs only.

Which runs is measured on the machine at hand (`kernels.use_kernels`). Packing changes only the
order of float additions: outputs agree to float noise, which the greedy-equality tests check end
to end. Whether a row's bits depend on the row count is a property of the kernel, so exact mode
(`exact.py`) measures the linears as they run, packed or not.

    >>> n = pack_linears(target.model)  # how many layers it packed  # doctest: +SKIP
"""
import types
from contextlib import contextmanager
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

# `mkl`: row counts to pack for; a forward of m tokens (2 < m <= 16) runs on the smallest size >= m.
# Chosen from the stock and packed times of all 210 decoder matmuls of SmolLM2-135M per row count,
# measured in data/results/probe_linear_kernels.json (`scripts/probe_linear_kernels.py`).
PACK_SIZES = (4, 8, 16)
KINDS = ("onednn", "mkl")   # the ways to pack, the default first


@lru_cache(maxsize=None)
def available(dtype=torch.float32, kind: str = "onednn") -> bool:
    """This torch build packs weights of `dtype` the `kind` way on the CPU: oneDNN in fp32, and in
    bf16 where the CPU supports it; MKL's packed GEMM in fp32 (x86 builds)."""
    if kind == "onednn":
        return torch.backends.mkldnn.is_available() and (
            dtype == torch.float32
            or (dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()))
    return (kind == "mkl" and dtype == torch.float32 and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_linear"))


def _packed_forward(self, x: torch.Tensor) -> torch.Tensor:
    """`nn.Linear.forward` on a weight laid out once (`self._pack_kind`), where it applies. x: [..., in]."""
    rows = x.numel() // x.shape[-1]
    w, kind = self.weight, self._pack_kind
    if (kind is None or x.dtype != w.dtype or x.device.type != "cpu" or w.device.type != "cpu"
            or not available(w.dtype, kind)
            or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
        return F.linear(x, w, self.bias)
    size = None if kind == "onednn" else next((s for s in self._pack_sizes if s >= rows), None)
    if kind == "mkl" and (rows <= 2 or size is None):
        return F.linear(x, w, self.bias)
    if self._packed_version != (w.data_ptr(), w._version):  # weights changed since packing
        self._packed = {}
        self._packed_version = (w.data_ptr(), w._version)
    if (kind, size) not in self._packed:
        self._packed[kind, size] = (torch.ops.mkldnn._reorder_linear_weight(w.detach())
                                    if kind == "onednn" else
                                    torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), size))
    packed, bias = self._packed[kind, size], None if self.bias is None else self.bias.detach()
    if kind == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    flat = x.reshape(rows, x.shape[-1])
    if rows < size:
        flat = torch.cat([flat, flat.new_zeros(size - rows, flat.shape[1])])
    out = torch.ops.mkl._mkl_linear(flat, packed, w.detach(), bias, size)
    return out[:rows].reshape(*x.shape[:-1], out.shape[-1])


def pack_linears(model: nn.Module, kind: str = "onednn", sizes=PACK_SIZES) -> int:
    """Route every `nn.Linear` of `model` through weights packed the `kind` way (lazily, once).

    Parameters and the state dict are untouched (the packed copies live outside them), so saving,
    hashing and `.to()` behave as before; a linear whose weight moved or changed falls back to the
    stock path or repacks. Returns the number of linears routed; 0 where no kind is available.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown packing {kind!r}; one of {KINDS}")
    if not any(available(d, kind) for d in (torch.float32, torch.bfloat16)):
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            if "forward" not in module.__dict__:
                module._packed, module._packed_version = {}, None
                module.forward = types.MethodType(_packed_forward, module)
            module._pack_kind, module._pack_sizes = kind, tuple(sorted(sizes))
            count += 1
    return count


def unpack_linears(model: nn.Module) -> None:
    """Undo `pack_linears`: stock `nn.Linear.forward` again, packed copies freed."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and "forward" in module.__dict__:
            del module.forward
            for attr in ("_pack_kind", "_pack_sizes", "_packed", "_packed_version"):
                module.__dict__.pop(attr, None)


def _routed(model: nn.Module) -> list[nn.Linear]:
    """The routed linears of `model`, those a module stands in for included: exact mode's linears
    (`exact/linears.py`) hold the linear they call in `replaced`, outside the module tree."""
    linears = [inner for m in model.modules()
               for inner in ((m,) if isinstance(m, nn.Linear) else getattr(m, "replaced", ()))]
    return [m for m in linears if isinstance(m, nn.Linear) and "_pack_kind" in m.__dict__]


@contextmanager
def packed_as(model: nn.Module, kind: str | None):
    """Run a packed model's linears the `kind` way for a while (None: the stock path), keeping
    every packed copy, so that kernels can be timed side by side in one run without repacking."""
    routed = _routed(model)
    kinds = [m._pack_kind for m in routed]
    for m in routed:
        m._pack_kind = kind
    try:
        yield
    finally:
        for m, k in zip(routed, kinds):
            m._pack_kind = k


def stock_kernels(model: nn.Module):
    """Run a packed model on the stock path for a while, keeping its packed copies."""
    return packed_as(model, None)


def packed_kind(model: nn.Module) -> str | None:
    """How the model's linears are packed ("onednn", "mkl"), or None."""
    return next((m._pack_kind for m in _routed(model)), None)


def is_packed(model: nn.Module) -> bool:
    return packed_kind(model) is not None
