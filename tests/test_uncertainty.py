"""The feature-uncertainty ablation (EAGLE §3.1, Figs. 3, 4, 8): four heads that differ only in
what they read, drafted the way decoding feeds them, measured by one resumable experiment."""
import json

import pytest
import torch

import eagle_mini.training.train
from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.measure.ablation import (AblationConfig, EpochSource, config_from_args, paper_checks,
                                 run_ablation, summary_table)
from eagle_mini.cli import build_parser
from eagle_mini.training.data import Example
from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.draft import DynamicTree
from eagle_mini.training.features import compute_features
from eagle_mini.head import new_head
from eagle_mini.training.train import chain_acceptance, eagle_loss
from eagle_mini.tree import parse_tree
from eagle_mini.measure.uncertainty import (BY_NAME, VARIANTS, UnshiftedDrafter, branch_features,
                                    predict_branches, training_rows)

VOCAB = 64
TINY = AblationConfig(train_tokens=10**9, val_tokens=10**9, max_len=64, epochs=2, batch_tokens=96,
                      warmup=2, draft_vocab=0, prompts=2, max_new_tokens=8, contexts=8, min_p=0.0,
                      analysis_tokens=1000, entropy_bins=3)


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


def run(target, work, **kw):
    return run_ablation(target, make_examples(8), make_examples(3, seed=1), [[1, 2, 3], [4, 5, 6, 7]],
                        TINY, work, log=lambda *_: None, **kw)


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
    shapes = {v.name: {k: t.shape for k, t in torch.load(work / v.name / "ckpt" / "state.pt")
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
    assert res["format"] == "eagle_mini.uncertainty/1"
    assert set(res) >= {"command", "config", "data", "variants", "vanilla", "decode", "uncertainty",
                        "paper", "machine", "phase_seconds", "elapsed_seconds"}
    assert list(res["variants"]) == ["token", "feature", "unshifted", "shifted"]
    for v in res["variants"].values():
        assert [e["epoch"] for e in v["epochs"]] == [1, 2]
        for e in v["epochs"]:
            assert 0 <= e["top1"] <= 1 and e["top1"] == e["alpha"][0] and len(e["alpha"]) == 2
        assert v["decode"]["equal_to_vanilla"] and v["decode"]["tau"] >= 1
        assert v["decode"]["speedup"] > 0
    b = res["uncertainty"]["branches"]
    assert b["summary"]["contexts"] == 8 and len(b["contexts"]["branch_distance"]) == 8
    assert {len(h["errors"]) for h in b["heads"].values()} == {8}
    e = res["uncertainty"]["entropy"]
    assert len(e["mean_entropy"]) == 3 and set(e["rel_error"]) == set(res["variants"])
    assert "| feature & shifted token | 128 |" in summary_table(res)


def _fake_result(top1, alpha1, tau):
    def counts(n):
        return [[round(top1[n] * 1000), 1000], [round(alpha1[n] * 300), 300]]
    return {"variants": {n: {"epochs": [{"top1": top1[n], "alpha": [top1[n], alpha1[n]],
                                         "counts": counts(n)}],
                             "decode": {"tau": tau[n], "speedup": tau[n] / 2}}
                         for n in ("token", "feature", "unshifted", "shifted")}}


def test_paper_checks_hold_on_the_papers_pattern_and_fail_off_it():
    paper_like = _fake_result({"token": .3, "feature": .6, "unshifted": .62, "shifted": .8},
                              {"token": .2, "feature": .4, "unshifted": .5, "shifted": .7},
                              {"token": 1.5, "feature": 1.9, "unshifted": 2.0, "shifted": 2.8})
    rows = paper_checks(paper_like)
    assert all(r["holds"] for r in rows)
    # token 0.3 vs feature 0.6 on 1000 tokens each: z = 0.3 / sqrt(.21/1000 + .24/1000) = 14.1;
    # feature 0.6 vs shifted 0.8: 0.2 / sqrt(.24/1000 + .16/1000) = 10.0, the smaller one
    assert rows[0]["z"] == 10.0 and rows[1]["z"] is None
    off = _fake_result({"token": .5, "feature": .4, "unshifted": .2, "shifted": .45},
                       {"token": .2, "feature": .4, "unshifted": .3, "shifted": .7},
                       {"token": 1.5, "feature": 1.9, "unshifted": 2.0, "shifted": 2.8})
    holds = {r["claim"].split(":")[0]: r["holds"] for r in paper_checks(off)}
    assert holds == {"top-1": False, "speedup in the same order": True,
                     "tau in the same order (what carries over between machines)": True,
                     "unshifted 0-alpha about feature only's": False,
                     "unshifted 1-alpha above feature only's": False,
                     "feature & shifted token best on 0-alpha and 1-alpha": False}


def test_a_rerun_skips_finished_variants(target, tmp_path, monkeypatch):
    real, calls = eagle_mini.training.train.train_head, []

    def killed_at_third(head, *a, **kw):
        calls.append(head.input_mode)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(head, *a, **kw)
    monkeypatch.setattr(eagle_mini.training.train, "train_head", killed_at_third)
    with pytest.raises(KeyboardInterrupt):
        run(target, tmp_path)
    first = {v: json.loads((tmp_path / v / "result.json").read_text()) for v in ("token", "feature")}
    calls.clear()
    monkeypatch.setattr(eagle_mini.training.train, "train_head", lambda head, *a, **kw:
                        calls.append(head.input_mode) or real(head, *a, **kw))
    res = run(target, tmp_path)
    assert calls == ["feature+token", "feature+token"]  # unshifted and shifted only
    for v in ("token", "feature"):
        assert res["variants"][v]["epochs"] == first[v]["epochs"]
    monkeypatch.setattr(eagle_mini.training.train, "train_head", None)  # nothing left to train or decode
    assert run(target, tmp_path)["variants"]["shifted"] == res["variants"]["shifted"]
    with pytest.raises(EagleMiniError, match="another run"):
        run_ablation(target, make_examples(5), make_examples(3, seed=1), [[1, 2]], TINY, tmp_path,
                     log=lambda *_: None)


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
    cfg = config_from_args(args)
    assert cfg.epochs == 3 and cfg.max_len == 256 and args.out == "data/results/uncertainty.json"
