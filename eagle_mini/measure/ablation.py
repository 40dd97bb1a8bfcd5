"""The feature-uncertainty ablation (EAGLE §3.1, Figs. 4 and 8): four heads, one difference.

    python -m eagle_mini experiment uncertainty --size full --out data/results/uncertainty.json

The four heads of `uncertainty.VARIANTS` get the same data, batches and batch order, steps, seeds,
optimizer, learning-rate schedule and architecture; only the fc input differs (H or 2H wide). The
target's features are computed once, in memory, for the shared training and validation text
(fair, and four times cheaper than streaming them for every head). After each epoch every head is
measured on the validation split: top-1 (= 0-alpha) and 1-alpha of teacher-forced chain drafts
(`train.chain_acceptance`). At the end one run decodes a few MT-bench prompts greedily with vanilla
decoding and each head (methods interleaved per prompt): tau and speedup over vanilla. Then the
direct measurements of `uncertainty.branch_probe` and `error_by_entropy` (EAGLE Fig. 3).

Resumable: the work directory keeps each variant's trainer checkpoint, and a finished variant's
metrics and head; decoding and the probe are kept once done. A rerun of the same command skips what
is finished and continues a variant from its last checkpoint.

What this leaves out: the paper's 68k dialogues x 20 epochs on a 7B target (here a few hundred
thousand tokens on SmolLM2-135M) and its T=1 runs.
"""
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..errors import EagleMiniError
from .evaluate import pooled_tau
from ..results import results_json
from .uncertainty import PAPER, VARIANTS, branch_probe, error_by_entropy, make_drafter, training_rows

FORMAT = "eagle_mini.uncertainty/1"


@dataclass(frozen=True)
class AblationConfig:
    train_tokens: int = 320_000    # shared training text: train-split conversations up to this
    val_tokens: int = 16_000       # validation-split conversations up to this
    max_len: int = 1024
    epochs: int = 6
    batch_tokens: int = 4096       # padded tokens per step (conversations grouped by length)
    lr: float = 1e-3               # stable for this head on this target (data/heads/.../EXPERIMENTS.md)
    warmup: int = 30
    draft_vocab: int = 8192        # 0: the full vocabulary
    vocab_conversations: int = 1000
    alpha_steps: int = 2           # 0-alpha and 1-alpha
    prompts: int = 8               # MT-bench prompts decoded at the end
    max_new_tokens: int = 64
    tree: str = "eagle2"           # generate's default tree; a decode.METHODS name or a static spec
    contexts: int = 300            # branch probe
    min_p: float = 0.2
    analysis_tokens: int = 16_000  # error vs entropy
    entropy_bins: int = 6
    seed: int = 0


# `full` is sized for ~60-70 min on 2 idle CPU threads (SmolLM2-135M, fp32), estimated from
# features at ~650-750 tok/s and head training at ~2,500 tok/s: ~9 min of features (336k tokens),
# ~50 min of training (4 heads x 6 epochs x 320k tokens), ~5 min of validation, ~3 min of
# decoding, ~1 min of probes. `ci` is notebook 02's live run; `tiny` a smoke test on the real target.
SIZES = {
    "tiny": AblationConfig(train_tokens=1_000, val_tokens=500, max_len=256, epochs=1,
                           batch_tokens=1024, warmup=2, vocab_conversations=20, prompts=1,
                           max_new_tokens=8, contexts=20, analysis_tokens=500, entropy_bins=3),
    "ci": AblationConfig(train_tokens=2_000, val_tokens=800, max_len=256, epochs=2,
                         batch_tokens=1024, warmup=2, vocab_conversations=20, prompts=1,
                         max_new_tokens=12, contexts=30, analysis_tokens=800, entropy_bins=4),
    "full": AblationConfig(),
}


class EpochSource:
    """Fixed batches for `train.train_head`, in a seeded new order every epoch (same for every head).

    `cursor` counts batches served; it is all a checkpoint needs to resume.
    """

    def __init__(self, batches: list[list[dict]], seed: int = 0, cursor: int = 0):
        self.batches, self.seed, self.cursor = batches, seed, cursor

    def take(self, batch_tokens: int = 0) -> list[dict]:
        epoch, k = divmod(self.cursor, len(self.batches))
        order = torch.randperm(len(self.batches), generator=torch.Generator().manual_seed(self.seed + epoch))
        self.cursor += 1
        return self.batches[int(order[k])]

    def materialize(self, picked):
        return picked


