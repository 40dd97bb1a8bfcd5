"""Training the draft head with the EAGLE-1 recipe (EAGLE §3.2; reference §2), on `accelerate`.

Loss at position i, where the head reads (f_i + noise, t_{i+1}) and predicts f'_{i+1}:

    L = SmoothL1(f'_{i+1}, f_{i+1}) + `0.1` * softCE(softmax(lm_head(f_{i+1})), lm_head(f'_{i+1}))

averaged over positions whose token is an assistant token (loss mask). The classification part is
a *soft* cross-entropy against the target's whole next-token distribution, not a one-hot label.
`U(-0.1, 0.1)` noise on the input features makes the head robust to its own prediction errors.
AdamW with betas `(0.9, 0.95)`, linear warm-up, gradient clipping by value `0.5`: the paper's
settings (EAGLE-3 heads are clipped the same way, unlike the authors' EAGLE-3 recipe: `eagle3`
lists where its training departs from theirs).

Two data sources feed the same loop: stored features (`features.FeatureDataset`, the paper's
offline way and the GPU/7B path) and *streaming* features computed by the target on the fly from
conversations never seen before (the natural mode on a CPU, where features cannot be kept).
Checkpoints hold weights, optimizer, scheduler, RNG and the data position, so a killed run resumes
exactly. `accelerate` makes the same code run on a CPU, one GPU or `accelerate launch` over many
(DDP: each process featurizes its own share of a step; tested with two CPU processes).

Options, all off by default: `unroll` adds EAGLE-3's training-time test to the EAGLE-1 loss
(`eagle_loss`); `mixed_precision="bf16"` runs the head's forward and backward under autocast;
`feature_dtype` (streaming, `commands.featurizer`) makes features with a copy of the target in bf16.
"""
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from eagle_mini.heads import head_kind
from eagle_mini.heads.eagle3 import KIND as EAGLE3_KIND
from eagle_mini.errors import EagleMiniError
from eagle_mini.results import results_json
from eagle_mini.training.chains import (chain_acceptance, loss_mask_positions, reading_ids,  # noqa: F401
                     unrolled_predictions)
from eagle_mini.training.sources import DumpSource, MixedSource, StreamingSource  # noqa: F401


TUNED_LR, TUNED_WIDTH = 3e-3, 576   # the shipped SmolLM2-135M head's rate, at its hidden size


def default_lr(hidden_size: int) -> float:
    """`train-head`'s learning rate when `--lr` is not given: the rate tuned on the 135M target,
    scaled by TUNED_WIDTH / hidden_size for wider targets, Adam's rule for a hidden matrix as the
    width grows (muP, Yang et al. 2022). At a 7B's width 4096 this gives 4.2e-4; the 7B rehearsal
    diverged at the 135M rate and trained at 3e-4 (tooling/rehearsal.py, `Sizes.lr`). Narrower targets
    (the tests' tiny models) keep the tuned rate: nothing was tried above it.

    >>> default_lr(576), round(default_lr(4096), 6), default_lr(64)
    (0.003, 0.000422, 0.003)
    """
    return TUNED_LR * min(1.0, TUNED_WIDTH / hidden_size)


@dataclass
class TrainConfig:
    lr: float = 3e-3            # the paper's 3e-5 is for 68k dialogues x 20 epochs on a 7B target
    min_lr_ratio: float = 0.1   # cosine decay to lr * this at the end of the run
    betas: tuple = (0.9, 0.95)
    weight_decay: float = 0.0
    warmup_steps: int = 50
    steps: int = 1000
    grad_clip_value: float = 0.5
    noise: float = 0.1          # U(-noise, noise) on input features
    w_cls: float = 0.1
    unroll: int = 1             # >1: also train draft steps 1..unroll-1 on the head's own output
    #                             (EAGLE-3 heads: the training-time test's number of steps)
    unroll_decay: float = 0.8   # weight of step k: unroll_decay ** k (EAGLE-3's `0.8`)
    mixed_precision: str = "no"  # "bf16": the head's forward/backward under torch.autocast
    feature_dtype: str = ""     # streaming: featurize with a copy of the target in this dtype
    batch_tokens: int = 4096    # tokens per optimizer step (conversations packed up to this)
    max_len: int = 1024
    ce_vocab: int = 0           # >0: restrict the soft CE to the N most frequent target tokens
    seed: int = 0
    log_every: int = 10
    ckpt_every: int = 100
    eval_every: int = 0         # 0: only at the end


