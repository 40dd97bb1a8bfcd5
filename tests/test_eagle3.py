"""EAGLE-3's training ideas (EAGLE-3 §3): multi-layer features, a fused head, training-time test."""
import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.training.data import Example
from eagle_mini.measure.eagle3 import (FusedHead, evaluate, feature_layers, head_inputs, layer_features,
                               new_fused_head, ttt_loss)
from eagle_mini.training.features import compute_features
from eagle_mini.head import new_head


def make_examples(n=3, length=20, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Example(torch.randint(0, vocab, (length,), generator=g).tolist(),
                    [0] * 3 + [1] * (length - 3), index=i) for i in range(n)]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tiny(request):
    target = tiny_target(request.param, seed=0, vocab_size=64, num_hidden_layers=4)
    return target, layer_features(target, make_examples())


def batch(row, key="features"):
    return row[key][None], row["features"][None], row["input_ids"][None], row["loss_mask"][None]


def test_layer_features_are_the_targets_hidden_states(tiny):
    """features = compute_features' feature; layers = (low, mid) hidden states of an independent
    HF forward, then the feature."""
    target, rows = tiny
    low, mid = feature_layers(target.config.num_hidden_layers)
    ref = compute_features(target, make_examples())
    h = target.hidden_size
    for row, r in zip(rows, ref):
        torch.testing.assert_close(row["features"], r["features"].float(), atol=2e-3, rtol=2e-3)
        with torch.no_grad():
            out = target.model(input_ids=r["input_ids"][None], output_hidden_states=True)
        hs = out.hidden_states
        torch.testing.assert_close(row["layers"][:, :h], hs[low][0])
        torch.testing.assert_close(row["layers"][:, h:2 * h], hs[mid][0])
        assert torch.equal(row["layers"][:, 2 * h:], row["features"])
        assert torch.equal(row["loss_mask"], r["loss_mask"])


def test_feature_layers_low_below_mid_below_high():
    for n in (1, 2, 4, 30, 32, 80):
        low, mid = feature_layers(n)
        assert 1 <= low <= mid <= n


def test_fused_head_starts_like_an_eagle1_head_and_ignores_layer_scale(tiny):
    """Same seed, same fc and layer as `new_head`; each layer is RMS-normalized before fusing,
    so scaling one layer (massive activations) leaves the fused input unchanged."""
    target, rows = tiny
    fused, plain = new_fused_head(target, seed=3), new_head(target, seed=3)
    for k, v in plain.state_dict().items():
        assert torch.equal(fused.state_dict()[k], v), k
    assert isinstance(fused, FusedHead) and fused.fuse3.weight.shape == (target.hidden_size,
                                                                          3 * target.hidden_size)
    layers = rows[0]["layers"]
    h = target.hidden_size
    scaled = torch.cat([layers[:, :h] * 1e4, layers[:, h:2 * h] * 30, layers[:, 2 * h:]], -1)
    torch.testing.assert_close(fused.fuse_layers(scaled), fused.fuse_layers(layers),
                               atol=1e-5, rtol=1e-4)
    assert torch.equal(head_inputs(plain, rows[0]["features"]), rows[0]["features"])


@torch.no_grad()
def ttt_loss_by_hand(head, inputs, features, input_ids, loss_mask, steps, decay):
    """TTT loss from its definition, one draft chain at a time through the head's KV cache: the
    chain started at entry j reads the true (fused) inputs 0..j, then its own predictions; its step
    k predicts f_{j+k+1} and is scored by soft CE against softmax(lm_head(f_{j+k+1})) where the
    token t_{j+k+1} is an assistant token. CE_k averages step k over such chains; the loss is
    sum_k decay^k CE_k. -> (loss, [CE_k], [top1_k])."""
    x = head.fuse_layers(inputs) if isinstance(head, FusedHead) else inputs.float()
    f, t, w = features.float(), input_ids, loss_mask
    lm = head._shared["lm_head"]
    ce, hits, count = [0.0] * steps, [0] * steps, [0] * steps
    for j in range(len(t) - 1):
        cache = head.new_cache()
        p = head(x[None, :j + 1], t[None, 1:j + 2], cache=cache)[0, -1]
        for k in range(steps):
            e = j + k  # the entry this step sits at; it predicts f_{e+1}
            if e + 1 >= len(t):
                break
            if k > 0:
                p = head(p[None, None], t[None, e + 1:e + 2], cache=cache)[0, -1]
            if not w[e + 1]:
                continue
            target_logits = f[e + 1] @ lm.T
            draft_logits = p @ lm.T
            ce[k] += -(target_logits.softmax(-1) * draft_logits.log_softmax(-1)).sum().item()
            hits[k] += int(draft_logits.argmax() == target_logits.argmax())
            count[k] += 1
    ce = [c / n for c, n in zip(ce, count)]
    return sum(decay ** k * c for k, c in enumerate(ce)), ce, [h / n for h, n in zip(hits, count)]


