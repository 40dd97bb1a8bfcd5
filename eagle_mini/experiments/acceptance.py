"""What the papers' acceptance claims need, measured per prompt (`measure-acceptance`).

The claims `claims.py` puts beside the papers' figures compare tau (EAGLE §4.1: tokens a
draft-verify cycle adds, bonus included, prefill not counted) between decoding setups on the same
prompts, so each arm keeps its counts *per prompt*, the unit a bootstrap resamples
(`intervals`):

* **tree vs chain** (EAGLE's tree-attention ablation): EAGLE-1's 26-token tree (`eagle1`, depth 5)
  against a chain of the same depth (`chain:5`), greedy;
* **EAGLE-2 vs EAGLE-1 at equal tree size** (EAGLE-2 §4): a dynamic tree of the same 26 tokens,
  depth 5 and top-10 per node (EAGLE-1 drafts top-10 too) against the static tree, greedy;
* **T=0 vs T=1**: the static tree greedy and sampled (multi-round verification, lossless);
* **calibration** (EAGLE-2 §3): from the dynamic-tree run, each offered child's draft confidence
  and whether it was accepted, counted per prompt below 0.05 and above 0.95;
* **n-alpha** (EAGLE §4.3.1): teacher-forced chains on the ShareGPT test split, counted per
  conversation (`train.acceptance_counts`).

Nothing is timed -- tokens and cycles only -- so it may run beside other work. Speedups are the
bench's (`bench.py`).
"""
import time

from eagle_mini.decode import generate
from eagle_mini.methods import EAGLE2
from eagle_mini.tree import tree_from_spec
from eagle_mini.results import machine_info
from eagle_mini.measure.bench import calibration_bins
from eagle_mini.measure.intervals import Arm, interval, paired_difference

FORMAT = "eagle_mini.acceptance/1"

# arm -> (tree spec, temperature); the static tree is shared by three comparisons
ARMS = {"chain": ("chain:5", 0.0), "eagle1": ("eagle1", 0.0),
        EAGLE2: ("dynamic:26,5,10", 0.0), "eagle1_t1": ("eagle1", 1.0)}
# name -> (a, b): the paired difference b - a over the same prompts
DIFFERENCES = {"tree_minus_chain": ("chain", "eagle1"), "eagle2_minus_eagle1": ("eagle1", EAGLE2),
               "t0_minus_t1": ("eagle1_t1", "eagle1")}
CALIBRATION_ARM, LOW, HIGH = EAGLE2, 0.05, 0.95


def confidence_counts(pairs) -> dict:
    """(confidence, accepted) pairs -> [accepted, offered] below LOW and above HIGH.

    >>> confidence_counts([(0.01, False), (0.02, True), (0.5, True), (0.99, True)])
    {'low': [1, 2], 'high': [1, 1]}
    """
    low = [a for c, a in pairs if c < LOW]
    high = [a for c, a in pairs if c > HIGH]
    return {"low": [int(sum(low)), len(low)], "high": [int(sum(high)), len(high)]}


def measure(target, head, questions, max_new_tokens: int = 64, alpha_examples=(),
            alpha_steps: int = 4, progress: bool = True) -> dict:
    """Every arm of `ARMS` on each question's first turn (seed = the prompt's index at T=1), and
    n-alpha per conversation of `alpha_examples` (featurized rows) -> the raw counts."""
    from tqdm.auto import tqdm
    from eagle_mini.training.train import acceptance_counts
    arms = {name: {"tree": spec, "temperature": t, "per_prompt": []} for name, (spec, t) in ARMS.items()}
    calibration, pairs = [], []
    for i, q in enumerate(tqdm(questions, desc="measure-acceptance", unit="prompt",
                               disable=not progress)):
        for name, (spec, temperature) in ARMS.items():
            s = generate(target, head, q["turns"][0], max_new_tokens, temperature=temperature,
                         tree=tree_from_spec(spec), seed=i).stats
            arms[name]["per_prompt"].append({k: s[k] for k in ("new_tokens", "target_forwards")})
            if name == CALIBRATION_ARM:
                calibration.append(confidence_counts(s["confidence_accepted"]))
                pairs += s["confidence_accepted"]
    alpha = acceptance_counts(head, list(alpha_examples), alpha_steps)
    return {"prompts": [{"question_id": q["question_id"], "category": q["category"]}
                        for q in questions],
            "arms": arms,
            "calibration": {"arm": CALIBRATION_ARM, "low": LOW, "high": HIGH,
                            "per_prompt": calibration, "bins": calibration_bins(pairs)},
            "alpha": {"steps": alpha_steps, "per_conversation": alpha}}


def tau_arm(rows) -> Arm:
    """Pooled tau over prompts as an `Arm`: each prompt adds new_tokens - 1 tokens in
    target_forwards - 1 cycles (`evaluate.pooled_tau`)."""
    return Arm([[[r["new_tokens"] - 1, r["target_forwards"] - 1] for r in rows]])


def summarize(result: dict) -> dict:
    """Bootstrap intervals (`95%`) of every quantity the claims read: tau per arm and the paired
    differences over prompts, the calibration shares over prompts, n-alpha over conversations
    and 0-alpha - last alpha, paired."""
    tau = {name: tau_arm(a["per_prompt"]) for name, a in result["arms"].items()}
    cal = result["calibration"]["per_prompt"]
    alpha = result["alpha"]["per_conversation"]
    alpha_arms = [Arm([[c[n] for c in alpha]]) for n in range(result["alpha"]["steps"])]
    return {"tau": {name: interval(arm) for name, arm in tau.items()},
            "differences": {name: paired_difference(tau[a], tau[b])
                            for name, (a, b) in DIFFERENCES.items()},
            "calibration": {side: interval(Arm([[c[side] for c in cal]])) for side in ("low", "high")},
            "alpha": [interval(arm) for arm in alpha_arms],
            "alpha_drop": paired_difference(alpha_arms[-1], alpha_arms[0])}


def acceptance_command(target, head, note: str, n_prompts: int, max_new_tokens: int,
                       n_text: int, max_len: int, command: str, progress: bool = True) -> dict:
    """`measure-acceptance`: MT-bench first turns spread over the categories, the test split's
    first `n_text` conversations; the results file's whole content."""
    from eagle_mini.training.commands import validation_features
    from eagle_mini.data import evenly_spaced, mtbench_questions
    start = time.perf_counter()
    rows = validation_features(target, n_text, max_len, split="test")
    result = {"format": FORMAT, "command": command, "head": note, "target": target.name,
              "config": {"prompts": n_prompts, "max_new_tokens": max_new_tokens,
                         "text_conversations": len(rows), "max_len": max_len, "split": "test"},
              **measure(target, head, evenly_spaced(mtbench_questions(), n_prompts),
                        max_new_tokens, rows, progress=progress)}
    result["summary"] = summarize(result)
    result["machine"] = machine_info()
    result["seconds"] = time.perf_counter() - start
    return result
