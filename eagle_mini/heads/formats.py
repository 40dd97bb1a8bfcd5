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

EAGLE-1's layout has no place for a reduced draft vocabulary, and none for the feature-only /
token-only ablation heads. A reduced-vocabulary head is the same fc and layer over a subset of the
target's lm_head rows, so `full_vocabulary=True` writes those weights over the full vocabulary and
the draft vocabulary beside them as `token_map.pt`: a tensor of target ids, the hot-token map
FR-Spec publishes and SGLang reads with `--speculative-token-map`. `load_official` reads it back,
and the head drafts exactly as before.

**EAGLE-3** (reference §5) has its own layout, the one the authors publish and SGLang / vLLM load
(`export_eagle3`, `load_eagle3`):

    model.safetensors   fc.weight [H, 3H]
                        midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight [H]
                        midlayer.self_attn.{q,k,v}_proj.weight [., 2H], o_proj.weight
                        midlayer.mlp.{gate,up,down}_proj.weight
                        norm.weight [H], lm_head.weight [draft_vocab, H]
                        d2t [draft_vocab] int64 offsets (target id = i + d2t[i]), t2d [vocab] bool
    config.json         architectures ["LlamaForCausalLMEagle3"], model_type "llama",
                        num_hidden_layers 1, vocab_size (the target's), draft_vocab_size,
                        tie_word_embeddings false and the target's other Llama fields;
                        the draft's RoPE as rope_parameters, rope_theta and rope_scaling
                        (`rope_keys`); layers other than the engines' default 2, L//2, L-3
                        under both keys engines read (`layer_ids_config`)

The draft's RoPE is its own (`Eagle3Head.rope`), read from the file and written back, never taken
from the target: the authors trained with base 10000 whatever the target's.

Layer indices come in two conventions. Ours, vLLM's top-level `eagle_aux_hidden_state_layer_ids`
and the authors' training code count the hidden state *entering* decoder layer i (Hugging Face
`hidden_states[i]`); SGLang's and SpecForge's `eagle_config.eagle_aux_hidden_state_layer_ids`
count the *output* of layer i, one less. The `eagle_config` key is written and read in SGLang's
convention, the top-level key in vLLM's.

The embedding is not written: the draft shares the target's (an `embed_tokens.weight` in a file
being read is checked against the target's shape and then not used). vLLM renames `midlayer.` to
`layers.0.` and `d2t` to `draft_id_to_target_id` on loading, and skips `t2d`.

    >>> export_official(head, target, "out/eagle-head")           # doctest: +SKIP
    >>> head = load_head("out/eagle-head", target)  # eagle_mini.heads  # doctest: +SKIP
"""
import json
import pickle
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig

from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.eagle3 import Eagle3Head
from eagle_mini.heads.base import check_compatible, layer_config
from eagle_mini.heads.eagle1 import DraftHead

WEIGHTS, CONFIG, TOKEN_MAP = "pytorch_model.bin", "config.json", "token_map.pt"


def official_state_dict(head: DraftHead, target, full_vocabulary: bool = False) -> dict:
    """The state dict of a released EAGLE-1 head: the target's embedding, then fc and the layer.
    A head with a reduced draft vocabulary needs `full_vocabulary=True`: the same weights, drafting
    over the whole vocabulary unless the reader also takes the token map (`export_official`)."""
    check_compatible(head, target)
    if head.input_mode != "feature+token":
        raise EagleMiniError(f"only feature+token heads have an EAGLE-1 format; this head's "
                             f"input_mode is {head.input_mode!r}")
    if head.draft_vocab_size != target.vocab_size and not full_vocabulary:
        raise EagleMiniError(f"EAGLE-1's layout has no draft vocabulary, and this head drafts from "
                             f"a reduced one of {head.draft_vocab_size} (the target's: "
                             f"{target.vocab_size}): export_official(..., full_vocabulary=True) "
                             f"writes the same weights over the full vocabulary and the draft "
                             f"vocabulary as {TOKEN_MAP} (the CLI's `export` does so)")
    state = {"embed_tokens.weight": target.model.model.embed_tokens.weight}
    state.update(head.state_dict())
    # Meta tensors stay put: a shape-only dry run writes a 7B head's layout without its weights.
    return {k: v.detach().contiguous() if v.is_meta else v.detach().cpu().contiguous()
            for k, v in state.items()}


def official_config(head: DraftHead, target) -> dict:
    """The target's config cut to one layer, with the "bias" key released LLaMA-3 heads carry."""
    cfg = official_config_base(target)
    cfg["architectures"] = cfg.get("architectures") or [type(target.model).__name__]
    cfg["bias"] = head.fc.bias is not None
    return cfg


