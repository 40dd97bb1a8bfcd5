"""Notebook 00's cost explorer: the learner's own cost curves c(n)/c(1), one per dtype, read at any
measured n beside the roofline of the same machine and dtype (EAGLE §1; the roofline model).

Each dtype comes with what the notebook measured on the learner's machine: its curve
(`runtime.cost.cost_curve`), the bytes its weights take and the FLOPs of one token, the copy
bandwidth B and that dtype's matmul rate F. At n new tokens the roofline forward takes
`course.roofline_seconds(n, ...)`: flat while the intensity 2n/b FLOP/byte is below the balance
F/B, linear after n* = (F/B)(b/2). The explorer puts the measured ratio beside the roofline's; the
gap is what the roofline leaves out (small-matmul rates, attention, logits, per-operation cost).

    >>> run = {"curve": {"ns": [1, 2], "median_ms": [10.0, 12.0], "relative": [1.0, 1.2]},
    ...        "weight_bytes": 4e8, "flops_per_token": 2e8, "bytes_per_s": 1e10, "flops_per_s": 1e11}
    >>> r = reading(run, 2)
    >>> r["measured"], r["roofline"], r["bound"]
    (1.2, 1.0, 'memory bound')

Left out: the KV cache's bytes, and curves other dtypes would give on other kernels.
"""
from eagle_mini.course import roofline_seconds
from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError


def roofline_relative(run: dict, n: int) -> float:
    """The roofline's c(n)/c(1) for one dtype's weights, FLOPs, B and F."""
    roof = (run["weight_bytes"], run["flops_per_token"], run["bytes_per_s"], run["flops_per_s"])
    return roofline_seconds(n, *roof) / roofline_seconds(1, *roof)


def reading(run: dict, n: int) -> dict:
    """One dtype's curve and roofline at a measured n: the measured c(n)/c(1) and ms, the
    roofline's c(n)/c(1), the intensity I(n) in FLOP/byte, the balance F/B, n* and which bound
    the roofline says holds."""
    curve = run["curve"]
    if n not in curve["ns"]:
        raise EagleMiniError(f"n must be one of the measured {curve['ns']}, got {n}")
    i = curve["ns"].index(n)
    intensity = n * run["flops_per_token"] / run["weight_bytes"]
    balance = run["flops_per_s"] / run["bytes_per_s"]
    return {"n": n, "measured": curve["relative"][i], "ms": curve["median_ms"][i],
            "roofline": roofline_relative(run, n),
            "intensity": intensity, "balance": balance,
            "n_star": balance * run["weight_bytes"] / run["flops_per_token"],
            "bound": "memory bound" if intensity < balance else "compute bound"}


def draw(runs: dict[str, dict], dtype: str, n: int, ax):
    """Every dtype's measured curve (the chosen one bold), the chosen dtype's roofline, and n."""
    run = runs[dtype]
    ns = run["curve"]["ns"]
    dense = list(range(1, max(ns) + 1))
    for name, other in runs.items():
        if name != dtype:
            ax.plot(other["curve"]["ns"], other["curve"]["relative"], "o-", color="0.75", lw=1,
                    label=f"{name}, measured here")
    ax.plot(dense, [roofline_relative(run, m) for m in dense], "k--", lw=1, label=f"{dtype} roofline (this machine's B and {dtype} F)")
    ax.plot(ns, run["curve"]["relative"], "o-", color="C0", lw=2, label=f"{dtype}, measured here")
    r = reading(run, n)
    ax.plot([n], [r["measured"]], "*", color="gold", mec="black", ms=16, zorder=5,
            label=f"n = {n}: c(n)/c(1) = {r['measured']:.2f}")
    ax.axhline(1, color="gray", lw=1, ls=":")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="new tokens per forward, n", ylabel="c(n) / c(1)",
           title=f"SmolLM2-135M in {dtype} on this machine: measured and roofline")
    ax.legend(fontsize=8, loc="upper left")
    return ax


class CostExplorer(Explorer):
    """Notebook 00's controls: n (a slider over the measured n, the first control) and the dtype;
    the curves, the roofline and one sentence reading them at n."""

    def __init__(self, runs: dict[str, dict], n: int | None = None):
        import ipywidgets as w
        self.runs = runs
        ns = next(iter(runs.values()))["curve"]["ns"]
        if any(r["curve"]["ns"] != ns for r in runs.values()):
            raise EagleMiniError("every dtype's curve must be measured at the same n")
        self.n = w.SelectionSlider(options=ns, value=n if n in ns else ns[min(2, len(ns) - 1)],
                                   description="new tokens n", style={"description_width": "120px"},
                                   layout=w.Layout(width="520px"))
        self.dtype = w.ToggleButtons(options=list(runs), description="dtype",
                                     style={"description_width": "120px"})
        self.wire(self.n, self.dtype)

    def state(self) -> dict:
        return {"dtype": self.dtype.value, **reading(self.runs[self.dtype.value], self.n.value)}

    def show(self):
        import matplotlib.pyplot as plt
        from IPython.display import Markdown, clear_output, display
        s = self.state()
        with self.output:
            clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
            draw(self.runs, s["dtype"], s["n"], ax)
            display(fig)
            plt.close(fig)
            display(Markdown(
                f"**{s['dtype']}, n = {s['n']}**: measured c(n)/c(1) = **{s['measured']:.2f}** "
                f"({s['ms']:.1f} ms); the roofline says **{s['roofline']:.2f}**. Intensity "
                f"{s['intensity']:.1f} FLOP/byte against a balance F/B of {s['balance']:.1f}: "
                f"{s['bound']}, flat until n* ~ {s['n_star']:.0f}."))
