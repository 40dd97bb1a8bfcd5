"""The course at `gpu` scale (`EAGLE_MINI_SCALE=gpu`): a real 7-8B target on a CUDA GPU.

Notebook 03 dumps the target's features for a chosen number of ShareGPT conversations, trains an
EAGLE-1 and an EAGLE-3 head on them, resumably, and measures tau (`train_heads`, `head_taus`).
Notebook 06 benches the target with the table and plot of the CPU bench (`gpu_bench`): vanilla, HF
`generate`, HF prompt lookup, HF assisted generation with a small draft model of the same family,
EAGLE-1, EAGLE-2 and EAGLE-3 with the authors' released heads, and the learner's own heads. All of
it is the package's own code, the same calls the CPU path and the command line make
(`training.features.dump_target`, `training.commands.train_command`, `measure.evaluate.tau_on`,
`measure.bench.bench`); this module only chooses what to run for a target.

The target is `EAGLE_MINI_TARGET` (`course.gpu_target`): a course name, a hub id or a local model
directory. What a learner needs to know about one, `target_facts` says:

* **memory**: a target's weights take 2 bytes per parameter in bf16, so by the GPUs' spec sheets
  (assumed) an 8B model's weights fill a T4 and fit an L4, A10 or A100 (`fit_table` computes it);
  `check_fits` stops with one line before a load that cannot fit;
* **chat template**: Vicuna v1.3's tokenizer has none; the package gives it FastChat's Vicuna v1.1
  format (`models.VICUNA_TEMPLATE`), the one the authors trained their Vicuna heads with;
* **access**: Llama 3.x is gated: accept the licence on its hub page, then `hf auth login` or
  `HF_TOKEN`. A gated model without a token, an unreachable hub and CUDA out of memory each end in
  one line (`models.load_error`), for targets, heads and draft models alike (`fetch`).

Nothing here has run on a real 7-8B model: no such weights reach this repository's machines. The
tests run every function on tiny random Llama-3.1-style (`rope_scaling` llama3, theta 500000) and
Qwen2 targets saved to a directory, on the CPU (`tests/test_gpu_scale.py`).
"""
import json
from pathlib import Path

import torch

from eagle_mini.course.gpu_fit import device_dtype
from eagle_mini.errors import EagleMiniError
from eagle_mini.heads import load_head
from eagle_mini.measure.bench import Variant, bench
from eagle_mini.methods import (EAGLE, EAGLE2, EAGLE3, HF_COMPILED, HF_GENERATE, HF_PROMPT_LOOKUP,
                                VANILLA)
from eagle_mini.models import (KNOWN_TARGETS, VICUNA_TEMPLATE, known_spec, load_error, load_target,
                               resolve)
from eagle_mini.runtime.exact import use_exact

# Per target (its hub id): the authors' released heads and a small draft model of the same family
# (same tokenizer) for HF assisted generation. `gated`: the hub asks for an accepted licence.
RELEASED = {
    "lmsys/vicuna-7b-v1.3": {"eagle1": "yuhuili/EAGLE-Vicuna-7B-v1.3", "eagle3": None,
                             "assistant": "double7/vicuna-68m", "gated": False},
    "meta-llama/Llama-3.1-8B-Instruct": {"eagle1": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                                         "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                         "assistant": "meta-llama/Llama-3.2-1B-Instruct",
                                         "gated": True},
    "Qwen/Qwen2.5-1.5B-Instruct": {"eagle1": None, "eagle3": None,
                                   "assistant": "Qwen/Qwen2.5-0.5B-Instruct", "gated": False},
}
# GPU memory from the vendors' spec sheets: ASSUMED figures, not measured here.
GPU_MEMORY_GB = {"T4 (Colab's free GPU)": 16, "L4": 24, "A10 / A10G": 24, "A100 40GB": 40,
                 "A100 80GB": 80, "H100": 80}
