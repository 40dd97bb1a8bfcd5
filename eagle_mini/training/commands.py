"""End-to-end commands around the trainer: train a head and write its model card.

`train-head` trains from stored features (`--features DIR`, the paper's way, the GPU/7B path) or
streams features computed on the fly (`--stream`, the CPU way). A head is continued with `--init`
(the shipped head grows run after run); checkpoints live in a work directory that is never
committed, the exported bf16 head in `--out`.

Evaluating a head (`eval-head`) is measurement: `measure/evaluate.py`.
"""
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eagle_mini.heads import head_kind
from eagle_mini.heads.eagle3 import KIND as EAGLE3_KIND
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.features import target_fingerprint
from eagle_mini.heads import HEAD_KINDS
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.training.sources import DumpSource, MixedSource, StreamingSource
from eagle_mini.training.train import TrainConfig, default_lr, evaluate_head, train_head


@dataclass
class TrainHeadCommand:
    """`train-head`'s options (the CLI's `--x-y` is the field `x_y`): what `train_command` runs.

    The fields `TrainConfig` also has take its defaults: the trainer's are the only ones."""
    out: str                              # where the trained head is written (bf16)
    features: str | None = None           # a dump-features directory; None: stream features
    wrap: bool = False                    # streaming: start the train split again at its end
    regenerated: str | None = None        # streaming: a `regenerate` file (the target's replies)
    mix_sharegpt: float | None = None     # with `regenerated`: this share of ShareGPT's replies
    work: str | None = None               # checkpoints and log (default runs/<out name>)
    init: str | None = None               # continue from this head directory
    start: int | None = None              # first train record (default: where `init` stopped)
    stop_after: int | None = None         # do at most this many steps now
    lr: float | None = None               # None: `default_lr` for the target's hidden size
    steps: int = TrainConfig.steps
    warmup: int = TrainConfig.warmup_steps
    batch_tokens: int = TrainConfig.batch_tokens
    max_len: int = TrainConfig.max_len
    draft_vocab: int = 0                  # reduced draft vocabulary size (0: the target's)
    ce_vocab: int = TrainConfig.ce_vocab
    kind: str = HEAD_KINDS[0]             # a new head's kind (`init` keeps its head's)
    lm_head_init: str = "random"          # a new EAGLE-3 head's lm_head: random, target, frozen
    norm_init_scale: float = 1.0          # with lm_head_init target/frozen: the final norm's scale
    unroll: int | None = None             # None: 1 for eagle1, 7 for eagle3
    mixed_precision: str = TrainConfig.mixed_precision   # no, bf16 or auto
    feature_dtype: str | None = None      # streaming: featurize in fp32, bf16, fp16 or auto
    unroll_decay: float = TrainConfig.unroll_decay
    fc_bias: bool = True                  # an EAGLE-1 head's fc bias
    eval_conversations: int = 20
    eval_every: int = TrainConfig.eval_every
    ckpt_every: int = TrainConfig.ckpt_every
    log_every: int = TrainConfig.log_every
    seed: int = TrainConfig.seed

    def __post_init__(self):
        """Bad values fail here, in one line, before a target loads or a step runs."""
        import math
        for flag, value, ok, want in (
                ("--lr", self.lr, self.lr is None or (math.isfinite(self.lr) and self.lr > 0), "> 0"),
                ("--warmup", self.warmup, self.warmup >= 0, ">= 0"),
                ("--start", self.start, self.start is None or self.start >= 0, ">= 0"),
                ("--draft-vocab", self.draft_vocab, self.draft_vocab >= 0, ">= 0 (0: the target's)"),
                ("--ce-vocab", self.ce_vocab, self.ce_vocab >= 0, ">= 0 (0: all)"),
                ("--eval-every", self.eval_every, self.eval_every >= 0, ">= 0 (0: at the end)"),
                ("--norm-init-scale", self.norm_init_scale, 0 <= self.norm_init_scale <= 1,
                 "in [0, 1]"),
                ("--unroll-decay", self.unroll_decay, 0 < self.unroll_decay <= 1, "in (0, 1]")):
            if not ok:
                raise EagleMiniError(f"{flag} must be {want}, got {value}")
        if self.mix_sharegpt and not self.regenerated:
            raise EagleMiniError("--mix-sharegpt goes with --regenerated: it mixes ShareGPT's own "
                                 "replies into the target's")
        if self.features and self.regenerated:
            raise EagleMiniError("--regenerated goes with --stream, not with --features")
        for flag, path in (("--features", self.features), ("--init", self.init),
                           ("--regenerated", self.regenerated)):
            if path and not Path(path).exists():
                raise EagleMiniError(f"{flag} {path} does not exist")
        if Path(self.out).is_file():
            raise EagleMiniError(f"--out {self.out} is a file: give the folder the head goes to")


