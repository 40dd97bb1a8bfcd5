"""The reduced draft vocabulary: the most frequent ids, topped up, sorted (EAGLE-3 / FR-Spec idea)."""
from collections import Counter

from hypothesis import given, strategies as st

from eagle_mini.training.commands import most_frequent_ids


def reference(counts, n, vocab_size):
    """By the definition, one id at a time: most frequent first (ties: first seen), then the
    smallest ids never seen."""
    ranked = [t for t, _ in counts.most_common()]
    chosen = ranked[:n]
    for t in range(vocab_size):
        if len(chosen) >= n:
            break
        if t not in chosen:
            chosen.append(t)
    return sorted(chosen)


@given(st.lists(st.integers(0, 60), max_size=200), st.integers(1, 64))
def test_matches_the_definition(tokens, n):
    counts = Counter(tokens)
    assert most_frequent_ids(counts, n, 64) == reference(counts, n, 64)


def test_a_full_size_vocabulary_keeps_the_most_frequent_ids():
    counts = Counter({t: 1 + t % 7 for t in range(0, 49_152, 3)})
    ids = most_frequent_ids(counts, 8192, 49_152)
    assert len(ids) == len(set(ids)) == 8192 and ids == sorted(ids)
    assert set(t for t, _ in counts.most_common(8192)) == set(ids)
