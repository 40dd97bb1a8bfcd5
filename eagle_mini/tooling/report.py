"""RESULTS.md and the README's generated blocks, from the committed results: `results-md`.

Every measured figure the repository's documents quote is read here from a file in
`data/results/` or `data/heads/<head>/`, and printed beside the file's name and the command that
made it; nothing is typed by hand, so the documents cannot drift from the measurements. The papers' own figures appear only as the papers', with their
citation. The module runs no model: it formats JSON.

* `results_markdown(root)`: the whole of RESULTS.md;
* `readme_blocks(root)`: the README's blocks between `<!-- generated:NAME -->` and
  `<!-- /generated:NAME -->` markers: `results` (one short table), `notebooks` (the course
  table with each notebook's run time, read from the committed notebook's cell timestamps) and
  `gpu_fit` (each GPU scale's memory and disk arithmetic, `course/gpu_fit.py`);
* `write(root)` / `stale(root)`: write both files, or list those that differ from what the files
  in `root` produce (what `tests/test_results_docs.py` checks).

What it leaves out: figures no results file holds (a profiler breakdown, a micro-benchmark); the
documents name where those live (a module docstring, the head's EXPERIMENTS.md) instead.
"""
import json
import re
import statistics
from datetime import datetime
from pathlib import Path

from eagle_mini.course.gpu_fit import fit_markdown
from eagle_mini.methods import (EAGLE2, EAGLE2_LOOKUP, EAGLE_METHODS, PROMPT_LOOKUP, VANILLA,
                                VANILLAS, method)
from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.cost import CHEAP, cheap_until
from eagle_mini.measure.bench import baseline
from eagle_mini.results import writing_command

COMMAND = "python -m eagle_mini results-md"
RESULTS, HEAD = "data/results", "data/heads/smollm2-135m"
COST, COST_BF16 = "cost_curve_smollm2-135m_cpu.json", "cost_curve_smollm2-135m_cpu_bf16.json"
# `profile-target --compare-stock` with oneDNN-packed weights, one run per dtype (the machine each names)
KERNEL_CURVES = ("kernels/cost_curve_fp32_onednn_vs_stock.json",
                 "kernels/cost_curve_bf16_onednn_vs_stock.json")
EVAL, EVAL_PAPER_TREE = "eval_head_smollm2-135m.json", "eval_head_smollm2-135m_paper_tree.json"
EVAL_OTHER = "eval_head_smollm2-135m_other_prompts.json"   # `eval-head --also humaneval,sharegpt-test`
LOSSLESS, ABLATION, CLAIMS = "check_lossless.json", "uncertainty.json", "paper_vs_ours.json"
REHEARSAL = "rehearsal_vicuna-7b.json"   # `rehearse`: the 7B path run end to end, random weights
# compare-heads files: one per EAGLE-3 training-time-test depth tried at ~524k tokens (the probe of
# `--unroll`), the warm-started lm_head at ~524k (ours), then the ~2M-token pair whose EAGLE-3 arm is
# the shipped head
EQUAL_TOKENS = ("eagle3_vs_eagle1_equal_tokens.json", "eagle3_unroll5_vs_eagle1_equal_tokens.json",
                "eagle3_warm_vs_eagle1_equal_tokens.json", "eagle3_vs_eagle1_equal_tokens_2m.json")
# tau-curve files: one head's tau against its training tokens (snapshots of one run)
CURVES = ("eagle3_unroll5_curve/tau_curve.json", "eq2m_curve/tau_curve_eagle3.json",
          "eq2m_curve/tau_curve_eagle1.json")
# bf16 exact, T=0, 20 prompts per set, with hf-compiled (the fastest vanilla) and eagle2+lookup
FASTEST = tuple(f"bench_smollm2-135m_cpu_bf16_exact_{s}_T0_fastest"
                for s in ("mtbench", "humaneval", "sharegpt"))
# the headline configuration (FASTEST[0]) run again with the same command, alone: its spread
REPEATS = (FASTEST[0], f"{FASTEST[0]}_run2", f"{FASTEST[0]}_run3")
# the headline configuration with the head drafting over its 8,192 most frequent tokens (FR-Spec)
FRSPEC = "bench_smollm2-135m_cpu_bf16_exact_mtbench_T0_frspec8192"
BENCHES = ("bench_smollm2-135m_cpu_mtbench_T0", *FASTEST, FRSPEC,
           "bench_smollm2-135m_cpu_bf16_mtbench_T0",
           "bench_smollm2-135m_cpu_bf16_exact_mtbench_T0", "bench_smollm2-135m_cpu_mtbench_T1",
           "bench_smollm2-135m_cpu_bf16_exact_mtbench_T1",
           "bench_smollm2-135m_cpu_bf16_exact_humaneval_T0",
           "bench_smollm2-135m_cpu_bf16_exact_sharegpt_T0",
           "bench_smollm2-135m_cpu_bf16_exact_mtbench_T0_vs_stock",
           "bench_smollm2-135m_cpu_humaneval_T0",
           "bench_smollm2-135m_cpu_bf16_exact_humaneval_T1",
           "bench_smollm2-135m_cpu_sharegpt_T0",
           "bench_smollm2-135m_cpu_bf16_exact_sharegpt_T1")
# The papers' own figures, cited as theirs (EAGLE_REFERENCE.md §6).
PAPER_HEAD = "top-1 about 0.78 and tau 3.94 for the paper's Vicuna-7B head (EAGLE, MT-bench, T=0)"
NOTEBOOK_TOPICS = {
    "00_why_decoding_is_slow": "one token per forward, weights read per token, this machine's cost "
                               "curve, arithmetic intensity, GPU vs CPU",
    "01_speculative_sampling": "draft / verify with a simple drafter, the accept rule and residual "
                               "derived, an explorer (sliders for p and q: alpha, residual, live "
                               "samples of the real rule), a chi-square check that the "
                               "distribution is unchanged, and what breaks it",
    "02_feature_uncertainty": "why the head reads the *shifted* token: the four inputs live as "
                              "linear heads fitted in closed form, the uncertainty measured "
                              "directly, the trained heads' ablation (`experiment uncertainty`)",
    "03_training_a_draft_head": "the head's parts counted and drawn, a live feature dump and training run "
                                "with loss curves, the shipped head compared, a training explorer "
                                "(each checkpoint's drafts, loss parts and chains along a held-out "
                                "conversation), the 7B plan with `accelerate launch`",
    "04_draft_trees": "choices lists, the EAGLE-1 tree and its attention mask and positions, "
                      "EAGLE-2 growth step by step, an EAGLE-2 explorer on a real prompt "
                      "(budget, depth, top-k -> tree, mask, accepted path)",
    "05_verification": "greedy and lossless sampling on trees, KV-cache compaction on real "
                       "tensors, a cycle-by-cycle generation stepper (T = 0 and T > 0 draws), "
                       "the distribution test live",
    "05b_eagle_in_one_page": "the whole EAGLE loop written from torch, the Hugging Face model and "
                             "the head's weights: head step, chain and tree drafts with their "
                             "masks, greedy verification and the bonus token, cache bookkeeping, "
                             "each checked; equal to vanilla, timed beside it, read against the "
                             "package",
    "06_speedups": "the lossless speedup of one bench run (bf16, exact mode) against the fastest "
                   "vanilla of the run, named, and its spread over three runs; its cost curve, "
                   "the bound tau / (c(N)/c(1) + draft) and each method's break-even, prompt "
                   "lookup and the hybrid beside EAGLE-2, a speedup explorer, a live bench",
    "06b_speedups_appendix": "optional: the cost model's gap taken apart, inside the EAGLE runs, "
                             "fp32 and bf16 without exact mode, GPU projections with their "
                             "hardware, the papers' claims against ours, the bench on your GPU",
    "07_beyond_eagle1": "EAGLE-2 vs EAGLE-1 side by side, reduced draft vocabulary, batching, "
                        "exporting a head for serving engines",
    "08_eagle3": "EAGLE-3's head: fused low, middle and high features, the training-time test, "
                 "its own draft vocabulary, trained and decoded live, exported in the authors' "
                 "layout",
}


