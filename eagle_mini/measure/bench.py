"""`python -m eagle_mini bench`: EAGLE against what a user would pick instead, measured side by side.

Fairness rules: the same prompts, dtype and threads for every method; one warm-up generation per
method; methods interleaved per prompt (the order rotates, so slow drift of the machine hits all
alike); wall time around the whole generation. The `speedup` column is relative to the package's
`vanilla` *in the same run* (the method's own baseline, against which "= vanilla" is the lossless
check); `vs fastest` is relative to the fastest vanilla of the run (`baseline`): the package's
vanilla, its stock forward in exact mode, HF `generate` eager or compiled (`hf-compiled`, whose
first call compiles: that call is the warm-up, kept out of its tok/s and reported beside it).
Beside each measured speedup the bench prints the speedup the cost model predicts,

    speedup ~ L / (c(N)/c(1) + draft time per cycle / t(1)),

with L = tau, the mean tokens per draft-verify cycle (bonus included, prefill not counted), N the tree size, c(n) the target's forward time for n new tokens
(measured in the same run) and t(1) = c(1). The gap between the two is overhead outside both.
Batch size 1.

In exact mode (`runtime/exact/`) vanilla runs on the same batch-invariant forward as EAGLE, which
costs something; the bench then also runs vanilla on the stock forward, interleaved like a method
(`stock_vanilla`), one more candidate for the fastest vanilla.

The command also checks the machine (`load.py`): the load average before and after, and the cost
curve's rounds, which repeat the same work; a busy machine is said in one line and recorded under
`machine.load`. `demo` times its methods with the same interleaving (`interleaved`), one prompt
repeated in rounds.
"""
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from eagle_mini.data import evenly_spaced, load_prompts
from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.auto import choose_auto_tree, predict
from eagle_mini.measure.evaluate import pooled_tau
from eagle_mini.decode import prepare_prompt
from eagle_mini.methods import (AUTO, BENCH_DEFAULT, DRAFTING, EAGLE2, METHOD_NAMES, VANILLA,
                                VANILLAS, method as method_row)
from eagle_mini.runtime.run import pick_head, run_method, static_cache_len
from eagle_mini.runtime.exact import exact_of, stock_forward
from eagle_mini.runtime.kernels import kernels_note
from eagle_mini.runtime.cost import cost_curve, pool_cost_curves
from eagle_mini.results import machine_info, results_json

STOCK_VANILLA = "vanilla, stock forward"   # exact mode's other baseline (not a method of the table)


@dataclass(frozen=True)
class Variant:
    """A bench row beyond the method table, under its own `label`: the table's method `method`
    drafted by its own `head` (an EAGLE row, e.g. a second head beside the run's), or with more
    Hugging Face `generate` options (an "hf" row, e.g. `{"assistant_model": model}`: HF assisted
    generation with a small draft model). `note` says what it is in the results file."""
    label: str
    method: str
    head: object = None
    hf_options: dict = field(default_factory=dict)
    note: str = ""

    def check(self):
        row = method_row(self.method)
        if self.label in METHOD_NAMES:
            raise EagleMiniError(f"a variant's label must not be a method name: {self.label!r}")
        if row.name == AUTO:
            raise EagleMiniError("an `auto` variant would share the run's measured tree; use eagle2")
        if row.is_eagle and self.head is None:
            raise EagleMiniError(f"variant {self.label!r} runs {row.name}: it needs a head")
        return self


def run_one(target, head, method, prompt, max_new_tokens, temperature, seed, auto_tree=None,
            variants=None, cache_len=None):
    """One generation on the runtime's clock (`run_method`) -> (output ids, stats). `method` is a
    method name, the label of one of `variants` (its method, with its head and its Hugging Face
    options), or `STOCK_VANILLA` (vanilla on an exact target's stock forward, switched outside the
    clock). `cache_len`: the static cache of a compiled row (`hf-compiled`), one size for the
    whole run so that it compiles once."""
    if method == STOCK_VANILLA:
        with stock_forward(target):
            return run_one(target, head, VANILLA, prompt, max_new_tokens, temperature, seed)
    options = {}
    v = (variants or {}).get(method)
    if v is not None:
        method, options = v.method, v.hf_options
        head = v.head if v.head is not None else head
    if cache_len and is_compiled(method, options):
        options = {**options, "max_cache_len": cache_len}
    tree = auto_tree if method == AUTO else None
    gen = run_method(target, head, method, prompt, max_new_tokens, tree=tree, options=options,
                     temperature=temperature, seed=seed)
    return gen.output_ids, gen.stats


