"""Notebook 02's seed explorer: the committed ablation pooled over its first k seeds.

Oracles: the committed `data/results/uncertainty.json` (its summary and checks, written by
`experiment uncertainty`) for all seeds, and `ablation.summarize` / `paper_checks` called on a run
cut by hand for fewer.
"""
import json
import math
from pathlib import Path

import pytest

from eagle_mini.course.seed_explorer import SeedExplorer, first_seeds, seed_count, view
from eagle_mini.errors import EagleMiniError
from eagle_mini.experiments.ablation import paper_checks, summarize

FULL = Path(__file__).resolve().parents[1] / "data" / "results" / "uncertainty.json"


@pytest.fixture(scope="module")
def full():
    return json.loads(FULL.read_text())


def test_all_seeds_give_the_committed_summary_and_checks(full):
    n = seed_count(full)
    assert n == full["config"]["seeds"] >= 2
    v = view(full, n)
    assert v["summary"] == full["summary"]
    assert [(c["claim"], c["holds"], c["ours"]) for c in v["checks"]] == \
        [(c["claim"], c["holds"], c["ours"]) for c in full["checks"]]


def test_one_seed_is_that_seeds_own_figure_and_the_package_pools_a_cut_run(full):
    v = view(full, 1)
    for metric in ("top1", "alpha1", "tau"):
        for name, s in full["summary"][metric].items():
            assert math.isclose(v["summary"][metric][name]["estimate"], s["seeds"][0], rel_tol=1e-12)
    by_hand = {**full, "variants": {n: {**x, "seeds": x["seeds"][:2]} for n, x in full["variants"].items()}}
    two = first_seeds(full, 2)
    assert two["summary"] == summarize(by_hand)
    assert [c["ours"] for c in two["checks"]] == [c["ours"] for c in paper_checks(by_hand)]
    assert len(full["variants"]["shifted"]["seeds"]) == seed_count(full)   # the run is not changed


def test_bad_k_and_ragged_runs_are_refused_in_one_line(full):
    with pytest.raises(EagleMiniError, match="k must be in 1.."):
        first_seeds(full, 0)
    ragged = {**full, "variants": {**full["variants"], "token": {**full["variants"]["token"],
                                                                 "seeds": full["variants"]["token"]["seeds"][:1]}}}
    with pytest.raises(EagleMiniError, match="different numbers of seeds"):
        seed_count(ragged)


def test_moving_the_first_control_changes_what_is_shown(full):
    one = first_seeds(full, 1)
    ui = SeedExplorer({"full run": full, "one seed": one})
    first = ui.state()
    assert first["k"] == 1 and first["run"] == "full run"
    ui.k.value = 2
    assert ui.state()["seeds"] == first["seeds"] + [full["variants"]["token"]["seeds"][1]["seed"]]
    assert ui.state()["summary"] != first["summary"]
    ui.run.value = "one seed"   # fewer seeds than the slider asks: all of them
    assert ui.state()["k"] == 1 and ui.state()["of"] == 1