def frequent_tokens(target, n: int, conversations: int = 2000) -> list[int]:
    """The n most frequent assistant (loss-masked) tokens of the first train conversations, their
    counts made once per target and kept in the cache (`$EAGLE_MINI_CACHE/token_counts/`)."""
    if not 1 <= n <= target.vocab_size:
        raise EagleMiniError(f"a draft vocabulary holds 1 to {target.vocab_size:,} tokens, got {n}")
    from eagle_mini.runtime.machine_cache import cached_finding, machine_key_parts

    def measure():
        counts = assistant_token_counts(target, conversations)
        return {"counts": {str(t): c for t, c in counts.items()}}
    tokenizer = getattr(target.tokenizer, "name_or_path", "") or "no-tokenizer"
    key = machine_key_parts(target.name, tokenizer, target.vocab_size, f"{conversations}conv")
    found, _ = cached_finding("token_counts", key, measure)
    counts = Counter({int(t): c for t, c in found["counts"].items()})
    return most_frequent_ids(counts, n, target.vocab_size)


def assistant_token_counts(target, conversations: int = 2000) -> Counter:
    """How often each token id is an assistant (loss-masked) token of the first `conversations`
    train conversations: what `frequent_tokens` ranks."""
    from eagle_mini.data import iter_conversations
    counts = Counter()
    for ex in iter_conversations("train", target.tokenizer, max_len=2048,
                                 max_conversations=conversations):
        counts.update(t for t, m in zip(ex.input_ids, ex.loss_mask) if m)
    return counts


def most_frequent_ids(counts: Counter, n: int, vocab_size: int) -> list[int]:
    """The n most frequent token ids, topped up with the lowest unseen ids, sorted.

    >>> most_frequent_ids(Counter({5: 3, 2: 1}), 4, 10)
    [0, 1, 2, 5]
    """
    ids = [t for t, _ in counts.most_common(n)]
    chosen = set(ids)   # built once: a set per vocabulary entry took seconds at 49k entries
    rest = (t for t in range(vocab_size) if t not in chosen)
    return sorted(ids + [next(rest) for _ in range(max(0, n - len(ids)))])


def regenerated_for(path, target, feat, feature_dtype: str | None):
    """A `regenerate` file as training data, if this target wrote it (in its own dtype or in
    the featurizer's: `regenerate --dtype bf16` goes with `--feature-dtype bf16`), and the
    `regenerate` command that writes it again (the model card prints it)."""
    from eagle_mini.training.regenerate import read_regenerated, remake_command
    data = read_regenerated(path)
    written = data.header.get("fingerprint")
    if written == target_fingerprint(target):
        return data, remake_command(data)
    if written == target_fingerprint(feat):
        return data, remake_command(data, feature_dtype)
    raise EagleMiniError(f"{path} was generated by another target or dtype "
                         f"({data.header.get('target')}, fingerprint {written}); regenerate it "
                         "with this one, or pass its --dtype as --feature-dtype")


def validation_features(target, n: int, max_len: int, split: str = "validation", layers=None):
    """Features of the first n conversations of a split that have assistant tokens; `layers` (an
    EAGLE-3 head's `aux_layers`) adds the layers it reads."""
    from eagle_mini.data import iter_conversations
    from eagle_mini.training.features import compute_features
    examples = [e for e in iter_conversations(split, target.tokenizer, max_len=max_len,
                                              max_conversations=n) if sum(e.loss_mask)]
    return compute_features(target, examples, layers=layers)


