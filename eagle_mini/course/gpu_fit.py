"""Which card runs which `gpu` scale, and whether a step fits before it starts.

Three card classes, each a `CardScale` (`SCALES`): what a learner most often has, free Colab's T4,
then a mid-size card (L4, A10) and an A100. Each names its target, the heads notebook 03 trains and
the run's size. `card_scale` picks the class from the GPU at hand (or `EAGLE_MINI_GPU_SCALE`), and
`device_dtype` the precision: bf16 where the card has bf16 units, fp16 otherwise (a T4, Turing,
has none; `torch.cuda.is_bf16_supported()` without `including_emulation=False` says yes there).

The arithmetic is computed from the model's config, never measured here (`needs`): the weights;
the KV cache of one conversation; the draft heads (built on the `meta` device from the same config,
so their sizes are the package's own), and the copies the EAGLE-1 head's lean decoding step makes
of its layer's q/k/v and gate/up weights; a tree's activations (its logits in fp32 dominate); for
training, a head's fp32 weights, gradients and AdamW's two moments, and a batch's logits with their
gradient; the feature dump's disk per conversation (EAGLE-1 keeps the last layer's feature, H
values per token; EAGLE-3 adds the three layers its head reads, 4H in all). The figures marked
ASSUMED are allowances, not measurements. `preflight` compares a step's needs with what is free now
(GPU memory, host RAM, disk) and stops with one line naming what is short and by how much;
`skip_reason` answers the same for a step of `scripts/gpu_run.sh`.
"""
import os
import shutil
from dataclasses import dataclass

import torch

from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.eagle1 import DraftHead
from eagle_mini.heads.eagle3 import Eagle3Head
from eagle_mini.models import BIG_CONFIGS, resolve, torch_dtype

GB = 1e9
CUDA_CONTEXT_GB = 0.6   # ASSUMED: the CUDA context and cuBLAS workspaces
HOST_BASE_GB = 3.0      # ASSUMED: Python, torch and the CUDA libraries in host memory
SHARD_GB = 5.0          # ASSUMED: the largest checkpoint shard mapped at once (the hub's default cap)
FILL = 0.6              # ASSUMED: a ShareGPT conversation's mean length as a share of `max_len`
TREE_NODES = 60         # EAGLE-2's tree in the paper (`dynamic:60,6,10`): the nodes verified at once
DRAFT_VOCAB = 32000     # EAGLE-3's draft vocabulary, as the authors' heads use it

# Published config.json fields of the targets the scales name (no download to do the arithmetic).
QWEN25_15B = {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
              "tie_word_embeddings": True, "max_position_embeddings": 32768}
CONFIGS = {"qwen2.5-1.5b-instruct": ("qwen2", QWEN25_15B),
           **{name: ("llama", fields) for name, fields in BIG_CONFIGS.items()}}


@dataclass(frozen=True)
class CardScale:
    """A card class: its cards, their memory (`gpu_gb`, as the cards report it, ASSUMED) and the
    host RAM they usually come with (`host_gb`, ASSUMED; None where it varies too much to say),
    the target, the heads notebook 03 trains and the run's size."""
    name: str
    cards: str
    gpu_gb: float
    host_gb: float | None
    target: str
    kinds: tuple
    conversations: int
    max_len: int
    batch_tokens: int


SCALES = {
    # Qwen2.5-1.5B-Instruct: a family the package supports (qwen2, tested with tiny configs), open
    # (no licence to accept, unlike Meta's small Llamas, so no login on a free account), its fp16 weights
    # a fifth of a T4 and a quarter of free Colab's RAM, and Qwen2.5-0.5B-Instruct shares its
    # tokenizer: the small draft model for assisted generation. One EAGLE-1 head, small batches:
    # its 152k-token vocabulary makes a batch's logits the largest training tensor.
    "t4": CardScale("t4", "T4 (free Colab)", 15, 12.7, "qwen2.5-1.5b-instruct", ("eagle1",),
                    conversations=1000, max_len=1024, batch_tokens=2048),
    # What a mid-size card reports free holds a 7B target and an EAGLE-1 head's training fit; EAGLE-3's
    # head (a wider fc, its own lm_head) trained beside the target does not.
    "24gb": CardScale("24gb", "L4, A10 / A10G", 22, None, "vicuna-7b", ("eagle1",),
                      conversations=1000, max_len=2048, batch_tokens=2048),
    "a100": CardScale("a100", "A100 40GB or 80GB", 40, None, "vicuna-7b", ("eagle1", "eagle3"),
                      conversations=2000, max_len=2048, batch_tokens=8192),
}


