"""The benchmark in --quick form on a tiny model: every method runs, ratios are consistent."""
import json
import statistics

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.runtime.auto import relative_cost, why_slower
from eagle_mini.measure.bench import bench, markdown_table, save
from eagle_mini.methods import BENCH_DEFAULT as METHODS
from eagle_mini.decode import generate_vanilla
from eagle_mini.heads.eagle1 import new_head


def test_bench_runs_every_method_on_a_tiny_model(tmp_path):
    target = tiny_target("llama", seed=0, vocab_size=64)
    head = new_head(target)
    prompts = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]]
    result = bench(target, head, METHODS, prompts=prompts, max_new_tokens=16, progress=False,
                   curve_repeats=1)
    assert set(result["methods"]) == set(METHODS)
    van = result["methods"]["vanilla"]
    assert abs(van["speedup"] - 1.0) < 1e-9 and van["tau"] == 1.0
    for m in ("eagle-chain", "eagle", "eagle2", "auto", "hf-generate", "hf-compiled"):
        assert result["methods"][m]["equal_to_vanilla"], m
    compiled = result["methods"]["hf-compiled"]   # compiled once, in the warm-up, on one cache
    assert compiled["static_cache_len"] == 256 and compiled["first_call_seconds"] > 0
    assert result["baseline"]["name"] in ("vanilla", "hf-generate", "hf-compiled")
    assert "`hf-compiled`'s first call (compiling, static cache of 256)" in markdown_table(result)
    for m in ("eagle-chain", "eagle", "eagle2", "auto"):
        r = result["methods"][m]
        assert r["tau"] >= 1.0 and r["predicted_speedup"] > 0
        assert abs(r["draft_fraction"] + r["verify_fraction"] + r["other_fraction"] - 1) < 1e-6
    out = save(result, tmp_path)
    assert json.loads((out / "bench.json").read_text())["methods"]["eagle2"]["tau"] >= 1
    assert (out / "bench.png").stat().st_size > 0
    assert "| eagle2 |" in markdown_table(result)
    curve = result["cost_curve"]   # default: 4 rounds, the first before the prompts
    assert curve["rounds"] == 4 and len(curve["rounds_ms"]) == 4 and curve["repeats"] == 4
    assert all(len(s) == 4 for s in curve["samples_ms"])
    assert curve["median_ms"][0] == statistics.median(curve["samples_ms"][0])
    assert "in 4 rounds spread over the run" in markdown_table(result)
    assert result["kernels"] is None  # a tiny target built in memory: nobody chose its kernels
    from eagle_mini.runtime.kernels import use_kernels
    result["kernels"] = use_kernels(target, "stock")
    assert "stock kernels (asked for)" in markdown_table(result).splitlines()[0]


def test_pooled_cost_curve_rejects_rounds_of_other_sizes():
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.measure.bench import curve_round_points
    from eagle_mini.runtime.cost import pool_cost_curves
    a = {"ns": [1, 2], "prefix_len": 8, "samples_ms": [[1.0], [2.0]], "median_ms": [1.0, 2.0]}
    with pytest.raises(EagleMiniError, match="same sizes"):
        pool_cost_curves([a, {**a, "ns": [1, 4]}])
    with pytest.raises(EagleMiniError, match="at least one round"):
        curve_round_points(10, 0)
    assert curve_round_points(3, 4) == {1, 2, 3}


def test_relative_cost_interpolates_the_curve():
    curve = {"ns": [1, 2, 4], "relative": [1.0, 1.2, 2.0]}
    assert relative_cost(curve, 1) == 1.0 and relative_cost(curve, 3) == 1.6
    assert relative_cost(curve, 8) == 4.0


def test_why_slower_reads_break_even_tau_off_the_curve():
    # c(1) = 10 ms; a 4-token tree costs 2.0x; drafting 4 ms per cycle is 0.4x: break-even tau 2.4
    curve = {"ns": [1, 2, 4], "relative": [1.0, 1.5, 2.0], "median_ms": [10.0, 15.0, 20.0]}
    stats = {"cycle_lengths": [2, 1, 3, 2], "draft_seconds": 0.016}
    line = why_slower([stats], curve, 4, 0.8)
    assert "costs 2.00x one token" in line and "drafting 0.40x" in line
    assert "must accept 2.40 tokens" in line and "tau 2.00" in line and "outside" not in line
    # rounds pool: tau over every cycle, draft time over every cycle
    two = why_slower([stats, {"cycle_lengths": [4, 4], "draft_seconds": 0.008}], curve, 4, 0.8)
    assert "tau 2.67" in two and "drafting 0.40x" in two
    # tau above break-even but still slower: the gap is time the cost model does not see
    high = {**stats, "cycle_lengths": [3, 3, 3, 3]}
    assert "outside the draft and verify forwards" in why_slower([high], curve, 4, 0.9)


