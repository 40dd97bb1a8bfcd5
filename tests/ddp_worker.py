"""Run by test_train.py under `torchrun --nproc_per_node 2`: a tiny head trained with
DDP (each process featurizes and backpropagates its own share; gradients are averaged). Writes each
process's final weights to OUT/rank<i>.pt."""
import sys

import torch
from accelerate import PartialState

from eagle_mini import tiny_target
from eagle_mini.training.features import compute_features
from eagle_mini.head import new_head
from eagle_mini.training.train import DumpSource, TrainConfig, train_head
from test_train import DDP_CONFIG, make_examples

out = sys.argv[1]
target = tiny_target("llama", seed=0, vocab_size=64)
head = new_head(target, seed=3)
train_head(head, target, DumpSource(compute_features(target, make_examples())), out,
           TrainConfig(**DDP_CONFIG), log=lambda *_: None)
torch.save(head.state_dict(), f"{out}/rank{PartialState().process_index}.pt")
