"""Probe: where a cycle's drafting goes, op family by op family, against a one-token forward.

Why: #47 item 3 asks for drafting plus bookkeeping at a tenth of a one-token forward; the committed
benches put EAGLE-2's drafting at about a fifth of a cycle. This probe decodes a few prompts with
the shipped head (bf16, exact mode as `bench` runs it), and times, per cycle, the head's draft
(`Drafter.draft`: EAGLE-2's growth and rerank) and its re-run over the accepted tokens
(`Drafter.extend`), then profiles the same calls with `torch.profiler` and prints the ops that
take the most self time. The unit is the median one-token forward of the same target, timed in
the same process.

    python scripts/probe_draft_step.py --n 4 --max-new-tokens 96
    python scripts/probe_draft_step.py --n 4 --max-new-tokens 96 --compile   # the step compiled
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4, help="MT-bench prompts")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-vocab", type=int, default=0)
    ap.add_argument("--top", type=int, default=20, help="ops to list")
    ap.add_argument("--compile", action="store_true",
                    help="the head's lean step compiled (torch.compile, dynamic shapes): drafting "
                         "need not be exact, so this is a lever to measure, not a mode")
    args = ap.parse_args()
    from eagle_mini import load_target
    from eagle_mini.data import load_prompts
    from eagle_mini.decode import EagleDecoder
    from eagle_mini.heads import default_head
    from eagle_mini.runtime.exact import use_exact
    from eagle_mini.runtime.run import pick_head

    torch.set_num_threads(args.threads)
    target = load_target("smollm2-135m", dtype="bf16", pack=True)
    print(use_exact(target, "on").line())
    head, note = default_head(target)
    if args.draft_vocab:
        from eagle_mini.heads.frequent import narrowed
        from eagle_mini.training.commands import frequent_tokens
        head = narrowed(head, frequent_tokens(target, args.draft_vocab))
    # compiled, the head runs unpacked: Inductor cannot lower the packed (oneDNN) linears
    head = pick_head("eagle2", head, pack_like=None if args.compile else target)
    if args.compile:
        from eagle_mini.heads.lean import LeanStep
        LeanStep.__call__ = torch.compile(LeanStep.__call__, dynamic=True)
    prompts = load_prompts("mtbench", args.n)

    draft_s, extend_s = [], []

    def run(profile=None):
        for prompt in prompts:
            dec = EagleDecoder(target, head, prompt, max_new_tokens=args.max_new_tokens)
            while dec.stop is None:
                t0 = time.perf_counter()
                draft = dec.draft()
                t1 = time.perf_counter()
                verified = dec.verify(draft)
                t2 = time.perf_counter()
                dec.accept(verified)
                t3 = time.perf_counter()
                draft_s.append(t1 - t0)
                # accept = compaction + the head's re-run; the decoder splits them
                extend_s.append(t3 - t2)
                if profile is not None:
                    profile.step()

    run()                       # warm-up
    draft_s.clear(), extend_s.clear()
    run()
    step = one_token_ms(target)
    d, e = 1e3 * statistics.median(draft_s), 1e3 * statistics.median(extend_s)
    print(f"one-token forward {step:.1f} ms; per cycle (median of {len(draft_s)}): "
          f"draft {d:.1f} ms ({d / step:.2f} forward), accept {e:.1f} ms ({e / step:.2f})")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


def one_token_ms(target, prefix: int = 200, repeats: int = 20) -> float:
    from eagle_mini.target import crop_cache
    cache = target.new_cache()
    target.forward(list(range(100, 100 + prefix)), cache)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        target.forward([42], cache)
        times.append(time.perf_counter() - t0)
        crop_cache(cache, prefix)
    return 1e3 * statistics.median(times)


if __name__ == "__main__":
    main()