class Files:
    """The committed results under `root`, each read once; a missing one names its command."""

    def __init__(self, root):
        self.root = Path(root)

    def path(self, name: str) -> Path:
        return self.root / RESULTS / name

    def json(self, name: str) -> dict:
        """The file's JSON; a field a section reads and the file lacks (a result made by another
        command than the one RESULTS.md names, e.g. `profile-target` without `--compare-stock`) is
        one line naming the file, not a traceback (`Record`)."""
        p = self.path(name)
        if not p.exists():
            raise EagleMiniError(f"{p} is missing: run the command RESULTS.md names for it")
        try:
            return json.loads(p.read_text(), object_hook=lambda d: Record(d, p))
        except ValueError as e:
            raise EagleMiniError(f"{p} is not JSON ({e})") from None

    def head(self) -> dict:
        return json.loads((self.root / HEAD / "config.json").read_text())


class MissingField(EagleMiniError, KeyError):
    """A field a section needs is not in a results file (still a KeyError to `except KeyError`)."""

    def __str__(self):
        return self.args[0]


class Record(dict):
    """A JSON object of the results file `path`; reading a field it lacks raises `MissingField`."""

    def __init__(self, fields: dict, path: Path):
        super().__init__(fields)
        self.path = path

    def __missing__(self, key):
        raise MissingField(f"{self.path} has no {key!r}, which RESULTS.md reads: it was made by "
                           "another command than the one RESULTS.md names for it (run that one, "
                           f"or restore the committed file: git checkout -- {self.path})")


def source(name: str, doc: dict, out: str | None = None) -> str:
    """The line under a section: which file, the command that makes it (its `--out` explicit:
    `results.writing_command`; `out`, the file by default, is what that option names), on what
    machine."""
    m = doc.get("machine")
    where = f"; {m['cpu']}, {m['threads']} thread(s), torch {m['torch']}" if m else ""
    command = writing_command(doc["command"], out or f"{RESULTS}/{name}")
    return f"*File `{RESULTS}/{name}`, made by `{command}`{where}.*"


def short_head(text: str) -> str:
    """'shipped head /abs/path/data/heads/x (N training tokens)' -> 'shipped head data/heads/x (...)'."""
    return re.sub(r"/\S*/(data/heads/)", r"\1", text)


def tree_name(spec: str) -> str:
    """A tree spec as a results file stores it, with the course default spelled out."""
    return f"{EAGLE2} = {method(EAGLE2).tree}" if spec == EAGLE2 else spec


def table(header, rows) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


# ---------------------------------------------------------------- RESULTS.md sections

def cost_section(f: Files) -> list[str]:
    c, b = f.json(COST), f.json(COST_BF16)
    ns = c["ns"][1:]

    def row(label, curve):
        return [label, *(f"{r:.2f}" for r in curve["relative"][1:]), f"{curve['median_ms'][0]:.1f}"]
    rows = [row("stock torch kernels", c["stock"]),
            row("MKL-packed weights (`packed.py`, `mkl`)", c)]
    bf = row("bf16, stock kernels (a separate run)", b) if b["ns"] == c["ns"] else None
    return ["## Verification cost curve c(n)/c(1)", "",
            f"A forward of n new tokens over a {c['prefix_len']}-token cached prefix, relative to a "
            f"forward of one (medians of {c['repeats']} interleaved rounds). The fp32 rows come from "
            "one run that timed both kernels side by side.", "",
            *table(["kernels", *(f"c({n})/c(1)" for n in ns), "c(1) ms"], rows + ([bf] if bf else [])),
            "", source(COST, c), "", source(COST_BF16, b), "",
            "Stock sgemm repacks each weight matrix into its blocked layout on every multi-token "
            "call; the `mkl` kind of `packed.py` packs once per row count (4, 8 and 16 rows, inputs "
            "padded up), and keeps the stock kernels for one-token forwards and prefill. It was the "
            "course's first packing; the `oneDNN` kind below packs once for every row count, in fp32 "
            "and bf16. Which is fastest depends on the CPU, so the commands choose by measurement "
            "(`--kernels auto`, the default: every choice timed once per CPU model, "
            "`kernels.use_kernels`); `--kernels onednn|mkl|stock` overrides it. This curve is why the "
            "course's trees are small: see notebook 00 "
            "for the roofline that explains its shape.", "", *kernels_lines(f), *compile_lines(f),
            *exact_ways_lines(f)]


def short_dtype(dtype: str) -> str:
    """A results file's dtype as the tables write it: "torch.float32" or "float32" -> "fp32"."""
    name = dtype.removeprefix("torch.")
    return {"float32": "fp32", "bfloat16": "bf16"}.get(name, name)


def kernels_lines(f: Files) -> list[str]:
    """oneDNN-packed weights against the stock kernels: each dtype's curve from one run that timed
    both side by side, with the machine's memory floor measured in the same run."""
    runs = [(name, f.json(name)) for name in KERNEL_CURVES if f.path(name).exists()]
    if not runs:
        return []
    ns = [n for n in (1, 4, 16, 64) if all(n in c["ns"] for _, c in runs)]
    rows = []
    for _, c in runs:
        dtype = short_dtype(c["dtype"])
        exact = " (exact mode)" if (c.get("exact") or {}).get("exact") else ""
        for label, curve in (("stock kernels", c["stock"]), ("oneDNN-packed weights", c)):
            ms = dict(zip(c["ns"], curve["median_ms"]))
            rows.append([f"{dtype}{exact}, {label}", *(f"{ms[n]:.1f}" for n in ns),
                         f"{ms[16] / ms[1]:.2f}" if 16 in ms else "",
                         f"{c['roofline']['floor_ms'][0]:.1f}"])
    return ["### Weights laid out once by oneDNN", "",
            "The stock kernels lay each weight matrix out in their blocked format on every call, in "
            "one-token forwards too. `packed.py`'s `onednn` kind does it once "
            "(`torch.ops.mkldnn._reorder_linear_weight`, as inductor's weight freezing does) and "
            "runs every row count on it, fp32 and bf16. Each dtype below is one run that timed both "
            "side by side (rounds interleaved), with the memory floor of a one-token forward measured "
            "in the same run (`runtime/roofline.py`).", "",
            *table(["dtype, kernels", *(f"c({n}) ms" for n in ns), "c(16)/c(1)", "floor c(1) ms"],
                   rows), "", *(line for name, c in runs for line in (source(name, c), ""))]


