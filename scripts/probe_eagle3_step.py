"""Where an EAGLE-3 training step spends its time, before anything about it is changed.

On the same streamed batches of ShareGPT train conversations (about `--batch-tokens` each):
featurizing the three layers with the fp32 target and with a bf16 copy
(`training.commands.featurizer`), then the training-time test (`training.eagle3.ttt_loss`, unrolled
`--unroll` steps) forward and backward in fp32 and under bf16 autocast, each with the dense chain
mask and with `chains.chain_attention`, and the torch profiler's split of one fp32 forward +
backward by op family for both (with the dense mask, pass k scores (k + 1) n keys per query).

    python scripts/probe_eagle3_step.py --batches 2 --unroll 5 --threads 2

Timings are this machine's, side by side in one process, with nothing else running: compare them
as ratios. EXPERIMENTS.md quotes this probe.
"""
import argparse
import functools
import time

import torch
from torch.profiler import ProfilerActivity, profile

from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.measure.profile import op_family
from eagle_mini.models import load_target
from eagle_mini.results import machine_info
from eagle_mini.training.commands import featurizer, frequent_tokens
import eagle_mini.training.eagle3 as ttt
from eagle_mini.training.sources import StreamingSource
from eagle_mini.training.train import pad_batch, pad_layers
from probe_training_speed import featurize_both   # scripts/ is on a script's path


def fwd_bwd(head, layers, feats, ids, mask, unroll, amp, dense=False):
    """(forward s, backward s) of the training-time test; dense: attend through the dense chain
    mask instead of `chains.chain_attention`."""
    head.zero_grad()
    original = ttt.unrolled_predictions
    ttt.unrolled_predictions = functools.partial(original, dense=dense)
    try:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss, _ = ttt.ttt_loss(head, layers, feats, ids, mask, steps=unroll)
        t1 = time.perf_counter()
        loss.backward()
    finally:
        ttt.unrolled_predictions = original
    return t1 - t0, time.perf_counter() - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--unroll", type=int, default=5)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    m = machine_info()
    print(f"machine: {m['cpu']} (family/model {m.get('cpu_family_model', '?')}), "
          f"{args.threads} threads; unroll {args.unroll}, draft vocabulary {args.draft_vocab}")
    target = load_target("smollm2-135m")
    for p in target.model.parameters():
        p.requires_grad_(False)
    head = new_eagle3_head(target, seed=0, draft_vocab=frequent_tokens(target, args.draft_vocab),
                           warm_start=False)   # the authors' random lm_head, as train-head makes it
    head = head.float()
    copy = featurizer(target, "bf16")
    source = StreamingSource(target, "train", max_len=1024, layers=head.aux_layers)
    for b in range(args.batches):
        picked = source.take(args.batch_tokens)
        n = sum(len(e.input_ids) for e in picked)
        rows, _, s32, s16 = featurize_both(source, copy, picked)
        ids, feats, mask = pad_batch(rows, "cpu")
        layers = pad_layers(rows, "cpu")
        cells = []
        for amp, dense in ((False, True), (False, False), (True, True), (True, False)):
            f, bw = fwd_bwd(head, layers, feats, ids, mask, args.unroll, amp, dense)
            cells.append(f"{'bf16 autocast' if amp else 'fp32'}, {'dense mask' if dense else 'chain'}"
                         f" attention: forward {f:.2f} s, backward {bw:.2f} s, "
                         f"{n / (f + bw):.0f} tok/s")
        t3 = time.perf_counter()
        with torch.no_grad():   # ttt_loss's labels: the target's logits over its whole vocabulary
            for r in range(feats.shape[0]):  # at the positions that count (assistant tokens)
                at = mask[r, 1:].nonzero()[:, 0]
                (feats[r, 1:][at].float() @ head._shared["target_lm_head"].float().T).argmax(-1)
        t4 = time.perf_counter()
        print(f"batch {b}: {n} tokens in {len(picked)} conversations; featurize fp32 {s32:.2f} s "
              f"({n / s32:.0f} tok/s), bf16 copy {s16:.2f} s ({n / s16:.0f} tok/s); "
              f"of ttt's forward, the labels' full-vocabulary logits take {t4 - t3:.2f} s")
        print("\n".join("         ttt " + c for c in cells))
    for dense in (True, False):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fwd_bwd(head, layers, feats, ids, mask, args.unroll, False, dense)
        families = {}
        for e in prof.key_averages():
            families[op_family(e.key)] = families.get(op_family(e.key), 0) + e.self_cpu_time_total
        total = sum(families.values())
        print(f"fp32 forward + backward of the last batch, {'dense mask' if dense else 'chain'} "
              "attention, self CPU time by op family: " + ", ".join(
                  f"{k} {v / total:.0%}" for k, v in sorted(families.items(), key=lambda kv: -kv[1])))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