def _step_sums(pred, f_out, weight, lm):
    """One draft step's loss parts, summed over weighted positions: (reg, cls, correct, count).
    In fp32 whatever the dtype of the head's output (bf16 under autocast)."""
    pred = pred.float()
    reg = (F.smooth_l1_loss(pred, f_out, reduction="none").mean(-1) * weight).sum()
    with torch.no_grad():
        target_logits = f_out @ lm.T
        target_p = target_logits.softmax(-1)
    draft_logits = pred @ lm.T
    cls = (-(target_p * draft_logits.log_softmax(-1)).sum(-1) * weight).sum()
    correct = ((draft_logits.argmax(-1) == target_logits.argmax(-1)).float() * weight).sum()
    return reg, cls, correct.item(), weight.sum()


def eagle_loss(head, features, input_ids, loss_mask, noise: float = 0.1, w_cls: float = 0.1,
               vocab_ids=None, generator=None, unroll: int = 1, decay: float = 0.8):
    """features: [b, T, H] true features; input_ids, loss_mask: [b, T]. -> (loss, parts).

    unroll=1 is EAGLE-1's loss. unroll=K > 1 adds the "training-time test" of EAGLE-3 (§3) to it:
    draft step k = 1..K-1 reads the head's own step k-1 prediction in place of the true feature
    (`unrolled_predictions`, exactly the chain decoding runs) and is scored by the same EAGLE-1
    loss against the same labels, weighted decay^k. Step 0 is unchanged (same noise draws), so the
    head is still trained as EAGLE-1 trains it and learns, besides, to read its own errors, the
    reason n-alpha falls with n (EAGLE §3.1). Parts: step 0's reg / cls / top1 as with unroll=1,
    plus `top1_steps` (top-1 of every step) when unrolled.
    """
    f_in, f_out = features[:, :-1].float(), features[:, 1:].float()
    if noise > 0:
        u = torch.rand(f_in.shape, generator=generator, device="cpu").to(f_in.device)
        f_in = f_in + (2 * u - 1) * noise
    weight = loss_mask_positions(loss_mask)
    shared = getattr(head, "module", head)._shared  # under DDP the head is wrapped; call the wrapper
    lm = shared["lm_head"] if vocab_ids is None else shared["target_lm_head"][vocab_ids]
    lm = lm.float()   # a bf16 target's lm_head: its logits in fp32, like the features
    if unroll <= 1:
        steps = [[_step_sums(head(f_in, input_ids[:, 1:]), f_out, weight, lm)]]
    else:
        steps = [[] for _ in range(unroll)]   # per step: one (reg, cls, correct, count) per row
        for b in range(features.shape[0]):
            # entries past the last assistant token change nothing (a row without one: 1 entry)
            last = int(weight[b].nonzero().max()) + 1 if weight[b].any() else 1
            rows = torch.cat([f_in[b, :last], f_out[b, last - 1:last]])[None]  # inputs + 1 unused
            preds = unrolled_predictions(head, rows, input_ids[b:b + 1, :last + 1], unroll)
            for k, pred in enumerate(preds):
                w = weight[b, :last].clone()
                w[:k] = 0  # chains that would start before the sequence
                steps[k].append(_step_sums(pred, f_out[b, :last], w, lm))
    loss, top1 = 0.0, []
    for k, rows_k in enumerate(steps):
        reg_k, cls_k, correct_k, count_k = (sum(r[i] for r in rows_k) for i in range(4))
        denom = count_k.clamp(min=1)
        loss = loss + decay ** k * (reg_k + w_cls * cls_k) / denom
        top1.append(correct_k / float(denom))
        if k == 0:
            reg, cls = reg_k / denom, cls_k / denom
    parts = {"loss": loss.item(), "reg": reg.item(), "cls": cls.item(), "top1": top1[0],
             "tokens": int(weight.sum())}
    if unroll > 1:
        parts["top1_steps"] = top1
    return loss, parts


