"""The feature-uncertainty ablation (EAGLE §3.1, Figs. 4 and 8): four heads, one difference.

    python -m eagle_mini experiment uncertainty --size full --out data/results/uncertainty.json \
        --keep data/results/uncertainty_full

The four heads of `uncertainty.VARIANTS` get the same data, batches and batch order, steps, seeds,
optimizer, learning-rate schedule and architecture; only the fc input differs (H or 2H wide). The
target's features are computed once, in memory, for the shared training and validation text
(fair, and four times cheaper than streaming them for every head). After each epoch every head is
measured on the validation split: top-1 (= 0-alpha) and 1-alpha of teacher-forced chain drafts
(`train.chain_acceptance`). At the end one run decodes a few MT-bench prompts greedily with vanilla
decoding and each head (methods interleaved per prompt): tau and speedup over vanilla. Then the
direct measurements of `uncertainty.branch_probe` and `error_by_entropy` (EAGLE Fig. 3).

Resumable: the work directory keeps each variant's trainer checkpoint, and a finished variant's
metrics, head, tau and (first seed) probe. A rerun of the same command skips what is finished and
continues a variant from its last checkpoint. A sitting's work directory does not outlive it on
every machine, so `keep` (for the committed full run `data/results/uncertainty_full/`, named
explicitly) receives each finished variant's small JSON files -- never heads or checkpoints -- and
a new work directory starts from them: across sittings only a variant cut off mid-training is
redone.

What this leaves out: the paper's 68k dialogues x 20 epochs on a 7B target (here a few hundred
thousand tokens on SmolLM2-135M) and its T=1 runs.
"""
import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from eagle_mini.errors import EagleMiniError
from eagle_mini.measure.evaluate import pooled_tau
from eagle_mini.methods import EAGLE2
from eagle_mini.results import default_out, results_json
from eagle_mini.experiments.uncertainty import PAPER, VARIANTS, branch_probe, error_by_entropy, make_drafter, training_rows

FORMAT = "eagle_mini.uncertainty/2"  # /2: seeds, per-conversation and per-prompt counts


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
    prompts: int = 80              # MT-bench first turns decoded for tau (fewer: spread over categories)
    max_new_tokens: int = 64
    tree: str = EAGLE2             # generate's default tree; a method name (methods.py) or a tree spec
    contexts: int = 300            # branch probe
    min_p: float = 0.2
    analysis_tokens: int = 16_000  # error vs entropy
    entropy_bins: int = 6
    seed: int = 0                  # the first seed; seed + 1, ... follow
    seeds: int = 3                 # training seeds per variant (initialization, data order, noise)
    mixed_precision: str = "no"    # "bf16": the heads under autocast (train.TrainConfig); fp32 by
    #                                default: a run resumes on whichever CPU the next sitting gets, and
    #                                on one without bf16 units a bf16 matmul is many times slower
    #                                (runtime/precision.py measures it on the machine at hand)