def test_results_json_writes_rates_with_nothing_to_count_as_null():
    from eagle_mini.results import results_json
    text = results_json({"alpha": [0.5, float("nan")], "nested": [{"x": float("inf")}], "n": 3})
    strict = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert strict == {"alpha": [0.5, None], "nested": [{"x": None}], "n": 3}


def test_a_mismatch_reports_how_many_prompts_and_tokens_still_agree():
    from eagle_mini.measure.bench import summarize
    stats = [{"new_tokens": 4, "seconds": 1.0, "target_forwards": 4}] * 2
    vanilla = [[1, 2, 3, 4], [5, 6, 7, 8]]
    row = summarize("hf-generate", stats, [[1, 2, 3, 4], [5, 6, 9, 9]], vanilla, 4.0, {}, 0.0, None)
    assert row["equal_to_vanilla"] is False and row["identical_prompts"] == 1
    assert row["prefix_agreement"] == 6 / 8
    assert "identical_prompts" not in summarize("hf-generate", stats, vanilla, vanilla, 4.0, {}, 1.0, None)


def test_first_difference_margin_is_the_logit_gap_where_texts_part():
    from eagle_mini.measure.bench import first_difference_margins, vanilla_top2_gaps
    target = tiny_target("llama", seed=3, vocab_size=64)
    prompts = [[5, 9, 2, 7], [1, 3, 3, 8, 6]]
    vanilla = [generate_vanilla(target, p, max_new_tokens=8).output_ids for p in prompts]
    gaps = vanilla_top2_gaps(target, prompts, vanilla)
    assert len(gaps) == sum(map(len, vanilla)) and min(gaps) >= 0
    assert first_difference_margins(target, prompts, vanilla, vanilla, gaps) is None
    # the second prompt's text takes the runner-up at position 3: the margin is the top-2 gap there
    ids = prompts[1] + vanilla[1][:3]
    with torch.no_grad():
        top = target.model(torch.tensor([ids])).logits[0, -1].topk(2)
    parted = vanilla[1][:3] + [int(top.indices[1])] + vanilla[1][4:]
    d = first_difference_margins(target, prompts, [vanilla[0], parted], vanilla, gaps)
    assert d["margins"] == pytest.approx([float(top.values[0] - top.values[1])], abs=1e-5)
    assert d["margins"][0] > 0 and 0 < d["share_of_vanilla_gaps_at_most_margin"][0] <= 1