# `scripts/probe_compile.py` runs, oldest first: compiled pieces of the chunked forward, then the
# routes side by side (stock, chunked, padded rows, compiled pieces of the padded forward)
COMPILE_PROBES = ("probe_compile.json", "probe_exact_routes.json")


def compile_lines(f: Files) -> list[str]:
    """The routes to a cheaper exact forward (`scripts/probe_compile.py`): each variant's
    self-check and its forward times, every round, one table per committed run."""
    runs = [(name, f.json(name)) for name in COMPILE_PROBES if f.path(name).exists()]
    if not runs:
        return []
    lines = ["### Routes to a cheaper exact forward, tried", "",
             "Small ops dominate a one-token forward here, and exact mode adds its own. The probe "
             "runs each route in its own process: `stock` (exact mode off, the floor), `chunked` "
             "(linears summed over fixed K-chunks), `padded` (every product of a row-count "
             "sensitive linear on a fixed number of rows, exact mode as it now runs), and pieces "
             "compiled by inductor: the blocked attention (`attention`) and every layer's norms and "
             "MLP (`norms+mlp`, the packed linear called as an opaque op). The first run's `none` is "
             "the eager exact forward of its day (chunked). Exact means the self-check (every tree "
             "node against its one-token replay, bitwise) passed on that forward.", ""]
    for name, doc in runs:
        ns = list(doc["rows"][0]["ms"])
        rows = [[r["round"] + 1, r["variant"], "yes" if r["exact"] else f"no: {r['self_check']}",
                 f"{r['self_check_s']:.0f}", *(f"{r['ms'][n]:.1f}" for n in ns)]
                for r in doc["rows"]]
        lines += [*table(["round", "route", "exact", "compile + check s",
                          *(f"c({n}) ms" for n in ns)], rows), "", source(name, doc), ""]
    return lines


EXACT_WAYS_PROBE = "probe_exact_ways.json"


def exact_ways_lines(f: Files) -> list[str]:
    """Other ways to an exact bf16 tree forward (`scripts/probe_exact_ways.py`): bf16 SDPA per
    call, each way's bitwise check and its forward times, in one run."""
    if not f.path(EXACT_WAYS_PROBE).exists():
        return []
    doc = f.json(EXACT_WAYS_PROBE)
    forwards = list(next(iter(doc["ms"].values())))
    checks = {c["way"]: c for c in doc["checks"]}

    def exact(way):
        c = checks.get(way)
        return "not checked" if c is None else (
            f"{c['equal']}/{c['nodes']} nodes" + (" against the stock step" if c["against"] == "stock"
                                                   else ""))
    rows = [[w, exact(w), *(f"{v:.1f}" for v in ms.values())] for w, ms in doc["ms"].items()]
    sdpa = [[r["keys"], r["queries"], f"{r['queries alone']:.0f}", f"{r['one masked call']:.0f}"]
            for r in doc["sdpa_us"]]
    return ["### Other ways to an exact tree forward, tried", "",
            "Can vanilla keep its stock step, with only the tree made to match it? `views+rows` "
            "gives every tree query the stock one-query attention call over a view of exactly its "
            "keys and runs `down_proj` one row at a time; `grouped+fixedk` is exact mode's batched "
            "math attention; `blocks+fixedk` is exact mode as it runs. Bitwise: every node of "
            "chains and trees over three prefixes against its one-token replay. Times: median ms "
            f"over a {doc['prefix_len']}-token prefix, the ways interleaved in one run.", "",
            *table(["way", "bit-identical", *(f"{f} ms" for f in forwards)], rows), "",
            "What one query per call costs: bf16 `scaled_dot_product_attention` on n queries each "
            "alone (n batch elements, the bits of the one-query call) against the n in one masked "
            "call (a stock tree's), µs per call:",
            "", *table(["keys", "queries", "each query alone", "one masked call"], sdpa), "",
            source(EXACT_WAYS_PROBE, doc), ""]


def head_section(f: Files) -> list[str]:
    cfg, e, p = f.head(), f.json(EVAL), f.json(EVAL_PAPER_TREE)
    rounds = cfg.get("rounds", [])
    mt, tt = e["mtbench"], e["test_text"]
    rows = [[i, r["date"], f"{r['tokens']:,}", f"{r['seconds'] / 3600:.2f}",
             f"{r['validation']['top1']:.3f}",
             "the target's own replies" if "regenerate_command" in r else "ShareGPT"]
            for i, r in enumerate(rounds, 1)]
    cats = [[c, f"{t:.2f}"] for c, t in mt["tau_by_category"].items()]
    pm = p["mtbench"]
    return ["## The shipped draft head", "",
            f"`{HEAD}/`: {cfg['tokens_seen']:,} training tokens in {len(rounds)} rounds, "
            f"{cfg['train_seconds'] / 3600:.2f} h of CPU training, draft vocabulary "
            f"{cfg['draft_vocab_size']:,} tokens. Its model card (`{HEAD}/README.md`) gives every "
            "round's command; `EXPERIMENTS.md` beside it records what was tried and its effect.", "",
            *table(["round", "date", "tokens", "hours", "validation top-1", "training text"], rows),
            "", f"*File `{HEAD}/config.json`, written by `train-head`.*", "",
            f"**Decoding.** EAGLE-2 with the course's tree (`{tree_name(mt['tree'])}`) on all {mt['prompts']} "
            f"MT-bench first turns, {mt['max_new_tokens']} new tokens each: **tau "
            f"{mt['tau']:.2f} ± {mt['tau_se']:.3f}** tokens per draft-verify cycle (all accepted "
            "tokens over all cycles, bonus included, prefill not counted; standard error over "
            f"prompts). The mean of per-prompt tau is {mt['tau_prompt_mean']:.2f}; new tokens per "
            f"target forward, the prefill included, {mt['tokens_per_forward']:.2f}.", "",
            *table(["MT-bench category", "tau"], cats), "",
            f"With the paper's EAGLE-2 tree (`{pm['tree']}`) tau is {pm['tau']:.2f} ± "
            f"{pm['tau_se']:.3f} on the same {pm['prompts']} prompts. The course keeps its smaller "
            "tree because on this CPU a forward of many tokens costs several one-token forwards "
            "(the cost curve above), which eats the larger tree's gain.", "",
            f"**Teacher-forced** on ShareGPT test conversations ({tt['counts'][0][1]:,} positions "
            f"scored at step 0): top-1 {tt['top1']:.3f}, n-alpha for n = 0..{len(tt['alpha']) - 1}: "
            + " / ".join(f"{a:.3f}" for a in tt["alpha"]) + ".", "",
            source(EVAL, e), "", source(EVAL_PAPER_TREE, p), "", *other_sets_lines(f),
            f"For scale, the paper's figure: {PAPER_HEAD}, after far more training.", ""]