def pad_layers(examples, device) -> torch.Tensor:
    """Feature dicts with `layers` (EAGLE-3) -> right-padded layers [b, T, 3H], fp32."""
    t = max(len(e["input_ids"]) for e in examples)
    out = torch.zeros(len(examples), t, examples[0]["layers"].shape[-1])
    for i, e in enumerate(examples):
        out[i, :len(e["input_ids"])] = e["layers"].float()
    return out.to(device)


class Objective(torch.nn.Module):
    """The head and its training loss as one module, so that one `forward` is one optimizer
    step's whole graph: under DDP (`accelerate launch`) the unrolled draft steps are then inside a
    single forward. EAGLE-3 heads get the training-time test (`eagle3.ttt_loss`), EAGLE-1 heads
    `eagle_loss`."""

    def __init__(self, head, cfg, vocab_ids=None, noise_gen=None):
        super().__init__()
        self.head, self.cfg, self.vocab_ids, self.noise_gen = head, cfg, vocab_ids, noise_gen

    def forward(self, ids, feats, mask, layers=None):
        cfg = self.cfg
        if head_kind(self.head) == EAGLE3_KIND:
            from eagle_mini.training.eagle3 import ttt_loss
            return ttt_loss(self.head, layers, feats, ids, mask, cfg.unroll, cfg.unroll_decay)
        return eagle_loss(self.head, feats, ids, mask, cfg.noise, cfg.w_cls, self.vocab_ids,
                          self.noise_gen, cfg.unroll, cfg.unroll_decay)