def export_official(head: DraftHead, target, out_dir, for_vllm: bool = False,
                    full_vocabulary: bool = False) -> Path:
    """Write `head` as a released EAGLE-1 checkpoint (pytorch_model.bin + config.json) in `out_dir`.

    for_vllm: warn if the fc has a bias, which vLLM's EAGLE model drops without a word.
    full_vocabulary: a head with a reduced draft vocabulary is written over the full vocabulary,
    its draft vocabulary as `token_map.pt` (SGLang's `--speculative-token-map`); without it such a
    head is refused.
    """
    state = official_state_dict(head, target, full_vocabulary)
    if for_vllm and "fc.bias" in state:
        warnings.warn("vLLM's EAGLE model has no fc bias and silently drops fc.bias: this head "
                      "will draft differently there. Train with fc_bias=False for vLLM.",
                      stacklevel=2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(official_config(head, target), indent=2))
    if head.draft_vocab_size != target.vocab_size:
        torch.save(head.draft_to_target.cpu().clone(), out / TOKEN_MAP)
    return out


def read_token_map(path: Path, vocab_size: int) -> torch.Tensor:
    """A hot-token map (`TOKEN_MAP`): distinct target ids, as a 1-D integer tensor (or a list)."""
    try:
        ids = torch.as_tensor(torch.load(path, map_location="cpu", weights_only=True))
    except (pickle.UnpicklingError, RuntimeError, EOFError, TypeError, ValueError) as e:
        raise EagleMiniError(f"{path} is not a readable token map: "
                             f"{(str(e).splitlines() or [type(e).__name__])[0]}") from None
    if (ids.dim() != 1 or ids.is_floating_point() or ids.numel() == 0
            or ids.unique().numel() != ids.numel() or not 0 <= int(ids.min()) <= int(ids.max()) < vocab_size):
        raise EagleMiniError(f"{path} is not a token map: expected distinct target ids in "
                             f"[0, {vocab_size}) as a 1-D integer tensor")
    return ids.long()


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
    when a target is given, else the file's. A `token_map.pt` beside it (`export_official`) gives
    the head its reduced draft vocabulary.
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
    draft_vocab = (read_token_map(d / TOKEN_MAP, target_config.vocab_size)
                   if (d / TOKEN_MAP).exists() else None)
    head = DraftHead(target_config, fc_bias=fc_bias, draft_vocab=draft_vocab,
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


EAGLE3_WEIGHTS, EAGLE3_ARCH = "model.safetensors", "LlamaForCausalLMEagle3"


def eagle3_state_dict(head: Eagle3Head) -> dict:
    """The authors' tensors: the head's weights under their names, plus `d2t` and `t2d`."""
    state = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    d2t = head.draft_to_target.cpu()
    state["d2t"] = (d2t - torch.arange(d2t.numel())).contiguous()
    state["t2d"] = head.t2d.cpu().contiguous()
    return state


def eagle3_config(head: Eagle3Head, target, dtype=torch.bfloat16) -> dict:
    """The one-layer Llama config of a published EAGLE-3 draft (SpecForge / the authors): the
    head's own layer config (`eagle3.draft_layer_config`: a Llama layer for any target family,
    bias-free, with the head's RoPE and norm epsilon), then the layout's own keys."""
    cfg = json.loads(head.layer_config.to_json_string(use_diff=False))
    cfg.update({"architectures": [EAGLE3_ARCH], "model_type": "llama", "num_hidden_layers": 1,
                "vocab_size": target.vocab_size, "draft_vocab_size": head.draft_vocab_size,
                "tie_word_embeddings": False, "torch_dtype": str(dtype).removeprefix("torch."),
                "dtype": str(dtype).removeprefix("torch.")})   # older and newer transformers
    cfg.update(rope_keys(head.rope))   # the head's own, which may not be the target's
    cfg.update(layer_ids_config(head.aux_layers, target.config.num_hidden_layers))
    return cfg


def layer_ids_config(layers, num_hidden_layers: int) -> dict:
    """The config.json keys naming the target layers a draft reads, in each engine's convention
    (none for the engines' default, `engine_default_layers`). Ours are Hugging Face
    `hidden_states` indices: i is the input of decoder layer i, the output of layer i - 1.

    - `eagle_config.eagle_aux_hidden_state_layer_ids`: layer *outputs*, i - 1. SGLang adds 1 to
      each to find the layer whose input it captures, and SpecForge writes them so.
    - top-level `eagle_aux_hidden_state_layer_ids`: layer *inputs*, i, as vLLM reads them (it
      looks there first, and would read the `eagle_config` list as inputs too).

        >>> layer_ids_config((1, 4, 6), 8)["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        [0, 3, 5]
    """
    if not all(1 <= i <= num_hidden_layers - 1 for i in layers):
        raise EagleMiniError(f"serving engines capture the inputs of layers 1 to "
                             f"{num_hidden_layers - 1} of a {num_hidden_layers}-layer target; "
                             f"this head reads {list(layers)}")
    if tuple(layers) == engine_default_layers(num_hidden_layers):
        return {}
    return {"eagle_aux_hidden_state_layer_ids": list(layers),
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in layers],
                             "use_aux_hidden_state": True}}


