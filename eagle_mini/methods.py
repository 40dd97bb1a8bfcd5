"""The table of decoding methods: every method name the package knows, written once, here.

A row gives the name, how it runs, one line on what it is and, for a method that drafts and
verifies, its drafter (a `draft.TreeDrafter` class), the draft tree (a spec in `tree.py`'s
language) and the kind of head that drafts it (None: no head, e.g. prompt lookup). The CLI's `--method` choices, the bench, `auto`, the
results report, the course's stepper and the experiments all read names from this table;
`resolve_tree` turns a name or a spec into the tree `Drafter` and `EagleDecoder` decode with.

    >>> [m.name for m in METHODS]
    ['vanilla', 'hf-generate', 'hf-compiled', 'hf-prompt-lookup', 'prompt-lookup', 'eagle-chain', 'eagle', 'eagle2', 'eagle2+lookup', 'auto', 'eagle3']
    >>> resolve_tree("eagle2")
    DynamicTree(total_tokens=16, depth=5, topk=4)
    >>> resolve_tree("eagle-chain").choices()
    [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]

Two trees are not fixed here: `auto`'s tree is measured on the machine at hand
(`eagle_mini/runtime/auto.py`, resolved by `eagle_mini/runtime/run.py`), and a caller may pass any
tree spec in place of a row's.
"""
from dataclasses import dataclass, field

from eagle_mini import lookup
from eagle_mini.draft import Drafter
from eagle_mini.errors import EagleMiniError
from eagle_mini.hybrid import HybridDrafter
from eagle_mini.lookup import LookupDrafter
from eagle_mini.tree import SPEC_FORMS, DynamicTree, Tree, UnknownTreeSpec, tree_from_spec

VANILLA, HF_GENERATE, HF_PROMPT_LOOKUP = "vanilla", "hf-generate", "hf-prompt-lookup"
HF_COMPILED = "hf-compiled"
PROMPT_LOOKUP = "prompt-lookup"
EAGLE_CHAIN, EAGLE, EAGLE2, AUTO, EAGLE3 = "eagle-chain", "eagle", "eagle2", "auto", "eagle3"
EAGLE2_LOOKUP = "eagle2+lookup"
MEASURED = "measured"   # the tree spec of a method whose tree is sized on the machine (`auto`)


@dataclass(frozen=True)
class Method:
    """One decoding method. `runner`: "plain" (one target forward per token), "hf" (Hugging
    Face `generate`, with `hf_options`), or "draft-verify" (draft-verify cycles, `EagleDecoder`:
    the `drafter` class, built by its `build(head, tree, sampling)`, drafts a `tree` with a `head`
    of that kind, or with none). `runtime/run.py` runs each runner. `vanilla`: one token per target
    forward, a baseline a speedup may be taken against (`VANILLAS`)."""
    name: str
    runner: str
    about: str
    tree: str | None = None
    head: str | None = None
    drafter: type | None = None
    hf_options: dict = field(default_factory=dict)
    vanilla: bool = False

    @property
    def drafts(self) -> bool:
        """Draft-verify cycles: it has a drafter and a tree, and a tau."""
        return self.drafter is not None

    @property
    def is_eagle(self) -> bool:
        """An EAGLE method: its drafter is a draft head."""
        return self.head is not None