def test_bench_runs_eagle3_beside_eagle2_each_with_its_own_head():
    """`bench --methods ...,eagle3`: the EAGLE-2 tree drafted by an EAGLE-3 head, still lossless."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    target = tiny_target("llama", seed=3, vocab_size=48, num_hidden_layers=4)
    heads = {"eagle1": new_head(target), "eagle3": new_eagle3_head(target, warm_start=False)}
    result = bench(target, heads, ("vanilla", "eagle2", "eagle3"), prompts=[[1, 2, 3], [4, 5, 6, 7]],
                   max_new_tokens=12, progress=False, curve_repeats=1)
    for m in ("eagle2", "eagle3"):
        r = result["methods"][m]
        assert r["equal_to_vanilla"] and r["tau"] >= 1.0 and r["predicted_speedup"] > 0, m
    with pytest.raises(Exception, match="unknown method"):
        bench(target, heads, ("eagle4",), prompts=[[1, 2]], progress=False)


def test_an_exact_bench_also_times_stock_vanilla_and_holds_eagle_to_the_faster():
    from eagle_mini.runtime.exact import make_exact
    from eagle_mini.measure.bench import STOCK_VANILLA, baseline
    target = tiny_target("llama", seed=0, dtype="bf16", vocab_size=64)
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    head = new_head(target)
    result = bench(target, head, ["vanilla", "eagle2"], prompts=[[1, 2, 3], [4, 5, 6, 7]],
                   max_new_tokens=8, progress=False, curve_repeats=1, curve_rounds=1)
    stock = result["stock_vanilla"]
    assert stock["new_tokens"] == result["methods"]["vanilla"]["new_tokens"]
    assert target.exact is record   # switched back after every stock generation
    faster = max(stock["tokens_per_second"], result["methods"]["vanilla"]["tokens_per_second"])
    assert result["baseline"]["tokens_per_second"] == faster
    eagle2 = result["methods"]["eagle2"]["tokens_per_second"]
    assert result["baseline"]["speedups"]["eagle2"] == pytest.approx(eagle2 / faster)
    assert "Vanilla on the stock forward" in markdown_table(result)
    sampled = {**result, "temperature": 1.0, "stock_vanilla": {   # T > 0: no text to compare
        k: v for k, v in stock.items() if k not in ("identical_prompts", "prefix_agreement")}}
    sampled["stock_vanilla"]["equal_to_vanilla"] = None
    assert "tok/s (samples)" in markdown_table(sampled)
    slow = {**result, "stock_vanilla": {**stock, "tokens_per_second": faster * 2}}
    assert baseline(slow)["name"] == STOCK_VANILLA   # the faster one is the baseline
    stock_target = tiny_target("llama", seed=0, vocab_size=64)   # fp32: no exact mode, no extra row
    plain = bench(stock_target, new_head(stock_target), ["vanilla"], prompts=[[1, 2, 3]],
                  max_new_tokens=4, progress=False, curve_repeats=1, curve_rounds=1)
    assert "stock_vanilla" not in plain and plain["baseline"]["name"] == "vanilla"


def test_the_compiled_peer_runs_hugging_faces_stock_model_and_puts_the_runtime_back(monkeypatch):
    """hf-compiled is what a learner compiles: exact mode's edits suspended and the stock matmul
    kernels during its `generate`, the target's runtime as it was after; HF's own static-cache
    compile route on a CPU (`_compile_all_devices`), the cache one size for the whole call."""
    from eagle_mini.runtime.exact import make_exact
    from eagle_mini.runtime.exact.attention import ATTENTION
    from eagle_mini.runtime.packed import available, pack_linears, packed_kind
    from eagle_mini.runtime.run import run_method
    target = tiny_target("llama", seed=0, dtype="bf16", vocab_size=64)
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    kind = "onednn" if available(torch.bfloat16, "onednn") else None
    if kind:
        pack_linears(target.model, kind)
    seen = {}

    def generate(ids, **kw):
        seen.update(exact=target.runtime.is_exact, kind=packed_kind(target.model),
                    attention=target.model.config._attn_implementation, **kw)
        return torch.cat([ids, torch.tensor([[7, 8, 9]])], dim=1)
    monkeypatch.setattr(target.model, "generate", generate)
    gen = run_method(target, None, "hf-compiled", [1, 2, 3], 3)
    assert seen["exact"] is False and seen["kind"] is None and seen["attention"] != ATTENTION
    assert seen["cache_implementation"] == "static" and seen["max_cache_len"] == 256
    assert seen["compile_config"]._compile_all_devices and "compiled" not in seen
    assert target.runtime.exact is record and packed_kind(target.model) == kind
    assert gen.output_ids == [7, 8, 9] and gen.stats["target_forwards"] == 3
    run_method(target, None, "hf-compiled", [1, 2, 3], 3, options={"max_cache_len": 1024})
    assert seen["max_cache_len"] == 1024   # the bench sizes one cache for its longest prompt


def test_a_bench_without_eagle_methods_plots_without_a_legend_warning(tmp_path):
    """No EAGLE method, no cycles to plot: the panel says so instead of asking matplotlib for an
    empty legend (which warns)."""
    import warnings
    target = tiny_target("llama", seed=0, vocab_size=64)
    result = bench(target, new_head(target), ["vanilla"], prompts=[[1, 2, 3]], max_new_tokens=4,
                   progress=False, curve_repeats=1, curve_rounds=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = save(result, tmp_path)
    assert (out / "bench.png").stat().st_size > 0


def test_a_compile_that_fails_here_leaves_its_row_out_in_one_line(monkeypatch, capsys):
    """Without a working C++ compiler inductor fails on the first call: the bench says so in one
    line, records why, and runs the rest."""
    import eagle_mini.runtime.run as run

    def no_compiler(device):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")
    monkeypatch.setattr(run, "compile_options", no_compiler)
    target = tiny_target("llama", seed=0, vocab_size=64)
    result = bench(target, new_head(target), ["vanilla", "hf-compiled", "eagle2"],
                   prompts=[[1, 2, 3]], max_new_tokens=4, progress=False, curve_repeats=1,
                   curve_rounds=1)
    assert list(result["methods"]) == ["vanilla", "eagle2"]
    assert result["not_run"]["hf-compiled"].endswith("No working C++ compiler found")
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("hf-compiled")] == [
        "hf-compiled: not run, its compile failed here: RuntimeError: InvalidCxxCompiler: "
        "No working C++ compiler found"]
