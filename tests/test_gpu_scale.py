"""The `gpu` scale's code paths (`eagle_mini/course/gpu_scale.py`), run on the CPU with tiny random
targets of the families a learner brings, saved to a directory as a hub snapshot would be: a
Llama-3.1-style one (`rope_scaling` llama3, theta 500000) and a Qwen2 one, with SmolLM2's tokenizer.
Notebook 03's gpu cells call `train_heads` and `head_taus`, notebook 06b's `gpu_bench`."""
import json
from pathlib import Path

import httpx
import pytest
import torch
from huggingface_hub import errors as hub_errors
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from eagle_mini import EagleMiniError, load_target
from eagle_mini.course import gpu_scale, gpu_target, pick
from eagle_mini.heads import head_kind, load_head
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.heads.formats import export_eagle3, export_official
from eagle_mini.models import resolve, tiny_config

ROOT = Path(__file__).resolve().parent.parent

LLAMA31_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
FAMILIES = {"llama3.1": ("llama", {"rope_parameters": dict(LLAMA31_ROPE)}),
            "qwen2": ("qwen2", {})}


def save_tiny(out, family, seed=0, layers=4, **extra):
    """A tiny random model of `family` with SmolLM2's tokenizer (and its chat template), saved."""
    donor = resolve("smollm2-135m")
    torch.manual_seed(seed)
    config = tiny_config(family, vocab_size=49152, hidden_size=64, num_hidden_layers=layers,
                         max_position_embeddings=1024, **extra)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.generation_config = GenerationConfig.from_pretrained(donor)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(donor).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module", params=list(FAMILIES))
def target_dir(request, tmp_path_factory):
    family, extra = FAMILIES[request.param]
    return save_tiny(tmp_path_factory.mktemp(request.param) / "target", family, **extra)


def test_the_gpu_scale_picks_its_own_values_and_reads_its_target(monkeypatch):
    monkeypatch.setenv("EAGLE_MINI_SCALE", "gpu")
    assert pick(ci=1, classroom=2, gpu=3) == 3 and pick(ci=1, classroom=2) == 2
    monkeypatch.setenv("EAGLE_MINI_SCALE", "ci")
    assert pick(ci=1, classroom=2, gpu=3) == 1
    monkeypatch.delenv("EAGLE_MINI_TARGET", raising=False)
    assert gpu_target() == "vicuna-7b"
    monkeypatch.setenv("EAGLE_MINI_TARGET", "/content/Llama-3.1-8B-Instruct")
    assert gpu_target() == "/content/Llama-3.1-8B-Instruct"
    monkeypatch.setenv("EAGLE_MINI_SCALE", "huge")
    with pytest.raises(ValueError, match="ci.*classroom.*gpu"):
        pick(ci=1, classroom=2)


def test_what_a_learner_needs_to_know_about_each_target():
    vicuna = gpu_scale.target_facts("vicuna-7b")
    assert "Vicuna v1.1" in vicuna["chat template"] and vicuna["access"].startswith("open")
    assert vicuna["authors' EAGLE-1 head"] == "yuhuili/EAGLE-Vicuna-7B-v1.3"
    llama = gpu_scale.target_facts("llama3.1-8b-instruct")
    assert "HF_TOKEN" in llama["access"] and llama["authors' EAGLE-3 head"].startswith("yuhuili/EAGLE3")
    fits = {r["GPU"]: r["fits"] for r in gpu_scale.fit_table(8_030_000_000)}
    assert not fits["T4 (Colab's free GPU)"] and fits["L4"] and fits["A10 / A10G"] and fits["A100 40GB"]


def test_a_target_that_cannot_fit_stops_in_one_line_before_loading(target_dir):
    params = gpu_scale.parameters(target_dir)
    assert params == sum(p.numel() for p in load_target(target_dir).model.parameters())
    with pytest.raises(EagleMiniError) as e:
        gpu_scale.check_fits("an 8B model", 8_030_000_000, "bf16", device_bytes=16 * 10**9)
    assert "\n" not in str(e.value) and "use a GPU with more memory (L4" in str(e.value)
    gpu_scale.check_fits("an 8B model", 8_030_000_000, "bf16", device_bytes=24 * 10**9)


