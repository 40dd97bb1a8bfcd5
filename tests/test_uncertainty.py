"""The feature-uncertainty ablation (EAGLE §3.1, Figs. 3, 4, 8): four heads that differ only in
what they read, drafted the way decoding feeds them, measured by one resumable experiment."""
import json
from dataclasses import replace

import pytest
import torch

import eagle_mini.training.train
from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.experiments.ablation import (AblationConfig, EpochSource, config_for, paper_checks,
                                 run_ablation, summary_table)
from eagle_mini.cli import build_parser
from eagle_mini.cli.experiments import ablation_knobs
from eagle_mini.data import Example
from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.tree import DynamicTree
from eagle_mini.training.features import compute_features
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.training.train import chain_acceptance, eagle_loss
from eagle_mini.tree import parse_tree
from eagle_mini.experiments.uncertainty import (BY_NAME, VARIANTS, UnshiftedDrafter, branch_features,
                                    predict_branches, training_rows)

VOCAB = 64
TINY = AblationConfig(train_tokens=10**9, val_tokens=10**9, max_len=64, epochs=2, batch_tokens=96,
                      warmup=2, draft_vocab=0, prompts=2, max_new_tokens=8, contexts=8, min_p=0.0,
                      analysis_tokens=1000, entropy_bins=3, seeds=2, mixed_precision="no")


def make_examples(n, length=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Example(torch.randint(0, VOCAB, (length,), generator=g).tolist(),
                    [0] * 4 + [1] * (length - 4), index=i) for i in range(n)]


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, vocab_size=VOCAB)


def recording(head):
    """Make `head` remember the (features, tokens) of every call."""
    calls, forward = [], head.forward

    def spy(features, tokens, *a, **kw):
        calls.append((features.detach().clone(), tokens.detach().clone()))
        return forward(features, tokens, *a, **kw)
    head.forward = spy
    return calls


def run(target, work, cfg=TINY, **kw):
    return run_ablation(target, make_examples(8), make_examples(3, seed=1), [[1, 2, 3], [4, 5, 6, 7]],
                        cfg, work, log=lambda *_: None, **kw)


@pytest.fixture(scope="module")
def result(target, tmp_path_factory):
    work = tmp_path_factory.mktemp("ablation")
    return run(target, work), work


def test_the_head_reads_t_i_plus_1_or_t_i_and_predicts_f_i_plus_1(target):
    """Hand-made text t = 10 11 12 13: the shifted head reads 11 12 13, the unshifted 10 11 12, both
    with f_0..f_2, in training and in teacher-forced chains; the targets stay f_1..f_3."""
    ids = torch.tensor([10, 11, 12, 13])
    row = compute_features(target, [Example(ids.tolist(), [1, 1, 1, 1])])[0]
    f = row["features"].float()
    for name, read in (("shifted", [11, 12, 13]), ("unshifted", [10, 11, 12])):
        v = BY_NAME[name]
        head = new_head(target, seed=0, input_mode=v.input_mode)
        calls = recording(head)
        r = training_rows([row], v)[0]
        eagle_loss(head, f[None], r["input_ids"][None], r["loss_mask"][None], noise=0.0)
        assert calls[0][1].tolist() == [read]
        torch.testing.assert_close(calls[0][0][0], f[:3])
        calls.clear()
        chain_acceptance(head, f[None], ids[None], row["loss_mask"][None], steps=2,
                         token_shift=v.token_shift)
        assert calls[0][1].tolist() == [read] and calls[1][1].tolist() == [read]
        torch.testing.assert_close(calls[1][0][0, 1:], head(f[None, :3], torch.tensor([read]))[0, :2])
    assert training_rows([row], BY_NAME["shifted"])[0] is row  # the shared rows, untouched


def test_four_variants_differ_only_in_the_fc_input(result, target, monkeypatch, tmp_path):
    res, work = result
    h = target.hidden_size
    assert {k: v["fc_in"] for k, v in res["variants"].items()} == \
        {"token": h, "feature": h, "unshifted": 2 * h, "shifted": 2 * h}
    shapes = {v.name: {k: t.shape for k, t in torch.load(work / "seed0" / v.name / "ckpt" / "state.pt")
                       ["head"].items()} for v in VARIANTS}
    for name, s in shapes.items():
        assert {k: x for k, x in s.items() if k != "fc.weight"} == \
            {k: x for k, x in shapes["shifted"].items() if k != "fc.weight"}, name
    # and every head starts from the same decoder layer
    starts = {}
    real = eagle_mini.training.train.train_head

    def capture(head, *a, **kw):
        starts[head.input_mode, head.fc.in_features] = {k: t.clone() for k, t in
                                                       head.layers.state_dict().items()}
        return real(head, *a, **kw)
    monkeypatch.setattr(eagle_mini.training.train, "train_head", capture)
    run(target, tmp_path)
    first = next(iter(starts.values()))
    assert len(starts) == 3 and all(torch.equal(first[k], s[k]) for s in starts.values() for k in s)