@pytest.mark.parametrize("kind", ["eagle1", "fused"])
def test_ttt_loss_equals_the_loss_of_hand_run_draft_chains(tiny, kind):
    """Every unrolled step's CE and top-1, and their 0.8^k-weighted sum, equal those of draft
    chains run one by one through the head's cache, as decoding runs them."""
    target, rows = tiny
    head = new_head(target, seed=1) if kind == "eagle1" else new_fused_head(target, seed=2)
    key = "features" if kind == "eagle1" else "layers"
    for row in rows[:2]:
        loss, parts = ttt_loss(head, *batch(row, key), steps=3, decay=0.8)
        ref, ce, top1 = ttt_loss_by_hand(head, row[key], row["features"], row["input_ids"],
                                         row["loss_mask"], steps=3, decay=0.8)
        assert parts["ce"] == pytest.approx(ce, rel=1e-4)
        assert parts["top1"] == pytest.approx(top1, abs=1e-9)
        assert loss.item() == pytest.approx(ref, rel=1e-4)


def test_ttt_loss_weights_step_k_by_decay_to_the_k(tiny):
    """decay 0 keeps step 0 only; any decay gives sum_k decay^k CE_k of the reported CE_k."""
    target, rows = tiny
    head = new_fused_head(target, seed=2)
    one, _ = ttt_loss(head, *batch(rows[1], "layers"), steps=1)
    zero, _ = ttt_loss(head, *batch(rows[1], "layers"), steps=3, decay=0.0)
    assert zero.item() == pytest.approx(one.item(), rel=1e-6)
    loss, parts = ttt_loss(head, *batch(rows[1], "layers"), steps=3, decay=0.8)
    assert len(parts["ce"]) == 3
    weighted = sum(0.8 ** k * c for k, c in enumerate(parts["ce"]))
    assert loss.item() == pytest.approx(weighted, rel=1e-5)


def test_ttt_training_lowers_every_steps_loss_and_trains_the_fusion(tiny):
    """Overfitting one sequence: every unrolled step's CE approaches its floor, the entropy of
    the target's distribution (a tiny random target's is nearly uniform), and its top-1 rises."""
    target, rows = tiny
    head = new_fused_head(target, seed=4)
    row = rows[0]
    p = (row["features"][1:] @ head._shared["lm_head"].T).softmax(-1)
    w = row["loss_mask"][1:].float()
    entropy = [float((-(p * p.log()).sum(-1) * w)[k:].sum() / w[k:].sum()) for k in range(3)]
    before = ttt_loss(head, *batch(row, "layers"))[1]
    fuse0 = head.fuse3.weight.detach().clone()
    opt = torch.optim.AdamW([q for q in head.parameters() if q.requires_grad], lr=3e-3)
    for _ in range(30):
        loss, _ = ttt_loss(head, *batch(row, "layers"))
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = ttt_loss(head, *batch(row, "layers"))[1]
    for k in range(3):
        excess_before, excess_after = before["ce"][k] - entropy[k], after["ce"][k] - entropy[k]
        assert excess_after < 0.3 * excess_before, (k, before, after)
        assert after["top1"][k] > before["top1"][k] + 0.3
    assert not torch.equal(head.fuse3.weight, fuse0)


def test_fused_top1_is_the_first_steps_argmax_agreement(tiny):
    """0-alpha of a fused head, pooled by `evaluate`, counted directly from one head forward."""
    target, rows = tiny
    head = new_fused_head(target, seed=5)
    hits = tried = 0
    with torch.no_grad():
        for row in rows:
            pred = head(head.fuse_layers(row["layers"][None, :-1]), row["input_ids"][None, 1:])[0]
            draft = head.draft_to_target[head.draft_logits(pred).argmax(-1)]
            truth = (row["features"][1:] @ head._shared["target_lm_head"].T).argmax(-1)
            w = row["loss_mask"][1:].bool()
            hits += int(((draft == truth) & w).sum())
            tried += int(w.sum())
    result = evaluate(head, rows, steps=3)
    assert result["counts"][0] == [hits, tried]
    assert result["top1"] == hits / tried and len(result["alpha"]) == 3