def length_grouped(rows: list[dict], batch_tokens: int) -> list[list[dict]]:
    """Rows in batches of similar length, rows x longest <= batch_tokens (`features.length_batches`)."""
    from ..training.features import length_batches
    groups = length_batches([len(r["input_ids"]) for r in rows], batch_tokens)
    return [[rows[i] for i in sorted(g)] for g in groups]


def take_tokens(examples, n_tokens: int) -> list:
    """Examples with assistant tokens, in order, until they hold `n_tokens` tokens."""
    out, total = [], 0
    for ex in examples:
        if total >= n_tokens:
            break
        if sum(ex.loss_mask) and len(ex.input_ids) >= 2:
            out.append(ex)
            total += len(ex.input_ids)
    return out


def _epoch_rows(log_path: Path, steps_per_epoch: int) -> list[dict]:
    """Per-epoch metrics from the trainer's log: the eval row at each epoch's end, train means."""
    rows = [json.loads(r) for r in log_path.read_text().splitlines()]
    out = []
    for r in rows:
        if "eval" not in r:
            continue
        e = r["step"] // steps_per_epoch
        mine = [x for x in rows if (e - 1) * steps_per_epoch < x["step"] <= e * steps_per_epoch]
        out.append({"epoch": e, "step": r["step"], "tokens_seen": r["tokens_seen"],
                    "top1": r["eval"]["top1"], "alpha": r["eval"]["alpha"],
                    "counts": r["eval"]["counts"],
                    **{f"train_{k}": sum(x[k] for x in mine) / len(mine)
                       for k in ("loss", "reg", "cls", "top1")}})
    return out