def test_result_json_schema(result):
    res, _ = result
    res = json.loads(json.dumps(res))
    assert res["format"] == "eagle_mini.uncertainty/2"
    assert set(res) >= {"command", "config", "data", "variants", "summary", "checks", "uncertainty",
                        "paper", "machine", "phase_seconds", "elapsed_seconds"}
    assert list(res["variants"]) == ["token", "feature", "unshifted", "shifted"]
    for v in res["variants"].values():
        assert [s["seed"] for s in v["seeds"]] == [0, 1]
        for s in v["seeds"]:
            assert [e["epoch"] for e in s["epochs"]] == [1, 2]
            for e in s["epochs"]:
                assert 0 <= e["top1"] <= 1 and e["top1"] == e["alpha"][0] and len(e["alpha"]) == 2
            # per-conversation counts pool to the last epoch's evaluation
            assert len(s["val_counts"]) == 3
            assert [sum(c[k][0] for c in s["val_counts"]) for k in (0, 1)] == \
                [s["epochs"][-1]["counts"][k][0] for k in (0, 1)]
            assert len(s["decode"]["per_prompt"]) == 2 and s["decode"]["tau"] >= 1
            assert s["machine"]["cpu"] and s["machine"]["threads"]   # heads may train on other CPUs
        # the two seeds start and train differently
        assert v["seeds"][0]["epochs"][0]["train_loss"] != v["seeds"][1]["epochs"][0]["train_loss"]
    for metric in ("top1", "alpha1", "tau"):
        for iv in res["summary"][metric].values():
            assert len(iv["seeds"]) == 2
            if iv["estimate"] == iv["estimate"]:  # NaN: nothing tried (1-alpha of tiny heads)
                assert iv["low"] <= iv["estimate"] <= iv["high"]
    assert len(res["checks"]) == 4 and all("differences" in c for c in res["checks"])
    b = res["uncertainty"]["branches"]
    assert b["summary"]["contexts"] == 8 and len(b["contexts"]["branch_distance"]) == 8
    assert {len(h["errors"]) for h in b["heads"].values()} == {8}
    e = res["uncertainty"]["entropy"]
    assert len(e["mean_entropy"]) == 3 and set(e["rel_error"]) == set(res["variants"])
    assert "| feature & shifted token | 128 |" in summary_table(res)


def _fake_result(top1, alpha1, tau, seeds=2, units=40):
    """Per-conversation counts and per-prompt rows around the given rates; every variant shares
    the same per-unit wobble (paired units), seeds differ a little."""
    g = torch.Generator().manual_seed(0)
    wobble = (torch.rand(units, generator=g) - 0.5) * 0.2

    def seed_run(n, s):
        conv = [[[round(min(1, max(0, top1[n] + w + 0.002 * s)) * 100), 100],
                 [round(min(1, max(0, alpha1[n] + w)) * 50), 50]] for w in wobble.tolist()]
        prompts = [{"new_tokens": 1 + round((tau[n] + w) * 20), "target_forwards": 21}
                   for w in wobble.tolist()]
        return {"val_counts": conv, "decode": {"per_prompt": prompts}}
    return {"variants": {n: {"seeds": [seed_run(n, s) for s in range(seeds)]}
                         for n in ("token", "feature", "unshifted", "shifted")}}


def test_paper_checks_hold_on_the_papers_pattern_and_fail_off_it():
    paper_like = _fake_result({"token": .3, "feature": .6, "unshifted": .6, "shifted": .8},
                              {"token": .2, "feature": .4, "unshifted": .5, "shifted": .7},
                              {"token": 1.5, "feature": 1.9, "unshifted": 2.0, "shifted": 2.8})
    rows = paper_checks(paper_like)
    assert [r["holds"] for r in rows] == [True] * 4
    d = rows[0]["differences"][0]   # feature - token on top-1: 0.3, its interval around it
    assert d["estimate"] == pytest.approx(0.3, abs=0.01) and d["low"] > 0.25
    off = _fake_result({"token": .5, "feature": .4, "unshifted": .2, "shifted": .45},
                       {"token": .2, "feature": .4, "unshifted": .3, "shifted": .7},
                       {"token": 1.5, "feature": 1.9, "unshifted": 2.0, "shifted": 2.8})
    assert [r["holds"] for r in paper_checks(off)] == [False, True, False, False]
    # a gap of 0.05 with an interval that excludes 0 is not "about equal" (margin 0.02)
    near = _fake_result({"token": .3, "feature": .6, "unshifted": .65, "shifted": .8},
                        {"token": .2, "feature": .4, "unshifted": .5, "shifted": .7},
                        {"token": 1.5, "feature": 1.9, "unshifted": 2.0, "shifted": 2.8})
    assert [r["holds"] for r in paper_checks(near)] == [True, True, False, True]


