"""Timings check the machine: a busy machine (load average or slow rounds) is said in one line, and
the demo times its methods in interleaved rounds, reported as the bench pools them."""
import pytest

from eagle_mini.cli.decode import demo_lines
from eagle_mini.measure.bench import interleaved, pooled
from eagle_mini.measure.load import (LOAD_SLACK, SLOW_ROUND, LoadWatch, curve_rounds, judge,
                                     overloaded, slow_rounds, warning)


@pytest.mark.parametrize("load, cores, busy", [
    (0.3, 2, False), (2.0, 2, False),                  # a run using every core holds the load there
    (2.0 + LOAD_SLACK, 2, False), (2.0 + LOAD_SLACK + 0.01, 2, True),
    (7.5, 2, True), (12.0, 16, False), (17.0, 16, True),
    (None, 2, False),                                  # no load average (Windows): no verdict
])
def test_the_load_average_is_busy_only_above_the_usable_cores(load, cores, busy):
    assert overloaded(load, cores) is busy


def test_a_round_well_above_its_series_median_is_slow():
    times = {"vanilla": [1.0, 1.05, 0.98], "eagle2": [0.8, 0.8 * SLOW_ROUND + 0.01, 0.8],
             "auto": [0.5], "steady": [1.0, 1.0 * SLOW_ROUND, 1.0]}   # at the factor: not slow
    assert slow_rounds(times) == {"eagle2": {"slow": 1, "of": 3}}
    # a tail of several slow rounds is counted whole
    assert slow_rounds({"c": [1.0, 1.0, 1.0, 2.0, 2.5]}) == {"c": {"slow": 2, "of": 5}}


def test_either_sign_makes_the_machine_busy_and_the_warning_says_which():
    quiet = judge(before=0.4, after=1.9, cores=2, rounds={"vanilla": [1.0, 1.1, 1.0]}, threads=2)
    assert quiet["busy"] is False and warning(quiet) is None
    assert quiet["load_average"] == {"before": 0.4, "after": 1.9} and quiet["cores"] == 2

    loaded = judge(before=0.4, after=6.2, cores=2, rounds={"vanilla": [1.0, 1.1, 1.0]})
    line = warning(loaded)
    assert loaded["busy"] and "\n" not in line and line.startswith("eagle-mini: warning: ")
    assert "load average 6.2 on 2 usable cores" in line and "unreliable" in line
    assert "rounds" not in line

    slow = judge(before=0.4, after=0.5, cores=2, rounds={"auto": [1.0, 1.0, 4.0]})
    line = warning(slow)
    assert slow["busy"] and "auto: 1 of 3 rounds" in line and "load average" not in line

    mine = judge(before=0.4, after=9.0, cores=2, threads=8)   # oversubscribed by this run itself
    assert "asks for 8 torch threads" in warning(mine)


def test_the_watch_records_this_machine_in_results_json():
    import json
    from eagle_mini.results import results_json
    record = LoadWatch().check({"vanilla": [1.0, 1.0]})
    assert record["cores"] >= 1 and record["torch_threads"] >= 1
    assert set(record["load_average"]) == {"before", "after"}
    assert json.loads(results_json(record)) == record


def test_cost_curve_rounds_are_summed_round_by_round():
    one_run = {"samples_ms": [[1.0, 1.0, 9.0], [2.0, 2.0, 2.0]]}      # per size, per repeat
    assert curve_rounds(one_run) == [3.0, 3.0, 11.0]
    assert slow_rounds({"cost curve": curve_rounds(one_run)}) == {"cost curve": {"slow": 1, "of": 3}}
    pooled_curve = {**one_run, "rounds_ms": [[1.0, 2.0], [1.5, 2.5]]}  # a bench's pooled rounds
    assert curve_rounds(pooled_curve) == [3.0, 4.0]


def fake_stats(tokens, seconds, cycles=None, tree=None, draft=0.0):
    s = {"new_tokens": tokens, "seconds": seconds,
         "target_forwards": 1 + (len(cycles) if cycles else tokens - 1)}
    if cycles is not None:
        s.update(cycle_lengths=cycles, draft_seconds=draft, tree=tree)
    return s


