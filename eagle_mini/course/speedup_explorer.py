"""EAGLE's speedup from three numbers, checked against committed bench runs (notebook 06's explorer;
EAGLE §4, EAGLE-2 §4's automatic mode).

Per draft-verify cycle EAGLE pays one target forward over the N tree tokens, c(N), plus the
drafting, and gains tau tokens (the papers' tau); vanilla decoding pays c(1) per token. In units of
c(1) the cost model that `bench` prints (`runtime.auto.predict`) is

    speedup = tau / (c(N)/c(1) + draft / c(1))               break-even tau = c(N)/c(1) + draft / c(1)

It leaves three things out, each measured in the same bench run:

* **verification extras**: `verify` is more than the forward of N tokens: the acceptance walk, the
  argmax of N rows of logits, the KV-cache compaction, the tree's positions and mask; and c(N) of
  the curve is timed over a fixed random 200-token prefix, not the generation's own contexts;
* **the loop's other time**: Python between the steps, and the prefill;
* **vanilla's real step**: vanilla decoding's seconds per token, its prefill and loop included,
  are not the curve's c(1).

With `overhead` the first two per cycle and `vanilla_step` = vanilla's seconds per token / c(1):

    speedup = tau * vanilla_step / (c(N)/c(1) + draft / c(1) + overhead)

`gap_steps` walks from the model to the measured speedup one correction at a time (the last step is
the measurement itself); `leave_one_out` predicts each method with the overhead measured on the
run's *other* methods, a prediction rather than a fit. What stays out: a cycle's cost changing with
the context length, and the machine's drift between the curve and the generations.

    >>> predicted_speedup(tau=2.0, verify_cost=1.6, draft_cost=0.4)
    1.0
"""
import json
import re
from pathlib import Path

from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError
from eagle_mini.methods import HF_COMPILED, VANILLA
from eagle_mini.runtime.auto import relative_cost

RESULTS = Path(__file__).resolve().parents[2] / "data" / "results"


def predicted_speedup(tau: float, verify_cost: float, draft_cost: float, overhead: float = 0.0,
                      vanilla_step: float = 1.0) -> float:
    """tau * vanilla_step / (c(N)/c(1) + draft/c(1) + overhead), every cost in units of c(1)."""
    return tau * vanilla_step / (verify_cost + draft_cost + overhead)


def break_even_tau(verify_cost: float, draft_cost: float, overhead: float = 0.0,
                   vanilla_step: float = 1.0) -> float:
    """The tau at which `predicted_speedup` is 1.

    >>> break_even_tau(1.6, 0.4)
    2.0
    """
    return (verify_cost + draft_cost + overhead) / vanilla_step


def explore(tau: float, draft_cost: float, curve: dict | None = None, n: float | None = None,
            verify_cost: float | None = None, overhead: float = 0.0, vanilla_step: float = 1.0) -> dict:
    """What the explorer's controls give: c(N)/c(1) (read off `curve` at tree size `n`, or given as
    `verify_cost`), the predicted speedup and the break-even tau."""
    if verify_cost is None:
        verify_cost = relative_cost(curve, n)
    return {"tau": tau, "verify_cost": verify_cost, "draft_cost": draft_cost, "overhead": overhead,
            "vanilla_step": vanilla_step,
            "speedup": predicted_speedup(tau, verify_cost, draft_cost, overhead, vanilla_step),
            "break_even_tau": break_even_tau(verify_cost, draft_cost, overhead, vanilla_step)}


def bench_runs(results: Path = RESULTS) -> dict[str, dict]:
    """Every committed bench run, labelled by dtype and temperature ("float32 T=0", ...), by exact
    mode where a reduced-precision run verified in it ("bfloat16 T=0 exact"), by fp32 matmul
    precision where it was not the exact default ("float32 T=0 matmul medium"), and by its prompts
    where they are not MT-bench's ("bfloat16 T=0 exact humaneval"), by the stock-forward vanilla
    an exact run timed beside its own ("bfloat16 T=0 exact with stock vanilla"), by the
    compiled HF peer where it ran ("... with hf-compiled"), by a head drafting over its most
    frequent tokens ("... FR-Spec") and, for a run repeating another's command, by its folder's
    run number ("... (run 2)")."""
    runs = {}
    for path in sorted(results.glob("bench_*/bench.json")):
        b = json.loads(path.read_text())
        b["path"] = str(path.relative_to(results.parent.parent))
        precision = b.get("machine", {}).get("fp32_matmul_precision")
        exact = " exact" if (b.get("exact") or {}).get("exact") else ""
        label = (f"{b['dtype']} T={b['temperature']:g}{exact}"
                 + (f" matmul {precision}" if precision else "")
                 + (f" {b['dataset']}" if b.get("dataset", "mtbench") != "mtbench" else "")
                 + (" with stock vanilla" if b.get("stock_vanilla") else "")
                 + (f" with {HF_COMPILED}" if HF_COMPILED in b.get("methods", {}) else "")
                 + (" FR-Spec" if "(FR-Spec)" in b.get("head", "") else ""))
        repeat = re.search(r"_run(\d+)$", path.parent.name)
        label += f" (run {repeat.group(1)})" if repeat else ""
        if label in runs:
            raise EagleMiniError(f"two bench runs share the label {label!r}: {runs[label]['path']} "
                                 f"and {b['path']}")
        runs[label] = b
    return runs


