"""A head from one of `train-head`'s checkpoints, for tau against training tokens mid-run.

`train-head` keeps one checkpoint (`<work>/ckpt/state.pt`, overwritten every `--ckpt-every`
steps) and saves a head only at its last step. A copy of the checkpoint taken at step N becomes a
head directory here, built by the same code as the run's (`commands.training_head`, so the same
kind, draft vocabulary and seed), with its tokens seen and the command that trained it (plus
"stopped at step N") in its config, where `eval-head` reads them:

    python scripts/head_from_checkpoint.py runs/cmp/state_step30.pt runs/cmp/eagle3u5_step30 -- \\
        train-head --stream --steps 120 ... --kind eagle3 --unroll 5 --out runs/cmp/eagle3u5
    python -m eagle_mini eval-head --head runs/cmp/eagle3u5_step30 ...
"""
import argparse
import sys

import torch

from eagle_mini.cli import build_parser, load
from eagle_mini.cli.heads import train_head_command
from eagle_mini.training.commands import training_head


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state", help="a copy of <work>/ckpt/state.pt")
    ap.add_argument("out", help="head directory to write")
    args = ap.parse_args(argv[:cut])
    train_args = build_parser().parse_args(argv[cut + 1:])
    if train_args.command != "train-head":
        sys.exit("after -- comes the run's train-head command line")
    target = load(train_args)
    head, prior = training_head(train_head_command(train_args), target)
    saved = torch.load(args.state, weights_only=True)
    head.load_state_dict(saved["head"])
    state = saved["state"]
    command = "python -m eagle_mini " + " ".join(argv[cut + 1:])
    head.save(args.out, extra={
        "tokens_seen": prior.get("tokens_seen", 0) + state["tokens_seen"],
        "train_seconds": prior.get("train_seconds", 0) + state["seconds"],
        "rounds": prior.get("rounds", []) + [{"steps": state["step"], "tokens": state["tokens_seen"],
                                               "command": f"{command} (stopped at step {state['step']})"}]})
    print(f"{args.out}: step {state['step']}, {state['tokens_seen']:,} tokens")


if __name__ == "__main__":
    main()
