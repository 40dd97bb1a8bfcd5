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
    assert {"prompt_ids", "output_ids", "text", "stats"} <= set(obj)
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
    assert eag["stats"]["target_forwards"] >= 1 and eag["stats"]["tau"] >= 1.0


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


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert {p for p in pip if "==" in p} == pins
