"""Prepacked weights change how a matmul runs, never what it computes (beyond float noise).

Oracle: the stock `nn.Linear` / the unpacked model on the same inputs.
"""
import copy

import pytest
import torch
from torch import nn

from eagle_mini import tiny_target
from eagle_mini.runtime.packed import available, is_packed, pack_linears, stock_kernels, unpack_linears
from eagle_mini.tree import from_parents

pytestmark = pytest.mark.skipif(not available(), reason="MKL packed GEMM not in this torch build")


@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_equals_stock_for_every_row_count(bias):
    torch.manual_seed(0)
    lin = nn.Linear(48, 80, bias=bias)
    ref = copy.deepcopy(lin)
    assert pack_linears(lin) == 1
    with torch.no_grad():
        for rows in range(1, 21):
            x = torch.randn(1, rows, 48)
            torch.testing.assert_close(lin(x), ref(x), atol=1e-5, rtol=1e-5)
    assert set(lin._packed) == {4, 8, 16}  # 1-2 rows and > 16 rows stay on the stock path


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


def test_stock_kernels_switch_paths_and_keep_packed_copies():
    torch.manual_seed(3)
    lin = nn.Linear(32, 32, bias=False)
    pack_linears(lin)
    x = torch.randn(8, 32)
    with torch.no_grad():
        lin(x)
        packed_copy = lin._packed[8]
        with stock_kernels(lin):
            torch.testing.assert_close(lin(x), x @ lin.weight.T, atol=1e-5, rtol=1e-5)
            lin(torch.randn(16, 32))
        assert lin._packed[8] is packed_copy and 16 not in lin._packed  # stock path packed nothing
        assert lin._pack_sizes == (4, 8, 16)


def test_auto_kernels_keep_the_faster_and_cache_the_choice(monkeypatch, tmp_path):
    """`use_kernels("auto")` follows the timing, whichever way it goes, and measures once."""
    from eagle_mini.runtime import kernels as kernels
    monkeypatch.setattr(kernels, "cache_dir", lambda: tmp_path)
    calls = []

    def fake_curve(target, ns, **kw):  # stock twice as fast as packed at every size
        calls.append(kw)
        assert kw["compare_stock"] and is_packed(target.model)
        return {"median_ms": [2.0] * len(ns), "stock": {"median_ms": [1.0] * len(ns)}}
    monkeypatch.setattr(kernels, "cost_curve", fake_curve)
    target = tiny_target("llama", seed=0)
    record = kernels.use_kernels(target, "auto")
    assert record["kernels"] == "stock" and not is_packed(target.model)
    assert target.kernels is record and record["how"] == "measured now"
    assert "stock kernels (faster here" in kernels.kernels_note(record)
    again = tiny_target("llama", seed=0)
    assert kernels.use_kernels(again, "auto")["how"].startswith("measured earlier here")
    assert len(calls) == 1 and not is_packed(again.model)

    monkeypatch.setattr(kernels, "cost_curve", lambda target, ns, **kw: {
        "median_ms": [1.0] * len(ns), "stock": {"median_ms": [2.0] * len(ns)}})
    monkeypatch.setattr("eagle_mini.runtime.kernels.torch.get_num_threads", lambda: 99)  # new key
    third = tiny_target("llama", seed=0)
    assert kernels.use_kernels(third, "auto")["kernels"] == "packed" and is_packed(third.model)


def test_asked_kernels_and_dtypes_without_a_choice():
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.runtime.kernels import use_kernels
    target = tiny_target("llama", seed=0)
    assert use_kernels(target, "packed")["how"] == "asked for" and is_packed(target.model)
    assert use_kernels(target, "stock")["kernels"] == "stock" and not is_packed(target.model)
    target.model.to(torch.bfloat16)
    assert use_kernels(target, "packed")["kernels"] == "stock" and not is_packed(target.model)
    with pytest.raises(EagleMiniError, match="unknown kernels"):
        use_kernels(target, "fast")
