"""Decoding commands: generate, demo, profile-target, prepare, check-lossless, bench."""
import argparse
import json
import sys
from pathlib import Path

from eagle_mini.cli.common import (add_decode_target_args, add_draft_vocab, add_head_args,
                                   command_line, fmt, head_for, head_dir, load, method_names,
                                   positive_int, refuse_ignored, tree_arg)
from eagle_mini.errors import EagleMiniError
from eagle_mini.results import default_out


def add_generate(sub):
    from eagle_mini.methods import BY_NAME, DECODERS, VANILLA
    import argparse
    import textwrap
    lines = [textwrap.fill(f"{name}: {BY_NAME[name].about}", 79, initial_indent="  ",
                           subsequent_indent="    ", break_on_hyphens=False) for name in DECODERS]
    g = sub.add_parser("generate", help="generate a chat answer and print it (or --json)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="methods (eagle_mini/methods.py):\n" + "\n".join(lines))
    add_decode_target_args(g)
    g.add_argument("--prompt", required=True, help="user message (goes through the chat template)")
    g.add_argument("--max-new-tokens", type=positive_int, default=128)
    g.add_argument("--method", default=VANILLA, choices=DECODERS,
                   help=f"decoding method, default {VANILLA} (the target alone, no draft head): "
                        f"{', '.join(DECODERS)}; each is described below")
    add_head_args(g)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default 1.0: off)")
    g.add_argument("--top-k", type=int, default=None, help="top-k sampling (default 0: off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (default 0)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(handler=cmd_generate)


def cmd_generate(args):
    from eagle_mini.measure.load import LoadWatch, warn
    from eagle_mini.methods import method
    from eagle_mini.runtime.run import run_method
    row = method(args.method)
    if not row.is_eagle:
        refuse_ignored(args, ("--head",) if row.drafts else ("--head", "--tree"),
                       f"with --method {args.method}")
    if not args.temperature:
        refuse_ignored(args, ("--top-p", "--top-k", "--seed"), "when decoding greedily "
                       "(--temperature 0)")
    tree = tree_arg(args.tree)
    target = load(args)
    head = None
    if row.is_eagle:
        head, note = head_for(args, target, (args.method,))
        print(note, file=sys.stderr)
    streamer = None if args.json else _text_streamer(target)
    sampling = {"temperature": args.temperature, "top_p": 1.0 if args.top_p is None else args.top_p,
                "top_k": args.top_k or 0, "seed": 0 if args.seed is None else args.seed}
    watch = LoadWatch()
    gen = run_method(target, head, args.method, args.prompt, args.max_new_tokens,
                     tree=tree, streamer=streamer, **sampling)
    if args.json:
        stats = {k: v for k, v in gen.stats.items() if k != "confidence_accepted"}
        print(json.dumps({"prompt_ids": gen.prompt_ids, "output_ids": gen.output_ids,
                          "text": gen.text, "stats": stats,
                          "exact": bool(target.runtime.is_exact)}))
    else:
        print()
        s = gen.stats
        print(f"[{args.method}] {s['new_tokens']} tokens in {s['seconds']:.2f} s = "
              f"{s['tokens_per_second']:.1f} tok/s, tau {fmt(s['tau'])} per cycle, "
              f"{s['tokens_per_forward']:.2f} tokens per target forward", file=sys.stderr)
    if gen.stats.get("stop") == "context":
        print(f"stopped after {gen.stats['new_tokens']} of {args.max_new_tokens} tokens: the "
              f"context ({target.context_length} tokens) is full", file=sys.stderr)
    warn(watch.check())


def _text_streamer(target):
    """Print decoded text as it grows (decode the whole output each time: merges stay right)."""
    ids, shown = [], [0]

    def stream(new_ids):
        ids.extend(new_ids)
        text = target.decode(ids)
        print(text[shown[0]:], end="", flush=True)
        shown[0] = len(text)
    return stream


def add_profile_target(sub):
    p = sub.add_parser("profile-target", help="measure c(n)/c(1), the cost of verifying n tokens")
    add_decode_target_args(p)
    p.add_argument("--prefix-len", type=positive_int, default=200)
    p.add_argument("--repeats", type=positive_int, default=7)
    p.add_argument("--max-n", type=positive_int, default=64)
    p.add_argument("--with-head", action="store_true", help="also time a draft-head forward per n")
    p.add_argument("--compare-stock", action="store_true",
                   help="also time the stock kernels in the same run (before/after packing)")
    p.add_argument("--compare-exact", action="store_true",
                   help="on an exact target, also time the stock forward in the same run, rounds "
                        "interleaved: what exactness costs")
    p.add_argument("--out", default=None, help="JSON path (default runs/cost_curve_<model>_<device>"
                                               ".json; a committed result only by naming it here)")
    p.add_argument("--by-op", action="store_true",
                   help="instead: where a forward of 1, 2 and 16 tokens spends its time, per op "
                        "family (torch profiler), and what grows from 1 to 2 tokens")
    p.set_defaults(handler=cmd_profile_target)


def cmd_profile_target(args):
    from eagle_mini.measure.load import LoadWatch, curve_rounds, warn
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
    watch = LoadWatch()
    curve = cost_curve(target, ns=tuple(ns), prefix_len=args.prefix_len, repeats=args.repeats,
                       with_head=args.with_head, compare_stock=args.compare_stock,
                       compare_exact=args.compare_exact)
    curve["command"] = command_line()
    curve["machine"]["load"] = watch.check({name: curve_rounds(c) for name, c in (
        ("cost curve", curve), ("stock kernels", curve.get("stock")),
        ("stock forward", curve.get("stock_forward"))) if c})
    safe = args.model.replace("/", "_").replace(":", "_")
    out = Path(args.out or default_out(f"cost_curve_{safe}_{args.device}.json"))
    json_path, png = save_curve(curve, out)
    heads = curve["head_median_ms"] or [None] * len(curve["ns"])
    stock = curve.get("stock", {}).get("relative") or [None] * len(curve["ns"])
    plain = curve.get("stock_forward", {}).get("median_ms") or [None] * len(curve["ns"])
    roof = curve["roofline"]
    print(f"roofline here: read {roof['read_GBps']:.1f} GB/s, {roof['dtype']} GEMM "
          f"{roof['peak_GFLOPs']:.0f} GFLOP/s; c(1) is {curve['median_ms'][0] / roof['floor_ms'][0]:.1f}x "
          f"its floor")
    for n, ms, rel, hm, st, fl, pl in zip(curve["ns"], curve["median_ms"], curve["relative"], heads,
                                          stock, roof["floor_ms"], plain):
        print(f"n={n:3d}  {ms:8.1f} ms  c(n)/c(1) = {rel:5.2f}   floor {fl:6.1f} ms"
              + (f"   stock forward {pl:6.1f} ms ({ms / pl:.2f}x)" if pl is not None else "")
              + (f"   stock kernels {st:5.2f}" if st is not None else "")
              + (f"   head {hm:6.2f} ms" if hm is not None else ""))
    print(f"wrote {json_path} and {png}")
    warn(curve["machine"]["load"])


def print_op_breakdown(target, args):
    """`profile-target --by-op`: ms per op family at n = 1, 2, 16 and the growth from 1 to 2."""
    from eagle_mini.measure.load import LoadWatch, warn
    from eagle_mini.measure.profile import op_breakdown
    from eagle_mini.results import results_json
    watch = LoadWatch()
    r = op_breakdown(target, prefix_len=args.prefix_len, repeats=args.repeats)
    r["machine"]["load"] = watch.check()
    r["command"] = command_line()
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
    warn(r["machine"]["load"])


def add_prepare(sub):
    r = sub.add_parser("prepare", help="convert the embedded target once into the cache")
    r.add_argument("--model", default="smollm2-135m")
    r.set_defaults(handler=cmd_prepare)


def cmd_prepare(args):
    from eagle_mini.models import resolve
    print(f"{args.model}: ready in {resolve(args.model)}")


def add_demo(sub):
    d = sub.add_parser("demo", help="the main job on the embedded default target")
    add_decode_target_args(d)
    d.add_argument("--prompt", default="Explain in three sentences why the sky is blue.")
    d.add_argument("--max-new-tokens", type=positive_int, default=96)
    d.add_argument("--rounds", type=positive_int, default=3,
                   help="timed rounds, the methods interleaved in each as the bench does (default 3)")
    add_head_args(d)
    d.set_defaults(handler=cmd_demo, dtype="auto")
    d.epilog = ("--dtype auto (the demo's default): bf16 where this CPU multiplies bf16 faster and "
                "exact mode passes its self-check here, else fp32; both give vanilla's text.")


def cmd_demo(args):
    """The same prompt with vanilla, EAGLE-2, EAGLE-2 with prompt lookup in its tree
    (`eagle2+lookup`) and `auto`: equal texts, tau and the speedups over
    vanilla and over the fastest vanilla measured beside them (exact mode's stock forward, HF
    `generate` compiled), timed in rounds with the methods interleaved
    (`measure.bench.interleaved`), and where EAGLE is slower on this machine, why (from the cost
    curve measured here)."""
    from eagle_mini.decode import prepare_prompt
    from eagle_mini.measure.bench import STOCK_VANILLA, interleaved, run_one, warm_up
    from eagle_mini.measure.load import LoadWatch, warn
    from eagle_mini.methods import AUTO, EAGLE2, EAGLE2_LOOKUP, HF_COMPILED, VANILLA
    from eagle_mini.runtime.auto import auto_tree
    from eagle_mini.runtime.cost import cost_curve
    from eagle_mini.runtime.run import method_tree, run_method, static_cache_len
    tree = tree_arg(args.tree)
    target = demo_target(args)
    head, note = head_for(args, target)
    print(f"target: {target.name} ({str(target.dtype).replace('torch.', '')}, {target.device})")
    print(f"head:   {note}")
    if target.kernels:
        from eagle_mini.runtime.kernels import kernels_note
        print(f"matmul: {kernels_note(target.kernels)}")
    print(f"prompt: {args.prompt}\n")
    run_method(target, head, EAGLE2, "Hi!", 8)  # warm-up: first calls pay one-off costs
    curve = cost_curve(target, repeats=3, progress=False)
    trees = {EAGLE2: method_tree(target, head, EAGLE2, tree),
             EAGLE2_LOOKUP: method_tree(target, head, EAGLE2_LOOKUP, tree),
             AUTO: auto_tree(target, head, curve=curve)}  # sized once per machine and head, cached
    run_method(target, head, AUTO, "Hi!", 8, tree=trees[AUTO])
    # the answer as it is written: untimed, vanilla's warm-up
    run_method(target, head, VANILLA, args.prompt, args.max_new_tokens,
               streamer=_text_streamer(target))
    print("\n")
    # the fastest vanillas a user could pick instead: warmed up (hf-compiled compiles) untimed
    cache_len = static_cache_len(len(prepare_prompt(target, args.prompt)) + args.max_new_tokens)
    peers = (STOCK_VANILLA,) * target.runtime.is_exact + (HF_COMPILED,)
    first_call, not_run = warm_up(lambda m: run_one(target, head, m, "Hi!", 8, 0.0, 0,
                                                    cache_len=cache_len), peers)
    peers = tuple(m for m in peers if m not in not_run)

    def run(method, prompt, i):
        if method in peers:
            return run_one(target, head, method, prompt, args.max_new_tokens, 0.0, 0,
                           cache_len=cache_len)
        gen = run_method(target, head, method, prompt, args.max_new_tokens, tree=trees.get(method))
        return gen.output_ids, gen.stats
    watch = LoadWatch()
    rows, outputs, _ = interleaved(run, (VANILLA,) + peers + (EAGLE2, EAGLE2_LOOKUP, AUTO),
                                   [args.prompt] * args.rounds, progress=True, desc="demo rounds")
    for line in demo_lines(rows, outputs, trees, curve, first_call):
        print(line)
    warn(watch.check({m: [s["seconds"] for s in rows[m]] for m in rows}))


def demo_target(args):
    """The demo's target in the fastest precision whose EAGLE output equals vanilla's here:
    `--dtype auto` tries bf16 (where its matmuls win, `runtime.precision`) in exact mode, and falls
    back to fp32 (exact by itself) when bf16 is slower or the exact self-check fails."""
    if args.dtype != "auto":
        return load(args)
    from eagle_mini.runtime.precision import fastest_exact

    def load_as(dtype):
        exact = "on" if dtype == "bf16" else args.exact
        return load(argparse.Namespace(**{**vars(args), "dtype": dtype, "exact": exact}))
    if args.exact == "off":   # the stock bf16 forward parts from vanilla at near-ties: fp32 only
        return load_as("fp32")
    return fastest_exact(load_as, args.device)


def demo_lines(rows, outputs, trees, curve, first_call=None) -> list[str]:
    """`demo`'s report from its rounds (`interleaved`: stats and output ids per method, vanilla's
    first): per method, tok/s pooled over the rounds as the bench pools prompts
    (`measure.bench.pooled`); for the other vanillas (the stock forward, HF compiled), whether
    their text is vanilla's and what a compile cost (`first_call`: seconds of the untimed first
    call); for the EAGLE methods, tau, whether every round's text is vanilla's, and the speedups
    over vanilla and over the fastest vanilla measured; then, for an EAGLE method slower than
    vanilla, why (`why_slower`, from `curve`). `trees`: the tree each EAGLE method ran."""
    from eagle_mini.measure.bench import STOCK_VANILLA, pooled
    from eagle_mini.methods import AUTO, EAGLE2, EAGLE2_LOOKUP, HF_COMPILED, VANILLA, VANILLAS
    from eagle_mini.runtime.auto import tree_tokens, why_slower
    labels = {VANILLA: "vanilla greedy ", STOCK_VANILLA: "stock vanilla  ",
              HF_COMPILED: "HF compiled    ", EAGLE2: "EAGLE-2 greedy ",
              EAGLE2_LOOKUP: "EAGLE-2+lookup ", AUTO: "auto           "}
    van, rounds = pooled(rows[VANILLA]), len(rows[VANILLA])
    lines = [f"{labels[VANILLA]}: {van['new_tokens'] // rounds} tokens, "
             f"{van['tokens_per_second']:.1f} tok/s, 1 token per target forward (tok/s: "
             + (f"{rounds} rounds pooled, the methods interleaved in each)" if rounds > 1 else
                "one round)")]
    vanillas = [m for m in rows if m in VANILLAS or m == STOCK_VANILLA]
    fastest = max(vanillas, key=lambda m: pooled(rows[m])["tokens_per_second"])
    fastest_tps = pooled(rows[fastest])["tokens_per_second"]
    slower = []
    for method, stats in rows.items():
        if method == VANILLA:
            continue
        e, label = pooled(stats), labels[method]
        speedup = e["tokens_per_second"] / van["tokens_per_second"]
        identical = all(out == ref for out, ref in zip(outputs[method], outputs[VANILLA]))
        if method in vanillas:
            compiled = (f"; its first call, compiling, took {first_call[method]:.0f} s, not timed"
                        if method == HF_COMPILED and first_call and method in first_call else "")
            lines.append(f"{label}: {e['new_tokens'] // len(stats)} tokens, "
                         f"{e['tokens_per_second']:.1f} tok/s, a vanilla of another forward "
                         f"(same text as vanilla: {identical}){compiled}")
            continue
        over = ("" if fastest == VANILLA else
                f", over the fastest vanilla ({fastest}) "
                f"{e['tokens_per_second'] / fastest_tps:.2f}x")
        lines.append(f"{label}: {e['new_tokens'] // len(stats)} tokens, "
                     f"{e['tokens_per_second']:.1f} tok/s, tau {fmt(e['tau'])} tokens per draft-verify "
                     f"cycle ({e['tokens_per_forward']:.2f} per target forward, prefill included; "
                     f"tree {stats[0]['tree']}), identical text: {identical}, "
                     f"speedup over vanilla {speedup:.2f}x{over} (wall time, this machine)")
        if speedup < 1.0:
            slower.append(f"why {label.strip()} is slower than vanilla here: "
                          + why_slower(stats, curve, tree_tokens(trees[method]), speedup))
    return lines + slower


def add_check_lossless(sub):
    c = sub.add_parser("check-lossless",
                       help="EAGLE greedy == vanilla greedy on many MT-bench prompts (writes JSON)")
    add_decode_target_args(c)
    add_head_args(c)
    c.add_argument("--n", type=positive_int, default=20, help="number of MT-bench prompts")
    c.add_argument("--max-new-tokens", type=positive_int, default=64)
    c.add_argument("--methods", type=method_names, default="eagle,eagle2")
    c.add_argument("--out", default=None, help="JSON path (default runs/check_lossless.json; with "
                                                  "--matmul-precision high or medium, "
                                                  "check_lossless_matmul_<precision>.json; with "
                                                  "--dtype bf16, check_lossless_bf16_exact.json, "
                                                  "or _stock with --exact off; a committed result "
                                                  "only by naming it here)")
    c.set_defaults(handler=cmd_check_lossless)


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
    result = {"command": command_line(), "head": note, **result}
    default = lossless_file(args.matmul_precision)
    if args.dtype != "fp32":   # a reduced-precision check never replaces the fp32 reference file
        exact = "exact" if target.runtime.is_exact else "stock"
        default = default.replace(".json", f"_{args.dtype}_{exact}.json")
    out = Path(args.out or default_out(default))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result))
    print(f"all identical: {result['all_identical']}; wrote {out}")
    if not result["all_identical"]:
        raise EagleMiniError("EAGLE output differs from vanilla greedy (see the JSON)")


