"""The target wrapper verifies trees on an unmodified HF model (EAGLE §3.1, §3.3).

Oracle: running each root-to-leaf path as a plain causal sequence. A tree-masked forward must give
the same logits at every node, and keeping one path's cache entries must give the same cache as
running only that path.
"""
import copy

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.target import crop_cache, keep_cache_entries
from eagle_mini.tree import from_parents

# root, two children, three grandchildren, one great-grandchild: 7 nodes, 4 leaves
PARENTS = [-1, 0, 0, 1, 1, 2, 3]
FAMILIES = ["llama", "mistral", "qwen2", "qwen3"]


def prefix_and_tree(target, seed=0, prefix_len=11):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, target.vocab_size, (prefix_len,), generator=g)
    tokens = torch.randint(0, target.vocab_size, (len(PARENTS),), generator=g)
    return prefix, tokens, from_parents(PARENTS)


def check_tree_equals_paths(target):
    prefix, tokens, tree = prefix_and_tree(target)
    cache = target.new_cache()
    target.forward(prefix, cache)
    base = copy.deepcopy(cache)
    step = target.forward(tokens, cache, positions=tree.positions(len(prefix)), tree_mask=tree.mask)
    for path in tree.retrieve_paths:
        path = path[path >= 0]
        plain = copy.deepcopy(base)
        ref = target.forward(tokens[path], plain)
        torch.testing.assert_close(step.logits[path], ref.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(step.features[path], ref.features, atol=1e-4, rtol=1e-4)
        kept = copy.deepcopy(cache)
        keep_cache_entries(kept, len(prefix), path)
        assert kept.get_seq_length() == plain.get_seq_length()
        for a, b in zip(kept.layers, plain.layers):   # fp32 noise, as the logits: a tree's rows
            # are reduced in other orders than a chain's (on an AMX Xeon up to ~1.3e-5)
            torch.testing.assert_close(a.keys, b.keys, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(a.values, b.values, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_mask_matches_paths_tiny(family):
    check_tree_equals_paths(tiny_target(family, seed=1))


def test_tree_mask_matches_paths_embedded(smollm):
    check_tree_equals_paths(smollm)


def test_tree_mask_is_not_trivially_causal():
    """Negative control: without the tree mask, siblings see each other and logits change."""
    target = tiny_target("llama", seed=2)
    prefix, tokens, tree = prefix_and_tree(target)
    cache = target.new_cache()
    target.forward(prefix, cache)
    base = copy.deepcopy(cache)
    masked = target.forward(tokens, cache, positions=tree.positions(len(prefix)), tree_mask=tree.mask)
    causal = target.forward(tokens, base, positions=tree.positions(len(prefix)))
    assert not torch.allclose(masked.logits[2:], causal.logits[2:], atol=1e-3)


def test_crop_and_continue_equals_fresh_run():
    """crop(-n) semantics of transformers 5.x: cropping then continuing equals never having run."""
    target = tiny_target("qwen2", seed=3)
    ids = torch.arange(20) % target.vocab_size
    cache = target.new_cache()
    target.forward(ids[:15], cache)
    crop_cache(cache, 10)
    assert cache.get_seq_length() == 10
    a = target.forward(ids[10:20], cache)
    b = target.forward(ids[:20], target.new_cache())
    torch.testing.assert_close(a.logits, b.logits[10:], atol=1e-4, rtol=1e-4)


def test_context_length_is_enforced():
    from eagle_mini import EagleMiniError
    target = tiny_target("llama", seed=0, max_position_embeddings=16)
    with pytest.raises(EagleMiniError, match="context length"):
        target.forward(torch.zeros(17, dtype=torch.long), target.new_cache())