def other_sets_lines(f: Files) -> list[str]:
    """tau of the shipped head on prompt sets other than MT-bench (`eval-head --also`)."""
    if not f.path(EVAL_OTHER).exists():
        return ["**Other prompt sets** (HumanEval, ShareGPT test-split first turns): not measured "
                f"yet; `python -m eagle_mini eval-head --also humaneval,sharegpt-test --out "
                f"{RESULTS}/{EVAL_OTHER}` measures them.", ""]
    o = f.json(EVAL_OTHER)
    rows = [[name, s["prompts"], f"{s['tau']:.2f} ± {s['tau_se']:.3f}"]
            for name, s in o.get("other_sets", {}).items()]
    if not rows:
        raise EagleMiniError(f"{f.path(EVAL_OTHER)} has no other_sets: rerun it with --also")
    s = next(iter(o["other_sets"].values()))
    return [f"**Other prompt sets**, decoded the same way (tree `{tree_name(s['tree'])}`, "
            f"{s['max_new_tokens']} new tokens, prompts spread over each set), with "
            f"{short_head(o['head'])}:", "",
            *table(["prompt set", "prompts", "tau ± s.e."], rows), "", source(EVAL_OTHER, o), ""]


def ablation_section(f: Files) -> list[str]:
    from eagle_mini.experiments.ablation import FORMAT, summary_table
    u = f.json(ABLATION)
    head = ["## Feature uncertainty: the four-input ablation (EAGLE §3.1, Figs. 4 and 8)", "",
            "Four heads with the same data, steps, optimizer and layer; only the input differs "
            "(notebook 02). Validation top-1 and 1-alpha are teacher-forced; tau is EAGLE-2 "
            "decoding of MT-bench prompts. The paper's column is the paper's (Vicuna-7B).", ""]
    if u.get("format") == FORMAT:
        from eagle_mini.experiments.claims import ablation_verdict
        said = {True: "holds", False: "does not hold", None: "not shown (an interval holds 0)"}
        checks = [[c["claim"], c["paper"], c["ours"], said[ablation_verdict(c)]] for c in u["checks"]]
        body = [summary_table(u), "", *table(["claim", "paper", "ours (paired 95% interval)",
                                               "verdict"], checks)]
    else:
        rows = []
        for name, v in u["variants"].items():
            last, p = v["epochs"][-1], u["paper"][name]
            paper = f"{p['accuracy']} / {p['speedup']}x" if "speedup" in p else p["note"]
            rows.append([f"{v['label']} {v['reads']}", f"{last['top1']:.3f}",
                         f"{last['alpha'][1]:.3f}", f"{v['decode']['tau']:.2f}",
                         f"{u['uncertainty']['branches']['heads'][name]['both_branches_top1']:.2f}",
                         paper])
        d, cfg = u["data"], u["config"]
        body = [f"**An older single-seed run** (format `{u.get('format')}`): "
                f"{d['train_tokens']:,} training tokens x {cfg['epochs']} epochs, seed "
                f"{cfg['seed']}, {d['val_examples']} validation conversations, tau on "
                f"{cfg['prompts']} prompts. It keeps no per-conversation counts, so it carries no "
                "error bars and decides none of the paper's claims; the seeded run (format "
                f"`{FORMAT}`, `python -m eagle_mini experiment uncertainty --size full`) replaces "
                "this table with intervals and paired checks once it is committed.", "",
                *table(["input", "val top-1", "1-alpha", "tau", "right on both branches",
                        "paper top-1 / speedup"], rows)]
        if u.get("tau_note"):
            body += ["", f"Note in the file: {u['tau_note']}."]
    return head + body + ["", source(ABLATION, u), ""]


def claims_section(f: Files) -> list[str]:
    from eagle_mini.experiments.claims import cell
    t = f.json(CLAIMS)
    rows = [[r["claim"], f"{r['paper']['figure']} ({r['paper']['setting']})",
             "<br>".join(cell(q).replace("|", "\\|") for q in r["ours"]) or "-", r["status"]]
            for r in t["rows"]]
    return ["## The papers' claims against ours", "", t["note"], "",
            *table(["claim", "paper", "ours (95% interval)", "holds?"], rows), "",
            f"*File `{RESULTS}/{CLAIMS}` (and `paper_vs_ours.md`, with each row's rule and "
            f"sources), made by `{t['command']}` from the files it names.*", ""]


def unroll_of(commands) -> str:
    """The `--unroll` of a head's training commands, for a label ("?" when none says).

        >>> unroll_of(["python -m eagle_mini train-head --kind eagle3 --unroll 5 --out x"])
        '5'
    """
    return training_flags(commands).get("--unroll") or "?"


def lm_head_init_of(commands) -> str:
    """How an EAGLE-3 head's training commands started its lm_head, for a label.

        >>> lm_head_init_of(["train-head --kind eagle3 --unroll 5"])
        "random (the authors')"
        >>> lm_head_init_of(["train-head --kind eagle3 --lm-head-init target --norm-init-scale 0.1"])
        "the target's rows, norm x0.1 (ours)"
    """
    flags = training_flags(commands)
    init = flags.get("--lm-head-init", "random")
    if init == "random":
        return "random (the authors')"
    scale = flags.get("--norm-init-scale")
    return ("the target's rows" + (", frozen" if init == "frozen" else "")
            + (f", norm x{scale}" if scale else "") + " (ours)")


_SAME_RUN = {"--out", "--work", "--stop-after", "--log-every", "--ckpt-every", "--eval-every",
             "--threads"}   # where a run writes, how often it reports, how it is split: not training


def training_flags(commands) -> dict:
    """`train-head` options of a head's commands (later sittings override earlier ones), without
    those that change no weight (`_SAME_RUN`).

        >>> training_flags(["train-head --stream --lr 1e-3 --out a --stop-after 5", "train-head --lr 2e-3"])
        {'--stream': '', '--lr': '2e-3'}
    """
    flags = {}
    for c in commands or []:
        words = (c or "").split()
        for i, w in enumerate(words):
            if w.startswith("--") and w not in _SAME_RUN:
                nxt = words[i + 1] if i + 1 < len(words) else ""
                flags[w] = "" if nxt.startswith("--") else nxt
    return flags


def arm_differences(a_commands, b_commands) -> list[str]:
    """The training options two arms of a comparison do not share, e.g. `--mixed-precision`, as
    "flag: a's value / b's value" ("-" where an arm does not give it).

        >>> arm_differences(["train-head --kind eagle1 --lr 1e-3"], ["train-head --kind eagle3 --lr 1e-3 --seed 0"])
        ['--kind: eagle1 / eagle3', '--seed: - / 0']
    """
    a, b = training_flags(a_commands), training_flags(b_commands)
    return [f"{k}: {a.get(k, '-') or 'set'} / {b.get(k, '-') or 'set'}"
            for k in sorted(set(a) | set(b), key=lambda k: (k not in a, k)) if a.get(k) != b.get(k)]


