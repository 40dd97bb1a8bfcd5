"""Command line: `python -m eagle_mini COMMAND` (also installed as `eagle-mini`).

Every user error ends as one line on stderr and exit code 2; `--json` outputs are one JSON object
for scripts and graders.
"""
import argparse
import json
import os
import sys
from pathlib import Path

from eagle_mini.errors import EagleMiniError


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (exit code 2) like every other user error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a share strictly between 0 and 1, got {value}")
    return value


def add_target_args(p):
    p.add_argument("--model", default="smollm2-135m",
                   help="course target name, local HF model directory, or hub id")
    p.add_argument("--dtype", default="fp32", help="fp32 (default), bf16 or fp16")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--kernels", default="auto", choices=["auto", "packed", "stock"],
                   help="CPU, fp32: prepacked weights (packed.py), the stock kernels, or auto (the "
                        "faster of the two here, timed once per CPU model and cached)")
    p.add_argument("--no-pack", dest="kernels", action="store_const", const="stock",
                   help="the same as --kernels stock")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"],
                   help="fp32 matmuls (torch.set_float32_matmul_precision): highest, exact, the "
                        "default; high/medium allow bf16-based internals, lossless only against "
                        "vanilla in the same mode, up to ties (check-lossless it first)")


def add_head_args(p):
    p.add_argument("--head", default=None,
                   help="draft head directory (default: the shipped head for the target, if any)")
    p.add_argument("--tree", default=None,
                   help="tree spec: eagle1 | chain:K | JSON choices | file.json | "
                        "dynamic:TOTAL,DEPTH,TOPK (overrides the method's default tree)")