def file_layers(cfg: dict, path) -> tuple | None:
    """The layers a published draft's config names, as our indices (`layer_ids_config` for both
    conventions), None when it names none; the two keys must agree."""
    outputs = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    inputs = cfg.get("eagle_aux_hidden_state_layer_ids")
    from_outputs = [i + 1 for i in outputs] if outputs else None
    if from_outputs and inputs and list(inputs) != from_outputs:
        raise EagleMiniError(f"{path}: eagle_config.eagle_aux_hidden_state_layer_ids {outputs} "
                             f"(layer outputs, as SGLang reads them) and "
                             f"eagle_aux_hidden_state_layer_ids {inputs} (layer inputs, as vLLM "
                             f"reads them) name different layers")
    layers = from_outputs or inputs
    return tuple(layers) if layers else None


def engine_default_layers(num_hidden_layers: int) -> tuple[int, int, int]:
    """The layers serving engines capture when a draft's config names none: the authors' 2, L//2,
    L-3 at any depth (ours differ under 7 layers, `eagle3.aux_layers`, and are then written)."""
    return 2, num_hidden_layers // 2, num_hidden_layers - 3


def official_config_base(target) -> dict:
    """The target's config cut to one layer, its RoPE under every key a reader looks for
    (`rope_keys`)."""
    cfg = json.loads(layer_config(target.config).to_json_string(use_diff=False))
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg.update(rope_keys(rope))
    return cfg


def rope_keys(rope: dict) -> dict:
    """A draft's RoPE (`rope_parameters` form) as config.json keys: `rope_parameters`
    (transformers 5, vLLM) and `rope_theta` + `rope_scaling` (SGLang and older transformers, which
    would rotate a Llama-3.1 draft unscaled without it; null when there is no scaling, as
    Llama-3 configs write it).

        >>> rope_keys({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})["rope_scaling"]
        {'rope_type': 'linear', 'factor': 2.0}
    """
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    return {"rope_parameters": dict(rope), "rope_theta": rope["rope_theta"],
            "rope_scaling": scaling if rope.get("rope_type", "default") != "default" else None}


def export_eagle3(head: Eagle3Head, target, out_dir, dtype=torch.bfloat16) -> Path:
    """Write `head` in the authors' EAGLE-3 layout (model.safetensors + config.json), for a
    target of any family: the draft layer is a Llama layer (`eagle3.draft_layer_config`)."""
    from safetensors.torch import save_file
    check_compatible(head, target)
    state = {k: v.to(dtype) if v.is_floating_point() else v
             for k, v in eagle3_state_dict(head).items()}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, out / EAGLE3_WEIGHTS)
    (out / CONFIG).write_text(json.dumps(eagle3_config(head, target, dtype), indent=2))
    return out