def train_variant(target, variant, batches, val_rows, cfg: AblationConfig, work: Path,
                  draft_vocab=None, log=print, progress: bool = True) -> dict:
    """Train one head of the ablation (resumable), evaluate it after every epoch, save it."""
    from ..head import DraftHead, new_head
    from ..training.train import TrainConfig, evaluate_head, train_head
    aligned = [training_rows(b, variant) for b in batches]  # what this head's trainer reads
    head = new_head(target, seed=cfg.seed, draft_vocab=draft_vocab, input_mode=variant.input_mode)
    # An H-wide fc draws fewer random numbers than a 2H-wide one, which would shift the decoder
    # layer's initialization: give all four the layer of one reference head.
    torch.manual_seed(cfg.seed)
    reference = DraftHead(target.config, input_mode="feature+token")
    head.layers.load_state_dict(reference.layers.state_dict())
    steps = cfg.epochs * len(batches)
    tcfg = TrainConfig(lr=cfg.lr, steps=steps, warmup_steps=cfg.warmup, batch_tokens=cfg.batch_tokens,
                       max_len=cfg.max_len, seed=cfg.seed, eval_every=len(batches),
                       log_every=max(1, len(batches) // 4), ckpt_every=max(10, len(batches) // 2))
    t0 = time.perf_counter()
    result = train_head(head, target, EpochSource(aligned, cfg.seed), work, tcfg,
                        evaluate_fn=lambda h: evaluate_head(h, val_rows, cfg.alpha_steps,
                                                            variant.token_shift),
                        log=log, progress=progress)
    head.save(work / "head", dtype=torch.float32,
              extra={"variant": variant.name, "token_shift": variant.token_shift})
    return {"label": variant.label, "reads": variant.reads, "input_mode": variant.input_mode,
            "token_shift": variant.token_shift, "fc_in": head.fc.in_features,
            "parameters": sum(p.numel() for p in head.parameters()),
            "epochs": _epoch_rows(work / "log.jsonl", len(batches)),
            "train_seconds": result["state"]["seconds"], "tokens_seen": result["state"]["tokens_seen"],
            "wall_seconds_this_session": time.perf_counter() - t0}


def decode_compare(target, heads: dict, prompts, max_new_tokens: int, tree, warmup_prompt=None,
                   progress: bool = True) -> dict:
    """Greedy vanilla vs every head on the same prompts, interleaved (the order rotates per prompt),
    one warm-up each: tau, tokens/s and speedup over vanilla measured in this run."""
    from ..decode import generate, generate_vanilla, prepare_prompt
    from .uncertainty import BY_NAME

    def one(name, ids, n):
        if name == "vanilla":
            return generate_vanilla(target, ids, n)
        drafter = make_drafter(heads[name], BY_NAME[name], tree, ids)
        return generate(target, heads[name], ids, n, tree=drafter.shape, drafter=drafter)

    methods = ["vanilla", *heads]
    ids_list = [prepare_prompt(target, p) for p in prompts]
    warm = prepare_prompt(target, warmup_prompt) if warmup_prompt is not None else ids_list[0]
    for m in methods:
        one(m, warm, 4)
    rows = {m: [] for m in methods}
    for i, ids in enumerate(tqdm(ids_list, desc="decode", unit="prompt", disable=not progress)):
        for m in methods[i % len(methods):] + methods[:i % len(methods)]:
            g = one(m, ids, max_new_tokens)
            rows[m].append({"output": g.output_ids, **{k: g.stats[k] for k in
                                                       ("new_tokens", "seconds", "target_forwards")},
                            "depth": g.stats.get("acceptance_per_depth", {})})
    tps = {m: sum(r["new_tokens"] for r in rows[m]) / sum(r["seconds"] for r in rows[m]) for m in methods}
    out = {"prompts": len(ids_list), "max_new_tokens": max_new_tokens, "tree": str(tree),
           "methods": {}}
    for m in methods:
        tokens = sum(r["new_tokens"] for r in rows[m])
        depths = {}
        for r in rows[m]:
            for d, a in r["depth"].items():
                depths.setdefault(int(d), []).append(a)
        out["methods"][m] = {
            "tokens_per_second": tps[m], "speedup": tps[m] / tps["vanilla"],
            "tau": pooled_tau(rows[m])[0],
            "tokens_per_forward": tokens / sum(r["target_forwards"] for r in rows[m]),
            "new_tokens": tokens,
            "seconds": sum(r["seconds"] for r in rows[m]),
            "equal_to_vanilla": all(a["output"] == b["output"] for a, b in zip(rows[m], rows["vanilla"])),
            "acceptance_per_depth": {d: sum(v) / len(v) for d, v in sorted(depths.items())}}
    return out


def _cached(path: Path, compute):
    """compute() once; its JSON result is kept at `path` and reused, as read back, by a rerun."""
    if not path.exists():
        t0 = time.perf_counter()
        value = {**compute(), "seconds": time.perf_counter() - t0}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(results_json(value, indent=1))
        tmp.replace(path)
    return json.loads(path.read_text())


def run_ablation(target, train_examples, val_examples, prompts, cfg: AblationConfig, work,
                 draft_vocab=None, warmup_prompt=None, command: str = "", log=print,
                 progress: bool = True) -> dict:
    """The whole experiment on featurizable examples (`.input_ids`, `.loss_mask`) and prompts
    (strings or id lists); every finished phase is kept in `work` and skipped on a rerun.
    progress: bars for the features, each head's training and the decoding."""
    from ..training.features import compute_features
    from ..head import DraftHead
    from ..results import machine_info
    t_start = time.perf_counter()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    identity = {"format": FORMAT, "target": target.name, "config": asdict(cfg),
                "train_examples": len(train_examples), "val_examples": len(val_examples),
                "draft_vocab_size": len(draft_vocab) if draft_vocab is not None else target.vocab_size}
    ident_path = work / "config.json"
    if ident_path.exists() and json.loads(ident_path.read_text()) != identity:
        raise EagleMiniError(f"{work} holds another run of this experiment (config.json differs); "
                             "use another --work directory or delete it")
    ident_path.write_text(results_json(identity, indent=1))
    val = []  # validation features, computed on first use

    def features(examples, desc):
        with tqdm(total=sum(len(e.input_ids) for e in examples), desc=desc, unit="tok",
                  unit_scale=True, disable=not progress) as bar:
            return compute_features(target, examples, progress=bar)

    def val_rows():
        if not val:
            val.append(features(val_examples, "features validation"))
        return val[0]
    done = {v.name: work / v.name / "result.json" for v in VARIANTS}
    batches, features_seconds = None, 0.0
    variants = {}
    for v in VARIANTS:
        if not done[v.name].exists():
            if batches is None:
                t0 = time.perf_counter()
                train_rows = features(train_examples, "features train")
                features_seconds = time.perf_counter() - t0
                tokens = sum(len(r["input_ids"]) for r in train_rows)
                log(f"features of {len(train_rows)} training conversations ({tokens:,} tokens) in "
                    f"{features_seconds:.0f} s, kept in memory for the four heads")
                batches = length_grouped(train_rows, cfg.batch_tokens)
            log(f"--- {v.label}: reads {v.reads}, predicts f_(i+1)")
        else:
            log(f"--- {v.label}: finished earlier, kept ({done[v.name]})")
        variants[v.name] = _cached(done[v.name], lambda v=v: train_variant(
            target, v, batches, val_rows(), cfg, work / v.name, draft_vocab, log, progress))
        last = variants[v.name]["epochs"][-1]
        log(f"    {v.label}: val top-1 {last['top1']:.3f}, 1-alpha {number(last['alpha'][1]):.3f}; "
            f"{(time.perf_counter() - t_start) / 60:.1f} min into this session")
    heads = {v.name: DraftHead.load(work / v.name / "head", target).eval() for v in VARIANTS}
    decode = _cached(work / "decode.json", lambda: decode_compare(
        target, heads, prompts, cfg.max_new_tokens, cfg.tree, warmup_prompt, progress))
    probe = _cached(work / "probe.json", lambda: {
        "branches": branch_probe(target, heads, val_rows(), cfg.min_p, cfg.contexts),
        "entropy": error_by_entropy(target, heads, val_rows(), cfg.entropy_bins, cfg.analysis_tokens)})
    for name, row in decode["methods"].items():
        if name in variants:
            variants[name]["decode"] = row
    # seconds of the session that computed each phase (a resumed variant counts its last session)
    phases = {"features_seconds": features_seconds,
              "variant_seconds": {k: v.get("seconds", 0.0) for k, v in variants.items()},
              "decode_seconds": decode["seconds"], "probe_seconds": probe["seconds"]}
    result = {"format": FORMAT, "command": command, "target": target.name, "config": asdict(cfg),
              "data": {"train_examples": len(train_examples),
                       "train_tokens": sum(len(e.input_ids) for e in train_examples),
                       "val_examples": len(val_examples),
                       "val_tokens": sum(len(e.input_ids) for e in val_examples),
                       "draft_vocab_size": identity["draft_vocab_size"]},
              "variants": variants, "vanilla": decode["methods"]["vanilla"], "decode": decode,
              "uncertainty": {k: v for k, v in probe.items() if k != "seconds"},
              "paper": PAPER, "machine": machine_info(), "phase_seconds": phases,
              "elapsed_seconds": time.perf_counter() - t_start}
    return result


def config_from_args(args) -> AblationConfig:
    """The size's configuration with every knob given on the command line replaced."""
    knobs = {k: getattr(args, k) for k in AblationConfig.__dataclass_fields__
             if getattr(args, k, None) is not None}
    return replace(SIZES[args.size], **knobs)


def sharegpt_inputs(target, cfg: AblationConfig) -> dict:
    """`run_ablation`'s data for a chat target: ShareGPT train and validation conversations up to
    the configured token counts, the first MT-bench prompts, the draft vocabulary (the most
    frequent assistant tokens) and a warm-up prompt that is never measured."""
    from ..training.data import iter_conversations, mtbench_prompts, read_sharegpt
    from ..training.commands import frequent_tokens
    data = read_sharegpt()

    def split(name, n_tokens):
        return take_tokens(iter_conversations(name, target.tokenizer, cfg.max_len, data=data), n_tokens)
    prompts = mtbench_prompts()
    return {"train_examples": split("train", cfg.train_tokens),
            "val_examples": split("validation", cfg.val_tokens), "prompts": prompts[:cfg.prompts],
            "draft_vocab": frequent_tokens(target, cfg.draft_vocab, cfg.vocab_conversations)
            if cfg.draft_vocab else None, "warmup_prompt": prompts[-1]}


def ablation_command(args, target, log=print) -> dict:
    """`experiment uncertainty`: SmolLM2 (or --model) on ShareGPT, MT-bench prompts; writes --out."""
    import sys
    cfg = config_from_args(args)
    work = Path(args.work or Path("runs") / f"uncertainty_{args.size}")
    log(f"experiment uncertainty, size {args.size}: {json.dumps(asdict(cfg))}; work dir {work}")
    result = run_ablation(target, cfg=cfg, work=work, **sharegpt_inputs(target, cfg),
                          command="python -m eagle_mini " + " ".join(sys.argv[1:]), log=log)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result, indent=1))
    log(summary_table(result))
    for row in paper_checks(result):
        log(f"{'holds' if row['holds'] else 'FAILS'}: {row['claim']} (paper {row['paper']}; "
            f"here {row['ours']})")
    log(f"wrote {out} ({result['elapsed_seconds'] / 60:.1f} min this session)")
    return result


