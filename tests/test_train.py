"""Training the head (EAGLE §4): the loss learns, runs resume exactly, the pipeline closes."""
import json

import pytest
import torch

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.data import Example
from eagle_mini.decode import generate, generate_vanilla
from eagle_mini.training.features import FeatureDataset, compute_features, dump_features
from eagle_mini.heads.eagle1 import DraftHead, new_head
from eagle_mini.training.commands import featurizer
from eagle_mini.training.train import (DumpSource, TrainConfig, chain_acceptance, eagle_loss,
                              evaluate_head, pad_batch, train_head,
                              unrolled_predictions)


# two processes x one 24-token example per step, no input noise (each process draws its own)
DDP_CONFIG = dict(lr=1e-3, steps=6, warmup_steps=2, batch_tokens=24, ckpt_every=100, noise=0.0)
UNROLL = {"eagle1": 1, "eagle3": 3}


def make_examples(n=6, length=24, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (length,), generator=g).tolist()
        mask = [0] * 4 + [1] * (length - 4)
        out.append(Example(ids, mask, index=i))
    return out


@pytest.fixture(scope="module")
def tiny():
    target = tiny_target("llama", seed=0, vocab_size=64)
    return target, compute_features(target, make_examples())


def test_unrolled_predictions_equal_chain_drafting(tiny):
    """Pass k at entry j == the k-th step of a chain draft started at j-k through the KV cache."""
    target, feats = tiny
    head = new_head(target, seed=1)
    ids = feats[0]["input_ids"][None]
    f = feats[0]["features"].float()[None]
    preds = unrolled_predictions(head, f, ids, 4)
    for i in range(0, 10):
        cache = head.new_cache()
        p = head(f[:, :i + 1], ids[:, 1:i + 2], cache=cache)[0, -1]
        torch.testing.assert_close(p, preds[0][i], atol=1e-5, rtol=1e-5)
        for k in range(1, 4):
            p = head(p[None, None], ids[:, i + k + 1:i + k + 2], cache=cache)[0, -1]
            torch.testing.assert_close(p, preds[k][i + k], atol=1e-4, rtol=1e-4)


def test_zero_alpha_is_top1_against_the_target(tiny):
    target, feats = tiny
    head = new_head(target, seed=1)
    e = feats[0]
    counts = chain_acceptance(head, e["features"][None].float(), e["input_ids"][None],
                              e["loss_mask"][None])
    f = e["features"].float()
    draft = (head(f[None, :-1], e["input_ids"][None, 1:])[0] @ head._shared["lm_head"].T).argmax(-1)
    truth = (f[1:] @ head._shared["target_lm_head"].T).argmax(-1)
    w = e["loss_mask"][1:].bool()
    assert counts[0] == (int(((draft == truth) & w).sum()), int(w.sum()))
    assert all(counts[k][1] <= counts[k - 1][1] for k in range(1, 4))


def test_unrolled_loss_adds_the_chain_step_scored_like_step_zero(tiny):
    """unroll=2 = EAGLE-1's loss + decay * the same loss on step 1, where step 1 is drafted by hand
    through the KV cache (the head reads its own step-0 output) -- on a padded batch of two rows
    with different lengths and a trailing non-assistant token, so padding and the cut at the last
    assistant token are both exercised."""
    target, feats = tiny
    head = new_head(target, seed=4)
    rows = [dict(feats[0]), dict(feats[1])]
    rows[1] = {k: v[:17] for k, v in rows[1].items() if k in ("input_ids", "features", "loss_mask")}
    rows[0]["loss_mask"] = rows[0]["loss_mask"].clone()
    rows[0]["loss_mask"][-1] = 0
    ids, f, m = pad_batch(rows, "cpu")
    one, p1 = eagle_loss(head, f, ids, m, noise=0.0)
    two, p2 = eagle_loss(head, f, ids, m, noise=0.0, unroll=2, decay=0.5)
    for key in ("reg", "cls", "top1"):
        assert p2[key] == pytest.approx(p1[key], rel=1e-5)
    lm = head._shared["lm_head"]
    reg = cls = 0.0
    count = 0
    with torch.no_grad():
        for r in rows:
            x, t, w = r["features"].float(), r["input_ids"], r["loss_mask"]
            for i in range(len(t) - 2):   # chain from entry i; its step 1 predicts f_{i+2}
                if not w[i + 2]:
                    continue
                cache = head.new_cache()
                p0 = head(x[None, :i + 1], t[None, 1:i + 2], cache=cache)[0, -1]
                p = head(p0[None, None], t[None, i + 2:i + 3], cache=cache)[0, -1]
                reg += torch.nn.functional.smooth_l1_loss(p, x[i + 2]).item()
                q = (x[i + 2] @ lm.T).softmax(-1)
                cls += -(q * (p @ lm.T).log_softmax(-1)).sum().item()
                count += 1
    step1 = (reg + 0.1 * cls) / count
    assert two.item() == pytest.approx(one.item() + 0.5 * step1, rel=1e-4)
    assert len(p2["top1_steps"]) == 2


