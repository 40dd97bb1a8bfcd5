"""eagle_mini: a small, tested reference implementation of EAGLE speculative decoding.

EAGLE (arXiv 2401.15077) drafts at the feature level with the token advanced by one step, verifies a
draft tree in one target forward and keeps the target's output distribution exactly. EAGLE-2
(arXiv 2406.16858) grows the tree dynamically from the draft's confidence.

The package is in layers, each importing only those below it (docs/architecture.md): the base
(`errors`, `results`, `assets`, `data`); the algorithm at the top level, in reading order:
`target` (KV cache, tree masks, features), `tree`, `draft` (the drafter protocol and the
head's drafter), `lookup` (prompt lookup as a drafter), `hybrid` (the head and lookup in one tree), `sampling`, `verify`, `decode`, and
`methods` (the table of methods, read by the layers above); then `heads/` (the draft heads and their formats), the runtime
(`models` and `runtime/`: loading, kernels, precision, the cost curve, `auto`, methods by name),
`training/`, `measure/`, `experiments/`, `course/`, `tooling/` and the `cli`.

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

__version__ = "0.3.0"

__all__ = ["EagleDecoder", "EagleMiniError", "DynamicTree", "Generation", "Target",
           "default_head", "generate", "generate_vanilla", "load_head", "load_target",
           "tiny_target"]