def is_compiled(method, options=None) -> bool:
    """Whether a row runs HF `generate` with a compiled step (`runtime.run.compile_options`); a
    name outside the table (`STOCK_VANILLA`) does not."""
    hf = method_row(method).hf_options if method in METHOD_NAMES else {}
    return bool({**hf, **(options or {})}.get("compiled"))


def calibration_prompts(measured, k: int = 2) -> list[str]:
    """k prompts for warm-up and for sizing `auto`'s tree that are never measured: the last MT-bench
    first turns outside `measured`, else ShareGPT test-split first turns.

        >>> calibration_prompts(load_prompts("mtbench")) == load_prompts("sharegpt-test", 2)
        True
    """
    seen = set(measured)
    rest = [p for p in load_prompts("mtbench") if p not in seen]
    return rest[-k:] if len(rest) >= k else load_prompts("sharegpt-test", k)


def _bench_inputs(methods, dataset, n, prompts):
    """(methods with vanilla first where missing, the measured prompts, the dataset's name, the
    calibration prompts); refuses an unknown method."""
    bad = [m for m in methods if m not in METHOD_NAMES]
    if bad:
        raise EagleMiniError(f"unknown method(s) {', '.join(bad)}; known: {', '.join(METHOD_NAMES)}")
    if VANILLA not in methods:
        methods = (VANILLA,) + tuple(methods)
    if prompts is None:
        prompts = evenly_spaced(load_prompts(dataset), n)  # MT-bench: all 8 categories
        return methods, prompts, dataset, calibration_prompts(prompts)
    return methods, prompts, "custom", prompts[:1]


def interleaved(run, methods, prompts, between=None, later=frozenset(), progress=False,
                desc="bench") -> tuple[dict, dict, list]:
    """Every method on every prompt, the order rotating per prompt (slow drift of the machine hits
    every method alike), `between()` called before each prompt index in `later` (`len(prompts)`:
    after the last): (stats per method, output ids per method, what `between` returned).
    `run(method, prompt, i) -> (output ids, stats)` is one generation of prompt i. A prompt given
    k times is k rounds of the same work (`demo`).

        >>> order = []
        >>> def run(m, prompt, i):
        ...     order.append(m)
        ...     return [i], {"seconds": 1.0}
        >>> rows, outputs, _ = interleaved(run, ("a", "b", "c"), ["Hi"] * 3)
        >>> order, outputs["b"]
        (['a', 'b', 'c', 'b', 'c', 'a', 'c', 'a', 'b'], [[0], [1], [2]])
    """
    rows, outputs, extra = defaultdict(list), defaultdict(list), []
    bar = _progress(len(prompts) * len(methods), progress, desc)
    for i, prompt in enumerate(prompts):
        if i in later:
            extra.append(between())
        order = list(methods[i % len(methods):]) + list(methods[:i % len(methods)])
        for m in order:
            out, stats = run(m, prompt, i)
            rows[m].append(stats)
            outputs[m].append(out)
            bar.update(1)
    bar.close()
    if len(prompts) in later:
        extra.append(between())
    return rows, outputs, extra


def _method_summaries(target, methods, prompts, rows, outputs, curve, temperature,
                      auto_tree, variants=None) -> dict:
    """Per method, `summarize` against vanilla; where a greedy method parts from vanilla, where
    and how close the choice was (`first_difference_margins`)."""
    van_tps = pooled(rows[VANILLA])["tokens_per_second"]
    gaps, out = None, {}
    for m in methods:
        kind = variants[m].method if m in (variants or {}) else m
        out[m] = summarize(kind, rows[m], outputs[m], outputs[VANILLA], van_tps, curve, temperature,
                           auto_tree)
        if temperature == 0 and not out[m]["equal_to_vanilla"]:
            if gaps is None:   # vanilla's own gaps: one set for every method that parts from it
                gaps = vanilla_top2_gaps(target, prompts, outputs[VANILLA])
            out[m]["first_difference"] = first_difference_margins(
                target, prompts, outputs[m], outputs[VANILLA], gaps)
    return out


