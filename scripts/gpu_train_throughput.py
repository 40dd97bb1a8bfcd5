"""EAGLE-3 training throughput at a 7B shape, with random weights (a GPU machine has no network).

Builds the named shape (`random:<config>`, `models.random_big_target`) in bf16 on the device, makes
`--conversations` random token sequences of `--max-len` tokens, featurizes them with the three
layers an EAGLE-3 head reads (`training.features.compute_features`), then trains a new EAGLE-3
head on them with the package's trainer (`training.train.train_head`: the training-time test,
`--unroll` steps, bf16 autocast, fp32 master weights and AdamW). It writes, as it goes:

    featurize tokens/s, train tokens/s over the steps after the first (the first compiles and
    allocates), each step's seconds, peak GPU memory, the machine

Random weights say nothing about what the head learns; they do say what a step costs.

    python scripts/gpu_train_throughput.py --device cuda --out data/results/gpu/train_throughput_eagle3_random_vicuna-7b_cuda.json
    python scripts/gpu_train_throughput.py --config tiny --device cpu --steps 3 --out /tmp/t.json   # a rehearsal
"""
import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from eagle_mini.heads.eagle3 import aux_layers, new_eagle3_head
from eagle_mini.models import random_big_target, tiny_target
from eagle_mini.results import machine_info, results_json
from eagle_mini.training.features import compute_features
from eagle_mini.training.sources import DumpSource
from eagle_mini.training.train import TrainConfig, train_head


def build(config: str, device: str):
    """The target: a BIG_CONFIGS shape built on `device`, or a tiny Llama for a rehearsal."""
    if config != "tiny":
        return random_big_target(config, "bf16", device)
    target = tiny_target("llama", seed=0, dtype="bf16", vocab_size=32000, num_hidden_layers=8)
    target.model.to(device)
    return target


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="vicuna-7b", help="a models.BIG_CONFIGS name, or tiny")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--unroll", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"what": f"EAGLE-3 training throughput, {args.config} shape, RANDOM weights, bf16",
              "args": vars(args), "machine": machine_info()}

    def write(**more):   # results as they come: a run cut short still leaves what it measured
        record.update(more)
        out.write_text(results_json(record))

    start = time.perf_counter()
    target = build(args.config, args.device)
    write(build_seconds=time.perf_counter() - start,
          parameters=sum(p.numel() for p in target.model.parameters()))
    g = torch.Generator().manual_seed(0)
    examples = [SimpleNamespace(
        input_ids=torch.randint(0, target.vocab_size, (args.max_len,), generator=g).tolist(),
        loss_mask=[0] * 16 + [1] * (args.max_len - 16)) for _ in range(args.conversations)]
    layers = aux_layers(target.config.num_hidden_layers)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    rows = compute_features(target, examples, max_tokens_per_batch=args.batch_tokens, layers=layers)
    sync()
    seconds = time.perf_counter() - start
    tokens = sum(len(e.input_ids) for e in examples)
    write(featurize={"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds})
    for p in target.model.parameters():
        p.requires_grad_(False)
    head = new_eagle3_head(target, seed=0).float()
    cfg = TrainConfig(lr=3e-4, steps=args.steps, warmup_steps=1, batch_tokens=args.batch_tokens,
                      max_len=args.max_len, unroll=args.unroll, mixed_precision="bf16",
                      log_every=1, ckpt_every=args.steps + 1)
    with tempfile.TemporaryDirectory() as work:
        train_head(head, target, DumpSource(rows), work, cfg, progress=False, log=lambda *_: None)
        log = [json.loads(line) for line in (Path(work) / "log.jsonl").read_text().splitlines()]
    steady = log[1:] or log
    step_seconds = [b["seconds"] - a["seconds"] for a, b in zip([{"seconds": 0.0}] + log, log)]
    trained = steady[-1]["tokens_seen"] - (log[0]["tokens_seen"] if len(log) > 1 else 0)
    spent = steady[-1]["seconds"] - (log[0]["seconds"] if len(log) > 1 else 0)
    write(train={"steps": len(log), "head_parameters": sum(p.numel() for p in head.parameters() if p.requires_grad),
                 "step_seconds": step_seconds, "tokens_after_first_step": trained,
                 "tokens_per_second": trained / spent, "unroll": args.unroll},
          peak_gpu_memory_gb=(torch.cuda.max_memory_allocated() / 1e9
                              if args.device.startswith("cuda") else None))
    print(json.dumps({k: record[k] for k in ("featurize", "train")}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