def test_featurizer_copy_in_bf16_makes_close_features(tiny):
    """A bf16 copy of the target featurizes the same text to within bf16 rounding; asking for the
    target's own dtype returns the target itself."""
    target, feats = tiny
    assert featurizer(target, "fp32") is target and featurizer(target, "") is target
    copy = featurizer(target, "bf16")
    assert copy.model.dtype == torch.bfloat16 and target.model.dtype == torch.float32
    again = compute_features(copy, make_examples())
    for a, b in zip(feats, again):
        assert torch.equal(a["input_ids"], b["input_ids"])
        torch.testing.assert_close(b["features"].float(), a["features"].float(), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("unroll,precision", [(1, "no"), (3, "no"), (1, "bf16")])
def test_loss_drops_when_overfitting_a_few_samples(tiny, tmp_path, unroll, precision):
    target, feats = tiny
    head = new_head(target, seed=2)
    ids, f, m = (torch.stack([e[k].float() if k == "features" else e[k] for e in feats[:2]])
                 for k in ("input_ids", "features", "loss_mask"))
    first, _ = eagle_loss(head, f, ids, m, noise=0.0)
    cfg = TrainConfig(lr=3e-3, steps=60, warmup_steps=5, batch_tokens=48, ckpt_every=1000,
                      unroll=unroll, mixed_precision=precision)
    train_head(head, target, DumpSource(feats[:2]), tmp_path, cfg, log=lambda *_: None)
    last, parts = eagle_loss(head, f, ids, m, noise=0.0)
    assert last < 0.5 * first
    assert parts["top1"] > 0.5


def test_killed_and_resumed_run_equals_uninterrupted(tiny, tmp_path):
    target, feats = tiny
    cfg = TrainConfig(lr=1e-3, steps=8, warmup_steps=2, batch_tokens=40, ckpt_every=3)
    a = new_head(target, seed=3)
    train_head(a, target, DumpSource(feats), tmp_path / "a", cfg, log=lambda *_: None)
    b = new_head(target, seed=3)
    train_head(b, target, DumpSource(feats), tmp_path / "b", cfg, stop_after=4, log=lambda *_: None)
    b2 = new_head(target, seed=99)  # a fresh process: weights come from the checkpoint
    train_head(b2, target, DumpSource(feats), tmp_path / "b", cfg, log=lambda *_: None)
    for (k, x), (_, y) in zip(a.state_dict().items(), b2.state_dict().items()):
        assert torch.equal(x, y), k
    log = [json.loads(r) for r in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 9))
    import csv
    with open(tmp_path / "b" / "log.csv") as fh:   # the same log as CSV, rewritten after resuming
        table = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in table] == list(range(1, 9))
    assert [float(r["loss"]) for r in table] == [r["loss"] for r in log]


@pytest.fixture(scope="module")
def tiny3():
    """A 4-layer tiny Llama (EAGLE-3 reads the inputs of layers 2, 2 and 1) and features with the
    layers an EAGLE-3 head reads."""
    from eagle_mini.heads.eagle3 import aux_layers
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    return target, compute_features(target, make_examples(), layers=aux_layers(4))


