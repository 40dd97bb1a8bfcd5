"""The 7B dress rehearsal: every command a GPU user runs, end to end, on a 7B-shaped target.

No 7B weights reach this machine, but a 7B-shaped Llama does. It is built once, with a fixed seed,
random bf16 weights and SmolLM2's tokenizer and chat template (vocabulary 49,152), and saved as
safetensors in `DIR/model`; every step then runs the real CLI in a child process with
`--model DIR/model --dtype bf16`, one copy of the target per step (no `--feature-dtype`):

    build -> dump-features -> train-head (stopped, resumed; uninterrupted) -> eval-head -> export
          -> the same for an EAGLE-3 head (dump-features --eagle3, train-head --kind eagle3)
          -> generate --json: vanilla, eagle2, eagle3 (greedy) -> first difference -> profile-target

Each step's wall time and the child's own peak RSS (`os.wait4`) sit beside `training_plan`'s
prediction. A finished step leaves `DIR/steps/<name>.json` and is never rerun, so a killed
rehearsal resumes where it stopped and a rerun rebuilds nothing.

What it leaves out: acceptance. With random weights it proves that the path runs, keeps its
dtypes, survives a resume and what it costs; not what a trained head accepts.

    >>> rehearse("tiny", "runs/rehearsal_tiny", "rehearsal_tiny.json", threads=1)  # doctest: +SKIP
"""
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle_mini.heads import HEAD_KINDS
from eagle_mini.heads.eagle3 import KIND as EAGLE3_KIND
from eagle_mini.methods import EAGLE2, EAGLE3, VANILLA, method
from eagle_mini.errors import EagleMiniError
from eagle_mini.results import default_out, machine_info, results_json

DONOR = "smollm2-135m"   # lends its tokenizer, chat template and special-token ids
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
        "num_attention_heads": 4, "num_key_value_heads": 4}   # for tests: the whole path, small
BUDGET_GB = 24 * 2**30 / 1e9   # the machine a GPU user rents: `24` GiB
KINDS = HEAD_KINDS
# How `rehearse` runs its own steps as child processes, measured like the CLI's other steps.
STEP = [sys.executable, "-m", "eagle_mini", "rehearse-step"]
METHODS = (VANILLA, EAGLE2, EAGLE3)


def configs() -> tuple[str, ...]:
    from eagle_mini.models import BIG_CONFIGS
    return ("tiny", *BIG_CONFIGS)


@dataclass(frozen=True)
class Sizes:
    """How much each step does. Planned for 7B on 2 cores with bf16 units (a forward's measured
    cost is in data/results/rehearsal_vicuna-7b.json, `cost_curve`): a step takes a minute or a
    few. Without them (AVX2 only) bf16 matmuls are emulated, many times slower per token."""
    conversations: int = 2     # dump-features: ShareGPT train conversations
    max_len: int = 192         # their tokens at most (dump, train, eval): a few hundred in all
    steps: int = 4             # train-head: one conversation per optimizer step
    stop_after: int = 2        # the first call stops here; the same command then finishes
    lr: float = 3e-4           # notebook 03's 7B rate; the 135M head's 3e-3 diverged at 7B shape
    #                            within a few steps (the loss blew up, first run), hence default_lr
    draft_vocab: int = 8192    # EAGLE-3 head's draft vocabulary (0: the whole vocabulary)
    eval_text: int = 1         # eval-head: teacher-forced test conversations
    eval_prompts: int = 2      # eval-head: MT-bench first turns decoded with EAGLE-2
    eval_tokens: int = 16
    gen_prompts: int = 2       # generate: greedy vanilla / eagle2 / eagle3 on MT-bench
    gen_tokens: int = 32
    prefix_len: int = 128      # profile-target, n = 1 ... 64
    repeats: int = 3


# tiny: fewer steps and prompts, and the whole vocabulary for EAGLE-3 (`frequent_tokens` reads
# 2,000 conversations per call, and three calls would dominate a test)
SIZES = {"tiny": Sizes(max_len=128, steps=2, stop_after=1, draft_vocab=0, gen_prompts=1,
                       prefix_len=32, repeats=1)}


