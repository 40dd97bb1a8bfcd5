"""Experiment commands: measure-acceptance, paper-vs-ours, experiment."""
import sys
from pathlib import Path

from eagle_mini.cli.common import (add_target_args, command_line, fmt, head_dir, head_for, load,
                                   positive_int, tree_spec)
from eagle_mini.results import default_out

# `experiment uncertainty`'s knobs: `AblationConfig` fields; None (the default) keeps the size's.
ABLATION_KNOBS = (("--train-tokens", positive_int), ("--val-tokens", positive_int),
                  ("--max-len", positive_int), ("--epochs", positive_int),
                  ("--batch-tokens", positive_int), ("--lr", float), ("--draft-vocab", int),
                  ("--prompts", positive_int), ("--max-new-tokens", positive_int),
                  ("--tree", tree_spec), ("--contexts", positive_int), ("--seed", int),
                  ("--seeds", positive_int), ("--mixed-precision", str))


def add_measure_acceptance(sub):
    a = sub.add_parser("measure-acceptance", help="tau per prompt for tree/chain, EAGLE-2/EAGLE-1, "
                                                   "T=0/T=1, draft calibration and n-alpha (untimed; "
                                                   "what paper-vs-ours reads)")
    add_target_args(a)
    a.add_argument("--head", type=head_dir, default=None,
                   help="draft head directory (default: shipped head)")
    a.add_argument("--n-prompts", type=positive_int, default=24,
                   help="MT-bench first turns, spread over its 8 categories")
    a.add_argument("--max-new-tokens", type=positive_int, default=64)
    a.add_argument("--n-text", type=positive_int, default=50,
                   help="ShareGPT test conversations for n-alpha")
    a.add_argument("--max-len", type=positive_int, default=1024)
    a.add_argument("--out", default=None,
                   help="JSON path (default runs/acceptance_<model>.json; a committed result "
                        "only by naming it here)")
    a.set_defaults(handler=cmd_measure_acceptance)


def cmd_measure_acceptance(args):
    from eagle_mini.experiments.acceptance import acceptance_command
    from eagle_mini.results import results_json
    target = load(args)
    head, note = head_for(args, target)
    print(note, file=sys.stderr)
    result = acceptance_command(target, head, note, args.n_prompts, args.max_new_tokens,
                                args.n_text, args.max_len, command_line())
    out = Path(args.out or default_out(f"acceptance_{args.model.replace('/', '_')}.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result))
    for name, iv in result["summary"]["tau"].items():
        print(f"tau {name:10s} {fmt(iv['estimate'], '.3f')} [{fmt(iv['low'], '.3f')}, "
              f"{fmt(iv['high'], '.3f')}]")
    print(f"wrote {out} ({result['seconds'] / 60:.1f} min)")


def add_paper_vs_ours(sub):
    v = sub.add_parser("paper-vs-ours", help="the papers' claims against ours, from committed "
                                             "results files (runs no model)")
    v.add_argument("--results", default="data/results", help="folder of the results files")
    v.add_argument("--out", default=None,
                   help="writes OUT.json and OUT.md (default <results>/paper_vs_ours)")
    v.set_defaults(handler=cmd_paper_vs_ours)


def cmd_paper_vs_ours(args):
    from eagle_mini.experiments.claims import write_table
    json_path, md_path = write_table(args.results, args.out, command_line())
    print(Path(md_path).read_text(), end="")
    print(f"wrote {json_path} and {md_path}")


def add_experiment(sub):
    x = sub.add_parser("experiment", help="paper experiments: `uncertainty` = the feature-"
                                          "uncertainty ablation (EAGLE Figs. 3, 4, 8); resumable")
    x.add_argument("name", choices=["uncertainty"])
    add_target_args(x)
    x.add_argument("--size", default="full", choices=["tiny", "ci", "full"],
                   help="tiny: smoke run; ci: notebook 02's live run; full: 3 seeds, a few hours "
                        "on 2 CPU threads, resumable across sittings")
    x.add_argument("--out", default=None, help="JSON path (default runs/uncertainty.json; a "
                                               "committed result only by naming it here)")
    x.add_argument("--work", default=None, help="checkpoints and finished parts "
                                                "(default runs/uncertainty_<size>)")
    x.add_argument("--keep", default=None,
                   help="where each finished variant's JSON files go, to commit between sittings; "
                        "a new --work starts from them (default none; the committed full run "
                        "keeps its variants in data/results/uncertainty_full)")
    for flag, kind in ABLATION_KNOBS:
        x.add_argument(flag, type=kind, default=None, help="overrides the size's value")
    x.set_defaults(handler=cmd_experiment)


def ablation_knobs(args) -> dict:
    """The knobs given on the command line (the others None: the size's values)."""
    return {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
            for flag, _ in ABLATION_KNOBS}


def cmd_experiment(args):
    from eagle_mini.experiments.ablation import ablation_command
    ablation_command(load(args), size=args.size, out=args.out, work=args.work, keep=args.keep,
                     **ablation_knobs(args))


def register(sub):
    for add in (add_measure_acceptance, add_paper_vs_ours, add_experiment):
        add(sub)