def test_eagle3_killed_and_resumed_run_equals_uninterrupted(tiny3, tmp_path):
    """An EAGLE-3 head (training-time test, 3 steps) resumes exactly as an EAGLE-1 head does."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    target, feats = tiny3
    cfg = TrainConfig(lr=1e-3, steps=6, warmup_steps=2, batch_tokens=40, ckpt_every=2, unroll=3)
    a = new_eagle3_head(target, seed=3)
    train_head(a, target, DumpSource(feats), tmp_path / "a", cfg, log=lambda *_: None)
    b = new_eagle3_head(target, seed=3)
    train_head(b, target, DumpSource(feats), tmp_path / "b", cfg, stop_after=3, log=lambda *_: None)
    b2 = new_eagle3_head(target, seed=99)
    train_head(b2, target, DumpSource(feats), tmp_path / "b", cfg, log=lambda *_: None)
    for (k, x), (_, y) in zip(a.state_dict().items(), b2.state_dict().items()):
        assert torch.equal(x, y), k
    log = [json.loads(r) for r in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 7)) and len(log[0]["top1_steps"]) == 3


def test_eagle3_dump_train_save_load_generate(tmp_path):
    """Dumped layers (`dump_features(layers=...)`) train an EAGLE-3 head; saved, loaded and
    decoding losslessly; a dump without layers is refused with a clear error."""
    from eagle_mini.heads.eagle3 import aux_layers, new_eagle3_head
    from eagle_mini.heads import load_head
    target = tiny_target("llama", seed=4, vocab_size=64, num_hidden_layers=4)
    dump_features(target, make_examples(6, seed=4), tmp_path / "feats", {"split": "train"},
                  shard_size=4, progress=False, layers=aux_layers(4))
    ds = FeatureDataset(tmp_path / "feats")
    assert ds.manifest["layers"] == [1, 2, 3] and ds[0]["layers"].shape == (24, 3 * 64)
    head = new_eagle3_head(target, seed=0, draft_vocab=list(range(0, 64, 2)))
    cfg = TrainConfig(lr=3e-3, steps=6, warmup_steps=2, batch_tokens=64, ckpt_every=10, unroll=2)
    result = train_head(head, target, DumpSource(ds), tmp_path / "work", cfg,
                        evaluate_fn=lambda h: evaluate_head(h, list(ds)[:2], steps=2),
                        log=lambda *_: None)
    assert 0 <= result["eval"]["top1"] <= 1
    loaded = load_head(head.save(tmp_path / "head", dtype=torch.float32), target)
    for (k, x), (_, y) in zip(head.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(x, y), k
    ref = generate_vanilla(target, [1, 2, 3], 24)
    assert generate(target, loaded, [1, 2, 3], 24, tree="eagle2").output_ids == ref.output_ids
    with pytest.raises(EagleMiniError, match="layers"):
        evaluate_head(head, [{k: v for k, v in ds[0].items() if k != "layers"}])


def test_dump_train_save_load_generate(tmp_path):
    """The whole pipeline on a tiny random Llama, through the same code as the 7B path."""
    target = tiny_target("llama", seed=4, vocab_size=64)
    dump_features(target, make_examples(8, seed=4), tmp_path / "feats", {"split": "train"},
                  shard_size=3, progress=False)
    ds = FeatureDataset(tmp_path / "feats")
    ds.check_target(target)
    head = new_head(target, seed=0)
    cfg = TrainConfig(lr=3e-3, steps=20, warmup_steps=2, batch_tokens=64, ckpt_every=10)
    result = train_head(head, target, DumpSource(ds), tmp_path / "work", cfg,
                        evaluate_fn=lambda h: evaluate_head(h, list(ds)[:2]), log=lambda *_: None)
    assert 0 <= result["eval"]["top1"] <= 1 and len(result["eval"]["alpha"]) == 4
    head.save(tmp_path / "head", dtype=torch.float32)
    loaded = DraftHead.load(tmp_path / "head", target)
    for (k, x), (_, y) in zip(head.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(x, y), k
    ref = generate_vanilla(target, [1, 2, 3], 24)
    assert generate(target, loaded, [1, 2, 3], 24, tree="eagle1").output_ids == ref.output_ids


def test_features_and_heads_refuse_another_target(tmp_path):
    a = tiny_target("llama", seed=5, vocab_size=64)
    b = tiny_target("llama", seed=6, vocab_size=64)
    dump_features(a, make_examples(2), tmp_path / "feats", {"split": "train"}, progress=False)
    with pytest.raises(EagleMiniError, match="fingerprint"):
        FeatureDataset(tmp_path / "feats").check_target(b)
    other = tiny_target("llama", seed=5, vocab_size=64, hidden_size=32)
    with pytest.raises(EagleMiniError, match="hidden size"):
        new_head(a).attach(other)


def test_training_plan_matches_known_model_sizes():
    """Vicuna-7B has 6.74B parameters and a 0.24B EAGLE head (reference §1); LLaMA-3.1-8B 8.03B."""
    from eagle_mini.models import BIG_CONFIGS
    from eagle_mini.training.commands import training_plan
    vicuna = training_plan(BIG_CONFIGS["vicuna-7b"], tokens=1_000_000)
    assert round(vicuna["target_params_b"], 2) == 6.74
    assert round(vicuna["head_params_m"], 1) == 235.9
    assert vicuna["feature_disk_gb"] == 1_000_000 * 4096 * 2 / 1e9
    assert round(training_plan(BIG_CONFIGS["llama3.1-8b-instruct"], 1)["target_params_b"], 2) == 8.03


@pytest.mark.parametrize("name", ["vicuna-7b", "llama3.1-8b-instruct"])
def test_training_plan_counts_a_real_eagle3_head(name):
    """EAGLE-3's plan (fc 3H -> H, 2H attention input, own lm_head over the draft vocabulary, 4H
    of features per token) counts the parameters of an `Eagle3Head` built on the meta device."""
    from transformers import LlamaConfig
    from eagle_mini.heads.eagle3 import Eagle3Head
    from eagle_mini.models import BIG_CONFIGS
    from eagle_mini.training.commands import training_plan
    config = BIG_CONFIGS[name]
    with torch.device("meta"):
        head = Eagle3Head(LlamaConfig(**config), draft_vocab=list(range(32_000)))
    plan = training_plan(config, tokens=1_000, kind="eagle3", draft_vocab=32_000)
    assert round(plan["head_params_m"] * 1e6) == sum(p.numel() for p in head.parameters())
    assert plan["feature_disk_gb"] == 1_000 * 4 * config["hidden_size"] * 2 / 1e9


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_ddp_over_two_processes_equals_one_process_on_the_joint_batch(tiny, tiny3, tmp_path, kind):
    """`torchrun` with 2 CPU processes (accelerate sets up gloo DDP from its environment, as it does
    for NCCL under `accelerate launch` on GPUs): each process trains on its own share,
    the gradients are averaged, so the weights equal one process trained on both shares as one
    batch (the examples have equal loss-token counts, so the two means agree)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": f"{here}:{here.parent}", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(here / "ddp_worker.py"), str(tmp_path / "ddp"), kind],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [torch.load(tmp_path / "ddp" / f"rank{i}.pt") for i in range(2)]
    if kind == "eagle3":  # the training-time test's unrolled steps run inside one DDP forward
        from eagle_mini.heads.eagle3 import new_eagle3_head
        target, feats = tiny3
        head = new_eagle3_head(target, seed=3)
    else:
        target, feats = tiny
        head = new_head(target, seed=3)
    train_head(head, target, DumpSource(feats), tmp_path / "one",
               TrainConfig(**{**DDP_CONFIG, "batch_tokens": 48, "unroll": UNROLL[kind]}),
               log=lambda *_: None)
    for name, value in head.state_dict().items():
        torch.testing.assert_close(ranks[0][name], ranks[1][name], atol=0, rtol=0)
        torch.testing.assert_close(ranks[0][name], value, atol=1e-5, rtol=1e-4)