# An ASSUMED allowance beside the weights: the CUDA context, the KV cache of a 2k-token
# conversation and the tree's activations.
OVERHEAD_GB = 2.0
# The methods of the GPU table drafted with the authors' heads (EAGLE-1's tree and EAGLE-2's with
# the EAGLE-1 head, EAGLE-3's with its own), after the peers.
PEERS = (VANILLA, HF_GENERATE, HF_COMPILED, HF_PROMPT_LOOKUP)
# A text that parts from vanilla's at a position whose top-1 - top-2 gap is among vanilla's
# smallest this share is a near-tie (reduced-precision rounding), not a wrong acceptance.
TIE_SHARE = 0.05


def released_for(name: str) -> dict:
    """The `RELEASED` entry of a target by course name, hub id or a local directory named like the
    hub id's last part (`/content/vicuna-7b-v1.3`); {} for a target without released heads.

        >>> released_for("vicuna-7b")["eagle1"]
        'yuhuili/EAGLE-Vicuna-7B-v1.3'
        >>> released_for("/content/Llama-3.1-8B-Instruct")["gated"], released_for("my/model")
        (True, {})
    """
    where = KNOWN_TARGETS.get(name, {}).get("hub", name)
    if where in RELEASED:
        return RELEASED[where]
    last = Path(where).name.lower()
    return next((v for k, v in RELEASED.items() if k.split("/")[-1].lower() == last), {})


def fetch(repo_or_dir: str) -> Path:
    """A head's or model's local directory: as given, or a hub snapshot (downloaded once, then
    cached); a gated repo without a login, an unknown name or no network ends in one line."""
    if Path(repo_or_dir).is_dir():
        return Path(repo_or_dir)
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(repo_or_dir))
    except Exception as e:  # noqa: BLE001 - sorted by load_error; anything else is re-raised
        error = load_error(repo_or_dir, repo_or_dir, "bf16", e)
        if error is None:
            raise
        raise error from None


