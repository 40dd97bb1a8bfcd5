"""What every draft head shares: the target's layer config cut to one layer, its layer classes,
positions and masks for a draft layer, the fit check, and the saved-head directory format
(`model.safetensors` with a `draft_to_target` map, plus `config.json`).

EAGLE-1's head (`eagle1.py`) and EAGLE-3's (`eagle3.py`) build on these; `formats.py` reads and
writes the authors' layouts; `eagle_mini.heads` loads any of them.
"""
import importlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from eagle_mini.errors import EagleMiniError
from eagle_mini.results import results_json
from eagle_mini.target import attention_mask_4d


def architecture_config(target_config):
    """A fresh config of the target's class from its architecture fields alone: the fields of its
    `to_dict` that the class itself defines. Nothing a runtime set on the live config comes along
    (exact mode's fields, `runtime/exact/`; the attention implementation), so a head made on an
    exact or packed target is the head made on a stock one, saves the same `config.json`, and runs
    as it will once loaded from it (HF's default attention for a bare config)."""
    fields = target_config.to_dict()
    try:
        own = type(target_config)().to_dict()
        fields = {k: v for k, v in fields.items() if k in own}
    except (TypeError, ValueError):   # a class that needs arguments: its fields as they are
        pass
    return type(target_config).from_dict(fields)


def layer_config(target_config):
    """The target's architecture (`architecture_config`) cut to one full-attention layer, for the
    head's own decoder layer."""
    cfg = architecture_config(target_config)
    cfg.num_hidden_layers = 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"]
    if hasattr(cfg, "sliding_window"):
        cfg.sliding_window = None
    cfg.use_cache = True
    return cfg


def decoder_classes(model_type: str):
    """(DecoderLayer, RotaryEmbedding) classes of a Llama-family architecture."""
    try:
        mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    except ImportError:
        raise EagleMiniError(f"no HF modeling file for model_type {model_type!r}") from None
    prefix = {c.__name__.removesuffix("DecoderLayer"): c for c in vars(mod).values()
              if isinstance(c, type) and c.__name__.endswith("DecoderLayer")}
    if len(prefix) != 1:
        raise EagleMiniError(f"cannot find one decoder layer class for {model_type!r}")
    name, layer_cls = next(iter(prefix.items()))
    return layer_cls, getattr(mod, f"{name}RotaryEmbedding")


def move_keeping_rope_fp32(head, device, dtype):
    """`head.to(device, dtype)`, its RoPE frequencies recomputed in fp32 on `device`.

    A cast to bf16 would round `rotary.inv_freq` to 8 significant bits, an error each position
    multiplies; the target keeps its own in fp32 (Hugging Face computes them so at load
    and its rotary reads them in fp32), so the draft's positions rotate as the target's do. The
    rotary holds buffers only, so a fresh one from the same config replaces it."""
    head = head.to(device=device, dtype=dtype)
    head.rotary = type(head.rotary)(head.rotary.config).to(device)
    return head


def frozen_linear(weight: torch.Tensor) -> nn.Linear:
    """A bias-free linear computing `x @ weight.T` on `weight` itself (no copy), frozen, and outside
    any head's module tree: never trained, saved or moved with the head."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    linear.weight = nn.Parameter(weight.detach(), requires_grad=False)
    return linear


def layer_positions_and_mask(x, cache=None, positions=None, tree_mask=None):
    """Position ids `[b, n]` and the additive 4-D mask for a draft layer reading `x: [b, n, H]`.

    Positions continue the cache unless given (a tree's depths); the mask is causal over the n new
    entries unless `tree_mask: [n, m]` says otherwise (see `attention_mask_4d`).
    """
    b, n, _ = x.shape
    past = cache.get_seq_length() if cache is not None else 0
    if positions is None:
        positions = torch.arange(past, past + n, device=x.device)
    positions = torch.as_tensor(positions, device=x.device).view(1, n).expand(b, n)
    if tree_mask is None:
        tree_mask = torch.tril(torch.ones(n, n, dtype=torch.bool, device=x.device))
    return positions, attention_mask_4d(tree_mask, past, x.dtype, x.device).expand(b, -1, -1, -1)


def save_head_dir(head, out_dir, dtype=torch.bfloat16, extra: dict | None = None) -> Path:
    """A head's weights in `dtype` plus its `draft_to_target` map (model.safetensors) and
    `config_dict()` with `extra` (config.json): what `read_head_dir` reads back."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    tensors["draft_to_target"] = head.draft_to_target.cpu().contiguous()
    save_file(tensors, out / "model.safetensors")
    (out / "config.json").write_text(results_json({**head.config_dict(), **(extra or {})}))
    return out


def read_head_dir(head_dir) -> tuple[Path, dict, dict]:
    """A saved head's directory -> (path, config dict, tensors incl. `draft_to_target`), with a
    one-line error naming the file that is missing or damaged."""
    d = Path(head_dir)
    for name in ("config.json", "model.safetensors"):
        if not (d / name).is_file():
            raise EagleMiniError(f"{d} is not a draft head directory (no {name})")
    try:
        cfg = json.loads((d / "config.json").read_text())
        if not isinstance(cfg, dict):
            raise TypeError("not a JSON object")
    except (json.JSONDecodeError, TypeError) as e:
        raise EagleMiniError(f"{d / 'config.json'} is damaged or not a head config "
                             f"({type(e).__name__}: {e})") from None
    try:
        tensors = load_file(d / "model.safetensors")
    except Exception as e:  # safetensors raises its own SafetensorError for a cut file
        raise EagleMiniError(f"{d / 'model.safetensors'} is damaged: {e}") from None
    if "draft_to_target" not in tensors:
        raise EagleMiniError(f"{d / 'model.safetensors'} has no draft_to_target map")
    return d, cfg, tensors


def load_weights(head, tensors: dict, d: Path) -> None:
    """Load saved weights (any float dtype) into `head`, strictly, or name the mismatch."""
    try:
        head.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    except RuntimeError as e:
        raise EagleMiniError(f"{d / 'model.safetensors'} does not match its config.json: "
                             f"{str(e).splitlines()[0]}") from None


def check_compatible(head, target) -> None:
    """A head fits only the target it was built for: same type, hidden size and vocabulary."""
    tc, hc = target.config, head.target_config
    for what, a, b in (("layer type", tc.model_type, hc.model_type),
                       ("hidden size", tc.hidden_size, hc.hidden_size),
                       ("vocab size", target.vocab_size, hc.vocab_size)):
        if a != b:
            raise EagleMiniError(f"draft head does not fit target {target.name}: {what} {b} "
                                 f"(head for {head.target_name or 'another target'}) vs {a} (target)")
