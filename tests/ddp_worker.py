"""Run by test_train.py under `torchrun --nproc_per_node 2`: a tiny head trained with
DDP (each process featurizes and backpropagates its own share; gradients are averaged). Writes each
process's final weights to OUT/rank<i>.pt. Arguments: OUT KIND (eagle1 or eagle3)."""
import sys

import torch
from accelerate import PartialState

from eagle_mini import tiny_target
from eagle_mini.training.features import compute_features
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.training.train import DumpSource, TrainConfig, train_head
from test_train import DDP_CONFIG, UNROLL, make_examples

out, kind = sys.argv[1], sys.argv[2]
if kind == "eagle3":
    from eagle_mini.heads.eagle3 import aux_layers, new_eagle3_head
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    head, layers = new_eagle3_head(target, seed=3), aux_layers(4)
else:
    target = tiny_target("llama", seed=0, vocab_size=64)
    head, layers = new_head(target, seed=3), None
train_head(head, target, DumpSource(compute_features(target, make_examples(), layers=layers)), out,
           TrainConfig(**DDP_CONFIG, unroll=UNROLL[kind]), log=lambda *_: None)
state = PartialState()
torch.save(head.state_dict(), f"{out}/rank{state.process_index}.pt")
state.wait_for_everyone()   # then close gloo before exit: its threads outliving the group can abort
state.destroy_process_group()