def summary_table(result: dict) -> str:
    """Markdown: per variant the last epoch's top-1 and 1-alpha, tau, speedup, and the paper's."""
    lines = ["| input | fc in | val top-1 (0-alpha) | 1-alpha | tau | speedup | paper speedup / acc. |",
             "|---|---|---|---|---|---|---|"]
    for name, v in result["variants"].items():
        last = v["epochs"][-1]
        p = result["paper"][name]
        paper = f"{p['speedup']}x / {p['accuracy']}" if "speedup" in p else p["note"]
        d = v.get("decode", {})
        lines.append(f"| {v['label']} | {v['fc_in']} | {last['top1']:.3f} | "
                     f"{number(last['alpha'][1]):.3f} | {number(d.get('tau')):.2f} | "
                     f"{number(d.get('speedup')):.2f}x | {paper} |")
    return "\n".join(lines)


def number(x) -> float:
    """A rate read back from JSON: null (nothing to count, NaN when it was computed) is NaN again,
    so comparisons are False and formatting prints nan."""
    return float("nan") if x is None else x


def paper_checks(result: dict, near: float = 0.1) -> list[dict]:
    """The paper's claims about the four inputs (EAGLE Figs. 4 and 8), each checked on `result`.

    Orderings are strict; "about equal" means within `near` of the larger value, relatively.
    Returns rows {"claim", "paper", "ours", "holds", "z"}: the numbers that decide each claim and,
    for accuracies, the smallest two-proportion z-score among the compared pairs (the difference in
    standard errors; the heads share their validation tokens, so this is conservative). Tau and
    speedup come from one decode of a few prompts per head and get no z.
    """
    import math
    v = result["variants"]
    last = {n: v[n]["epochs"][-1] for n in v}
    top1 = {n: number(last[n]["top1"]) for n in v}
    alpha1 = {n: number(last[n]["alpha"][1]) for n in v}
    tau = {n: number(v[n].get("decode", {}).get("tau")) for n in v}
    speed = {n: number(v[n].get("decode", {}).get("speedup")) for n in v}
    order = ("token", "feature", "shifted")

    def z(k, lo, hi):   # (hi - lo) / standard error, k-alpha of two heads
        (a1, n1), (a2, n2) = last[hi]["counts"][k], last[lo]["counts"][k]
        if not (n1 and n2):
            return None
        p1, p2 = a1 / n1, a2 / n2
        se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
        return round((p1 - p2) / se, 1) if se else None

    def increasing(d):
        return all(d[a] < d[b] for a, b in zip(order, order[1:]))

    def show(d, names=order):
        return ", ".join(f"{n} {d[n]:.3f}" for n in names)

    pairs = list(zip(order, order[1:]))
    others = [n for n in v if n != "shifted"]
    return [
        {"claim": "top-1: token only < feature only < feature & shifted token",
         "paper": "0.32 < 0.63 < 0.78", "ours": show(top1), "holds": increasing(top1),
         "z": min(z(0, a, b) for a, b in pairs)},
        {"claim": "speedup in the same order", "paper": "1.5x < 1.9x < 2.8x", "ours": show(speed),
         "holds": increasing(speed), "z": None},
        {"claim": "tau in the same order (what carries over between machines)",
         "paper": "(not reported)", "ours": show(tau), "holds": increasing(tau), "z": None},
        {"claim": "unshifted 0-alpha about feature only's", "paper": "Fig. 8: about equal",
         "ours": show(top1, ("feature", "unshifted")),
         "holds": abs(top1["unshifted"] - top1["feature"])
         <= near * max(top1["unshifted"], top1["feature"]), "z": z(0, "feature", "unshifted")},
        {"claim": "unshifted 1-alpha above feature only's", "paper": "Fig. 8: higher",
         "ours": show(alpha1, ("feature", "unshifted")),
         "holds": alpha1["unshifted"] > alpha1["feature"], "z": z(1, "feature", "unshifted")},
        {"claim": "feature & shifted token best on 0-alpha and 1-alpha", "paper": "Fig. 8: best",
         "ours": f"0-alpha {top1['shifted']:.3f}, 1-alpha {alpha1['shifted']:.3f}",
         "holds": all(top1["shifted"] > top1[n] and alpha1["shifted"] > alpha1[n] for n in others),
         "z": min(min(z(0, n, "shifted"), z(1, n, "shifted")) for n in others)},
    ]
