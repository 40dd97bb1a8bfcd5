"""The runtime's state is declared on the target (`Target.runtime`) and every change it makes to
the model can be undone (`runtime/state.py`): switching exact mode off gives back the stock
target bit for bit, a draft head never inherits the target's runtime, and the stock forward the
cost curve times beside the exact one rebuilds nothing.

The oracle throughout is a fresh target built from the same seed, never touched by the runtime."""
import json

import pytest
import torch
from torch import nn

from eagle_mini import tiny_target
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.eagle3 import Eagle3Head
from eagle_mini.runtime.exact import (ATTENTION, GROUPED, ExactLinear, ExactRecord, FixedKLinear,
                                      apply, restore, stock_forward, use_exact)
from eagle_mini.runtime.kernels import use_kernels
from eagle_mini.runtime.packed import available, pack_linears, packed_kind
from eagle_mini.runtime.run import pick_head
from eagle_mini.runtime.state import ModelEdits
from eagle_mini.tree import from_choices

SIZES = dict(vocab_size=96, hidden_size=64, intermediate_size=1536, num_hidden_layers=2)
CHUNKED = {"1536x64": 512}   # down_proj in fixed K-chunks whatever this machine measures


def fresh(dtype="bf16"):
    return tiny_target("llama", seed=0, dtype=dtype, **SIZES)


def made_exact(dtype="bf16"):
    """A target in exact mode as `apply` leaves it, with down_proj chunked on every machine."""
    target = fresh(dtype)
    apply(target, CHUNKED, GROUPED)
    target.runtime.exact = ExactRecord(True, "planted for the test", CHUNKED, GROUPED)
    return target


def tree_logits(target) -> torch.Tensor:
    """A prefill and one tree forward over it: what verification computes."""
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 96, (40,), generator=g).tolist()
    tree = from_choices([[0], [1], [0, 0], [0, 1], [0, 0, 0]])
    tokens = torch.randint(0, 96, (tree.num_nodes,), generator=g)
    cache = target.new_cache()
    first = target.forward(prefix, cache).logits
    return torch.cat([first, target.forward(tokens, cache, positions=tree.positions(len(prefix)),
                                            tree_mask=tree.mask).logits])


def assert_stock(target, oracle):
    assert not any(isinstance(m, ExactLinear) for m in target.model.modules())
    assert target.model.config._attn_implementation == oracle.model.config._attn_implementation
    assert target.model.config.to_dict() == oracle.model.config.to_dict()
    assert target.exact is None and not target.runtime.is_exact
    assert not target.model.model._forward_pre_hooks      # exact attention's key-list hook is off
    assert torch.equal(tree_logits(target), tree_logits(oracle))


def test_exact_mode_off_returns_an_exact_target_to_stock_bit_for_bit():
    target = made_exact()
    assert use_exact(target, "off") is None
    assert_stock(target, fresh())


def test_exact_mode_measured_here_then_off_is_stock_again():
    """The real `use_exact("on")` (measured or read from this machine's cache), then off."""
    target = fresh()
    record = use_exact(target, "on")
    assert target.exact is record and target.runtime.is_exact == record.exact
    use_exact(target, "off")
    assert_stock(target, fresh())


def test_restore_puts_back_the_attention_that_was_there():
    target = fresh()
    target.model.set_attn_implementation("eager")
    apply(target, CHUNKED, GROUPED)
    assert target.model.config._attn_implementation == ATTENTION
    restore(target)
    assert target.model.config._attn_implementation == "eager"
    assert not hasattr(target.model.config, "exact_attention")


def test_the_stock_forward_for_a_while_rebuilds_nothing():
    """`stock_forward` puts the stock modules back and then the *same* exact modules again: a head
    attached before still shares the live lm_head, and no weight is copied or repacked."""
    target = fresh()
    chunked = {**CHUNKED, "64x96": 32}                  # lm_head too: a head shares it
    apply(target, chunked, GROUPED)
    target.runtime.exact = ExactRecord(True, "planted for the test", chunked, GROUPED)
    before = {name: m for name, m in target.model.named_modules() if isinstance(m, ExactLinear)}
    assert any(isinstance(m, FixedKLinear) for m in before.values())
    head = new_head(target)
    with stock_forward(target):
        assert not any(isinstance(m, ExactLinear) for m in target.model.modules())
        assert target.model.config._attn_implementation == "sdpa" and target.exact is None
        assert torch.equal(tree_logits(target), tree_logits(fresh()))
    after = {name: m for name, m in target.model.named_modules() if isinstance(m, ExactLinear)}
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert target.runtime.is_exact and target.model.config._attn_implementation == ATTENTION
    assert head._shared["lm_head_module"] is target.model.lm_head


@pytest.mark.skipif(not available(torch.float32, "onednn"), reason="no oneDNN packing here")
def test_a_head_drafting_for_an_exact_packed_target_is_packed_as_the_target_is():
    """Exact mode stands its own modules in for the target's linears, the packed ones inside them:
    the kernels are still the target's, and `pick_head` lays the head's linears out the same way,
    a draft vocabulary's frozen output rows included (the regression: an exact target read as
    unpacked, so its head drafted on the stock kernels)."""
    target = fresh("fp32")
    pack_linears(target.model, "onednn")
    head = new_head(target, draft_vocab=list(range(0, 96, 2)))
    every = {f"{m.in_features}x{m.out_features}": m.in_features // 2
             for m in target.model.modules() if isinstance(m, nn.Linear)}
    apply(target, every, GROUPED)           # every linear stood in for: none is left in the tree
    assert not any(isinstance(m, nn.Linear) for m in target.model.modules())
    assert packed_kind(target.model) == "onednn"
    frozen = head.frozen_linears()   # the draft vocabulary's rows, the lean step's fused copies
    assert frozen[0].weight.data_ptr() == head.draft_weight().data_ptr()   # no copy
    pick_head("eagle2", head, pack_like=target)
    assert packed_kind(head) == "onednn" and all(packed_kind(m) == "onednn" for m in frozen)
    x = torch.randn(3, 64)
    torch.testing.assert_close(head.draft_logits(x), x @ head.draft_weight().T)


