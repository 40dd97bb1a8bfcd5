"""How good a draft head is: what the EAGLE paper reports, measured the paper's way.

* **top-1 and n-alpha** (EAGLE §4.3.1), teacher-forced on held-out ShareGPT text: n-alpha is the
  acceptance rate when the head's input holds n of its own predicted features
  (`training.train.evaluate_head`).
* **tau** (EAGLE §4.1): the mean number of tokens a draft-verify cycle adds, bonus token included,
  prefill not counted, while EAGLE-2 decodes MT-bench first turns greedily. Pooled over prompts:
  all accepted tokens over all cycles (`pooled_tau`). The mean of per-prompt tau is reported beside
  it under its own name.

    >>> pooled_tau([{"new_tokens": 9, "target_forwards": 4}, {"new_tokens": 5, "target_forwards": 3}])[0]
    2.4
"""
from collections import Counter

import torch

from eagle_mini.decode import generate
from eagle_mini.methods import EAGLE2, resolve_tree
from eagle_mini.training.commands import validation_features
from eagle_mini.data import evenly_spaced, load_prompts, mtbench_questions
from eagle_mini.training.train import evaluate_head

EQUAL_TOKENS = 0.01  # two heads' training tokens count as equal within this relative margin


def pooled_tau(stats_list) -> tuple[float | None, float | None]:
    """(tau pooled over generations, its standard error over generations).

    Each generation adds new_tokens - 1 tokens in target_forwards - 1 cycles (its first token comes
    from the prefill); tau is the ratio of the sums. The error is the ratio estimator's, over
    generations (a cluster of correlated cycles each), None below two generations.
    """
    accepted = [s["new_tokens"] - 1 for s in stats_list]
    cycles = [s["target_forwards"] - 1 for s in stats_list]
    if sum(cycles) == 0:
        return None, None
    tau = sum(accepted) / sum(cycles)
    n = len(cycles)
    if n < 2:
        return tau, None
    spread = sum((a - tau * c) ** 2 for a, c in zip(accepted, cycles)) * n / (n - 1)
    return tau, spread ** 0.5 / sum(cycles)


def tau_counts(stats_list) -> list[list[int]]:
    """[accepted tokens, cycles] per generation: tau's numerator and denominator (`pooled_tau`)."""
    return [[s["new_tokens"] - 1, s["target_forwards"] - 1] for s in stats_list]


def eval_head(target, head, n_text: int = 50, n_prompts: int = 80, max_new_tokens: int = 64,
              max_len: int = 1024, tree=None, progress: bool = True, other_sets=None) -> dict:
    """Teacher-forced top-1 / n-alpha on the test split, and tau while decoding MT-bench.

    Fewer than all 80 prompts are spread over the 8 categories (`data.evenly_spaced`).
    other_sets: {dataset name: n prompts} decoded the same way (e.g. HumanEval, ShareGPT's
    test-split first turns), reported under "other_sets" (`tau_on`)."""
    from tqdm.auto import tqdm
    layers = getattr(head, "aux_layers", None)  # an EAGLE-3 head reads target layers
    text = evaluate_head(head, validation_features(target, n_text, max_len, split="test",
                                                   layers=layers))
    runs, by_cat, depth, tries = [], {}, Counter(), Counter()
    questions = evenly_spaced(mtbench_questions(), n_prompts)
    for q in tqdm(questions, desc="eval-head MT-bench", unit="prompt", disable=not progress):
        stats = generate(target, head, q["turns"][0], max_new_tokens,
                         tree=resolve_tree(tree or EAGLE2)).stats
        runs.append(stats)
        by_cat.setdefault(q["category"], []).append(stats)
        for d, rate in stats["acceptance_per_depth"].items():
            depth[d] += rate
            tries[d] += 1
    tau, se = pooled_tau(runs)
    per_prompt = [s["tau"] for s in runs]
    defined = [t for t in per_prompt if t is not None]
    others = {name: tau_on(target, head, name, n, max_new_tokens, tree, progress)
              for name, n in (other_sets or {}).items()}
    return {"test_text": text, **({"other_sets": others} if others else {}),
            "mtbench": {"prompts": len(runs), "max_new_tokens": max_new_tokens,
                        "tree": str(tree or EAGLE2), "tau": tau, "tau_se": se,
                        "tau_by_category": {c: pooled_tau(v)[0] for c, v in by_cat.items()},
                        "tau_per_prompt": per_prompt,
                        "tau_counts_per_prompt": tau_counts(runs),
                        "tau_prompt_mean": sum(defined) / len(defined) if defined else None,
                        "tokens_per_forward": (sum(s["new_tokens"] for s in runs)
                                               / sum(s["target_forwards"] for s in runs)),
                        "acceptance_per_depth": {d: depth[d] / tries[d] for d in sorted(depth)}}}


