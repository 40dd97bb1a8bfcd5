"""The 7B dress rehearsal, at tiny scale: the GPU user's commands run end to end on a bf16 model
with SmolLM2's tokenizer, each step measured alone, a resumed head equal to an uninterrupted one,
and a rerun that rebuilds and reruns nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.tooling.rehearsal import build_model, run_step
from eagle_mini.training.train import eagle_loss, evaluate_head

ROOT = Path(__file__).resolve().parent.parent


def test_a_step_is_measured_alone_and_never_rerun(tmp_path):
    """Peak RSS counts what the child allocated (300 MB); a recorded step does not run again.
    No upper bound: the forked child's maxrss can start from the parent's image before exec (a
    pytest process holding the embedded target gave 2.9 GB in CI)."""
    grab = [sys.executable, "-c", "x = bytearray(300_000_000); x[::4096] = b'1' * len(x[::4096])"]
    first = run_step(tmp_path, "grab", grab, log=lambda _: None)
    assert first["ran"] and 0.3 < first["peak_rss_gb"] and first["seconds"] > 0
    assert first["command"].startswith("python -c ")
    again = run_step(tmp_path, "grab", [sys.executable, "-c", "raise SystemExit(1)"],
                     log=lambda _: None)
    assert not again["ran"] and again["peak_rss_gb"] == first["peak_rss_gb"]


def test_a_failed_step_names_its_last_error_and_leaves_no_record(tmp_path):
    with pytest.raises(EagleMiniError, match="exit code 1: boom"):
        run_step(tmp_path, "bad", [sys.executable, "-c", "raise SystemExit('boom')"],
                 log=lambda _: None)
    assert not (tmp_path / "steps" / "bad.json").exists()


def test_the_model_is_built_once_from_its_seed_with_smollm2s_tokenizer(tmp_path):
    from transformers import AutoTokenizer
    from eagle_mini import load_target
    from eagle_mini.models import resolve
    a = build_model("tiny", tmp_path / "a", seed=0)
    assert build_model("tiny", tmp_path / "b", seed=0)["fingerprint"] == a["fingerprint"]
    assert build_model("tiny", tmp_path / "c", seed=1)["fingerprint"] != a["fingerprint"]
    weights = tmp_path / "a" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_model("tiny", tmp_path / "a", seed=0) == a and weights.stat().st_mtime_ns == stamp
    target = load_target(str(tmp_path / "a"), dtype="bf16")
    donor = AutoTokenizer.from_pretrained(resolve("smollm2-135m"))
    assert target.vocab_size == len(donor) == 49152 and target.dtype == torch.bfloat16
    assert target.chat_ids("Hi!") == list(donor.apply_chat_template(
        [{"role": "user", "content": "Hi!"}], add_generation_prompt=True)["input_ids"])
    assert target.eos_token_ids == {donor.convert_tokens_to_ids("<|im_end|>")}


def test_a_head_for_a_bf16_target_trains_and_evaluates_from_fp16_features():
    """The 7B path: bf16 target, fp16 dumped features; the loss is computed in fp32."""
    target = tiny_target("llama", seed=0, vocab_size=64, dtype="bf16")
    head = new_head(target, seed=0)
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 12, target.hidden_size, generator=g).half()
    ids = torch.randint(0, 64, (1, 12), generator=g)
    mask = torch.ones(1, 12, dtype=torch.long)
    loss, parts = eagle_loss(head, feats, ids, mask)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in head.fc.parameters())
    metrics = evaluate_head(head, [{"input_ids": ids[0], "features": feats[0],
                                    "loss_mask": mask[0]}])
    assert 0.0 <= metrics["top1"] <= 1.0


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_a_head_trains_on_fp32_master_weights_on_a_bf16_target(kind):
    """Found by the 7B rehearsal: attaching to a bf16 target cast the head to bf16, so AdamW
    dropped every update under half a bf16 step. Now the weights stay fp32, the target's shared
    embedding and lm_head stay bf16, and an update far below bf16's resolution still lands."""
    from eagle_mini.training.commands import TrainHeadCommand, training_head
    target = tiny_target("llama", seed=0, vocab_size=64, dtype="bf16", num_hidden_layers=4)
    head, meta = training_head(TrainHeadCommand(out="unused", kind=kind), target)
    assert meta == {} and {p.dtype for p in head.parameters()} == {torch.float32}
    assert head._shared["embed"].weight.dtype == torch.bfloat16
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    width = 3 * target.hidden_size if kind == "eagle3" else target.hidden_size
    out = head(torch.randn(1, 6, width), ids)
    assert out.dtype == torch.float32 and torch.isfinite(head.draft_logits(out[0]).float()).all()
    weight = next(p for n, p in head.named_parameters() if n.endswith("weight") and p.dim() == 2)
    before = weight.detach().clone()
    weight.grad = torch.ones_like(weight)
    torch.optim.SGD([weight], lr=1e-7).step()   # ~1e-4 of a bf16 step for weights near 0.02
    assert (weight.detach() != before).float().mean() > 0.9


