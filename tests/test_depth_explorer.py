"""Notebook 08's depth explorer: acceptance by depth, and the tokens a chain of K drafts adds.

Oracles: Leviathan et al.'s closed form for a constant rate, a simulation of chains drawn with the
given rates, and `train.evaluate_head` (the rates the notebook reads from its heads).
"""
import math
import random

import pytest

from eagle_mini.course.depth_explorer import DepthExplorer, chain_tau, rates, view
from eagle_mini.errors import EagleMiniError


def test_a_constant_rate_gives_leviathans_closed_form():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in range(0, 7):
            closed = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
            assert math.isclose(chain_tau([alpha] * k, k), closed)


def test_chain_tau_is_the_mean_of_simulated_chains():
    alphas, rng, n = [0.6, 0.45, 0.7, 0.3], random.Random(0), 200_000
    total = 0
    for _ in range(n):
        added = 1   # the bonus token
        for a in alphas:
            if rng.random() >= a:
                break
            added += 1
        total += added
    assert abs(total / n - chain_tau(alphas, 4)) < 0.01


def test_rates_stop_at_the_first_depth_nothing_reached_and_bad_input_is_refused():
    assert rates({"alpha": [0.5, float("nan"), 0.2]}) == [0.5]
    with pytest.raises(EagleMiniError, match="k must be in 0..2"):
        chain_tau([0.5, 0.5], 3)
    with pytest.raises(EagleMiniError, match="in \\[0, 1\\]"):
        chain_tau([0.5, float("nan")], 2)


def test_the_rates_are_evaluate_heads_on_real_chains():
    import torch

    from eagle_mini import tiny_target
    from eagle_mini.heads.eagle1 import new_head
    from eagle_mini.training.train import evaluate_head
    target = tiny_target("llama", seed=0, vocab_size=16)
    head = new_head(target, seed=0)
    g = torch.Generator().manual_seed(0)
    rows = []
    for T in (12, 20):
        ids = torch.randint(0, 16, (T,), generator=g)
        rows.append({"input_ids": ids, "features": target.forward(ids.tolist(), target.new_cache()).features,
                     "loss_mask": torch.ones(T, dtype=torch.long)})
    ev = evaluate_head(head, rows, steps=3)
    got = rates(ev)
    assert got == [a for a in ev["alpha"][:len(got)]]
    assert view({"h": got}, len(got))["tau"]["h"] == chain_tau(got, len(got))


def test_moving_the_first_control_changes_tau():
    import matplotlib
    matplotlib.use("Agg")
    ui = DepthExplorer({"pair": {"a": [0.5, 0.4, 0.3], "b": [0.45, 0.5, 0.4]}, "short": {"a": [0.2]}})
    first = ui.state()
    assert first["k"] == 1 and first["tau"] == {"a": 1.5, "b": 1.45}
    ui.k.value = 2
    assert ui.state()["tau"] == {"a": 1.5 + 0.5 * 0.4, "b": 1.45 + 0.45 * 0.5}
    ui.source.value = "short"   # fewer depths than the slider: all of them
    assert ui.state()["k"] == 1
