"""EAGLE decoding is lossless: greedy output is token-identical to vanilla greedy (EAGLE §3.3).

Two drafters exercise it: a random (untrained) head, whose drafts are mostly rejected, and an oracle
drafter that proposes the target's own greedy continuation with some tokens corrupted, which makes
long accepted paths through non-contiguous tree nodes and so exercises cache compaction.
"""
import pytest
import torch

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.draft import Drafter
from eagle_mini.tree import DynamicTree
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.target import crop_cache

SMALL_TREES = ["chain:3", [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]], DynamicTree(8, 3, 3)]


class OracleDrafter(Drafter):
    """Drafts the reference continuation along rank 0, corrupting every 5th token."""

    def __init__(self, head, tree, reference, prompt_len):
        super().__init__(head, tree)
        self.reference, self.prompt_len = reference, prompt_len

    def draft(self, root_token):
        draft = super().draft(root_token)
        done = self.stable - self.prompt_len  # output tokens before the root
        node = 0
        for d in range(1, draft.tree.max_depth + 1):
            kids = [c for c in draft.tree.children[node] if draft.tree.ranks[c] == 0]
            if not kids or done + d >= len(self.reference):
                break
            node = kids[0]
            token = self.reference[done + d]
            if (done + d) % 5 == 2:
                token = (token + 1) % self.head.draft_vocab_size
            draft.tokens[node] = token
            for sib in draft.tree.children[draft.tree.parents[node]]:  # keep siblings distinct
                if sib != node and draft.tokens[sib] == token:
                    draft.tokens[sib] = (token + 7) % self.head.draft_vocab_size
        return draft


@pytest.fixture(scope="module")
def smollm_head(smollm):
    return new_head(smollm, seed=0)


@pytest.fixture(scope="module")
def references(smollm, mt_prompts):
    return [generate_vanilla(smollm, p, 32) for p in mt_prompts[:4]]


@pytest.mark.parametrize("tree", ["eagle", "eagle2"])
def test_random_head_is_lossless_on_mtbench(smollm, smollm_head, references, tree):
    """Token-identical to vanilla, and the counts add up: one target forward for the prefill and
    one per cycle; the prefill gives the first token and the cycles every other one; tau is the
    mean cycle length; the head runs once over the prompt and, per cycle, once per draft level
    below the last plus once over the accepted tokens."""
    small = {"eagle": SMALL_TREES[1], "eagle2": SMALL_TREES[2]}[tree]
    levels = 3  # both small trees draft 3 levels
    for ref in references:
        gen = generate(smollm, smollm_head, ref.prompt_ids, 32, tree=small)
        assert gen.output_ids == ref.output_ids
        s, cycles = gen.stats, gen.stats["cycle_lengths"]
        assert s["new_tokens"] == len(gen.output_ids)
        assert s["target_forwards"] == 1 + len(cycles)
        assert sum(cycles) == s["new_tokens"] - 1
        assert all(1 <= c <= levels + 1 for c in cycles)
        assert s["tau"] == pytest.approx(sum(cycles) / len(cycles), rel=1e-12)
        assert s["tokens_per_forward"] == pytest.approx(s["new_tokens"] / s["target_forwards"],
                                                        rel=1e-12)
        assert s["head_forwards"] == 1 + levels * len(cycles)


def test_oracle_drafter_is_lossless_with_long_accepted_paths(smollm, smollm_head, references):
    longest = 0
    for ref in references:
        drafter = OracleDrafter(smollm_head, "eagle1", ref.output_ids, len(ref.prompt_ids))
        gen = generate(smollm, smollm_head, ref.prompt_ids, 32, drafter=drafter)
        assert gen.output_ids == ref.output_ids
        longest = max(longest, max(gen.stats["cycle_lengths"]))
        assert gen.stats["tau"] > 1.5
    assert longest >= 4  # paths of depth >= 3 were accepted and compacted


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("tree", SMALL_TREES + ["eagle1"], ids=lambda t: str(t)[:12])
def test_lossless_on_tiny_families(family, tree):
    target = tiny_target(family, seed=3, vocab_size=48)
    head = new_head(target, seed=1)
    ref = generate_vanilla(target, [5, 6, 7, 8], 40)
    assert generate(target, head, [5, 6, 7, 8], 40, tree=tree).output_ids == ref.output_ids
    oracle = OracleDrafter(head, "eagle1", ref.output_ids, 4)
    assert generate(target, head, [5, 6, 7, 8], 40, drafter=oracle).output_ids == ref.output_ids


def test_head_cache_holds_only_true_features():
    """After several rounds the head's stable cache equals a from-scratch run on true features."""
    target = tiny_target("llama", seed=4, vocab_size=48)
    head = new_head(target, seed=2)
    prompt = [3, 1, 4, 1, 5]
    ref = generate_vanilla(target, prompt, 30)
    drafter = OracleDrafter(head, "eagle1", ref.output_ids, len(prompt))
    gen = generate(target, head, prompt, 30, drafter=drafter)
    assert len(gen.stats["cycle_lengths"]) >= 3
    crop_cache(drafter.cache, drafter.stable)
    seq = torch.tensor(prompt + gen.output_ids)
    k = min(drafter.stable, len(seq) - 1)
    features = target.forward(seq[:k], target.new_cache()).features
    fresh = head.new_cache()
    out = head(features[None], seq[1:k + 1][None], cache=fresh)[0]
    for a, b in zip(drafter.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys[..., :k, :], b.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(a.values[..., :k, :], b.values, atol=1e-4, rtol=1e-4)
    if k == drafter.stable:
        torch.testing.assert_close(drafter.root_feature, out[-1], atol=1e-4, rtol=1e-4)


def test_generation_reaching_the_context_stops_cleanly():
    target = tiny_target("llama", seed=0, vocab_size=48, max_position_embeddings=40)
    head = new_head(target)
    gen = generate(target, head, list(range(10)), 100, tree="eagle1")
    assert gen.stats["stop"] == "context"
    assert len(gen.prompt_ids) + len(gen.output_ids) <= 40
    assert gen.output_ids == generate_vanilla(target, list(range(10)), 100).output_ids[:len(gen.output_ids)]


def test_unknown_tree_spec_lists_the_forms():
    target = tiny_target("llama")
    with pytest.raises(EagleMiniError, match="chain"):
        generate(target, new_head(target), [1, 2], 4, tree="bushy")