def equal_tokens_section(f: Files) -> list[str]:
    """EAGLE-3 against EAGLE-1 trained from scratch on the same records (`compare-heads`), one
    comparison per EAGLE-3 unroll depth tried."""
    title = ["## EAGLE-3 against EAGLE-1 at equal training tokens", ""]
    found = [name for name in EQUAL_TOKENS if f.path(name).exists()]
    if not found:
        return title + ["Not measured yet: two heads trained from scratch on the same records, "
                        "each evaluated by `eval-head`, then `python -m eagle_mini compare-heads "
                        f"A.json B.json --out {RESULTS}/{EQUAL_TOKENS[-1]}`.", ""]

    def iv(q, sign=""):
        return f"{q['estimate']:{sign}.3f} [{q['low']:{sign}.3f}, {q['high']:{sign}.3f}]"
    st = f.json(found[0])["setting"]
    out = title + [
        "Each pair of heads trained from scratch on the same streamed ShareGPT records, then "
        f"decoded greedily with the tree `{tree_name(st['tree'])}` on {st['prompts']} MT-bench first "
        f"turns, {st['max_new_tokens']} new tokens each. tau is pooled over prompts, with a 95% "
        "bootstrap interval over prompts; the difference is paired over the same prompts. The "
        "EAGLE-3 head's training-time test unrolls `--unroll` draft steps.", ""]
    for name in found:
        c = f.json(name)
        d = c["tau_difference_b_minus_a"]
        rows = [[arm["kind"], f"{arm['training_tokens']:,}", iv(arm["tau"]), f"`{arm['command']}`"]
                for arm in (c["a"], c["b"])]
        verdict = ("lies above 0: the second head accepts more per cycle" if c["b_beats_a"] else
                   "lies below 0: the second head accepts fewer per cycle" if d["high"] < 0 else
                   "includes 0: no difference shown at this budget")
        out += [f"### {c['b']['kind']} unrolled {unroll_of(c['b'].get('training_commands'))} steps, "
                f"lm_head {lm_head_init_of(c['b'].get('training_commands'))}, "
                f"{c['b']['training_tokens']:,} training tokens "
                f"(equal training tokens: {c['equal_training_tokens']})", "",
                *table(["head", "training tokens", "MT-bench tau [95%]", "made by"], rows), "",
                f"**{c['b']['kind']} - {c['a']['kind']}: {iv(d, '+')}**; the interval {verdict}. "
                "The heads' training commands are in the file (`training_commands`); the options "
                f"they write differently ({c['a']['kind']} / {c['b']['kind']}, `-` where a command "
                "leaves the default): "
                + "; ".join(f"`{x}`" for x in arm_differences(c["a"].get("training_commands"),
                                                           c["b"].get("training_commands"))) + ".", "",
                *depth_lines(c, f.root),
                f"*File `{RESULTS}/{name}`, made by `{c['command']}`.*", ""]
    for name in CURVES:
        if f.path(name).exists():
            out += curve_lines(f.json(name), name)
    return out


def depth_lines(c: dict, root: Path) -> list[str]:
    """The two `eval-head` files' acceptance rate at each tree depth (mean over prompts), where
    the comparison's files are still there: which depths a difference in tau comes from."""
    docs = [Path(root) / name for name in c.get("files", [])]
    if len(docs) != 2 or not all(d.exists() for d in docs):
        return []
    by = [json.loads(d.read_text())["mtbench"].get("acceptance_per_depth") for d in docs]
    if not all(by):
        return []
    parts = [f"{arm['kind']} " + " / ".join(f"{r:.2f}" for _, r in sorted(rates.items(), key=lambda kv: int(kv[0])))
             for arm, rates in zip((c["a"], c["b"]), by)]
    return [f"Acceptance rate at tree depth 1, 2, ... (the mean over the prompts whose cycles "
            f"reached that depth, from the two files): "
            f"{'; '.join(parts)}.", ""]


def curve_lines(c: dict, name: str) -> list[str]:
    """A `tau-curve` file as a table of its points, the fitted gain per doubling and the goal."""
    def iv(q, fmt=".3f"):
        return f"{q['estimate']:{fmt}} [{q['low']:{fmt}}, {q['high']:{fmt}}]"
    b = c["fit"]["per_doubling"]
    out = [f"### tau against training tokens: {c.get('head_kind') or 'a'} head, {c.get('head') or name}", "",
           "The points are snapshots of one run (`scripts/head_from_checkpoint.py`), each at its "
           "place in that run's learning-rate schedule, not separate runs sized to each budget.", "",
           *table(["training tokens", "MT-bench tau [95%]"],
                  [[f"{p['tokens']:,}", iv(p["tau"])] for p in c["points"]]), "",
           f"Fitted `{c['fit']['form']}`: **{iv(b, '+.3f')} per doubling** of training tokens."]
    if "goal" in c:
        g = c["goal"]["tokens"]
        where = ("never, on this fit" if g["estimate"] == float("inf") else
                 f"at about {g['estimate']:,.0f} tokens [{g['low']:,.0f}, {g['high']:,.0f}]")
        out[-1] += (f" tau {c['goal']['tau']} would be reached {where} (a log-linear "
                    "extrapolation far past the points: a guess with a formula).")
    return out + ["", f"*File `{RESULTS}/{name}`, made by `{c['command']}`.*", ""]


def uses_shipped_head(f: Files, run: dict) -> bool:
    """Whether a bench run used the EAGLE-1 head shipped now: the training tokens its head note
    names against the shipped head's."""
    used = re.search(r"\(([\d,]+) training tokens", run["head"])
    return bool(used) and int(used.group(1).replace(",", "")) == f.head().get("tokens_seen")


def precision_label(r: dict) -> str:
    """How a reduced-precision run verified: in exact mode, or with the stock forward."""
    if r["dtype"] == "float32":
        return ""
    return " exact" if (r.get("exact") or {}).get("exact") else " stock (not exact)"