@pytest.mark.parametrize("make", ["exact", "packed"])
def test_a_head_made_on_a_changed_target_is_the_head_made_on_a_stock_one(make, tmp_path):
    """Same layer config, same features computed, same config.json: a head holds no runtime
    state of its target's (EAGLE-1 and EAGLE-3 alike)."""
    stock = fresh("fp32" if make == "packed" else "bf16")
    if make == "exact":
        changed = made_exact()
    else:
        changed = fresh("fp32")
        use_kernels(changed, "packed")
    a, b = new_head(stock, seed=3), new_head(changed, seed=3)
    assert a.layer_config.to_dict() == b.layer_config.to_dict()
    assert a.layer_config._attn_implementation == b.layer_config._attn_implementation
    g = torch.Generator().manual_seed(2)
    features = torch.randn(1, 7, 64, generator=g).to(stock.dtype)
    tokens = torch.randint(0, 96, (1, 7), generator=g)
    with torch.no_grad():
        assert torch.equal(a(features, tokens), b(features, tokens))
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    saved = [json.loads((tmp_path / d / "config.json").read_text()) for d in "ab"]
    assert saved[0] == saved[1] and "exact_attention" not in json.dumps(saved[1])
    e3 = [Eagle3Head(t.config, layers=(0, 1, 2)).layer_config for t in (stock, changed)]
    assert e3[0].to_dict() == e3[1].to_dict()
    assert e3[0]._attn_implementation == e3[1]._attn_implementation


def test_model_edits_undo_everything_once_and_suspend_without_rebuilding():
    from torch import nn
    model = nn.Sequential(nn.Linear(2, 2))
    model.config = type("Cfg", (), {})()
    model.config.kept = 1
    edits = ModelEdits(model)
    first, second = nn.Identity(), nn.Identity()
    edits.swap(model, "0", first)
    edits.swap(model, "0", second)          # a second swap keeps the first original
    edits.set_field("kept", 2)
    edits.set_field("added", 3)
    with edits.suspended():
        assert isinstance(model[0], nn.Linear) and model.config.kept == 1
        assert not hasattr(model.config, "added")
    assert model[0] is second and model.config.added == 3
    edits.undo()
    assert isinstance(model[0], nn.Linear) and model.config.kept == 1
    assert not hasattr(model.config, "added") and not edits


def test_model_edits_add_a_pre_hook_once_and_take_it_off_with_the_rest():
    """Exact mode's decoder-stack hook (`exact.attention.pass_keys`) is an edit like the others:
    asked for again (`apply` once per attention way) it still runs once a forward, and it is off
    while suspended and after `undo`."""
    from torch import nn
    model = nn.Linear(2, 2)
    model.config = type("Cfg", (), {})()
    seen = []

    def hook(module, args, kwargs):
        seen.append(module)
    edits = ModelEdits(model)
    edits.pre_hook(model, hook)
    edits.pre_hook(model, hook)
    x = torch.ones(1, 2)
    model(x)
    assert seen == [model] and edits
    with edits.suspended():
        model(x)
    assert len(seen) == 1
    model(x)
    assert len(seen) == 2
    edits.undo()
    model(x)
    assert len(seen) == 2 and not edits


def test_hidden_side_effects_are_gone():
    """Importing the package leaves Hugging Face's logging alone, a sampled HF run leaves torch's
    global generator as it was, and a head is packed only when asked to (`pack_like`)."""
    import subprocess
    import sys
    code = ("from transformers.utils import logging as l; v = l.get_verbosity(); "
            "import eagle_mini.models, eagle_mini.runtime.run; assert l.get_verbosity() == v")
    subprocess.run([sys.executable, "-c", code], check=True)

    from eagle_mini.runtime.packed import available, packed_kind
    from eagle_mini.runtime.run import pick_head, run_hf
    target = fresh("fp32")
    target.eos_token_ids = set()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run_hf(target, [1, 2, 3], 4, {}, temperature=1.0, seed=5)
    assert torch.equal(torch.rand(3), expected)

    use_kernels(target, "packed")
    head = new_head(target)
    assert packed_kind(pick_head("eagle2", head)) is None
    if available(torch.float32, "onednn") or available(torch.float32, "mkl"):
        assert packed_kind(pick_head("eagle2", head, pack_like=target)) == packed_kind(target.model)


def test_every_finding_of_this_machine_is_cached_one_way(tmp_path, monkeypatch):
    """Kernels and exact mode measure once, then read the same file back; every key escapes a hub
    id's '/' and ':' and names the machine, threads and versions."""
    monkeypatch.setenv("EAGLE_MINI_CACHE", str(tmp_path))
    target = fresh()
    target.name = "owner/tiny:rev"
    first = use_kernels(target, "auto")
    assert use_kernels(target, "auto")["how"].startswith("measured earlier here")
    assert use_kernels(target, "auto")["kernels"] == first["kernels"]
    record = use_exact(target, "on")
    again = use_exact(target, "on")
    assert again.how.startswith("measured earlier here") and again.exact == record.exact
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json"))
    assert [f.split("/")[0] for f in files] == ["exact", "kernels"]
    for f in files:
        name = f.split("/")[1]
        assert name.startswith("owner_tiny_rev_bfloat16_cpu_t") and ":" not in name
        assert f"torch{torch.__version__.split('+')[0]}" in name