def cost_curves(results: Path = RESULTS) -> dict[str, dict]:
    """The committed `profile-target` curves, labelled by dtype ("float32", "bfloat16")."""
    curves = {}
    for path in sorted(results.glob("cost_curve_*.json")):
        c = json.loads(path.read_text())
        c["path"] = str(path.relative_to(results.parent.parent))
        curves[c["dtype"]] = c
    return curves


def method_costs(bench: dict) -> dict[str, dict]:
    """Per EAGLE method of a bench run, everything in units of the run's c(1) and per cycle:
    `tau` (papers'), `verify_cost` c(N)/c(1) from the run's curve, `draft_cost`, `verify_measured`
    (the whole verify step), `other` (the loop's other time), `overhead` (verification extras +
    other), `vanilla_step` (vanilla's seconds per token / c(1)), `tokens_per_cycle` (new tokens,
    the prefill's first one included, per cycle), `model` (the cost model at tau), `file_model`
    (the bench's own `predicted_speedup`, from its cycle counts) and `measured`."""
    curve, methods = bench["cost_curve"], bench["methods"]
    c1 = curve["median_ms"][0] / 1000
    vanilla = methods[VANILLA]
    vanilla_step = vanilla["seconds"] / vanilla["new_tokens"] / c1
    rows = {}
    for name, r in methods.items():
        if "cycle_length_counts" not in r:
            continue
        cycles = sum(r["cycle_length_counts"].values())
        per_cycle = {part: r[f"{part}_fraction"] * r["seconds"] / cycles / c1
                     for part in ("draft", "verify", "other")}
        verify_cost = relative_cost(curve, r["tree_size"])
        rows[name] = {"tree_size": r["tree_size"], "tau": r["tau"], "cycles": cycles,
                      "verify_cost": verify_cost, "draft_cost": per_cycle["draft"],
                      "verify_measured": per_cycle["verify"], "other": per_cycle["other"],
                      "overhead": per_cycle["verify"] - verify_cost + per_cycle["other"],
                      "vanilla_step": vanilla_step, "tokens_per_cycle": r["new_tokens"] / cycles,
                      "model": predicted_speedup(r["tau"], verify_cost, per_cycle["draft"]),
                      "file_model": r["predicted_speedup"], "measured": r["speedup"]}
    return rows


def gap_steps(row: dict) -> list[tuple[str, float]]:
    """From the cost model to the measured speedup, one measured correction at a time."""
    tau, draft = row["tau"], row["draft_cost"]
    verified = row["verify_measured"] + draft
    with_other = verified + row["other"]
    return [("cost model", row["model"]),
            ("verify as measured", tau / verified),
            ("+ the loop's other time", tau / with_other),
            ("vanilla's real step", tau * row["vanilla_step"] / with_other),
            ("+ the prefill's token (= measured)", row["tokens_per_cycle"] * row["vanilla_step"] / with_other)]


def leave_one_out(rows: dict[str, dict]) -> dict[str, float]:
    """Each method's speedup predicted from its tau, c(N)/c(1) and draft cost, vanilla's real step,
    and the mean overhead per cycle of the *other* methods of the run."""
    out = {}
    for name, r in rows.items():
        others = [o["overhead"] for m, o in rows.items() if m != name]
        overhead = sum(others) / len(others) if others else 0.0
        out[name] = predicted_speedup(r["tau"], r["verify_cost"], r["draft_cost"], overhead, r["vanilla_step"])
    return out


def points(runs: dict[str, dict]) -> list[dict]:
    """Every EAGLE method of every run as a point: run, method, tau, measured, model, leave-one-out."""
    out = []
    for label, bench in runs.items():
        rows = method_costs(bench)
        loo = leave_one_out(rows)
        out += [{"run": label, "method": m, "tau": r["tau"], "tree N": r["tree_size"],
                 "c(N)/c(1)": r["verify_cost"], "draft / c(1)": r["draft_cost"], "overhead / c(1)": r["overhead"],
                 "measured": r["measured"], "cost model": r["model"], "with overheads": loo[m]}
                for m, r in rows.items()]
    return out