def card_scale(total_bytes: int | None = None) -> CardScale:
    """`EAGLE_MINI_GPU_SCALE` when set, else the class of a GPU with `total_bytes` of memory
    (default: CUDA device 0's): a T4's, a mid-size card's or an A100's, by
    the memory thresholds below.

        >>> card_scale(16 * 10**9).target, card_scale(80 * 10**9).name
        ('qwen2.5-1.5b-instruct', 'a100')
    """
    named = os.environ.get("EAGLE_MINI_GPU_SCALE")
    if named:
        if named not in SCALES:
            raise EagleMiniError(f"EAGLE_MINI_GPU_SCALE must be one of {', '.join(SCALES)}, "
                                 f"got {named!r}")
        return SCALES[named]
    if total_bytes is None:
        total_bytes = torch.cuda.get_device_properties(0).total_memory
    return SCALES["t4" if total_bytes < 20 * GB else "24gb" if total_bytes < 32 * GB else "a100"]


def has_bf16(device="cuda") -> bool:
    """Whether the card has bf16 units (Ampere and later: Ampere, Ada, Hopper), not
    whether torch can emulate bf16 on it."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def device_dtype(device="cuda") -> str:
    """The precision a scale runs in on `device`: "bf16" with bf16 units, else "fp16"; "fp32" on a
    CPU (the course's CPU path picks its own, `runtime/precision.py`)."""
    if torch.device(device).type == "cpu":
        return "fp32"
    return "bf16" if has_bf16(device) else "fp16"


def config_of(name: str):
    """The config of a target named in `CONFIGS` (no download), else its own (a directory)."""
    from transformers import AutoConfig
    if name in CONFIGS:
        kind, fields = CONFIGS[name]
        return AutoConfig.for_model(kind, **fields)
    return AutoConfig.from_pretrained(resolve(name))


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def needs(config, dtype="bf16", context: int = 2048, nodes: int = TREE_NODES,
          batch_tokens: int = 8192, draft_vocab: int = DRAFT_VOCAB) -> dict:
    """The bytes each part takes for a target of `config` in `dtype` (see the module docstring),
    from the config alone: the model and both heads are built on the `meta` device."""
    from transformers import AutoModelForCausalLM
    size, vocab = torch_dtype(dtype).itemsize, config.vocab_size
    draft_vocab = min(draft_vocab, vocab)
    with torch.device("meta"):
        params = _count(AutoModelForCausalLM.from_config(config))
        eagle1 = DraftHead(config)
        heads = {"eagle1": _count(eagle1),
                 "eagle3": _count(Eagle3Head(config, draft_vocab=range(draft_vocab)))}
        # what the EAGLE-1 head holds beside its weights while it decodes: the lean step's fused
        # copies of q/k/v and gate/up (`heads/lean.py`), where its layer is one the step computes
        copies = sum(_count(m) for m in eagle1.frozen_linears())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * size
    logits = {"eagle1": vocab, "eagle3": draft_vocab}
    return {"params": params, "weights": params * size, "kv cache": kv * context,
            **{f"{k} head": n * size for k, n in heads.items()},
            "eagle1 decoding copies": copies * size,
            "tree": nodes * (4 * vocab + (4 * config.hidden_size + 2 * config.intermediate_size) * size),
            **{f"{k} training": 16 * n + 2 * 4 * batch_tokens * logits[k] for k, n in heads.items()},
            "cuda context": CUDA_CONTEXT_GB * GB,
            "eagle1 disk per token": config.hidden_size * 2 + 9,    # fp16 feature, id, mask
            "eagle3 disk per token": 4 * config.hidden_size * 2 + 9}


def plan(scale: CardScale, dtype: str | None = None) -> dict:
    """A scale's needs in bytes: `gpu bench` (weights, a conversation's KV cache, both heads and
    the EAGLE-1 head's decoding copies, the tree, the context), `gpu training` (weights, the KV
    cache, the hungriest head's training),
    `host` (`HOST_BASE_GB` and one shard: the weights stream to the GPU, `models.load_model`) and
    `disk` (the feature dump of the scale's conversations for the heads it trains)."""
    dtype = dtype or ("fp16" if scale.name == "t4" else "bf16")
    n = needs(config_of(scale.target), dtype, scale.max_len, batch_tokens=scale.batch_tokens)
    base = n["weights"] + n["kv cache"] + n["cuda context"]
    dump = "eagle3" if "eagle3" in scale.kinds else "eagle1"
    per_conversation = FILL * scale.max_len * n[f"{dump} disk per token"]
    return {"dtype": dtype, "params": n["params"], "weights": n["weights"],
            "gpu bench": (base + n["eagle1 head"] + n["eagle1 decoding copies"] + n["eagle3 head"]
                          + n["tree"]),
            "gpu training": base + max(n[f"{k} training"] for k in scale.kinds),
            "host": HOST_BASE_GB * GB + min(SHARD_GB * GB, n["weights"]),
            "disk per conversation": per_conversation,
            "disk": scale.conversations * per_conversation}


def fit_markdown() -> str:
    """The README's fit table (its `gpu_fit` block, written by `results-md`): every scale's
    arithmetic from `plan`, against the memory its cards report (ASSUMED)."""
    rows = ["| scale | cards (memory, assumed) | target, dtype | weights | GPU: bench / training "
            "| host RAM (assumed there) | feature dump: per conversation, total |",
            "|---|---|---|---|---|---|---|"]
    for s in SCALES.values():
        p = plan(s)
        fits = "fits" if max(p["gpu bench"], p["gpu training"]) <= s.gpu_gb * GB else "DOES NOT FIT"
        host = f"{p['host'] / GB:.1f} GB" + (f" ({s.host_gb} GB)" if s.host_gb else "")
        rows.append(f"| `{s.name}` | {s.cards} ({s.gpu_gb} GB) | `{s.target}` "
                    f"({p['params'] / 1e9:.2f}B), {p['dtype']} | {p['weights'] / GB:.1f} GB | "
                    f"{p['gpu bench'] / GB:.1f} / {p['gpu training'] / GB:.1f} GB: {fits} | {host} | "
                    f"{p['disk per conversation'] / 1e6:.0f} MB, {p['disk'] / GB:.0f} GB "
                    f"({' + '.join(s.kinds)}, {s.conversations} conversations) |")
    return "\n".join(rows + ["", "Computed by `eagle_mini/course/gpu_fit.py` from each target's "
                                 "config (no model loaded), with its ASSUMED allowances; generated "
                                 "by `python -m eagle_mini results-md`."])


def free_now(path=".") -> dict:
    """What is free now, in bytes: CUDA device 0's memory (0 without CUDA), the host's available
    RAM and the disk holding `path`."""
    import psutil   # installed with accelerate
    gpu = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0
    return {"GPU memory": gpu, "host RAM": psutil.virtual_memory().available,
            "disk": shutil.disk_usage(path).free}


FIX = {"GPU memory": "free it (restart the runtime) or take the next card class's scale",
       "host RAM": "close other notebooks or restart the runtime",
       "disk": "free disk or dump fewer conversations"}


def preflight(what: str, need: dict, free: dict | None = None, path=".") -> None:
    """Stop before `what` when a resource of `need` ({"GPU memory" | "host RAM" | "disk": bytes})
    is short of what is free (`free`, default `free_now(path)`): one line, the first short one.

        >>> preflight("a dump", {"disk": 2e9}, free={"disk": 5e8})
        Traceback (most recent call last):
        eagle_mini.errors.EagleMiniError: a dump: not enough disk: needs 2.0 GB, 0.5 GB free (short by 1.5 GB); free disk or dump fewer conversations
    """
    free = free_now(path) if free is None else free
    for resource, wanted in need.items():
        if wanted > free[resource]:
            raise EagleMiniError(f"{what}: not enough {resource}: needs {wanted / GB:.1f} GB, "
                                 f"{free[resource] / GB:.1f} GB free (short by "
                                 f"{(wanted - free[resource]) / GB:.1f} GB); {FIX[resource]}")


def preflight_scale(scale: CardScale, step: str, path=".", free: dict | None = None) -> None:
    """The checks before a scale's heavy step: "training" (notebook 03: GPU memory, host RAM and
    the dump's disk) or "bench" (notebook 06b: GPU memory and host RAM)."""
    p = plan(scale, device_dtype() if torch.cuda.is_available() else None)
    need = {"GPU memory": p[f"gpu {step}"], "host RAM": p["host"]}
    if step == "training":
        need["disk"] = p["disk"]
    preflight(f"{scale.target} {step} at the {scale.name} scale", need, free, path)


# `scripts/gpu_run.sh`'s steps that need more than CUDA: (target, dtype, what it runs).
RUN_STEPS = {"cost_curve_7b": ("vicuna-7b", "bf16", "gpu bench"),
             "train_throughput_7b": ("vicuna-7b", "bf16", "gpu training")}


def skip_reason(step: str, free_gpu: int | None = None) -> str:
    """Why `gpu_run.sh` skips `step` here, in one line ("" when it runs): no CUDA, no bf16 units
    for a bf16 step, or less free GPU memory than its `plan` needs."""
    if not torch.cuda.is_available():
        return "no CUDA: torch sees no GPU"
    if step not in RUN_STEPS:
        return ""
    target, dtype, phase = RUN_STEPS[step]
    if dtype == "bf16" and not has_bf16():
        return f"no bf16 units on {torch.cuda.get_device_name(0)}"
    need = plan(SCALES["a100"] if phase == "gpu training" else SCALES["24gb"], dtype)[phase]
    free_gpu = torch.cuda.mem_get_info()[0] if free_gpu is None else free_gpu
    if need > free_gpu:
        return (f"not enough GPU memory: {target} needs {need / GB:.1f} GB, "
                f"{free_gpu / GB:.1f} GB free")
    return ""
