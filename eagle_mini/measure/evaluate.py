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
from ..training.data import evenly_spaced, mtbench_questions
from ..training.train import evaluate_head


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


def eval_head(target, head, n_text: int = 50, n_prompts: int = 80, max_new_tokens: int = 64,
              max_len: int = 1024, tree=None, progress: bool = True) -> dict:
    """Teacher-forced top-1 / n-alpha on the test split, and tau while decoding MT-bench.

    Fewer than all 80 prompts are spread over the 8 categories (`data.evenly_spaced`)."""
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
    return {"test_text": text,
            "mtbench": {"prompts": len(runs), "max_new_tokens": max_new_tokens,
                        "tree": str(tree or "eagle2"), "tau": tau, "tau_se": se,
                        "tau_by_category": {c: pooled_tau(v)[0] for c, v in by_cat.items()},
                        "tau_per_prompt": per_prompt,
                        "tau_prompt_mean": sum(defined) / len(defined) if defined else None,
                        "tokens_per_forward": (sum(s["new_tokens"] for s in runs)
                                               / sum(s["target_forwards"] for s in runs)),
                        "acceptance_per_depth": {d: depth[d] / tries[d] for d in sorted(depth)}}}
