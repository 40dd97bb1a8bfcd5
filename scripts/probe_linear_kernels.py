"""Probe: the target's fp32 linears through ATen's kernels and through oneDNN's, by rows.

Why: on a Zen 4, `profile-target --by-op` puts the jump from verifying 1 token to 2 in the matmuls
(the stock and the prepacked kernels alike), and a 2-row forward costs about as much as a 16-row
one. This times every linear of the target (each layer's q, k, v, o, gate, up, down and the
lm_head, with the target's own weights) for M = 1, 2, 4, 8, 16 rows of input, through
`torch.nn.functional.linear` and through oneDNN (`torch.utils.mkldnn.to_mkldnn`), and prints the
summed milliseconds per forward and the largest difference between the two outputs. Medians of
`--repeats` calls, each linear timed alone (its weights warm in cache: compare the columns as
ratios, not with a whole forward).

    python scripts/probe_linear_kernels.py --threads 2
"""
import argparse
import time

import torch
from torch.utils import mkldnn

from eagle_mini import load_target
from eagle_mini.results import machine_info, results_json


def median_ms(fn, x, repeats):
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--out", help="JSON path for the table")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("smollm2-135m", pack=False)
    linears = [m for m in target.model.modules() if isinstance(m, torch.nn.Linear)]
    rows = []
    with torch.no_grad():
        for m in (int(r) for r in args.rows.split(",")):
            aten = onednn = diff = 0.0
            for lin in linears:
                x = torch.randn(m, lin.in_features)
                fast = mkldnn.to_mkldnn(torch.nn.Sequential(lin))   # a oneDNN copy: weight and bias
                aten += median_ms(lambda v: torch.nn.functional.linear(v, lin.weight, lin.bias), x, args.repeats)
                onednn += median_ms(lambda v: fast(v.to_mkldnn()).to_dense(), x, args.repeats)
                a = torch.nn.functional.linear(x, lin.weight, lin.bias)
                diff = max(diff, (a - fast(x.to_mkldnn()).to_dense()).abs().max().item())
            rows.append({"rows": m, "aten_ms": aten, "onednn_ms": onednn, "max_abs_diff": diff})
            print(f"M={m:>2}: ATen {aten:6.1f} ms, oneDNN {onednn:6.1f} ms over {len(linears)} linears; "
                  f"largest output difference {diff:.1e}")
    base = rows[0]["aten_ms"]
    print("relative to ATen at M=1:", {r["rows"]: (round(r["aten_ms"] / base, 2), round(r["onednn_ms"] / base, 2))
                                       for r in rows}, "(ATen, oneDNN)")
    if args.out:
        command = "python scripts/probe_linear_kernels.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "out")
        with open(args.out, "w") as f:
            f.write(results_json({"command": command, "rows": rows, "machine": machine_info()}))


if __name__ == "__main__":
    main()
