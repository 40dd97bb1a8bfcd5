"""`--exact auto|on|off`: exact mode chosen for a target, its finding cached per machine.

Measuring exact mode (`probe.make_exact`) takes a while and its answer is a fact of the machine,
so it is kept in this machine's cache (`runtime/machine_cache.py`), keyed like the kernel choice
and by a hash of the code that measured it (`source_tag`): a finding made by other code is not
reused.
"""
import hashlib
from dataclasses import asdict
from pathlib import Path

import torch

from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.exact.probe import make_exact
from eagle_mini.runtime.exact.surgery import ExactRecord, apply, restore
from eagle_mini.runtime.machine_cache import cached_finding, machine_key
from eagle_mini.runtime.packed import packed_kind


def use_exact(target, mode: str = "auto") -> ExactRecord | None:
    """`--exact`: "on" makes the target exact (`make_exact`), "auto" does so in reduced precision
    (where stock trees part from vanilla at near-ties), "off" leaves it stock, or returns an exact
    target to stock (`restore`). The finding is cached per target, dtype, CPU model, thread count
    and versions, like the kernel choice."""
    if mode not in ("auto", "on", "off"):
        raise EagleMiniError(f"--exact must be auto, on or off, got {mode!r}")
    restore(target)
    if mode == "off" or (mode == "auto" and target.dtype == torch.float32):
        return None
    made = []

    def measure():
        made.append(make_exact(target))
        return {k: v for k, v in asdict(made[0]).items() if k != "how"}
    key = machine_key(target, packed_kind(target.model) or "stock", source_tag())
    saved, how = cached_finding("exact", key, measure)
    if made:
        return made[0]
    record = ExactRecord(**{**saved, "how": how})
    if record.exact:
        apply(target, record.chunked, record.attention, record.rows, record.layout,
              record.pad_rows)
    target.runtime.exact = record
    return record


def source_tag() -> str:
    """A short hash of the exact mode's code (every module of this package) and the kernels it
    measures (`blocks.py`, `packed.py`): a finding cached by other code is not reused."""
    from eagle_mini.runtime import blocks, packed
    files = [Path(blocks.__file__), Path(packed.__file__),
             *sorted(Path(__file__).parent.glob("*.py"))]
    text = "".join(path.read_text() for path in files)
    return hashlib.sha1(text.encode()).hexdigest()[:8]
