"""Drafting over the most frequent tokens only (`heads/frequent.py`, FR-Spec): the narrowed head
scores exactly its tokens as the head does, maps them back, and decoding with it stays lossless
(greedy here against vanilla; sampling in `test_lossless_sampling.py`, chi-square)."""
from collections import Counter

import pytest
import torch

from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.heads.frequent import FrequentVocabHead, narrowed
from eagle_mini.models import tiny_target
from eagle_mini.runtime.packed import pack_linears
from eagle_mini.training import commands
from eagle_mini.training.commands import frequent_tokens
from test_lossless_sampling import close_head   # a head that drafts well without training


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0)


def test_a_narrowed_head_scores_its_tokens_as_the_head_does(target):
    head = new_head(target, seed=1)
    ids = [3, 7, 11, 40, 41]
    small = FrequentVocabHead(head, ids)
    assert small.draft_to_target.tolist() == ids and small.draft_vocab_size == len(ids)
    x = torch.randn(4, target.hidden_size)
    torch.testing.assert_close(small.draft_logits(x), head.draft_logits(x)[:, ids])
    assert small.target_config is head.target_config           # the rest is the head's own
    feats = torch.randn(1, 3, target.hidden_size)
    tokens = torch.tensor([[1, 2, 3]])
    assert torch.equal(small(feats, tokens), head(feats, tokens))


def test_an_eagle3_heads_reduced_vocabulary_meets_the_frequent_tokens(target):
    head = new_eagle3_head(target, seed=1, draft_vocab=list(range(0, 60, 2)), layers=(0, 0, 1))
    small = FrequentVocabHead(head, [2, 3, 4, 5, 58])            # odd ids: not in the head's
    assert small.draft_to_target.tolist() == [2, 4, 58]
    x = torch.randn(2, target.hidden_size)
    torch.testing.assert_close(small.draft_logits(x), head.draft_logits(x)[:, [1, 2, 29]])
    with pytest.raises(EagleMiniError, match="no token in common"):
        FrequentVocabHead(head, [1, 3, 5])


@pytest.mark.parametrize("tree", ["eagle2", "eagle1", "chain:4"])
def test_greedy_decoding_with_a_narrowed_head_equals_vanilla(target, tree):
    """A token the narrowed head cannot draft ends its cycle there; the output is vanilla's. The
    head drafts half the vocabulary, and drafts well enough that cycles also accept drafts."""
    head = FrequentVocabHead(close_head(target), range(0, target.vocab_size, 2))
    pack_linears(head, "onednn")
    accepted = 0
    for prompt in ([5, 9, 2], [1, 2, 3, 4, 5, 6], [60, 61, 7]):
        want = generate_vanilla(target, prompt, 24).output_ids
        got = generate(target, head, prompt, 24, tree=tree)
        assert got.output_ids == want
        accepted += sum(n - 1 for n in got.stats["cycle_lengths"])
    assert accepted > 0


def test_the_n_most_frequent_tokens_are_counted_once_and_kept(target, monkeypatch, tmp_path):
    """`frequent_tokens` ranks the training replies' counts (topped up with the lowest unseen
    ids), counting them once per target: a second call reads the cache."""
    monkeypatch.setenv("EAGLE_MINI_CACHE", str(tmp_path))
    calls = []

    def counts(target, conversations):
        calls.append(conversations)
        return Counter({5: 10, 9: 7, 2: 3, 30: 1})
    monkeypatch.setattr(commands, "assistant_token_counts", counts)
    assert frequent_tokens(target, 3) == [2, 5, 9]
    assert frequent_tokens(target, 5) == [0, 2, 5, 9, 30]
    assert calls == [2000]
    with pytest.raises(EagleMiniError, match="1 to"):
        frequent_tokens(target, target.vocab_size + 1)
    head = new_head(target, seed=1)
    both = narrowed({"eagle1": head}, [2, 5, 9])
    assert both["eagle1"].draft_to_target.tolist() == [2, 5, 9]
