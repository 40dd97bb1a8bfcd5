"""Prepacked weights: cheaper multi-token forwards on a CPU, so verifying a tree costs less.

EAGLE's speedup is bounded by tau / (c(tree)/c(1) + draft cost) (EAGLE §3.3, and `profile.py`). At
batch 1 a forward reads every weight once whatever the number of new tokens, so on paper c(n) stays
near c(1) until the matmuls become compute bound. Stock CPU kernels do not get there: MKL's sgemm
repacks the weight matrix into its blocked layout on *every* call, so a forward of 8 tokens pays
for reading each weight, writing the packed copy and reading that again: profiled on the course's
CPU, the target's matmuls cost well over their single-token time at 8 tokens
(data/results/probe_linear_kernels.json; see RESULTS.md).

This module packs each `nn.Linear`'s weight once, for a few row counts (MKL's packed GEMM,
`cblas_sgemm_pack`, is specific to the number of rows), and pads a forward's rows up to the next
packed size. One token keeps the stock matrix-vector path (already bandwidth bound, and exactly
what vanilla decoding and `transformers.generate` run); long inputs (prefill) keep the stock path
too. Packing changes only the order of float additions: outputs agree to float noise, which the
greedy-equality tests check end to end.

    >>> n = pack_linears(target.model)  # how many layers it packed  # doctest: +SKIP
"""
import types
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

# Row counts to pack for: a forward of m tokens (2 < m <= 16) runs on the smallest size >= m.
# Chosen from the stock and packed times of all 210 decoder matmuls of SmolLM2-135M per row count,
# measured in data/results/probe_linear_kernels.json (`scripts/probe_linear_kernels.py`).
PACK_SIZES = (4, 8, 16)


def available() -> bool:
    """MKL's packed GEMM is in this torch build (x86 CPU builds)."""
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


def _packed_forward(self, x: torch.Tensor) -> torch.Tensor:
    """`nn.Linear.forward`, on a packed weight when the row count suits it. x: [..., in]."""
    rows = x.numel() // x.shape[-1]
    size = next((s for s in self._pack_sizes if s >= rows), None)
    w = self.weight
    if (rows <= 2 or size is None or x.dtype != torch.float32 or x.device.type != "cpu"
            or w.dtype != torch.float32 or w.device.type != "cpu"
            or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
        return F.linear(x, w, self.bias)
    if self._packed_version != (w.data_ptr(), w._version):  # weights changed since packing
        self._packed = {}
        self._packed_version = (w.data_ptr(), w._version)
    if size not in self._packed:
        self._packed[size] = torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), size)
    flat = x.reshape(rows, x.shape[-1])
    if rows < size:
        flat = torch.cat([flat, flat.new_zeros(size - rows, flat.shape[1])])
    out = torch.ops.mkl._mkl_linear(flat, self._packed[size], w.detach(), self.bias, size)
    return out[:rows].reshape(*x.shape[:-1], out.shape[-1])


def pack_linears(model: nn.Module, sizes=PACK_SIZES) -> int:
    """Route every `nn.Linear` of `model` through packed weights (packed lazily, per size, once).

    Parameters and the state dict are untouched (the packed copies live outside them), so saving,
    hashing and `.to()` behave as before; a linear whose weight moved or changed falls back to the
    stock path or repacks. Returns the number of linears routed; 0 where MKL is unavailable.
    """
    if not available():
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module._pack_sizes = tuple(sorted(sizes))
            module._packed, module._packed_version = {}, None
            module.forward = types.MethodType(_packed_forward, module)
            count += 1
    return count


def unpack_linears(model: nn.Module) -> None:
    """Undo `pack_linears`: stock `nn.Linear.forward` again, packed copies freed."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and "forward" in module.__dict__:
            del module.forward
            for attr in ("_pack_sizes", "_packed", "_packed_version"):
                module.__dict__.pop(attr, None)


@contextmanager
def stock_kernels(model: nn.Module):
    """Run a packed model on the stock path for a while, keeping its packed copies (for timing
    both in one run without paying for repacking)."""
    routed = [m for m in model.modules() if isinstance(m, nn.Linear) and "_pack_sizes" in m.__dict__]
    sizes = [m._pack_sizes for m in routed]
    for m in routed:
        m._pack_sizes = ()
    try:
        yield
    finally:
        for m, s in zip(routed, sizes):
            m._pack_sizes = s


def is_packed(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Linear) and "forward" in m.__dict__ for m in model.modules())

