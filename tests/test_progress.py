"""Long commands show a tqdm bar with its rate on stderr; `progress=False` switches it off."""
import re

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.experiments.ablation import decode_tau
from eagle_mini.experiments.uncertainty import BY_NAME
from eagle_mini.runtime.cost import cost_curve
from eagle_mini.data import Example, ShareGPT
from eagle_mini.training.features import compute_features
from eagle_mini.training.regenerate import regenerate_split
from eagle_mini.training.train import DumpSource, TrainConfig, train_head


@pytest.fixture(scope="module")
def tiny():
    target = tiny_target("llama", seed=0, vocab_size=64)
    g = torch.Generator().manual_seed(0)
    examples = [Example(torch.randint(0, 64, (24,), generator=g).tolist(), [0] * 4 + [1] * 20,
                        index=i) for i in range(3)]
    return target, compute_features(target, examples)


def rate(unit: str, err: str) -> bool:
    """Whether the bar shows a rate in `unit` (tqdm flips it to s/unit below one per second)."""
    return re.search(rf"({unit}/s|s/{unit})", err) is not None


def train(tiny, work, steps=3, **kw):
    target, feats = tiny
    cfg = TrainConfig(steps=steps, warmup_steps=1, batch_tokens=24, ckpt_every=100, log_every=1)
    return train_head(new_head(target, seed=1), target, DumpSource(feats), work, cfg, **kw)


def test_train_head_bar_counts_steps_with_the_token_rate(tiny, tmp_path, capsys):
    """The bar goes to stderr with steps and tok/s; the log lines still reach `log` (stdout)."""
    train(tiny, tmp_path / "on", log=print)
    out, err = capsys.readouterr()
    assert "train-head" in err and "3/3" in err and rate("step", err) and "tok_s=" in err
    assert "step     3  loss" in out and "train-head" not in out
    train(tiny, tmp_path / "off", log=print, progress=False)
    out, err = capsys.readouterr()
    assert "train-head" not in err and "step     3  loss" in out


def test_resumed_training_bar_starts_at_the_checkpointed_step(tiny, tmp_path, capsys):
    train(tiny, tmp_path, steps=4, stop_after=2, log=lambda *_: None)
    assert "2/2" in capsys.readouterr().err          # a sitting that ends early ends its bar there
    train(tiny, tmp_path, steps=4, log=lambda *_: None)
    err = capsys.readouterr().err
    assert " 2/4 " in err and " 4/4 " in err and " 0/4 " not in err


def test_cost_curve_bar_counts_every_timed_forward(tiny, capsys):
    """(warmup + repeats) x len(ns) forwards, warm-up included."""
    target, _ = tiny
    cost_curve(target, ns=(1, 2), prefix_len=8, repeats=2, warmup=1)
    err = capsys.readouterr().err
    assert "cost curve" in err and "6/6" in err and rate("forward", err)
    cost_curve(target, ns=(1, 2), prefix_len=8, repeats=2, warmup=1, progress=False)
    assert "cost curve" not in capsys.readouterr().err


def test_ablation_decoding_bar_counts_prompts(tiny, capsys):
    target, _ = tiny
    head = new_head(target, seed=2).eval()
    decode_tau(target, head, BY_NAME["shifted"], [[1, 2, 3], [4, 5, 6]], 4, "eagle")
    err = capsys.readouterr().err
    assert "tau shifted" in err and "2/2" in err and rate("prompt", err)
    decode_tau(target, head, BY_NAME["shifted"], [[1, 2, 3]], 4, "eagle", progress=False)
    assert "tau shifted" not in capsys.readouterr().err


def test_regenerate_bar_counts_conversations_with_reply_tokens_per_second(smollm, tmp_path, capsys):
    msgs = [[{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}."}]
            for i in range(2)]
    data = ShareGPT([{"id": str(i)} for i in range(2)], msgs)
    kw = dict(batch_size=2, max_new_tokens=1, data=data, log=lambda *_: None)
    regenerate_split(smollm, tmp_path / "on.jsonl", max_conversations=2, **kw)
    err = capsys.readouterr().err
    assert "regenerate" in err and "2/2" in err and rate("conv", err) and "tok_s=" in err
    regenerate_split(smollm, tmp_path / "off.jsonl", max_conversations=1, progress=False, **kw)
    assert "regenerate" not in capsys.readouterr().err