def test_streaming_wraps_into_a_new_epoch_only_when_asked(smollm):
    """A used-up split is a clear error; with `wrap` the next batch starts the split again."""
    from eagle_mini.data import ShareGPT
    from eagle_mini.training.train import StreamingSource
    msgs = [[{"role": "user", "content": f"Question {i}?"},
             {"role": "assistant", "content": f"Answer number {i}."}] for i in range(3)]
    data = ShareGPT([{"id": str(i)} for i in range(3)], msgs)
    for wrap in (False, True):
        src = StreamingSource(smollm, "train", data=data, cursor=1, wrap=wrap)
        assert [e.index for e in src.take(10_000)] == [1, 2] and src.cursor == 3
        if not wrap:
            with pytest.raises(EagleMiniError, match="used up"):
                src.take(10_000)
            continue
        assert [e.index for e in src.take(1)] == [0] and src.cursor == 1


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_chain_attention_equals_the_dense_chain_mask_forward_and_backward(family, kind):
    """`chain_attention` (n^2 + kn scores per pass) against attention through the dense
    n x (k+1)n mask: the same drafts and the same gradients, grouped-query heads included."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    target = tiny_target(family, seed=0, vocab_size=64, num_hidden_layers=4)
    examples = make_examples(1, length=20)
    layers = (2, 2, 1) if kind == "eagle3" else None
    row = compute_features(target, examples, layers=layers)[0]
    head = (new_eagle3_head(target, seed=1, layers=layers) if kind == "eagle3"
            else new_head(target, seed=1))
    x = (row["layers"] if kind == "eagle3" else row["features"]).float()[None]
    grads = []
    for dense in (True, False):
        head.zero_grad()
        preds = unrolled_predictions(head, x, row["input_ids"][None], 4, dense=dense)
        sum((p * torch.linspace(-1, 1, p.numel()).view_as(p)).sum() for p in preds).backward()
        grads.append({n: q.grad.clone() for n, q in head.named_parameters() if q.grad is not None})
        if dense:
            reference = [p.detach() for p in preds]
    for p, r in zip(preds, reference):
        torch.testing.assert_close(p.detach(), r, atol=1e-5, rtol=1e-4)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-5, rtol=1e-4)


def test_chain_attention_refuses_a_cache_that_is_not_whole_passes():
    from eagle_mini.training.chains import chain_attention
    q, kv = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 10, 8)
    with pytest.raises(EagleMiniError, match="whole passes"):
        chain_attention(None, q, kv, kv)


def test_eagle3_frozen_lm_head_stays_the_targets_rows_and_stays_frozen(tiny3, tmp_path):
    """`--lm-head-init frozen`: training moves fc, the layer and the norm but never the lm_head
    (the target's rows of the draft vocabulary), and a saved head loads frozen again."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    from eagle_mini.heads import load_head
    target, feats = tiny3
    vocab = list(range(0, 64, 2))
    head = new_eagle3_head(target, seed=3, draft_vocab=vocab, freeze_lm_head=True)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    cfg = TrainConfig(lr=1e-2, steps=4, warmup_steps=1, batch_tokens=40, ckpt_every=2, unroll=2)
    train_head(head, target, DumpSource(feats), tmp_path / "w", cfg, log=lambda *_: None)
    after = head.state_dict()
    assert torch.equal(after["lm_head.weight"], target.model.lm_head.weight[vocab])
    assert all(not torch.equal(before[k], after[k]) for k in ("fc.weight", "norm.weight"))
    head.save(tmp_path / "h")
    loaded = load_head(tmp_path / "h", target)
    assert loaded.lm_head_frozen and not loaded.lm_head.weight.requires_grad
    with pytest.raises(EagleMiniError, match="warm_start"):
        new_eagle3_head(target, warm_start=False, freeze_lm_head=True)


def test_eagle3_warm_start_scales_the_norm_and_refuses_bad_scales(tiny3):
    """`--norm-init-scale`: the warm start's norm is the target's final norm times the scale (a
    small scale starts near a uniform guess); outside [0, 1], or with a random lm_head, refused."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    from eagle_mini.training.commands import TrainHeadCommand, training_head
    target, _ = tiny3
    head = new_eagle3_head(target, seed=3, draft_vocab=list(range(0, 64, 2)), norm_scale=0.1)
    assert torch.allclose(head.norm.weight, 0.1 * target.model.model.norm.weight.float())
    with pytest.raises(EagleMiniError, match=r"in \[0, 1\]"):
        new_eagle3_head(target, norm_scale=2.0)
    cmd = TrainHeadCommand(out="unused", kind="eagle3", lm_head_init="random", norm_init_scale=0.1)
    with pytest.raises(EagleMiniError, match="--lm-head-init target or frozen"):
        training_head(cmd, target)
