"""Where a step of the feature-uncertainty ablation's training goes, and what a second thread buys.

On the `full` configuration's batches (the first 40k tokens of its training text, featurized here,
the largest batches first): forward, backward and optimizer time of the shifted head's EAGLE-1 loss
at 2 threads, then 1, then 2 again, and the torch profiler's table of one step at 2 threads.

    python scripts/probe_ablation_step.py

Timings are this machine's, side by side in one process: compare them as ratios, with nothing
else running. `experiments/ablation.py`'s cost comment quotes this probe.
"""
import dataclasses
import time

import torch
from torch.profiler import ProfilerActivity, profile

from eagle_mini.heads.eagle1 import new_head
from eagle_mini.experiments.ablation import SIZES, length_grouped, sharegpt_inputs
from eagle_mini.models import load_target
from eagle_mini.training.features import compute_features
from eagle_mini.training.train import Objective, TrainConfig, pad_batch


def main():
    torch.set_num_threads(2)
    cfg = SIZES["full"]
    target = load_target("smollm2-135m")
    for p in target.model.parameters():
        p.requires_grad_(False)
    inputs = sharegpt_inputs(target, dataclasses.replace(cfg, train_tokens=40_000))
    rows = compute_features(target, inputs["train_examples"])
    batches = sorted(length_grouped(rows, cfg.batch_tokens),
                     key=lambda b: -sum(len(r["input_ids"]) for r in b))
    head = new_head(target, seed=0, draft_vocab=inputs["draft_vocab"], input_mode="feature+token")
    objective = Objective(head, TrainConfig(lr=cfg.lr, steps=10, batch_tokens=cfg.batch_tokens),
                          None, torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=cfg.lr)

    def step(batch):
        ids, feats, mask = pad_batch(batch, "cpu")
        t0 = time.perf_counter()
        loss, _ = objective(ids, feats, mask)
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        return tuple(ids.shape), t1 - t0, t2 - t1, time.perf_counter() - t2

    for threads in (2, 1, 2):
        torch.set_num_threads(threads)
        for batch in batches[:3]:
            shape, fwd, bwd, opt = step(batch)
            print(f"threads {threads}, batch {shape}: forward {fwd:.2f} s, backward {bwd:.2f} s, "
                  f"optimizer {opt:.2f} s, step {fwd + bwd + opt:.2f} s")
    torch.set_num_threads(2)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(batches[0])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