def rehearse(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "eagle_mini", "rehearse", "--config", "tiny",
                           "--threads", "1", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_tiny_rehearsal_runs_every_step_and_a_rerun_runs_none(tmp_path):
    run, out = tmp_path / "run", tmp_path / "rehearsal.json"
    done = rehearse("--dir", str(run), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["random_weights"] and "RANDOM WEIGHTS" in r["what"] and r["config"] == "tiny"
    assert {"cpu", "threads"} <= set(r["machine"]) and r["model"]["shape"]["vocab_size"] == 49152
    kinds = ("eagle1", "eagle3")
    names = {"build", "profile", *(f"{s}_{k}" for k in kinds for s in ("dump", "eval", "export")),
             *(f"train_{k}_{w}" for k in kinds for w in ("stopped", "resumed", "uninterrupted")),
             *(f"generate_{m}_0" for m in ("vanilla", "eagle2", "eagle3"))}
    assert names <= set(r["steps"]) and set(r["ran_now"]) == set(r["steps"])
    for name, s in r["steps"].items():
        assert s["command"].startswith("python -m eagle_mini")
        assert "--feature-dtype" not in s["command"]   # one copy of the target per step
        assert s["seconds"] > 0 and 0.05 < s["peak_rss_gb"] < r["budget_gb"]
        assert s["predicted_gb"] > 0 and s["rss_minus_predicted_gb"] == pytest.approx(
            s["peak_rss_gb"] - s["predicted_gb"])
        if name != "build":
            assert "--model" in s["command"] and "--dtype bf16" in s["command"]
    assert r["fits_budget"]
    assert r["peak_rss_gb"] == max(s["peak_rss_gb"] for s in r["steps"].values())
    assert r["plan"]["eagle3"]["kind"] == "eagle3" and r["features"]["eagle1"]["tokens"] > 100

    # stopped, then resumed by the same command, equals the uninterrupted run
    for kind in kinds:
        res = r["resume"][kind]
        assert res["identical"] and res["losses_resumed"] == res["losses_uninterrupted"]
        assert (res["checkpoint_dtype"], res["saved_dtype"]) == ("float32", "bfloat16")
        assert len(res["losses_resumed"]) == r["sizes"]["steps"] == 2 * r["sizes"]["stop_after"]
        a = load_file(run / f"train_{kind}" / "head" / "model.safetensors")
        b = load_file(run / f"train_{kind}_uninterrupted" / "head" / "model.safetensors")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert "stopped at step 1" in (run / "logs" / f"train_{kind}_stopped.out").read_text()
        assert "resumed from" in (run / "logs" / f"train_{kind}_resumed.out").read_text()
        assert 0.0 <= r["eval"][kind]["test_text"]["top1"] <= 1.0
        assert r["eval"][kind]["mtbench"]["tau"] >= 1.0
    assert r["export"] == {"eagle1": ["config.json", "pytorch_model.bin"],
                           "eagle3": ["config.json", "model.safetensors"]}

    # greedy EAGLE equals vanilla, or the first parting is explained by its logit gap
    for method in ("eagle2", "eagle3"):
        g = r["greedy"][method]
        assert g["prompts"] == 1 and 0.0 <= g["prefix_agreement"] <= 1.0
        assert isinstance(g["exact"], bool)
        if g["exact"]:   # tree logits bit-identical to one-token steps: greedy cannot part
            assert g["identical_prompts"] == g["prompts"], g
        if g["identical_prompts"] < g["prompts"]:
            d = g["first_difference"]
            assert len(d["margins"]) == g["prompts"] - g["identical_prompts"]
            assert all(0.0 <= s <= 1.0 for s in d["share_of_vanilla_gaps_at_most_margin"])
    assert r["cost_curve"]["ns"] == [1, 2, 4, 8, 16, 32, 64]
    assert r["cost_curve"]["relative"][0] == 1.0
    assert len(r["cost_curve"]["head_median_ms"]) == 7

    stamp = (run / "model" / "model.safetensors").stat().st_mtime_ns
    # the same command again, without --out: nothing reruns, and its result goes under runs/
    again = rehearse("--dir", str(run), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    r2 = json.loads((tmp_path / "runs" / "rehearsal_tiny.json").read_text())
    assert not (tmp_path / "data").exists()
    assert r2["ran_now"] == [] and (run / "model" / "model.safetensors").stat().st_mtime_ns == stamp
    assert {k: s["seconds"] for k, s in r2["steps"].items()} == {
        k: s["seconds"] for k, s in r["steps"].items()}