METHODS = (
    Method(VANILLA, "plain", "the target alone, one forward per token: the baseline",
           vanilla=True),
    Method(HF_GENERATE, "hf", "Hugging Face `generate` on the same model: the peer baseline",
           vanilla=True),
    Method(HF_COMPILED, "hf", "HF `generate` on the stock model with a static cache and its "
           "decoding step compiled (torch.compile, inductor): the fastest vanilla a learner builds "
           "in two lines; compile time kept out of tok/s", hf_options={"compiled": True},
           vanilla=True),
    Method(HF_PROMPT_LOOKUP, "hf", "HF `generate` with prompt-lookup decoding (drafts n-grams "
           "copied from the prompt, no head)",
           hf_options={"prompt_lookup_num_tokens": lookup.TOKENS,
                       "max_matching_ngram_size": lookup.NGRAM}),
    Method(PROMPT_LOOKUP, "draft-verify", "prompt lookup as the package's own drafter "
           "(`lookup.py`): HF's rule, verified by the package's loop, no head",
           tree=f"chain:{lookup.TOKENS}", drafter=LookupDrafter),
    Method(EAGLE_CHAIN, "draft-verify", "EAGLE with a chain of 4 drafts (EAGLE §3.1 without a tree)",
           tree="chain:4", head="eagle1", drafter=Drafter),
    Method(EAGLE, "draft-verify", "EAGLE-1's static 26-token tree (EAGLE §3.1, mc_sim_7b_63)",
           tree="eagle1", head="eagle1", drafter=Drafter),
    Method(EAGLE2, "draft-verify", "EAGLE-2's dynamic tree, grown where the draft is confident "
           "(EAGLE-2 §4)", tree=str(DynamicTree()), head="eagle1", drafter=Drafter),
    Method(EAGLE2_LOOKUP, "draft-verify", "EAGLE-2's tree and prompt lookup's chain in one tree of "
           "the same size, ranked by one value: the head's confidence, the lookup's measured "
           "acceptance (`hybrid.py`)", tree=str(DynamicTree()), head="eagle1",
           drafter=HybridDrafter),
    Method(AUTO, "draft-verify", "EAGLE-2's tree sized for this machine's cost curve, drafted by "
           "the head alone or with prompt lookup (`eagle2+lookup`), whichever is predicted faster",
           tree=MEASURED, head="eagle1", drafter=Drafter),
    Method(EAGLE3, "draft-verify", "EAGLE-2's dynamic tree drafted by an EAGLE-3 head (EAGLE-3 §3)",
           tree=str(DynamicTree()), head="eagle3", drafter=Drafter),
)
BY_NAME = {m.name: m for m in METHODS}
METHOD_NAMES = [m.name for m in METHODS]
EAGLE_METHODS = [m.name for m in METHODS if m.is_eagle]
# One token per target forward: the baselines a speedup is taken against (the fastest in a run).
VANILLAS = [m.name for m in METHODS if m.vanilla]
# The package's own decoders (`generate --method`): every row but the Hugging Face peers.
DECODERS = [m.name for m in METHODS if m.runner != "hf"]
# Draft-verify methods: a drafter, a tree and a tau (the EAGLE methods and prompt lookup).
DRAFTING = [m.name for m in METHODS if m.drafts]
# The methods a bench runs unless told otherwise: eagle3 needs an EAGLE-3 head, so it runs when asked.
BENCH_DEFAULT = [m.name for m in METHODS if m.head != "eagle3"]


def method(name: str) -> Method:
    """The table's row for `name`, or a one-line error listing the known names."""
    if name not in BY_NAME:
        raise EagleMiniError(f"unknown method {name!r}; known: {', '.join(METHOD_NAMES)}")
    return BY_NAME[name]


# The method names whose tree `resolve_tree` reads from the table (not `auto`'s, measured).
TREE_NAMES = [m.name for m in METHODS if m.drafts and m.tree != MEASURED]


def tree_forms() -> str:
    """Every form of tree `resolve_tree` takes, for help texts and errors: the method names, then
    the spec forms (`tree.SPEC_FORMS`)."""
    return f"a method name ({', '.join(TREE_NAMES)}), {SPEC_FORMS}"


def resolve_tree(tree):
    """What a `Drafter` drafts: a `Tree` or `DynamicTree` as given, a method name's tree from the
    table, or any spec `tree.tree_from_spec` reads ("eagle1", "chain:K", "dynamic:T,D,K", JSON).
    The one reader of trees: Python's `tree=` and the CLI's `--tree` both come here."""
    if isinstance(tree, (Tree, DynamicTree)):
        return tree
    if isinstance(tree, str) and tree in BY_NAME:
        row = BY_NAME[tree]
        if row.tree is None:
            raise EagleMiniError(f"{tree!r} drafts no tree; methods with a tree: {', '.join(TREE_NAMES)}")
        if row.tree == MEASURED:
            raise EagleMiniError(f"{tree!r}'s tree is measured on the machine: use the method "
                                 f"{tree!r} (CLI: --method {tree}; Python: "
                                 "eagle_mini.runtime.run.method_tree(target, head, name))")
        return tree_from_spec(row.tree)
    try:
        return tree_from_spec(tree)
    except UnknownTreeSpec:
        raise EagleMiniError(f"tree spec must be one of: {tree_forms()}; got {tree!r}") from None