def tau_on(target, head, dataset: str, n: int, max_new_tokens: int = 64, tree=None,
           progress: bool = True) -> dict:
    """Pooled tau (and its standard error) decoding `n` prompts spread over a named prompt set."""
    from tqdm.auto import tqdm
    prompts = evenly_spaced(load_prompts(dataset), n)
    runs = [generate(target, head, p, max_new_tokens, tree=resolve_tree(tree or EAGLE2)).stats
            for p in tqdm(prompts, desc=f"eval-head {dataset}", unit="prompt", disable=not progress)]
    tau, se = pooled_tau(runs)
    return {"prompts": len(runs), "max_new_tokens": max_new_tokens, "tree": str(tree or EAGLE2),
            "tau": tau, "tau_se": se,
            "tau_counts_per_prompt": tau_counts(runs)}


def derived_counts(doc: dict, accepted: list[int]) -> list[list[int]] | None:
    """An eval-head result that records tau per prompt but not its counts (one written before
    `tau_counts_per_prompt` was) -> its [accepted, cycles] per prompt, or None where they do not
    follow.

    Greedy EAGLE emits vanilla's tokens whatever the head, so on the same target, prompts and
    length two heads accept the same number of tokens per prompt: `accepted` is another result's
    (its counts' first column). Each prompt's cycles are then accepted / tau; they are kept only
    when every one is a whole number that gives the recorded tau exactly, and together they give
    the recorded pooled tau and tokens per forward exactly (a result of another target or length
    fails these checks).

        >>> doc = {"mtbench": {"prompts": 2, "tau_per_prompt": [1.5, 2.0], "tau": 1.75,
        ...                    "tokens_per_forward": 1.5}}
        >>> derived_counts(doc, [3, 4])
        [[3, 2], [4, 2]]
    """
    m = doc["mtbench"]
    taus = m.get("tau_per_prompt")
    if taus is None or len(taus) != len(accepted) or m.get("tokens_per_forward") is None:
        return None
    counts = []
    for acc, tau in zip(accepted, taus):
        cycles = 0 if tau is None else round(acc / tau)
        if (tau is None) != (acc == 0) or (cycles and acc / cycles != tau):
            return None
        counts.append([acc, cycles])
    total, cycles = sum(a for a, _ in counts), sum(c for _, c in counts)
    n = len(counts)
    if not cycles or total / cycles != m["tau"] or (total + n) / (cycles + n) != m["tokens_per_forward"]:
        return None
    return counts


def training_tokens(doc: dict) -> int | None:
    """The training tokens of an eval-head result's head: `head_tokens_seen`, or in a result
    written before that field, the count its head note gives ("... (18,692,439 training tokens)")."""
    import re
    if doc.get("head_tokens_seen") is not None:
        return doc["head_tokens_seen"]
    said = re.search(r"\(([\d,]+) training tokens", doc.get("head") or "")
    return int(said.group(1).replace(",", "")) if said else None


def compare_heads(a: dict, b: dict) -> dict:
    """Two `eval-head` results on the same MT-bench prompts, tree and length -> head b's pooled tau
    minus head a's, with a paired bootstrap interval over prompts (`intervals.paired_difference`).
    A result without counts per prompt takes them from its tau per prompt and the other's counts
    (`derived_counts`); "derived_counts" names it.

    The question the EAGLE-3 paper asks (its Figure 1) is which architecture learns more from the
    same data, so the result says whether both heads saw the same number of training tokens."""
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.measure.intervals import Arm, excludes_zero, interval, paired_difference
    for key in ("prompts", "tree", "max_new_tokens"):
        if a["mtbench"][key] != b["mtbench"][key]:
            raise EagleMiniError(f"the two results differ in MT-bench {key} ({a['mtbench'][key]} vs "
                                 f"{b['mtbench'][key]}); rerun one eval-head to match")
    recorded = {k: doc["mtbench"].get("tau_counts_per_prompt") for k, doc in (("a", a), ("b", b))}
    counts, derived = dict(recorded), []
    for k, doc, other in (("a", a, "b"), ("b", b, "a")):
        if recorded[k] is None:
            counts[k] = recorded[other] and derived_counts(doc, [acc for acc, _ in recorded[other]])
            if counts[k] is None:
                raise EagleMiniError(f"the result of `{doc.get('command')}` has no "
                                     "tau_counts_per_prompt, and they do not follow from its tau "
                                     "per prompt and the other result's; rerun that command with "
                                     "this version")
            derived.append(k)
    arms = {k: Arm([c]) for k, c in counts.items()}
    diff = paired_difference(arms["a"], arms["b"])

    def arm(doc, counted):
        return {"head": doc["head"], "kind": doc.get("head_kind"),
                "training_tokens": training_tokens(doc),
                "training_commands": doc.get("head_training_commands"), "command": doc["command"],
                "tau": interval(counted)}
    tokens = (training_tokens(a), training_tokens(b))
    ratio = tokens[1] / tokens[0] if None not in tokens and tokens[0] else None
    return {"a": arm(a, arms["a"]), "b": arm(b, arms["b"]),
            "setting": {k: a["mtbench"][k] for k in ("prompts", "tree", "max_new_tokens")},
            "derived_counts": derived,
            "tau_difference_b_minus_a": diff, "b_beats_a": excludes_zero(diff),
            "training_token_ratio_b_over_a": ratio,
            "equal_training_tokens": None if ratio is None else abs(ratio - 1) <= EQUAL_TOKENS}


