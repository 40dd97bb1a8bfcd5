"""The released EAGLE-1 checkpoint format: export a `DraftHead` to it and load it back (EAGLE §3.1).

The authors' heads on the HF hub (e.g. `yuhuili/EAGLE-Vicuna-7B-v1.3`) are a directory with

    pytorch_model.bin   a torch state dict, loaded strictly:
                        embed_tokens.weight [V, H]   a copy of the target's embedding
                        fc.weight [H, 2H], fc.bias [H]
                        layers.0.self_attn.{q,k,v,o}_proj.weight   (+ q/k/v biases for Qwen2,
                                                                     q_norm/k_norm for Qwen3)
                        layers.0.mlp.{gate,up,down}_proj.weight
                        layers.0.post_attention_layernorm.weight
    config.json         the target's config with num_hidden_layers: 1 (LLaMA-3 heads add "bias": false)

Our head's own parameter names already follow that layout, so exporting adds the embedding copy and
the config. Loading reads the bin with `torch.load(weights_only=True)`: a downloaded checkpoint is
untrusted, and a plain pickle could run any code.

Serving engines: vLLM's EAGLE model has no fc bias and silently drops `fc.bias`; a biased head then
drafts with different numbers than it was trained with. `export_official(..., for_vllm=True)` warns
about it; train with `fc_bias=False` for such a target.

Left out: EAGLE-3 checkpoints (fused 3H -> H input, own lm_head, `d2t`/`t2d` maps), reduced draft
vocabularies and the feature-only / token-only ablation heads, none of which EAGLE-1 can express.

    >>> export_official(head, target, "out/eagle-head")           # doctest: +SKIP
    >>> head = load_head("out/eagle-head", target)  # eagle_mini.heads  # doctest: +SKIP
"""
import json
import pickle
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig

from .errors import EagleMiniError
from .head import DraftHead, _layer_config, check_compatible

WEIGHTS, CONFIG = "pytorch_model.bin", "config.json"


def official_state_dict(head: DraftHead, target) -> dict:
    """The state dict of a released EAGLE-1 head: the target's embedding, then fc and the layer."""
    check_compatible(head, target)
    if head.input_mode != "feature+token":
        raise EagleMiniError(f"only feature+token heads have an EAGLE-1 format; this head's "
                             f"input_mode is {head.input_mode!r}")
    if head.draft_vocab_size != target.vocab_size:
        raise EagleMiniError(f"EAGLE-1 heads use the full vocabulary ({target.vocab_size}); this head "
                             f"has a reduced draft vocabulary of {head.draft_vocab_size}")
    state = {"embed_tokens.weight": target.model.model.embed_tokens.weight}
    state.update(head.state_dict())
    # Meta tensors stay put: a shape-only dry run writes a 7B head's layout without its weights.
    return {k: v.detach().contiguous() if v.is_meta else v.detach().cpu().contiguous()
            for k, v in state.items()}


def official_config(head: DraftHead, target) -> dict:
    """The target's config cut to one layer, with the "bias" key released LLaMA-3 heads carry."""
    cfg = json.loads(_layer_config(target.config).to_json_string(use_diff=False))
    cfg["architectures"] = cfg.get("architectures") or [type(target.model).__name__]
    cfg["bias"] = head.fc.bias is not None
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg["rope_theta"] = rope["rope_theta"]  # older transformers (serving engines) read it here
    return cfg


def export_official(head: DraftHead, target, out_dir, for_vllm: bool = False) -> Path:
    """Write `head` as a released EAGLE-1 checkpoint (pytorch_model.bin + config.json) in `out_dir`.

    for_vllm: warn if the fc has a bias, which vLLM's EAGLE model drops without a word.
    """
    state = official_state_dict(head, target)
    if for_vllm and "fc.bias" in state:
        warnings.warn("vLLM's EAGLE model has no fc bias and silently drops fc.bias: this head "
                      "will draft differently there. Train with fc_bias=False for vLLM.",
                      stacklevel=2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(official_config(head, target), indent=2))
    return out


def _read_state_dict(path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise EagleMiniError(f"{path} is not a plain state dict (refused by weights_only loading): "
                             f"{str(e).splitlines()[0]}") from None
    if not (isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                            for k, v in state.items())):
        raise EagleMiniError(f"{path} holds a {type(state).__name__}, not a state dict of tensors")
    return state


def load_official(head_dir, target=None) -> DraftHead:
    """Load a released EAGLE-1 head; with `target`, check it fits and attach it.

    The file's config describes one layer; the head's `target_config` is the target's own config
    when a target is given, else the file's.
    """
    d = Path(head_dir)
    for name in (CONFIG, WEIGHTS):
        if not (d / name).exists():
            raise EagleMiniError(f"{d} is not an EAGLE-1 head directory (no {name})")
    cfg = json.loads((d / CONFIG).read_text())
    if cfg.get("num_hidden_layers", 1) != 1:
        raise EagleMiniError(f"{d / CONFIG}: an EAGLE-1 head has num_hidden_layers 1, "
                             f"not {cfg['num_hidden_layers']}")
    state = _read_state_dict(d / WEIGHTS)
    model_type = cfg.get("model_type", "llama")
    if target is not None:
        for what, mine, theirs in (("model type", model_type, target.config.model_type),
                                   ("hidden size", cfg.get("hidden_size"), target.hidden_size),
                                   ("vocab size", cfg.get("vocab_size"), target.vocab_size)):
            if mine != theirs:
                raise EagleMiniError(f"head {d} does not fit target {target.name}: {what} {mine} "
                                     f"(head) vs {theirs} (target)")
        target_config = target.config
    else:
        kw = {k: v for k, v in cfg.items() if k not in ("model_type", "bias")}
        target_config = AutoConfig.for_model(model_type, **kw)
    fc_bias = bool(cfg.get("bias", "fc.bias" in state))
    head = DraftHead(target_config, fc_bias=fc_bias,
                     target_name=target.name if target is not None else d.name)
    embed = state.pop("embed_tokens.weight", None)
    want = (target_config.vocab_size, target_config.hidden_size)
    if embed is not None and tuple(embed.shape) != want:
        raise EagleMiniError(f"{d / WEIGHTS}: embed_tokens.weight has shape {tuple(embed.shape)}, "
                             f"expected {want} (vocab, hidden)")
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(f"{k} {tuple(state[k].shape)} != {expected[k]}"
                   for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        raise EagleMiniError(f"{d / WEIGHTS} does not match a {model_type} EAGLE-1 head: "
                             f"missing {missing}, unexpected {unexpected}, wrong shapes {wrong}")
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    head.meta = {"format": "eagle-1", **cfg}
    return head.attach(target) if target is not None else head