def draw(state: dict, pts: list[dict], ax, tau_max: float = 6.0):
    """The model's line for the explorer's settings, its break-even tau, and the measured points,
    each joined to a tick at its own cost-model prediction."""
    import numpy as np
    import pandas as pd
    import seaborn as sns
    taus = np.linspace(1, tau_max, 100)
    line = [predicted_speedup(t, state["verify_cost"], state["draft_cost"], state["overhead"],
                              state["vanilla_step"]) for t in taus]
    ax.plot(taus, line, color="0.2", lw=2,
            label=f"model: c(N)/c(1) = {state['verify_cost']:.2f}, draft = {state['draft_cost']:.2f}"
                  + (f", overhead = {state['overhead']:.2f}, vanilla step = {state['vanilla_step']:.2f}"
                     if state["overhead"] or state["vanilla_step"] != 1 else ""))
    ax.axhline(1, color="black", lw=0.8)
    ax.axvline(state["break_even_tau"], color="0.4", ls=":", lw=1)
    ax.plot([state["tau"]], [state["speedup"]], "*", color="gold", mec="black", ms=16, zorder=5,
            label=f"your setting: tau {state['tau']:.2f} -> {state['speedup']:.2f}x "
                  f"(break-even tau {state['break_even_tau']:.2f})")
    if pts:
        frame = pd.DataFrame(pts)
        palette = dict(zip(frame["run"].unique(), sns.color_palette(n_colors=frame["run"].nunique())))
        for _, p in frame.iterrows():   # a tick at the model's prediction, joined to the measurement
            ax.plot([p["tau"], p["tau"]], [p["cost model"], p["measured"]], color=palette[p["run"]], lw=0.8,
                    alpha=0.6, zorder=1)
            ax.plot([p["tau"]], [p["cost model"]], "_", color=palette[p["run"]], ms=9, mew=1.5, zorder=2)
        sns.scatterplot(data=frame, x="tau", y="measured", hue="run", style="method", palette=palette, ax=ax,
                        s=70, zorder=3)
    ax.set(xlabel="tau (tokens per draft-verify cycle, the papers' tau)", ylabel="speedup over vanilla",
           xlim=(1, tau_max), ylim=(0, max(2.5, state["speedup"] * 1.1)))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return ax


class SpeedupExplorer(Explorer):
    """Notebook 06's controls: tau, the tree size N on a measured cost curve (or c(N)/c(1) by hand),
    the draft cost, and whether to add a run's measured overheads; the figure and the numbers."""

    def __init__(self, curves: dict[str, dict], pts: list[dict], overheads: dict | None = None):
        import ipywidgets as w
        self.curves, self.pts = curves, pts
        self.overheads = overheads or {"overhead": 0.0, "vanilla_step": 1.0}
        style = {"description_width": "150px"}
        wide = w.Layout(width="520px")
        self.tau = w.FloatSlider(value=2.0, min=1.0, max=6.0, step=0.05, description="tau", style=style,
                                 layout=wide)
        self.curve = w.Dropdown(options=[*curves, "by hand"], description="c(N)/c(1) from", style=style)
        self.n = w.IntSlider(value=16, min=1, max=64, description="tree size N", style=style, layout=wide)
        self.verify = w.FloatSlider(value=1.5, min=0.8, max=4.0, step=0.01, description="c(N)/c(1) by hand",
                                    style=style, layout=wide, disabled=True)
        self.draft = w.FloatSlider(value=0.4, min=0.0, max=1.5, step=0.01, description="draft / c(1)",
                                   style=style, layout=wide)
        self.extra = w.Checkbox(value=False, description="add the committed run's measured overheads")
        self.wire(self.tau, w.HBox([self.curve, self.extra]), self.n, self.verify, self.draft,
                  observe=(self.tau, self.curve, self.n, self.verify, self.draft, self.extra))

    def state(self) -> dict:
        by_hand = self.curve.value == "by hand"
        self.verify.disabled, self.n.disabled = not by_hand, by_hand
        extra = self.overheads if self.extra.value else {"overhead": 0.0, "vanilla_step": 1.0}
        return explore(self.tau.value, self.draft.value, curve=self.curves.get(self.curve.value),
                       n=self.n.value, verify_cost=self.verify.value if by_hand else None, **extra)

    def show(self):
        import matplotlib.pyplot as plt
        from IPython.display import Markdown, clear_output, display
        state = self.state()
        with self.output:
            clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(10.5, 4.6), layout="constrained")
            draw(state, self.pts, ax)
            display(fig)
            plt.close(fig)
            verdict = "faster" if state["speedup"] > 1 else "slower"
            display(Markdown(f"c(N)/c(1) = **{state['verify_cost']:.2f}**; predicted speedup "
                             f"**{state['speedup']:.2f}x** ({verdict} than vanilla); this setting breaks "
                             f"even at tau **{state['break_even_tau']:.2f}**."))
