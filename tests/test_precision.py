"""Precision chosen by measurement: `auto` follows a timed matmul, an explicit bf16 on a CPU where
bf16 is slower is warned about, and nothing is probed when nobody asked for bf16."""
import pytest

from eagle_mini.runtime import precision
from eagle_mini.training.commands import resolve_precision


def args(mixed="no", feat=None):
    return mixed, feat


@pytest.fixture
def probe(monkeypatch):
    calls = []

    def set_speedup(s):
        def fake(**kw):
            calls.append(s)
            return {"speedup": s}
        monkeypatch.setattr(precision, "matmul_speedup", fake)
        return calls
    return set_speedup


def test_auto_takes_bf16_only_where_it_is_faster(probe):
    probe(2.5)
    assert resolve_precision(*args("auto", "auto"), "cpu", log=lambda s: None) == ("bf16", "bf16")
    probe(0.02)
    lines = []
    assert resolve_precision(*args("auto", "auto"), "cpu", log=lines.append) == ("no", "fp32")
    assert "50.0x slower than fp32" in lines[0] and "using fp32" in lines[0]


def test_explicit_bf16_is_kept_but_a_slow_cpu_is_said(probe):
    probe(0.02)
    lines = []
    assert resolve_precision(*args("bf16", "bf16"), "cpu", log=lines.append) == ("bf16", "bf16")
    assert lines and lines[0].startswith("warning: bf16 matmuls run at 50.0x slower")


def test_nothing_is_timed_unless_bf16_or_auto_is_asked_for(probe):
    calls = probe(2.5)
    assert resolve_precision(*args("no", "fp32"), "cpu") == ("no", "fp32")
    assert resolve_precision(*args("auto", "auto"), "cuda") == ("bf16", "bf16")
    assert calls == []


def test_the_real_probe_times_both_dtypes():
    p = precision.matmul_speedup(rows=16, inner=32, cols=32, repeats=1)
    assert p["fp32_ms"] > 0 and p["bf16_ms"] > 0 and p["speedup"] == p["fp32_ms"] / p["bf16_ms"]


def test_a_reduced_matmul_precision_is_offered_only_with_its_own_lossless_check(tmp_path):
    """--matmul-precision medium/high: recorded with every measurement, and its line reports the
    mode's check-lossless file, or says loudly that there is none."""
    import json

    import torch

    from eagle_mini.errors import EagleMiniError
    from eagle_mini.results import machine_info
    try:
        line = precision.set_matmul_precision("medium", root=tmp_path)
        assert "NOT CHECKED" in line and "--matmul-precision medium" in line
        assert machine_info()["fp32_matmul_precision"] == "medium"
        rows = [{"prompt": i, "vanilla_tokens": 8, "eagle2": {"identical": i != 1, "tau": 2.0}}
                for i in range(3)]
        committed = tmp_path / "data" / "results" / precision.lossless_file("medium")
        committed.parent.mkdir(parents=True)
        committed.write_text(json.dumps({"rows": rows, "machine": {"cpu": "Some CPU"}}))
        line = precision.set_matmul_precision("medium", root=tmp_path)
        assert "2 of 3 prompts identical" in line and "Some CPU" in line
        own = tmp_path / "runs" / precision.lossless_file("medium")   # check-lossless's default
        own.parent.mkdir(parents=True)
        own.write_text(json.dumps({"rows": rows[:1], "machine": {"cpu": "This CPU"}}))
        line = precision.set_matmul_precision("medium", root=tmp_path)   # this machine's own first
        assert "1 of 1 prompts identical" in line and "This CPU" in line and "runs/" in line
        with pytest.raises(EagleMiniError, match="unknown matmul precision"):
            precision.set_matmul_precision("low")
    finally:
        torch.set_float32_matmul_precision("highest")
    assert precision.set_matmul_precision("highest").endswith("exact")
    assert "fp32_matmul_precision" not in machine_info()
    assert precision.lossless_file("highest") == "check_lossless.json"