def bench_section(f: Files) -> list[str]:
    from eagle_mini.measure.bench import markdown_table
    out = ["## Speed on this CPU (`bench`)", "",
           "Methods interleaved prompt by prompt in one run; speedups are ratios within that run. "
           "`predicted` is the cost model tau / (c(N)/c(1) + draft cost) from the curve measured "
           "in the same run. `draft/verify/other` splits an EAGLE method's time: drafting (and the "
           "head's re-run over accepted tokens), the verify forwards with the acceptance walk and "
           "cache compaction, and the rest, which is mostly the prefill (the target and the head "
           "over the prompt), so it grows with the prompt: long ShareGPT prompts give it a larger "
           "share. Each run names the head it used, and whether that is the EAGLE-1 head shipped "
           "now.", ""]
    for name in BENCHES:
        r = f.json(f"{name}/bench.json")
        current = uses_shipped_head(f, r)
        eagle = {m: v for m, v in r["methods"].items() if m in EAGLE_METHODS}
        verify = [v["verify_fraction"] for v in eagle.values()]
        best = max(eagle, key=lambda m: eagle[m]["speedup"])
        curve = dict(zip(r["cost_curve"]["ns"], r["cost_curve"]["relative"]))
        title = (f"### {r['dtype']}{precision_label(r)}, T={r['temperature']:g}, {r['n']} "
                 f"{r['dataset']} prompts x {r['max_new_tokens']} tokens")
        facts = (f"Head: {short_head(r['head'])}"
                 + (" (the EAGLE-1 head shipped now)" if current else
                    " (an older head than the one shipped now)") + ". Verification takes "
                 f"{min(verify):.0%}-{max(verify):.0%} of the EAGLE methods' time; this run's "
                 f"c(16)/c(1) is {curve.get(16, float('nan')):.2f}. Fastest EAGLE method: "
                 f"{best}, {eagle[best]['speedup']:.2f}x vanilla.")
        parting = [m for m, v in r["methods"].items() if v["equal_to_vanilla"] is False]
        drafting = [m for m in parting if m not in VANILLAS]
        if r["temperature"] == 0 and drafting:
            agree = [r["methods"][m]["prefix_agreement"] for m in drafting]
            facts += (" " + ("No drafting method reproduces vanilla greedy"
                             if len(drafting) == len([m for m in r["methods"] if m not in VANILLAS])
                             else ", ".join(drafting) + (" parts" if len(drafting) == 1 else " part")
                             + " from vanilla greedy") + " in this dtype: texts part at ties and near-ties of the logits, which a "
                      "many-token forward rounds differently from a one-token forward, after "
                      f"{min(agree):.0%}-{max(agree):.0%} of the tokens (the notes under the "
                      "table give the logit margins). This is why fp32 is the reference here, and "
                      "why \"lossless\" in bf16/fp16 means \"up to ties at that precision\".")
        elif r["temperature"] == 0 and parting:
            facts += (f" Every drafting method reproduces vanilla greedy; {', '.join(parting)}, a "
                      "vanilla of another forward (a speed peer, not a check of ours), parts from "
                      "it at near-ties, which its forward rounds differently (the notes under the "
                      "table give the logit margins).")
        if r["temperature"] > 0:
            facts += (" Outputs are samples, so \"= vanilla\" does not apply: the chi-square tests "
                      "check losslessness at T > 0.")
        out += [title, "", facts, "", markdown_table(r).rstrip("\n"), ""]
        if r.get("tau_note"):
            out += [f"Note in the file: {r['tau_note']}.", ""]
        out += [source(f"{name}/bench.json", r, out=f"{RESULTS}/{name}"), ""]
    return out


def lossless_section(f: Files) -> list[str]:
    c = f.json(LOSSLESS)
    methods = [m for m in c["tau"]]
    same = {m: sum(r[m]["identical"] for r in c["rows"]) for m in methods}
    return ["## Losslessness (`check-lossless`)", "",
            f"Greedy EAGLE against vanilla greedy on {len(c['rows'])} MT-bench prompts spread over "
            f"its categories, {c['max_new_tokens']} new tokens, {short_head(c['head'])}: "
            + "; ".join(f"{m} identical on {same[m]}/{len(c['rows'])} (tau {c['tau'][m]:.2f})"
                        for m in methods) + ".", "", source(LOSSLESS, c), ""]


def plan_section() -> list[str]:
    from eagle_mini.models import BIG_CONFIGS
    from eagle_mini.training.commands import training_plan
    tokens = 68_000 * 1_000
    p = training_plan(BIG_CONFIGS["vicuna-7b"], tokens)
    return ["## What a 7B head costs (computed, not measured)", "",
            "`eagle_mini.training.commands.training_plan` for Vicuna-7B on the paper's data "
            "(ShareGPT's 68k dialogues at about 1k tokens each): features on disk "
            f"{p['feature_disk_gb']:,.0f} GB in fp16, the target {p['target_bf16_gb']:.1f} GB in "
            f"bf16, the head {p['head_params_m'] / 1e3:.2f}B parameters = "
            f"{p['head_adamw_fp32_gb']:.1f} GB with AdamW state in fp32. Notebook 03 turns these "
            "into GPU-hours under a stated assumption.", ""]


def _rehearsal_greedy(method: str, g: dict) -> str:
    """One method's greedy agreement with vanilla in the rehearsal, and where it parts."""
    text = f"{method} equal to vanilla on {g['identical_prompts']}/{g['prompts']} prompts"
    d = g.get("first_difference")
    if d:
        shares = ", ".join(f"{x:.0%}" for x in d["share_of_vanilla_gaps_at_most_margin"])
        text += (f" (they part where vanilla's top-1 led the chosen token by "
                 f"{', '.join(f'{x:.3f}' for x in d['margins'])} in logit; {shares} of "
                 "vanilla's own positions have a top-1 - top-2 gap that small, median "
                 f"{d['median_vanilla_gap']:.3f})")
    return text


def _rehearsal_machine(r: dict) -> str:
    """The rehearsal's machine, its model (shape, build and save) and the features it dumped."""
    m = r["model"]
    return (
        f"Machine: {r['machine']['cpu']} (family/model {r['machine'].get('cpu_family_model', '?')}; "
        f"{', '.join(r['machine'].get('cpu_features', [])) or 'no listed features'}), "
        f"{r['machine']['threads']} threads. "
        f"Model: {m['parameters']:,} parameters ({m['shape']['num_hidden_layers']} layers, hidden "
        f"{m['shape']['hidden_size']}, vocabulary {m['shape']['vocab_size']:,}), {m['dtype']}, "
        f"built in {m['build_seconds']:.0f} s and saved in {m['save_seconds']:.0f} s "
        f"({m['bytes'] / 1e9:.1f} GB). Features dumped: "
        + ", ".join(f"{k} {v['tokens']:,} tokens" for k, v in r["features"].items()) + ".")


def _rehearsal_cost_curve(f: Files, r: dict) -> str:
    """The 7B-shaped cost curve c(n)/c(1), and how far it stays cheap beside the 135M target's."""
    c, m = r["cost_curve"], r["model"]
    rel = dict(zip(c["ns"], c["relative"]))
    ms = dict(zip(c["ns"], c["median_ms"]))
    shown_ns = [n for n in (1, 2, 8, 16, 32, 64) if n in rel]
    flat, flat_small = cheap_until(c), cheap_until(f.json(COST))
    return (
        f"**Cost curve** after a {c['prefix_len']}-token prefix, median of {c['repeats']}: "
        + ", ".join(f"c({n}) {ms[n]:,.0f} ms" for n in shown_ns[:1])
        + "; c(n)/c(1) " + ", ".join(f"n={n}: {rel[n]:.2f}" for n in shown_ns[1:])
        + f". Up to n = {flat} c(n)/c(1) stays under {CHEAP}: a forward of that many tokens reads "
        f"the same {m['bytes'] / 1e9:.1f} GB of weights as a forward of one and costs about as much "
        "(memory-bound); "
        f"beyond it the arithmetic shows. The 135M target's fp32 curve at the top of this file "
        f"stays under {CHEAP} only up to n = {flat_small}.")


