"""eagle_mini: a small, tested reference implementation of EAGLE speculative decoding.

EAGLE (arXiv 2401.15077) drafts at the feature level with the token advanced by one step, verifies a
draft tree in one target forward and keeps the target's output distribution exactly. EAGLE-2
(arXiv 2406.16858) grows the tree dynamically from the draft's confidence.
"""
from .errors import EagleMiniError
from .models import load_target, tiny_target
from .target import Target

__all__ = ["EagleMiniError", "Target", "load_target", "tiny_target"]