def refused(status: int) -> httpx.Response:
    url = "https://huggingface.co/api/models/yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    return httpx.Response(status, request=httpx.Request("GET", url))


@pytest.mark.parametrize("error, says", [
    (lambda: hub_errors.GatedRepoError("401 Client Error. Cannot access gated repo",
                                       response=refused(401)), "gated model"),
    (lambda: hub_errors.LocalEntryNotFoundError("Cannot find the requested files"), "cannot reach"),
])
def test_a_head_from_the_hub_fails_in_one_line(monkeypatch, error, says):
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise error()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(EagleMiniError) as e:
        gpu_scale.fetch("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_notebook_03_at_gpu_scale_dumps_trains_both_heads_resumably_and_measures_tau(target_dir, tmp_path):
    """A stop after one step and a rerun finish each head; the rerun's dump recomputes nothing."""
    target = load_target(target_dir)
    kw = dict(conversations=4, max_len=128, steps=2, batch_tokens=256, eval_conversations=2,
              progress=False, log=lambda *_: None)
    first = gpu_scale.train_heads(target, tmp_path, stop_after=1, **kw)
    assert [r["state"]["step"] for r in first.values()] == [1, 1]
    assert not any(r["done"] for r in first.values())
    manifest = json.loads((tmp_path / "features" / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["layers"]) == 3
    second = gpu_scale.train_heads(target, tmp_path, **kw)
    assert all(r["done"] and r["state"]["step"] == 2 for r in second.values())
    assert json.loads((tmp_path / "features" / "manifest.json").read_text())["shards"] == manifest["shards"]
    heads = {kind: load_head(r["dir"], target) for kind, r in second.items()}
    assert {k: head_kind(h) for k, h in heads.items()} == {"eagle1": "eagle1", "eagle3": "eagle3"}
    taus = gpu_scale.head_taus(target, heads, n_prompts=2, max_new_tokens=8, progress=False)
    assert all(t["prompts"] == 2 and t["tau"] >= 1 for t in taus.values())


def test_an_authors_eagle3_draft_published_as_a_bin_loads(tmp_path):
    """The authors publish their EAGLE-3 drafts as pytorch_model.bin: the same weights load."""
    target = load_target(save_tiny(tmp_path / "t", "llama", rope_parameters=dict(LLAMA31_ROPE)))
    head = new_eagle3_head(target, seed=3, draft_vocab=list(range(0, 49152, 7)))
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    torch.save(load_file(out / "model.safetensors"), out / "pytorch_model.bin")
    (out / "model.safetensors").unlink()
    back = load_head(out, target)
    assert head_kind(back) == "eagle3"
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), head.state_dict().values()))


def test_notebook_06_at_gpu_scale_benches_every_row_in_one_run(target_dir, tmp_path):
    """The authors' heads (their formats, from a directory as after a download), assisted
    generation with a small draft model of the same tokenizer, and the learner's heads: every row
    in one interleaved run, every greedy text identical to vanilla's in fp32."""
    target = load_target(target_dir)
    family = target.config.model_type
    authors = {"eagle1": export_official(new_head(target, seed=1), target, tmp_path / "a1"),
               "eagle3": export_eagle3(new_eagle3_head(target, seed=2), target, tmp_path / "a3")}
    released = gpu_scale.released_heads(target, heads={k: str(v) for k, v in authors.items()})
    own = {"eagle1": new_head(target, seed=4)}
    draft = load_target(save_tiny(tmp_path / "draft", family, seed=9, layers=1))
    result = gpu_scale.gpu_bench(target, released, own=own, assistant=draft, assistant_name="tiny draft",
                                 prompts=["Say hi.", "Count to three."], max_new_tokens=8,
                                 progress=False, curve_repeats=1, curve_rounds=1)
    assert list(result["methods"]) == ["vanilla", "hf-generate", "hf-compiled", "hf-prompt-lookup",
                                       "eagle", "eagle2", "eagle3", "hf-assisted",
                                       "eagle2 (your head)"]
    assert result["variants"]["hf-assisted"]["note"].endswith("tiny draft")
    assert set(gpu_scale.greedy_identity(result).values()) == {"identical"}
    assert result["methods"]["hf-assisted"]["tokens_per_forward"] >= 1