def rehearsal_section(f: Files) -> list[str]:
    """`rehearse` at Vicuna-7B shape: each step's time and peak RSS beside `training_plan`."""
    title = ["## The 7B dress rehearsal (measured, random weights)", ""]
    if not f.path(REHEARSAL).exists():
        return title + ["Not run yet: `python -m eagle_mini rehearse` on a CPU with bf16 units "
                        f"(avx512_bf16 or amx_bf16) writes `{RESULTS}/{REHEARSAL}`.", ""]
    r = f.json(REHEARSAL)
    rows = [[f"`{name}`", f"{s['seconds']:,.0f}", f"{s['peak_rss_gb']:.1f}",
             f"{s['predicted_gb']:.1f}", f"{s['rss_minus_predicted_gb']:+.1f}"]
            for name, s in r["steps"].items()]
    resume = "; ".join(
        f"{k}: {'identical' if v['identical'] else 'NOT identical'} ({v['tensors']} tensors, "
        f"largest difference {v['max_abs_difference']:.1g}, checkpoint in {v['checkpoint_dtype']})"
        for k, v in r["resume"].items())
    return title + [
        r["what"], "", _rehearsal_machine(r), "",
        *table(["step", "seconds", "peak RSS (GB)", "training_plan (GB)", "RSS - plan (GB)"], rows),
        "",
        f"`training_plan` counts the target in bf16, plus the head with fp32 AdamW in `train-head` "
        f"steps; peak RSS adds Python, torch and activations. Peak over all steps "
        f"{r['peak_rss_gb']:.1f} GB against the {r['budget_gb']:.1f} GB machine: "
        f"{'fits' if r['fits_budget'] else 'DOES NOT FIT'}. All steps: "
        f"{r['seconds'] / 60:.0f} min. Each step's command is in the file (`steps.<name>.command`).",
        "",
        f"**Resume** (stopped after {r['sizes']['stop_after']} of {r['sizes']['steps']} steps, "
        f"then the same command; against an uninterrupted run): {resume}.", "",
        "**Greedy decoding** (" f"{r['sizes']['gen_prompts']} MT-bench prompts, "
        f"{r['sizes']['gen_tokens']} new tokens, bf16): "
        + "; ".join(_rehearsal_greedy(k, g) for k, g in r["greedy"].items()) + "."
        + ("" if all(g["identical_prompts"] == g["prompts"] for g in r["greedy"].values()) else
           " In bf16 a forward of many tokens rounds differently from a forward of one, so greedy "
           "texts part at near-ties of the logits, as in the bf16 bench above."), "",
        _rehearsal_cost_curve(f, r), "",
        f"**Export** in the authors' layouts: " + "; ".join(
            f"{k}: {', '.join(files)}" for k, files in r["export"].items()) + ".", "",
        source(REHEARSAL, r), ""]


def results_markdown(root=".") -> str:
    f = Files(root)
    parts = [["# Results", "",
              f"Generated by `{COMMAND}` from the committed files in `{RESULTS}/` and `{HEAD}/`; "
              "do not edit by hand. Every figure names the file it was read from and the command "
              "that made that file, with the machine it ran on. Measurements are at batch 1 on a "
              "2-core x86-64 CPU unless a file names a GPU; timings on such a machine are noisy, "
              "so methods are compared as ratios measured side by side in one run. Terms: "
              "[glossary](notebooks/GLOSSARY.md).", ""],
             cost_section(f), head_section(f), equal_tokens_section(f), claims_section(f),
             ablation_section(f),
             bench_section(f), spread_lines(f), lossless_section(f), plan_section(), rehearsal_section(f)]
    return "\n".join(line for part in parts for line in part).rstrip("\n") + "\n"


# ---------------------------------------------------------------- README blocks

def readme_results(f: Files) -> str:
    e, p, c, lo = f.json(EVAL), f.json(EVAL_PAPER_TREE), f.json(COST), f.json(LOSSLESS)
    bench = f.json(f"{BENCHES[0]}/bench.json")
    curve = dict(zip(c["ns"], c["relative"]))
    eagle2 = bench["methods"][EAGLE2]
    rows = [[f"tau, EAGLE-2 (`{tree_name(e['mtbench']['tree'])}`), {e['mtbench']['prompts']} MT-bench prompts",
             f"{e['mtbench']['tau']:.2f} ± {e['mtbench']['tau_se']:.3f}", f"`{EVAL}`"],
            [f"tau, the paper's EAGLE-2 tree (`{p['mtbench']['tree']}`)",
             f"{p['mtbench']['tau']:.2f} ± {p['mtbench']['tau_se']:.3f}", f"`{EVAL_PAPER_TREE}`"],
            ["top-1 / 1-alpha, ShareGPT test text", f"{e['test_text']['top1']:.3f} / "
             f"{e['test_text']['alpha'][1]:.3f}", f"`{EVAL}`"],
            [f"greedy EAGLE = vanilla, {len(lo['rows'])} prompts",
             "all identical" if lo["all_identical"] else "NOT all identical", f"`{LOSSLESS}`"],
            [f"c(16)/c(1) and c(64)/c(1), fp32, {'MKL-packed' if c.get('packed') else 'stock kernels'} "
             f"({c['machine']['cpu']})", f"{curve[16]:.2f} and {curve[64]:.2f}", f"`{COST}`"],
            [f"EAGLE-2 speed vs vanilla, fp32 "
             f"({'the shipped head' if uses_shipped_head(f, bench) else 'an older head'}, "
             f"{bench['n']} prompts, {bench['machine']['cpu']})",
             f"{eagle2['speedup']:.2f}x", f"`{BENCHES[0]}/`"],
            *(best_row(f, name) for name in (FASTEST[0], BENCHES[0])),
            *spread_row(f),
            hybrid_row(f),
            *kernel_rows(f)]
    return "\n".join(table(["measured (SmolLM2-135M, shipped head, the CPU each row names)", "ours", "file"], rows)
                     + ["", f"Generated by `{COMMAND}`; every figure with its command and the "
                            "rest of the results: [RESULTS.md](RESULTS.md)."])


def best_row(f: Files, name: str) -> list[str]:
    """The fastest EAGLE method of a bench run against vanilla in the same run (and against the
    run's fastest vanilla where that is another, `bench.baseline`), and whether every method's
    text equalled vanilla's (the lossless claim the speed stands on)."""
    bench = f.json(f"{name}/bench.json")
    eagle = {m: r for m, r in bench["methods"].items() if m in EAGLE_METHODS}
    best = max(eagle, key=lambda m: eagle[m]["speedup"])
    same = all(r["equal_to_vanilla"] for m, r in bench["methods"].items() if m not in VANILLAS)
    precision = short_dtype(bench["dtype"])
    held = baseline(bench)
    against = ("" if held["name"] == VANILLA else
               f" ({held['speedups'][best]:.2f}x against {held['name']}, the run's fastest "
               "vanilla)")
    return [f"fastest EAGLE method vs vanilla, {precision}{precision_label(bench)}, "
            f"T={bench['temperature']:g} "
            f"({bench['n']} prompts, {bench['machine']['cpu']}; every drafting method's text = "
            "vanilla's: "
            f"{'yes' if same else 'NO'})", f"`{best}` {eagle[best]['speedup']:.2f}x{against}",
            f"`{name}/`"]


def repeat_runs(f: Files) -> list[tuple[str, dict]]:
    """The committed runs of the headline configuration (`REPEATS`), as (name, bench.json)."""
    return [(name, f.json(f"{name}/bench.json")) for name in REPEATS
            if f.path(f"{name}/bench.json").exists()]


