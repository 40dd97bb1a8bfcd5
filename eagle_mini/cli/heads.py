"""Draft-head commands: dump-features, train-head, regenerate, eval-head, compare-heads,
tau-curve, export."""
import json
import sys
from pathlib import Path

from eagle_mini.cli.common import (add_head_args, add_target_args, command_line, config_from, fmt,
                                   head_dir, head_for, load, positive_int, set_threads, share,
                                   tree_arg)
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.commands import TrainHeadCommand

SPLITS = ["train", "validation", "test"]


def add_dump_features(sub):
    f = sub.add_parser("dump-features", help="store the target's features for head training")
    add_target_args(f)
    f.add_argument("--target", dest="model", default="smollm2-135m", help="alias of --model")
    f.add_argument("--data", default="sharegpt")
    f.add_argument("--split", default="train", choices=SPLITS)
    f.add_argument("--max-conversations", type=positive_int, default=None)
    f.add_argument("--max-len", type=positive_int, default=2048)
    f.add_argument("--start", type=int, default=0, help="skip this many records of the split")
    f.add_argument("--shard-size", type=positive_int, default=256)
    f.add_argument("--batch-tokens", type=positive_int, default=4096)
    f.add_argument("--eagle3", action="store_true",
                   help="also store the layers an EAGLE-3 head reads (3x the disk)")
    f.add_argument("--out", required=True)
    f.set_defaults(handler=cmd_dump_features)


def cmd_dump_features(args):
    from eagle_mini.training.features import dump_command
    set_threads(args.threads)
    m = dump_command(args.model, args.data, args.split, args.max_conversations, args.max_len,
                     args.out, args.start, args.shard_size, args.batch_tokens, args.dtype,
                     args.device, eagle3=args.eagle3)
    print(f"{args.out}: {json.dumps(m.get('counts', {}))}")


def add_train_head(sub):
    """train-head's options; those of `TrainHeadCommand`'s fields take its defaults."""
    d = TrainHeadCommand
    t = sub.add_parser("train-head", help="train a draft head (EAGLE-1 or EAGLE-3); resumable")
    add_target_args(t)
    t.add_argument("--target", dest="model", default="smollm2-135m", help="alias of --model")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--features", help="a dump-features directory")
    src.add_argument("--stream", action="store_true",
                     help="compute features on the fly from unseen train conversations")
    t.add_argument("--wrap", action="store_true",
                   help="--stream: when the train split is used up, start it again (a new epoch)")
    t.add_argument("--regenerated", default=d.regenerated,
                   help="with --stream: train on a `regenerate` file (the target's own replies)")
    t.add_argument("--mix-sharegpt", type=share, default=d.mix_sharegpt, metavar="SHARE",
                   help="with --regenerated: this share of each batch's tokens is ShareGPT's own "
                        "replies (records after the regenerated ones), the rest the target's")
    t.add_argument("--out", required=True, help="where the trained head is written (bf16)")
    t.add_argument("--work", default=d.work, help="checkpoints and log (default runs/<out name>)")
    t.add_argument("--init", default=d.init, help="continue from this head directory")
    t.add_argument("--start", type=int, default=d.start,
                   help="first train record to stream (default: where --init stopped, else 0)")
    t.add_argument("--steps", type=positive_int, default=d.steps)
    t.add_argument("--stop-after", type=positive_int, default=d.stop_after,
                   help="do at most this many steps now (resume later with the same command)")
    t.add_argument("--lr", type=float, default=d.lr,
                   help="peak learning rate (default: the 135M head's 3e-3 scaled by 576 / the "
                        "target's hidden size, `training.train.default_lr`)")
    t.add_argument("--warmup", type=int, default=d.warmup)
    t.add_argument("--batch-tokens", type=positive_int, default=d.batch_tokens)
    t.add_argument("--max-len", type=positive_int, default=d.max_len)
    t.add_argument("--draft-vocab", type=int, default=d.draft_vocab,
                   help="reduced draft vocabulary size")
    t.add_argument("--ce-vocab", type=int, default=d.ce_vocab, help="restrict the soft CE to N tokens")
    add_train_head_kind(t, d)
    t.add_argument("--no-fc-bias", action="store_true")
    t.add_argument("--eval-conversations", type=positive_int, default=d.eval_conversations)
    t.add_argument("--eval-every", type=int, default=d.eval_every)
    t.add_argument("--ckpt-every", type=positive_int, default=d.ckpt_every)
    t.add_argument("--log-every", type=positive_int, default=d.log_every)
    t.add_argument("--seed", type=int, default=d.seed)
    t.set_defaults(handler=cmd_train_head)


