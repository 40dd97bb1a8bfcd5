"""Where a streamed training step spends its time, and what bf16 costs in feature fidelity.

On the same batches of train conversations (from the shipped head's `next_train_record`):
featurizing with the fp32 target vs a bf16 copy (`training.commands.featurizer`): tokens/s, mean and max
|f_bf16 - f_fp32|, and how often the two features give the same argmax token (assistant tokens);
then one forward + backward of the shipped head's loss (`train.eagle_loss`) in fp32, under bf16
autocast, and unrolled 3 steps (`--unroll 3`) in both.

    python scripts/probe_training_speed.py --batches 3 --threads 2

Timings are this machine's, side by side in one process; compare them as ratios.
"""
import argparse
import time

import torch

from eagle_mini.heads import default_head
from eagle_mini.models import load_target
from eagle_mini.training.commands import featurizer
from eagle_mini.training.train import StreamingSource, eagle_loss, pad_batch


def featurize_both(source, copy, picked):
    """The picked examples featurized by `source`'s target and by `copy` (another dtype), each
    timed: -> (rows, rows of the copy, seconds, seconds of the copy)."""
    t0 = time.perf_counter()
    rows = source.materialize(picked)
    t1 = time.perf_counter()
    other = StreamingSource(copy, source.split, data=source.data, layers=source.layers)
    rows_copy = other.materialize(picked)
    return rows, rows_copy, t1 - t0, time.perf_counter() - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("smollm2-135m")
    copy = featurizer(target, "bf16")
    head, note = default_head(target)
    head = head.float()
    head.attach(target)
    print(note)
    source = StreamingSource(target, "train", max_len=1024,
                             cursor=getattr(head, "meta", {}).get("next_train_record", 0))
    lm = target.model.lm_head.weight.detach()
    for b in range(args.batches):
        picked = source.take(args.batch_tokens)
        n = sum(len(e.input_ids) for e in picked)
        f32, f16, s32, s16 = featurize_both(source, copy, picked)
        x = torch.cat([e["features"].float() for e in f32])
        y = torch.cat([e["features"].float() for e in f16])
        m = torch.cat([e["loss_mask"] for e in f32]).bool()
        agree = ((x @ lm.T).argmax(-1) == (y @ lm.T).argmax(-1))[m].float().mean().item()
        print(f"batch {b}: {n} tokens; featurize fp32 {n / s32:.0f} tok/s, bf16 "
              f"{n / s16:.0f} tok/s; |bf16 - fp32| mean {(x - y).abs().mean():.4f} "
              f"max {(x - y).abs().max():.2f} (|f| mean {x.abs().mean():.3f}); same argmax at "
              f"{agree:.4f} of assistant tokens")
        ids, feats, mask = pad_batch(f32, "cpu")
        cells = []
        for unroll in (1, 3):
            for amp in (None, torch.bfloat16):
                head.zero_grad()
                s = time.perf_counter()
                with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
                    loss, _ = eagle_loss(head, feats, ids, mask, unroll=unroll)
                loss.backward()
                cells.append(f"unroll {unroll} {'bf16' if amp else 'fp32'} "
                             f"{time.perf_counter() - s:.2f} s")
        print(f"         head forward+backward: {', '.join(cells)} "
              f"(featurizing took {s32:.2f} s fp32, {s16:.2f} s bf16)")


if __name__ == "__main__":
    main()
