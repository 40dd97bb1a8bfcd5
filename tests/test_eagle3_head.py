"""The EAGLE-3 draft head (EAGLE-3 §3, reference §5): decoding stays lossless with it on every tree,
its stable cache holds only true inputs, the training-time test equals hand-run draft chains, and
the authors' layout round-trips."""
import json

import pytest
import torch

from eagle_mini import DynamicTree, EagleMiniError, tiny_target
from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.heads.eagle3 import Eagle3Head, aux_layers, new_eagle3_head
from eagle_mini.heads.formats import eagle3_state_dict, export_eagle3, load_eagle3
from eagle_mini.heads import head_kind, load_head
from eagle_mini.target import crop_cache
from eagle_mini.data import Example
from eagle_mini.training.eagle3 import ttt_loss
from eagle_mini.training.features import compute_features
from eagle_mini.training.train import evaluate_head

from test_eagle import SMALL_TREES, OracleDrafter


def test_layers_are_the_authors():
    """Inputs of layers 2, L//2 and L-3: HF hidden_states 2, 15, 27 for a 30-layer target."""
    assert aux_layers(30) == (2, 15, 27)
    assert aux_layers(32) == (2, 16, 29)


@pytest.mark.parametrize("depth", range(4, 41))
def test_layers_are_distinct_and_increasing_at_every_depth(depth):
    """Low, middle and high are three different layers in that order, raw layer outputs (never
    the embeddings, never the last, normed, hidden state); from 7 layers on they are the
    authors' 2, L//2, L-3."""
    low, mid, high = aux_layers(depth)
    assert 1 <= low < mid < high <= depth - 1
    if depth >= 7:
        assert (low, mid, high) == (2, depth // 2, depth - 3)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_target_with_too_few_layers_is_refused_in_one_line(depth):
    with pytest.raises(EagleMiniError, match=f"{depth} layers") as e:
        aux_layers(depth)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("tree", SMALL_TREES + ["eagle1", "eagle2"], ids=lambda t: str(t)[:12])
def test_eagle3_head_is_lossless_on_tiny_families(family, tree):
    """Greedy output token-identical to vanilla, with a random head (mostly rejected) and with an
    oracle drafter on top of it (long accepted paths through the tree)."""
    target = tiny_target(family, seed=3, vocab_size=48, num_hidden_layers=4)
    head = new_eagle3_head(target, seed=1, draft_vocab=list(range(0, 48, 2)))
    prompt = [5, 6, 7, 8]
    ref = generate_vanilla(target, prompt, 40).output_ids
    assert generate(target, head, prompt, 40, tree=tree).output_ids == ref
    oracle = OracleDrafter(head, "eagle1", ref, len(prompt))
    assert generate(target, head, prompt, 40, drafter=oracle).output_ids == ref


def test_eagle3_sampling_runs_on_both_rules():
    """T=1 on an EAGLE-1 static tree (p/q rule) and an EAGLE-2 tree (top-k rule), reproducibly."""
    target = tiny_target("llama", seed=3, vocab_size=48, num_hidden_layers=4)
    head = new_eagle3_head(target, seed=1)
    for tree in ("eagle1", DynamicTree(8, 3, 3)):
        a = generate(target, head, [5, 6, 7], 24, temperature=1.0, tree=tree, seed=4)
        b = generate(target, head, [5, 6, 7], 24, temperature=1.0, tree=tree, seed=4)
        assert a.output_ids == b.output_ids and len(a.output_ids) == 24


def test_eagle3_stable_cache_holds_only_true_layers():
    """After several cycles the head's stable cache equals one run over the target's true layers
    of the whole accepted sequence, and the root's prediction is that run's last output."""
    target = tiny_target("llama", seed=4, vocab_size=48, num_hidden_layers=4)
    head = new_eagle3_head(target, seed=2)
    prompt = [3, 1, 4, 1, 5]
    ref = generate_vanilla(target, prompt, 30).output_ids
    drafter = OracleDrafter(head, "eagle1", ref, len(prompt))
    gen = generate(target, head, prompt, 30, drafter=drafter)
    assert len(gen.stats["cycle_lengths"]) >= 3
    crop_cache(drafter.cache, drafter.stable)
    seq = torch.tensor(prompt + gen.output_ids)
    k = min(drafter.stable, len(seq) - 1)
    layers = target.forward(seq[:k], target.new_cache(), hidden_layers=head.aux_layers).layers
    assert layers.shape[-1] == 3 * target.hidden_size
    fresh = head.new_cache()
    out = head(layers[None], seq[1:k + 1][None], cache=fresh)[0]
    for a, b in zip(drafter.cache.layers, fresh.layers):
        torch.testing.assert_close(a.keys[..., :k, :], b.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(a.values[..., :k, :], b.values, atol=1e-4, rtol=1e-4)
    if k == drafter.stable:
        torch.testing.assert_close(drafter.root_feature, out[-1], atol=1e-4, rtol=1e-4)


def test_layers_are_the_inputs_of_layers_2_mid_and_L_minus_3():
    """Step.layers and compute_features' layers are the hidden states entering those layers."""
    target = tiny_target("llama", seed=0, vocab_size=48, num_hidden_layers=6)
    ids = torch.tensor([1, 2, 3, 4, 5])
    seen = {}
    hooks = [target.model.model.layers[i].register_forward_pre_hook(
        lambda m, args, kw, i=i: seen.__setitem__(i, (args[0] if args else kw["hidden_states"])[0]),
        with_kwargs=True) for i in aux_layers(6)]
    step = target.forward(ids, target.new_cache(), hidden_layers=aux_layers(6))
    for h in hooks:
        h.remove()
    want = torch.cat([seen[i] for i in aux_layers(6)], -1)
    torch.testing.assert_close(step.layers, want)
    row = compute_features(target, [Example(ids.tolist(), [0, 0, 1, 1, 1])], layers=aux_layers(6))[0]
    torch.testing.assert_close(row["layers"].float(), want, atol=0.05, rtol=0.02)  # stored bf16


def ttt_by_hand(head, layers, features, ids, mask, steps, decay=0.8):
    """Draft chains run one by one through the head's cache, as decoding runs them: the chain
    rooted at entry j reads the true layers up to j, then its own outputs."""
    lm = head._shared["target_lm_head"]
    d2t, t2d = head.draft_to_target, head.t2d
    ce, hits, count = [0.0] * steps, [0] * steps, [0] * steps
    for j in range(len(ids) - 1):
        cache = head.new_cache()
        o = head(layers[None, :j + 1], ids[None, 1:j + 2], cache=cache)[0, -1]
        for k in range(steps):
            e = j + k
            if e + 1 >= len(ids):
                break
            if k > 0:
                o = head(o[None, None], ids[None, e + 1:e + 2], cache=cache)[0, -1]
            if not mask[e + 1]:
                continue
            full = features[e + 1].float() @ lm.T
            draft = head.draft_logits(o)
            if t2d[full.argmax()]:
                ce[k] += -(full[d2t].softmax(-1) * draft.log_softmax(-1)).sum().item()
            hits[k] += int(d2t[draft.argmax()] == full.argmax())
            count[k] += 1
    ce = [c / n for c, n in zip(ce, count)]
    return sum(decay ** k * c for k, c in enumerate(ce)), ce, [h / n for h, n in zip(hits, count)]


@pytest.fixture(scope="module")
def tiny_rows():
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    g = torch.Generator().manual_seed(0)
    examples = []
    for mask in ([0] + [1] * 8, [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1]):  # from entry 0; a user turn
        ids = torch.randint(64, (len(mask),), generator=g).tolist()
        examples.append(Example(ids, mask))
    return target, compute_features(target, examples, layers=aux_layers(4))


def test_ttt_loss_equals_hand_run_draft_chains(tiny_rows):
    """Each step's CE (target distribution restricted to the draft vocabulary, positions whose
    full-vocabulary argmax has a draft id) and full-vocabulary top-1 equal hand-run chains."""
    target, rows = tiny_rows
    head = new_eagle3_head(target, seed=2, draft_vocab=list(range(0, 64, 2)))
    for r in rows:
        layers, feats = r["layers"].float(), r["features"].float()
        loss, parts = ttt_loss(head, layers[None], feats[None], r["input_ids"][None],
                               r["loss_mask"][None].long(), steps=3)
        ref, ce, top1 = ttt_by_hand(head, layers, feats, r["input_ids"], r["loss_mask"], steps=3)
        assert parts["ce"] == pytest.approx(ce, rel=1e-4)
        assert parts["top1_steps"] == pytest.approx(top1, abs=1e-9)
        assert loss.item() == pytest.approx(ref, rel=1e-4)
    # the teacher-forced 0-alpha of evaluate_head is the loss's step-0 top-1 over all rows
    ev = evaluate_head(head, rows, steps=2)
    hits = sum(ttt_by_hand(head, r["layers"].float(), r["features"].float(), r["input_ids"],
                           r["loss_mask"], 1)[2][0] * int(r["loss_mask"][1:].sum()) for r in rows)
    assert ev["counts"][0][0] == pytest.approx(hits)


class CountingFloat(torch.Tensor):
    """A tensor that counts `.float()` calls made on itself (not on tensors computed from it)."""
    calls, ptr = 0, None

    def float(self, *args, **kwargs):
        if self.data_ptr() == CountingFloat.ptr:
            CountingFloat.calls += 1
        return super().float(*args, **kwargs)


def test_the_ttt_loss_casts_the_targets_lm_head_once_not_once_per_row(tiny_rows):
    """The label logits need the target's lm_head in fp32; on a bf16 target that is a copy of a
    vocabulary-sized matrix, made once per loss, not once per row of the batch."""
    target, rows = tiny_rows
    head = new_eagle3_head(target, seed=2)
    weight = head._shared["target_lm_head"]
    head._shared["target_lm_head"] = weight.as_subclass(CountingFloat)
    CountingFloat.calls, CountingFloat.ptr = 0, weight.data_ptr()
    r = rows[1]
    batch = lambda x: x[None].expand(3, *x.shape)   # the same row three times
    ttt_loss(head, batch(r["layers"].float()), batch(r["features"].float()), batch(r["input_ids"]),
             batch(r["loss_mask"].long()), steps=2)
    assert CountingFloat.calls == 1


def test_training_lowers_the_ttt_loss(tiny_rows):
    """On a target with peaked next-token laws (its lm_head scaled up) 30 AdamW steps at least
    halve the loss; the frozen embedding gets no gradient."""
    target, rows = tiny_rows
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    with torch.no_grad():
        target.model.lm_head.weight.mul_(30)
    head = new_eagle3_head(target, seed=2)
    r = rows[1]
    args = (r["layers"].float()[None], r["features"].float()[None], r["input_ids"][None],
            r["loss_mask"][None].long())
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=3e-3)
    first = ttt_loss(head, *args, steps=3)[0].item()
    for _ in range(30):
        loss, _ = ttt_loss(head, *args, steps=3)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert ttt_loss(head, *args, steps=3)[0].item() < 0.5 * first
    assert target.model.model.embed_tokens.weight.grad is None  # the embedding stays frozen


def test_authors_layout_round_trip(tmp_path):
    """Field names, shapes, d2t offsets and t2d of the published layout; loading it back gives the
    same draft logits; our own save/load too."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=8)
    vocab = [3, 5, 8, 13, 21, 34, 55, 60]
    head = new_eagle3_head(target, seed=5, draft_vocab=vocab)
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["model_type"] == "llama"
    assert (cfg["num_hidden_layers"], cfg["vocab_size"], cfg["draft_vocab_size"]) == (1, 64, 8)
    assert cfg["tie_word_embeddings"] is False and "eagle_config" not in cfg
    state = eagle3_state_dict(head)
    h = target.hidden_size
    assert state["fc.weight"].shape == (h, 3 * h)
    assert state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * h
    assert state["lm_head.weight"].shape == (8, h)
    assert {"midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "norm.weight",
            "midlayer.post_attention_layernorm.weight", "midlayer.mlp.down_proj.weight"} <= set(state)
    assert "embed_tokens.weight" not in state
    assert (state["d2t"] + torch.arange(8)).tolist() == vocab and state["d2t"].dtype == torch.int64
    assert state["t2d"].dtype == torch.bool and state["t2d"].nonzero().flatten().tolist() == vocab
    back = load_head(out, target)
    assert head_kind(back) == "eagle3"
    x, t = torch.randn(1, 5, 3 * h), torch.tensor([[1, 2, 3, 4, 5]])
    torch.testing.assert_close(back.draft_logits(back(x, t)), head.draft_logits(head(x, t)))
    mine = load_head(head.save(tmp_path / "ours", dtype=torch.float32), target)
    assert isinstance(mine, Eagle3Head) and mine.aux_layers == head.aux_layers
    torch.testing.assert_close(mine.draft_logits(mine(x, t)), head.draft_logits(head(x, t)))
    assert load_eagle3(out, target).draft_to_target.tolist() == vocab


def test_authors_layout_rotates_as_its_file_says(tmp_path):
    """A published draft whose config omits rope_theta was trained with base 10000 (the authors'
    training code ignores the target's): loading it must not take the target's base."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    head = new_eagle3_head(target, seed=5)
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    assert load_head(out, target).rotary.inv_freq.equal(head.rotary.inv_freq)  # we write it
    cfg = json.loads((out / "config.json").read_text())
    for key in ("rope_theta", "rope_parameters", "rope_scaling"):
        cfg.pop(key, None)
    (out / "config.json").write_text(json.dumps(cfg))
    base = load_head(out, target).rotary.inv_freq
    dim = head.rotary.inv_freq.numel() * 2
    torch.testing.assert_close(base, 1.0 / 10000.0 ** (torch.arange(0, dim, 2).float() / dim))


def test_the_card_reports_the_authors_code_check_kept_beside_the_head(tmp_path):
    """write_card renders authors_check.json (the script's --json) when the head directory has it."""
    import json

    from eagle_mini.heads.eagle3 import new_eagle3_head
    from eagle_mini.training.commands import write_card
    target = tiny_target("llama", seed=3, vocab_size=48, num_hidden_layers=4)
    head = new_eagle3_head(target, warm_start=False)
    meta = {"tokens_seen": 20, "train_seconds": 2.0, "rounds": []}
    write_card(tmp_path, "tiny", head, meta)
    assert "authors' own code" not in (tmp_path / "README.md").read_text()
    report = {"command": "python scripts/check_eagle3_against_authors.py /x --head h",
              "authors_commit": "cb7e084abcdef", "prompt_tokens": 31,
              "a_layer_output": {"max_abs_diff": 2e-6, "max_abs_theirs": 40.0},
              "b_logits": {"max_abs_diff": 3e-5, "max_abs_theirs": 20.0},
              "d_topK_genrate_identical": {"draft_tokens": True, "tree_mask": True},
              "e_our_drafter_vs_topK_genrate": {"same_paths": True}}
    (tmp_path / "authors_check.json").write_text(json.dumps(report))
    write_card(tmp_path, "tiny", head, meta)
    card = (tmp_path / "README.md").read_text()
    assert "SafeAILab/EAGLE cb7e084" in card and "2 numeric comparisons" in card
    assert "3.0e-05 (b_logits" in card and "retrieve indices with this head in their model's place: True" in card
