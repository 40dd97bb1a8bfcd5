"""End-to-end commands around the trainer: train a head, evaluate it, write its model card.

`train-head` trains from stored features (`--features DIR`, the paper's way, the GPU/7B path) or
streams features computed on the fly (`--stream`, the CPU way). A head is continued with `--init`
(the shipped head grows run after run); checkpoints live in a work directory that is never
committed, the exported bf16 head in `--out`.

`eval-head` measures what the paper reports: top-1 and n-alpha teacher-forced on held-out ShareGPT
text, and -- what decoding actually meets -- acceptance and tau while EAGLE-2 decodes MT-bench
prompts (the target's own greedy continuations).
"""
import json
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import torch

from .errors import EagleMiniError
from .features import target_fingerprint
from .head import DraftHead, new_head
from .train import DumpSource, StreamingSource, TrainConfig, evaluate_head, train_head


def frequent_tokens(target, n: int, conversations: int = 2000) -> list[int]:
    """The n most frequent assistant (loss-masked) tokens of the first train conversations."""
    from .data import iter_conversations
    counts = Counter()
    for ex in iter_conversations("train", target.tokenizer, max_len=2048,
                                 max_conversations=conversations):
        counts.update(t for t, m in zip(ex.input_ids, ex.loss_mask) if m)
    ids = [t for t, _ in counts.most_common(n)]
    rest = [t for t in range(target.vocab_size) if t not in set(ids)]
    return sorted(ids + rest[:max(0, n - len(ids))])


def validation_features(target, n: int, max_len: int, split: str = "validation"):
    from .data import iter_conversations
    from .features import compute_features
    examples = [e for e in iter_conversations(split, target.tokenizer, max_len=max_len,
                                              max_conversations=n) if sum(e.loss_mask)]
    return compute_features(target, examples)


def featurizer(target, dtype: str):
    """The target itself, or a copy of it in `dtype` that makes the streamed training features.

    On the course's CPU a bf16 copy featurizes SmolLM2-135M ~3x faster than fp32 (AMX); its
    features differ from fp32 ones by ~0.02 on average (the training noise is U(-0.1, 0.1)) and
    give the same argmax at 98.5-99.3% of assistant tokens (`scripts/probe_training_speed.py`,
    EXPERIMENTS.md). Validation, evaluation and decoding keep the target's own dtype."""
    from transformers import AutoModelForCausalLM
    from .models import _dtype
    from .target import Target
    if not dtype or _dtype(dtype) == target.model.dtype:
        return target
    model = AutoModelForCausalLM.from_config(target.config, dtype=_dtype(dtype),
                                             attn_implementation="sdpa")
    model.load_state_dict(target.model.state_dict())
    return Target(model.to(target.device).eval(), target.tokenizer, name=target.name)


