"""Notebook 06's speedup explorer: the cost model as one formula, its inputs read from the
committed bench runs, and the walk from the model to the measurement.

Oracles: `runtime.auto.predict` (the model `bench` prints), each bench file's own
`predicted_speedup` and `speedup`, and the numbers notebook 06 computes from the file.
"""
import json
import math

import pytest

from eagle_mini.course.predictions import check_prediction
from eagle_mini.course.speedup_explorer import (SpeedupExplorer, bench_runs, break_even_tau, cost_curves,
                                                explore, gap_steps, leave_one_out, method_costs, points,
                                                predicted_speedup)
from eagle_mini.errors import EagleMiniError
from eagle_mini.course.student_repo import ROOT
from eagle_mini.runtime.auto import predict, relative_cost


@pytest.fixture(scope="module")
def runs():
    return bench_runs()


def counted_cycles(r):
    return [int(k) for k, v in r["cycle_length_counts"].items() for _ in range(v)]


def test_the_formula_is_tau_over_verify_plus_draft():
    assert predicted_speedup(2.0, 1.6, 0.4) == 1.0
    assert predicted_speedup(3.0, 1.0, 0.5) == 2.0
    assert predicted_speedup(3.0, 1.0, 0.5, overhead=0.5, vanilla_step=0.5) == 0.75
    for verify, draft, extra, step in [(1.6, 0.4, 0.0, 1.0), (1.2, 0.1, 0.3, 0.9)]:
        tau = break_even_tau(verify, draft, extra, step)
        assert math.isclose(predicted_speedup(tau, verify, draft, extra, step), 1.0)


def test_the_formula_reproduces_predict_and_every_bench_files_prediction(runs):
    """With the mean of the bench's cycle counts as tau (what `predict` reads), the formula is
    `predict` and the file's `predicted_speedup`, for every EAGLE method of every committed run."""
    assert {"float32 T=0", "float32 T=1", "bfloat16 T=0"} <= set(runs)
    for bench in runs.values():
        curve, c1 = bench["cost_curve"], bench["cost_curve"]["median_ms"][0] / 1000
        for name, row in method_costs(bench).items():
            r = bench["methods"][name]
            cycles = counted_cycles(r)
            mean = sum(cycles) / len(cycles)
            draft = r["draft_fraction"] * r["seconds"] / len(cycles) / c1
            stats = [{"cycle_lengths": cycles, "draft_seconds": r["draft_fraction"] * r["seconds"]}]
            ours = predicted_speedup(mean, relative_cost(curve, r["tree_size"]), draft)
            assert math.isclose(ours, predict(stats, curve, r["tree_size"]), rel_tol=1e-12)
            assert math.isclose(ours, r["predicted_speedup"], rel_tol=1e-9)
            assert row["tau"] == r["tau"] and math.isclose(row["draft_cost"], draft)
            assert math.isclose(row["model"], predicted_speedup(r["tau"], row["verify_cost"], draft))


def test_notebook_06s_bound_table_numbers(runs):
    """The committed runs, as notebook 06 tabulates its core run (bf16 in exact mode): c(N)/c(1)
    off the run's own curve, break-even tau = c(N)/c(1) + draft / c(1), and the model beside the
    file's prediction."""
    for label in ("bfloat16 T=0 exact", "float32 T=0"):
        bench = runs[label]
        rows = method_costs(bench)
        assert set(rows) == {"eagle-chain", "eagle", "eagle2", "auto", "eagle3"}, label
        for name, row in rows.items():
            r = bench["methods"][name]
            assert row["verify_cost"] == relative_cost(bench["cost_curve"], r["tree_size"])
            state = explore(row["tau"], row["draft_cost"], bench["cost_curve"], r["tree_size"])
            assert math.isclose(state["speedup"], row["model"])
            assert math.isclose(state["break_even_tau"], row["verify_cost"] + row["draft_cost"])
            assert abs(row["model"] - r["predicted_speedup"]) < 0.02   # papers' tau vs uncut cycle counts


def test_gap_steps_start_at_the_model_and_end_at_the_measurement(runs):
    for bench in runs.values():
        for name, row in method_costs(bench).items():
            steps = gap_steps(row)
            assert steps[0] == ("cost model", row["model"])
            assert math.isclose(steps[-1][1], bench["methods"][name]["speedup"], rel_tol=1e-9), name