def test_greedy_identity_names_near_ties_and_real_differences():
    run = {"n": 4, "dtype": "bfloat16", "exact": None, "methods": {
        "vanilla": {"equal_to_vanilla": True},
        "eagle2": {"equal_to_vanilla": False, "identical_prompts": 3,
                   "first_difference": {"share_of_vanilla_gaps_at_most_margin": [0.01]}},
        "eagle": {"equal_to_vanilla": False, "identical_prompts": 1,
                  "first_difference": {"share_of_vanilla_gaps_at_most_margin": [0.01, 0.4]}}}}
    assert gpu_scale.greedy_identity(run) == {
        "vanilla": "identical", "eagle2": "identical up to bfloat16 ties (3/4 prompts identical)",
        "eagle": "DIFFERS (1/4 prompts identical)"}


def test_committed_gpu_benches_are_read_with_their_folder(tmp_path):
    assert gpu_scale.committed_benches(tmp_path / "gpu") == []
    (tmp_path / "gpu" / "bench_x").mkdir(parents=True)
    (tmp_path / "gpu" / "bench_x" / "bench.json").write_text(json.dumps({"n": 2}))
    assert gpu_scale.committed_benches(tmp_path / "gpu") == [{"n": 2, "source": "bench_x"}]


def notebook_cells(name, ids):
    """The sources of a notebook's cells, by cell id, in order."""
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    by_id = {c.get("id"): "".join(c["source"]) for c in cells}
    return [by_id[i] for i in ids]


def test_the_notebooks_gpu_cells_run_at_gpu_scale_on_a_tiny_target(target_dir, tmp_path, monkeypatch):
    """Notebook 03's gpu-scale cells, with the run made small after its parameters cell, train both
    heads over two runs of the cell (the first stops half-way); then notebook 06b's appendix F
    benches them and saves the run where the notebook reads GPU benches."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import Markdown
    from eagle_mini.course import scale
    from eagle_mini.measure.bench import markdown_table
    monkeypatch.setenv("EAGLE_MINI_SCALE", "gpu")
    monkeypatch.setenv("EAGLE_MINI_TARGET", target_dir)
    shown = []
    ns = {"ROOT": tmp_path, "RESULTS": tmp_path / "data" / "results", "pd": pd, "torch": torch,
          "Path": Path, "plt": plt, "Markdown": Markdown, "display": shown.append, "scale": scale,
          "markdown_table": markdown_table, "load_target": load_target}
    params, run = notebook_cells("03_training_a_draft_head.ipynb", ["gpu-scale-params", "gpu-scale-run"])
    exec(params, ns)
    ns.update(GPU_CONVERSATIONS=4, GPU_MAX_LEN=128, GPU_STEPS=2, GPU_STEPS_PER_RUN=1, GPU_BATCH_TOKENS=256,
              GPU_TAU_PROMPTS=2, GPU_TAU_TOKENS=8, GPU_EAGLE3_DRAFT_VOCAB=0)
    exec(run, ns)
    assert not ns["finished"]
    exec(run, ns)
    assert set(ns["finished"]) == {"eagle1", "eagle3"}
    assert all(t["tau"] >= 1 for t in ns["taus"].values())
    params, run = notebook_cells("06b_speedups_appendix.ipynb", ["gpu-bench-params", "gpu-bench-run"])
    exec(params, ns)
    ns.update(GPU_PROMPTS=2, GPU_TOKENS=8)
    exec(run, ns)
    result = ns["gpu_benches"][0]
    assert list(result["methods"]) == ["vanilla", "hf-generate", "hf-compiled", "hf-prompt-lookup",
                                       "eagle2 (your head)", "eagle3 (your head)"]
    assert len(shown) == 1 and "eagle3 (your head)" in shown[0].data
    assert [b["source"] for b in gpu_scale.committed_benches(ns["RESULTS"] / "gpu")] == [
        "bench_target_cpu_fp32_mtbench_T0"]