def load_eagle3(head_dir, target) -> Eagle3Head:
    """Load an EAGLE-3 draft in the authors' layout for `target` (its embedding is shared)."""
    from safetensors.torch import load_file
    d = Path(head_dir)
    # the authors publish their EAGLE-3 drafts as pytorch_model.bin; SpecForge and our export write
    # model.safetensors
    weights = d / EAGLE3_WEIGHTS if (d / EAGLE3_WEIGHTS).exists() else d / WEIGHTS
    for path in (d / CONFIG, weights):
        if not path.exists():
            raise EagleMiniError(f"{d} is not an EAGLE-3 draft directory (no {path.name})")
    if target is None:
        raise EagleMiniError("loading an EAGLE-3 draft in the authors' layout needs its target")
    if weights.name == WEIGHTS:
        state = _read_state_dict(weights)   # weights only: a downloaded pickle is untrusted
    try:
        cfg = json.loads((d / CONFIG).read_text())
        if weights.name == EAGLE3_WEIGHTS:
            state = load_file(weights)
    except Exception as e:
        raise EagleMiniError(f"{d} holds a damaged EAGLE-3 draft: {e}") from None
    if EAGLE3_ARCH not in cfg.get("architectures", []):
        raise EagleMiniError(f"{d / CONFIG} is not an EAGLE-3 draft (architectures "
                             f"{cfg.get('architectures')})")
    for what, mine, theirs in (("hidden size", cfg.get("hidden_size"), target.hidden_size),
                               ("vocab size", cfg.get("vocab_size"), target.vocab_size)):
        if mine != theirs:
            raise EagleMiniError(f"head {d} does not fit target {target.name}: {what} {mine} "
                                 f"(head) vs {theirs} (target)")
    d2t, t2d = state.pop("d2t", None), state.pop("t2d", None)
    if d2t is None:
        raise EagleMiniError(f"{weights} has no d2t map")
    draft_to_target = torch.arange(d2t.numel()) + d2t.long()
    if t2d is not None and not torch.equal(t2d.bool().nonzero().flatten(), draft_to_target.sort().values):
        raise EagleMiniError(f"{weights}: d2t and t2d disagree")
    embed = state.pop("embed_tokens.weight", None)
    if embed is not None and tuple(embed.shape) != (target.vocab_size, target.hidden_size):
        raise EagleMiniError(f"{weights}: embed_tokens.weight has shape "
                             f"{tuple(embed.shape)}, expected {(target.vocab_size, target.hidden_size)}")
    head = Eagle3Head(target.config, draft_vocab=draft_to_target, target_name=target.name,
                      layers=file_layers(cfg, d / CONFIG), rope=file_rope(cfg),
                      rms_norm_eps=cfg.get("rms_norm_eps"))
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected != got:
        raise EagleMiniError(f"{weights} does not match an EAGLE-3 draft for "
                             f"{target.name}: missing {sorted(set(expected) - set(got))}, "
                             f"unexpected {sorted(set(got) - set(expected))}, wrong shapes "
                             f"{sorted(k for k in expected.keys() & got.keys() if expected[k] != got[k])}")
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    head.meta = {"format": "eagle-3", **cfg}
    return head.float().attach(target)


def file_rope(cfg: dict) -> dict:
    """The RoPE a published draft's config.json gives its positions, in `rope_parameters` form.
    Not the target's: the authors' EAGLE-3 training always used base 10000, and their published
    configs may omit `rope_theta` (their loader then falls back to 10000). Reads `rope_parameters`
    (transformers 5) or `rope_theta` / `rope_scaling` (older writers, SGLang); nothing there means
    10000.

        >>> file_rope({"rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0}})
        {'rope_type': 'linear', 'rope_theta': 500000.0, 'factor': 2.0}
        >>> file_rope({})
        {'rope_type': 'default', 'rope_theta': 10000.0}
    """
    rope = dict(cfg.get("rope_parameters") or {})
    if "rope_theta" not in rope:
        rope = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 10000.0)}
        if cfg.get("rope_scaling"):
            rope.update(cfg["rope_scaling"])
            rope["rope_type"] = rope.pop("type", rope.get("rope_type", "default"))
    return rope
