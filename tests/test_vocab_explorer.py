"""Notebook 07's draft-vocabulary explorer: coverage of the target's choices by the k most frequent
training tokens.

Oracles: the target's own argmax and softmax, position by position (as notebook 07's coverage
table counts them); `training.commands.most_frequent_ids`; and the shipped head, whose vocabulary
is the 8,192 most frequent assistant tokens of 2,000 train conversations.
"""
from collections import Counter

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.course.vocab_explorer import VocabExplorer, coverage, target_choices, view, vocabulary
from eagle_mini.data import Example
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.commands import most_frequent_ids
from eagle_mini.training.features import compute_features

V = 64


@pytest.fixture(scope="module")
def setup():
    target = tiny_target("llama", seed=0, vocab_size=V)
    g = torch.Generator().manual_seed(0)
    examples = []
    for T in (9, 14, 20):
        ids = torch.randint(0, V, (T,), generator=g).tolist()
        mask = (torch.rand(T, generator=g) < 0.6).long().tolist()
        examples.append(Example(ids, mask))
    rows = compute_features(target, examples)
    return target, rows


def by_hand(target, rows, ids):
    inside = torch.zeros(V, dtype=torch.bool)
    inside[ids] = True
    hit = mass = n = 0
    for r in rows:
        for i in range(len(r["input_ids"]) - 1):
            if r["loss_mask"][i + 1]:
                logits = r["features"][i].float() @ target.model.lm_head.weight.detach().float().T
                hit += int(inside[logits.argmax()])
                mass += float(logits.softmax(-1)[inside].sum())
                n += 1
    return hit / n, mass / n


def test_coverage_is_the_targets_choices_position_by_position(setup):
    target, rows = setup
    choices = target_choices(target, rows)
    assert choices["positions"] == sum(int(r["loss_mask"][1:].sum()) for r in rows)
    for ids in ([0, 5, 9], list(range(0, V, 3)), list(range(V))):
        got = coverage(choices, ids)
        hit, mass = by_hand(target, rows, ids)
        assert got["argmax"] == pytest.approx(hit, abs=1e-12) and got["mass"] == pytest.approx(mass, rel=1e-5)
    assert coverage(choices, range(V)) == pytest.approx({"argmax": 1.0, "mass": 1.0})


def test_the_vocabulary_is_the_packages_most_frequent_ids_and_bad_k_is_refused(setup):
    target, rows = setup
    counts = Counter({3: 5, 7: 9, 1: 1})
    for k in (1, 2, 5, V):
        assert vocabulary(counts, k, V) == most_frequent_ids(counts, k, V)
    v = view(counts, target_choices(target, rows), 2, V, hidden=8)
    assert v["lm_head_parameters"] == 16 and v["share_of_full"] == 2 / V
    with pytest.raises(EagleMiniError, match="k must be in 1..64"):
        vocabulary(counts, 0, V)


def test_the_shipped_heads_vocabulary_is_the_slider_at_its_size():
    """What notebook 07's classroom run checks: 8,192 from 2,000 train conversations is the
    shipped head's `draft_to_target` (the counts are read once here, some seconds)."""
    from eagle_mini import default_head, load_target
    from eagle_mini.training.commands import assistant_token_counts
    target = load_target("smollm2-135m")
    head, _ = default_head(target)
    counts = assistant_token_counts(target, 2000)
    assert vocabulary(counts, head.draft_vocab_size, target.vocab_size) == head.draft_to_target.tolist()


def test_moving_the_slider_changes_the_coverage(setup):
    import matplotlib
    matplotlib.use("Agg")
    target, rows = setup
    counts = Counter({t: V - t for t in range(V)})
    ui = VocabExplorer(counts, target_choices(target, rows), V, 8, k=8, sizes=(4, 8, 16, V))
    first = ui.state()
    assert first["k"] == 8
    ui.k.value = 16
    assert ui.state()["lm_head_parameters"] == 2 * first["lm_head_parameters"]
    assert ui.state()["mass"] > first["mass"]
