"""The head's lean decoding step (`heads/lean.py`) against the oracle it replaces: the Hugging Face
decoder layer of the target's type, run on the same inputs and caches. Drafting need not be exact,
so the two agree to rounding: fp32 to float noise, bf16 to a few units in its last place. The
shapes are those a drafter makes: the head's re-run over accepted tokens (causal, positions
following the cache) and a tree step (given positions, a mask over earlier draft entries too)."""
import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.target import crop_cache

TOL = {"fp32": dict(atol=1e-5, rtol=1e-5), "bf16": dict(atol=3e-2, rtol=3e-2)}


def pair(family="llama", dtype="fp32", **config):
    target = tiny_target(family, seed=0, dtype=dtype, **config)
    head = new_head(target, seed=1)
    return target, head


def both(head, features, tokens, cache_lean, cache_hf, **kw):
    """The lean step's and the Hugging Face layer's outputs on copies of one cache."""
    with torch.no_grad():
        lean = head(features, tokens, cache=cache_lean, **kw)
        head.use_lean = False
        try:
            hf = head(features, tokens, cache=cache_hf, **kw)
        finally:
            head.use_lean = True
    return lean, hf


def drafts(head, dtype):
    """A prefix of 7 re-run over (causal), then a tree step of 3 rows over 2 earlier draft
    entries: the cases a `Drafter` runs."""
    g = torch.Generator().manual_seed(0)
    hidden, vocab = head.target_config.hidden_size, head.target_config.vocab_size
    feats = torch.randn(1, 7, hidden, generator=g).to(head.fc.weight.dtype)
    toks = torch.randint(0, vocab, (1, 7), generator=g)
    caches = head.new_cache(), head.new_cache()
    yield "re-run", dict(features=feats, tokens=toks), caches
    draft = torch.randn(1, 2, hidden, generator=g).to(feats.dtype)
    yield "draft entries", dict(features=draft, tokens=toks[:, :2], positions=torch.tensor([7, 7]),
                                tree_mask=torch.eye(2, dtype=torch.bool)), caches
    tree = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [1, 0, 0, 0, 1]], dtype=torch.bool)
    step = torch.randn(1, 3, hidden, generator=g).to(feats.dtype)
    yield "tree step", dict(features=step, tokens=toks[:, 2:5], positions=torch.tensor([8, 8, 8]),
                            tree_mask=tree), caches


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_the_lean_step_is_the_layer_on_every_shape_a_drafter_runs(family, dtype):
    _, head = pair(family, dtype)
    assert head.lean_step() is not None
    for what, kw, (cache_lean, cache_hf) in drafts(head, dtype):
        lean, hf = both(head, kw.pop("features"), kw.pop("tokens"), cache_lean, cache_hf, **kw)
        torch.testing.assert_close(lean, hf, **TOL[dtype], msg=what)
        assert cache_lean.get_seq_length() == cache_hf.get_seq_length()
        torch.testing.assert_close(cache_lean.layers[0].keys, cache_hf.layers[0].keys,
                                   **TOL[dtype], msg=f"{what}: cached keys")


def test_after_a_crop_the_lean_step_continues_as_the_layer_does():
    _, head = pair()
    cases = list(drafts(head, "fp32"))
    _, first, (cache_lean, cache_hf) = cases[0]
    both(head, first["features"], first["tokens"], cache_lean, cache_hf)
    crop_cache(cache_lean, 4), crop_cache(cache_hf, 4)
    feats, toks = first["features"][:, 4:6], first["tokens"][:, 4:6]
    lean, hf = both(head, feats, toks, cache_lean, cache_hf)
    torch.testing.assert_close(lean, hf, **TOL["fp32"])


def test_a_change_to_the_heads_weights_reaches_the_fused_copies():
    _, head = pair()
    _, kw, (cache_lean, cache_hf) = next(drafts(head, "fp32"))
    with torch.no_grad():
        head(kw["features"], kw["tokens"], cache=head.new_cache())   # fuse once
        head.layers[0].self_attn.k_proj.weight.mul_(2.0)
        head.layers[0].mlp.up_proj.weight.add_(0.1)
    lean, hf = both(head, kw["features"], kw["tokens"], cache_lean, cache_hf)
    torch.testing.assert_close(lean, hf, **TOL["fp32"])


def test_a_layer_it_does_not_compute_keeps_the_hugging_face_forward():
    """Qwen3's layer normalises q and k per head: the lean step declines it."""
    _, head = pair("qwen3")
    assert head.lean_step() is None
    _, kw, (cache_a, cache_b) = next(drafts(head, "fp32"))
    lean, hf = both(head, kw["features"], kw["tokens"], cache_a, cache_b)
    assert torch.equal(lean, hf)


def test_training_never_takes_the_lean_step():
    """With gradients on, the head runs the Hugging Face layer whatever the cache: its weights
    learn through it, not through copies."""
    _, head = pair()
    _, kw, _ = next(drafts(head, "fp32"))
    out = head(kw["features"], kw["tokens"], cache=head.new_cache())
    out.sum().backward()
    assert head.layers[0].self_attn.q_proj.weight.grad is not None