def build_parser() -> Parser:
    from eagle_mini.heads import HEAD_KINDS
    from eagle_mini.methods import BENCH_DEFAULT, DECODERS, VANILLA
    from eagle_mini.tooling.rehearsal import configs
    REHEARSAL_CONFIGS = configs()
    parser = Parser(prog="eagle-mini", description="EAGLE speculative decoding, small and tested.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    g = sub.add_parser("generate", help="generate a chat answer and print it (or --json)")
    add_target_args(g)
    g.add_argument("--prompt", required=True, help="user message (goes through the chat template)")
    g.add_argument("--max-new-tokens", type=positive_int, default=128)
    g.add_argument("--method", default=VANILLA, choices=DECODERS)
    add_head_args(g)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default 1.0: off)")
    g.add_argument("--top-k", type=int, default=None, help="top-k sampling (default 0: off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (default 0)")
    g.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("profile-target", help="measure c(n)/c(1), the cost of verifying n tokens")
    add_target_args(p)
    p.add_argument("--prefix-len", type=positive_int, default=200)
    p.add_argument("--repeats", type=positive_int, default=7)
    p.add_argument("--max-n", type=positive_int, default=64)
    p.add_argument("--with-head", action="store_true", help="also time a draft-head forward per n")
    p.add_argument("--compare-stock", action="store_true",
                   help="also time the stock kernels in the same run (before/after packing)")
    p.add_argument("--out", default=None, help="JSON path (default data/results/cost_curve_<model>.json)")
    p.add_argument("--by-op", action="store_true",
                   help="instead: where a forward of 1, 2 and 16 tokens spends its time, per op "
                        "family (torch profiler), and what grows from 1 to 2 tokens")

    r = sub.add_parser("prepare", help="convert the embedded target once into the cache")
    r.add_argument("--model", default="smollm2-135m")

    d = sub.add_parser("demo", help="the main job on the embedded default target")
    add_target_args(d)
    d.add_argument("--prompt", default="Explain in three sentences why the sky is blue.")
    d.add_argument("--max-new-tokens", type=positive_int, default=96)
    add_head_args(d)

    c = sub.add_parser("check-lossless",
                       help="EAGLE greedy == vanilla greedy on many MT-bench prompts (writes JSON)")
    add_target_args(c)
    add_head_args(c)
    c.add_argument("--n", type=positive_int, default=20, help="number of MT-bench prompts")
    c.add_argument("--max-new-tokens", type=positive_int, default=64)
    c.add_argument("--methods", default="eagle,eagle2")
    c.add_argument("--out", default=None, help="JSON path (default data/results/check_lossless"
                                                  ".json; with --matmul-precision high or medium, "
                                                  "check_lossless_matmul_<precision>.json)")

    f = sub.add_parser("dump-features", help="store the target's features for head training")
    add_target_args(f)
    f.add_argument("--target", dest="model", default="smollm2-135m", help="alias of --model")
    f.add_argument("--data", default="sharegpt")
    f.add_argument("--split", default="train", choices=["train", "validation", "test"])
    f.add_argument("--max-conversations", type=positive_int, default=None)
    f.add_argument("--max-len", type=positive_int, default=2048)
    f.add_argument("--start", type=int, default=0, help="skip this many records of the split")
    f.add_argument("--shard-size", type=positive_int, default=256)
    f.add_argument("--batch-tokens", type=positive_int, default=4096)
    f.add_argument("--eagle3", action="store_true",
                   help="also store the layers an EAGLE-3 head reads (3x the disk)")
    f.add_argument("--out", required=True)

    t = sub.add_parser("train-head", help="train a draft head (EAGLE-1 or EAGLE-3); resumable")
    add_target_args(t)
    t.add_argument("--target", dest="model", default="smollm2-135m", help="alias of --model")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--features", help="a dump-features directory")
    src.add_argument("--stream", action="store_true",
                     help="compute features on the fly from unseen train conversations")
    t.add_argument("--wrap", action="store_true",
                   help="--stream: when the train split is used up, start it again (a new epoch)")
    t.add_argument("--regenerated", default=None,
                   help="with --stream: train on a `regenerate` file (the target's own replies)")
    t.add_argument("--mix-sharegpt", type=share, default=None, metavar="SHARE",
                   help="with --regenerated: this share of each batch's tokens is ShareGPT's own "
                        "replies (records after the regenerated ones), the rest the target's")
    t.add_argument("--out", required=True, help="where the trained head is written (bf16)")
    t.add_argument("--work", default=None, help="checkpoints and log (default runs/<out name>)")
    t.add_argument("--init", default=None, help="continue from this head directory")
    t.add_argument("--start", type=int, default=None,
                   help="first train record to stream (default: where --init stopped, else 0)")
    t.add_argument("--steps", type=positive_int, default=1000)
    t.add_argument("--stop-after", type=positive_int, default=None,
                   help="do at most this many steps now (resume later with the same command)")
    t.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: the 135M head's 3e-3 scaled by 576 / the "
                        "target's hidden size, `training.train.default_lr`)")
    t.add_argument("--warmup", type=int, default=50)
    t.add_argument("--batch-tokens", type=positive_int, default=4096)
    t.add_argument("--max-len", type=positive_int, default=1024)
    t.add_argument("--draft-vocab", type=int, default=0, help="reduced draft vocabulary size")
    t.add_argument("--ce-vocab", type=int, default=0, help="restrict the soft CE to N tokens")
    t.add_argument("--kind", default=HEAD_KINDS[0], choices=HEAD_KINDS,
                   help="a new head's kind: eagle1 (fc 2H -> H, feature + token loss) or eagle3 "
                        "(three target layers, own lm_head, token loss over unrolled steps); "
                        "--init keeps its head's kind")
    t.add_argument("--lm-head-init", default="random", choices=["random", "target", "frozen"],
                   help="a new EAGLE-3 head's lm_head: random (the authors'), the target's rows "
                        "of the draft vocabulary with its final norm (starts at a CE above "
                        "uniform's, see the head's EXPERIMENTS.md), or frozen: those rows, never "
                        "trained (as EAGLE-1 reads the target's lm_head)")
    t.add_argument("--norm-init-scale", type=float, default=1.0,
                   help="with --lm-head-init target or frozen: start the head's final norm at the "
                        "target's times this (in [0, 1]; small values start near a uniform "
                        "guess instead of confident, wrong logits)")
    t.add_argument("--unroll", type=positive_int, default=None,
                   help="training-time test (EAGLE-3 §3): draft steps per position, each reading "
                        "the head's own output; default 1 for eagle1 (EAGLE-1's loss), 7 for "
                        "eagle3 (the authors')")
    t.add_argument("--mixed-precision", default="no", choices=["no", "bf16", "auto"],
                   help="bf16: the head's forward/backward under torch.autocast (fp32 weights, "
                        "AdamW); auto: bf16 where a bf16 matmul times faster here than fp32")
    t.add_argument("--feature-dtype", default=None, choices=["fp32", "bf16", "fp16", "auto"],
                   help="--stream: featurize with a copy of the target in this dtype; auto: bf16 "
                        "where it times faster here than fp32, else fp32")
    t.add_argument("--unroll-decay", type=float, default=0.8, help="weight of unrolled step k: this**k")
    t.add_argument("--no-fc-bias", action="store_true")
    t.add_argument("--eval-conversations", type=positive_int, default=20)
    t.add_argument("--eval-every", type=int, default=0)
    t.add_argument("--ckpt-every", type=positive_int, default=50)
    t.add_argument("--log-every", type=positive_int, default=10)
    t.add_argument("--seed", type=int, default=0)

    g = sub.add_parser("regenerate", help="ShareGPT user turns with the target's own replies "
                                          "(training text for the head); resumable")
    add_target_args(g)
    g.add_argument("--split", default="train", choices=["train", "validation", "test"])
    g.add_argument("--start", type=int, default=0, help="skip this many records of the split")
    g.add_argument("--max-conversations", type=positive_int, default=100)
    g.add_argument("--batch-size", type=positive_int, default=8)
    g.add_argument("--max-new-tokens", type=positive_int, default=256, help="per reply")
    g.add_argument("--max-len", type=positive_int, default=1024, help="prompt tokens per turn")
    g.add_argument("--max-turns", type=positive_int, default=None,
                   help="regenerate at most this many replies per conversation (default: all)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True, help="JSON lines file (appended to when resumed)")

    b = sub.add_parser("bench", help="EAGLE vs vanilla, HF generate and prompt lookup, side by side")
    add_target_args(b)
    b.add_argument("--head", default=None, help="draft head directory (default: shipped head)")
    b.add_argument("--methods", default=",".join(BENCH_DEFAULT),
                   help="comma-separated; eagle3 (needs an EAGLE-3 head) runs when named")
    b.add_argument("--dataset", default="mtbench", choices=["mtbench", "humaneval", "sharegpt-test"])
    b.add_argument("--n", type=positive_int, default=10)
    b.add_argument("--max-new-tokens", type=positive_int, default=128)
    b.add_argument("--temperature", type=float, default=0.0)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--quick", action="store_true", help="3 prompts x 32 tokens (<= 3 minutes)")
    b.add_argument("--curve-rounds", type=positive_int, default=4,
                   help="measure the cost curve in this many rounds spread over the run (the "
                        "first before the prompts), pooled for the predictions")
    b.add_argument("--out", default=None, help="output folder (default data/results/bench_...)")

    e = sub.add_parser("eval-head", help="top-1, n-alpha (test split) and tau (MT-bench)")
    add_target_args(e)
    add_head_args(e)
    e.add_argument("--n-text", type=positive_int, default=50)
    e.add_argument("--n-prompts", type=positive_int, default=80,
                   help="MT-bench first turns, spread over its 8 categories (default: all 80)")
    e.add_argument("--max-new-tokens", type=positive_int, default=64)
    e.add_argument("--max-len", type=positive_int, default=1024,
                   help="tokens per test conversation for top-1 and n-alpha")
    e.add_argument("--also", default="", help="comma-separated prompt sets to measure tau on too: "
                                               "humaneval, sharegpt-test (first turns)")
    e.add_argument("--n-also", type=positive_int, default=40,
                   help="prompts of each --also set, spread over it")
    e.add_argument("--out", default=None, help="write the metrics JSON here")

    c = sub.add_parser("compare-heads", help="two eval-head results: head B's MT-bench tau minus "
                                              "head A's, paired over prompts, with an interval")
    c.add_argument("a", help="eval-head JSON of head A (the baseline)")
    c.add_argument("b", help="eval-head JSON of head B")
    c.add_argument("--out", default=None, help="write the comparison JSON here")

    tc = sub.add_parser("tau-curve", help="eval-head results of one head at several training-"
                                          "token counts: tau against tokens, gain per doubling, "
                                          "and where it would reach --goal (bootstrap intervals)")
    tc.add_argument("files", nargs="+", help="eval-head JSONs (two or more token counts)")
    tc.add_argument("--goal", type=float, default=None, help="tau to project the tokens for")
    tc.add_argument("--out", default=None, help="write the curve JSON here")

    a = sub.add_parser("measure-acceptance", help="tau per prompt for tree/chain, EAGLE-2/EAGLE-1, "
                                                   "T=0/T=1, draft calibration and n-alpha (untimed; "
                                                   "what paper-vs-ours reads)")
    add_target_args(a)
    a.add_argument("--head", default=None, help="draft head directory (default: shipped head)")
    a.add_argument("--n-prompts", type=positive_int, default=24,
                   help="MT-bench first turns, spread over its 8 categories")
    a.add_argument("--max-new-tokens", type=positive_int, default=64)
    a.add_argument("--n-text", type=positive_int, default=50,
                   help="ShareGPT test conversations for n-alpha")
    a.add_argument("--max-len", type=positive_int, default=1024)
    a.add_argument("--out", default=None,
                   help="JSON path (default data/results/acceptance_<model>.json)")

    v = sub.add_parser("paper-vs-ours", help="the papers' claims against ours, from committed "
                                             "results files (runs no model)")
    v.add_argument("--results", default="data/results", help="folder of the results files")
    v.add_argument("--out", default=None,
                   help="writes OUT.json and OUT.md (default <results>/paper_vs_ours)")

    m = sub.add_parser("results-md", help="write RESULTS.md and the README's generated tables "
                                          "from the committed results files (runs no model)")
    m.add_argument("--root", default=".", help="the repository (README.md, data/)")
    m.add_argument("--check", action="store_true",
                   help="write nothing; exit 2 if a document differs from what the files produce")

    o = sub.add_parser("export", help="write a head in its authors' published layout: EAGLE-1 "
                                      "(pytorch_model.bin) or EAGLE-3 (model.safetensors, d2t/t2d)")
    add_target_args(o)
    o.add_argument("--head", default=None, help="head directory (default: the best shipped head)")
    o.add_argument("--out", required=True)

    h = sub.add_parser("rehearse", help="the 7B dress rehearsal: every step a GPU user runs, as "
                                        "child processes, on a 7B-shaped model with random "
                                        "weights; time and peak RSS per step; resumable")
    h.add_argument("--config", default="vicuna-7b", choices=REHEARSAL_CONFIGS,
                   help="the target's shape (tiny: the same path in minutes, for tests)")
    h.add_argument("--dir", default=None, help="model, features, heads, logs and finished steps "
                                               "(default runs/rehearsal_<config>)")
    h.add_argument("--out", default=None,
                   help="results JSON (default data/results/rehearsal_<config>.json)")
    h.add_argument("--seed", type=int, default=0, help="the model's weights and the heads' init")
    h.add_argument("--threads", type=positive_int, default=None, help="torch threads of each step")

    x = sub.add_parser("experiment", help="paper experiments: `uncertainty` = the feature-"
                                          "uncertainty ablation (EAGLE Figs. 3, 4, 8); resumable")
    x.add_argument("name", choices=["uncertainty"])
    add_target_args(x)
    x.add_argument("--size", default="full", choices=["tiny", "ci", "full"],
                   help="tiny: smoke run; ci: notebook 02's live run; full: 3 seeds, a few hours "
                        "on 2 CPU threads, resumable across sittings")
    x.add_argument("--out", default="data/results/uncertainty.json")
    x.add_argument("--work", default=None, help="checkpoints and finished parts "
                                                "(default runs/uncertainty_<size>)")
    x.add_argument("--keep", default=None,
                   help="where each finished variant's JSON files go, to commit between sittings; "
                        "a new --work starts from them (default data/results/uncertainty_full "
                        "for --size full, none otherwise; '' for none)")
    for flag, kind in (("--train-tokens", positive_int), ("--val-tokens", positive_int),
                       ("--max-len", positive_int), ("--epochs", positive_int),
                       ("--batch-tokens", positive_int), ("--lr", float), ("--draft-vocab", int),
                       ("--prompts", positive_int), ("--max-new-tokens", positive_int),
                       ("--tree", str), ("--contexts", positive_int), ("--seed", int),
                       ("--seeds", positive_int), ("--mixed-precision", str)):
        x.add_argument(flag, type=kind, default=None, help="overrides the size's value")
    return parser


def load(args):
    import torch
    from eagle_mini.models import load_target
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:  # `accelerate launch`: one GPU per process
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    if args.matmul_precision != "highest":
        from eagle_mini.runtime.precision import set_matmul_precision
        print(set_matmul_precision(args.matmul_precision), file=sys.stderr)
    from eagle_mini.runtime.kernels import use_kernels
    target = load_target(args.model, dtype=args.dtype, device=device, pack=args.kernels != "stock")
    use_kernels(target, args.kernels)
    return target


def head_for(args, target, methods=()):
    """--head DIR, else the best shipped head for the target, else a random head (said loudly).
    When `methods` draft with more than one head kind (the table's `head` column): {kind: head},
    the best shipped head of each kind (`runtime.run.pick_head` hands each method its own)."""
    from eagle_mini.heads import HEAD_KINDS, default_head
    from eagle_mini.methods import method
    kinds = sorted({method(m).head for m in methods if method(m).is_eagle}, key=HEAD_KINDS.index)
    if args.head is not None or kinds in ([], [HEAD_KINDS[0]]):
        return default_head(target, args.head)
    heads = {kind: default_head(target, kind=kind) for kind in kinds}
    if len(heads) == 1:
        return next(iter(heads.values()))
    return ({k: h for k, (h, _) in heads.items()}, "; ".join(n for _, n in heads.values()))


def tree_arg(spec):
    """--tree text -> what `generate` takes; a bad spec fails before any loading."""
    from eagle_mini.tree import tree_from_spec
    return None if spec is None else tree_from_spec(spec)


def refuse_ignored(args, options, why):
    """An option given explicitly that the chosen method would ignore is an error, not dropped."""
    given = [flag for flag in options if getattr(args, flag.lstrip("-").replace("-", "_")) is not None]
    if given:
        raise EagleMiniError(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect "
                             f"{why}; leave {'it' if len(given) == 1 else 'them'} out")


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def cmd_generate(args):
    from eagle_mini.methods import method
    from eagle_mini.runtime.run import run_method
    if not method(args.method).is_eagle:
        refuse_ignored(args, ("--head", "--tree"), f"with --method {args.method}")
    if not args.temperature:
        refuse_ignored(args, ("--top-p", "--top-k", "--seed"), "when decoding greedily "
                       "(--temperature 0)")
    tree = tree_arg(args.tree)
    target = load(args)
    head = None
    if method(args.method).is_eagle:
        head, note = head_for(args, target, (args.method,))
        print(note, file=sys.stderr)
    streamer = None if args.json else _text_streamer(target)
    sampling = {"temperature": args.temperature, "top_p": 1.0 if args.top_p is None else args.top_p,
                "top_k": args.top_k or 0, "seed": 0 if args.seed is None else args.seed}
    gen = run_method(target, head, args.method, args.prompt, args.max_new_tokens,
                     tree=tree, streamer=streamer, **sampling)
    if args.json:
        stats = {k: v for k, v in gen.stats.items() if k != "confidence_accepted"}
        print(json.dumps({"prompt_ids": gen.prompt_ids, "output_ids": gen.output_ids,
                          "text": gen.text, "stats": stats}))
    else:
        print()
        s = gen.stats
        print(f"[{args.method}] {s['new_tokens']} tokens in {s['seconds']:.2f} s = "
              f"{s['tokens_per_second']:.1f} tok/s, tau {fmt(s['tau'])} per cycle, "
              f"{s['tokens_per_forward']:.2f} tokens per target forward", file=sys.stderr)


def _text_streamer(target):
    """Print decoded text as it grows (decode the whole output each time: merges stay right)."""
    ids, shown = [], [0]

    def stream(new_ids):
        ids.extend(new_ids)
        text = target.decode(ids)
        print(text[shown[0]:], end="", flush=True)
        shown[0] = len(text)
    return stream


def cmd_profile_target(args):
    from eagle_mini.runtime.cost import cost_curve, save_curve
    if args.out and Path(args.out).is_dir():
        raise EagleMiniError(f"--out {args.out} is a directory; give a file name such as "
                             f"{Path(args.out) / 'cost_curve.json'}")
    if args.compare_stock:  # times both kernels side by side: load the packed ones
        args.kernels = "packed"
    target = load(args)
    if args.by_op:
        return print_op_breakdown(target, args)
    ns, n = [], 1
    while n <= args.max_n:
        ns.append(n)
        n *= 2
    curve = cost_curve(target, ns=tuple(ns), prefix_len=args.prefix_len, repeats=args.repeats,
                       with_head=args.with_head, compare_stock=args.compare_stock)
    curve["command"] = "python -m eagle_mini " + " ".join(sys.argv[1:])
    safe = args.model.replace("/", "_").replace(":", "_")
    out = Path(args.out or f"data/results/cost_curve_{safe}_{args.device}.json")
    json_path, png = save_curve(curve, out)
    heads = curve["head_median_ms"] or [None] * len(curve["ns"])
    stock = curve.get("stock", {}).get("relative") or [None] * len(curve["ns"])
    for n, ms, rel, hm, st in zip(curve["ns"], curve["median_ms"], curve["relative"], heads, stock):
        print(f"n={n:3d}  {ms:8.1f} ms  c(n)/c(1) = {rel:5.2f}"
              + (f"   stock kernels {st:5.2f}" if st is not None else "")
              + (f"   head {hm:6.2f} ms" if hm is not None else ""))
    print(f"wrote {json_path} and {png}")


def print_op_breakdown(target, args):
    """`profile-target --by-op`: ms per op family at n = 1, 2, 16 and the growth from 1 to 2."""
    from eagle_mini.measure.profile import op_breakdown
    from eagle_mini.results import results_json
    r = op_breakdown(target, prefix_len=args.prefix_len, repeats=args.repeats)
    r["command"] = "python -m eagle_mini " + " ".join(sys.argv[1:])
    rows = r["by_n"]
    families = list(rows[0]["family_ms"])
    print(f"{'ms per forward':26s}" + "".join(f"{'n=' + str(x['n']):>10s}" for x in rows)
          + f"{'2 minus 1':>11s}")
    for f in families + ["wall"]:
        vals = [x["wall_ms"] if f == "wall" else x["family_ms"].get(f, 0.0) for x in rows]
        print(f"{f:26s}" + "".join(f"{v:10.1f}" for v in vals) + f"{vals[1] - vals[0]:+11.1f}")
    print(f"machine: {r['machine'].get('cpu')}, {r['machine'].get('threads')} threads")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(results_json(r, indent=1))
        print(f"wrote {args.out}")


def cmd_demo(args):
    """The same prompt with vanilla, EAGLE-2 and `auto`: equal texts, tau and the speedups, and
    where EAGLE is slower on this machine, why (from the cost curve measured here)."""
    from eagle_mini.methods import AUTO, EAGLE2, VANILLA
    from eagle_mini.runtime.auto import auto_tree, tree_tokens, why_slower
    from eagle_mini.runtime.run import method_tree, run_method
    from eagle_mini.runtime.cost import cost_curve
    tree = tree_arg(args.tree)
    target = load(args)
    head, note = head_for(args, target)
    print(f"target: {target.name} ({str(target.dtype).replace('torch.', '')}, {target.device})")
    print(f"head:   {note}")
    if target.kernels:
        from eagle_mini.runtime.kernels import kernels_note
        print(f"matmul: {kernels_note(target.kernels)}")
    print(f"prompt: {args.prompt}\n")
    run_method(target, head, EAGLE2, "Hi!", 8)  # warm-up: first calls pay one-off costs
    curve = cost_curve(target, repeats=3, progress=False)
    auto_tree(target, head, curve=curve)  # sized once per machine and head, then cached
    van = run_method(target, head, VANILLA, args.prompt, args.max_new_tokens,
                     streamer=_text_streamer(target))
    print("\n")
    v = van.stats
    print(f"vanilla greedy : {v['new_tokens']} tokens, {v['tokens_per_second']:.1f} tok/s, "
          f"1 token per target forward")
    slower = []
    for method, label in ((EAGLE2, "EAGLE-2 greedy "), (AUTO, "auto (EAGLE-2) ")):
        chosen = method_tree(target, head, method, tree if method == EAGLE2 else None)
        run = run_method(target, head, method, args.prompt, args.max_new_tokens, tree=chosen)
        e = run.stats
        speedup = v["seconds"] / e["seconds"]
        print(f"{label}: {e['new_tokens']} tokens, {e['tokens_per_second']:.1f} tok/s, "
              f"tau {fmt(e['tau'])} tokens per draft-verify cycle "
              f"({e['tokens_per_forward']:.2f} per target forward, prefill included; tree {e['tree']}), "
              f"identical text: {van.output_ids == run.output_ids}, "
              f"speedup {speedup:.2f}x (wall time, this machine)")
        if speedup < 1.0:
            slower.append(f"why {label.strip()} is slower here: "
                          + why_slower(e, curve, tree_tokens(chosen), speedup))
    for line in slower:
        print(line)


def cmd_check_lossless(args):
    """The large greedy-losslessness check, with a JSON record of every prompt."""
    from eagle_mini.measure.lossless import check_lossless
    from eagle_mini.results import results_json
    tree = tree_arg(args.tree)
    target = load(args)
    methods = [m.strip() for m in args.methods.split(",")]
    head, note = head_for(args, target, methods)
    result = check_lossless(target, head, methods, args.n,
                            args.max_new_tokens, tree=tree, log=print)
    from eagle_mini.runtime.precision import lossless_file
    result = {"command": "python -m eagle_mini " + " ".join(sys.argv[1:]), "head": note, **result}
    out = Path(args.out or lossless_file(args.matmul_precision))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result))
    print(f"all identical: {result['all_identical']}; wrote {out}")
    if not result["all_identical"]:
        raise EagleMiniError("EAGLE output differs from vanilla greedy (see the JSON)")


