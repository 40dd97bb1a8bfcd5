"""The papers' claims against ours (`paper-vs-ours`): every number in the table is the one in the
results file it names, the table is what the command makes now, and a row turns to "does not hold"
when the data say so."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_mini import EagleMiniError
from eagle_mini.experiments import ablation, acceptance, claims
from eagle_mini.measure.intervals import Arm, interval, paired_difference
from eagle_mini.results import results_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "data" / "results"


def at(doc, pointer):
    """JSON pointer, written here again so the check does not lean on the code it checks."""
    for part in pointer.lstrip("/").split("/"):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def load(path, root):
    return json.loads((Path(root) / path).read_text())


def check_against_files(table, root):
    """Each number of each row, read again from the file it names (or recomputed from the
    per-prompt values a derived number names); each source's command is the file's own."""
    for row in table["rows"]:
        for source in row["sources"]:
            assert source["command"] == load(source["file"], root).get("command"), row["id"]
        for q in row["ours"]:
            if "pointer" in q:
                stored = at(load(q["file"], root), q["pointer"])
            else:
                units = [at(load(f, root), p) for f, p in q["derived"]["from"]]
                pairs = [u for u in zip(*units) if None not in u]
                arms = [Arm([[[u[k], 1] for u in pairs]]) for k in range(len(units))]
                stored = (interval(*arms) if q["derived"]["statistic"] == "interval"
                          else paired_difference(*arms))
            assert (q["estimate"], q["low"], q["high"]) == \
                (stored["estimate"], stored["low"], stored["high"]), (row["id"], q["quantity"])


# --- the committed table ---------------------------------------------------------------------

def test_every_committed_number_is_the_one_in_its_results_file():
    table = json.loads((RESULTS / "paper_vs_ours.json").read_text())
    assert table["rows"] and all(r["status"] for r in table["rows"])
    check_against_files(table, ROOT)


def test_the_committed_table_is_what_the_command_makes_now(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    json_path, md_path = claims.write_table("data/results", tmp_path / "paper_vs_ours")
    for made in (json_path, md_path):
        committed = RESULTS / Path(made).name
        assert Path(made).read_text() == committed.read_text(), (
            f"{committed} is stale: run `python -m eagle_mini paper-vs-ours`")


# --- synthetic results files -----------------------------------------------------------------

def synthetic_acceptance(paper_like: bool, prompts: int = 12, conversations: int = 10) -> dict:
    """An `acceptance` results file whose numbers agree with the papers, or contradict them."""
    taus = ({"chain": 1.6, "eagle1": 2.0, "eagle2": 2.3, "eagle1_t1": 1.7} if paper_like else
            {"chain": 2.0, "eagle1": 1.6, "eagle2": 1.4, "eagle1_t1": 2.2})

    def rows(t):
        return [{"new_tokens": 1 + round(t * (20 + i)) + i % 2, "target_forwards": 21 + i}
                for i in range(prompts)]
    low, high = ([1, 50], [20, 20]) if paper_like else ([12, 50], [12, 20])
    alpha = ([[40, 100], [33, 80], [27, 70], [21, 60]] if paper_like else
             [[40, 100], [12, 80], [6, 70], [3, 60]])
    result = {
        "format": acceptance.FORMAT, "command": "python -m eagle_mini measure-acceptance (synthetic)",
        "head": "synthetic head", "target": "synthetic",
        "config": {"prompts": prompts, "max_new_tokens": 64, "text_conversations": conversations,
                   "max_len": 1024, "split": "test"},
        "arms": {name: {"tree": spec, "temperature": t, "per_prompt": rows(taus[name])}
                 for name, (spec, t) in acceptance.ARMS.items()},
        "calibration": {"arm": acceptance.CALIBRATION_ARM, "low": acceptance.LOW,
                        "high": acceptance.HIGH,
                        "per_prompt": [{"low": [low[0] + i % 2, low[1]], "high": high}
                                       for i in range(prompts)]},
        "alpha": {"steps": 4, "per_conversation": [[[a + i % 3, n] for a, n in alpha]
                                                   for i in range(conversations)]}}
    result["summary"] = acceptance.summarize(result)
    return result


def synthetic_ablation(shifted_wins: bool, units: int = 6) -> dict:
    """A seeded-ablation results file (format /2) where the shifted token wins, or loses."""
    top1 = {"token": 20, "feature": 25, "unshifted": 25, "shifted": 30 if shifted_wins else 22}

    def seed(name, k):
        return {"val_counts": [[[top1[name] + (i + k) % 2, 100], [top1[name] // 2 + i % 2, 50]]
                               for i in range(units)],
                "decode": {"per_prompt": [{"new_tokens": 1 + top1[name] + i, "target_forwards": 21}
                                          for i in range(units)]},
                "epochs": [{"epoch": 1, "tokens_seen": 1000, "top1": top1[name] / 100,
                            "alpha": [top1[name] / 100, 0.1]}]}
    result = {"format": ablation.FORMAT, "command": "python -m eagle_mini experiment uncertainty "
              "(synthetic)", "target": "synthetic",
              "data": {"train_tokens": 1000, "val_examples": units, "prompts": units},
              "variants": {name: {"seeds": [seed(name, k) for k in range(2)]} for name in top1}}
    result["summary"] = ablation.summarize(result)
    result["checks"] = ablation.paper_checks(result)
    return result


def results_dir(tmp_path, paper_like=True, eagle3_gain=None) -> Path:
    d = tmp_path / f"{'agree' if paper_like else 'disagree'}_eagle3_{eagle3_gain}"
    d.mkdir()
    (d / claims.ABLATION).write_text(results_json(synthetic_ablation(paper_like)))
    (d / claims.ACCEPTANCE).write_text(results_json(synthetic_acceptance(paper_like)))
    shutil.copy(RESULTS / claims.EAGLE2, d / claims.EAGLE2)
    if eagle3_gain is not None:
        doc = json.loads((d / claims.EAGLE2).read_text())
        doc["command"] = "python -m eagle_mini eval-head --head eagle3 (synthetic)"
        doc["mtbench"]["tau_per_prompt"] = [None if t is None else t + eagle3_gain + 0.01 * (i % 3)
                                            for i, t in enumerate(doc["mtbench"]["tau_per_prompt"])]
        (d / claims.EAGLE3).write_text(results_json(doc))
    return d


def by_id(table):
    return {r["id"]: r for r in table["rows"]}


CLAIMS = ["ablation-0", "tree-vs-chain", "eagle2-vs-eagle1", "t0-vs-t1", "calibration", "n-alpha"]


def test_rows_hold_on_data_that_agree_with_the_papers(tmp_path):
    rows = by_id(claims.paper_vs_ours(results_dir(tmp_path, paper_like=True)))
    assert [rows[i]["status"] for i in CLAIMS] == ["holds"] * len(CLAIMS)


def test_rows_flip_to_does_not_hold_when_the_data_say_so(tmp_path):
    rows = by_id(claims.paper_vs_ours(results_dir(tmp_path, paper_like=False)))
    assert [rows[i]["status"] for i in CLAIMS] == ["does not hold"] * len(CLAIMS)


def test_synthetic_numbers_are_the_files_numbers(tmp_path):
    d = results_dir(tmp_path, eagle3_gain=0.3)
    check_against_files(claims.paper_vs_ours(d), "/")


def test_the_eagle3_row_waits_for_its_file_then_appears(tmp_path):
    waiting = by_id(claims.paper_vs_ours(results_dir(tmp_path)))["eagle3-vs-eagle2"]
    assert waiting["status"].startswith("waits for the EAGLE-3 head") and waiting["holds"] is None
    better = by_id(claims.paper_vs_ours(results_dir(tmp_path, eagle3_gain=0.3)))
    assert better["eagle3-vs-eagle2"]["status"] == "holds" and better["eagle3-vs-eagle2"]["ours"]
    row = by_id(claims.paper_vs_ours(results_dir(tmp_path, eagle3_gain=-0.3)))["eagle3-vs-eagle2"]
    assert row["status"] == "does not hold" and row["ours"][-1]["high"] < 0


def test_an_old_ablation_file_makes_a_waiting_row(tmp_path):
    d = results_dir(tmp_path)
    (d / claims.ABLATION).write_text(json.dumps({"format": "eagle_mini.uncertainty/1"}))
    rows = claims.paper_vs_ours(d)["rows"]
    assert rows[0]["status"].startswith("waits for the seeded ablation") and rows[0]["holds"] is None


def test_the_command_is_deterministic_and_reads_files_only(tmp_path):
    d = results_dir(tmp_path, eagle3_gain=0.3)
    made = []
    for _ in range(2):
        subprocess.run([sys.executable, "-m", "eagle_mini", "paper-vs-ours", "--results", str(d)],
                       check=True, capture_output=True, cwd=ROOT)
        made.append([(d / f"paper_vs_ours.{ext}").read_bytes() for ext in ("json", "md")])
        for ext in ("json", "md"):
            (d / f"paper_vs_ours.{ext}").unlink()
    assert made[0] == made[1]


@pytest.mark.parametrize("damage", ["missing", "not json", "no summary"])
def test_a_missing_or_malformed_file_is_one_clear_error(tmp_path, damage):
    """The error names the file; on the command line it is one line and exit code 2."""
    d = results_dir(tmp_path)
    f = d / claims.ACCEPTANCE
    if damage == "missing":
        f.unlink()
    elif damage == "not json":
        f.write_text('{"format": ')
    else:
        f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "summary"}))
    with pytest.raises(EagleMiniError, match=claims.ACCEPTANCE):
        claims.paper_vs_ours(d)
    if damage != "missing":
        return
    p = subprocess.run([sys.executable, "-m", "eagle_mini", "paper-vs-ours", "--results", str(d),
                        "--out", str(tmp_path / "t")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert claims.ACCEPTANCE in p.stderr


# --- the measurement behind the acceptance rows ----------------------------------------------

def test_measure_keeps_per_prompt_counts_that_pool_to_generates_tau_and_alpha():
    """Each arm's per-prompt counts are generate's own, and pooled they give its tau; the
    calibration counts and n-alpha per conversation pool to the package's own measures."""
    import torch
    from eagle_mini import generate, tiny_target
    from eagle_mini.tree import tree_from_spec
    from eagle_mini.heads.eagle1 import new_head
    from eagle_mini.measure.evaluate import pooled_tau
    from eagle_mini.data import Example
    from eagle_mini.training.features import compute_features
    from eagle_mini.training.train import evaluate_head
    target = tiny_target("llama", seed=0, vocab_size=64)
    head = new_head(target, seed=0)
    questions = [{"question_id": i, "category": "c", "turns": [[1 + i, 2, 3, 4]]} for i in range(3)]
    g = torch.Generator().manual_seed(0)
    rows = compute_features(target, [Example(torch.randint(0, 64, (24,), generator=g).tolist(),
                                             [0] * 4 + [1] * 20) for _ in range(3)])
    raw = acceptance.measure(target, head, questions, 8, rows, progress=False)
    summary = acceptance.summarize(raw)
    for name, (spec, t) in acceptance.ARMS.items():
        stats = [generate(target, head, q["turns"][0], 8, temperature=t, tree=tree_from_spec(spec),
                          seed=i).stats for i, q in enumerate(questions)]
        assert raw["arms"][name]["per_prompt"] == [
            {"new_tokens": s["new_tokens"], "target_forwards": s["target_forwards"]} for s in stats]
        assert summary["tau"][name]["estimate"] == pytest.approx(pooled_tau(stats)[0])
        if name == acceptance.CALIBRATION_ARM:
            assert raw["calibration"]["per_prompt"] == [
                acceptance.confidence_counts(s["confidence_accepted"]) for s in stats]
    pooled = evaluate_head(head, rows)["counts"]
    assert [[sum(c[n][k] for c in raw["alpha"]["per_conversation"]) for k in (0, 1)]
            for n in range(4)] == pooled


