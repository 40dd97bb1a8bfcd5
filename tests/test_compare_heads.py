"""`compare-heads`: head B's pooled MT-bench tau minus head A's, paired over prompts. Checked against
ratios worked by hand, and the command refuses results that do not pair."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_mini import EagleMiniError
from eagle_mini.measure.evaluate import compare_heads

ROOT = Path(__file__).resolve().parent.parent


def result(counts, tokens, tree="eagle2", kind="eagle1"):
    return {"command": f"python -m eagle_mini eval-head (synthetic {kind})", "head": kind,
            "head_kind": kind, "head_tokens_seen": tokens,
            "mtbench": {"prompts": len(counts), "tree": tree, "max_new_tokens": 64,
                        "tau_counts_per_prompt": counts}}


def test_difference_is_of_pooled_tau_and_pairs_prompts():
    # A: 30 tokens in 20 cycles (1.5); B: 40 in 20 (2.0). Prompt-to-prompt spread is large, but B
    # beats A by 0.5 on every prompt, so the paired interval is tight around +0.5 and excludes 0.
    a = [[3, 2], [30, 20], [9, 6], [6, 4]] * 5
    b = [[4, 2], [40, 20], [12, 6], [8, 4]] * 5
    out = compare_heads(result(a, 1000), result(b, 1000, kind="eagle3"))
    assert out["a"]["tau"]["estimate"] == pytest.approx(1.5)
    assert out["b"]["tau"]["estimate"] == pytest.approx(2.0)
    d = out["tau_difference_b_minus_a"]
    assert d["estimate"] == pytest.approx(0.5)
    assert d["low"] == pytest.approx(0.5) and d["high"] == pytest.approx(0.5)
    assert out["b_beats_a"] and out["equal_training_tokens"]
    assert out["a"]["kind"] == "eagle1" and out["b"]["kind"] == "eagle3"


def test_no_gain_is_not_a_win_and_unequal_tokens_are_said():
    a = [[3, 2], [5, 4], [9, 6], [2, 2]] * 5
    b = [[2, 2], [6, 4], [8, 6], [3, 2]] * 5   # same totals, shuffled between prompts
    out = compare_heads(result(a, 1000), result(b, 2000))
    assert out["tau_difference_b_minus_a"]["estimate"] == pytest.approx(0.0)
    assert not out["b_beats_a"]
    assert out["training_token_ratio_b_over_a"] == 2.0 and out["equal_training_tokens"] is False


def test_results_that_do_not_pair_are_refused():
    with pytest.raises(EagleMiniError, match="tree"):
        compare_heads(result([[1, 1]], 1), result([[1, 1]], 1, tree="dynamic:60,6,10"))
    old = result([[1, 1]], 1)
    del old["mtbench"]["tau_counts_per_prompt"]   # and no tau per prompt to derive them from
    with pytest.raises(EagleMiniError, match="tau_counts_per_prompt"):
        compare_heads(old, result([[1, 1]], 1))
    with pytest.raises(EagleMiniError, match="tau_counts_per_prompt"):
        compare_heads(old, old)


COMMITTED = ROOT / "data" / "results"


def without_counts(doc):
    """An eval-head result as written before it recorded tau's counts per prompt."""
    return {**doc, "mtbench": {k: v for k, v in doc["mtbench"].items() if k != "tau_counts_per_prompt"}}


def test_counts_derived_from_tau_per_prompt_are_the_recorded_ones():
    """Greedy EAGLE emits vanilla's tokens with any head: another result's accepted tokens and this
    one's tau per prompt give back exactly the counts it recorded, for every committed pair."""
    from eagle_mini.measure.evaluate import derived_counts
    docs = [json.loads(p.read_text()) for p in sorted(COMMITTED.glob("eval_head_*.json"))]
    counted = [d for d in docs if "tau_counts_per_prompt" in d["mtbench"] and d["mtbench"]["prompts"] == 80]
    assert len(counted) >= 3
    for doc, other in zip(counted, counted[1:] + counted[:1]):
        accepted = [a for a, _ in other["mtbench"]["tau_counts_per_prompt"]]
        assert derived_counts(without_counts(doc), accepted) == doc["mtbench"]["tau_counts_per_prompt"]
        shorter = [a - 1 if a else a for a in accepted]   # another length: the checks refuse it
        assert derived_counts(without_counts(doc), shorter) is None


