"""Which draft head to use: an explicit directory, the shipped head of a target, or a random one.

Shipped heads live in `data/heads/<target>/` of the repository (bf16 safetensors + config.json +
model card). A random head is allowed -- EAGLE stays lossless with any head -- but it accepts almost
nothing, so every caller is told which one it got.
"""
from pathlib import Path

from .export import load_official
from .head import DraftHead, new_head

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "heads"


def shipped_head_dir(target_name: str) -> Path | None:
    d = SHIPPED / target_name
    return d if (d / "config.json").exists() else None


def repository_path(path) -> str:
    """A path as the repository names it (`data/heads/...`), wherever the command ran; a path
    outside the repository stays as given.

    >>> repository_path(SHIPPED / "smollm2-135m")
    'data/heads/smollm2-135m'
    """
    root = SHIPPED.parent.parent
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def load_head(head_dir, target=None) -> DraftHead:
    """A head directory in our format (`DraftHead.save`) or an official EAGLE-1 checkpoint."""
    d = Path(head_dir)
    if (d / "pytorch_model.bin").exists() and not (d / "model.safetensors").exists():
        return load_official(d, target)
    return DraftHead.load(d, target)


def default_head(target, head_dir=None) -> tuple[DraftHead, str]:
    """(head, one-line note saying which head it is)."""
    if head_dir is not None:
        return load_head(head_dir, target), f"draft head from {repository_path(head_dir)}"
    shipped = shipped_head_dir(target.name)
    if shipped is not None:
        head = load_head(shipped, target)
        seen = getattr(head, "meta", {}).get("tokens_seen")
        where = repository_path(shipped)
        return head, f"shipped head {where}" + (f" ({seen:,} training tokens)" if seen else "")
    return new_head(target, seed=0), ("UNTRAINED random draft head (no shipped head for "
                                      f"{target.name} yet): lossless, but it accepts almost nothing")
