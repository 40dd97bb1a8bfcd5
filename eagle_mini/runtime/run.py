"""Decoding methods by name, as the CLI, the bench and the lossless check call them.

"vanilla" is `decode.generate_vanilla`; "eagle-chain", "eagle" and "eagle2" are `decode.generate`
with the method's default tree (`decode.METHODS`); "eagle3" is the EAGLE-2 dynamic tree drafted by
an EAGLE-3 head (`eagle3.py`); "auto" is EAGLE-2 with the tree size measured for this machine
(`auto.py`). The algorithm itself never resolves "auto": measuring the machine
is this package's job, so it happens here, before `generate` is called.
"""
from eagle_mini.decode import METHODS, generate, generate_vanilla
from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.auto import auto_tree

METHOD_NAMES = ["vanilla", *METHODS, "eagle3", "auto"]


def pick_head(method: str, heads):
    """The head `method` drafts with. `heads` is one head, or {"eagle1": head, "eagle3": head}
    when a run compares both kinds; "eagle3" needs an EAGLE-3 head."""
    if isinstance(heads, dict):
        heads = heads.get("eagle3" if method == "eagle3" else "eagle1") or next(iter(heads.values()))
    if method == "eagle3" and getattr(heads, "kind", "eagle1") != "eagle3":
        raise EagleMiniError("--method eagle3 drafts with an EAGLE-3 head; this head is an EAGLE-1 "
                             "head (train one with `train-head --kind eagle3`, or pass --head DIR)")
    return heads


def method_tree(target, head, method: str, tree=None):
    """The tree `method` decodes with: `tree` when given, the measured one for "auto", else the
    method's default."""
    if method not in METHOD_NAMES or method == "vanilla":
        raise EagleMiniError(f"{method!r} is not an EAGLE method; known: "
                             f"{', '.join(METHOD_NAMES[1:])}")
    if tree is not None:
        return tree
    if method == "auto":
        return auto_tree(target, pick_head(method, head))
    return named_tree_of(method)


def named_tree_of(method: str) -> str:
    """The named tree an EAGLE method decodes with by default: its own name, except "eagle3",
    which is EAGLE-2's dynamic tree drafted by an EAGLE-3 head."""
    return "eagle2" if method == "eagle3" else method


def run_method(target, head, method, prompt, max_new_tokens, tree=None, **kw):
    """One generation with a method name; `tree` overrides the method's default tree."""
    if method == "vanilla":
        return generate_vanilla(target, prompt, max_new_tokens, **kw)
    gen = generate(target, pick_head(method, head), prompt, max_new_tokens,
                   tree=method_tree(target, head, method, tree), **kw)
    gen.stats["method"] = method
    return gen