def train_command(args, target, log=print) -> dict:
    """Build or continue a head, train it, export it (bf16) with its metrics."""
    cfg = TrainConfig(lr=args.lr, steps=args.steps, warmup_steps=args.warmup,
                      batch_tokens=args.batch_tokens, max_len=args.max_len, seed=args.seed,
                      ckpt_every=args.ckpt_every, log_every=args.log_every,
                      eval_every=args.eval_every, ce_vocab=args.ce_vocab,
                      unroll=getattr(args, "unroll", 1),
                      unroll_decay=getattr(args, "unroll_decay", 0.8),
                      mixed_precision=getattr(args, "mixed_precision", "no"),
                      feature_dtype=getattr(args, "feature_dtype", None) or "")
    work = Path(args.work or Path("runs") / Path(args.out).name)
    prior = {}
    if args.init:
        head = DraftHead.load(args.init, target).float()
        prior = getattr(head, "meta", {})
        head.attach(target)
    else:
        vocab = frequent_tokens(target, args.draft_vocab) if args.draft_vocab else None
        head = new_head(target, seed=args.seed, draft_vocab=vocab, fc_bias=not args.no_fc_bias)
    for p in target.model.parameters():
        p.requires_grad_(False)
    vocab_ids = None
    if cfg.ce_vocab:
        vocab_ids = torch.tensor(frequent_tokens(target, cfg.ce_vocab), device=target.device)
    start = args.start if args.start is not None else prior.get("next_train_record", 0)
    if args.features and getattr(args, "regenerated", None):
        raise EagleMiniError("--regenerated goes with --stream, not with --features")
    if args.features:
        from .features import FeatureDataset
        ds = FeatureDataset(args.features)
        ds.check_target(target)
        source = DumpSource(ds)
    else:
        data = None
        if getattr(args, "regenerated", None):
            from .regenerate import read_regenerated
            data = read_regenerated(args.regenerated)
            if data.header.get("fingerprint") != target_fingerprint(target):
                raise EagleMiniError(f"{args.regenerated} was generated by another target "
                                     f"({data.header.get('target')}); regenerate it with this one")
        source = StreamingSource(featurizer(target, cfg.feature_dtype), "train",
                                 max_len=cfg.max_len, cursor=start, data=data,
                                 wrap=getattr(args, "wrap", False))
    val = validation_features(target, args.eval_conversations, cfg.max_len)
    result = train_head(head, target, source, work, cfg, stop_after=args.stop_after,
                        evaluate_fn=lambda h: evaluate_head(h, val), vocab_ids=vocab_ids, log=log)
    state = result["state"]
    rounds = prior.get("rounds", []) + ([{
        "date": time.strftime("%Y-%m-%d"), "steps": state["step"], "tokens": state["tokens_seen"],
        "seconds": round(state["seconds"], 1), "config": asdict(cfg),
        "source": args.features or f"stream train records from {start}" + (
            ", starting the split again at its end" if getattr(args, "wrap", False) else "") + (
            f" (target-regenerated replies, {args.regenerated})"
            if getattr(args, "regenerated", None) else ""),
        "validation": result["eval"]}] if state["step"] >= cfg.steps else [])
    meta = {"tokens_seen": prior.get("tokens_seen", 0) + (state["tokens_seen"] if rounds else 0),
            "train_seconds": prior.get("train_seconds", 0) + (state["seconds"] if rounds else 0),
            "rounds": rounds}
    if not args.features:
        meta["next_train_record"] = source.cursor
    if state["step"] >= cfg.steps:
        meta["rounds"][-1]["command"] = "python -m eagle_mini " + " ".join(sys.argv[1:])
        head.save(args.out, extra=meta)
        plot_log(work / "log.jsonl", Path(args.out) / "loss_curve.png")
        write_card(Path(args.out), target.name, head, meta)
        log(f"saved head to {args.out}: validation {json.dumps(result['eval'])}")
    else:
        log(f"stopped at step {state['step']} of {cfg.steps}; run the same command to resume")
    return result