def model_config(config_name: str, donor_dir):
    """The named shape with the donor's vocabulary size and special-token ids."""
    from transformers import AutoConfig
    from eagle_mini.models import big_config, tiny_config
    donor = AutoConfig.from_pretrained(donor_dir)
    ids = {"vocab_size": donor.vocab_size, "bos_token_id": donor.bos_token_id,
           "eos_token_id": donor.eos_token_id, "pad_token_id": donor.pad_token_id}
    if config_name == "tiny":
        return tiny_config("llama", **TINY, max_position_embeddings=4096, **ids)
    return big_config(config_name, **ids)


def build_model(config_name: str, out_dir, seed: int = 0) -> dict:
    """Random bf16 weights from `seed` and the donor's tokenizer, saved once into `out_dir`.

    Written into `out_dir.partial` and renamed at the end: a directory with `build.json` is
    complete and kept as it is (-> its build record); a killed build leaves nothing half-made."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from eagle_mini.models import resolve
    from eagle_mini.target import Target
    from eagle_mini.training.features import target_fingerprint
    out = Path(out_dir)
    if (out / "build.json").exists():
        return json.loads((out / "build.json").read_text())
    donor = resolve(DONOR)
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(config_name, donor), dtype=torch.bfloat16,
                                             attn_implementation="sdpa")
    model.generation_config = GenerationConfig.from_pretrained(donor)   # EOS = <|im_end|>
    built = time.perf_counter() - start
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, max_shard_size="2GB")   # a shard is copied in memory to be written
    AutoTokenizer.from_pretrained(donor).save_pretrained(tmp)
    info = {"config": config_name, "seed": seed, "dtype": "bfloat16", "tokenizer": DONOR,
            "parameters": sum(p.numel() for p in model.parameters()),
            "fingerprint": target_fingerprint(Target(model)),
            "build_seconds": built, "save_seconds": time.perf_counter() - start - built,
            "bytes": sum(f.stat().st_size for f in tmp.iterdir())}
    (tmp / "build.json").write_text(results_json(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return info


def shown(argv) -> str:
    """A child's command line as a user types it."""
    return shlex.join(["python", *argv[1:]] if argv[0] == sys.executable else argv)


def run_step(root, name: str, argv, log=print) -> dict:
    """Run `argv` as a child process unless `root/steps/name.json` says it finished.

    -> {"command", "seconds", "peak_rss_gb", "cpu_seconds", "ran": whether it ran now}.
    `os.wait4` gives the child's own resource use (RUSAGE_CHILDREN would mix all children);
    its stdout and stderr go to `root/logs/name.out` and `.err`."""
    root, argv = Path(root), [str(a) for a in argv]
    record = root / "steps" / f"{name}.json"
    if record.exists():
        return {**json.loads(record.read_text()), "ran": False}
    (root / "logs").mkdir(parents=True, exist_ok=True)
    log(f"[{name}] {shown(argv)}")
    with open(root / "logs" / f"{name}.out", "w") as out, \
            open(root / "logs" / f"{name}.err", "w") as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
    if child.returncode:
        lines = (root / "logs" / f"{name}.err").read_text().strip().splitlines() or ["(no stderr)"]
        raise EagleMiniError(f"rehearsal step {name} failed with exit code {child.returncode}: "
                             f"{lines[-1]} (log: {root / 'logs' / name}.err)")
    result = {"command": shown(argv), "seconds": round(seconds, 2),
              "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9,   # Linux reports kilobytes
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2)}
    record.parent.mkdir(exist_ok=True)
    record.write_text(results_json(result))
    return {**result, "ran": True}


