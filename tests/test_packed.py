"""Prepacked weights change how a matmul runs, never what it computes (beyond float noise).

Oracle: the stock `nn.Linear` / the unpacked model on the same inputs.
"""
import copy

import pytest
import torch
from torch import nn

from eagle_mini import tiny_target
from eagle_mini.runtime.packed import (KINDS, available, is_packed, pack_linears, packed_as,
                                       packed_kind, stock_kernels, unpack_linears)
from eagle_mini.tree import from_parents

pytestmark = pytest.mark.skipif(not any(available(torch.float32, k) for k in KINDS),
                                reason="neither oneDNN nor MKL packing in this torch build")
CASES = [(k, d) for k in KINDS for d in (torch.float32, torch.bfloat16) if available(d, k)]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kind,dtype", CASES)
def test_packed_linear_equals_stock_for_every_row_count(bias, kind, dtype):
    torch.manual_seed(0)
    lin = nn.Linear(48, 80, bias=bias).to(dtype)
    ref = copy.deepcopy(lin)
    assert pack_linears(lin, kind) == 1
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    with torch.no_grad():
        for rows in range(1, 21):
            x = torch.randn(1, rows, 48, dtype=dtype)
            torch.testing.assert_close(lin(x), ref(x), atol=tol, rtol=tol)
    # mkl: one packed copy per row count, 1-2 rows and > 16 rows on the stock path; onednn: one
    assert set(lin._packed) == ({("mkl", 4), ("mkl", 8), ("mkl", 16)} if kind == "mkl"
                                else {("onednn", None)})


def test_packing_a_dtype_it_cannot_takes_the_stock_path():
    """MKL packs fp32 only: a bf16 linear routed through it runs the stock kernel, packing nothing."""
    lin = nn.Linear(16, 16).to(torch.bfloat16)
    pack_linears(lin, "mkl")
    x = torch.randn(6, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))
    assert lin._packed == {}


def test_weights_changed_after_packing_are_used():
    """Packed copies follow in-place weight updates (e.g. loading a state dict)."""
    torch.manual_seed(1)
    lin = nn.Linear(16, 16, bias=False)
    pack_linears(lin)
    x = torch.randn(5, 16)
    with torch.no_grad():
        lin(x)
        lin.weight.mul_(2.0)
        torch.testing.assert_close(lin(x), x @ lin.weight.T, atol=1e-5, rtol=1e-5)


def test_gradients_take_the_stock_path():
    lin = nn.Linear(8, 8)
    pack_linears(lin)
    x = torch.randn(6, 8, requires_grad=True)
    lin(x).sum().backward()
    assert x.grad is not None and lin.weight.grad is not None


