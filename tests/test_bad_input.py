"""Every command, given bad input, answers in one line on stderr and exit code 2, before it loads
a model; none prints a traceback.

One row per bad input, for every command the command line registers (a test checks that no
command is left without a row). The CLI runs in this process; loading a model's weights is
replaced by a failure, so a row that gets that far fails: an input must be checked before the
slow part, not after it.
"""
import re

import pytest
import torch

import eagle_mini.models as models
from eagle_mini.cli import build_parser, main
from eagle_mini.methods import TREE_NAMES

NO_CUDA = r"built without CUDA|torch sees no CUDA device|'cuda:99' does not exist"
TREE_FORMS = (rf"a method name \({re.escape(', '.join(TREE_NAMES))}\).*'chain:K' \(K >= 1.*"
              "dynamic:TOTAL,DEPTH,TOPK")
HEAD = "data/heads/smollm2-135m"

# (command line, what the one line must say); ids name the command and the input
ROWS = {
    "generate --device cuda:99": (["generate", "--prompt", "x", "--device", "cuda:99"], NO_CUDA),
    "generate --device tpu": (["generate", "--prompt", "x", "--device", "tpu"],
                              r"unknown device 'tpu'.*this machine has cpu"),
    "generate --device garbage": (["generate", "--prompt", "x", "--device", "garbage"],
                                  "unknown device 'garbage'"),
    "generate --model nope": (["generate", "--prompt", "x", "--model", "nope"], "known names"),
    "generate --method nope": (["generate", "--prompt", "x", "--method", "nope"], "invalid choice"),
    "generate --max-new-tokens 0": (["generate", "--prompt", "x", "--max-new-tokens", "0"],
                                    "positive integer"),
    "generate --threads 0": (["generate", "--prompt", "x", "--threads", "0"], "positive integer"),
    "generate --tree bushy": (["generate", "--prompt", "x", "--method", "eagle", "--tree", "bushy"],
                              TREE_FORMS),
    "generate --tree chain:0": (["generate", "--prompt", "x", "--method", "eagle", "--tree",
                                 "chain:0"], "no draft node"),
    "generate --tree chain:-1": (["generate", "--prompt", "x", "--method", "eagle", "--tree",
                                  "chain:-1"], TREE_FORMS),
    "generate --tree dynamic:16,0,4": (["generate", "--prompt", "x", "--method", "eagle2", "--tree",
                                        "dynamic:16,0,4"], "depth must be an integer >= 1"),
    "generate --tree auto": (["generate", "--prompt", "x", "--method", "eagle2", "--tree", "auto"],
                             "use the method 'auto'"),
    "generate --tree vanilla": (["generate", "--prompt", "x", "--method", "eagle2", "--tree",
                                 "vanilla"], "drafts no tree"),
    "generate --head missing": (["generate", "--prompt", "x", "--method", "eagle2", "--head",
                                 "/nonexistent/head"], "/nonexistent/head does not exist"),
    "generate --head with vanilla": (["generate", "--prompt", "x", "--head", HEAD],
                                     "--head has no effect with --method vanilla"),
    "generate --kernels mkl --dtype bf16": (["generate", "--prompt", "x", "--kernels", "mkl",
                                             "--dtype", "bf16"], "--kernels mkl cannot run bf16"),
    "generate --prompt missing": (["generate"], "required: --prompt"),
    "demo --device tpu": (["demo", "--device", "tpu"], "unknown device"),
    "demo --tree chain:0": (["demo", "--tree", "chain:0"], "no draft node"),
    "bench --device cuda:99": (["bench", "--device", "cuda:99"], NO_CUDA),
    "bench --methods nope": (["bench", "--methods", "vanilla,nope"], "unknown method 'nope'"),
    "bench --dataset nope": (["bench", "--dataset", "nope"], "invalid choice"),
    "bench --n 0": (["bench", "--n", "0"], "positive integer"),
    "bench --draft-vocab -1": (["bench", "--draft-vocab", "-1"], "integer >= 0"),
    "generate --draft-vocab x": (["generate", "--prompt", "x", "--draft-vocab", "x"],
                                 "integer >= 0"),
    "profile-target --max-n 0": (["profile-target", "--max-n", "0"], "positive integer"),
    "profile-target --out a folder": (["profile-target", "--out", "data"], "is a directory"),
    "profile-target --device mps": (["profile-target", "--device", "mps"], "mps"),
    "prepare --model nope": (["prepare", "--model", "nope"], "known names"),
    "check-lossless --methods nope": (["check-lossless", "--methods", "eagle,nope"],
                                      "unknown method 'nope'"),
    "check-lossless --tree bushy": (["check-lossless", "--tree", "bushy"], TREE_FORMS),
    "dump-features --split nope": (["dump-features", "--split", "nope", "--out", "x"],
                                   "invalid choice"),
    "dump-features --device tpu": (["dump-features", "--device", "tpu", "--out", "x"],
                                   "unknown device"),
    "regenerate --temperature -1": (["regenerate", "--temperature", "-1", "--out", "x"],
                                    "--temperature must be >= 0"),
    "regenerate --device cuda:99": (["regenerate", "--device", "cuda:99", "--out", "x"], NO_CUDA),
    "train-head --lr -1": (["train-head", "--stream", "--out", "x", "--lr", "-1"],
                           "--lr must be > 0, got -1"),
    "train-head --features missing": (["train-head", "--features", "/nonexistent/f", "--out", "x"],
                                      "--features /nonexistent/f does not exist"),
    "train-head --norm-init-scale 2": (["train-head", "--stream", "--out", "x",
                                        "--norm-init-scale", "2"], r"in \[0, 1\]"),
    "train-head --mix-sharegpt alone": (["train-head", "--stream", "--out", "x", "--mix-sharegpt",
                                         "0.5"], "goes with --regenerated"),
    "train-head no source": (["train-head", "--out", "x"], "one of the arguments"),
    "train-head --device cuda:99": (["train-head", "--stream", "--out", "x", "--device", "cuda:99"],
                                    NO_CUDA),
    "eval-head --also nope": (["eval-head", "--also", "alpaca"], "choose from humaneval"),
    "eval-head --tree chain:0": (["eval-head", "--tree", "chain:0"], "no draft node"),
    "eval-head --head missing": (["eval-head", "--head", "/nonexistent/head"], "does not exist"),
    "eval-head --device garbage": (["eval-head", "--device", "garbage"], "unknown device"),
    "compare-heads missing files": (["compare-heads", "/nonexistent/a.json", "/nonexistent/b.json"],
                                    "not a readable eval-head JSON"),
    "tau-curve missing file": (["tau-curve", "/nonexistent/a.json"], "not a readable eval-head JSON"),
    "export --out an existing file": (["export", "--out", "README.md"], "README.md already exists"),
    "export --format eagle3 of an EAGLE-1 head": (["export", "--format", "eagle3", "--head", HEAD,
                                                   "--out", "/nonexistent/x"],
                                                  "holds an eagle1 head, which has no eagle3"),
    "export --format nope": (["export", "--format", "nope", "--out", "x"], "invalid choice"),
    "export --head missing": (["export", "--head", "/nonexistent/head", "--out", "x"],
                              "does not exist"),
    "export --device tpu": (["export", "--device", "tpu", "--out", "x"], "unknown device"),
    "experiment nope": (["experiment", "nope"], "invalid choice"),
    "experiment --tree bushy": (["experiment", "uncertainty", "--tree", "bushy"], TREE_FORMS),
    "experiment --size nope": (["experiment", "uncertainty", "--size", "nope"], "invalid choice"),
    "measure-acceptance --n-prompts 0": (["measure-acceptance", "--n-prompts", "0"],
                                         "positive integer"),
    "measure-acceptance --head missing": (["measure-acceptance", "--head", "/nonexistent/h"],
                                          "does not exist"),
    "paper-vs-ours --results missing": (["paper-vs-ours", "--results", "/nonexistent"],
                                        "is missing"),
    "results-md --root missing": (["results-md", "--root", "/nonexistent", "--check"], "is missing"),
    "rehearse --config nope": (["rehearse", "--config", "nope"], "invalid choice"),
    "rehearse-step no step": (["rehearse-step"], "required: step"),
    "assignments no action": (["assignments"], "required: action"),
    "assignments grade nothing": (["assignments", "grade"], "say which notebook to grade"),
    "assignments grade missing": (["assignments", "grade", "/nonexistent/n.ipynb"], "not a file"),
    "student-repo no folder": (["student-repo"], "say where"),
    "student-repo a full folder": (["student-repo", "data"], "is not an empty folder"),
    "notebooks missing": (["notebooks", "/nonexistent/n.ipynb"], "not a notebook file"),
    "notebooks --scale nope": (["notebooks", "--scale", "nope"], "invalid choice"),
    "test-browser missing": (["test-browser", "/nonexistent/n.ipynb"], "not a notebook file"),
    "no command": ([], "required: command"),
    "unknown command": (["nope"], "invalid choice"),
}