def add_train_head_kind(t, d):
    """train-head's options on the head's kind, its start, unrolling and precision."""
    from eagle_mini.heads import HEAD_KINDS
    t.add_argument("--kind", default=d.kind, choices=HEAD_KINDS,
                   help="a new head's kind: eagle1 (fc 2H -> H, feature + token loss) or eagle3 "
                        "(three target layers, own lm_head, token loss over unrolled steps); "
                        "--init keeps its head's kind")
    t.add_argument("--lm-head-init", default=d.lm_head_init, choices=["random", "target", "frozen"],
                   help="a new EAGLE-3 head's lm_head: random (the authors'), the target's rows "
                        "of the draft vocabulary with its final norm (starts at a CE above "
                        "uniform's, see the head's EXPERIMENTS.md), or frozen: those rows, never "
                        "trained (as EAGLE-1 reads the target's lm_head)")
    t.add_argument("--norm-init-scale", type=float, default=d.norm_init_scale,
                   help="with --lm-head-init target or frozen: start the head's final norm at the "
                        "target's times this (in [0, 1]; small values start near a uniform "
                        "guess instead of confident, wrong logits)")
    t.add_argument("--unroll", type=positive_int, default=d.unroll,
                   help="training-time test (EAGLE-3 §3): draft steps per position, each reading "
                        "the head's own output; default 1 for eagle1 (EAGLE-1's loss), 7 for "
                        "eagle3 (the authors')")
    t.add_argument("--mixed-precision", default=d.mixed_precision, choices=["no", "bf16", "auto"],
                   help="bf16: the head's forward/backward under torch.autocast (fp32 weights, "
                        "AdamW); auto: bf16 where a bf16 matmul times faster here than fp32")
    t.add_argument("--feature-dtype", default=d.feature_dtype,
                   choices=["fp32", "bf16", "fp16", "auto"],
                   help="--stream: featurize with a copy of the target in this dtype; auto: bf16 "
                        "where it times faster here than fp32, else fp32")
    t.add_argument("--unroll-decay", type=float, default=d.unroll_decay,
                   help="weight of unrolled step k: this**k")


def train_head_command(args) -> TrainHeadCommand:
    """Parsed train-head options -> the package's `TrainHeadCommand`."""
    return config_from(TrainHeadCommand, args, fc_bias=not args.no_fc_bias)


def cmd_train_head(args):
    from eagle_mini.training.commands import train_command
    train_command(train_head_command(args), load(args))


def add_regenerate(sub):
    g = sub.add_parser("regenerate", help="ShareGPT user turns with the target's own replies "
                                          "(training text for the head); resumable")
    add_target_args(g)
    g.add_argument("--split", default="train", choices=SPLITS)
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
    g.set_defaults(handler=cmd_regenerate)


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


def add_eval_head(sub):
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
    e.add_argument("--json", action="store_true",
                   help="print the metrics JSON instead of the one-line summary")
    e.set_defaults(handler=cmd_eval_head)


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
    result = {"command": command_line(), "head": note,
              "head_kind": head_kind(head),
              "head_tokens_seen": getattr(head, "meta", {}).get("tokens_seen"),
              "head_training_commands": [r.get("command") for r in
                                         getattr(head, "meta", {}).get("rounds", [])],
              **eval_head(target, head, args.n_text, args.n_prompts, args.max_new_tokens,
                          max_len=args.max_len, tree=tree, other_sets=others)}
    text = results_json(result)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    if args.json:
        print(text, end="")
        return
    print(eval_summary(result) + (f"; wrote {args.out}" if args.out else
                                  "; --json prints the whole result, --out FILE keeps it"))


def eval_summary(result: dict) -> str:
    """eval-head's result in one line: teacher-forced top-1 and n-alpha, then tau per prompt set.

        >>> eval_summary({"test_text": {"top1": 0.7, "alpha": [0.7, float("nan")]},
        ...               "mtbench": {"tau": 2.0, "tau_se": 0.05, "prompts": 80, "tree": "eagle2"}})
        'top-1 0.700, n-alpha 0.70/n/a (test split); MT-bench tau 2.00 (se 0.05, 80 prompts, tree eagle2)'
    """
    text, mt = result["test_text"], result["mtbench"]
    alpha = "/".join("n/a" if a != a else f"{a:.2f}" for a in text["alpha"])
    line = (f"top-1 {fmt(text['top1'], '.3f')}, n-alpha {alpha} (test split); MT-bench tau "
            f"{fmt(mt['tau'])} (se {fmt(mt.get('tau_se'))}, {mt['prompts']} prompts, tree {mt['tree']})")
    for name, other in result.get("other_sets", {}).items():
        line += f"; {name} tau {fmt(other.get('tau'))}"
    return line


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