def test_notebook_06s_predict_answer_is_the_break_even_on_the_curve_it_prints(runs):
    """Notebook 06's predict-then-run question is graded on the curve the notebook prints, the core
    run's own: its stored answer is c(16)/c(1) on that curve plus EAGLE-2's draft cost. A re-measured
    run changes it; store the new one in the predict cell's metadata."""
    from eagle_mini.course.assignments import numbered_notebooks
    notebook = json.loads(numbered_notebooks()["06_speedups"].read_text())
    stored = [c["metadata"]["eagle_mini"]["answer"] for c in notebook["cells"]
              if "answer" in c["metadata"].get("eagle_mini", {})]
    name = "bench_smollm2-135m_cpu_bf16_exact_mtbench_T0_fastest"   # the headline run, its core
    bench = json.loads((ROOT / "data" / "results" / name / "bench.json").read_text())
    answer = break_even_tau(relative_cost(bench["cost_curve"], 16), method_costs(bench)["eagle2"]["draft_cost"])
    assert stored == [[f"**{answer:.2f}**"]]
    source = "\n".join("".join(c["source"]) for c in notebook["cells"])
    assert f'"{name}"' in source and "cost_curve_smollm2" not in source


def test_the_model_over_predicts_every_fp32_greedy_method_and_overheads_close_most_of_the_gap(runs):
    """On the committed fp32 greedy run, the course's reference: every method measured below its
    cost model; adding the overhead measured on the *other* methods lands each closer to its
    measurement. (Not asserted for the T=1 run: its cost curve, pooled over rounds spread across
    the run, has a steeper c(16)/c(1) than the greedy run's single round at its start, on the same
    machine, and with it the model under-predicts some methods; notebook 06b's appendix A prints the
    spread over all runs.)"""
    for label in ("float32 T=0",):
        rows = method_costs(runs[label])
        loo = leave_one_out(rows)
        for name, row in rows.items():
            assert row["measured"] < row["model"], (label, name)
            assert abs(loo[name] - row["measured"]) < abs(row["model"] - row["measured"]), (label, name)
            assert row["overhead"] > 0 and row["vanilla_step"] > 0


def test_explore_reads_the_curve_or_takes_a_cost_by_hand():
    curves = cost_curves()
    assert "float32" in curves
    fp32 = curves["float32"]
    state = explore(2.0, 0.4, fp32, n=16)
    assert state["verify_cost"] == relative_cost(fp32, 16)
    assert explore(2.0, 0.4, verify_cost=1.6)["speedup"] == 1.0


def test_points_cover_every_eagle_method_of_every_run(runs):
    pts = points(runs)
    assert len(pts) == sum(len(method_costs(b)) for b in runs.values())
    assert all(p["measured"] == runs[p["run"]]["methods"][p["method"]]["speedup"] for p in pts)


def test_check_prediction_never_raises_and_says_how_close():
    assert check_prediction(2.0, 2.1, 0.15).within
    assert not check_prediction(1.0, 2.1, 0.15).within
    assert check_prediction(1.9, 2.0, 0.1, relative=True).within
    assert "No prediction" in check_prediction(None, 2.0, 0.1).markdown("break-even tau")
    assert "outside" in check_prediction(5, 2.0, 0.1).markdown("x")


def test_widget_moves_change_the_prediction(runs):
    import matplotlib
    matplotlib.use("Agg")
    ui = SpeedupExplorer(cost_curves(), points(runs))
    first = ui.state()
    ui.tau.value = 3.0
    assert ui.state()["speedup"] > first["speedup"]
    ui.curve.value = "by hand"
    ui.verify.value = 1.0
    ui.draft.value = 0.0
    assert ui.state()["speedup"] == 3.0 and ui.n.disabled and not ui.verify.disabled


def test_bench_runs_label_a_reduced_precision_run_apart_and_refuse_a_clash(tmp_path):
    def write(name, machine, **more):
        d = tmp_path / "data" / "results" / name
        d.mkdir(parents=True)
        (d / "bench.json").write_text(json.dumps({"dtype": "float32", "temperature": 0.0,
                                                  "machine": machine, **more}))

    write("bench_a", {"cpu": "x"})
    write("bench_b", {"cpu": "x", "fp32_matmul_precision": "medium"})
    write("bench_d", {"cpu": "x"}, dataset="humaneval")    # other prompts: a run of its own
    write("bench_e", {"cpu": "x"}, methods={"vanilla": {}, "hf-compiled": {}})   # another peer
    assert set(bench_runs(tmp_path / "data" / "results")) == {
        "float32 T=0", "float32 T=0 matmul medium", "float32 T=0 humaneval",
        "float32 T=0 with hf-compiled"}
    write("bench_c", {"cpu": "y"})
    with pytest.raises(EagleMiniError, match="share the label"):
        bench_runs(tmp_path / "data" / "results")