def _loglinear(tokens: torch.Tensor, tau: torch.Tensor):
    """Least squares tau = a + b * log2(tokens), per row of tau [..., points] -> (a, b)."""
    x = torch.log2(tokens.double())
    xc = x - x.mean()
    b = ((tau - tau.mean(-1, keepdim=True)) * xc).sum(-1) / (xc * xc).sum()
    return tau.mean(-1) - b * x.mean(), b


def tau_curve(docs: list[dict], goal: float | None = None) -> dict:
    """`eval-head` results of one head at several training-token counts (snapshots of one run, on
    the same MT-bench prompts) -> tau against tokens, fitted as tau = a + b log2(tokens): b is the
    gain per doubling of training data. Intervals by bootstrap over prompts, drawn jointly for
    every point (the same prompts). With `goal`, the tokens at which the fit reaches it.

    The log-linear form is an assumption that fits the EAGLE-1 head's rounds here (`heads`' card);
    a projection far past the last point is a guess with a formula, and says so by its interval.

        >>> doc = lambda n, acc: {"head_tokens_seen": n, "mtbench": {"prompts": 2, "tree": "t",
        ...     "max_new_tokens": 8, "tau_counts_per_prompt": [[acc, 4], [acc + 2, 4]]}}
        >>> c = tau_curve([doc(1000, 4), doc(2000, 6), doc(4000, 8)], goal=2.75)
        >>> round(c["fit"]["per_doubling"]["estimate"], 3), round(c["goal"]["tokens"]["estimate"])
        (0.5, 8000)
    """
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.measure.intervals import Arm, interval_from_draws, interval, resample_indices
    if len(docs) < 2:
        raise EagleMiniError("a curve needs eval-head results at two training-token counts or more")
    docs = sorted(docs, key=lambda d: d.get("head_tokens_seen") or 0)
    first = docs[0]["mtbench"]
    for d in docs:
        if not d.get("head_tokens_seen"):
            raise EagleMiniError(f"{d.get('command')}: the head's training tokens are not recorded")
        for key in ("prompts", "tree", "max_new_tokens"):
            if d["mtbench"][key] != first[key]:
                raise EagleMiniError(f"the results differ in MT-bench {key}; rerun eval-head to match")
    kinds = {d.get("head_kind") for d in docs}
    if len(kinds) > 1:
        raise EagleMiniError(f"the results come from heads of different kinds ({sorted(map(str, kinds))}): "
                             "a curve follows one head")
    tokens = torch.tensor([d["head_tokens_seen"] for d in docs], dtype=torch.float64)
    if len(set(tokens.tolist())) < 2:
        raise EagleMiniError("the results share one training-token count: no curve to fit")
    arms = [Arm([d["mtbench"]["tau_counts_per_prompt"]]) for d in docs]
    estimate = torch.tensor([a.estimate() for a in arms], dtype=torch.float64)
    idx = resample_indices(arms[0].units)
    draws = torch.stack([a.per_seed(idx)[0] for a in arms], dim=-1)      # [resamples, points]
    a0, b0 = _loglinear(tokens, estimate)
    a, b = _loglinear(tokens, draws)
    out = {"points": [{"tokens": int(n), "tau": interval(arm), "command": d.get("command")}
                      for n, arm, d in zip(tokens.tolist(), arms, docs)],
           "head_kind": kinds.pop(), "head": docs[-1].get("head"),
           "head_training_commands": docs[-1].get("head_training_commands"),
           "setting": {k: first[k] for k in ("prompts", "tree", "max_new_tokens")},
           "fit": {"form": "tau = intercept + per_doubling * log2(tokens)",
                   "intercept": float(a0),
                   "per_doubling": interval_from_draws(float(b0), b, 0.95)}}
    if goal is not None:
        def reach(a, b):   # tokens where the fit meets the goal; inf where it does not rise
            return torch.where(b > 0, torch.exp2((goal - a) / b.clamp(min=1e-12)),
                               torch.full_like(b, float("inf")))
        draws_t = reach(a, b).sort().values          # inf sorts last: percentiles by rank
        k = [int(q * (len(draws_t) - 1)) for q in (0.025, 0.975)]
        out["goal"] = {"tau": goal, "tokens": {"estimate": float(reach(a0, b0)),
                                               "low": float(draws_t[k[0]]),
                                               "high": float(draws_t[k[1]]), "level": 0.95},
                       "never_reached_share": float((~torch.isfinite(draws_t)).double().mean())}
    return out