# `full` is sized for several hours on 2 CPU threads, spread over sittings (SmolLM2-135M): the
# features of the shared text (in the work directory, recomputed in each sitting), then per head
# 6 epochs of 4,096-token steps, the decoding of 80 prompts for tau and, on the first seed, the
# probes, for 3 seeds x 4 heads. A step's time is measured by `scripts/probe_ablation_step.py`;
# each finished run's times are in data/results/uncertainty.json (`phase_seconds`). `ci` is
# notebook 02's live run; `tiny` a smoke test on the real target.
SIZES = {
    "tiny": AblationConfig(train_tokens=1_000, val_tokens=500, max_len=256, epochs=1,
                           batch_tokens=1024, warmup=2, vocab_conversations=20, prompts=1,
                           max_new_tokens=8, contexts=20, analysis_tokens=500, entropy_bins=3,
                           seeds=1),
    "ci": AblationConfig(train_tokens=2_000, val_tokens=800, max_len=256, epochs=2,
                         batch_tokens=1024, warmup=2, vocab_conversations=20, prompts=1,
                         max_new_tokens=12, contexts=30, analysis_tokens=800, entropy_bins=4,
                         seeds=2),
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
        g = torch.Generator().manual_seed(1_000_003 * self.seed + epoch)  # seeds never share orders
        order = torch.randperm(len(self.batches), generator=g)
        self.cursor += 1
        return self.batches[int(order[k])]

    def materialize(self, picked):
        return picked


def length_grouped(rows: list[dict], batch_tokens: int) -> list[list[dict]]:
    """Rows in batches of similar length, rows x longest <= batch_tokens (`features.length_batches`)."""
    from eagle_mini.training.features import length_batches
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


def train_variant(target, variant, batches, val_rows, cfg: AblationConfig, work: Path, seed: int,
                  draft_vocab=None, log=print, progress: bool = True) -> dict:
    """Train one head of the ablation with one seed (resumable), evaluate it after every epoch and
    per validation conversation at the end, save it."""
    from eagle_mini.heads.eagle1 import DraftHead, new_head
    from eagle_mini.results import machine_info
    from eagle_mini.training.train import TrainConfig, acceptance_counts, evaluate_head, train_head
    aligned = [training_rows(b, variant) for b in batches]  # what this head's trainer reads
    head = new_head(target, seed=seed, draft_vocab=draft_vocab, input_mode=variant.input_mode)
    # An H-wide fc draws fewer random numbers than a 2H-wide one, which would shift the decoder
    # layer's initialization: give all four the layer of one reference head.
    torch.manual_seed(seed)
    reference = DraftHead(target.config, input_mode="feature+token")
    head.layers.load_state_dict(reference.layers.state_dict())
    steps = cfg.epochs * len(batches)
    tcfg = TrainConfig(lr=cfg.lr, steps=steps, warmup_steps=cfg.warmup, batch_tokens=cfg.batch_tokens,
                       max_len=cfg.max_len, seed=seed, eval_every=len(batches),
                       mixed_precision=cfg.mixed_precision,
                       log_every=max(1, len(batches) // 4), ckpt_every=max(10, len(batches) // 2))
    t0 = time.perf_counter()
    result = train_head(head, target, EpochSource(aligned, seed), work, tcfg,
                        evaluate_fn=lambda h: evaluate_head(h, val_rows, cfg.alpha_steps,
                                                            variant.token_shift),
                        log=log, progress=progress)
    head.save(work / "head", dtype=torch.float32,
              extra={"variant": variant.name, "token_shift": variant.token_shift, "seed": seed})
    return {"seed": seed, "parameters": sum(p.numel() for p in head.parameters()),
            "fc_in": head.fc.in_features,
            "epochs": _epoch_rows(work / "log.jsonl", len(batches)),
            "val_counts": acceptance_counts(head.eval(), val_rows, cfg.alpha_steps,
                                            variant.token_shift),
            "train_seconds": result["state"]["seconds"], "tokens_seen": result["state"]["tokens_seen"],
            "wall_seconds_this_session": time.perf_counter() - t0,
            "machine": machine_info()}   # sittings may run on other CPUs: each head says where


def decode_tau(target, head, variant, prompts, max_new_tokens: int, tree,
               progress: bool = True) -> dict:
    """tau of one head decoding every prompt greedily, per prompt (the bootstrap's units).

    tau counts tokens and cycles, not seconds, so nothing here is timed and it may run beside other
    work; this CPU's speedups are the bench's business (`measure.bench`)."""
    from eagle_mini.decode import generate, prepare_prompt
    rows = []
    for p in tqdm(prompts, desc=f"tau {variant.name}", unit="prompt", disable=not progress):
        ids = prepare_prompt(target, p)
        drafter = make_drafter(head, variant, tree, ids)
        g = generate(target, head, ids, max_new_tokens, drafter=drafter)
        rows.append({k: g.stats[k] for k in ("new_tokens", "target_forwards")})
    tau, se = pooled_tau(rows)
    return {"prompts": len(rows), "max_new_tokens": max_new_tokens, "tree": str(tree),
            "tau": tau, "tau_se_over_prompts": se, "per_prompt": rows}


def _cached(path: Path, compute):
    """compute() once; its JSON result is kept at `path` and reused, as read back, by a rerun."""
    if not path.exists():
        t0 = time.perf_counter()
        value = {**compute(), "seconds": time.perf_counter() - t0}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(results_json(value, indent=1))
        tmp.replace(path)
    return json.loads(path.read_text())


def _cached_tensors(path: Path, compute):
    """compute() once (a list of tensor dicts, e.g. features); kept at `path` with torch.save."""
    if path.exists():
        return torch.load(path, weights_only=True)
    value = compute()
    tmp = path.with_suffix(".tmp")
    torch.save(value, tmp)
    tmp.replace(path)
    return value


def seeds_of(cfg: AblationConfig) -> list[int]:
    """The training seeds: cfg.seed, cfg.seed + 1, ... (cfg.seeds of them)."""
    return [cfg.seed + i for i in range(cfg.seeds)]


def _claim_work(dirs: list[Path], identity: dict) -> None:
    """Mark each directory as this run's (config.json); refuse one that holds another run."""
    for d in dirs:
        ident_path = d / "config.json"
        if ident_path.exists() and json.loads(ident_path.read_text()) != identity:
            raise EagleMiniError(f"{d} holds another run of this experiment (config.json differs); "
                                 "use another --work / --keep directory or delete it")
        d.mkdir(parents=True, exist_ok=True)
        ident_path.write_text(results_json(identity, indent=1))


class _SharedFeatures:
    """The target's features of the shared training and validation text, computed once (kept in
    `work`), and the training batches grouped by length: the same for every head."""

    def __init__(self, target, work: Path, cfg: AblationConfig, log, progress: bool):
        self.target, self.work, self.cfg, self.log, self.progress = target, work, cfg, log, progress
        self.memo, self.seconds = {}, 0.0

    def features(self, name: str, examples) -> list[dict]:
        """The rows of `examples` (named `name` in `work`), computed on first use."""
        from eagle_mini.training.features import compute_features
        if name not in self.memo:
            def compute():
                t0 = time.perf_counter()
                with tqdm(total=sum(len(e.input_ids) for e in examples), desc=f"features {name}",
                          unit="tok", unit_scale=True, disable=not self.progress) as bar:
                    rows = compute_features(self.target, examples, progress=bar)
                self.seconds += time.perf_counter() - t0
                return rows
            self.memo[name] = _cached_tensors(self.work / f"features_{name}.pt", compute)
        return self.memo[name]

    def batches(self, train_examples) -> list[list[dict]]:
        """The training rows in length-grouped batches (`length_grouped`), built on first use."""
        if "batches" not in self.memo:
            rows = self.features("train", train_examples)
            tokens = sum(len(r["input_ids"]) for r in rows)
            self.log(f"features of {len(rows)} training conversations ({tokens:,} tokens), kept in "
                     "memory for every head")
            self.memo["batches"] = length_grouped(rows, self.cfg.batch_tokens)
        return self.memo["batches"]


def _run_variant(target, v, seed: int, shared: _SharedFeatures, examples: tuple, prompts,
                 cfg: AblationConfig, work: Path, keep, draft_vocab, log, progress: bool,
                 t_start: float, probes: dict) -> dict:
    """One head with one seed: trained, its tau decoded and, with the first seed, probed (into
    `probes`); each phase kept in `work` (and `keep`) and skipped when finished earlier."""
    from eagle_mini.heads.eagle1 import DraftHead
    train_examples, val_examples = examples
    rel = Path(f"seed{seed}") / v.name
    where = work / rel
    parts = ["result.json", "tau.json"] + (["probe.json"] if seed == cfg.seed else [])
    restored = keep is not None and _restore(Path(keep) / rel, where, parts)
    log(f"--- seed {seed}, {v.label}: reads {v.reads}, predicts f_(i+1)"
        + (" (finished in an earlier sitting, kept)" if restored else
           " (finished earlier, kept)" if (where / "result.json").exists() else ""))
    run = _cached(where / "result.json", lambda: train_variant(
        target, v, shared.batches(train_examples), shared.features("val", val_examples), cfg,
        where, seed, draft_vocab, log, progress))
    last = run["epochs"][-1]
    log(f"    val top-1 {last['top1']:.3f}, 1-alpha {number(last['alpha'][1]):.3f}; "
        f"{(time.perf_counter() - t_start) / 60:.1f} min into this session")
    loaded = {}

    def head():   # loaded once, only if tau or the probe is still to do
        if "head" not in loaded:
            loaded["head"] = DraftHead.load(where / "head", target).eval()
        return loaded["head"]
    run["decode"] = _cached(where / "tau.json", lambda: decode_tau(
        target, head(), v, prompts, cfg.max_new_tokens, cfg.tree, progress))
    log(f"    tau {number(run['decode']['tau']):.3f} on {len(prompts)} prompts")
    if seed == cfg.seed:
        val = shared.features("val", val_examples)
        probes[v.name] = _cached(where / "probe.json", lambda: {
            "branches": branch_probe(target, {v.name: head()}, val, cfg.min_p, cfg.contexts),
            "entropy": error_by_entropy(target, {v.name: head()}, val, cfg.entropy_bins,
                                        cfg.analysis_tokens)})
    if keep is not None and not restored:
        _store(where, Path(keep) / rel, parts)
    return run


def _ablation_result(target, examples: tuple, prompts, cfg: AblationConfig, identity: dict,
                     runs: dict, probes: dict, features_seconds: float, command: str,
                     t_start: float) -> dict:
    """The results file: every variant's seeds, the merged probes, the paper's figures, the
    phases' seconds, the summary and the checks against the paper."""
    from eagle_mini.results import machine_info
    train_examples, val_examples = examples
    probe = merge_probes(probes)
    phases = {"features_seconds": features_seconds,
              "variant_seconds": {k: [r.get("seconds", 0.0) for r in v] for k, v in runs.items()},
              "decode_seconds": {k: [r["decode"]["seconds"] for r in v] for k, v in runs.items()},
              "probe_seconds": sum(p["seconds"] for p in probes.values())}
    variants = {v.name: {"label": v.label, "reads": v.reads, "input_mode": v.input_mode,
                         "token_shift": v.token_shift, "fc_in": runs[v.name][0]["fc_in"],
                         "parameters": runs[v.name][0]["parameters"], "seeds": runs[v.name]}
                for v in VARIANTS}
    result = {"format": FORMAT, "command": command, "target": target.name, "config": asdict(cfg),
              "data": {"train_examples": len(train_examples),
                       "train_tokens": sum(len(e.input_ids) for e in train_examples),
                       "val_examples": len(val_examples),
                       "val_tokens": sum(len(e.input_ids) for e in val_examples),
                       "prompts": len(prompts), "draft_vocab_size": identity["draft_vocab_size"]},
              "variants": variants, "uncertainty": probe,
              "paper": PAPER, "machine": machine_info(), "phase_seconds": phases,
              "elapsed_seconds": time.perf_counter() - t_start}
    result["summary"] = summarize(result)
    result["checks"] = paper_checks(result)
    return result


def run_ablation(target, train_examples, val_examples, prompts, cfg: AblationConfig, work,
                 draft_vocab=None, command: str = "", log=print, progress: bool = True,
                 keep=None) -> dict:
    """The whole experiment on featurizable examples (`.input_ids`, `.loss_mask`) and prompts
    (strings or id lists); every finished phase is kept in `work` and skipped on a rerun.

    For each seed in turn, each of the four heads is trained, decodes every prompt for tau and,
    with the first seed, runs the probes (`uncertainty.branch_probe`, `error_by_entropy`), while
    its head is at hand. Raising `seeds` later continues the same run.
    keep: a directory that receives each finished variant's JSON files (`work` may not survive
    the sitting) and seeds a new `work` with them.
    progress: bars for the features, each head's training and the decoding."""
    t_start = time.perf_counter()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    same_run = {k: v for k, v in asdict(cfg).items() if k != "seeds"}
    identity = {"format": FORMAT, "target": target.name, "config": same_run,
                "train_examples": len(train_examples), "val_examples": len(val_examples),
                "prompts": len(prompts),
                "draft_vocab_size": len(draft_vocab) if draft_vocab is not None else target.vocab_size}
    _claim_work([work] + ([Path(keep)] if keep else []), identity)
    shared = _SharedFeatures(target, work, cfg, log, progress)
    examples = (train_examples, val_examples)
    runs, probes = {v.name: [] for v in VARIANTS}, {}
    for seed in seeds_of(cfg):
        for v in VARIANTS:
            runs[v.name].append(_run_variant(target, v, seed, shared, examples, prompts, cfg, work,
                                             keep, draft_vocab, log, progress, t_start, probes))
    return _ablation_result(target, examples, prompts, cfg, identity, runs, probes,
                            shared.seconds, command, t_start)


def _restore(kept: Path, where: Path, parts: list[str]) -> bool:
    """Copy a variant's finished `parts` from `kept` into `where` when all of them are there."""
    if not all((kept / p).exists() for p in parts) or (where / parts[0]).exists():
        return False
    where.mkdir(parents=True, exist_ok=True)
    for p in parts:
        shutil.copyfile(kept / p, where / p)
    return True


def _store(where: Path, kept: Path, parts: list[str]) -> None:
    """Copy a variant's finished `parts` from `where` into `kept` (atomically, file by file)."""
    kept.mkdir(parents=True, exist_ok=True)
    for p in parts:
        tmp = kept / (p + ".tmp")
        shutil.copyfile(where / p, tmp)
        tmp.replace(kept / p)


def merge_probes(probes: dict) -> dict:
    """One probe per head (`branch_probe` / `error_by_entropy` on `{name: head}`) -> the probe of
    all heads: the contexts, bins and entropies are the target's and shared; the heads' parts are
    put side by side. `contexts_match` says whether every run picked the same contexts (it will,
    unless runs on different CPUs round the target's top-2 probabilities across `min_p`).

        >>> one = lambda n: {"branches": {"contexts": {"tokens": [[1, 2]]}, "heads": {n: 0.5}},
        ...                  "entropy": {"edges": [0, 1], "rel_error": {n: [0.1]}, "top1": {n: [1]}}}
        >>> merged = merge_probes({"a": one("a"), "b": one("b")})
        >>> merged["branches"]["heads"], merged["entropy"]["top1"], merged["contexts_match"]
        ({'a': 0.5, 'b': 0.5}, {'a': [1], 'b': [1]}, True)
    """
    first = next(iter(probes.values()))
    branches = {**first["branches"], "heads": {}}
    entropy = {**first["entropy"], "rel_error": {}, "top1": {}}
    for name, p in probes.items():
        branches["heads"][name] = p["branches"]["heads"][name]
        for k in ("rel_error", "top1"):
            entropy[k][name] = p["entropy"][k][name]
    same = all(p["branches"]["contexts"] == first["branches"]["contexts"]
               and p["entropy"]["edges"] == first["entropy"]["edges"] for p in probes.values())
    return {"branches": branches, "entropy": entropy, "contexts_match": same}


def config_for(size: str, **knobs) -> AblationConfig:
    """The size's configuration with every knob that is not None replaced."""
    return replace(SIZES[size], **{k: v for k, v in knobs.items() if v is not None})


def sharegpt_inputs(target, cfg: AblationConfig) -> dict:
    """`run_ablation`'s data for a chat target: ShareGPT train and validation conversations up to
    the configured token counts, MT-bench first turns spread over the eight categories, and the
    draft vocabulary (the most frequent assistant tokens)."""
    from eagle_mini.data import evenly_spaced, iter_conversations, mtbench_questions, read_sharegpt
    from eagle_mini.training.commands import frequent_tokens
    data = read_sharegpt()

    def split(name, n_tokens):
        return take_tokens(iter_conversations(name, target.tokenizer, cfg.max_len, data=data), n_tokens)
    return {"train_examples": split("train", cfg.train_tokens),
            "val_examples": split("validation", cfg.val_tokens),
            "prompts": [q["turns"][0] for q in evenly_spaced(mtbench_questions(), cfg.prompts)],
            "draft_vocab": frequent_tokens(target, cfg.draft_vocab, cfg.vocab_conversations)
            if cfg.draft_vocab else None}


def ablation_command(target, size: str = "full", out=None, work=None, keep=None, log=print,
                     **knobs) -> dict:
    """`experiment uncertainty`: SmolLM2 (or --model) on ShareGPT, MT-bench prompts; writes `out`
    (default runs/uncertainty.json, `results.default_out`).
    `knobs`: `AblationConfig` fields that replace the size's (None: the size's); `work` (default
    runs/uncertainty_<size>) holds checkpoints and finished parts; `keep` (default none; the
    committed full run's is data/results/uncertainty_full) receives each finished variant's JSON
    files."""
    import sys
    cfg = config_for(size, **knobs)
    work = Path(work or Path("runs") / f"uncertainty_{size}")
    log(f"experiment uncertainty, size {size}: {json.dumps(asdict(cfg))}; work dir {work}"
        + (f"; finished variants kept in {keep}" if keep else ""))
    result = run_ablation(target, cfg=cfg, work=work, **sharegpt_inputs(target, cfg),
                          command="python -m eagle_mini " + " ".join(sys.argv[1:]), log=log,
                          keep=keep or None)
    out = Path(out or default_out("uncertainty.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result, indent=1))
    log(summary_table(result))
    for row in result["checks"]:
        log(f"{'holds' if row['holds'] else 'FAILS'}: {row['claim']} (paper {row['paper']}; "
            f"here {row['ours']})")
    log(f"wrote {out} ({result['elapsed_seconds'] / 60:.1f} min this session)")
    return result


def number(x) -> float:
    """A rate read back from JSON: null (nothing to count, NaN when it was computed) is NaN again,
    so comparisons are False and formatting prints nan."""
    return float("nan") if x is None else x


def arms(result: dict, metric: str) -> dict:
    """Per variant an `intervals.Arm` of `metric`: "top1" / "alpha1" (units: validation
    conversations, from each seed's last head) or "tau" (units: prompts)."""
    from eagle_mini.measure.intervals import Arm
    out = {}
    for name, v in result["variants"].items():
        if metric == "tau":
            counts = [[[r["new_tokens"] - 1, r["target_forwards"] - 1] for r in s["decode"]["per_prompt"]]
                      for s in v["seeds"]]
        else:
            k = {"top1": 0, "alpha1": 1}[metric]
            counts = [[c[k] for c in s["val_counts"]] for s in v["seeds"]]
        out[name] = Arm(counts)
    return out


METRICS = {"top1": "top-1 (0-alpha)", "alpha1": "1-alpha", "tau": "tau"}


def summarize(result: dict) -> dict:
    """Per metric and variant: the mean over seeds, each seed's value and a bootstrap interval over
    conversations (top-1, 1-alpha) or prompts (tau); and top-1 against training tokens, per epoch,
    averaged over seeds, so a reader sees whether the gaps still open."""
    from eagle_mini.measure.intervals import interval
    out = {}
    for metric in METRICS:
        out[metric] = {}
        for name, arm in arms(result, metric).items():
            out[metric][name] = {**interval(arm), "seeds": arm.per_seed().tolist()}
    curve = {}
    for name, v in result["variants"].items():
        epochs = [s["epochs"] for s in v["seeds"]]
        curve[name] = [{"epoch": rows[0]["epoch"], "tokens_seen": rows[0]["tokens_seen"],
                        "top1": sum(r["top1"] for r in rows) / len(rows),
                        "alpha1": sum(number(r["alpha"][1]) for r in rows) / len(rows)}
                       for rows in zip(*epochs)]
    out["top1_by_tokens"] = curve
    return out


def paper_checks(result: dict, margin: float = 0.02) -> list[dict]:
    """The paper's claims about the four inputs (EAGLE Figs. 4 and 8), each decided by a paired
    bootstrap interval of a difference, pooled over seeds (`intervals.paired_difference`).

    An ordering a < b holds when the interval of b - a lies above 0; "about equal" holds when the
    interval holds 0 and lies within +-`margin` (top-1). Returns rows {"claim", "paper", "ours",
    "holds", "differences"}: each difference with its estimate and interval.
    """
    from eagle_mini.measure.intervals import about_equal, excludes_zero, paired_difference
    a = {m: arms(result, m) for m in METRICS}

    def diff(metric, lo, hi):
        return {"metric": metric, "lower": lo, "higher": hi,
                **paired_difference(a[metric][lo], a[metric][hi])}

    def show(ds):
        return "; ".join(f"{METRICS[d['metric']]} {d['higher']} - {d['lower']} = {d['estimate']:+.3f} "
                         f"[{d['low']:+.3f}, {d['high']:+.3f}]" for d in ds)

    rows = []
    for metric, paper in (("top1", "0.32 < 0.63 < 0.78 (accuracy)"),
                          ("tau", "1.5x < 1.9x < 2.8x (speedup; tau not reported)")):
        ds = [diff(metric, "token", "feature"), diff(metric, "feature", "shifted")]
        rows.append({"claim": f"{METRICS[metric]}: token only < feature only < feature & shifted token",
                     "paper": paper, "ours": show(ds), "holds": all(excludes_zero(d) for d in ds),
                     "differences": ds})
    d = diff("top1", "feature", "unshifted")
    rows.append({"claim": f"unshifted 0-alpha about feature only's (within +-{margin})",
                 "paper": "Fig. 8: about equal", "ours": show([d]),
                 "holds": about_equal(d, margin), "differences": [d]})
    d = diff("alpha1", "feature", "unshifted")
    rows.append({"claim": "unshifted 1-alpha above feature only's", "paper": "Fig. 8: higher",
                 "ours": show([d]), "holds": excludes_zero(d), "differences": [d]})
    return rows


def summary_table(result: dict) -> str:
    """Markdown: per variant top-1, 1-alpha and tau (mean over seeds, 95% bootstrap interval) and
    the paper's figures."""
    s = result["summary"]
    seeds = len(next(iter(result["variants"].values()))["seeds"])
    lines = [f"| input | fc in | val top-1 (0-alpha) | 1-alpha | tau | paper speedup / acc. |",
             "|---|---|---|---|---|---|"]

    def cell(iv):
        return f"{number(iv['estimate']):.3f} [{number(iv['low']):.3f}, {number(iv['high']):.3f}]"
    for name, v in result["variants"].items():
        p = result["paper"][name]
        paper = f"{p['speedup']}x / {p['accuracy']}" if "speedup" in p else p["note"]
        lines.append(f"| {v['label']} | {v['fc_in']} | {cell(s['top1'][name])} | "
                     f"{cell(s['alpha1'][name])} | {cell(s['tau'][name])} | {paper} |")
    lines.append(f"\nMean over {seeds} seed(s); 95% bootstrap intervals over validation "
                 f"conversations (top-1, 1-alpha) and over {result['data']['prompts']} MT-bench "
                 "prompts (tau).")
    return "\n".join(lines)
