"""The papers' claims against ours, one table: `python -m eagle_mini paper-vs-ours`.

Assembles `data/results/paper_vs_ours.json` and `.md` from committed results files; it runs no
model. Each row holds the claim, the paper's figure (the papers' own, as gathered in
EAGLE_REFERENCE.md §6, on 7B-70B targets), ours with its 95% bootstrap interval over independent
units (prompts or conversations, never tokens: `intervals`), whether it holds by the rule the row
states, and where every number was read: a results file, a JSON pointer into it (RFC 6901) and the
command that made the file. Rows and where they read:

* the feature-uncertainty ablation (EAGLE §3.1, Figs. 4 and 8): the paired checks of
  `uncertainty.json` (`ablation.paper_checks`), copied with their verdicts;
* tree vs chain (EAGLE's tree-attention ablation), EAGLE-2 vs EAGLE-1 at equal tree size (EAGLE-2 §4), T=0 vs T=1,
  draft calibration (EAGLE-2 §3) and n-alpha (EAGLE §4.3.1): `acceptance_<target>.json`
  (`acceptance.py`, `measure-acceptance`);
* EAGLE-3 vs EAGLE-2 (EAGLE-3 §4): `eval_head_<target>_eagle3.json` against
  `eval_head_<target>.json` (both `eval-head`, same prompts and tree); until the EAGLE-3 file
  exists the row says it waits for it.

What it leaves out: speedups. They depend on the machine (`bench.py` measures them); tau and
acceptance rates do not.
"""
import json
from pathlib import Path

from eagle_mini.errors import EagleMiniError
from eagle_mini.measure.intervals import Arm, excludes_zero, interval, paired_difference
from eagle_mini.methods import EAGLE2 as EAGLE2_METHOD

FORMAT = "eagle_mini.paper_vs_ours/1"
ABLATION, ACCEPTANCE = "uncertainty.json", "acceptance_smollm2-135m.json"
EAGLE2, EAGLE3 = "eval_head_smollm2-135m.json", "eval_head_smollm2-135m_eagle3.json"
MAKES = {ABLATION: "python -m eagle_mini experiment uncertainty --size full",
         ACCEPTANCE: "python -m eagle_mini measure-acceptance",
         EAGLE2: "python -m eagle_mini eval-head --out data/results/" + EAGLE2,
         EAGLE3: "python -m eagle_mini eval-head --head <EAGLE-3 head> --out data/results/" + EAGLE3}
EAGLE, EAGLE_2, EAGLE_3 = ("EAGLE (arXiv 2401.15077)", "EAGLE-2 (arXiv 2406.16858)",
                           "EAGLE-3 (arXiv 2503.01840)")
CALIBRATION_MARGIN = 0.05  # a share within 0.05 of its confidence range's edge: calibrated
ALPHA_DROP = 0.10          # n-alpha "stays up": 0-alpha - last alpha below this


class Source:
    """One results file, read once; `get(pointer)` names the file and pointer when it fails."""

    def __init__(self, results, name: str, required: bool = True):
        self.name, self.path = name, (Path(results) / name).as_posix()
        p = Path(self.path)
        self.doc, self.command = None, None
        if not p.exists():
            if required:
                raise EagleMiniError(f"{self.path} is missing; make it with `{MAKES[name]}`")
            return
        try:
            self.doc = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise EagleMiniError(f"{self.path} is not JSON ({e.msg}, line {e.lineno})") from None
        self.command = self.doc.get("command") if isinstance(self.doc, dict) else None

    def get(self, pointer: str):
        """The value at a JSON pointer in the file (`resolve`); a clear error if it is not there."""
        try:
            return resolve(self.doc, pointer)
        except (KeyError, IndexError, TypeError, ValueError):
            raise EagleMiniError(f"{self.path} has no {pointer}; remake it with "
                                 f"`{self.command or MAKES[self.name]}`") from None

    def quantity(self, name: str, pointer: str) -> dict:
        """An interval stored in the file (`intervals.interval` / `paired_difference` form)."""
        iv = self.get(pointer)
        if not isinstance(iv, dict) or not {"estimate", "low", "high"} <= iv.keys():
            raise EagleMiniError(f"{self.path}: {pointer} is not an interval; remake it with "
                                 f"`{self.command or MAKES[self.name]}`")
        return {"quantity": name, "estimate": iv["estimate"], "low": iv["low"], "high": iv["high"],
                "file": self.path, "pointer": pointer}