def bench(target, head, methods=BENCH_DEFAULT, dataset="mtbench", n=10, max_new_tokens=128,
          temperature=0.0, seed=0, progress=True, head_note="", prompts=None,
          curve_repeats=5, curve_rounds=4, variants=()) -> dict:
    """Run every method on the same prompts, interleaved; return per-method aggregates.

    `variants` (`Variant`s) add rows beyond the method table, interleaved with the others and
    reported under their labels, after the table's methods.

    `prompts` (strings or token-id lists) replaces the dataset, e.g. for tiny test models.
    The cost curve is measured in `curve_rounds` rounds of `curve_repeats`: one before the
    prompts (it calibrates `auto`), the rest spread between them and after the last, pooled by
    `pool_cost_curves` for the predictions, so the curve sees the moments the generations do.
    """
    methods, prompts, dataset, calibration = _bench_inputs(methods, dataset, n, prompts)
    extra = {v.label: v.check() for v in variants}
    methods = tuple(methods) + tuple(extra)
    prefix = min(200, target.context_length // 4)
    def curve_round():
        return cost_curve(target, ns=(1, 2, 4, 8, 16, 32, 64), repeats=curve_repeats,
                          prefix_len=prefix, progress=progress)
    rounds = [curve_round()]
    curve = rounds[0]
    later = curve_round_points(len(prompts), curve_rounds)
    auto_tree, auto_scores = None, None
    if AUTO in methods:
        auto_tree, auto_scores = choose_auto_tree(target, pick_head(AUTO, head, pack_like=target),
                                                    curve, calibration)
    exact = target.runtime.is_exact
    timed = tuple(methods) + ((STOCK_VANILLA,) if exact else ())
    # a compiled row's static cache: one size for the run's longest prompt, so it compiles once
    cache_len = static_cache_len(max(len(prepare_prompt(target, p)) for p in prompts + calibration)
                                 + max_new_tokens)
    first_call, not_run = warm_up(lambda m: run_one(target, head, m, calibration[0], 8, temperature,
                                                    seed, auto_tree, extra, cache_len), timed)
    methods = tuple(m for m in methods if m not in not_run)
    timed = tuple(m for m in timed if m not in not_run)
    def run(m, prompt, i):
        return run_one(target, head, m, prompt, max_new_tokens, temperature, seed + i, auto_tree,
                       extra, cache_len)
    rows, outputs, more = interleaved(run, timed, prompts, curve_round, later, progress)
    curve = pool_cost_curves(rounds + more)
    result = {"dataset": dataset, "n": len(prompts), "selection": "evenly spaced over the set",
              "calibration_prompts": len(calibration), "max_new_tokens": max_new_tokens,
              "temperature": temperature, "target": target.name,
              "dtype": str(target.dtype).replace("torch.", ""), "device": str(target.device),
              "head": head_note, "cost_curve": curve, "auto_tree": str(auto_tree),
              "auto_scores": auto_scores, "kernels": target.runtime.kernels,
              "exact": exact_of(target),
              "machine": machine_info(), "methods": {}}
    if extra:
        result["variants"] = {label: {"method": v.method, "note": v.note}
                              for label, v in extra.items()}
    if not_run:
        result["not_run"] = not_run
    result["methods"] = _method_summaries(target, methods, prompts, rows, outputs, curve,
                                          temperature, auto_tree, extra)
    _note_compiles(result["methods"], extra, first_call, cache_len)
    return _with_baseline(result, rows, outputs)


def _with_baseline(result, rows, outputs) -> dict:
    """The result with vanilla on the stock forward (an exact run's) summarized, and `baseline`."""
    if STOCK_VANILLA in rows:
        result["stock_vanilla"] = summarize(
            STOCK_VANILLA, rows[STOCK_VANILLA], outputs[STOCK_VANILLA], outputs[VANILLA],
            result["methods"][VANILLA]["tokens_per_second"], result["cost_curve"],
            result["temperature"], None)
    result["baseline"] = baseline(result)
    return result


def warm_up(run, methods) -> tuple[dict, dict]:
    """One untimed generation per method, `run(method) -> (ids, stats)`: -> (its seconds per
    method, {method: why} for a compiled row whose compile failed here, e.g. without a C++
    compiler; it is said in one line and left out of the run, the rest goes on)."""
    import sys
    seconds, not_run = {}, {}
    for m in methods:
        try:
            seconds[m] = run(m)[1]["seconds"]
        except Exception as e:   # torch.compile's failures have no common type
            if not is_compiled(m):
                raise
            not_run[m] = f"its compile failed here: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"{m}: not run, {not_run[m]}", file=sys.stderr)
    return seconds, not_run


def _note_compiles(summaries, variants, first_call, cache_len):
    """A compiled row's first call (its warm-up, 8 tokens, compiling) and its static cache."""
    for m, row in summaries.items():
        v = variants.get(m)
        if is_compiled(v.method if v else m, v.hf_options if v else None):
            row["first_call_seconds"], row["static_cache_len"] = first_call[m], cache_len


def baseline(result) -> dict:
    """The vanilla a drafting method is held to: the fastest of the run's vanillas (the table's
    `VANILLAS` the bench ran: vanilla, hf-generate, hf-compiled; and vanilla on the stock forward
    where exact mode is on, `stock_vanilla`); and each drafting method's speedup against it.

        >>> r = {"methods": {"vanilla": {"tokens_per_second": 20.0},
        ...                  "hf-compiled": {"tokens_per_second": 22.0},
        ...                  "eagle2": {"tokens_per_second": 30.0, "tau": 2.0}},
        ...      "stock_vanilla": {"tokens_per_second": 24.0}}
        >>> baseline(r)
        {'name': 'vanilla, stock forward', 'tokens_per_second': 24.0, 'speedups': {'eagle2': 1.25}}
    """
    options = [(m, r["tokens_per_second"]) for m, r in result["methods"].items() if m in VANILLAS]
    if result.get("stock_vanilla"):
        options.append((STOCK_VANILLA, result["stock_vanilla"]["tokens_per_second"]))
    name, tps = max(options, key=lambda o: o[1])
    return {"name": name, "tokens_per_second": tps,
            "speedups": {m: r["tokens_per_second"] / tps for m, r in result["methods"].items()
                         if m in DRAFTING}}


def baseline_line(result, base) -> str:
    """The sentence under a bench table naming the fastest vanilla, the fastest drafting method
    against it, and a compiled row's first call (compiling, kept out of its tok/s)."""
    best = max(base["speedups"], key=base["speedups"].get, default=None)
    ran = [m for m in result["methods"] if m in VANILLAS] + (
        [STOCK_VANILLA] if result.get("stock_vanilla") else [])
    line = (f"`vs fastest`: against the fastest vanilla this run measured, `{base['name']}` "
            f"({base['tokens_per_second']:.1f} tok/s; vanillas run: "
            + ", ".join(f"`{m}`" for m in ran) + ")"
            + (f"; the fastest drafting method, `{best}`, runs at {base['speedups'][best]:.2f}x it."
               if best else "."))
    for m, r in result["methods"].items():
        if "first_call_seconds" in r:
            line += (f" `{m}`'s first call (compiling, static cache of {r['static_cache_len']}) took "
                     f"{r['first_call_seconds']:.0f} s, kept out of its tok/s.")
    return line


def curve_round_points(n_prompts: int, rounds: int) -> set[int]:
    """Before which prompts (n_prompts: after the last) a bench measures its later cost-curve
    rounds; the first round runs before everything.

        >>> sorted(curve_round_points(20, 4)), curve_round_points(20, 1)
        ([7, 13, 20], set())
    """
    if rounds < 1:
        raise EagleMiniError(f"a bench measures its cost curve in at least one round, got {rounds}")
    return {round(k * n_prompts / (rounds - 1)) for k in range(1, rounds)} if rounds > 1 else set()


def common_prefix(a, b) -> int:
    """How many leading tokens two outputs share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@torch.no_grad()
def vanilla_top2_gaps(target, prompts, vanilla_outs) -> list[float]:
    """Top-1 minus top-2 logit at every position of vanilla's outputs (one forward per prompt)."""
    from eagle_mini.decode import prepare_prompt
    gaps = []
    for prompt, van in zip(prompts, vanilla_outs):
        ids = prepare_prompt(target, prompt)
        logits = target.model(torch.tensor([ids + van], device=target.device)).logits[0].float()
        top = logits[len(ids) - 1:len(ids) - 1 + len(van)].topk(2, dim=-1).values
        gaps += (top[:, 0] - top[:, 1]).tolist()
    return gaps


@torch.no_grad()
def first_difference_margins(target, prompts, outs, vanilla_outs, gaps) -> dict | None:
    """Where a method's greedy text first parts from vanilla's: how close was the choice?

    For each prompt whose output differs, one forward of prompt + shared prefix (in the run's
    dtype) gives `logit[vanilla's token] - logit[method's token]` at the parting position. Beside
    it, from `gaps` (`vanilla_top2_gaps`), the share of vanilla's own positions whose top-1 - top-2
    gap is no larger: if partings happen only at gaps that rare and that small, the texts part at
    near-ties (float rounding), not at a wrong acceptance. None when no prompt differs.
    """
    from eagle_mini.decode import prepare_prompt
    margins = []
    for prompt, out, van in zip(prompts, outs, vanilla_outs):
        k = common_prefix(out, van)
        if k == min(len(out), len(van)):
            continue   # same text (or one stopped earlier at the same place)
        ids = prepare_prompt(target, prompt) + van[:k]
        logits = target.model(torch.tensor([ids], device=target.device)).logits[0, -1].float()
        margins.append(float(logits[van[k]] - logits[out[k]]))
    if not margins:
        return None
    share = [sum(g <= abs(m) for g in gaps) / len(gaps) for m in margins]
    return {"margins": margins, "median_vanilla_gap": statistics.median(gaps),
            "share_of_vanilla_gaps_at_most_margin": share}


def pooled(stats) -> dict:
    """Generations pooled as the bench reports a method: tokens over seconds, both summed over every
    generation (a prompt's rounds, or the prompts), tau over every cycle (`pooled_tau`).

        >>> pooled([{"new_tokens": 10, "seconds": 1.0, "target_forwards": 4},
        ...         {"new_tokens": 10, "seconds": 3.0, "target_forwards": 6}])["tokens_per_second"]
        5.0
    """
    tokens = sum(s["new_tokens"] for s in stats)
    seconds = sum(s["seconds"] for s in stats)
    forwards = sum(s["target_forwards"] for s in stats)
    return {"tokens_per_second": tokens / seconds, "tau": pooled_tau(stats)[0],
            "tokens_per_forward": tokens / max(forwards, 1), "new_tokens": tokens,
            "seconds": seconds}


def summarize(method, stats, outs, vanilla_outs, vanilla_tps, curve, temperature, auto_tree):
    p = pooled(stats)
    row = {"tokens_per_second": p["tokens_per_second"],
           "speedup": p["tokens_per_second"] / vanilla_tps, "tau": p["tau"],
           "tokens_per_forward": p["tokens_per_forward"], "new_tokens": p["new_tokens"],
           "seconds": p["seconds"], "equal_to_vanilla": None}
    if temperature == 0:
        # how far from vanilla a mismatch is: whole prompts identical, and the share of tokens
        # produced before the first differing one (in bf16/fp16 a near-tie can flip between a
        # one-token and a many-token forward, after which the texts part)
        row["identical_prompts"] = sum(a == b for a, b in zip(outs, vanilla_outs))
        row["equal_to_vanilla"] = row["identical_prompts"] == len(vanilla_outs)
        row["prefix_agreement"] = (sum(common_prefix(a, b) for a, b in zip(outs, vanilla_outs))
                                   / max(sum(len(b) for b in vanilla_outs), 1))
    if "cycle_lengths" in stats[0]:
        cycles = [c for s in stats for c in s["cycle_lengths"]]
        row["cycle_length_counts"] = dict(sorted(Counter(cycles).items()))
        depth = defaultdict(list)
        for s in stats:
            for d, a in s["acceptance_per_depth"].items():
                depth[int(d)].append(a)
        row["acceptance_per_depth"] = {d: statistics.mean(v) for d, v in sorted(depth.items())}
        for part in ("draft", "verify", "other"):
            row[f"{part}_fraction"] = sum(s[f"{part}_seconds"] for s in stats) / p["seconds"]
        size = tree_size(method, auto_tree)
        row["tree_size"] = size
        row["predicted_speedup"] = predict(stats, curve, size)
        row["calibration"] = [pair for s in stats for pair in s.get("confidence_accepted", [])]
    return row


def tree_size(name, auto_tree) -> int:
    """Tokens one verification forward of EAGLE method `name` carries, the root included."""
    from eagle_mini.runtime.auto import tree_tokens
    return tree_tokens(auto_tree if name == AUTO else name)


def _progress(total, enabled, desc="bench"):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="gen", disable=not enabled)


