"""`--method auto`: size the draft tree for the machine at hand (EAGLE-2 §4, automatic mode), and
choose who fills it: the head alone (`eagle2`) or the head with prompt lookup's chain grafted in
(`eagle2+lookup`, `hybrid.py`).

A bigger tree raises the tokens accepted per cycle L but costs more to verify. On a GPU at batch 1
verifying 60 tokens costs about as much as 1; on a small CPU the cost c(n) grows early (see
`profile-target`), so the best tree is much smaller. For each candidate size and drafter we measure
L and the draft time on calibration prompts and read the verification cost off the measured curve:

    predicted speedup = L / (c(N)/c(1) + draft time per cycle / c(1))

and keep the best (`AutoChoice`). The choice is cached per target, head, device, CPU model, kernels
(stock or packed, see `packed.py`) and thread count: each changes the curve.
"""
import hashlib
from dataclasses import dataclass

from eagle_mini.data import mtbench_prompts
from eagle_mini.decode import generate
from eagle_mini.methods import EAGLE2, EAGLE2_LOOKUP, method, resolve_tree
from eagle_mini.sampling import SamplingConfig
from eagle_mini.runtime.cost import cost_curve
from eagle_mini.runtime.machine_cache import cached_finding, machine_key
from eagle_mini.runtime.packed import packed_kind
from eagle_mini.tree import DynamicTree


# the drafters `auto` chooses between, each filling EAGLE-2's dynamic tree
AUTO_DRAFTERS = (EAGLE2, EAGLE2_LOOKUP)
AUTO_SIZES = (3, 4, 6, 8, 12, 16, 24)


@dataclass(frozen=True)
class AutoChoice:
    """What `auto` decodes with: the drafter of the method `drafter` (one of `AUTO_DRAFTERS`)
    over `tree`. Written as the tree, after the method's name when it is not plain EAGLE-2."""
    drafter: str
    tree: DynamicTree

    def __str__(self) -> str:
        return str(self.tree) if self.drafter == EAGLE2 else f"{self.drafter} {self.tree}"

    def build(self, head, sampling=SamplingConfig()):
        """The chosen method's drafter over the chosen tree."""
        return method(self.drafter).drafter.build(head, self.tree, sampling)


def choose_auto_tree(target, head, curve, prompts, max_new_tokens=32):
    """EAGLE-2's automatic mode for this machine: predicted speedup per candidate tree size and
    drafter (`AUTO_DRAFTERS`), the best one as an `AutoChoice`, and every score.

    Each candidate is run on the calibration prompts; its tokens per cycle and draft time are
    measured, its verification cost read off this machine's cost curve.
    """
    candidates = [AutoChoice(d, DynamicTree(n, min(n - 1, 6), min(n - 1, 4)))
                  for n in AUTO_SIZES for d in AUTO_DRAFTERS]
    scored = []
    for choice in candidates:
        stats = [generate(target, head, p, max_new_tokens, tree=choice.tree,
                          drafter=choice.build(head)).stats for p in prompts]
        scored.append((predict(stats, curve, choice.tree.total_tokens), choice))
    return max(scored, key=lambda s: s[0])[1], [(str(c), round(s, 3)) for s, c in scored]


def relative_cost(curve, n: float) -> float:
    """c(n)/c(1) interpolated on the measured curve (log-spaced n)."""
    ns, rel = curve["ns"], curve["relative"]
    if n <= ns[0]:
        return rel[0]
    for (a, ra), (b, rb) in zip(zip(ns, rel), zip(ns[1:], rel[1:])):
        if n <= b:
            return ra + (rb - ra) * (n - a) / (b - a)
    return rel[-1] * n / ns[-1]


def predict(stats_list, curve, tree_size) -> float:
    """Cost-model speedup from measured tokens per cycle, draft time and the cost curve."""
    cycles = sum(len(s["cycle_lengths"]) for s in stats_list)
    if not cycles:
        return 1.0
    per_cycle = sum(sum(s["cycle_lengths"]) for s in stats_list) / cycles
    t1 = curve["median_ms"][0] / 1000
    draft = sum(s["draft_seconds"] for s in stats_list) / cycles
    return per_cycle / (relative_cost(curve, tree_size) + draft / t1)


def auto_tree(target, head, curve=None, prompts=None) -> AutoChoice:
    """The cached best `AutoChoice` (drafter and tree) for (target, head, device); measured once
    if missing."""
    digest = hashlib.sha256(b"".join(p.detach().float().cpu().numpy().tobytes()[:4096]
                                     for p in head.parameters())).hexdigest()[:12]
    kernels = packed_kind(target.model) or "stock"
    if target.runtime.is_exact:   # exact verification has its own cost curve, each fix its own
        record = target.runtime.exact
        fixes = repr((sorted(record.chunked.items()), record.attention, record.rows,
                      record.layout, record.pad_rows))
        kernels += "-exact-" + hashlib.sha1(fixes.encode()).hexdigest()[:8]

    def measure():
        choice, scores = choose_auto_tree(target, head, curve or cost_curve(target, repeats=3),
                                          prompts or mtbench_prompts()[-2:])
        tree = choice.tree
        return {"tree": {"total_tokens": tree.total_tokens, "depth": tree.depth,
                         "topk": tree.topk}, "drafter": choice.drafter, "scores": scores}
    # "drafters": a finding from before `auto` chose its drafter is measured again
    key = machine_key(target, kernels, f"{digest}-drafters")
    finding, _ = cached_finding("auto_tree", key, measure)
    return AutoChoice(finding.get("drafter", EAGLE2), DynamicTree(**finding["tree"]))


def tree_tokens(tree) -> int:
    """Tokens one verification forward carries for `tree`, the root included: a method name
    ("eagle2", "eagle", ...), a tree spec, a `DynamicTree`, a static tree or an `AutoChoice`.

        >>> tree_tokens("eagle2"), tree_tokens("chain:4")
        (16, 5)
    """
    if isinstance(tree, AutoChoice):
        tree = tree.tree
    tree = resolve_tree(tree)
    return tree.total_tokens if isinstance(tree, DynamicTree) else tree.num_nodes


def why_slower(stats_list, curve, tree_size: int, speedup: float) -> str:
    """One line: why an EAGLE method's runs (`stats_list`, one or more generations, pooled) were
    slower than vanilla here, read off the measured cost curve.

    A cycle costs c(N)/c(1) to verify and its draft time over c(1) to draft, both in units of one
    vanilla step; it must accept that many tokens to break even, and it accepted tau."""
    verify = relative_cost(curve, tree_size)
    t1 = curve["median_ms"][0] / 1000
    lengths = [n for s in stats_list for n in s["cycle_lengths"]]
    cycles = max(len(lengths), 1)
    draft = sum(s["draft_seconds"] for s in stats_list) / cycles / t1
    need, tau = verify + draft, sum(lengths) / cycles
    line = (f"{speedup:.2f}x because verifying its {tree_size}-token tree costs {verify:.2f}x one "
            f"token on this machine (measured cost curve) and drafting {draft:.2f}x more, so a cycle "
            f"must accept {need:.2f} tokens to break even; it accepted tau {tau:.2f}")
    if tau >= need:
        line += (f"; the cost model predicts {tau / need:.2f}x, so the rest is time spent outside the "
                 "draft and verify forwards")
    return line