def test_cli_compares_the_shipped_heads_committed_evals():
    """The shipped EAGLE-1 head's eval predates the counts; compare-heads still reads it."""
    shipped, eagle3 = COMMITTED / "eval_head_smollm2-135m.json", COMMITTED / "eval_head_smollm2-135m_eagle3.json"
    assert "tau_counts_per_prompt" not in json.loads(shipped.read_text())["mtbench"]
    run = subprocess.run([sys.executable, "-m", "eagle_mini", "compare-heads", str(shipped), str(eagle3)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("tau B - A = ") and "80 prompts" in run.stdout
    assert "derived" in run.stderr and "training tokens B/A 0." in run.stdout
    a, b = (json.loads(p.read_text())["mtbench"]["tau"] for p in (shipped, eagle3))
    assert f"tau B - A = {b - a:+.3f}" in run.stdout   # the pooled taus the files record


def test_cli_writes_the_comparison_and_fails_in_one_line(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(result([[3, 2], [6, 4]], 10)))
    b.write_text(json.dumps(result([[4, 2], [8, 4]], 10)))
    run = subprocess.run([sys.executable, "-m", "eagle_mini", "compare-heads", str(a), str(b),
                          "--out", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "tau B - A = +0.500" in run.stdout
    assert json.loads((tmp_path / "c.json").read_text())["files"] == [str(a), str(b)]
    bad = subprocess.run([sys.executable, "-m", "eagle_mini", "compare-heads", str(a),
                          str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_eval_head_refuses_an_unknown_prompt_set_before_loading_anything():
    bad = subprocess.run([sys.executable, "-m", "eagle_mini", "eval-head", "--also", "humaneval,alpaca"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "alpaca" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_results_md_section_reads_the_comparison_file(tmp_path):
    from eagle_mini.tooling.report import EQUAL_TOKENS, RESULTS, Files, equal_tokens_section
    assert "Not measured yet" in "\n".join(equal_tokens_section(Files(tmp_path)))
    a = [[3, 2], [30, 20], [9, 6], [6, 4]] * 5
    b = [[4, 2], [40, 20], [12, 6], [8, 4]] * 5
    doc = {"command": "python -m eagle_mini compare-heads a.json b.json",
           **compare_heads(result(a, 1000), result(b, 1000, kind="eagle3"))}
    (tmp_path / RESULTS).mkdir(parents=True)
    (tmp_path / RESULTS / EQUAL_TOKENS[0]).write_text(json.dumps(doc))
    text = "\n".join(equal_tokens_section(Files(tmp_path)))
    assert "1.500 [" in text and "2.000 [" in text and "eagle3 - eagle1: +0.500 [+0.500, +0.500]" in text
    assert "lies above 0" in text and "1,000 training tokens (equal training tokens: True)" in text


def test_tau_curve_fits_the_gain_per_doubling_and_projects_the_goal(tmp_path):
    """tau 1.5, 2.0, 2.5 at 1k, 2k, 4k tokens on every prompt: +0.5 per doubling exactly, so tau 3.0
    lies at 8k tokens with a zero-width interval; a flat curve never reaches a higher goal."""
    from eagle_mini.measure.evaluate import tau_curve
    shape = [[3, 2], [30, 20], [9, 6]] * 4

    def at(tau):
        return [[round(tau * c), c] for _, c in shape]
    docs = [result(at(1.5), 1000), result(at(2.5), 4000), result(at(2.0), 2000)]
    c = tau_curve(docs, goal=3.0)
    assert [p["tokens"] for p in c["points"]] == [1000, 2000, 4000]   # sorted by tokens
    b = c["fit"]["per_doubling"]
    assert b["estimate"] == pytest.approx(0.5) and b["low"] == pytest.approx(0.5)
    assert c["goal"]["tokens"]["estimate"] == pytest.approx(8000)
    flat = tau_curve([result(at(1.5), 1000), result(at(1.5), 4000)], goal=2.0)
    assert flat["goal"]["tokens"]["estimate"] == float("inf") and flat["goal"]["never_reached_share"] == 1
    with pytest.raises(EagleMiniError, match="two training-token counts"):
        tau_curve(docs[:1])
    with pytest.raises(EagleMiniError, match="one training-token count"):
        tau_curve([result(at(1.5), 1000), result(at(2.0), 1000)])
    with pytest.raises(EagleMiniError, match="different kinds"):
        tau_curve([result(at(1.5), 1000), result(at(2.0), 2000, kind="eagle3")])
    assert c["head_kind"] == "eagle1"
    paths = []
    for i, d in enumerate(docs):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(d))
    run = subprocess.run([sys.executable, "-m", "eagle_mini", "tau-curve", *map(str, paths),
                          "--goal", "3", "--out", str(tmp_path / "curve.json")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "per doubling of training tokens: +0.500" in run.stdout
    assert json.loads((tmp_path / "curve.json").read_text())["goal"]["tokens"]["estimate"] == \
        pytest.approx(8000)
    bad = subprocess.run([sys.executable, "-m", "eagle_mini", "tau-curve", str(paths[0]),
                          str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_results_md_shows_the_curve_file(tmp_path):
    from eagle_mini.measure.evaluate import tau_curve
    from eagle_mini.tooling.report import CURVES, EQUAL_TOKENS, RESULTS, Files, equal_tokens_section
    shape = [[3, 2], [30, 20], [9, 6]] * 4
    docs = [result([[round(t * c), c] for _, c in shape], n) for t, n in ((1.5, 1000), (2.0, 2000))]
    comp = {"command": "compare-heads", **compare_heads(docs[0], {**docs[1], "head_kind": "eagle3"})}
    curve = {"command": "python -m eagle_mini tau-curve a b", **tau_curve(docs, goal=3.0)}
    for name, doc in ((EQUAL_TOKENS[-1], comp), (CURVES[0], curve)):
        (tmp_path / RESULTS / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / RESULTS / name).write_text(json.dumps(doc))
    text = "\n".join(equal_tokens_section(Files(tmp_path)))
    assert "| 1,000 | 1.500 [" in text and "+0.500 [+0.500, +0.500] per doubling" in text
    assert "tau 3.0 would be reached at about 8,000 tokens" in text
    assert "### tau against training tokens: eagle1 head, eagle1" in text


def test_results_md_shows_other_prompt_sets_or_says_they_are_missing(tmp_path):
    from eagle_mini.tooling.report import EVAL_OTHER, RESULTS, Files, other_sets_lines
    assert "not measured yet" in "\n".join(other_sets_lines(Files(tmp_path)))
    doc = {**result([[3, 2]] * 4, 1000), "other_sets": {
        "humaneval": {"prompts": 4, "max_new_tokens": 64, "tree": "eagle2", "tau": 2.25,
                      "tau_se": 0.125, "tau_counts_per_prompt": [[9, 4]] * 4}}}
    (tmp_path / RESULTS).mkdir(parents=True)
    (tmp_path / RESULTS / EVAL_OTHER).write_text(json.dumps(doc))
    text = "\n".join(other_sets_lines(Files(tmp_path)))
    assert "| humaneval | 4 | 2.25 ± 0.125 |" in text and "eagle1" in text
    del doc["other_sets"]
    (tmp_path / RESULTS / EVAL_OTHER).write_text(json.dumps(doc))
    with pytest.raises(EagleMiniError, match="no other_sets"):
        other_sets_lines(Files(tmp_path))


def test_results_md_shows_acceptance_by_depth_from_the_compared_files(tmp_path):
    from eagle_mini.tooling.report import EQUAL_TOKENS, RESULTS, Files, equal_tokens_section
    a, b = result([[3, 2]] * 4, 1000), result([[4, 2]] * 4, 1000, kind="eagle3")
    a["mtbench"]["acceptance_per_depth"] = {"1": 0.5, "2": 0.25, "10": 0.125}
    b["mtbench"]["acceptance_per_depth"] = {"1": 0.75, "2": 0.5}
    (tmp_path / RESULTS).mkdir(parents=True)
    files = []
    for name, doc in (("a.json", a), ("b.json", b)):
        (tmp_path / RESULTS / name).write_text(json.dumps(doc))
        files.append(f"{RESULTS}/{name}")
    comp = {"command": "compare-heads", "files": files, **compare_heads(a, b)}
    (tmp_path / RESULTS / EQUAL_TOKENS[0]).write_text(json.dumps(comp))
    text = "\n".join(equal_tokens_section(Files(tmp_path)))
    assert "eagle1 0.50 / 0.25 / 0.12; eagle3 0.75 / 0.50." in text   # depths in number order
    (tmp_path / RESULTS / "b.json").unlink()                           # a file gone: no line
    assert "Acceptance rate" not in "\n".join(equal_tokens_section(Files(tmp_path)))
