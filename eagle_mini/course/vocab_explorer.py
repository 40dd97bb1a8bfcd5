"""Notebook 07's draft-vocabulary explorer: how much of the target's choices the k most frequent
training tokens cover, for any k (EAGLE-3's `d2t`, FR-Spec; `training.commands.frequent_tokens`).

A draft head with a reduced vocabulary can only propose its k tokens, so wherever the target's
greedy choice lies outside them, depth 1 is a guaranteed miss: the share of the target's argmax
choices inside the vocabulary bounds the head's top-1. Its lm_head is k rows of H, so its arithmetic
is k / V of the full one. The vocabulary is the package's own: `most_frequent_ids` over
`assistant_token_counts` (what `frequent_tokens` ranks). The target's choices are counted once on the
learner's featurized validation text (`target_choices`), so moving k only sums over token ids.

    choices = target_choices(target, val_rows)
    coverage(choices, vocabulary(counts, 8192, target.vocab_size))["argmax"]

Left out: the time a draft step saves (notebook 07 times it) and the head's accuracy inside the
vocabulary (a trained head per k).
"""
from collections import Counter

import torch

from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.commands import most_frequent_ids


def target_choices(target, rows) -> dict:
    """Over the assistant positions of featurized rows (position i predicts token i + 1, an
    assistant token): per token id how often it is the target's argmax, `argmax` [V], and the
    probability the target gives it, summed, `mass` [V]; `positions`, how many were counted."""
    V = target.vocab_size
    argmax, mass, positions = torch.zeros(V, dtype=torch.long), torch.zeros(V, dtype=torch.float64), 0
    weight = target.model.lm_head.weight.float()
    with torch.no_grad():
        for r in rows:
            at = r["loss_mask"][1:].bool()
            logits = r["features"][:-1][at].float() @ weight.T
            argmax += torch.bincount(logits.argmax(-1), minlength=V)
            mass += logits.softmax(-1).sum(0).double()
            positions += int(at.sum())
    if not positions:
        raise EagleMiniError("the rows hold no assistant position to count")
    return {"argmax": argmax, "mass": mass, "positions": positions}


def vocabulary(counts: Counter, k: int, vocab_size: int) -> list[int]:
    """The k most frequent token ids of `counts` (topped up with the lowest unseen ids), sorted."""
    if not 1 <= k <= vocab_size:
        raise EagleMiniError(f"k must be in 1..{vocab_size}, got {k}")
    return most_frequent_ids(counts, k, vocab_size)


def coverage(choices: dict, ids) -> dict:
    """The share of the counted positions whose target argmax is in `ids`, and the share of the
    target's probability mass `ids` hold."""
    ids = torch.as_tensor(list(ids), dtype=torch.long)
    n = choices["positions"]
    return {"argmax": float(choices["argmax"][ids].sum()) / n, "mass": float(choices["mass"][ids].sum()) / n}


def view(counts: Counter, choices: dict, k: int, vocab_size: int, hidden: int) -> dict:
    """What the explorer shows at k: both coverages and the lm_head's size."""
    return {"k": k, **coverage(choices, vocabulary(counts, k, vocab_size)),
            "lm_head_parameters": k * hidden, "share_of_full": k / vocab_size}


class VocabExplorer(Explorer):
    """Notebook 07's control: the draft vocabulary size k (a slider, powers of two up to the
    target's vocabulary); the coverage curve, the point at k and one sentence."""

    def __init__(self, counts: Counter, choices: dict, vocab_size: int, hidden: int, k: int = 8192,
                 sizes=None):
        import ipywidgets as w
        sizes = list(sizes or [2 ** e for e in range(8, 17) if 2 ** e < vocab_size] + [vocab_size])
        self.views = {s: view(counts, choices, s, vocab_size, hidden) for s in sizes}
        self.positions, self.vocab_size = choices["positions"], vocab_size
        self.k = w.SelectionSlider(options=sizes, value=k if k in sizes else sizes[len(sizes) // 2],
                                   description="draft vocabulary k", style={"description_width": "140px"},
                                   layout=w.Layout(width="560px"))
        self.wire(self.k)

    def state(self) -> dict:
        return self.views[self.k.value]

    def show(self):
        import matplotlib.pyplot as plt
        from IPython.display import Markdown, clear_output, display
        s, ks = self.state(), list(self.views)
        with self.output:
            clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(8, 3.8), layout="constrained")
            for key, label in (("argmax", "target's argmax in the vocabulary"),
                               ("mass", "target's probability mass in it")):
                ax.plot(ks, [self.views[k][key] for k in ks], "o-", label=label)
            ax.plot(ks, [k / self.vocab_size for k in ks], ":", color="0.5", label="k / V (lm_head arithmetic)")
            ax.axvline(s["k"], color="0.3", lw=1, ls="--")
            ax.set_xscale("log", base=2)
            ax.set(xlabel="draft vocabulary k (most frequent training tokens)", ylabel="share", ylim=(0, 1.02),
                   title=f"Coverage on {self.positions:,} validation assistant positions")
            ax.legend(fontsize=8, loc="lower right")
            display(fig)
            plt.close(fig)
            display(Markdown(
                f"**k = {s['k']:,}** ({s['share_of_full']:.1%} of the target's {self.vocab_size:,} tokens): the "
                f"target's argmax is in the vocabulary at **{s['argmax']:.1%}** of the positions, which bounds a "
                f"head's top-1; it holds {s['mass']:.1%} of the target's probability. Its lm_head: "
                f"{s['lm_head_parameters']:,} parameters."))