def compare_heads(a, b) -> dict:
    """The same head trained twice (`train-head` work directories): are the weights equal?

    Both the checkpoints' weights (the dtype they train in) and the saved heads are compared
    tensor by tensor, and the loss of every step beside them."""
    import torch
    from safetensors import safe_open
    ca, cb = (torch.load(Path(w) / "work" / "ckpt" / "state.pt", mmap=True, weights_only=True,
                         map_location="cpu")["head"] for w in (a, b))
    pairs = [(ca[k], cb.get(k)) for k in sorted(ca)]
    with safe_open(Path(a) / "head" / "model.safetensors", "pt") as fa, \
            safe_open(Path(b) / "head" / "model.safetensors", "pt") as fb:
        saved = [(fa.get_tensor(k), fb.get_tensor(k) if k in fb.keys() else None)
                 for k in sorted(fa.keys())]
    same = all(y is not None and torch.equal(x, y) for x, y in pairs + saved)
    worst = max(((x.float() - y.float()).abs().max().item() for x, y in pairs + saved
                 if y is not None and x.shape == y.shape), default=0.0)
    losses = [[json.loads(r)["loss"] for r in (Path(w) / "work" / "log.jsonl").read_text()
               .splitlines()] for w in (a, b)]
    return {"identical": same and set(ca) == set(cb), "max_abs_difference": worst,
            "tensors": len(pairs), "checkpoint_dtype": str(pairs[0][0].dtype).replace("torch.", ""),
            "saved_dtype": next(str(x.dtype).replace("torch.", "") for x, _ in saved
                                if x.is_floating_point()),
            "losses_resumed": losses[0], "losses_uninterrupted": losses[1]}


def first_differences(model_dir, dtype: str, generations: dict) -> dict:
    """Per EAGLE method, where its greedy text parts from vanilla's and how close the choice was
    (`bench.first_difference_margins`, one forward per parting prompt); None when all equal.
    generations: {"prompt_ids": [...], "vanilla": [ids, ...], method: [ids, ...], ...}."""
    from eagle_mini.models import load_target
    from eagle_mini.measure.bench import first_difference_margins, vanilla_top2_gaps
    target = load_target(str(model_dir), dtype=dtype)
    prompts, vanilla = generations["prompt_ids"], generations[VANILLA]
    gaps = vanilla_top2_gaps(target, prompts, vanilla)
    return {m: first_difference_margins(target, prompts, outs, vanilla, gaps)
            for m, outs in generations.items() if m not in ("prompt_ids", VANILLA)}


def greedy_summary(generations: dict) -> dict:
    """Per EAGLE method: prompts whose greedy output equals vanilla's, and the share of vanilla's
    tokens produced before the first difference."""
    from eagle_mini.measure.bench import common_prefix
    vanilla = generations[VANILLA]
    out = {}
    for m, outs in generations.items():
        if m in ("prompt_ids", VANILLA):
            continue
        out[m] = {"identical_prompts": sum(a == b for a, b in zip(outs, vanilla)),
                  "prompts": len(vanilla),
                  "prefix_agreement": (sum(common_prefix(a, b) for a, b in zip(outs, vanilla))
                                       / max(sum(len(b) for b in vanilla), 1))}
    return out


def _warn_without_bf16_units(config: str, log) -> None:
    """A 7B-shaped rehearsal planned for bf16 matrix units warns where the CPU lacks them."""
    features = machine_info().get("cpu_features", [])
    if config != "tiny" and not {"avx512_bf16", "amx_bf16"} & set(features):
        log(f"warning: this CPU ({', '.join(features) or 'no listed features'}) has no bf16 "
            "matrix units (avx512_bf16, amx_bf16): bf16 matmuls are emulated, and every step "
            "that computes takes ~10-40x longer than the sizes here were planned for")