def write_card(out: Path, target_name: str, head, meta: dict) -> None:
    """README.md of a head: what it is, every training round with its command and metrics."""
    lines = [f"# EAGLE draft head for {target_name}", "",
             f"One decoder layer + fc ({sum(p.numel() for p in head.parameters()):,} trainable "
             f"parameters), input `{head.input_mode}`, draft vocabulary {head.draft_vocab_size:,} "
             f"tokens, fc bias {head.fc.bias is not None}. Weights: bf16 `model.safetensors`.", "",
             f"Cumulative: {meta['tokens_seen']:,} training tokens, "
             f"{meta['train_seconds'] / 3600:.2f} h of training wall time.", "",
             "## How to continue training it", "",
             "Run the last round's command again with `--init` pointing here; streaming resumes at "
             f"train record {meta.get('next_train_record', 'n/a')} (`next_train_record` in "
             "config.json). Until the train split is used up every round sees conversations it has "
             "not seen before; `--wrap` then starts the split again (another epoch).", "",
             "## Rounds", "",
             "| # | date | steps | tokens | hours | val top-1 | val alpha 0..3 | command |",
             "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(meta["rounds"], 1):
        v = r.get("validation") or {}
        alpha = " / ".join(f"{a:.2f}" for a in v.get("alpha", []))
        lines.append(f"| {i} | {r['date']} | {r['steps']} | {r['tokens']:,} | "
                     f"{r['seconds'] / 3600:.2f} | {v.get('top1', float('nan')):.3f} | {alpha} | "
                     f"`{r.get('command', '')}` |")
    lines += ["", "![loss curve of the latest round](loss_curve.png)", ""]
    (out / "README.md").write_text("\n".join(lines))


def plot_log(log_path: Path, png: Path) -> None:
    """Loss parts and top-1 per step of the latest round."""
    from matplotlib.figure import Figure   # no pyplot: leaves a notebook's backend alone
    rows = [json.loads(r) for r in Path(log_path).read_text().splitlines()]
    steps = [r["step"] for r in rows]
    fig = Figure(figsize=(12, 3.2))
    axes = fig.subplots(1, 3)
    for ax, key in zip(axes, ("reg", "cls", "top1")):
        ax.plot(steps, [r[key] for r in rows], lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.set_title({"reg": "SmoothL1 feature loss", "cls": "soft CE (token) loss",
                      "top1": "train top-1 vs target argmax"}[key], fontsize=9)
    fig.suptitle("Draft head training (eagle_mini train-head)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)


def eval_command(target, head, n_text: int = 50, n_prompts: int = 10, max_new_tokens: int = 64,
                 max_len: int = 1024, tree=None) -> dict:
    """Teacher-forced top-1 / n-alpha on the test split, and tau while decoding MT-bench."""
    from .data import mtbench_prompts
    from .decode import generate
    text = evaluate_head(head, validation_features(target, n_text, max_len, split="test"))
    taus, cycles, depth = [], [], Counter()
    tries = Counter()
    for prompt in mtbench_prompts()[:n_prompts]:
        gen = generate(target, head, prompt, max_new_tokens, tree=tree or "eagle2")
        taus.append(gen.stats["tau"])
        cycles += gen.stats["cycle_lengths"]
        for d, rate in gen.stats["acceptance_per_depth"].items():
            depth[d] += rate
            tries[d] += 1
    return {"test_text": text,
            "mtbench": {"prompts": n_prompts, "max_new_tokens": max_new_tokens,
                        "tree": str(tree or "eagle2"), "tau": sum(taus) / len(taus),
                        "mean_cycle_length": sum(cycles) / len(cycles),
                        "acceptance_per_depth": {d: depth[d] / tries[d] for d in sorted(depth)}}}


# Known 7B-class configurations (from the models' published config.json files), so the plan below
# can be computed without downloading anything.
BIG_CONFIGS = {
    "vicuna-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000},
    "llama3.1-8b-instruct": {"hidden_size": 4096, "intermediate_size": 14336,
                             "num_hidden_layers": 32, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "vocab_size": 128256},
}


def training_plan(config: dict, tokens: int, feature_bytes: int = 2) -> dict:
    """Disk and memory a head training run needs: the numbers the README and notebook 03 quote.

    Features: tokens x hidden x 2 bytes (fp16). Target in bf16: its parameter count x 2 bytes.
    Head: fc (2H x H + H) and one decoder layer, trained with AdamW in fp32 (weights, grads and two
    moments: 16 bytes per parameter).
    """
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    attn = h * h * 2 + 2 * h * (h * kv // heads)
    layer = attn + 3 * h * i + 2 * h
    target_params = config["num_hidden_layers"] * layer + 2 * v * h + h
    head_params = 2 * h * h + h + layer - h  # no input norm
    return {"tokens": tokens, "feature_disk_gb": tokens * h * feature_bytes / 1e9,
            "target_params_b": target_params / 1e9, "target_bf16_gb": target_params * 2 / 1e9,
            "head_params_m": head_params / 1e6, "head_adamw_fp32_gb": head_params * 16 / 1e9}
