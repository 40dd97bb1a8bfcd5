"""Notebook 02's seed explorer: the input ablation pooled over the first k training seeds (EAGLE
§3.1 and §4.3, Figs. 4 and 8; `experiments.ablation`).

An ablation run trains each of the four heads with several seeds (initialization, batch order,
noise). `ablation.summarize` pools them by the mean over seeds, with a bootstrap interval over
validation conversations or prompts, and `ablation.paper_checks` decides the paper's claims by
paired intervals. Here both run on a run cut to its first k seeds, so a learner sees what one seed
would have claimed, and what the next seeds change. Nothing is recomputed but the pooling: the
per-seed counts are the run's own (the committed full run's, or the notebook's live one).

    sub = first_seeds(result, 1)
    view(result, 1)["checks"] == ablation.paper_checks(sub)

Left out: which k seeds (always the first k, in the run's order) and the per-epoch curves.
"""
import copy

from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError
from eagle_mini.experiments.ablation import paper_checks, summarize, summary_table


def seed_count(result: dict) -> int:
    """The number of seeds every variant of `result` holds."""
    counts = {len(v["seeds"]) for v in result["variants"].values()}
    if len(counts) != 1:
        raise EagleMiniError(f"the variants hold different numbers of seeds: {sorted(counts)}")
    return counts.pop()


def first_seeds(result: dict, k: int) -> dict:
    """`result` with each variant's first `k` seeds only, its summary and checks recomputed."""
    n = seed_count(result)
    if not 1 <= k <= n:
        raise EagleMiniError(f"k must be in 1..{n} (the run's seeds), got {k}")
    sub = copy.copy(result)
    sub["variants"] = {name: {**v, "seeds": v["seeds"][:k]} for name, v in result["variants"].items()}
    sub["summary"] = summarize(sub)
    sub["checks"] = paper_checks(sub)
    return sub


def view(result: dict, k: int) -> dict:
    """What the explorer shows for the first `k` seeds: the seeds' ids, the summary per metric and
    variant, the paper's checks, and `summary_table`'s markdown."""
    sub = first_seeds(result, k)
    seeds = [s["seed"] for s in next(iter(sub["variants"].values()))["seeds"]]
    return {"k": k, "seeds": seeds, "summary": sub["summary"], "checks": sub["checks"],
            "table": summary_table(sub)}


class SeedExplorer(Explorer):
    """Notebook 02's controls: how many seeds to pool (the first control) and which run (`runs`:
    a name -> an ablation result); the table and the paper's claims for that choice."""

    def __init__(self, runs: dict[str, dict]):
        import ipywidgets as w
        self.runs, self._views = runs, {}
        style = {"description_width": "120px"}
        self.k = w.IntSlider(value=1, min=1, max=max(seed_count(r) for r in runs.values()),
                             description="seeds pooled", style=style, layout=w.Layout(width="420px"))
        self.run = w.ToggleButtons(options=list(runs), description="run", style=style)
        self.wire(self.k, self.run)

    def state(self) -> dict:
        result = self.runs[self.run.value]
        n = seed_count(result)
        k = min(self.k.value, n)   # a run with fewer seeds shows all of them
        key = (self.run.value, k)
        if key not in self._views:
            self._views[key] = view(result, k)
        return {**self._views[key], "run": self.run.value, "of": n}

    def show(self):
        from IPython.display import Markdown, clear_output, display
        state = self.state()
        held = sum(c["holds"] for c in state["checks"])
        lines = [f"**{state['run']}, seeds {state['seeds']} ({state['k']} of {state['of']})**: "
                 f"{held} of {len(state['checks'])} of the paper's claims hold.", "",
                 state["table"], ""]
        lines += [f"- {'**holds**' if c['holds'] else 'does not hold'}: {c['claim']}; {c['ours']}"
                  for c in state["checks"]]
        with self.output:
            clear_output(wait=True)
            display(Markdown("\n".join(lines)))