def _head_steps(step, root: Path, kind: str, load: list, size: Sizes, seed: int) -> None:
    """One head kind's steps: dump-features, train-head (stopped, resumed; uninterrupted),
    eval-head and export."""
    cli = [sys.executable, "-m", "eagle_mini"]
    feats, head = root / f"features_{kind}", root / f"train_{kind}" / "head"
    step(f"dump_{kind}", [*cli, "dump-features", *load, "--max-conversations",
                          size.conversations, "--max-len", size.max_len, "--out", feats,
                          *(["--eagle3"] if kind == EAGLE3_KIND else [])])
    train = [*cli, "train-head", *load, "--features", feats, "--kind", kind, "--steps",
             size.steps, "--warmup", 0, "--lr", size.lr, "--batch-tokens", 1,
             "--max-len", size.max_len, "--eval-conversations", 1, "--seed", seed,
             *(["--draft-vocab", size.draft_vocab] if kind == EAGLE3_KIND and size.draft_vocab
               else [])]
    for name, run in (("stopped", f"train_{kind}"), ("resumed", f"train_{kind}"),
                      ("uninterrupted", f"train_{kind}_uninterrupted")):
        stop = ["--stop-after", size.stop_after] if name != "uninterrupted" else []
        step(f"train_{kind}_{name}", [*train, "--out", root / run / "head",
                                      "--work", root / run / "work", *stop])
    step(f"eval_{kind}", [*cli, "eval-head", *load, "--head", head, "--n-text", size.eval_text,
                          "--max-len", size.max_len, "--n-prompts", size.eval_prompts,
                          "--max-new-tokens", size.eval_tokens,
                          "--out", root / f"eval_{kind}.json"])
    step(f"export_{kind}", [*cli, "export", *load, "--head", head,
                            "--out", root / f"export_{kind}"])


def _generate_steps(step, root: Path, load: list, size: Sizes) -> dict:
    """`generate --json` per MT-bench prompt and method; their greedy agreement with vanilla,
    with the first difference measured (a step of its own) where a method parts from it."""
    from eagle_mini.data import evenly_spaced, mtbench_prompts
    cli = [sys.executable, "-m", "eagle_mini"]
    prompts = evenly_spaced(mtbench_prompts(), size.gen_prompts)
    generations = {m: [] for m in ("prompt_ids", *METHODS)}
    exact = {m: [] for m in METHODS}
    for i, prompt in enumerate(prompts):
        for m in METHODS:
            heads = [] if m == VANILLA else [
                "--head", root / f"train_{method(m).head}" / "head"]
            step(f"generate_{m}_{i}", [*cli, "generate", *load, "--prompt", prompt, "--method", m,
                                       *heads, "--max-new-tokens", size.gen_tokens, "--json"])
            gen = json.loads((root / "logs" / f"generate_{m}_{i}.out").read_text())
            generations[m].append(gen["output_ids"])
            exact[m].append(gen.get("exact"))
        generations["prompt_ids"].append(gen["prompt_ids"])
    greedy = greedy_summary(generations)
    for m in greedy:   # whether its tree forwards ran exact mode (bit-identical to one-token steps)
        greedy[m]["exact"] = all(exact[m])
    if any(g["identical_prompts"] < g["prompts"] for g in greedy.values()):
        (root / "generations.json").write_text(json.dumps(generations))
        step("first_difference", [*STEP, "first-difference", *load,
                                  "--generations", root / "generations.json",
                                  "--out", root / "first_difference.json"])
        for m, d in json.loads((root / "first_difference.json").read_text()).items():
            greedy[m]["first_difference"] = d
    return greedy


def _plan_steps(root: Path, shape: dict, size: Sizes, steps: dict) -> tuple[dict, dict]:
    """(feature token counts, training_plan) per head kind; each step gains its predicted memory
    and its peak RSS minus that prediction."""
    from eagle_mini.training.commands import training_plan
    tokens = {k: json.loads((root / f"features_{k}" / "manifest.json").read_text())["counts"]
              for k in KINDS}
    plan = {k: training_plan(shape, tokens[k]["tokens"], kind=k,
                             draft_vocab=(size.draft_vocab or None) if k == EAGLE3_KIND else None)
            for k in KINDS}
    for name, s in steps.items():
        kind = next((k for k in KINDS if name.startswith(f"train_{k}")), None)
        s["predicted_gb"] = plan["eagle1"]["target_bf16_gb"] + (
            plan[kind]["head_adamw_fp32_gb"] if kind else 0.0)
        s["rss_minus_predicted_gb"] = s["peak_rss_gb"] - s["predicted_gb"]
    return tokens, plan