def featurizer(target, dtype: str):
    """The target itself, or a copy of it in `dtype` that makes the streamed training features.

    On a CPU with bf16 units (AMX) a bf16 copy featurizes faster than fp32; its features differ
    from fp32 ones by less than the training noise (`noise`) and give the same argmax at nearly
    every assistant token (measured by `scripts/probe_training_speed.py`; see the head's
    EXPERIMENTS.md). Validation, evaluation and decoding keep the target's own dtype."""
    from transformers import AutoModelForCausalLM
    from eagle_mini.models import torch_dtype
    from eagle_mini.target import Target
    if not dtype or torch_dtype(dtype) == target.model.dtype:
        return target
    model = AutoModelForCausalLM.from_config(target.config, dtype=torch_dtype(dtype),
                                             attn_implementation="sdpa")
    model.load_state_dict(target.model.state_dict())
    return Target(model.to(target.device).eval(), target.tokenizer, name=target.name)


def resolve_precision(mixed: str, feat: str | None, device, log=print):
    """`auto` for --mixed-precision / --feature-dtype becomes bf16 or fp32 by a matmul timed here
    (`runtime.precision`); an explicit bf16 on a CPU where bf16 is slower is said, not refused.
    -> (mixed precision, feature dtype)."""
    if not {mixed, feat} & {"auto", "bf16"}:
        return mixed, feat
    if device != "cpu":  # an accelerator: bf16 units are the norm
        return ("bf16" if mixed == "auto" else mixed), ("bf16" if feat == "auto" else feat)
    from eagle_mini.runtime.precision import choice, matmul_speedup
    pick, why = choice(matmul_speedup())
    if "auto" in (mixed, feat):
        log(f"precision auto: {why}")
    elif pick == "fp32":
        log(f"warning: {why.split(':')[0]}; bf16 was asked for, so training will be slow "
            "(--mixed-precision auto / --feature-dtype auto choose by this measurement)")
    mixed = ("bf16" if pick == "bf16" else "no") if mixed == "auto" else mixed
    feat = pick if feat == "auto" else feat
    return mixed, feat


def training_head(cmd: TrainHeadCommand, target):
    """train-head's head before training: `--init`'s (and its metadata) or a new one of `--kind`,
    draft vocabulary and seed. -> (head attached to `target`, its weights in fp32 whatever the
    target's dtype; the prior metadata or {}).

    fp32 master weights, as the authors train (accelerate / DeepSpeed bf16 keep them in fp32):
    attaching to a bf16 target casts a head to bf16, and AdamW on bf16 weights drops every update
    smaller than half a bf16 step of the weight. The shared embedding and lm_head stay the target's;
    `--mixed-precision bf16` runs the matmuls in bf16. The 7B rehearsal found the bf16 head."""
    if cmd.init:
        from eagle_mini.heads import load_head
        head = load_head(cmd.init, target)
        return head.float(), getattr(head, "meta", {})
    vocab = frequent_tokens(target, cmd.draft_vocab) if cmd.draft_vocab else None
    if cmd.kind == EAGLE3_KIND:
        from eagle_mini.heads.eagle3 import new_eagle3_head
        init = cmd.lm_head_init
        head = new_eagle3_head(target, seed=cmd.seed, draft_vocab=vocab,
                               warm_start=init in ("target", "frozen"),
                               freeze_lm_head=init == "frozen",
                               norm_scale=cmd.norm_init_scale)
    else:
        head = new_head(target, seed=cmd.seed, draft_vocab=vocab, fc_bias=cmd.fc_bias)
    return head.float(), {}


