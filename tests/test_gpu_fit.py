"""The card classes' arithmetic and checks (`eagle_mini/course/gpu_fit.py`, issue 49 item 1), on a
CPU: each scale's needs against the formulas written out from the published configs, the dtype a
card without bf16 units gets (CUDA mocked), the one-line preflight errors, `gpu_run.sh`'s skip
reasons, and the README's fit table being what the code computes."""
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from eagle_mini import EagleMiniError
from eagle_mini.course import gpu_fit, gpu_scale, gpu_target
from eagle_mini.course.gpu_fit import GB, SCALES

ROOT = Path(__file__).resolve().parent.parent


def fake_cuda(monkeypatch, bf16_units: bool, name="Tesla T4", total=16 * 10**9, free=14 * 10**9):
    """A CUDA device as torch would report it: a T4 (no bf16 units, but emulation says yes) or
    an Ampere card."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: bf16_units or including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))


def test_the_needs_are_the_formulas_from_the_config():
    """Vicuna-7B: 6,738,415,616 parameters (LLaMA-7B's), 2 bytes each in bf16; its KV cache holds
    K and V for 32 layers x 32 heads x 128 dims per token; a tree's logits are fp32. Qwen2.5-1.5B
    (tied embeddings, 2 KV heads) in fp16."""
    v = gpu_fit.needs(gpu_fit.config_of("vicuna-7b"), "bf16", context=2048, nodes=60)
    assert v["params"] == 6_738_415_616 and v["weights"] == 2 * v["params"]
    assert v["kv cache"] == 2 * 32 * 32 * 128 * 2 * 2048
    assert v["tree"] == 60 * (4 * 32000 + (4 * 4096 + 2 * 11008) * 2)
    assert v["eagle3 disk per token"] == 4 * v["eagle1 disk per token"] - 3 * 9
    one_layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 4096   # attention, MLP, post-attention norm
    assert v["eagle1 head"] == 2 * (2 * 4096 * 4096 + 4096 + one_layer)   # fc with bias + a layer
    # decoding, the lean step holds q/k/v as one copy and gate/up as another
    assert v["eagle1 decoding copies"] == 2 * (3 * 4096 * 4096 + 2 * 4096 * 11008)
    q = gpu_fit.needs(gpu_fit.config_of("qwen2.5-1.5b-instruct"), "fp16", context=1024)
    assert q["params"] == 1_543_714_304 and q["weights"] == 2 * q["params"]
    assert q["kv cache"] == 2 * 28 * 2 * 128 * 2 * 1024


@pytest.mark.parametrize("name", list(SCALES))
def test_each_scale_fits_its_cards(name):
    """Bench and training within the memory its cards report, the host's share within the RAM it
    comes with (the weights stream to the GPU: one shard at a time), the dump as its heads need."""
    s = SCALES[name]
    p = gpu_fit.plan(s)
    assert max(p["gpu bench"], p["gpu training"]) <= s.gpu_gb * GB
    assert p["gpu training"] > p["weights"] and p["gpu bench"] > p["weights"]
    assert p["host"] == gpu_fit.HOST_BASE_GB * GB + min(gpu_fit.SHARD_GB * GB, p["weights"])
    assert p["host"] < p["weights"] or p["weights"] < gpu_fit.SHARD_GB * GB
    assert s.host_gb is None or p["host"] <= s.host_gb * GB
    values = 4 if "eagle3" in s.kinds else 1
    hidden = gpu_fit.config_of(s.target).hidden_size
    assert p["disk per conversation"] == gpu_fit.FILL * s.max_len * (values * hidden * 2 + 9)
    assert p["disk"] == s.conversations * p["disk per conversation"]


def test_a_7b_target_does_not_fit_the_t4_and_its_scale_takes_a_small_one():
    t4 = SCALES["t4"]
    assert gpu_fit.plan(replace(t4, target="vicuna-7b"))["gpu bench"] > t4.gpu_gb * GB
    assert gpu_fit.plan(t4)["dtype"] == "fp16" and gpu_fit.plan(SCALES["a100"])["dtype"] == "bf16"


def test_a_card_without_bf16_units_runs_fp16(monkeypatch):
    """A T4 emulates bf16 (`is_bf16_supported()` says True) but has no bf16 units: fp16. An
    Ampere card: bf16. A CPU: fp32. The T4's memory picks the T4 scale, its target and dtype
    reach `load_gpu_target`."""
    assert gpu_fit.device_dtype("cpu") == "fp32"
    fake_cuda(monkeypatch, bf16_units=True, name="NVIDIA A100")
    assert gpu_fit.device_dtype("cuda") == "bf16"
    fake_cuda(monkeypatch, bf16_units=False)
    assert torch.cuda.is_bf16_supported() and gpu_fit.device_dtype("cuda") == "fp16"
    monkeypatch.delenv("EAGLE_MINI_GPU_SCALE", raising=False)
    monkeypatch.delenv("EAGLE_MINI_TARGET", raising=False)
    assert gpu_fit.card_scale(16 * 10**9).name == "t4" and gpu_fit.card_scale(24 * 10**9).name == "24gb"
    monkeypatch.setenv("EAGLE_MINI_GPU_SCALE", "t4")
    assert gpu_target() == "qwen2.5-1.5b-instruct"
    loaded = {}
    monkeypatch.setattr(gpu_scale, "parameters", lambda name: 1_543_714_304)
    monkeypatch.setattr(gpu_scale, "check_fits", lambda name, params, dtype: loaded.update(checked=dtype))
    monkeypatch.setattr(gpu_scale, "load_target", lambda name, dtype, device: loaded.update(dtype=dtype))
    gpu_scale.load_gpu_target(gpu_target())
    assert loaded == {"checked": "fp16", "dtype": "fp16"}
    monkeypatch.setenv("EAGLE_MINI_GPU_SCALE", "h200")
    with pytest.raises(EagleMiniError, match="t4, 24gb, a100"):
        gpu_fit.card_scale()


@pytest.mark.parametrize("short, says", [
    ("GPU memory", "not enough GPU memory: needs 8.0 GB, 6.0 GB free (short by 2.0 GB)"),
    ("host RAM", "not enough host RAM: needs 8.0 GB, 6.0 GB free (short by 2.0 GB)"),
    ("disk", "not enough disk: needs 8.0 GB, 6.0 GB free (short by 2.0 GB)"),
])
def test_a_preflight_names_what_is_short_and_by_how_much_in_one_line(short, says):
    need = {"GPU memory": 8 * GB, "host RAM": 8 * GB, "disk": 8 * GB}
    free = {k: (6 if k == short else 9) * GB for k in need}
    with pytest.raises(EagleMiniError) as e:
        gpu_fit.preflight("the dump", need, free)
    assert str(e.value).startswith(f"the dump: {says}; ") and "\n" not in str(e.value)
    gpu_fit.preflight("the dump", need, {k: 9 * GB for k in need})


def test_a_scales_preflight_checks_its_plan():
    s = SCALES["t4"]
    p = gpu_fit.plan(s)
    roomy = {"GPU memory": 15 * GB, "host RAM": 12 * GB, "disk": 100 * GB}
    gpu_fit.preflight_scale(s, "training", free=roomy)
    with pytest.raises(EagleMiniError, match=r"^qwen2.5-1.5b-instruct training at the t4 scale: "
                                             r"not enough disk: needs 1.9 GB, 1.0 GB free"):
        gpu_fit.preflight_scale(s, "training", free={**roomy, "disk": 1 * GB})
    gpu_fit.preflight_scale(s, "bench", free={**roomy, "disk": 0})     # a bench writes no dump
    assert p["disk"] > 1 * GB


def test_gpu_run_skips_a_step_with_one_line_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_fit.skip_reason("bench_135m") == "no CUDA: torch sees no GPU"
    fake_cuda(monkeypatch, bf16_units=False)
    assert gpu_fit.skip_reason("bench_135m") == ""
    assert gpu_fit.skip_reason("cost_curve_7b") == "no bf16 units on Tesla T4"
    fake_cuda(monkeypatch, bf16_units=True, name="NVIDIA L4")
    why = gpu_fit.skip_reason("train_throughput_7b", free_gpu=16 * 10**9)
    assert why.startswith("not enough GPU memory: vicuna-7b needs") and why.endswith("16.0 GB free")
    assert gpu_fit.skip_reason("cost_curve_7b", free_gpu=80 * 10**9) == ""


def test_the_readme_fit_table_is_what_the_code_computes():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- generated:gpu_fit -->\n")[1].split("<!-- /generated:gpu_fit -->")[0]
    assert block == gpu_fit.fit_markdown() + "\n"