def add_bench(sub):
    from eagle_mini.methods import BENCH_DEFAULT
    b = sub.add_parser("bench", help="EAGLE vs vanilla, HF generate and prompt lookup, side by side")
    add_decode_target_args(b)
    b.add_argument("--head", type=head_dir, default=None,
                   help="draft head directory (default: shipped head)")
    add_draft_vocab(b)
    b.add_argument("--methods", type=method_names, default=",".join(BENCH_DEFAULT),
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
    b.add_argument("--out", default=None, help="output folder (default runs/bench_<model>_<device>_"
                                               "<dataset>_T<temperature>; a committed result only "
                                               "by naming it here)")
    b.set_defaults(handler=cmd_bench)


def cmd_bench(args):
    from eagle_mini.measure.bench import bench, markdown_table, save
    from eagle_mini.measure.load import LoadWatch, curve_rounds, warn
    target = load(args)
    methods = tuple(m.strip() for m in args.methods.split(","))
    head, note = head_for(args, target, methods)
    print(note, file=sys.stderr)
    n, tokens = (3, 32) if args.quick else (args.n, args.max_new_tokens)
    watch = LoadWatch()
    result = bench(target, head, methods, args.dataset,
                   n, tokens, args.temperature, args.seed, head_note=note,
                   curve_repeats=3 if args.quick else 5, curve_rounds=args.curve_rounds)
    result["command"] = command_line()
    result["machine"]["load"] = watch.check({"cost curve": curve_rounds(result["cost_curve"])})
    name = f"bench_{args.model.replace('/', '_')}_{args.device}_{args.dataset}_T{args.temperature:g}"
    out = save(result, Path(args.out or default_out(name + ("_quick" if args.quick else ""))))
    print(markdown_table(result))
    print(f"wrote {out}/bench.json, bench.md, bench.png")
    warn(result["machine"]["load"])


def register(sub):
    for add in (add_generate, add_profile_target, add_prepare, add_demo, add_check_lossless,
                add_bench):
        add(sub)