def train_command(cmd: TrainHeadCommand, target, log=print) -> dict:
    """Build or continue a head, train it, export it (bf16) with its metrics."""
    mixed, feature_dtype = resolve_precision(cmd.mixed_precision, cmd.feature_dtype,
                                             target.device.type, log)
    lr = cmd.lr
    if lr is None:
        lr = default_lr(target.hidden_size)
        log(f"lr {lr:.2g} for hidden size {target.hidden_size} (training.train.default_lr; "
            "--lr sets it)")
    cfg = TrainConfig(lr=lr, steps=cmd.steps, warmup_steps=cmd.warmup,
                      batch_tokens=cmd.batch_tokens, max_len=cmd.max_len, seed=cmd.seed,
                      ckpt_every=cmd.ckpt_every, log_every=cmd.log_every,
                      eval_every=cmd.eval_every, ce_vocab=cmd.ce_vocab, unroll=cmd.unroll,
                      unroll_decay=cmd.unroll_decay, mixed_precision=mixed,
                      feature_dtype=feature_dtype or "")
    work = Path(cmd.work or Path("runs") / Path(cmd.out).name)
    head, prior = training_head(cmd, target)
    layers = getattr(head, "aux_layers", None)
    if cfg.unroll is None:
        cfg.unroll = 7 if layers else 1   # EAGLE-3's 7 unrolled steps; EAGLE-1's single step
    for p in target.model.parameters():
        p.requires_grad_(False)
    vocab_ids = None
    if cfg.ce_vocab:
        vocab_ids = torch.tensor(frequent_tokens(target, cfg.ce_vocab), device=target.device)
    start = cmd.start if cmd.start is not None else prior.get("next_train_record", 0)
    source, described, regenerated = training_source(cmd, target, cfg, layers, prior, start)
    val = validation_features(target, cmd.eval_conversations, cfg.max_len, layers=layers)
    result = train_head(head, target, source, work, cfg, stop_after=cmd.stop_after,
                        evaluate_fn=lambda h: evaluate_head(h, val), vocab_ids=vocab_ids, log=log)
    state = result["state"]
    rounds = prior.get("rounds", []) + ([{
        "date": time.strftime("%Y-%m-%d"), "steps": state["step"], "tokens": state["tokens_seen"],
        "seconds": round(state["seconds"], 1), "config": asdict(cfg), "source": described,
        "validation": result["eval"], **({"regenerate_command": regenerated} if regenerated else {})
    }] if state["step"] >= cfg.steps else [])
    meta = {"tokens_seen": prior.get("tokens_seen", 0) + (state["tokens_seen"] if rounds else 0),
            "train_seconds": prior.get("train_seconds", 0) + (state["seconds"] if rounds else 0),
            "rounds": rounds}
    if cmd.mix_sharegpt:
        meta["next_mix_record"], meta["next_train_record"] = source.cursor
    elif not cmd.features:
        meta["next_train_record"] = source.cursor
    if state["step"] >= cfg.steps:
        meta["rounds"][-1]["command"] = "python -m eagle_mini " + " ".join(sys.argv[1:])
        head.save(cmd.out, extra=meta)
        plot_log(work / "log.jsonl", Path(cmd.out) / "loss_curve.png")
        write_card(Path(cmd.out), target.name, head, meta)
        log(f"saved head to {cmd.out}: validation {validation_line(result['eval'])}")
    else:
        log(f"stopped at step {state['step']} of {cfg.steps}; run the same command to resume")
    return result


def validation_line(metrics: dict) -> str:
    """`evaluate_head`'s metrics as one log line: null where no position could be counted (NaN in
    the metrics), and why. n-alpha counts the positions whose n earlier drafts were all right; a
    small validation set may have none.

        >>> validation_line({"top1": 0.5, "alpha": [0.5, float("nan")], "counts": [[1, 2], [0, 0]]})
        '{"top1": 0.5, "alpha": [0.5, null], "counts": [[1, 2], [0, 0]]}; null: no validation position had 1 draft in a row right (too few tokens: raise --eval-conversations)'
    """
    def clean(x):
        if isinstance(x, list):
            return [clean(v) for v in x]
        return None if isinstance(x, float) and x != x else x
    line = json.dumps({k: clean(v) for k, v in metrics.items()})
    empty = [k for k, (_, n) in enumerate(metrics.get("counts", [])) if n == 0]
    if empty:
        line += (f"; null: no validation position had {empty[0]} draft{'s' * (empty[0] != 1)} in a "
                 "row right" if empty[0] else "; null: the validation text has no assistant token")
        line += " (too few tokens: raise --eval-conversations)"
    return line