@pytest.fixture
def no_model_loads(monkeypatch):
    """Loading a model's weights fails the row: bad input must be refused before that."""
    class Refuse:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise AssertionError("this row loaded a model before refusing its input")
    monkeypatch.setattr(models, "AutoModelForCausalLM", Refuse)
    monkeypatch.setattr(models, "offline_unless_reachable", lambda: False)


def run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:   # argparse's own errors (`Parser.error`) exit
        code = e.code
    return code, capsys.readouterr()


@pytest.mark.parametrize("row", list(ROWS))
def test_bad_input_is_one_line_and_exit_2_before_loading(row, no_model_loads, capsys):
    argv, says = ROWS[row]
    code, out = run(argv, capsys)
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in out.err, out.err
    assert re.search(r"^eagle-mini[\w -]*: error: ", lines[0]), lines[0]
    assert re.search(says, lines[0]), lines[0]


def test_every_command_has_a_row():
    commands = build_parser()._subparsers._group_actions[0].choices
    with_rows = {argv[0] for argv, _ in ROWS.values() if argv}
    assert set(commands) - with_rows == set()


def test_too_many_threads_are_capped_in_one_line(capsys):
    """A documented success: --threads above the CPUs this process may use runs with those
    CPUs, said in one line (more threads than cores only contend for them)."""
    from eagle_mini.cli.common import set_threads
    before = torch.get_num_threads()
    try:
        set_threads(10_000)
        cpus = torch.get_num_threads()
        assert cpus < 10_000
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines == [f"eagle-mini: --threads 10000 is more than the {cpus} CPUs this process "
                         f"may use: using {cpus}"]
    finally:
        torch.set_num_threads(before)


def test_generate_help_says_the_default_method_and_lists_every_method(capsys):
    from eagle_mini.methods import DECODERS, VANILLA
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default {VANILLA}" in text
    assert all(f"{name}: " in text for name in DECODERS)


def test_the_usage_doc_lists_every_method_and_generates_default():
    from pathlib import Path
    from eagle_mini.methods import METHOD_NAMES, VANILLA
    doc = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    listed = re.findall(r"^- `([\w+-]+)`(?:, `([\w+-]+)`)?", doc, re.M)
    assert {n for pair in listed for n in pair if n} >= set(METHOD_NAMES)
    assert f"decoded with `{VANILLA}` unless `--method`" in doc
