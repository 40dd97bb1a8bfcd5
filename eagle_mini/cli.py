"""Command line: `python -m eagle_mini COMMAND` (also installed as `eagle-mini`).

Every user error ends as one line on stderr and exit code 2; `--json` outputs are one JSON object
for scripts and graders.
"""
import argparse
import json
import sys

from .errors import EagleMiniError


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


def add_target_args(p):
    p.add_argument("--model", default="smollm2-135m",
                   help="course target name, local HF model directory, or hub id")
    p.add_argument("--dtype", default="fp32", help="fp32 (default), bf16 or fp16")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")


def build_parser() -> Parser:
    parser = Parser(prog="eagle-mini", description="EAGLE speculative decoding, small and tested.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    g = sub.add_parser("generate", help="generate a chat answer and print it (or --json)")
    add_target_args(g)
    g.add_argument("--prompt", required=True, help="user message (goes through the chat template)")
    g.add_argument("--max-new-tokens", type=positive_int, default=128)
    g.add_argument("--method", default="vanilla", choices=["vanilla"])
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("profile-target", help="measure c(n)/c(1), the cost of verifying n tokens")
    add_target_args(p)
    p.add_argument("--prefix-len", type=positive_int, default=200)
    p.add_argument("--repeats", type=positive_int, default=7)
    p.add_argument("--max-n", type=positive_int, default=64)
    p.add_argument("--out", default=None, help="JSON path (default data/results/cost_curve_<model>.json)")

    r = sub.add_parser("prepare", help="convert the embedded target once into the cache")
    r.add_argument("--model", default="smollm2-135m")

    d = sub.add_parser("demo", help="the main job on the embedded default target")
    add_target_args(d)
    d.add_argument("--prompt", default="Explain in three sentences why the sky is blue.")
    d.add_argument("--max-new-tokens", type=positive_int, default=96)
    return parser


def load(args):
    import torch
    from .models import load_target
    if args.threads:
        torch.set_num_threads(args.threads)
    return load_target(args.model, dtype=args.dtype, device=args.device)


def cmd_generate(args):
    from .decode import generate_vanilla
    target = load(args)
    streamer = None
    if not args.json:
        streamer = _text_streamer(target)
    gen = generate_vanilla(target, args.prompt, args.max_new_tokens, temperature=args.temperature,
                           top_p=args.top_p, top_k=args.top_k, seed=args.seed, streamer=streamer)
    if args.json:
        print(json.dumps({"prompt_ids": gen.prompt_ids, "output_ids": gen.output_ids,
                          "text": gen.text, "stats": gen.stats}))
    else:
        print()
        s = gen.stats
        print(f"[{args.method}] {s['new_tokens']} tokens in {s['seconds']:.2f} s = "
              f"{s['tokens_per_second']:.1f} tok/s, tau {s['tau']:.2f}", file=sys.stderr)


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
    from pathlib import Path
    from .profile import cost_curve, save_curve
    target = load(args)
    ns, n = [], 1
    while n <= args.max_n:
        ns.append(n)
        n *= 2
    curve = cost_curve(target, ns=tuple(ns), prefix_len=args.prefix_len, repeats=args.repeats)
    safe = args.model.replace("/", "_")
    out = Path(args.out or f"data/results/cost_curve_{safe}_{args.device}.json")
    json_path, png = save_curve(curve, out)
    for n, ms, rel in zip(curve["ns"], curve["median_ms"], curve["relative"]):
        print(f"n={n:3d}  {ms:8.1f} ms  c(n)/c(1) = {rel:5.2f}")
    print(f"wrote {json_path} and {png}")


def cmd_demo(args):
    from .decode import generate_vanilla
    target = load(args)
    print(f"target: {target.name} ({target.dtype}, {target.device})")
    print(f"prompt: {args.prompt}\n")
    gen = generate_vanilla(target, args.prompt, args.max_new_tokens, streamer=_text_streamer(target))
    s = gen.stats
    print(f"\n\nvanilla greedy: {s['new_tokens']} tokens in {s['seconds']:.2f} s = "
          f"{s['tokens_per_second']:.1f} tok/s")


def cmd_prepare(args):
    from .models import resolve
    print(f"{args.model}: ready in {resolve(args.model)}")


COMMANDS = {"prepare": cmd_prepare, "generate": cmd_generate, "profile-target": cmd_profile_target, "demo": cmd_demo}


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