def killed_at_third(real, calls):
    """A `train_head` that records each head's input mode and is interrupted at the third head."""
    def train(head, *a, **kw):
        calls.append(head.input_mode)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(head, *a, **kw)
    return train


def test_a_rerun_skips_finished_variants_and_more_seeds_continue(target, tmp_path, monkeypatch):
    real, calls = eagle_mini.training.train.train_head, []
    monkeypatch.setattr(eagle_mini.training.train, "train_head", killed_at_third(real, calls))
    with pytest.raises(KeyboardInterrupt):
        run(target, tmp_path)
    first = {v: json.loads((tmp_path / "seed0" / v / "result.json").read_text())
             for v in ("token", "feature")}
    calls.clear()
    monkeypatch.setattr(eagle_mini.training.train, "train_head", lambda head, *a, **kw:
                        calls.append(head.input_mode) or real(head, *a, **kw))
    res = run(target, tmp_path)
    # seed 0's unshifted and shifted heads, then all four of seed 1
    assert calls == ["feature+token", "feature+token", "token", "feature", "feature+token",
                     "feature+token"]
    for v in ("token", "feature"):
        assert res["variants"][v]["seeds"][0]["epochs"] == first[v]["epochs"]
    calls.clear()
    more = run(target, tmp_path, cfg=replace(TINY, seeds=3))   # a third seed: four more heads
    assert len(calls) == 4 and [s["seed"] for s in more["variants"]["token"]["seeds"]] == [0, 1, 2]
    monkeypatch.setattr(eagle_mini.training.train, "train_head", None)  # nothing left to train or decode
    assert run(target, tmp_path)["variants"]["shifted"] == res["variants"]["shifted"]
    with pytest.raises(EagleMiniError, match="another run"):
        run_ablation(target, make_examples(5), make_examples(3, seed=1), [[1, 2]], TINY, tmp_path,
                     log=lambda *_: None)


def test_a_new_work_dir_starts_from_the_kept_variants(target, tmp_path, monkeypatch):
    """A sitting's work directory is lost; what `keep` received is not: only the variant cut off
    mid-training is redone, and the result equals an uninterrupted run's."""
    real, calls = eagle_mini.training.train.train_head, []
    monkeypatch.setattr(eagle_mini.training.train, "train_head", killed_at_third(real, calls))
    keep = tmp_path / "keep"
    with pytest.raises(KeyboardInterrupt):
        run(target, tmp_path / "sitting1", keep=keep)
    assert sorted(p.name for p in (keep / "seed0").iterdir()) == ["feature", "token"]
    assert sorted(p.name for p in (keep / "seed0" / "token").iterdir()) == \
        ["probe.json", "result.json", "tau.json"]          # JSON only: no head, no checkpoint
    calls.clear()
    monkeypatch.setattr(eagle_mini.training.train, "train_head", lambda head, *a, **kw:
                        calls.append(head.input_mode) or real(head, *a, **kw))
    res = run(target, tmp_path / "sitting2", keep=keep)   # a fresh work directory
    assert calls[:2] == ["feature+token", "feature+token"] and len(calls) == 6
    whole = run(target, tmp_path / "uninterrupted")
    for name in ("token", "shifted"):
        for a, b in zip(res["variants"][name]["seeds"], whole["variants"][name]["seeds"]):
            assert a["val_counts"] == b["val_counts"] and a["decode"]["per_prompt"] == \
                b["decode"]["per_prompt"]
    assert res["uncertainty"]["contexts_match"]
    assert res["uncertainty"]["branches"]["heads"] == whole["uncertainty"]["branches"]["heads"]
    with pytest.raises(EagleMiniError, match="another run"):
        run(target, tmp_path / "sitting3", cfg=replace(TINY, lr=5e-4), keep=keep)


def test_epoch_source_serves_every_batch_once_per_epoch_in_a_seeded_order():
    batches = [[{"i": i}] for i in range(5)]
    src = EpochSource(batches, seed=3)
    served = [src.take()[0]["i"] for _ in range(10)]
    assert sorted(served[:5]) == sorted(served[5:]) == list(range(5))
    again = EpochSource(batches, seed=3, cursor=7)
    assert [again.take()[0]["i"] for _ in range(3)] == served[7:]