def cmd_prepare(args):
    from eagle_mini.models import resolve
    print(f"{args.model}: ready in {resolve(args.model)}")


def cmd_dump_features(args):
    from eagle_mini.training.features import dump_command
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    m = dump_command(args.model, args.data, args.split, args.max_conversations, args.max_len,
                     args.out, args.start, args.shard_size, args.batch_tokens, args.dtype,
                     args.device, eagle3=args.eagle3)
    print(f"{args.out}: {json.dumps(m.get('counts', {}))}")


def cmd_train_head(args):
    from eagle_mini.training.commands import train_command
    train_command(args, load(args))


def cmd_bench(args):
    from eagle_mini.measure.bench import bench, markdown_table, save
    target = load(args)
    methods = tuple(m.strip() for m in args.methods.split(","))
    head, note = head_for(args, target, methods)
    print(note, file=sys.stderr)
    n, tokens = (3, 32) if args.quick else (args.n, args.max_new_tokens)
    result = bench(target, head, methods, args.dataset,
                   n, tokens, args.temperature, args.seed, head_note=note,
                   curve_repeats=3 if args.quick else 5, curve_rounds=args.curve_rounds)
    result["command"] = "python -m eagle_mini " + " ".join(sys.argv[1:])
    name = f"bench_{args.model.replace('/', '_')}_{args.device}_{args.dataset}_T{args.temperature:g}"
    out = save(result, Path(args.out or Path("data/results") / (name + ("_quick" if args.quick else ""))))
    print(markdown_table(result))
    print(f"wrote {out}/bench.json, bench.md, bench.png")