def resolve(doc, pointer: str):
    """The value at an RFC 6901 JSON pointer.

    >>> resolve({"a": [1, {"b": 2}]}, "/a/1/b")
    2
    """
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def row(id, claim, paper, setting, cite, ours, rule, holds, sources, ours_setting="") -> dict:
    """holds: True, False (the interval lies on the wrong side) or None (not shown: the interval
    straddles the line, or there is nothing to count)."""
    return {"id": id, "claim": claim,
            "paper": {"figure": paper, "setting": setting, "cite": cite + ", via EAGLE_REFERENCE.md §6"},
            "ours": ours, "ours_setting": ours_setting, "rule": rule, "holds": holds,
            "status": {True: "holds", False: "does not hold",
                       None: "not shown (the interval straddles the line)"}[holds],
            "sources": [{"file": s.path, "command": s.command} for s in sources]}


def verdict(above: bool, below: bool):
    """True when the whole interval is on the claim's side, False when it is wholly on the other
    side, None when it straddles (or a bound is missing: both flags False)."""
    return True if above else False if below else None


def above_zero(d) -> bool | None:
    """An ordering: the interval of the difference lies above 0 (holds) or at or below it."""
    if not defined(d["low"], d["high"]):
        return None
    return verdict(excludes_zero(d), d["high"] <= 0)


def waiting(id, claim, paper, setting, cite, why) -> dict:
    r = row(id, claim, paper, setting, cite, [], "", None, [])
    r["status"] = f"waits for {why}"
    return r


def defined(*values) -> bool:
    return all(v is not None for v in values)


def ablation_rows(results) -> list[dict]:
    """One row per check of the seeded ablation (format /2), its verdict as the ablation gave it."""
    from eagle_mini.experiments.ablation import FORMAT as ABLATION_FORMAT, METRICS
    src = Source(results, ABLATION)
    claim = "input ablation: token only < feature only < feature & shifted token"
    setting, cite = "Vicuna-7B, MT-bench, T=0; EAGLE §3.1, Figs. 4 and 8", EAGLE
    if src.get("/format") != ABLATION_FORMAT:
        return [waiting("ablation", claim, "speedup 1.5x < 1.9x < 2.8x, accuracy ~0.32 < ~0.63 < ~0.78",
                        setting, cite, f"the seeded ablation: {src.path} is "
                        f"{src.get('/format')}, not {ABLATION_FORMAT}")]
    ours_setting = (f"{src.get('/target')}, {len(src.get('/variants/shifted/seeds'))} seed(s) "
                    f"per input, {src.get('/data/train_tokens'):,} training tokens; top-1 over "
                    f"{src.get('/data/val_examples')} validation conversations, tau over "
                    f"{src.get('/data/prompts')} MT-bench prompts")
    out = []
    for i in range(len(src.get("/checks"))):
        ours, seen = [], set()
        for j in range(len(src.get(f"/checks/{i}/differences"))):
            metric, lower, higher = (src.get(f"/checks/{i}/differences/{j}/{k}")
                                     for k in ("metric", "lower", "higher"))
            for v in (lower, higher):
                if (metric, v) not in seen:
                    seen.add((metric, v))
                    ours.append(src.quantity(f"{METRICS[metric]} {v}", f"/summary/{metric}/{v}"))
            ours.append(src.quantity(f"{METRICS[metric]} {higher} - {lower}",
                                     f"/checks/{i}/differences/{j}"))
        out.append(row(f"ablation-{i}", src.get(f"/checks/{i}/claim"), src.get(f"/checks/{i}/paper"),
                       setting, cite, ours,
                       "each paired difference's interval, pooled over seeds, lies above 0 (an "
                       "ordering), or holds 0 and lies within +-0.02 (about equal): the ablation's "
                       "own verdict (`ablation.paper_checks`); not shown when an interval "
                       "straddles the line", ablation_verdict(src.get(f"/checks/{i}")),
                       [src], ours_setting))
    return out