def training_source(cmd: TrainHeadCommand, target, cfg: TrainConfig, layers, prior: dict,
                    start: int):
    """train-head's batches: stored features, or features streamed from `start` (the target's
    regenerated replies, ShareGPT's mixed in). -> (source, its description for the model card,
    the `regenerate` command that remakes its file or None)."""
    if cmd.features:
        from eagle_mini.training.features import FeatureDataset
        ds = FeatureDataset(cmd.features)
        ds.check_target(target)
        if layers and ds.manifest.get("layers") != list(layers):
            raise EagleMiniError(f"{cmd.features} holds no layers {list(layers)} for an EAGLE-3 "
                                 "head: dump them with `dump-features --eagle3`")
        return DumpSource(ds), cmd.features, None
    feat, data, regenerated, mix = featurizer(target, cfg.feature_dtype), None, None, cmd.mix_sharegpt
    if cmd.regenerated:
        data, regenerated = regenerated_for(cmd.regenerated, target, feat, cfg.feature_dtype)
    source = StreamingSource(feat, "train", max_len=cfg.max_len, cursor=start, data=data,
                             wrap=cmd.wrap, layers=layers)
    described = f"stream train records from {start}" + (
        ", starting the split again at its end" if cmd.wrap else "") + (
        f" (target-regenerated replies, {cmd.regenerated})" if cmd.regenerated else "")
    if mix:
        from eagle_mini.data import SPLITS
        mix_start = prior.get("next_mix_record", data.written[-1] + 1 - SPLITS["train"][0])
        source = MixedSource(StreamingSource(feat, "train", max_len=cfg.max_len,
                                             cursor=mix_start, wrap=cmd.wrap,
                                             layers=layers), source, share=mix)
        described += f", {mix:.0%} of each batch's tokens ShareGPT's own replies from record {mix_start}"
    return source, described, regenerated


