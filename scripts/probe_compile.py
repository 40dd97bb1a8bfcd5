"""Probe: the routes to a cheaper bf16 exact forward, each one's exactness and cost side by side.

Why: a one-token forward runs several times above its memory floor, and most of the gap is the
Python and dispatch cost of many small ops per layer (`profile-target --by-op`). Exact mode
(`runtime/exact/`) adds its own ops (the blocked attention, the fixes of its linears), so this
probe runs, in turn:

* `stock`: the stock forward, exact mode off (not exact: the floor the others are held to);
* `chunked`: exact mode with its linears fixed by K-chunks only (`make_exact(pad_rows=0)`): the
  eager exact forward the course ran before padded rows;
* `padded`: exact mode as it now is, linears fixed by products padded to `PAD_ROWS` rows;
* `attention`: `padded` with `blocks.blocked` compiled (dynamic shapes: the cache grows);
* `norms+mlp`: `padded` with every layer's two RMSNorms and its MLP compiled. Inductor cannot
  lower a weight prepacked outside the graph (its oneDNN lowering wants a frozen constant), so the packed linear
  runs as an opaque custom op (`onednn_linear` below) the graph calls.

Each variant runs in its own process (compiled code and caches do not leak between them), twice,
alternating; each reports exact mode's self-check on the compiled forward (every tree node against
its one-token replay, bitwise) and the median c(1), c(4), c(16) and c(26) over a 200-token prefix,
timed after a warm-up that compiles the shapes. Compile time is the self-check's wall time.

    python scripts/probe_compile.py --out data/results/probe_exact_routes.json
"""
import argparse
import json
import subprocess
import sys
import time

import torch

VARIANTS = ("stock", "chunked", "padded", "attention", "norms+mlp")


def onednn_linear_op():
    """The packed oneDNN linear as a custom op: opaque to inductor, which calls it as it is."""
    @torch.library.custom_op("eagle_mini_probe::onednn_linear", mutates_args=())
    def onednn_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                      out: int) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")

    @onednn_linear.register_fake
    def _(x, w, bias, out):
        return x.new_empty(*x.shape[:-1], out)
    return onednn_linear


def route_through(model, op):
    """Every packed linear of `model` (with the stacked weights of `StackedFixedKLinear` and the
    linears `PaddedRowsLinear` calls) through `op`."""
    import types

    def forward(self, x):
        if ("onednn", None) not in self._packed:
            self._packed["onednn", None] = torch.ops.mkldnn._reorder_linear_weight(
                self.weight.detach())
        bias = None if self.bias is None else self.bias.detach()
        return op(x, self._packed["onednn", None], bias, self.weight.shape[0])
    mods = list(model.modules())
    mods += [m.stacked[0] for m in mods if hasattr(m, "stacked")]
    mods += [m.replaced[0] for m in mods if type(m).__name__ == "PaddedRowsLinear"]
    for m in mods:
        if getattr(m, "_pack_kind", None) == "onednn":
            m.forward = types.MethodType(forward, m)


def run_variant(variant: str, threads: int) -> dict:
    from eagle_mini import load_target
    from eagle_mini.runtime.exact import attention, make_exact, self_check, use_exact
    from eagle_mini.target import crop_cache

    torch.set_num_threads(threads)
    target = load_target("smollm2-135m", dtype="bf16", pack=True)
    record = (make_exact(target, pad_rows=0) if variant == "chunked" else
              None if variant == "stock" else use_exact(target, "on"))
    if record is not None and not record.exact:
        return {"variant": variant, "error": record.line()}
    if variant == "attention":
        attention.blocked = torch.compile(attention.blocked, dynamic=True)
    elif variant == "norms+mlp":
        route_through(target.model, onednn_linear_op())
        for layer in target.model.model.layers:
            for part in (layer.input_layernorm, layer.post_attention_layernorm, layer.mlp):
                part.forward = torch.compile(part.forward, dynamic=True)
    start = time.perf_counter()
    ok, why = self_check(target)   # on the stock forward: whether it happens to be exact here
    check_s = time.perf_counter() - start
    g = torch.Generator().manual_seed(0)
    cache = target.new_cache()
    target.forward(torch.randint(0, target.vocab_size, (200,), generator=g).tolist(), cache,
                   all_logits=False)

    def median_ms(n, repeats):
        tokens = torch.randint(0, target.vocab_size, (n,), generator=g).tolist()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            target.forward(tokens, cache)
            times.append(time.perf_counter() - t)
            crop_cache(cache, 200)
        return sorted(times)[len(times) // 2] * 1e3
    ns = (1, 4, 16, 26)
    for n in ns:
        median_ms(n, 2)   # warm-up: compiles this shape
    return {"variant": variant, "exact": ok, "self_check": why, "self_check_s": check_s,
            "ms": {str(n): median_ms(n, 9) for n in ns}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="JSON path for the table")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)   # one child process
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.threads)))
        return
    from eagle_mini.results import machine_info, results_json
    rows = []
    for r in range(args.rounds):
        for variant in VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--variant", variant, "--threads",
                                  str(args.threads)], capture_output=True, text=True, check=True)
            row = {"round": r, **json.loads(out.stdout.strip().splitlines()[-1])}
            rows.append(row)
            ms = ", ".join(f"c({n}) {v:.1f}" for n, v in row.get("ms", {}).items())
            print(f"round {r} {variant:>10}: exact {row.get('exact')} "
                  f"({row.get('self_check_s', 0):.0f} s to compile and check); {ms} ms")
    if args.out:
        with open(args.out, "w") as f:
            f.write(results_json({"command": "python scripts/probe_compile.py " + " ".join(
                sys.argv[1:]), "rows": rows, "machine": machine_info()}))


if __name__ == "__main__":
    main()
