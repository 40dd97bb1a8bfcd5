"""This machine's measured findings, measured once and kept: which kernels are fastest
(`kernels.py`), what exact mode needs (`exact.py`), which tree `auto` decodes with (`auto.py`).

A finding holds for the target, its dtype and device, the CPU model, the thread count and the
versions of torch and of this package that measured it, so all of those are in its key; each user
adds what else its finding depends on (the kernels that run, a head's weights, the code that
measured it). One key format, one file per finding, under `$EAGLE_MINI_CACHE/<kind>/`.

    >>> machine_key_parts("lmsys/vicuna-7b-v1.3:main")
    'lmsys_vicuna-7b-v1.3_main'
"""
import json
from pathlib import Path

import torch

from eagle_mini.models import cache_dir
from eagle_mini.results import cpu_tag, results_json


def machine_key_parts(*parts) -> str:
    """Key parts joined by '_', each made a safe file name ('/' and ':' become '_')."""
    return "_".join(str(p).replace("/", "_").replace(":", "_") for p in parts)


def machine_key(target, *extra) -> str:
    """The key of a finding about `target` on this machine, `extra` what else it depends on."""
    from eagle_mini import __version__
    return machine_key_parts(target.name, str(target.dtype).removeprefix("torch."),
                             target.device.type, f"t{torch.get_num_threads()}", f"cpu{cpu_tag()}",
                             f"torch{torch.__version__.split('+')[0]}", f"v{__version__}", *extra)


def finding_path(kind: str, key: str) -> Path:
    return cache_dir() / kind / f"{key}.json"


def cached_finding(kind: str, key: str, measure) -> tuple[dict, str]:
    """(the finding, how it was had): read from this machine's cache, or `measure()` (a dict)
    now and kept. `how` says which, for a command's header line."""
    path = finding_path(kind, key)
    if path.exists():
        return json.loads(path.read_text()), f"measured earlier here ({path.name})"
    finding = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_json(finding, indent=2))
    return finding, "measured now"