def test_state_dict_and_unpack_are_unchanged():
    target = tiny_target("qwen2", seed=0)
    before = {k: v.clone() for k, v in target.model.state_dict().items()}
    pack_linears(target.model)
    assert is_packed(target.model)
    after = target.model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    unpack_linears(target.model)
    assert not is_packed(target.model)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_tree_forward_packed_equals_stock(family):
    """A 7-node tree verified with packed weights gives the stock logits and features."""
    target = tiny_target(family, seed=2)
    tree = from_parents([-1, 0, 0, 1, 1, 2, 3])
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, target.vocab_size, (11,), generator=g)
    tokens = torch.randint(0, target.vocab_size, (tree.num_nodes,), generator=g)

    def run():
        cache = target.new_cache()
        target.forward(prefix, cache)
        return target.forward(tokens, cache, positions=tree.positions(11), tree_mask=tree.mask)

    stock = run()
    pack_linears(target.model)
    packed = run()
    torch.testing.assert_close(packed.logits, stock.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(packed.features, stock.features, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not available(torch.float32, "mkl"), reason="no MKL packed GEMM here")
def test_stock_kernels_switch_paths_and_keep_packed_copies():
    torch.manual_seed(3)
    lin = nn.Linear(32, 32, bias=False)
    pack_linears(lin, "mkl")
    x = torch.randn(8, 32)
    with torch.no_grad():
        lin(x)
        packed_copy = lin._packed["mkl", 8]
        with stock_kernels(lin):
            assert not is_packed(lin)
            torch.testing.assert_close(lin(x), x @ lin.weight.T, atol=1e-5, rtol=1e-5)
            lin(torch.randn(16, 32))
        assert lin._packed["mkl", 8] is packed_copy and ("mkl", 16) not in lin._packed
        assert lin._pack_sizes == (4, 8, 16) and packed_kind(lin) == "mkl"


@pytest.mark.skipif(len(CASES) < 2, reason="one way to pack here")
def test_switching_kinds_keeps_every_packed_copy():
    """`packed_as` times the kinds side by side in one run: each keeps its own copy."""
    lin = nn.Linear(32, 32, bias=False)
    pack_linears(lin, "onednn")
    x = torch.randn(8, 32)
    with torch.no_grad():
        lin(x)
        with packed_as(lin, "mkl"):
            lin(x)
    assert {("onednn", None), ("mkl", 8)} <= set(lin._packed) and packed_kind(lin) == "onednn"


def test_auto_kernels_keep_the_fastest_and_cache_the_choice(monkeypatch, tmp_path):
    """`use_kernels("auto")` follows the timing, whichever way it goes, and measures once."""
    from eagle_mini.runtime import kernels as kernels
    monkeypatch.setenv("EAGLE_MINI_CACHE", str(tmp_path))
    calls = []

    def stock_fastest(target, kinds, sizes, repeats):
        calls.append(kinds)
        assert kinds[-1] == "stock" and is_packed(target.model)
        return {k: 1.0 if k == "stock" else 2.0 for k in kinds}
    monkeypatch.setattr(kernels, "time_kernels", stock_fastest)
    target = tiny_target("llama", seed=0)
    record = kernels.use_kernels(target, "auto")
    assert record["kernels"] == "stock" and not is_packed(target.model)
    assert target.kernels is record and record["how"] == "measured now"
    assert "stock kernels (fastest here" in kernels.kernels_note(record)
    again = tiny_target("llama", seed=0)
    assert kernels.use_kernels(again, "auto")["how"].startswith("measured earlier here")
    assert len(calls) == 1 and not is_packed(again.model)

    monkeypatch.setattr(kernels, "time_kernels", lambda target, kinds, sizes, repeats: {
        k: 3.0 if k == "stock" else 1.0 + kinds.index(k) for k in kinds})
    monkeypatch.setattr("eagle_mini.runtime.kernels.torch.get_num_threads", lambda: 99)  # new key
    third = tiny_target("llama", seed=0)
    first = kernels.kinds_here(torch.float32)[0]
    assert kernels.use_kernels(third, "auto")["kernels"] == first == packed_kind(third.model)


def test_old_records_still_read():
    """Results files written before oneDNN packing name MKL's "packed", with two timings."""
    from eagle_mini.runtime.kernels import kernels_note
    note = kernels_note({"kernels": "packed", "packed_ms": 1.0, "stock_ms": 2.0, "how": "x"})
    assert note.startswith("MKL-packed weights (fastest here: 1.0 ms against stock kernels 2.0 ms")


def test_asked_kernels_and_dtypes_without_a_choice():
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.runtime.kernels import use_kernels
    target = tiny_target("llama", seed=0)
    assert use_kernels(target, "packed")["how"] == "asked for" and is_packed(target.model)
    assert use_kernels(target, "stock")["kernels"] == "stock" and not is_packed(target.model)
    target.model.to(torch.bfloat16)
    bf16 = "onednn" if available(torch.bfloat16, "onednn") else "stock"
    assert use_kernels(target, "packed")["kernels"] == bf16 == (packed_kind(target.model) or "stock")
    assert use_kernels(target, "mkl")["kernels"] == "stock"   # MKL packs fp32 only
    target.model.to(torch.float16)
    assert use_kernels(target, "packed")["kernels"] == "stock" and not is_packed(target.model)
    with pytest.raises(EagleMiniError, match="unknown kernels"):
        use_kernels(target, "fast")
