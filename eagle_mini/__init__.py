"""eagle_mini: a small, tested reference implementation of EAGLE speculative decoding.

EAGLE (arXiv 2401.15077) drafts at the feature level with the token advanced by one step, verifies a
draft tree in one target forward and keeps the target's output distribution exactly. EAGLE-2
(arXiv 2406.16858) grows the tree dynamically from the draft's confidence.

The top level is the algorithm, in reading order: `target` (KV cache, tree masks, features),
`head`, `tree`, `draft`, `sampling`, `verify`, `decode`; beside it loading (`models`, `assets`),
the head choice (`heads`), the official format (`export`), results files (`results`) and the
error type. `training/` trains heads, `measure/` measures them and the machine, `course/` serves
the notebooks.

    >>> from eagle_mini import load_target, default_head, generate   # doctest: +SKIP
    >>> target = load_target("smollm2-135m")                           # doctest: +SKIP
    >>> head, note = default_head(target)                              # doctest: +SKIP
    >>> generate(target, head, "Why is the sky blue?").stats["tau"]    # doctest: +SKIP
"""
from eagle_mini.decode import EagleDecoder, Generation, generate, generate_vanilla
from eagle_mini.tree import DynamicTree
from eagle_mini.errors import EagleMiniError
from eagle_mini.heads import default_head, load_head
from eagle_mini.models import load_target, tiny_target
from eagle_mini.target import Target

__version__ = "0.2.0"

__all__ = ["EagleDecoder", "EagleMiniError", "DynamicTree", "Generation", "Target",
           "default_head", "generate", "generate_vanilla", "load_head", "load_target",
           "tiny_target"]