def reference_feature(head, feats, ids, path_tokens):
    """F(v) for the unshifted head, step by step: stable entries (f_j, t_j), then one entry per
    ancestor of v reading (F(ancestor), token of the ancestor)."""
    cache = head.new_cache()
    out = head(feats[None], torch.tensor(ids)[None], cache=cache)[0, -1]
    for tok in path_tokens:
        out = head(out[None, None], torch.tensor([[tok]]), cache=cache)[0, -1]
    return out


@pytest.mark.parametrize("tree", [parse_tree("eagle1"), DynamicTree(12, 4, 3)])
def test_unshifted_drafts_read_the_parents_token(target, tree):
    """Every node's children come from F(node), computed from its ancestors' (feature, token)
    pairs: the node's own token is read only one step later."""
    head = new_head(target, seed=5)
    with torch.no_grad():  # random embeddings are small: make the token matter
        head.fc.weight[:, :target.hidden_size] *= 50
    ids = [3, 9, 27, 17, 51, 25]
    step = target.forward(ids, target.new_cache())
    root = 44
    drafter = UnshiftedDrafter(head, tree, first_token=ids[0])
    drafter.extend(step.features, ids[1:] + [root])
    draft = drafter.draft(root)
    t = draft.tree
    for c in range(1, t.num_nodes):
        path, p = [], t.parents[c]
        while p > 0:
            path.append(int(draft.tokens[p]))
            p = t.parents[p]
        path = [root] + path[::-1]  # tokens of the root and the ancestors below it, parent last
        logp = head.draft_logits(reference_feature(head, step.features, ids, path[:-1])).log_softmax(-1)
        assert abs(logp[draft.tokens[c]].item() - draft.confidence[c].log().item()) < 1e-4, c
        if not isinstance(tree, DynamicTree):
            assert int(draft.tokens[c]) == int(logp.topk(t.ranks[c] + 1).indices[-1]), c


def test_unshifted_decoding_is_lossless_and_keeps_the_unshifted_cache(target):
    """Through `generate`, the head's stable cache holds (f_j, t_j) for every accepted position."""
    head = new_head(target, seed=6)
    prompt = [5, 7, 11, 13]
    drafter = UnshiftedDrafter(head, "eagle1", first_token=prompt[0])
    gen = generate(target, head, prompt, 20, drafter=drafter)
    assert gen.output_ids == generate_vanilla(target, prompt, 20).output_ids
    text = prompt + gen.output_ids
    feats = target.forward(text, target.new_cache()).features
    n = min(drafter.stable, len(text))  # a last cycle may run past max_new_tokens
    ref = head.new_cache()
    head(feats[None, :n], torch.tensor([text[:n]]), cache=ref)
    for mine, theirs in zip(drafter.cache.layers, ref.layers):
        torch.testing.assert_close(mine.keys[:, :, :n], theirs.keys, atol=1e-4, rtol=1e-4)


def test_branch_features_and_predictions_equal_running_each_branch_alone(target):
    head = new_head(target, seed=7)
    ids = torch.tensor([3, 9, 27, 17, 51, 25, 8])
    f = target.forward(ids, target.new_cache()).features
    positions, branches = torch.tensor([2, 5]), torch.tensor([[1, 2], [40, 41]])
    fb = branch_features(target, ids, positions, branches)
    shifted = predict_branches(head, BY_NAME["shifted"], f, ids, positions, branches)
    for k, i in enumerate(positions.tolist()):
        for j, tok in enumerate(branches[k].tolist()):
            alone = target.forward(ids[:i + 1].tolist() + [tok], target.new_cache()).features[-1]
            torch.testing.assert_close(fb[k, j], alone, atol=1e-4, rtol=1e-4)
            read = torch.cat([ids[1:i + 1], torch.tensor([tok])])
            torch.testing.assert_close(shifted[k, j], head(f[None, :i + 1], read[None])[0, -1],
                                       atol=1e-4, rtol=1e-4)
    unshifted = predict_branches(head, BY_NAME["unshifted"], f, ids, positions, branches)
    torch.testing.assert_close(unshifted[:, 0], unshifted[:, 1])  # blind to the branch


def test_cli_sizes_and_knobs():
    args = build_parser().parse_args(["experiment", "uncertainty", "--size", "ci", "--epochs", "3"])
    cfg = config_for(args.size, **ablation_knobs(args))
    assert cfg.epochs == 3 and cfg.max_len == 256
    assert args.out is None and args.keep is None   # runs/uncertainty.json, no keep: results.default_out
