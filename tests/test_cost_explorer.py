"""Notebook 00's cost explorer: a measured curve and the roofline of the same dtype, read at n.

Oracles: `course.roofline_seconds` (the roofline the notebook draws), the curve's own numbers and,
for a real curve, `runtime.cost.cost_curve` on a tiny target.
"""
import math

import pytest

from eagle_mini import tiny_target
from eagle_mini.course import roofline_seconds
from eagle_mini.course.cost_explorer import CostExplorer, reading, roofline_relative
from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.cost import cost_curve

MACHINE = {"bytes_per_s": 2e10, "flops_per_s": 1e11}   # balance 5 FLOP/byte


def run(curve, bytes_per_param):
    params = 1e8
    return {"curve": curve, "weight_bytes": bytes_per_param * params, "flops_per_token": 2 * params,
            **MACHINE}


@pytest.fixture(scope="module")
def curves():
    target = tiny_target("llama", seed=0)
    return {"float32": cost_curve(target, ns=(1, 2, 4, 8), repeats=1, prefix_len=8, progress=False),
            "bfloat16": cost_curve(target, ns=(1, 2, 4, 8), repeats=1, prefix_len=8, progress=False)}


def test_reading_is_the_curve_and_the_roofline_at_n(curves):
    for dtype, b in (("float32", 4), ("bfloat16", 2)):
        r = run(curves[dtype], b)
        for i, n in enumerate(r["curve"]["ns"]):
            got = reading(r, n)
            assert got["measured"] == r["curve"]["relative"][i] and got["ms"] == r["curve"]["median_ms"][i]
            args = (r["weight_bytes"], r["flops_per_token"], MACHINE["bytes_per_s"], MACHINE["flops_per_s"])
            assert got["roofline"] == roofline_seconds(n, *args) / roofline_seconds(1, *args)
            assert math.isclose(got["intensity"], 2 * n / b) and got["balance"] == 5.0
            assert math.isclose(got["n_star"], 5.0 * b / 2)
            assert got["bound"] == ("memory bound" if 2 * n / b < 5.0 else "compute bound")


def test_the_roofline_is_flat_until_n_star_then_linear():
    r = run({"ns": [1], "median_ms": [1.0], "relative": [1.0]}, 4)   # fp32: n* = 10
    assert [roofline_relative(r, n) for n in (1, 5, 10)] == [1.0, 1.0, 1.0]
    assert math.isclose(roofline_relative(r, 20), 2.0)


def test_an_unmeasured_n_and_mismatched_curves_are_refused(curves):
    with pytest.raises(EagleMiniError, match="n must be one of the measured"):
        reading(run(curves["float32"], 4), 3)
    other = {**curves["float32"], "ns": [1, 2]}
    with pytest.raises(EagleMiniError, match="same n"):
        CostExplorer({"float32": run(curves["float32"], 4), "bfloat16": run(other, 2)})


def test_moving_the_first_control_changes_the_reading(curves):
    import matplotlib
    matplotlib.use("Agg")
    ui = CostExplorer({"float32": run(curves["float32"], 4), "bfloat16": run(curves["bfloat16"], 2)})
    first = ui.state()
    assert first["n"] == 4 and first["dtype"] == "float32"
    ui.n.value = 8
    assert ui.state()["n"] == 8 and ui.state()["intensity"] == 2 * first["intensity"]
    ui.dtype.value = "bfloat16"
    assert ui.state()["intensity"] == 4 * first["intensity"] and ui.state()["roofline"] > 1   # b halved: n* = 5