def ablation_verdict(check: dict) -> bool | None:
    """The ablation's yes/no verdict (`ablation.paper_checks`) read three ways, as every other row:
    True when it holds; False when the data contradict it (an ordering's difference lies wholly at
    or below 0, or an "about equal" difference excludes 0); None, not shown, when an interval only
    straddles the line."""
    if check["holds"]:
        return True
    ds = check["differences"]
    if "about" in check["claim"]:
        return False if any(d["low"] > 0 or d["high"] < 0 for d in ds) else None
    return False if any(above_zero(d) is False for d in ds) else None


def _calibration_row(src, base: str) -> dict:
    """Calibration: the share of drafts accepted at low and at high draft confidence (EAGLE-2)."""
    q = src.quantity
    cal = {k: src.get(f"/calibration/{k}") for k in ("arm", "low", "high")}
    low = q(f"share accepted at draft confidence < {cal['low']}", "/summary/calibration/low")
    high = q(f"share accepted at draft confidence > {cal['high']}", "/summary/calibration/high")
    m, cal_tree = CALIBRATION_MARGIN, src.get(f"/arms/{cal['arm']}/tree")
    offered = [sum(c[side][1] for c in src.get("/calibration/per_prompt")) for side in ("low", "high")]
    return row(
        "calibration", "the draft is calibrated: low-confidence drafts are rarely accepted, "
        "high-confidence ones almost always", "~4% accepted below 0.05, ~98% above 0.95",
        "Vicuna-7B, Alpaca", EAGLE_2, [low, high],
        f"the interval below {cal['low']} lies under {cal['low'] + m:.2f} and the one above "
        f"{cal['high']} over {cal['high'] - m:.2f} (within {m} of each range's edge)",
        verdict(low["high"] < cal["low"] + m and high["low"] > cal["high"] - m,
                low["low"] >= cal["low"] + m or high["high"] <= cal["high"] - m)
        if defined(low["low"], low["high"], high["low"], high["high"]) else None, [src],
        f"{base}; every child offered under an accepted node of the {cal_tree} tree: "
        f"{offered[0]:,} below {cal['low']}, {offered[1]:,} above {cal['high']}")


def _alpha_row(src) -> dict:
    """n-alpha: how little a head reading its own predicted features loses per step (EAGLE)."""
    q = src.quantity
    steps = src.get("/alpha/steps")
    alphas = [q(f"{n}-alpha", f"/summary/alpha/{n}") for n in range(steps)]
    drop = q(f"0-alpha - {steps - 1}-alpha", "/summary/alpha_drop")
    return row(
        "n-alpha", "a head reading its own predicted features stays accurate: n-alpha falls "
        f"little from n = 0 to {steps - 1}",
        "0-alpha ~0.78 (feature & shifted token head); no n-alpha for n >= 1 in the reference",
        "Vicuna-7B, MT-bench, T=0", EAGLE, alphas + [drop],
        f"the paired interval of the drop over conversations lies below {ALPHA_DROP} (our "
        "threshold)", verdict(drop["high"] < ALPHA_DROP, drop["low"] >= ALPHA_DROP)
        if defined(drop["low"], drop["high"]) else None, [src],
        f"{src.get('/target')}, {src.get('/head')}; teacher-forced chains on "
        f"{src.get('/config/text_conversations')} ShareGPT {src.get('/config/split')} conversations")


