"""`profile-target --by-op`: a forward's time split by op family. Oracle: the families and the time
outside ops add up to the wall time, and the matmuls of a bigger n are never cheaper by much."""
import torch

from eagle_mini import tiny_target
from eagle_mini.measure.profile import OP_FAMILIES, op_breakdown, op_family


def test_families_and_time_outside_ops_add_up_to_the_wall_time():
    torch.manual_seed(0)
    target = tiny_target()
    r = op_breakdown(target, ns=(1, 2, 16), prefix_len=8, repeats=3, warmup=1)
    assert [x["n"] for x in r["by_n"]] == [1, 2, 16]
    for x in r["by_n"]:
        fam = x["family_ms"]
        assert fam["matmul"] > 0 and fam["attention"] > 0 and set(fam) <= set(OP_FAMILIES) | {
            "other ops", "outside ops"}
        assert sum(fam.values()) >= 0.99 * x["wall_ms"]      # nothing lost; the rest is outside ops
        assert max(x["top_ops_ms"].values()) <= sum(fam.values())


def test_op_names_map_to_families_by_their_base_name():
    assert op_family("aten::addmm") == op_family("mkl::_mkl_linear") == "matmul"
    assert op_family("aten::select") == "copies and cache"   # not "le" or "eq" by substring
    assert op_family("aten::unsqueeze") == "copies and cache"
    assert op_family("aten::tril") == "mask and positions"
    assert op_family("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention"
    assert op_family("ProfilerStep#1") == "other ops"


def test_cheap_until_stops_at_the_first_n_over_the_limit_even_if_a_later_one_dips_back():
    from eagle_mini.runtime.cost import CHEAP, cheap_until
    curve = {"ns": [1, 2, 4, 8, 16], "relative": [1.0, 0.9, 1.3, 1.1, 2.0]}
    assert cheap_until(curve) == 2                     # n = 8 dips under 1.25 but n = 4 did not
    assert cheap_until(curve, limit=1.35) == 8
    assert cheap_until({"ns": [1, 2], "relative": [1.0, CHEAP]}) == 1   # the limit itself is not cheap


def test_the_profilers_own_start_and_stop_lines_are_not_printed(capfd):
    """Kineto writes "USDT ... profiler_start" lines to file descriptor 2 below Python: the
    breakdown silences them, and what Python prints afterwards still shows."""
    op_breakdown(tiny_target(), ns=(1,), prefix_len=8, repeats=1, warmup=0)
    import sys
    print("still here", file=sys.stderr)
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err and "still here" in err
