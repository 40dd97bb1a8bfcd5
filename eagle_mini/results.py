"""Results files: strict JSON and the machine a measurement was made on.

Every file the package writes with measured numbers goes through `results_json`, so no NaN (which
JSON cannot spell) reaches a file; every measurement records `machine_info` beside it, since the
CPU changes between sessions and a speedup means nothing without its machine.

Where a measurement goes: `runs/` (never committed) unless the command is told otherwise
(`default_out`). The committed results in `data/results/` feed the README, RESULTS.md and the
notebooks, so replacing one takes an explicit `--out data/results/...` (`writing_command`).
"""
import json
import math
import platform
from pathlib import Path

import torch

RUNS = Path("runs")                  # measuring commands' output by default (gitignored)
COMMITTED = Path("data/results")     # the committed results: written only when named by --out


# CPU features that decide which kernels are fast: without avx512_bf16 or amx_bf16 a bf16 matmul
# is emulated, many times slower than fp32 (runtime/precision.py measures it on the machine at hand)
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_tag() -> str:
    """8 hex digits naming this CPU model (name, family and model): the key of every per-machine
    choice cached on disk (`auto` trees, kernels), since the CPU changes between sessions."""
    import hashlib
    info = machine_info()
    return hashlib.sha256(f"{info['cpu']} {info.get('cpu_family_model')}".encode()).hexdigest()[:8]


def machine_info() -> dict:
    """Enough to tell two measurements' machines apart: one vendor's product name alone covers CPUs
    from AVX2-only ones to ones with bf16 units, so the family, model and the features that matter
    come too."""
    cpu, fields = platform.processor(), {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (x.strip() for x in line.partition(":"))
            if key in ("model name", "cpu family", "model", "flags") and key not in fields:
                fields[key] = value
            if key == "flags":
                break
    except OSError:
        pass
    cpu = fields.get("model name", cpu)
    info = {"platform": platform.platform(), "cpu": cpu, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version()}
    if "cpu family" in fields:
        info["cpu_family_model"] = f"{fields['cpu family']}/{fields.get('model', '?')}"
    if "flags" in fields:
        flags = set(fields["flags"].split())
        info["cpu_features"] = [f for f in CPU_FEATURES if f in flags]
    if torch.get_float32_matmul_precision() != "highest":  # fp32 matmuls with bf16 internals
        info["fp32_matmul_precision"] = torch.get_float32_matmul_precision()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def results_json(value, indent: int = 2) -> str:
    """JSON text for a results file. A rate with nothing to count (an alpha at a depth no chain
    reached) is NaN in Python but has no JSON spelling: it is written as null, so every results
    file stays readable by strict parsers (`json.loads(..., parse_constant=...)`, jq, browsers)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), indent=indent, allow_nan=False) + "\n"


def default_out(name: str) -> Path:
    """Where a measuring command writes `name` when no `--out` is given: under `runs/`, never over
    the committed result of the same name (`data/results/<name>`), which only `--out` replaces.

        >>> str(default_out("check_lossless.json"))
        'runs/check_lossless.json'
    """
    return RUNS / name


def writing_command(command: str, out) -> str:
    """`command` with the `--out` that writes `out` made explicit: the command that makes that file
    now (without `--out` a measuring command writes under `runs/`, `default_out`).

        >>> writing_command("python -m eagle_mini check-lossless --n 20", "data/results/check_lossless.json")
        'python -m eagle_mini check-lossless --n 20 --out data/results/check_lossless.json'
        >>> writing_command("python -m eagle_mini eval-head --out x.json", "x.json")
        'python -m eagle_mini eval-head --out x.json'
    """
    return command if "--out" in command.split() else f"{command} --out {out}"