def write_card(out: Path, target_name: str, head, meta: dict) -> None:
    """README.md of a head: what it is, every training round with its command and metrics."""
    params = sum(p.numel() for p in head.parameters() if p.requires_grad)
    if head_kind(head) == EAGLE3_KIND:
        # No parameter count: notebook 08 asks the learner to predict it, and a class's repository
        # (`make student-repo`) ships this card.
        own = ("an lm_head frozen at the target's rows (`--lm-head-init frozen`)"
               if head.lm_head_frozen else "its own lm_head")
        what = (f"# EAGLE-3 draft head for {target_name}", f"fc 3H -> H over the hidden states "
                f"entering layers {', '.join(map(str, head.aux_layers))}, one decoder layer with "
                f"2H attention input, final norm and {own}, "
                f"draft vocabulary {head.draft_vocab_size:,} tokens. Weights: bf16 "
                "`model.safetensors` (`python -m eagle_mini export --format eagle3` writes the "
                "authors' layout).")
    else:
        what = (f"# EAGLE draft head for {target_name}", f"One decoder layer + fc ({params:,} "
                f"trainable parameters), input `{head.input_mode}`, draft vocabulary "
                f"{head.draft_vocab_size:,} tokens, fc bias {head.fc.bias is not None}. Weights: "
                "bf16 `model.safetensors`.")
    lines = [what[0], "", what[1], "",
             f"Cumulative: {meta['tokens_seen']:,} training tokens, "
             f"{meta['train_seconds'] / 3600:.2f} h of training wall time.", "",
             "## How to continue training it", "",
             "Run the last round's command again with `--init` pointing here; streaming resumes at "
             f"train record {meta.get('next_train_record', 'n/a')} (`next_train_record` in "
             "config.json). Until the train split is used up every round sees conversations it has "
             "not seen before; `--wrap` then starts the split again (another epoch).", ""]
    remake = meta["rounds"][-1].get("regenerate_command") if meta["rounds"] else None
    if remake:
        lines += ["The last round trained on the target's own replies (`--regenerated`); that file "
                  "is not committed. Write it again first (greedy, resumable):", "",
                  f"    {remake}", ""]
    lines += ["## Rounds", "",
              "| # | date | steps | tokens | hours | val top-1 | val alpha 0..3 | command |",
              "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(meta["rounds"], 1):
        v = r.get("validation") or {}
        alpha = " / ".join(f"{a:.2f}" for a in v.get("alpha", []))
        lines.append(f"| {i} | {r['date']} | {r['steps']} | {r['tokens']:,} | "
                     f"{r['seconds'] / 3600:.2f} | {v.get('top1', float('nan')):.3f} | {alpha} | "
                     f"`{r.get('command', '')}` |")
    lines += ["", "![loss curve of the latest round](loss_curve.png)", ""]
    lines += authors_check_lines(out / "authors_check.json")
    (out / "README.md").write_text("\n".join(lines))


def authors_check_lines(path: Path) -> list[str]:
    """The card's section on `scripts/check_eagle3_against_authors.py`, run on this head's export
    (its `--json`, kept beside the weights as authors_check.json); nothing when there is none."""
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    numeric = {k: v for k, v in r.items() if isinstance(v, dict) and "max_abs_diff" in v}
    worst = max(numeric.items(), key=lambda kv: kv[1]["max_abs_diff"] / max(kv[1]["max_abs_theirs"], 1.0))
    same = r.get("d_topK_genrate_identical", {})
    paths = r.get("e_our_drafter_vs_topK_genrate", {})
    return ["## Checked against the authors' own code", "",
            f"Exported in their layout and loaded by their `cnets.Model` (SafeAILab/EAGLE "
            f"{r['authors_commit'][:7]}), on one prompt of {r['prompt_tokens']} tokens: "
            f"{len(numeric)} numeric comparisons, the largest difference {worst[1]['max_abs_diff']:.1e} "
            f"({worst[0]}, against values up to {worst[1]['max_abs_theirs']:.1f}); their EAGLE-2 "
            f"drafting routine gives identical draft tokens, tree mask, positions and retrieve "
            f"indices with this head in their model's place: {all(same.values()) if same else 'n/a'}; "
            f"our drafter finds the same tree paths: {paths.get('same_paths', 'n/a')}. "
            f"`{r['command']}` wrote authors_check.json.", ""]


def plot_log(log_path: Path, png: Path) -> None:
    """Loss parts and top-1 per step of the latest round."""
    from matplotlib.figure import Figure   # no pyplot: leaves a notebook's backend alone
    rows = [json.loads(r) for r in Path(log_path).read_text().splitlines()]
    steps = [r["step"] for r in rows]
    titles = {"reg": "SmoothL1 feature loss", "cls": "soft CE (token) loss",
              "loss": "training-time test loss (sum of 0.8^k CE_k)",
              "top1": "train top-1 vs target argmax"}
    keys = [k for k in ("reg", "cls", "top1") if k in rows[0]] if "reg" in rows[0] else ["loss", "top1"]
    fig = Figure(figsize=(4 * len(keys), 3.2))
    axes = fig.subplots(1, len(keys))
    for ax, key in zip(axes, keys):
        ax.plot(steps, [r[key] for r in rows], lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.set_title(titles[key], fontsize=9)
    fig.suptitle("Draft head training (eagle_mini train-head)", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)




def training_plan(config: dict, tokens: int, feature_bytes: int = 2, kind: str = "eagle1",
                  draft_vocab: int | None = None) -> dict:
    """Disk and memory a head training run needs: the numbers the README and notebook 03 quote.

    Features: tokens x width x `feature_bytes` (fp16/bf16): width H for an EAGLE-1 head; for an
    EAGLE-3 head (`kind="eagle3"`) its three layers plus the last feature for the labels, 4H.
    Target in bf16: its parameter count x 2 bytes. Head, trained with AdamW in fp32 (weights,
    grads and two moments: 16 bytes per parameter): EAGLE-1, fc (2H x H + H) and one decoder layer
    without input norm; EAGLE-3, fc (3H x H, no bias), one layer whose q/k/v read 2H with two
    input norms, a final norm and its own trainable lm_head (H x draft_vocab, default the whole
    vocabulary).
    """
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    kv_width = h * kv // heads
    attn = h * h * 2 + 2 * h * kv_width
    layer = attn + 3 * h * i + 2 * h
    target_params = config["num_hidden_layers"] * layer + 2 * v * h + h
    if kind == EAGLE3_KIND:
        attn3 = 2 * h * (h + 2 * kv_width) + h * h   # q, k, v read 2H; o writes H
        head_params = 3 * h * h + attn3 + 3 * h * i + 4 * h + h * (draft_vocab or v)
        width = 4 * h
    elif kind == "eagle1":
        head_params = 2 * h * h + h + layer - h  # no input norm
        width = h
    else:
        raise EagleMiniError(f"unknown head kind {kind!r}; known: eagle1, eagle3")
    return {"kind": kind, "tokens": tokens, "feature_disk_gb": tokens * width * feature_bytes / 1e9,
            "target_params_b": target_params / 1e9, "target_bf16_gb": target_params * 2 / 1e9,
            "head_params_m": head_params / 1e6, "head_adamw_fp32_gb": head_params * 16 / 1e9}
