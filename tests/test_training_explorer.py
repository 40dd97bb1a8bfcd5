"""Notebook 03's training explorer: a head's drafts, outcomes and loss parts along a conversation.

Oracles: `train.eagle_loss` with the noise off (the loss parts, pooled), the head's plain forward
(step 0) and a chain drafted one step at a time through the head's cache, as a decoder drafts it
(step n), and a loop that follows each chain by hand (which positions a chain reaches).
"""
import math

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.course.training_explorer import TrainingExplorer, outcomes, snapshot, trace, view
from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.training.train import eagle_loss

V, STEPS = 24, 3


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, vocab_size=V)


@pytest.fixture(scope="module")
def row(target):
    """A prompt of 6 random tokens, then the target's greedy answer: the text follows the target's
    choice, so a chain stops only where the head's draft is rejected."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, V, (6,), generator=g).tolist()
    with torch.no_grad():
        while len(ids) < 30:
            ids.append(int(target.forward(ids, target.new_cache()).logits[-1].argmax()))
    mask = torch.ones(30, dtype=torch.long)
    mask[:6] = 0
    return {"input_ids": torch.tensor(ids), "loss_mask": mask,
            "features": target.forward(ids, target.new_cache()).features.half()}


@pytest.fixture(scope="module", params=["full vocabulary", "draft vocabulary"])
def head(request, target, row):
    """A head trained on `row` until it drafts many of its tokens (chains get past step 0)."""
    vocab = None if request.param == "full vocabulary" else list(range(0, V, 2))
    head = new_head(target, seed=1, draft_vocab=vocab)
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(80):
        loss, _ = eagle_loss(head, row["features"][None].float(), row["input_ids"][None], row["loss_mask"][None],
                             noise=0.0, w_cls=1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()


def test_step_0_loss_parts_pool_to_eagle_loss_without_noise(head, row):
    t = trace(head, row, STEPS)
    with torch.no_grad():
        _, parts = eagle_loss(head, row["features"][None].float(), row["input_ids"][None], row["loss_mask"][None],
                              noise=0.0)
    counted = t["counted"]
    assert math.isclose(float(t["reg"][0][counted].mean()), parts["reg"], rel_tol=1e-5)
    assert math.isclose(float(t["cls"][0][counted].mean()), parts["cls"], rel_tol=1e-5)
    s = view(head, row, t, position=10, step=0, w_cls=0.3)
    assert math.isclose(s["mean_reg"], parts["reg"], rel_tol=1e-5) and s["loss"] == pytest.approx(s["reg"] + 0.3 * s["cls"])


def test_each_step_is_the_chain_a_decoder_drafts_through_the_heads_cache(head, row):
    """Step n at position j: the head read true entries 0..j-n, then its own predictions, one
    forward at a time, the tokens being the text's."""
    t = trace(head, row, STEPS)
    f, ids = row["features"].float(), row["input_ids"]
    with torch.no_grad():
        plain = head(f[None, :-1], ids[None, 1:])[0]
        assert torch.allclose(t["preds"][0], plain, atol=1e-5)
        for j, n in [(8, 1), (15, 2), (27, 2), (20, 1)]:
            start = j - n
            cache = head.new_cache()
            pred = head(f[None, :start + 1], ids[None, 1:start + 2], cache=cache)[0, -1]
            for m in range(1, n + 1):
                pred = head(pred[None, None], ids[None, start + m + 1:start + m + 2], cache=cache)[0, -1]
            assert torch.allclose(t["preds"][n, j], pred, atol=1e-4), (j, n)
            logits = head.draft_logits(pred)
            assert int(t["draft"][n, j]) == int(head.draft_to_target[logits.argmax()])