def test_an_interval_across_the_line_is_not_shown_rather_than_refuted(tmp_path):
    d = results_dir(tmp_path)
    doc = json.loads((d / claims.ACCEPTANCE).read_text())
    doc["arms"]["eagle1_t1"]["per_prompt"] = [
        {**r, "new_tokens": r["new_tokens"] + (3 if i % 2 else -3)}
        for i, r in enumerate(doc["arms"]["eagle1"]["per_prompt"])]
    doc["summary"] = acceptance.summarize(doc)
    (d / claims.ACCEPTANCE).write_text(results_json(doc))
    row = by_id(claims.paper_vs_ours(d))["t0-vs-t1"]
    assert row["ours"][-1]["low"] < 0 < row["ours"][-1]["high"]
    assert row["holds"] is None and row["status"].startswith("not shown")


@pytest.mark.parametrize("intervals, about, expected", [
    ([(0.01, 0.03), (0.05, 0.09)], False, True),     # both orderings above 0
    ([(-0.06, -0.01), (0.17, 0.21)], False, False),  # one lies below: contradicted
    ([(-0.02, 0.002)], False, None),                 # straddles 0: not shown
    ([(-0.001, 0.005)], True, True),                 # about equal, within the margin
    ([(-0.01, 0.05)], True, None),                   # holds 0 but too wide: not shown
    ([(0.03, 0.05)], True, False),                   # excludes 0: not about equal
])
def test_ablation_checks_read_three_ways(intervals, about, expected):
    """An ablation check that fails is 'does not hold' only when the data contradict the paper."""
    from eagle_mini.measure.intervals import about_equal, excludes_zero
    ds = [{"estimate": (lo + hi) / 2, "low": lo, "high": hi} for lo, hi in intervals]
    holds = about_equal(ds[0], 0.02) if about else all(excludes_zero(d) for d in ds)
    check = {"claim": "x about y" if about else "x < y", "holds": holds, "differences": ds}
    assert claims.ablation_verdict(check) is expected
