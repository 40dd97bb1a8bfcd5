"""Rewrite results files made before v0.2 with the papers' tau (one-off; kept as the record).

Before v0.2, `tau` meant new tokens per target forward, the prefill included. It is now the mean
number of tokens per draft-verify cycle, bonus included, prefill not counted; the old figure is
`tokens_per_forward`. Files that store pooled `new_tokens` and the old tau over `n` generations
give the new tau exactly: forwards = new_tokens / old tau (an integer), and every token after each
generation's first comes from a cycle, so tau = (new_tokens - n) / (forwards - n).

    python scripts/migrate_tau_v02.py        # bench files and the uncertainty ablation
"""
import json
from pathlib import Path

from eagle_mini.measure.bench import markdown_table
from eagle_mini.results import results_json

RESULTS = Path(__file__).resolve().parent.parent / "data" / "results"
NOTE = ("tau derived exactly from new_tokens and target forwards by scripts/migrate_tau_v02.py "
        "(the run predates v0.2's tau); cycle_length_counts still count each prompt's last "
        "cycle before it was cut at max_new_tokens")


def migrate_row(row: dict, n: int) -> None:
    """One method's pooled row over n generations, in place."""
    if "tokens_per_forward" in row:
        return
    old, tokens = row["tau"], row["new_tokens"]
    forwards = round(tokens / old)
    assert abs(tokens / forwards - old) < 1e-9, (tokens, old)
    row["tokens_per_forward"] = old
    row["tau"] = (tokens - n) / (forwards - n) if forwards > n else None
    row.pop("mean_cycle_length", None)


def migrate_bench(path: Path) -> None:
    result = json.loads(path.read_text())
    for row in result["methods"].values():
        migrate_row(row, result["n"])
    result["tau_note"] = NOTE
    path.write_text(results_json(result))
    (path.parent / "bench.md").write_text(markdown_table(result))


def migrate_uncertainty(path: Path) -> None:
    result = json.loads(path.read_text())
    n = result["decode"]["prompts"]
    for name, row in result["decode"]["methods"].items():
        migrate_row(row, n)
        if name in result["variants"]:
            result["variants"][name]["decode"] = row
    result["tau_note"] = NOTE
    path.write_text(results_json(result, indent=1))   # as `experiment uncertainty` writes it


if __name__ == "__main__":
    for bench in sorted(RESULTS.glob("bench_*/bench.json")):
        migrate_bench(bench)
        print(f"migrated {bench}")
    migrate_uncertainty(RESULTS / "uncertainty.json")
    print(f"migrated {RESULTS / 'uncertainty.json'}")
