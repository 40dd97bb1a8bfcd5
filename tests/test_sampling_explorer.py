"""Notebook 01's explorer returns what speculative sampling says: alpha = sum min(p, q) = 1 - TV,
a residual that tops min(p, q) up to p, and samples from the package's real verifier that follow p
(chi-square), with q as a control the test can tell apart."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chisquare

from eagle_mini import EagleMiniError
from eagle_mini.course.sampling_explorer import (acceptance_rate, as_distribution, chi2_pvalue,
                                                 explore, first_token_counts, one_level_draft,
                                                 residual, total_variation)
from eagle_mini.tree import chain
from eagle_mini.verify import TopKTreeRule

weights = st.lists(st.floats(0, 10), min_size=2, max_size=6).filter(lambda w: sum(w) > 1e-3)


@given(weights, weights)
def test_alpha_from_the_rule_is_the_sum_of_minima_and_one_minus_tv(pw, qw):
    n = min(len(pw), len(qw))
    if sum(pw[:n]) <= 1e-3 or sum(qw[:n]) <= 1e-3:
        return
    p, q = as_distribution(pw[:n]), as_distribution(qw[:n])
    alpha = acceptance_rate(p, q)
    assert alpha == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    assert alpha == pytest.approx(1 - 0.5 * float((p - q).abs().sum()), abs=1e-5)
    assert total_variation(p, q) == pytest.approx(1 - alpha, abs=1e-5)


@given(weights, weights)
def test_accepted_mass_plus_rejected_mass_times_residual_is_p(pw, qw):
    n = min(len(pw), len(qw))
    if sum(pw[:n]) <= 1e-3 or sum(qw[:n]) <= 1e-3:
        return
    p, q = as_distribution(pw[:n]), as_distribution(qw[:n])
    r = residual(p, q)
    alpha = acceptance_rate(p, q)
    assert torch.allclose(torch.minimum(p, q) + (1 - alpha) * r, p, atol=1e-5)
    assert (r >= 0).all() and (r.sum() == 0 or abs(float(r.sum()) - 1) < 1e-5)


def test_the_residual_is_zero_only_when_p_equals_q():
    p = as_distribution([1, 2, 3])
    assert residual(p, p).sum() == 0 and acceptance_rate(p, p) == pytest.approx(1)
    assert residual(p, as_distribution([3, 2, 1])).tolist() == pytest.approx([0, 0, 1])


def test_samples_of_the_real_rule_follow_p_not_q_and_accept_alpha_of_the_time():
    view = explore([10, 1, 5, 2, 2], [3, 11, 1, 4, 1], trials=3000, seed=0)
    expected = 3000 * view.p.double()
    assert chisquare(view.counts.double().numpy(), expected.numpy()).pvalue > 1e-3
    assert view.pvalue > 1e-3                       # the explorer's own verdict agrees
    assert chi2_pvalue(view.counts, view.q) < 1e-6  # control: the test can tell p from q
    assert view.counts.sum() == 3000 and torch.allclose(view.observed.sum(), torch.tensor(1.0))
    sigma = (view.alpha * (1 - view.alpha) / 3000) ** 0.5
    assert abs(view.accepted - view.alpha) < 4 * sigma


def test_a_token_p_never_says_is_never_emitted():
    view = explore([1, 0, 1], [0, 5, 1], trials=500, seed=2)  # q drafts mostly the token p forbids
    assert view.counts[1] == 0 and view.pvalue > 1e-3


def test_identical_p_and_q_accept_every_step():
    view = explore([1, 2, 3], [1, 2, 3], trials=300)
    assert view.alpha == pytest.approx(1) and view.accepted == 1 and view.tv == pytest.approx(0)


def test_chi2_pvalue_on_the_support_of_the_distribution():
    dist = torch.tensor([0.5, 0.0, 0.5])
    assert chi2_pvalue(torch.tensor([50.0, 0, 50]), dist) == pytest.approx(1)
    assert chi2_pvalue(torch.tensor([50.0, 1, 49]), dist) == 0.0  # a count where dist is zero
    assert chi2_pvalue(torch.tensor([0.0, 0, 9]), torch.tensor([0.0, 0, 1])) == 1.0


def test_weights_must_hold_some_mass():
    with pytest.raises(EagleMiniError):
        as_distribution([0, 0, 0])
    with pytest.raises(EagleMiniError):
        as_distribution([1, -1])


def test_one_level_draft_is_chain_1_for_one_child_and_carries_q():
    q = as_distribution([1, 3])
    draft = one_level_draft([1], q)
    assert draft.tree == chain(1) and draft.tokens.tolist() == [-1, 1]
    assert torch.equal(draft.q[0], q) and draft.confidence[1] == q[1]
    assert one_level_draft([1, 0], q).tree.parents == [-1, 0, 0]


def test_the_topk_rule_on_topk_children_also_follows_p():
    p, q = as_distribution([10, 1, 5, 2, 2]), as_distribution([3, 11, 1, 4, 1])
    counts, _ = first_token_counts(p, q, 3000, rule=TopKTreeRule(), k=2, children="topk", seed=3)
    assert chi2_pvalue(counts, p) > 1e-3
