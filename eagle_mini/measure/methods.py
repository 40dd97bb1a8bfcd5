"""Decoding methods by name, as the CLI, the bench and the lossless check call them.

"vanilla" is `decode.generate_vanilla`; "eagle-chain", "eagle" and "eagle2" are `decode.generate`
with the method's default tree (`decode.METHODS`); "auto" is EAGLE-2 with the tree size measured
for this machine (`auto.py`). The algorithm itself never resolves "auto": measuring the machine
is this package's job, so it happens here, before `generate` is called.
"""
from ..decode import METHODS, generate, generate_vanilla
from ..errors import EagleMiniError
from .auto import auto_tree

METHOD_NAMES = ["vanilla", *METHODS, "auto"]


def method_tree(target, head, method: str, tree=None):
    """The tree `method` decodes with: `tree` when given, the measured one for "auto", else the
    method's default."""
    if method not in METHOD_NAMES or method == "vanilla":
        raise EagleMiniError(f"{method!r} is not an EAGLE method; known: "
                             f"{', '.join(METHOD_NAMES[1:])}")
    if tree is not None:
        return tree
    return auto_tree(target, head) if method == "auto" else method


def run_method(target, head, method, prompt, max_new_tokens, tree=None, **kw):
    """One generation with a method name; `tree` overrides the method's default tree."""
    if method == "vanilla":
        return generate_vanilla(target, prompt, max_new_tokens, **kw)
    gen = generate(target, head, prompt, max_new_tokens,
                   tree=method_tree(target, head, method, tree), **kw)
    gen.stats["method"] = method
    return gen