def acceptance_rows(results) -> list[dict]:
    """Tree vs chain, EAGLE-2 vs EAGLE-1, T=0 vs T=1, calibration, n-alpha (`acceptance.py`)."""
    from eagle_mini.experiments.acceptance import FORMAT as ACCEPTANCE_FORMAT
    src = Source(results, ACCEPTANCE)
    if src.get("/format") != ACCEPTANCE_FORMAT:
        raise EagleMiniError(f"{src.path} is {src.get('/format')}, not {ACCEPTANCE_FORMAT}; "
                             f"remake it with `{MAKES[ACCEPTANCE]}`")
    base = (f"{src.get('/target')}, {src.get('/head')}; {src.get('/config/prompts')} MT-bench "
            f"first turns spread over the 8 categories, {src.get('/config/max_new_tokens')} new tokens")
    q = src.quantity

    def tau(name, arm):
        return q(f"tau {name} ({src.get(f'/arms/{arm}/tree')}, "
                 f"T={src.get(f'/arms/{arm}/temperature'):g})", f"/summary/tau/{arm}")

    def ordered(id, claim, paper, setting, cite, a, b, diff, label):
        d = q(label, f"/summary/differences/{diff}")
        return row(id, claim, paper, setting, cite, [tau(*b), tau(*a), d],
                   "the paired bootstrap interval of the difference over prompts lies above 0",
                   above_zero(d), [src], base)
    return [
        ordered("tree-vs-chain", "a draft tree accepts more per cycle than a chain of the same depth",
                "tau 3.94 (tree) vs 3.20 (chain)", "Vicuna-7B, MT-bench, T=0", EAGLE,
                ("chain", "chain"), ("tree", "eagle1"), "tree_minus_chain", "tau tree - chain"),
        ordered("eagle2-vs-eagle1", "EAGLE-2's dynamic tree accepts more per cycle than EAGLE-1's "
                "static tree (ours at the same size; the paper's EAGLE-2 drafts a bigger tree)",
                "tau 4.68 vs 3.79 (3.39x vs 2.78x); EAGLE-2 with 60 tokens, EAGLE-1 with 26",
                "Vicuna-7B, T=0, mean of six tasks", EAGLE_2, ("EAGLE-1", "eagle1"),
                ("EAGLE-2", EAGLE2_METHOD), "eagle2_minus_eagle1", "tau EAGLE-2 - EAGLE-1"),
        ordered("t0-vs-t1", "tau is lower when sampling at T=1 than when greedy",
                "tau 3.94 (T=0) vs 3.17 (T=1)", "Vicuna-7B, MT-bench, EAGLE-1", EAGLE,
                ("T=1", "eagle1_t1"), ("T=0", "eagle1"), "t0_minus_t1", "tau T=0 - T=1"),
        _calibration_row(src, base), _alpha_row(src)]


def eagle3_row(results) -> dict:
    """EAGLE-3 vs EAGLE-2 on the same prompts and tree, paired over prompts: the mean of per-prompt
    tau (the `eval-head` layout keeps tau per prompt, not its counts)."""
    claim = "an EAGLE-3 head accepts more per cycle than an EAGLE-2 (EAGLE-1-trained) head"
    paper = ("about 1.4x EAGLE-2's speedup, EAGLE-2 on the same targets (abstract); "
             "e.g. LLaMA-3.1-8B, MT-bench: EAGLE-3 4.40x, tau 6.13")
    setting = "T=0; each EAGLE-3 figure against EAGLE-2 on the same target in the paper's own table"
    new = Source(results, EAGLE3, required=False)
    if new.doc is None:
        return waiting("eagle3-vs-eagle2", claim, paper, setting, EAGLE_3,
                       f"the EAGLE-3 head ({new.path})")
    old = Source(results, EAGLE2)
    for key in ("/mtbench/prompts", "/mtbench/tree", "/mtbench/max_new_tokens"):
        if old.get(key) != new.get(key):
            raise EagleMiniError(f"{new.path} and {old.path} differ in {key} "
                                 f"({new.get(key)} vs {old.get(key)}); rerun one to match")
    pointer = "/mtbench/tau_per_prompt"
    pairs = [(a, b) for a, b in zip(old.get(pointer), new.get(pointer)) if defined(a, b)]
    if not pairs:
        raise EagleMiniError(f"{new.path}: no prompt with tau in both files")
    a, b = Arm([[[x, 1] for x, _ in pairs]]), Arm([[[y, 1] for _, y in pairs]])

    def derived(name, iv, statistic, files):
        return {"quantity": name, "estimate": iv["estimate"], "low": iv["low"], "high": iv["high"],
                "derived": {"statistic": statistic, "from": [[f, pointer] for f in files]}}
    d = derived("mean per-prompt tau, EAGLE-3 - EAGLE-2", paired_difference(a, b),
                "paired_difference", [old.path, new.path])
    ours = [derived("mean per-prompt tau, EAGLE-3", interval(b), "interval", [new.path]),
            derived("mean per-prompt tau, EAGLE-2", interval(a), "interval", [old.path]), d]
    return row("eagle3-vs-eagle2", claim, paper, setting, EAGLE_3, ours,
               "the paired bootstrap interval of the difference over prompts lies above 0",
               above_zero(d), [new, old],
               f"{old.get('/mtbench/prompts')} MT-bench first turns, tree {old.get('/mtbench/tree')}, "
               f"{old.get('/mtbench/max_new_tokens')} new tokens; {len(pairs)} prompts with tau in both; "
               f"heads: {old.doc.get('head')} vs {new.doc.get('head')} (their training tokens "
               "differ: the equal-token comparison is `compare-heads`, RESULTS.md)")