def parameters(name: str) -> int:
    """A target's parameter count from its config alone (built on the `meta` device)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    where = resolve(name)
    try:
        config = AutoConfig.from_pretrained(where)
    except Exception as e:  # noqa: BLE001
        error = load_error(name, where, "bf16", e)
        if error is None:
            raise
        raise error from None
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def fit_table(params: int, bytes_per_param: int = 2) -> list[dict]:
    """Per GPU of `GPU_MEMORY_GB` (spec sheets, assumed): the weights' size and whether they fit
    with `OVERHEAD_GB` beside them. Computed, not measured.

        >>> [r["fits"] for r in fit_table(8_030_000_000)][:3]
        [False, True, True]
    """
    weights = params * bytes_per_param / 1e9
    return [{"GPU": gpu, "memory GB (spec sheet, assumed)": mem, "weights GB": weights,
             "fits": weights + OVERHEAD_GB <= mem} for gpu, mem in GPU_MEMORY_GB.items()]


def check_fits(name: str, params: int, dtype="bf16", device_bytes: int | None = None) -> None:
    """Stop with one line when `name`'s weights in `dtype` cannot fit the GPU's memory
    (`device_bytes`, default the current CUDA device's total) beside `OVERHEAD_GB`."""
    from eagle_mini.models import torch_dtype
    if device_bytes is None:
        device_bytes = torch.cuda.get_device_properties(0).total_memory
    need = params * torch_dtype(dtype).itemsize
    if need + OVERHEAD_GB * 1e9 > device_bytes:
        size = torch_dtype(dtype).itemsize
        fit = ", ".join(r["GPU"] for r in fit_table(params, size) if r["fits"])
        raise EagleMiniError(f"{name} needs {need / 1e9:.1f} GB for its weights in {dtype} and this "
                             f"GPU has {device_bytes / 1e9:.1f} GB: use a GPU with more memory "
                             f"({fit or 'none of the listed ones'}), or a smaller target")


def target_facts(name: str) -> dict:
    """What a learner needs to know before loading `name`: where it comes from, its chat template,
    whether it is gated, the authors' heads and the assisted-generation draft for it."""
    where = resolve(name)
    entry = released_for(name)
    if known_spec(name, where).get("chat_template") == VICUNA_TEMPLATE:
        template = ("none in its tokenizer: the package sets FastChat's Vicuna v1.1 format "
                    "(models.VICUNA_TEMPLATE), the authors' for their Vicuna heads")
    else:
        template = ("its tokenizer's own; a tokenizer without one stops with a one-line error "
                    "(set target.tokenizer.chat_template)")
    gated = entry.get("gated", False)
    return {"target": name, "loads from": where, "chat template": template,
            "access": ("gated: accept the licence on its hub page, then `hf auth login` or HF_TOKEN"
                       if gated else "open (a local directory, or a hub id anyone can download)"),
            "authors' EAGLE-1 head": entry.get("eagle1") or "none known to the package",
            "authors' EAGLE-3 head": entry.get("eagle3") or "none known to the package",
            "assisted-generation draft": entry.get("assistant") or "none known to the package"}


def load_gpu_target(name: str, dtype: str | None = None, device: str = "cuda"):
    """`load_target` after `check_fits` on a CUDA device; its one-line errors otherwise. `dtype`
    None: the device's (`gpu_fit.device_dtype`: bf16 with bf16 units, else fp16)."""
    dtype = dtype or device_dtype(device)
    if torch.device(device).type == "cuda":
        check_fits(name, parameters(name), dtype)
    return load_target(name, dtype=dtype, device=device)


def released_heads(target, name: str | None = None, heads: dict | None = None) -> dict:
    """{kind: head} of the authors' heads for `target`: `heads` ({kind: hub id or directory}) or
    the `RELEASED` entry of `name`; each fetched (`fetch`) and loaded through the package's import
    of the authors' formats (`heads.load_head`)."""
    wanted = heads if heads is not None else {
        k: v for k, v in released_for(name or target.name).items() if k in ("eagle1", "eagle3")}
    return {kind: load_head(fetch(src), target) for kind, src in wanted.items() if src}


def train_heads(target, work, conversations: int, max_len: int = 2048, steps: int = 2000,
                batch_tokens: int = 8192, kinds=("eagle1", "eagle3"), lr: float | None = None,
                stop_after: int | None = None, eval_conversations: int = 20,
                draft_vocab: dict | None = None, progress: bool = True, log=print) -> dict:
    """Notebook 03 at gpu scale: dump the features of `conversations` ShareGPT train conversations
    once (the layers EAGLE-3 reads too), then train a head of each kind on the dump with
    `train_command`, the code of `train-head --features`.

    Resumable throughout: a rerun verifies the dump's shards instead of recomputing them, and each
    head continues from its checkpoint in `work/train_<kind>`; `stop_after` caps the optimizer
    steps of this call, so a run longer than a Colab session is finished by running it again.
    `draft_vocab` ({kind: size}, 0 for the full vocabulary). -> {kind: {"dir", "done", "state",
    "eval"}}; a finished head is in `work/head_<kind>`."""
    from eagle_mini.training.commands import TrainHeadCommand, train_command
    from eagle_mini.training.features import dump_target
    work = Path(work)
    dump = work / "features"
    dump_target(target, target.name, "train", conversations, max_len, str(dump),
                batch_tokens=batch_tokens, progress=progress, eagle3="eagle3" in kinds)
    out = {}
    for kind in kinds:
        cmd = TrainHeadCommand(out=str(work / f"head_{kind}"), features=str(dump),
                               work=str(work / f"train_{kind}"), kind=kind, steps=steps,
                               warmup=max(1, steps // 20), batch_tokens=batch_tokens,
                               max_len=max_len, lr=lr, stop_after=stop_after,
                               draft_vocab=(draft_vocab or {}).get(kind, 0),
                               mixed_precision="auto", eval_conversations=eval_conversations,
                               ckpt_every=max(1, min(100, steps // 4)))
        result = train_command(cmd, target, log=log)
        out[kind] = {"dir": cmd.out, "done": result["state"]["step"] >= steps,
                     "state": result["state"], "eval": result["eval"]}
    return out


def head_taus(target, heads: dict, n_prompts: int = 10, max_new_tokens: int = 128,
              progress: bool = True) -> dict:
    """{label: pooled MT-bench tau with its standard error} of each head (`measure.evaluate.tau_on`,
    EAGLE-2's tree), greedy."""
    from eagle_mini.measure.evaluate import tau_on
    return {label: tau_on(target, head, "mtbench", n_prompts, max_new_tokens, progress=progress)
            for label, head in heads.items()}


def gpu_bench(target, released: dict, own: dict | None = None, assistant=None,
              assistant_name: str = "", n: int = 10, max_new_tokens: int = 128,
              exact: str = "auto", progress: bool = True, **bench_kw) -> dict:
    """Notebook 06's GPU table: `bench` with the peers, EAGLE-1 (`eagle`) and EAGLE-2 (`eagle2`)
    drafted by the authors' EAGLE-1 head and `eagle3` by their EAGLE-3 head (`released`, {kind:
    head}), HF assisted generation with `assistant` (a Target of the same tokenizer) and the
    learner's heads (`own`, {kind: head}, each on EAGLE-2's tree), all interleaved in one run.

    `exact`: the target's exact mode (`runtime.exact.use_exact`; "auto" turns it on in reduced
    precision where its self-check passes on this device). Where it is off, `greedy_identity`
    says how close each text is to vanilla's."""
    use_exact(target, exact)
    methods = list(PEERS)
    if "eagle1" in released:
        methods += [EAGLE, EAGLE2]
    if "eagle3" in released:
        methods.append(EAGLE3)
    variants = []
    if assistant is not None:
        variants.append(Variant("hf-assisted", HF_GENERATE,
                                hf_options={"assistant_model": assistant.model},
                                note="HF assisted generation, draft model "
                                     + (assistant_name or assistant.name)))
    for kind, head in (own or {}).items():
        variants.append(Variant(f"{EAGLE3 if kind == 'eagle3' else EAGLE2} (your head)",
                                EAGLE3 if kind == "eagle3" else EAGLE2, head=head,
                                note=f"the learner's {kind} head (notebook 03)"))
    note = ", ".join(f"authors' {k} head" for k in released) or "no released head"
    return bench(target, dict(released) or None, methods=methods,
                 n=n, max_new_tokens=max_new_tokens, progress=progress, head_note=note,
                 variants=variants, **bench_kw)


def greedy_identity(result) -> dict:
    """Per method of a greedy bench: "identical" (every text equals vanilla's), "identical up to
    bf16 ties (k/n prompts identical)" where texts part only at near-ties (the parting gap is among
    vanilla's smallest `TIE_SHARE` of gaps: rounding, not a wrong acceptance), else "DIFFERS"."""
    out = {}
    for m, r in result["methods"].items():
        if r["equal_to_vanilla"]:
            exact = (result.get("exact") or {}).get("exact")
            out[m] = "identical" + (" (exact mode)" if exact else "")
            continue
        first = r.get("first_difference") or {}
        ties = all(s <= TIE_SHARE for s in first.get("share_of_vanilla_gaps_at_most_margin", [1.0]))
        count = f"{r['identical_prompts']}/{result['n']} prompts identical"
        out[m] = (f"identical up to {result['dtype']} ties ({count})" if ties
                  else f"DIFFERS ({count})")
    return out


def committed_benches(gpu_dir) -> list[dict]:
    """The GPU benches committed under `gpu_dir` (`data/results/gpu/bench_*/bench.json`), each with
    its folder's name as `source`; [] where there is none."""
    return [json.loads(p.read_text()) | {"source": p.parent.name}
            for p in sorted(Path(gpu_dir).glob("bench_*/bench.json"))]


def plot_speedups(result, ax) -> None:
    """The CPU bench's bar chart of a run: speedup over vanilla in the same run, one bar a row."""
    speed = {m: r["speedup"] for m, r in result["methods"].items()}
    ax.bar(list(speed), list(speed.values()),
           color=["C2" if s > 1 else "C7" for s in speed.values()])
    ax.axhline(1, color="black", lw=0.8)
    ax.tick_params(axis="x", rotation=20)
    where = result["machine"].get("gpu") or result["machine"]["cpu"]
    ax.set(ylabel="speedup over vanilla (same run)",
           title=f"{result['target']} {result['dtype']} on {where}, {result['dataset']} "
                 f"n={result['n']}, {result['max_new_tokens']} tokens, greedy")
    ax.title.set_fontsize(9)
