"""Committed results are written only on purpose.

Every measuring command writes under `runs/` (gitignored) unless `--out` names another place, so a
small trial run never replaces a file in `data/results/` that the README, RESULTS.md and the
notebooks read. Each command runs at a tiny size on a tiny random model in a clone of this
repository (the working tree's changes copied in): `git status` must not move, except for the one
file a command was told to write with `--out data/results/...`. Then `results-md` reads what those
runs wrote in place of the committed files: it renders a valid run, or refuses it in one line.
(`rehearse` takes minutes even at `--config tiny`: `tests/test_rehearsal.py` checks its default.)
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_mini.errors import EagleMiniError
from eagle_mini.tooling import report
from test_gpu_scale import save_tiny

ROOT = Path(__file__).resolve().parent.parent
TINY = ("--threads", "1")
# (argv after the model, what it writes under runs/ by default)
COMMANDS = (
    (["profile-target", "--max-n", "2", "--repeats", "1", "--prefix-len", "8"], "cost_curve_{model}_cpu.json"),
    (["profile-target", "--by-op", "--repeats", "1", "--prefix-len", "8"], None),
    (["check-lossless", "--n", "1", "--max-new-tokens", "4", "--methods", "eagle2"], "check_lossless.json"),
    (["bench", "--n", "1", "--max-new-tokens", "4", "--methods", "vanilla,eagle2", "--curve-rounds", "1"],
     "bench_{model}_cpu_mtbench_T0/bench.json"),
    (["measure-acceptance", "--n-prompts", "1", "--max-new-tokens", "4", "--n-text", "1", "--max-len", "64"],
     "acceptance_{model}.json"),
    (["eval-head", "--n-text", "1", "--n-prompts", "1", "--max-new-tokens", "4", "--max-len", "64"], None),
    (["experiment", "uncertainty", "--size", "tiny"], "uncertainty.json"),
)
ON_PURPOSE = ["check-lossless", "--n", "1", "--max-new-tokens", "4", "--methods", "eagle2",
              "--out", f"{report.RESULTS}/{report.LOSSLESS}"]

# Runs each command in one process (one import of torch), in the clone: the clone's package.
DRIVER = """
import json, sys, traceback
import eagle_mini
from eagle_mini.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as e:
        codes.append(e.code)
    except Exception:
        codes.append(traceback.format_exc())
json.dump({"package": eagle_mini.__file__, "codes": codes}, open(sys.argv[2], "w"))
"""


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """This repository's HEAD cloned, with the working tree's changed, new and deleted files."""
    repo = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(repo)], check=True)
    for name in git(ROOT, "ls-files", "--modified", "--others", "--exclude-standard", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    for name in git(ROOT, "ls-files", "--deleted", "-z").split("\0"):
        if name:
            (repo / name).unlink(missing_ok=True)
    return repo


def test_measuring_commands_write_under_runs_and_only_out_writes_a_committed_result(clone, tmp_path):
    model = save_tiny(tmp_path / "tiny", "llama", layers=2)
    safe = model.replace("/", "_").replace(":", "_")
    before = git(clone, "status", "--porcelain")
    argvs = [[*argv, "--model", model, *TINY] for argv, _ in COMMANDS] + [[*ON_PURPOSE, "--model", model, *TINY]]
    record = tmp_path / "codes.json"
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argvs), str(record)], cwd=clone,
                         capture_output=True, text=True, timeout=600)
    assert record.exists(), run.stderr[-3000:]
    done = json.loads(record.read_text())
    assert Path(done["package"]).is_relative_to(clone)   # the clone's code ran, in the clone
    assert done["codes"] == [0] * len(argvs), run.stderr[-3000:]
    for (argv, name), _ in zip(COMMANDS, argvs):
        if name:
            assert (clone / "runs" / name.format(model=safe)).is_file(), argv[0]
    changed = set(git(clone, "status", "--porcelain").splitlines()) - set(before.splitlines())
    assert changed == {f" M {report.RESULTS}/{report.LOSSLESS}"}   # only the file --out named


def test_results_md_renders_a_valid_run_or_refuses_it_in_one_line(clone):
    """What a tiny run writes, put where a committed result was: `results-md` renders it, or names
    the one field it lacks (a cost curve without `--compare-stock` has no stock kernels' curve)."""
    runs = clone / "runs"
    if not (runs / report.ABLATION).is_file():
        pytest.skip("needs the runs of the test above")
    committed = clone / report.RESULTS
    try:
        shutil.copy(runs / report.ABLATION, committed / report.ABLATION)
        shutil.copy(next(runs.glob("bench_*/bench.json")), committed / report.BENCHES[0] / "bench.json")
        assert "## Verification cost curve" in report.results_markdown(clone)
        shutil.copy(next(runs.glob("cost_curve_*.json")), committed / report.COST)
        with pytest.raises(EagleMiniError, match="has no 'stock'") as refused:
            report.results_markdown(clone)
        assert "\n" not in str(refused.value) and report.COST in str(refused.value)
    finally:
        git(clone, "checkout", "--", report.RESULTS)
