"""Results files: strict JSON and the machine a measurement was made on.

Every file the package writes with measured numbers goes through `results_json`, so no NaN (which
JSON cannot spell) reaches a file; every measurement records `machine_info` beside it, since the
CPU changes between sessions and a speedup means nothing without its machine.
"""
import json
import math
import platform
from pathlib import Path

import torch


def machine_info() -> dict:
    """Enough to tell two measurements' machines apart."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"platform": platform.platform(), "cpu": cpu, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "python": platform.python_version()}
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