def paper_vs_ours(results="data/results", command="python -m eagle_mini paper-vs-ours") -> dict:
    """Every row, from the results files in `results`."""
    rows = ablation_rows(results) + acceptance_rows(results) + [eagle3_row(results)]
    return {"format": FORMAT, "command": command,
            "note": "The papers' figures are theirs, on 7B-70B targets; ours are SmolLM2-135M "
                    "with the course's head. Intervals: 95% percentile bootstrap over prompts "
                    "(tau, calibration) or conversations (top-1, n-alpha), never over tokens.",
            "rows": rows}


def cell(q) -> str:
    if q["estimate"] is None:
        return f"{q['quantity']} n/a"
    sign = "+" if " - " in q["quantity"] else ""
    iv = "" if not defined(q["low"], q["high"]) else f" [{q['low']:{sign}.3f}, {q['high']:{sign}.3f}]"
    return f"{q['quantity']} {q['estimate']:{sign}.3f}{iv}"


def markdown(table: dict) -> str:
    """The table for README and notebooks; each row's rule and command follow it."""
    def esc(text):
        return str(text).replace("|", "\\|")
    lines = ["# The papers' claims against ours", "",
             f"Generated by `{table['command']}` from committed results files; do not edit.",
             table["note"], "",
             "| # | claim | paper | ours (95% interval) | holds? | read from |",
             "|---|---|---|---|---|---|"]
    for i, r in enumerate(table["rows"], 1):
        p = r["paper"]
        ours = "<br>".join(esc(cell(q)) for q in r["ours"]) or "-"
        files = ", ".join(f"`{Path(s['file']).name}`" for s in r["sources"]) or "-"
        lines.append(f"| {i} | {esc(r['claim'])} | {esc(p['figure'])} ({esc(p['setting'])}; "
                     f"{esc(p['cite'].split(',')[0])}) | {ours} | {r['status']} | {files} |")
    lines += ["", "When a row holds, and what ours were measured on:", ""]
    for i, r in enumerate(table["rows"], 1):
        lines.append(f"{i}. {r['status']}." if not r["sources"] else
                     f"{i}. Holds when {r['rule']}. Ours: {r['ours_setting']}.")
    made = {s["file"]: s["command"] for r in table["rows"] for s in r["sources"]}
    lines += ["", "The commands that made the results files:", ""]
    lines += [f"- `{Path(f).name}`: `{c}`" for f, c in made.items()]
    return "\n".join(lines) + "\n"


def write_table(results="data/results", out=None,
                command="python -m eagle_mini paper-vs-ours") -> tuple[str, str]:
    """Write OUT.json and OUT.md (default `<results>/paper_vs_ours`); returns both paths."""
    from eagle_mini.results import results_json
    table = paper_vs_ours(results, command)
    stem = Path(out) if out else Path(results) / "paper_vs_ours"
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(results_json(table))
    md_path.write_text(markdown(table))
    return str(json_path), str(md_path)