def cmd_export(args):
    """A head in the layout its authors publish and serving engines load."""
    from eagle_mini.heads.formats import export_eagle3, export_official
    from eagle_mini.heads import HEAD_KINDS, head_kind
    target = load(args)
    head, note = head_for(args, target)
    if head_kind(head) == HEAD_KINDS[1]:
        out = export_eagle3(head, target, args.out)
    else:
        out = export_official(head, target, args.out)
    print(f"{note}: wrote {head_kind(head)} layout to {out}")


def cmd_eval_head(args):
    from eagle_mini.heads import head_kind
    from eagle_mini.measure.evaluate import eval_head
    from eagle_mini.results import results_json
    from eagle_mini.data import DATASETS
    tree = tree_arg(args.tree)
    others = {name.strip(): args.n_also for name in args.also.split(",") if name.strip()}
    unknown = [name for name in others if name not in DATASETS or name == "mtbench"]
    if unknown:
        raise EagleMiniError(f"--also {', '.join(unknown)}: choose from humaneval, sharegpt-test")
    target = load(args)
    head, note = head_for(args, target)
    print(note, file=sys.stderr)
    result = {"command": "python -m eagle_mini " + " ".join(sys.argv[1:]), "head": note,
              "head_kind": head_kind(head),
              "head_tokens_seen": getattr(head, "meta", {}).get("tokens_seen"),
              "head_training_commands": [r.get("command") for r in
                                         getattr(head, "meta", {}).get("rounds", [])],
              **eval_head(target, head, args.n_text, args.n_prompts, args.max_new_tokens,
                          max_len=args.max_len, tree=tree, other_sets=others)}
    text = results_json(result)
    print(text, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


def read_eval_results(paths) -> list[dict]:
    """eval-head JSON files, each checked to be one; a clear error names the one that is not."""
    docs = []
    for path in paths:
        try:
            docs.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            raise EagleMiniError(f"{path}: not a readable eval-head JSON ({e.__class__.__name__})")
        if "mtbench" not in docs[-1]:
            raise EagleMiniError(f"{path}: not an eval-head result (no 'mtbench')")
    return docs


def cmd_tau_curve(args):
    from eagle_mini.measure.evaluate import tau_curve
    from eagle_mini.results import results_json
    result = {"command": "python -m eagle_mini " + " ".join(sys.argv[1:]), "files": args.files,
              **tau_curve(read_eval_results(args.files), args.goal)}
    for pt in result["points"]:
        t = pt["tau"]
        print(f"{pt['tokens']:>12,} tokens: tau {t['estimate']:.3f} [{t['low']:.3f}, {t['high']:.3f}]")
    b = result["fit"]["per_doubling"]
    print(f"per doubling of training tokens: {b['estimate']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]")
    if "goal" in result:
        g = result["goal"]["tokens"]
        print(f"tau {args.goal} at about {g['estimate']:,.0f} tokens [{g['low']:,.0f}, "
              f"{g['high']:,.0f}] (log-linear extrapolation)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(results_json(result, indent=1))


def cmd_compare_heads(args):
    from eagle_mini.measure.evaluate import compare_heads
    from eagle_mini.results import results_json
    docs = read_eval_results((args.a, args.b))
    result = {"command": "python -m eagle_mini " + " ".join(sys.argv[1:]),
              "files": [args.a, args.b], **compare_heads(*docs)}
    d = result["tau_difference_b_minus_a"]
    print(f"tau B - A = {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] "
          f"({result['setting']['prompts']} prompts; training tokens B/A "
          f"{result['training_token_ratio_b_over_a'] or float('nan'):.3f})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(results_json(result))


def cmd_regenerate(args):
    from eagle_mini.training.regenerate import regenerate_split
    if args.temperature < 0:
        raise EagleMiniError(f"--temperature must be >= 0, got {args.temperature}")
    if args.start < 0:
        raise EagleMiniError(f"--start must be >= 0, got {args.start}")
    result = regenerate_split(load(args), args.out, args.split, args.start, args.max_conversations,
                              args.batch_size, args.max_new_tokens, args.max_len,
                              args.temperature, args.seed, max_turns=args.max_turns)
    print(json.dumps(result))


def cmd_measure_acceptance(args):
    from eagle_mini.experiments.acceptance import acceptance_command
    from eagle_mini.results import results_json
    target = load(args)
    head, note = head_for(args, target)
    print(note, file=sys.stderr)
    result = acceptance_command(target, head, note, args.n_prompts, args.max_new_tokens,
                                args.n_text, args.max_len,
                                "python -m eagle_mini " + " ".join(sys.argv[1:]))
    out = Path(args.out or f"data/results/acceptance_{args.model.replace('/', '_')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result))
    for name, iv in result["summary"]["tau"].items():
        print(f"tau {name:10s} {fmt(iv['estimate'], '.3f')} [{fmt(iv['low'], '.3f')}, "
              f"{fmt(iv['high'], '.3f')}]")
    print(f"wrote {out} ({result['seconds'] / 60:.1f} min)")


def cmd_paper_vs_ours(args):
    from eagle_mini.experiments.claims import write_table
    json_path, md_path = write_table(args.results, args.out,
                                     "python -m eagle_mini " + " ".join(sys.argv[1:]))
    print(Path(md_path).read_text(), end="")
    print(f"wrote {json_path} and {md_path}")


def cmd_results_md(args):
    from eagle_mini.tooling.report import stale, write
    if args.check:
        if stale(args.root):
            raise EagleMiniError(", ".join(map(str, stale(args.root))) + " differ from the results "
                                 "files: run `python -m eagle_mini results-md`")
        print("RESULTS.md and README.md match the results files")
        return
    changed = write(args.root)
    print("wrote " + ", ".join(map(str, changed)) if changed else "RESULTS.md and README.md are current")


def cmd_rehearse(args):
    from eagle_mini.tooling.rehearsal import rehearse
    r = rehearse(args.config, args.dir, args.out, args.seed, args.threads,
                 command="python -m eagle_mini " + " ".join(sys.argv[1:]))
    print(f"peak RSS {r['peak_rss_gb']:.2f} GB (budget {r['budget_gb']:.1f} GB), "
          f"{r['seconds'] / 60:.1f} min of steps ({len(r['ran_now'])} run now); resumed head = "
          f"uninterrupted: {r['resume']['eagle1']['identical']} (EAGLE-1), "
          f"{r['resume']['eagle3']['identical']} (EAGLE-3); wrote {r['out']}")


def cmd_experiment(args):
    from eagle_mini.experiments.ablation import ablation_command
    ablation_command(args, load(args))


COMMANDS = {"generate": cmd_generate, "demo": cmd_demo, "prepare": cmd_prepare,
            "profile-target": cmd_profile_target, "check-lossless": cmd_check_lossless,
            "bench": cmd_bench, "eval-head": cmd_eval_head, "compare-heads": cmd_compare_heads, "tau-curve": cmd_tau_curve, "export": cmd_export, "dump-features": cmd_dump_features,
            "regenerate": cmd_regenerate, "train-head": cmd_train_head,
            "experiment": cmd_experiment, "measure-acceptance": cmd_measure_acceptance,
            "paper-vs-ours": cmd_paper_vs_ours, "rehearse": cmd_rehearse,
            "results-md": cmd_results_md}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except EagleMiniError as e:
        print(f"eagle-mini: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eagle-mini: interrupted", file=sys.stderr)
        return 130
    return 0