def test_a_chain_is_tried_where_every_earlier_step_was_accepted_and_followed(head, row):
    t = trace(head, row, STEPS)
    assert t["tried"][1:].any(), "no chain got past step 0: the test would check nothing"
    ids = row["input_ids"].tolist()
    target_next = t["target_next"].tolist()
    n = len(ids) - 1
    for k in range(STEPS):
        for j in range(n):
            by_hand = bool(row["loss_mask"][j + 1]) and j - k >= 0 and all(
                bool(t["correct"][m, j - k + m]) and j - k + m + 2 < len(ids)
                and ids[j - k + m + 2] == target_next[j - k + m] for m in range(k))
            assert bool(t["tried"][k, j]) == by_hand, (k, j)
    kinds = outcomes(t, 1)
    for j, kind in enumerate(kinds):
        assert kind == ("not counted" if j < 5 else "not reached" if not t["tried"][1, j]
                        else "accepted" if t["correct"][1, j] else "rejected")


def test_view_reads_the_heads_and_the_targets_distributions(head, row, target):
    t = trace(head, row, STEPS)
    for position, step in [(5, 0), (12, 1), (28, 2)]:
        s = view(head, row, t, position, step, top=4)
        with torch.no_grad():
            p = head.draft_logits(t["preds"][step, position]).softmax(-1)
            q = (row["features"][position + 1].float() @ target.model.lm_head.weight.T).softmax(-1)
        assert s["draft_top"][0][0] == s["draft"] == int(head.draft_to_target[p.argmax()])
        assert s["target_top"][0][0] == s["target"] == int(q.argmax())
        assert [round(x, 5) for _, x in s["draft_top"]] == [round(x, 5) for x in p.topk(4).values.tolist()]
        assert s["target_in_draft_vocab"] == (s["target"] in head.draft_to_target.tolist())
        on_draft = dict(zip(head.draft_to_target.tolist(), p.tolist()))
        for token, target_p, draft_p in s["bars"]:
            assert target_p == pytest.approx(float(q[token])) and draft_p == pytest.approx(on_draft.get(token, 0.0))
        assert {i for i, _, _ in s["bars"]} == {i for i, _ in s["draft_top"]} | {i for i, _ in s["target_top"]}
        assert s["tried"] == int(t["tried"][step].sum())
        assert s["alpha"] == s["accepted"] / s["tried"] if s["tried"] else math.isnan(s["alpha"])
        assert s["text_next"] == (int(row["input_ids"][position + 2]) if position + 2 < 30 else None)
    with pytest.raises(EagleMiniError, match="position must be in 0..28"):
        view(head, row, t, 29, 0)
    with pytest.raises(EagleMiniError, match="step must be in 0..2"):
        view(head, row, t, 3, STEPS)


def test_a_snapshot_keeps_its_weights_while_the_head_trains_on(target, row):
    head = new_head(target, seed=2)
    kept = snapshot(head, target)
    f, ids = row["features"][None, :-1].float(), row["input_ids"][None, 1:]
    with torch.no_grad():
        assert torch.equal(kept(f, ids), head(f, ids))
        head.fc.weight.add_(1.0)   # a training step, as far as the snapshot knows
        assert not torch.equal(kept(f, ids), head(f, ids))
    assert kept._shared["embed"] is target.model.model.embed_tokens   # shared, not copied
    assert not any(p.requires_grad for p in kept.parameters())


def test_moving_the_first_control_changes_what_is_shown(target, row):
    import matplotlib
    matplotlib.use("Agg")
    heads = {"step 0": new_head(target, seed=1), "other": new_head(target, seed=2)}
    assert TrainingExplorer(heads, row, steps=STEPS, head="other").state()["head"] == "other"
    ui = TrainingExplorer(heads, row, steps=STEPS)
    first = ui.state()
    assert first["head"] == "step 0" and first["step"] == 0 and first["outcome"] != "not counted"
    ui.position.value = first["position"] + 1
    assert ui.state()["position"] == first["position"] + 1
    ui.step.value = 2
    assert ui.state()["chain_from"] == first["position"] - 1
    ui.head.value = "other"
    assert ui.state()["head"] == "other" and set(ui._traces) == {"step 0", "other"}
    assert ui.box.children[:3] == (ui.position, ui.head, ui.step) and ui.box.children[3] is ui.output