def pad_batch(examples, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Feature dicts -> right-padded (input_ids [b, T], features [b, T, H], loss_mask [b, T])."""
    t = max(len(e["input_ids"]) for e in examples)
    h = examples[0]["features"].shape[-1]
    ids = torch.zeros(len(examples), t, dtype=torch.long)
    feats = torch.zeros(len(examples), t, h)
    mask = torch.zeros(len(examples), t, dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, :n] = torch.as_tensor(e["input_ids"])
        feats[i, :n] = e["features"].float()
        mask[i, :n] = torch.as_tensor(e["loss_mask"]).long()
    return ids.to(device), feats.to(device), mask.to(device)


def lr_lambda(cfg: TrainConfig):
    """Linear warm-up, then cosine decay to min_lr_ratio over the run."""
    def f(step):
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return f


def _atomic_save(obj, path: Path):
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def _optimizer(head, cfg: TrainConfig):
    """(trainable parameters, AdamW over them, its warm-up + cosine schedule `lr_lambda`)."""
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas),
                                  weight_decay=cfg.weight_decay)
    return params, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))


def _resume(ckpt: Path, head, optimizer, scheduler, noise_gen, source, log) -> dict:
    """Load a checkpoint (`save_checkpoint`) back into the head, optimizer, schedule, random
    generators and data position; the run's state (step, tokens seen, seconds)."""
    saved = torch.load(ckpt, weights_only=True)
    head.load_state_dict(saved["head"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    noise_gen.set_state(saved["noise_rng"])
    torch.set_rng_state(saved["torch_rng"])
    source.cursor = saved["cursor"]
    state = saved["state"]
    log(f"resumed from {ckpt} at step {state['step']}")
    return state


def _keep_log_until(log_path: Path, step: int) -> None:
    """Keep only what the checkpoint has seen: the resumed run rewrites the rest."""
    if log_path.exists():
        rows = [r for r in log_path.read_text().splitlines() if json.loads(r)["step"] <= step]
        log_path.write_text("".join(r + "\n" for r in rows))


def _optimizer_step(model, optimizer, scheduler, params, source, accelerator, cfg: TrainConfig,
                    amp, eagle3: bool):
    """One optimizer step on the next batch of `source`: (its examples, the loss's parts)."""
    # every process advances the data position alike and featurizes only its own share (DDP)
    shares = [source.take(cfg.batch_tokens) for _ in range(accelerator.num_processes)]
    examples = source.materialize(shares[accelerator.process_index])
    ids, feats, mask = pad_batch(examples, accelerator.device)
    layers = pad_layers(examples, accelerator.device) if eagle3 else None
    model.train()
    with torch.autocast(accelerator.device.type, dtype=amp, enabled=amp is not None):
        # weights, gradients and AdamW stay fp32; matmuls run in `amp`
        loss, parts = model(ids, feats, mask, layers)
    optimizer.zero_grad()
    accelerator.backward(loss)
    accelerator.clip_grad_value_(params, cfg.grad_clip_value)
    optimizer.step()
    scheduler.step()
    return examples, parts


def _report_step(row: dict, parts: dict, state: dict, bar, log_path: Path, main: bool,
                 cfg: TrainConfig, log) -> None:
    """A step's row into log.jsonl, its loss and token rate on the bar, and every log_every
    steps a printed line (logs from the main process only)."""
    if main:
        with log_path.open("a") as fh:
            fh.write(results_json(row, indent=None))
    tok_s = state["tokens_seen"] / max(state["seconds"], 1e-9)
    bar.set_postfix(loss=f"{parts['loss']:.4f}", tok_s=f"{tok_s:.0f}", refresh=False)
    bar.update()
    if main and (state["step"] % cfg.log_every == 0 or state["step"] == 1):
        with tqdm.external_write_mode():  # lift the bar off the terminal while `log` prints
            shown = "  ".join(f"{k} {parts[k]:.4f}" for k in ("loss", "reg", "cls", "top1")
                              if k in parts)
            log(f"step {state['step']:5d}  {shown}  lr {row['lr']:.2e}  {tok_s:.0f} tok/s")


def train_head(head, target, source, out_dir, cfg: TrainConfig, stop_after: int | None = None,
               evaluate_fn=None, vocab_ids=None, log=print, progress: bool = True) -> dict:
    """Train `head` (attached to `target`) on batches from `source`; resumable from out_dir/ckpt.

    stop_after: optimizer steps to do in this call (the schedule still spans cfg.steps), so a long
    run can be spread over sessions. evaluate_fn(head) -> dict runs at eval_every and at the end.
    progress: a bar over this call's optimizer steps with the token rate (main process only).
    """
    from accelerate import Accelerator
    out = Path(out_dir)
    (out / "ckpt").mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=target.device.type == "cpu")
    # torch's autocast, not accelerate's mixed_precision: accelerate fixes that once per process,
    # and a notebook or a test suite trains several heads in one process
    amp = {"no": None, "bf16": torch.bfloat16}[cfg.mixed_precision]
    params, optimizer, scheduler = _optimizer(head, cfg)
    noise_gen = torch.Generator().manual_seed(cfg.seed)
    state = {"step": 0, "tokens_seen": 0, "seconds": 0.0}
    ckpt = out / "ckpt" / "state.pt"
    if ckpt.exists():
        state = _resume(ckpt, head, optimizer, scheduler, noise_gen, source, log)
    eagle3 = head_kind(head) == EAGLE3_KIND
    model, optimizer = accelerator.prepare(Objective(head, cfg, vocab_ids, noise_gen), optimizer)
    log_path = out / "log.jsonl"
    _keep_log_until(log_path, state["step"])
    start_step, t0 = state["step"], time.perf_counter()
    metrics, evaluated_at = {}, None
    end_step = cfg.steps if stop_after is None else min(cfg.steps, start_step + stop_after)
    bar = tqdm(total=end_step, initial=start_step, desc="train-head", unit="step",
               disable=not (progress and accelerator.is_main_process))
    while state["step"] < cfg.steps and (stop_after is None or state["step"] - start_step < stop_after):
        examples, parts = _optimizer_step(model, optimizer, scheduler, params, source,
                                          accelerator, cfg, amp, eagle3)
        state["step"] += 1
        state["tokens_seen"] += sum(len(e["input_ids"]) for e in examples)
        state["seconds"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        row = {"step": state["step"], **parts, "lr": scheduler.get_last_lr()[0],
               "tokens_seen": state["tokens_seen"], "seconds": round(state["seconds"], 2)}
        if evaluate_fn is not None and cfg.eval_every and state["step"] % cfg.eval_every == 0:
            model.eval()
            row["eval"] = metrics = evaluate_fn(accelerator.unwrap_model(model).head)
            evaluated_at = state["step"]
        main = accelerator.is_main_process  # one writer for logs and checkpoints
        _report_step(row, parts, state, bar, log_path, main, cfg, log)
        if main and (state["step"] % cfg.ckpt_every == 0 or state["step"] == cfg.steps):
            save_checkpoint(accelerator.unwrap_model(model).head, optimizer, scheduler, noise_gen,
                            source.cursor, state, cfg, ckpt)
        t0 = time.perf_counter()
    bar.close()
    if accelerator.is_main_process and state["step"] - start_step and state["step"] % cfg.ckpt_every:
        save_checkpoint(accelerator.unwrap_model(model).head, optimizer, scheduler, noise_gen,
                        source.cursor, state, cfg, ckpt)
    if accelerator.is_main_process and log_path.exists():
        write_csv(log_path)
    if evaluate_fn is not None and state["step"] >= cfg.steps and evaluated_at != state["step"]:
        model.eval()
        metrics = evaluate_fn(accelerator.unwrap_model(model).head)
    return {"state": state, "eval": metrics}


def write_csv(log_path: Path) -> Path:
    """log.jsonl -> log.csv beside it, one row per step; evaluation columns where one ran."""
    import csv
    rows = [json.loads(r) for r in Path(log_path).read_text().splitlines() if r.strip()]
    flat = []
    for r in rows:
        ev = r.pop("eval", None) or {}
        r.update({"val_top1": ev.get("top1", "")} if ev else {})
        r.update({f"val_alpha{k}": a for k, a in enumerate(ev.get("alpha", []))})
        flat.append(r)
    columns = list(dict.fromkeys(k for r in flat for k in r))
    out = Path(log_path).with_suffix(".csv")
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, columns, restval="")
        w.writeheader()
        w.writerows(flat)
    return out


def save_checkpoint(head, optimizer, scheduler, noise_gen, cursor, state, cfg, path: Path):
    """Everything an exact resume needs: weights, optimizer, scheduler, RNG, data position."""
    _atomic_save({"head": head.state_dict(), "optimizer": optimizer.state_dict(),
                  "scheduler": scheduler.state_dict(), "noise_rng": noise_gen.get_state(),
                  "torch_rng": torch.get_rng_state(), "cursor": cursor, "state": dict(state),
                  "config": json.dumps(asdict(cfg))}, path)


@torch.no_grad()
def acceptance_counts(head, examples_with_features, steps: int = 4, token_shift: int = 1) -> list:
    """Per example, `[[accepted, tried] for n in 0..steps-1]` of teacher-forced chains
    (`chain_acceptance`): the units a bootstrap over conversations resamples (`measure.intervals`).
    An EAGLE-3 head reads each example's `layers`; its draft ids map to target ids, so top-1 is
    over the full vocabulary."""
    out = []
    eagle3 = head_kind(head) == EAGLE3_KIND
    for e in examples_with_features:
        ids = torch.as_tensor(e["input_ids"])[None]
        f = e["features"].float()[None]
        mask = torch.as_tensor(e["loss_mask"])[None]
        if eagle3 and "layers" not in e:
            raise EagleMiniError("an EAGLE-3 head is evaluated on features with `layers` "
                                 "(compute_features(..., layers=head.aux_layers))")
        inputs = e["layers"].float()[None] if eagle3 else None
        counts = chain_acceptance(head, f, ids, mask, steps, token_shift, inputs=inputs)
        out.append([list(counts[k]) for k in range(steps)])
    return out


def evaluate_head(head, examples_with_features, steps: int = 4, token_shift: int = 1) -> dict:
    """Pooled top-1 (= 0-alpha) and n-alpha over featurized examples."""
    per_example = acceptance_counts(head, examples_with_features, steps, token_shift)
    pooled = [[sum(c[k][0] for c in per_example), sum(c[k][1] for c in per_example)]
              for k in range(steps)]
    alpha = [a / n if n else float("nan") for a, n in pooled]
    return {"top1": alpha[0], "alpha": alpha, "counts": pooled}