def test_the_demos_rounds_interleave_its_methods_like_the_bench():
    """The demo calls the bench's `interleaved` with its prompt once per round: every method runs
    once per round, the order rotating, so a slow moment of the machine hits each alike."""
    calls = []

    def run(method, prompt, i):
        calls.append((i, method))
        return [7, 8], fake_stats(2, 1.0)
    rows, outputs, extra = interleaved(run, ("vanilla", "eagle2", "auto"), ["Why?"] * 3)
    assert [m for _, m in calls] == ["vanilla", "eagle2", "auto", "eagle2", "auto", "vanilla",
                                     "auto", "vanilla", "eagle2"]
    assert [i for i, _ in calls] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert {m: len(r) for m, r in rows.items()} == {"vanilla": 3, "eagle2": 3, "auto": 3}
    assert outputs["auto"] == [[7, 8]] * 3 and extra == []


def test_the_demo_reports_each_method_pooled_over_its_rounds_against_vanilla():
    curve = {"ns": [1, 2, 4, 8], "relative": [1.0, 1.5, 2.0, 3.0], "median_ms": [10.0] * 4}
    tree = "chain:3"
    rows = {  # vanilla 10 tok/s pooled; eagle2 20 tok/s; auto 8 tok/s (slower: explained)
        "vanilla": [fake_stats(10, 1.0), fake_stats(10, 1.0), fake_stats(10, 1.0)],
        "eagle2": [fake_stats(10, 0.4, [3, 3, 3], tree), fake_stats(10, 0.6, [3, 3, 3], tree),
                   fake_stats(10, 0.5, [3, 3, 3], tree)],
        "auto": [fake_stats(10, 1.25, [2, 2, 2, 2, 1], tree, 0.01)] * 3}
    same = [[1, 2, 3]] * 3
    outputs = {"vanilla": same, "eagle2": same, "auto": same[:2] + [[1, 2, 4]]}
    lines = demo_lines(rows, outputs, {"eagle2": tree, "auto": tree}, curve)
    van, eagle2, auto, why = lines
    assert "10.0 tok/s" in van and "3 rounds pooled" in van
    assert "20.0 tok/s" in eagle2 and "speedup over vanilla 2.00x" in eagle2
    assert "identical text: True" in eagle2 and "tau 3.00" in eagle2
    # one round's text parting from vanilla's is reported, not averaged away
    assert "identical text: False" in auto and "speedup over vanilla 0.80x" in auto
    assert why.startswith("why auto is slower than vanilla here: 0.80x because")
    # every speedup printed names its baseline
    assert all("speedup over vanilla" in line for line in lines if "speedup" in line)
    assert pooled(rows["eagle2"])["tokens_per_second"] == 20.0


def test_the_demo_holds_eagle_to_the_fastest_vanilla_it_measured_and_names_it():
    """Beside exact vanilla the demo times the stock forward and HF compiled: each EAGLE line then
    gives its speedup over vanilla (the lossless pair) and over the fastest of those, named."""
    from eagle_mini.measure.bench import STOCK_VANILLA
    curve = {"ns": [1, 2, 4, 8], "relative": [1.0, 1.5, 2.0, 3.0], "median_ms": [10.0] * 4}
    tree = "chain:3"
    rows = {"vanilla": [fake_stats(10, 1.0)], STOCK_VANILLA: [fake_stats(10, 0.8)],
            "hf-compiled": [fake_stats(10, 0.5)],   # 20 tok/s: the fastest vanilla
            "eagle2": [fake_stats(10, 0.4, [3, 3, 3], tree)],
            "eagle2+lookup": [fake_stats(10, 0.25, [4, 4, 2], tree)]}
    same = [[1, 2, 3]]
    outputs = {"vanilla": same, STOCK_VANILLA: same, "hf-compiled": [[1, 2, 4]], "eagle2": same,
               "eagle2+lookup": same}
    van, stock, compiled, eagle2, hybrid = demo_lines(
        rows, outputs, {"eagle2": tree, "eagle2+lookup": tree}, curve,
        {"hf-compiled": 41.6, STOCK_VANILLA: 0.2})
    assert hybrid.startswith("EAGLE-2+lookup : 10 tokens, 40.0 tok/s")
    assert "over the fastest vanilla (hf-compiled) 2.00x" in hybrid
    assert "12.5 tok/s" in stock and "same text as vanilla: True" in stock and "compil" not in stock
    assert "20.0 tok/s" in compiled and "same text as vanilla: False" in compiled
    assert "first call, compiling, took 42 s, not timed" in compiled
    assert "speedup over vanilla 2.50x, over the fastest vanilla (hf-compiled) 1.25x" in eagle2
    alone = demo_lines({m: rows[m] for m in ("vanilla", "eagle2")}, outputs, {"eagle2": tree}, curve)
    assert "fastest vanilla" not in alone[1]   # vanilla is the only one: no second ratio