def _rehearsal_result(config: str, seed: int, size: Sizes, command, threads, root: Path,
                      build: dict, steps: dict, greedy: dict, out: Path) -> dict:
    """The results file's record of a finished rehearsal, read back from what its steps left."""
    model = root / "model"
    shape = json.loads((model / "config.json").read_text())
    tokens, plan = _plan_steps(root, shape, size, steps)
    curve = json.loads((root / "cost_curve.json").read_text())
    peak = max(s["peak_rss_gb"] for s in steps.values())
    return {
        "what": "7B dress rehearsal: the commands a GPU user runs, each a child process, on a "
                f"{config}-shaped Llama with RANDOM WEIGHTS (bf16, seed {seed}) and SmolLM2's "
                "tokenizer. It proves that the path runs, what it costs and that a resume "
                "matches an uninterrupted run; it says nothing about what a trained head accepts.",
        "random_weights": True, "config": config, "seed": seed, "sizes": asdict(size),
        "command": command,
        "machine": {**machine_info(), "threads": threads or machine_info()["threads"]},
        "model": {"dir": str(model), **build,
                  "shape": {k: shape[k] for k in ("hidden_size", "intermediate_size",
                                                  "num_hidden_layers", "num_attention_heads",
                                                  "num_key_value_heads", "vocab_size")}},
        "features": tokens, "plan": plan, "steps": steps,
        "predicted": "training_plan: the target in bf16, plus the head with fp32 AdamW (16 bytes "
                     "a parameter) in train-head steps; peak RSS adds Python, torch and activations",
        "resume": {k: compare_heads(root / f"train_{k}", root / f"train_{k}_uninterrupted")
                   for k in KINDS},
        "eval": {k: json.loads((root / f"eval_{k}.json").read_text()) for k in KINDS},
        "greedy": greedy,
        "export": {k: sorted(p.name for p in (root / f"export_{k}").iterdir()) for k in KINDS},
        "cost_curve": {k: curve[k] for k in ("ns", "median_ms", "relative", "head_median_ms",
                                             "prefix_len", "repeats")},
        "peak_rss_gb": peak, "budget_gb": BUDGET_GB, "fits_budget": peak < BUDGET_GB,
        "seconds": sum(s["seconds"] for s in steps.values()),
        "orchestrator_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "ran_now": [n for n, s in steps.items() if s["ran"]], "out": str(out),
    }


def rehearse(config: str = "vicuna-7b", root=None, out=None, seed: int = 0,
             threads: int | None = None, command: str | None = None, log=print) -> dict:
    """Run (or resume) the whole rehearsal and write its results JSON to `out` (default
    runs/rehearsal_<config>.json, `results.default_out`); `root` (default runs/rehearsal_<config>) holds the
    model, features, heads, logs and step records. `command`: the command line, for the file."""
    if config not in configs():
        raise EagleMiniError(f"unknown rehearsal config {config!r}; known: {', '.join(configs())}")
    root = Path(root or f"runs/rehearsal_{config}")
    out = Path(out or default_out(f"rehearsal_{config}.json"))
    size = SIZES.get(config, Sizes())
    _warn_without_bf16_units(config, log)
    model = root / "model"
    load = ["--model", model, "--dtype", "bf16", *(["--threads", threads] if threads else [])]
    steps = {}

    def step(name, argv):
        steps[name] = run_step(root, name, argv, log)

    step("build", [*STEP, "build", "--config", config, "--dir", model,
                   "--seed", seed])
    build = json.loads((model / "build.json").read_text())
    for kind in KINDS:
        _head_steps(step, root, kind, load, size, seed)
    greedy = _generate_steps(step, root, load, size)
    step("profile", [sys.executable, "-m", "eagle_mini", "profile-target", *load,
                     "--prefix-len", size.prefix_len, "--repeats", size.repeats, "--max-n", 64,
                     "--with-head", "--out", root / "cost_curve.json"])
    result = _rehearsal_result(config, seed, size, command, threads, root, build, steps, greedy,
                               out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(results_json(result))
    return result
