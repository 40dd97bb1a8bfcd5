"""Which draft head to use: an explicit directory, the shipped head of a target, or a random one.

Shipped heads live in `data/heads/<target>/` of the repository (bf16 safetensors + config.json +
model card). A random head is allowed -- EAGLE stays lossless with any head -- but it accepts almost
nothing, so every caller is told which one it got.
"""
from pathlib import Path

from .head import DraftHead, new_head

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "heads"


def shipped_head_dir(target_name: str) -> Path | None:
    d = SHIPPED / target_name
    return d if (d / "config.json").exists() else None


def default_head(target, head_dir=None) -> tuple[DraftHead, str]:
    """(head, one-line note saying which head it is)."""
    if head_dir is not None:
        return DraftHead.load(head_dir, target), f"draft head from {head_dir}"
    shipped = shipped_head_dir(target.name)
    if shipped is not None:
        head = DraftHead.load(shipped, target)
        seen = getattr(head, "meta", {}).get("tokens_seen")
        where = shipped.relative_to(SHIPPED.parent.parent)  # as the repository names it
        return head, f"shipped head {where}" + (f" ({seen:,} training tokens)" if seen else "")
    return new_head(target, seed=0), ("UNTRAINED random draft head (no shipped head for "
                                      f"{target.name} yet): lossless, but it accepts almost nothing")
