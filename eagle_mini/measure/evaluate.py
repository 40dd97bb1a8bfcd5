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

from ..decode import generate
from ..training.commands import validation_features
from ..training.data import evenly_spaced, load_prompts, mtbench_questions
from ..training.train import evaluate_head

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
        stats = generate(target, head, q["turns"][0], max_new_tokens, tree=tree or "eagle2").stats
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
                        "tree": str(tree or "eagle2"), "tau": tau, "tau_se": se,
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
    runs = [generate(target, head, p, max_new_tokens, tree=tree or "eagle2").stats
            for p in tqdm(prompts, desc=f"eval-head {dataset}", unit="prompt", disable=not progress)]
    tau, se = pooled_tau(runs)
    return {"prompts": len(runs), "max_new_tokens": max_new_tokens, "tree": str(tree or "eagle2"),
            "tau": tau, "tau_se": se,
            "tau_counts_per_prompt": tau_counts(runs)}


def compare_heads(a: dict, b: dict) -> dict:
    """Two `eval-head` results on the same MT-bench prompts, tree and length -> head b's pooled tau
    minus head a's, with a paired bootstrap interval over prompts (`intervals.paired_difference`).

    The question the EAGLE-3 paper asks (its Figure 1) is which architecture learns more from the
    same data, so the result says whether both heads saw the same number of training tokens."""
    from ..errors import EagleMiniError
    from .intervals import Arm, excludes_zero, interval, paired_difference
    for key in ("prompts", "tree", "max_new_tokens"):
        if a["mtbench"][key] != b["mtbench"][key]:
            raise EagleMiniError(f"the two results differ in MT-bench {key} ({a['mtbench'][key]} vs "
                                 f"{b['mtbench'][key]}); rerun one eval-head to match")
    counts = []
    for doc in (a, b):
        if "tau_counts_per_prompt" not in doc["mtbench"]:
            raise EagleMiniError(f"an eval-head result without tau_counts_per_prompt "
                                 f"({doc.get('command')}); rerun it with this version")
        counts.append(Arm([doc["mtbench"]["tau_counts_per_prompt"]]))
    diff = paired_difference(*counts)

    def arm(doc, counted):
        return {"head": doc["head"], "kind": doc.get("head_kind"),
                "training_tokens": doc.get("head_tokens_seen"),
                "training_commands": doc.get("head_training_commands"), "command": doc["command"],
                "tau": interval(counted)}
    tokens = (a.get("head_tokens_seen"), b.get("head_tokens_seen"))
    ratio = tokens[1] / tokens[0] if None not in tokens and tokens[0] else None
    return {"a": arm(a, counts[0]), "b": arm(b, counts[1]),
            "setting": {k: a["mtbench"][k] for k in ("prompts", "tree", "max_new_tokens")},
            "tau_difference_b_minus_a": diff, "b_beats_a": excludes_zero(diff),
            "training_token_ratio_b_over_a": ratio,
            "equal_training_tokens": None if ratio is None else abs(ratio - 1) <= EQUAL_TOKENS}