def markdown_table(result) -> str:
    lines = [f"MT-bench-style run: {result['dataset']}, n={result['n']}, "
             f"{result['max_new_tokens']} new tokens, T={result['temperature']}, "
             f"{result['target']} {result['dtype']} on {result['device']} "
             + (f"({result['machine']['gpu']}; host " if str(result["device"]).startswith("cuda")
                and result["machine"].get("gpu") else "(")
             + f"{result['machine']['cpu']}, {result['machine']['threads']} threads"
             + (f", fp32 matmul precision {result['machine']['fp32_matmul_precision']}"
                if result["machine"].get("fp32_matmul_precision") else "")
             + (f", {kernels_note(result['kernels'])}" if result.get("kernels")
                else ", prepacked weights" if result["cost_curve"].get("packed") else "") + ")", "",
             "| method | tok/s | speedup | vs fastest | predicted | tau (per cycle) | "
             "tokens/forward | draft/verify/other | = vanilla |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = result.get("baseline") or baseline(result)
    for m, r in result["methods"].items():
        pred = f"{r['predicted_speedup']:.2f}x" if "predicted_speedup" in r else ""
        tau = "n/a" if r["tau"] is None else f"{r['tau']:.2f}"
        split = (f"{r['draft_fraction']:.0%}/{r['verify_fraction']:.0%}/{r['other_fraction']:.0%}"
                 if "draft_fraction" in r else "")
        eq = {True: "yes", False: "NO", None: "n/a"}[r["equal_to_vanilla"]]
        if r["equal_to_vanilla"] is False and "identical_prompts" in r:
            eq += (f" ({r['identical_prompts']}/{result['n']} prompts, "
                   f"{r['prefix_agreement']:.0%} of tokens before the first difference)")
        lines.append(f"| {m} | {r['tokens_per_second']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['tokens_per_second'] / base['tokens_per_second']:.2f}x | {pred} | "
                     f"{tau} | {r['tokens_per_forward']:.2f} | {split} | {eq} |")
    stock = result.get("stock_vanilla")
    if stock:
        same = ("samples" if stock["equal_to_vanilla"] is None else
                "the same text as exact vanilla" if stock["equal_to_vanilla"] else
                f"{stock['identical_prompts']}/{result['n']} prompts the same text as exact vanilla")
        lines += ["", f"Vanilla on the stock forward (exact mode off), in the same run: "
                  f"{stock['tokens_per_second']:.1f} tok/s ({same}); exact vanilla runs at "
                  f"{1 / stock['speedup']:.2f}x its speed."]
    lines += ["", baseline_line(result, base)]
    if result.get("not_run"):
        lines += ["", "Not run: " + "; ".join(f"{m}, {why}" for m, why in result["not_run"].items())
                  + "."]
    if result.get("variants"):
        lines += ["", "Rows beyond the method table: " + "; ".join(
            f"{label}: {v['note'] or v['method']}" for label, v in result["variants"].items()) + "."]
    c = result["cost_curve"]
    if "rounds_ms" in c and 16 in c["ns"]:
        k = c["ns"].index(16)
        lines += ["", f"Cost curve for `predicted`: c(1) {c['median_ms'][0]:.1f} ms, c(16)/c(1) "
                  f"{c['relative'][k]:.2f}, medians of {c['repeats']} forwards in {c['rounds']} "
                  "rounds spread over the run; each round's c(1) and c(16)/c(1): " + ", ".join(
                      f"{r[0]:.1f} ms / {r[k] / r[0]:.2f}" for r in c["rounds_ms"])]
    notes = [(m, r["first_difference"]) for m, r in result["methods"].items()
             if r.get("first_difference")]
    if notes:
        lines += ["", "Where a text first parts from vanilla's: logit(vanilla's token) - "
                  "logit(the method's token), one forward of the shared text; beside it, the share "
                  "of vanilla's own positions whose top-1 - top-2 gap is no larger.", ""]
        for m, d in notes:
            pairs = ", ".join(f"{g:.3f} ({s:.1%})" for g, s in
                              zip(d["margins"], d["share_of_vanilla_gaps_at_most_margin"]))
            lines.append(f"- {m}: {pairs}; vanilla's median top-2 gap {d['median_vanilla_gap']:.2f}")
    return "\n".join(lines) + "\n"


def calibration_bins(pairs, bins: int = 10) -> list[dict]:
    """(draft confidence, accepted) pairs -> per confidence bin: its range, count, accepted count.

    EAGLE-2 §3's calibration observation in a form small enough to commit.
    >>> calibration_bins([(0.05, False), (0.95, True), (1.0, True)], bins=2)[1]
    {'lo': 0.5, 'hi': 1.0, 'count': 2, 'accepted': 2}
    """
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [a for c, a in pairs if lo <= c < hi or (b == bins - 1 and c == hi)]
        out.append({"lo": lo, "hi": hi, "count": len(inside), "accepted": int(sum(inside))})
    return out


def save(result, out_dir) -> Path:
    """JSON + Markdown + plots (speedup bars, tau distribution, EAGLE-2 calibration). `result` may
    also be a saved bench.json read back: the files are made again from it."""
    from matplotlib.figure import Figure   # no pyplot: leaves a notebook's backend alone
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slim = json.loads(json.dumps(result))
    for r in slim["methods"].values():
        pairs = r.pop("calibration", None)
        if pairs:
            r["calibration_bins"] = calibration_bins(pairs)
    (out / "bench.json").write_text(results_json(slim))
    (out / "bench.md").write_text(markdown_table(result))
    methods = list(result["methods"])
    fig = Figure(figsize=(15, 4))
    axes = fig.subplots(1, 3)
    sp = [result["methods"][m]["speedup"] for m in methods]
    axes[0].bar(methods, sp, color=["gray" if s < 1 else "tab:green" for s in sp])
    axes[0].axhline(1, color="black", lw=0.8)
    axes[0].set_ylabel("speedup over vanilla (same run)")
    axes[0].set_title(f"{result['target']}, {result['dataset']} n={result['n']}, T={result['temperature']}",
                      fontsize=9)
    axes[0].tick_params(axis="x", rotation=30)
    for m in methods:
        counts = result["methods"][m].get("cycle_length_counts")
        if counts:
            ks = sorted(int(k) for k in counts)
            axes[1].plot(ks, [counts[k] if k in counts else counts[str(k)] for k in ks], "o-", label=m)
    axes[1].set_xlabel("tokens added per verification cycle (tau per cycle)")
    axes[1].set_ylabel("cycles")
    axes[1].set_title("distribution of tokens per cycle", fontsize=9)
    if axes[1].get_legend_handles_labels()[0]:   # only the EAGLE methods have cycles to show
        axes[1].legend(fontsize=8)
    else:
        axes[1].text(0.5, 0.5, "no EAGLE method in this run", ha="center", va="center",
                     transform=axes[1].transAxes)
    eagle2 = result["methods"].get(EAGLE2, {})   # pairs from a run, or the bins a saved file keeps
    cal = calibration_bins(eagle2["calibration"]) if eagle2.get("calibration") else eagle2.get(
        "calibration_bins", [])
    shown = [b for b in cal if b["count"] >= 5]
    if shown:
        axes[2].plot([(b["lo"] + b["hi"]) / 2 for b in shown],
                     [b["accepted"] / b["count"] for b in shown], "o-", label="measured")
        axes[2].plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
        axes[2].legend(fontsize=8)
    axes[2].set_xlabel("draft confidence of a node's token")
    axes[2].set_ylabel("acceptance rate")
    axes[2].set_title("EAGLE-2 calibration (nodes offered at reached depths)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "bench.png", dpi=100)
    return out
