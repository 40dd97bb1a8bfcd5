"""The command line: the --json contract, and one-line errors with exit code 2."""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, "-m", "eagle_mini", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


def test_generate_json_contract():
    out = run("generate", "--prompt", "What is 2+2?", "--max-new-tokens", "8", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert {"prompt_ids", "output_ids", "text", "stats", "exact"} <= set(obj)
    assert obj["exact"] is False   # fp32 (the default dtype): exact mode is off under --exact auto
    assert obj["stats"]["tau"] == 1.0 and obj["stats"]["new_tokens"] == len(obj["output_ids"])
    assert obj["stats"]["target_forwards"] == len(obj["output_ids"]) and obj["stats"]["seconds"] > 0


def test_generate_eagle_json_matches_vanilla():
    van = json.loads(run("generate", "--prompt", "Name a color.", "--max-new-tokens", "12",
                         "--json").stdout)
    out = run("generate", "--prompt", "Name a color.", "--max-new-tokens", "12", "--json",
              "--method", "eagle", "--tree", "chain:2")
    assert out.returncode == 0, out.stderr
    eag = json.loads(out.stdout)
    assert eag["output_ids"] == van["output_ids"]
    s = eag["stats"]
    # the papers' tau: tokens per draft-verify cycle, bonus included, the prefill's token not counted
    cycles = s["cycle_lengths"]
    assert len(cycles) == s["target_forwards"] - 1 and sum(cycles) == s["new_tokens"] - 1
    assert s["tau"] == sum(cycles) / len(cycles) >= 1.0
    assert s["tokens_per_forward"] == s["new_tokens"] / s["target_forwards"]


def one_line_error(out, pattern):
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(pattern, lines[0]), lines[0]


def test_bad_input_is_one_line_exit_2():
    one_line_error(run("generate", "--model", "nope", "--prompt", "x"), "known names: smollm2-135m")
    one_line_error(run("generate", "--prompt", "x", "--max-new-tokens", "0"), "positive integer")
    one_line_error(run("generate", "--prompt", "x " * 9000), "context length")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle", "--tree", "bushy"),
                   "tree spec")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle", "--head", "/nonexistent"),
                   "draft head")


def test_options_the_method_ignores_are_refused_not_dropped():
    one_line_error(run("generate", "--prompt", "x", "--head", "data/heads/smollm2-135m"),
                   r"--head has no effect with --method vanilla")
    one_line_error(run("generate", "--prompt", "x", "--tree", "chain:2"),
                   r"--tree has no effect with --method vanilla")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle2", "--seed", "3"),
                   r"--seed has no effect when decoding greedily")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle2", "--top-p", "0.9",
                       "--top-k", "5"), r"--top-p, --top-k have no effect")


def test_degenerate_trees_are_refused():
    for spec in ("dynamic:0,0,0", "dynamic:1,5,4", "dynamic:16,0,4", "dynamic:16,5,0"):
        one_line_error(run("generate", "--prompt", "x", "--method", "eagle2", "--tree", spec),
                       r"DynamicTree \w+ must be an integer >= \d")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle", "--tree", "[]"),
                   "no draft node")


def test_profile_target_out_directory_is_refused(tmp_path):
    one_line_error(run("profile-target", "--out", str(tmp_path)), "is a directory")


def test_damaged_head_file_is_named(tmp_path):
    shipped = ROOT / "data" / "heads" / "smollm2-135m"
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text((shipped / "config.json").read_text())
    (head / "model.safetensors").write_bytes((shipped / "model.safetensors").read_bytes()[:5000])
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle2", "--head", str(head)),
                   r"model\.safetensors is damaged")
    (head / "config.json").write_text("{not json")
    one_line_error(run("generate", "--prompt", "x", "--method", "eagle2", "--head", str(head)),
                   r"config\.json is damaged")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert {p for p in pip if "==" in p} == pins


def test_demo_runs_in_the_fastest_exact_precision_and_reproduces_vanilla():
    """`make demo`'s command: it says which dtype it picked and why, and its three EAGLE lines
    (EAGLE-2, eagle2+lookup, auto) report vanilla's text (bf16 only in exact mode, else fp32)."""
    out = run("demo", "--max-new-tokens", "12")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^dtype:  bf16 matmuls run at .* using (bf16|fp32)$", out.stdout, re.M)
    if "(bfloat16, cpu)" in out.stdout:
        assert "exact verification on" in out.stderr
    else:
        assert "(float32, cpu)" in out.stdout
    lines = [line for line in out.stdout.splitlines() if "tokens per draft-verify cycle" in line]
    assert len(lines) == 3 and all("identical text: True" in line for line in lines)