def add_compare_heads(sub):
    c = sub.add_parser("compare-heads", help="two eval-head results: head B's MT-bench tau minus "
                                              "head A's, paired over prompts, with an interval")
    c.add_argument("a", help="eval-head JSON of head A (the baseline)")
    c.add_argument("b", help="eval-head JSON of head B")
    c.add_argument("--out", default=None, help="write the comparison JSON here")
    c.set_defaults(handler=cmd_compare_heads)


def cmd_compare_heads(args):
    from eagle_mini.measure.evaluate import compare_heads
    from eagle_mini.results import results_json
    docs = read_eval_results((args.a, args.b))
    result = {"command": command_line(),
              "files": [args.a, args.b], **compare_heads(*docs)}
    for k in result["derived_counts"]:
        print(f"{vars(args)[k]}: tau counts per prompt derived from its tau per prompt and the other "
              "file's counts (measure.evaluate.derived_counts)", file=sys.stderr)
    d = result["tau_difference_b_minus_a"]
    print(f"tau B - A = {d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] "
          f"({result['setting']['prompts']} prompts; training tokens B/A "
          f"{fmt(result['training_token_ratio_b_over_a'], '.3f')})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(results_json(result))


def add_tau_curve(sub):
    tc = sub.add_parser("tau-curve", help="eval-head results of one head at several training-"
                                          "token counts: tau against tokens, gain per doubling, "
                                          "and where it would reach --goal (bootstrap intervals)")
    tc.add_argument("files", nargs="+", help="eval-head JSONs (two or more token counts)")
    tc.add_argument("--goal", type=float, default=None, help="tau to project the tokens for")
    tc.add_argument("--out", default=None, help="write the curve JSON here")
    tc.set_defaults(handler=cmd_tau_curve)


def cmd_tau_curve(args):
    from eagle_mini.measure.evaluate import tau_curve
    from eagle_mini.results import results_json
    result = {"command": command_line(), "files": args.files,
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


def add_export(sub):
    from eagle_mini.heads import HEAD_KINDS
    from eagle_mini.heads.formats import TOKEN_MAP
    o = sub.add_parser("export", help="write a head in its authors' published layout: EAGLE-1 "
                                      "(pytorch_model.bin) or EAGLE-3 (model.safetensors, d2t/t2d)")
    add_target_args(o)
    o.add_argument("--format", default=None, choices=HEAD_KINDS,
                   help=f"{HEAD_KINDS[0]}: the authors' EAGLE-1 layout (pytorch_model.bin; a head "
                        f"with a reduced draft vocabulary, as the shipped one, is written over the "
                        f"full vocabulary with its draft vocabulary as {TOKEN_MAP}, SGLang's "
                        f"--speculative-token-map); {HEAD_KINDS[1]}: the authors' EAGLE-3 layout "
                        f"(model.safetensors with d2t/t2d). Default: the head's own kind; without "
                        f"--head, the best shipped head of this kind")
    o.add_argument("--head", type=head_dir, default=None,
                   help="head directory (default: the best shipped head)")
    o.add_argument("--out", required=True, help="a new or empty folder")
    o.set_defaults(handler=cmd_export)


def cmd_export(args):
    """A head in the layout its authors publish and serving engines load."""
    from eagle_mini.heads import HEAD_KINDS, config_kind, default_head, head_kind, read_config
    from eagle_mini.heads.formats import TOKEN_MAP, export_eagle3, export_official
    out = Path(args.out)
    if out.is_file() or (out.is_dir() and any(out.iterdir())):
        raise EagleMiniError(f"--out {args.out} already exists{' and is not empty' * out.is_dir()}: "
                             "give a new or empty folder")
    if args.head is not None and args.format is not None:
        kind = config_kind(read_config(args.head))
        if kind != args.format:
            raise EagleMiniError(f"{args.head} holds an {kind} head, which has no {args.format} "
                                 f"layout: use --format {kind}, or leave --format out")
    args.kernels = "stock"   # nothing runs a forward: no kernels to choose or time
    target = load(args)
    head, note = default_head(target, args.head, kind=args.format)
    if head_kind(head) == HEAD_KINDS[1]:
        export_eagle3(head, target, out)
        print(f"{note}: wrote the {HEAD_KINDS[1]} layout to {out}")
        return
    export_official(head, target, out, full_vocabulary=True)
    folded = (f"; the EAGLE-1 layout has no draft vocabulary, so the head's weights are written "
              f"over the full {target.vocab_size:,}-token vocabulary and its {head.draft_vocab_size:,}"
              f"-token draft vocabulary as {TOKEN_MAP} (SGLang's --speculative-token-map; "
              f"`load_official` reads both back)") if (out / TOKEN_MAP).exists() else ""
    print(f"{note}: wrote the {HEAD_KINDS[0]} layout to {out}{folded}")


def register(sub):
    for add in (add_dump_features, add_train_head, add_regenerate, add_eval_head,
                add_compare_heads, add_tau_curve, add_export):
        add(sub)
