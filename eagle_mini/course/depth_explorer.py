"""Notebook 08's depth explorer: acceptance by draft depth, and what a chain of K drafts gains from
it (EAGLE-3 §3, the training-time test; EAGLE §4.3's n-alpha; Leviathan et al. §3.1).

n-alpha is the acceptance rate of a chain's step n given that steps 0..n-1 were accepted
(`train.evaluate_head` counts it on held-out text; `eval-head` counts the same per tree depth while
decoding). A chain of K drafts is accepted up to its first rejection, so the tokens one cycle adds,
the target's bonus token included, are in expectation

    tau(K) = 1 + alpha_0 + alpha_0 alpha_1 + ... + alpha_0 ... alpha_{K-1}

which for a constant alpha is Leviathan et al.'s (1 - alpha^(K+1)) / (1 - alpha). A head that
accepts less at depth 1 but more deeper (what EAGLE-3's training-time test aims at) gains only
through the products: every deeper term is multiplied by the first rate.

    >>> chain_tau([0.5, 0.5], 2)
    1.75

Left out: trees (several children per depth) and the draft's cost.
"""
import math

from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError


def chain_tau(alphas, k: int) -> float:
    """Expected tokens per cycle of a chain of `k` drafts with conditional acceptance `alphas`."""
    if not 0 <= k <= len(alphas):
        raise EagleMiniError(f"k must be in 0..{len(alphas)} (the depths measured), got {k}")
    if any(not 0 <= a <= 1 for a in alphas[:k]):   # NaN fails too: a depth nothing reached
        raise EagleMiniError(f"acceptance rates must be in [0, 1], got {list(alphas[:k])}")
    total, reach = 1.0, 1.0
    for a in alphas[:k]:
        reach *= a
        total += reach
    return total


def rates(evaluation: dict) -> list[float]:
    """`train.evaluate_head`'s n-alpha, up to the first depth no chain reached (its rate is NaN).

    >>> rates({"alpha": [0.4, 0.2, float("nan"), 0.5]})
    [0.4, 0.2]
    """
    out = []
    for a in evaluation["alpha"]:
        if math.isnan(a):
            break
        out.append(a)
    return out


def view(profiles: dict[str, list[float]], k: int) -> dict:
    """Per head (name -> acceptance by depth): its first `k` rates and tau of a chain of `k`."""
    return {"k": k, "alphas": {n: list(a[:k]) for n, a in profiles.items()},
            "tau": {n: chain_tau(a, k) for n, a in profiles.items()}}


class DepthExplorer(Explorer):
    """Notebook 08's controls: the chain length K (the first control) and the source of the rates
    (`sources`: a name -> {head name -> acceptance by depth}); the rates and tau(K) per head."""

    def __init__(self, sources: dict[str, dict[str, list[float]]]):
        import ipywidgets as w
        self.sources = sources
        deepest = max(len(a) for s in sources.values() for a in s.values())
        style = {"description_width": "140px"}
        self.k = w.IntSlider(value=1, min=1, max=deepest, description="drafts in the chain K", style=style,
                             layout=w.Layout(width="460px"))
        self.source = w.ToggleButtons(options=list(sources), description="rates from", style=style)
        self.wire(self.k, self.source)

    def state(self) -> dict:
        profiles = self.sources[self.source.value]
        k = min(self.k.value, *(len(a) for a in profiles.values()))   # a source with fewer depths: all of them
        return {"source": self.source.value, **view(profiles, k)}

    def show(self):
        import matplotlib.pyplot as plt
        import numpy as np
        from IPython.display import Markdown, clear_output, display
        s = self.state()
        names, k = list(s["alphas"]), s["k"]
        with self.output:
            clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
            x = np.arange(1, k + 1)
            width = 0.8 / len(names)
            for j, n in enumerate(names):
                ax.bar(x + (j - (len(names) - 1) / 2) * width, s["alphas"][n], width,
                       label=f"{n}: tau({k}) = {s['tau'][n]:.3f}")
            ax.set(xticks=x, xlabel="depth (draft n of the chain)", ylabel="acceptance, given the depth above",
                   ylim=(0, 1), title=f"{s['source']}: the first {k} depth(s)")
            ax.legend(fontsize=8)
            display(fig)
            plt.close(fig)
            lead = max(names, key=lambda n: s["tau"][n])
            display(Markdown(
                f"A chain of **K = {k}** drafts adds, in expectation, "
                + "; ".join(f"**{s['tau'][n]:.3f}** tokens per cycle for {n}" for n in names)
                + f". Ahead at this K: {lead}"
                + ("" if all(math.isclose(s['tau'][lead], s['tau'][n]) or n == lead for n in names) else
                   f", by {s['tau'][lead] - min(s['tau'].values()):.3f}") + "."))
