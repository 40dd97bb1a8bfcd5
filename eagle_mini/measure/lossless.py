"""The large greedy-losslessness check: EAGLE's output equals vanilla greedy, prompt by prompt.

EAGLE §3.3 promises the target's own output; with greedy decoding that is testable token by token.
`check-lossless` runs vanilla and each EAGLE method on MT-bench first turns spread over the eight
categories (`data.evenly_spaced`: its first ten are all writing) and records, per prompt, whether
the outputs are identical and each method's tau (tokens per draft-verify cycle).
"""
from eagle_mini.data import evenly_spaced, mtbench_prompts
from eagle_mini.measure.evaluate import pooled_tau
from eagle_mini.methods import VANILLA
from eagle_mini.runtime.exact import exact_of
from eagle_mini.runtime.run import run_method
from eagle_mini.results import machine_info


def check_lossless(target, head, methods, n: int = 20, max_new_tokens: int = 64, tree=None,
                   log=None, progress: bool = True) -> dict:
    """Vanilla vs each method on `n` MT-bench prompts -> the record `check-lossless` writes."""
    from tqdm.auto import tqdm
    rows, ok, runs = [], True, {m: [] for m in methods}
    prompts = evenly_spaced(list(enumerate(mtbench_prompts())), n)
    for i, prompt in tqdm(prompts, desc="check-lossless", unit="prompt", disable=not progress):
        ref = run_method(target, head, VANILLA, prompt, max_new_tokens)
        row = {"prompt": i, "vanilla_tokens": len(ref.output_ids)}
        for m in methods:
            gen = run_method(target, head, m, prompt, max_new_tokens, tree=tree)
            runs[m].append(gen.stats)
            row[m] = {"identical": gen.output_ids == ref.output_ids, "tau": gen.stats["tau"],
                      "tokens_per_forward": gen.stats["tokens_per_forward"]}
            ok &= row[m]["identical"]
        rows.append(row)
        if log is not None:
            log(f"prompt {i:2d}: " + "  ".join(
                f"{m} {'ok' if row[m]['identical'] else 'DIFFERS'} tau "
                + ("n/a" if row[m]["tau"] is None else f"{row[m]['tau']:.2f}") for m in methods))
    return {"target": target.name, "dtype": str(target.dtype).replace("torch.", ""),
            "exact": exact_of(target), "max_new_tokens": max_new_tokens, "all_identical": ok,
            "tau": {m: pooled_tau(runs[m])[0] for m in methods}, "rows": rows,
            "machine": machine_info()}