def spread(values) -> str:
    """min / median / max of a few values, two decimals.

        >>> spread([1.0, 3.0, 2.0])
        '1.00 / 2.00 / 3.00'
    """
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def spread_lines(f: Files) -> list[str]:
    """Each drafting method of the headline configuration over its repeated runs: tok/s and the
    speedup against each run's fastest vanilla, min / median / max, and whether its text equalled
    vanilla's in every run."""
    runs = repeat_runs(f)
    if len(runs) < 2:
        return []
    bases = [baseline(r) for _, r in runs]
    methods = [m for m in runs[0][1]["methods"] if m in bases[0]["speedups"]]
    rows = [[f"fastest vanilla ({', '.join(sorted({b['name'] for b in bases}))})",
             spread([b["tokens_per_second"] for b in bases]), "1.00", ""]]
    for m in methods:
        got = [r["methods"][m] for _, r in runs if m in r["methods"]]
        rows.append([f"`{m}`", spread([g["tokens_per_second"] for g in got]),
                     spread([b["speedups"][m] for b in bases if m in b["speedups"]]),
                     "yes" if all(g["equal_to_vanilla"] for g in got) else "NO"])
    first = runs[0][1]
    return [f"### The headline run, repeated: {len(runs)} runs", "",
            f"The same command ({first['dtype']}{precision_label(first)}, T={first['temperature']:g}, "
            f"{first['n']} {first['dataset']} prompts x {first['max_new_tokens']} tokens), run "
            f"{len(runs)} times alone on the machine; each run's speedup is against the fastest "
            "vanilla of that run. min / median / max:", "",
            *table(["method", "tok/s", "vs fastest vanilla", "= vanilla, every run"], rows), "",
            *(source(f"{name}/bench.json", r, out=f"{RESULTS}/{name}") for name, r in runs), ""]


def spread_row(f: Files) -> list[list[str]]:
    """The README's row: the drafting method with the best median speedup against each run's
    fastest vanilla over the headline configuration's repeated runs, min / median / max."""
    runs = repeat_runs(f)
    if len(runs) < 2:
        return []
    bases = [baseline(r) for _, r in runs]
    eagle = [m for m in bases[0]["speedups"] if m in EAGLE_METHODS]
    best = max(eagle, key=lambda m: statistics.median(b["speedups"][m] for b in bases))
    r = runs[0][1]
    return [[f"fastest EAGLE method vs the run's fastest vanilla, {short_dtype(r['dtype'])}"
             f"{precision_label(r)}, {r['dataset']}, {len(runs)} runs of the same command "
             f"({r['machine']['cpu']}), min / median / max",
             f"`{best}` {spread([b['speedups'][best] for b in bases])}",
             ", ".join(f"`{name}/`" for name, _ in runs)]]


def hybrid_row(f: Files) -> list[str]:
    """eagle2+lookup against the faster of its two parts, eagle2 and prompt-lookup, in each of the
    `FASTEST` runs (one interleaved run per set)."""
    ratios, cpus = [], set()
    for name in FASTEST:
        bench = f.json(f"{name}/bench.json")
        m = bench["methods"]
        faster = max(m[EAGLE2]["tokens_per_second"], m[PROMPT_LOOKUP]["tokens_per_second"])
        ratios.append(f"{bench['dataset']} {m[EAGLE2_LOOKUP]['tokens_per_second'] / faster:.2f}x")
        cpus.add(bench["machine"]["cpu"])
    return [f"`{EAGLE2_LOOKUP}` against the faster of `{EAGLE2}` and `{PROMPT_LOOKUP}`, bf16 "
            f"exact, T=0 ({bench['n']} prompts per set, {', '.join(sorted(cpus))})",
            ", ".join(ratios), "`" + "/`, `".join(FASTEST) + "/`"]


def kernel_rows(f: Files) -> list[list[str]]:
    """c(1) with the oneDNN-packed weights against the stock kernels and the memory floor, one
    run per dtype."""
    rows = []
    for name in KERNEL_CURVES:
        if f.path(name).exists():
            c = f.json(name)
            dtype = c["dtype"].removeprefix("torch.")
            rows.append([f"c(1), {dtype}: oneDNN-packed / stock kernels / memory floor, one run "
                         f"({c['machine']['cpu']})", f"{c['median_ms'][0]:.1f} / "
                         f"{c['stock']['median_ms'][0]:.1f} / {c['roofline']['floor_ms'][0]:.1f} ms",
                         f"`{name}`"])
    return rows


def notebook_minutes(nb: dict) -> float | None:
    """Wall time of a notebook's committed run (its parsed JSON): first cell's start to last
    cell's reply (nbclient's `execution` timestamps); None if the notebook carries none."""
    stamps = [c["metadata"]["execution"] for c in nb["cells"]
              if c["cell_type"] == "code" and "execution" in c.get("metadata", {})]
    if not stamps:
        return None

    def t(s):
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (t(stamps[-1]["shell.execute_reply"]) - t(stamps[0]["iopub.execute_input"])).total_seconds() / 60


def notebook_run(path: Path) -> str:
    """The committed run's minutes, then in brackets the CPU and scale that
    `python -m eagle_mini notebooks` recorded in its metadata (none for a run made otherwise)."""
    nb = json.loads(path.read_text())
    minutes = notebook_minutes(nb)
    if minutes is None:
        return "-"
    run = nb.get("metadata", {}).get("eagle_mini", {})
    where = ", ".join(x for x in (run.get("machine", {}).get("cpu"), run.get("scale")) if x)
    return f"{minutes:.1f} min" + (f" ({where})" if where else "")


def readme_notebooks(root: Path) -> str:
    rows = []
    for path in sorted((root / "notebooks").glob("[0-9]*.ipynb")):
        rows.append([f"[`{path.stem}`](notebooks/{path.name})",
                     NOTEBOOK_TOPICS.get(path.stem, "(add its topic to report.NOTEBOOK_TOPICS)"),
                     notebook_run(path)])
    return "\n".join(table(["notebook", "what it teaches", "committed run"], rows)
                     + ["", "The run time is the committed run's, from its cells' timestamps "
                            "(first cell started to last cell done), with the machine and scale "
                            "`python -m eagle_mini notebooks` (`make notebooks`) recorded in the "
                            f"notebook; generated by `{COMMAND}`."])


def readme_blocks(root=".") -> dict[str, str]:
    return {"results": readme_results(Files(root)), "notebooks": readme_notebooks(Path(root)),
            "gpu_fit": fit_markdown()}


def fill(text: str, blocks: dict[str, str]) -> str:
    """`text` with every `<!-- generated:NAME -->...<!-- /generated:NAME -->` block replaced."""
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.DOTALL)
        if not pattern.search(text):
            raise EagleMiniError(f"README.md has no <!-- generated:{name} --> block")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def expected(root=".") -> dict[Path, str]:
    root = Path(root)
    readme = root / "README.md"
    return {root / "RESULTS.md": results_markdown(root),
            readme: fill(readme.read_text(), readme_blocks(root))}


def stale(root=".") -> list[Path]:
    """The documents that differ from what the committed results produce."""
    return [p for p, text in expected(root).items() if not p.exists() or p.read_text() != text]


def write(root=".") -> list[Path]:
    """Write RESULTS.md and the README's blocks; returns the files that changed."""
    changed = []
    for p, text in expected(root).items():
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
            changed.append(p)
    return changed
