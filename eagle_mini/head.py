"""The EAGLE draft head: one decoder layer that predicts the target's next feature (EAGLE §3.1).

At position i the head sees the feature f_i and the token advanced by one step, the *shifted token*
t_{i+1}, and predicts f_{i+1}:

    x_i   = fc(cat(embed(t_{i+1}), f_i))          # Linear(2H -> H), embedding first
    f'_{i+1} = DecoderLayer(x_{<=i})_i            # the target's own layer type, no input norm
    p_draft(t_{i+2}) = softmax(lm_head(f'_{i+1}))  # the target's frozen lm_head

The embedding and `lm_head` are the target's, shared and frozen; only `fc` and the layer train.
Features are post-norm already, so the layer's input RMSNorm is dropped and there is no final norm.
A reduced draft vocabulary (EAGLE-3 §3, FR-Spec) keeps only the rows of `lm_head` for the N most
frequent tokens; `draft_to_target` maps draft ids back.

`input_mode` exists for the feature-uncertainty ablation (EAGLE §3.1, Fig. 4): "token" or "feature"
alone feed a Linear(H -> H); the default "feature+token" is EAGLE.
"""
import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig

from .errors import EagleMiniError
from .results import results_json
from .target import attention_mask_4d

INPUT_MODES = ("feature+token", "feature", "token")


def _layer_config(target_config):
    """The target's config cut to one full-attention layer, for the head's own decoder layer."""
    cfg = copy.deepcopy(target_config)
    cfg.num_hidden_layers = 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = ["full_attention"]
    if hasattr(cfg, "sliding_window"):
        cfg.sliding_window = None
    cfg.use_cache = True
    return cfg


def _decoder_classes(model_type: str):
    """(DecoderLayer, RotaryEmbedding) classes of a Llama-family architecture."""
    import importlib
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


class DraftHead(nn.Module):
    """fc + one decoder layer; `attach(target)` lends it the target's embedding and lm_head."""

    def __init__(self, target_config, fc_bias: bool = True, draft_vocab=None,
                 input_mode: str = "feature+token", target_name: str = ""):
        super().__init__()
        if input_mode not in INPUT_MODES:
            raise EagleMiniError(f"unknown input_mode {input_mode!r}; known: {', '.join(INPUT_MODES)}")
        self.target_config = target_config
        self.target_name = target_name
        self.input_mode = input_mode
        self.layer_config = _layer_config(target_config)
        hidden = target_config.hidden_size
        width = 2 * hidden if input_mode == "feature+token" else hidden
        self.fc = nn.Linear(width, hidden, bias=fc_bias)
        layer_cls, rope_cls = _decoder_classes(target_config.model_type)
        layer = layer_cls(self.layer_config, layer_idx=0)
        layer.input_layernorm = nn.Identity()  # features are already normalized
        self.layers = nn.ModuleList([layer])
        self.rotary = rope_cls(self.layer_config)
        vocab = target_config.vocab_size
        d2t = torch.arange(vocab) if draft_vocab is None else torch.as_tensor(draft_vocab).long()
        self.register_buffer("draft_to_target", d2t, persistent=False)
        self._shared = {}  # the target's embedding and lm_head: shared, frozen, never saved

    # --- wiring ---------------------------------------------------------------------------
    def attach(self, target) -> "DraftHead":
        """Share `target`'s embedding and lm_head (restricted to the draft vocabulary)."""
        check_compatible(self, target)
        weight = target.model.lm_head.weight.detach()  # frozen: never part of the head's graph
        full = self.draft_to_target.numel() == weight.shape[0]
        self._shared = {"embed": target.model.model.embed_tokens, "target_lm_head": weight,
                        "lm_head": weight if full else weight[self.draft_to_target.to(weight.device)]}
        return self.to(device=weight.device, dtype=weight.dtype)

    @property
    def draft_vocab_size(self) -> int:
        return self.draft_to_target.numel()

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache(config=self.layer_config)

    # --- computation ----------------------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._shared["embed"](tokens)

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """predicted features [n, H] -> draft logits [n, draft_vocab] (map ids with draft_to_target).
        In the lm_head's dtype: an fp32 head in training on a bf16 target casts its output, not
        the target's vocabulary-sized weight."""
        lm = self._shared["lm_head"]
        return predicted.to(lm.dtype) @ lm.T

    def fuse(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The fc input per position: [..., H] feature and/or embedding of the shifted token."""
        if self.input_mode == "feature":
            return self.fc(features)
        emb = self.embed(tokens).to(self.fc.weight.dtype)
        if self.input_mode == "token":
            return self.fc(emb)
        return self.fc(torch.cat([emb, features.to(emb.dtype)], dim=-1))

    def forward(self, features, tokens, cache=None, positions=None, tree_mask=None):
        """Predict next features. features: [b, n, H]; tokens: [b, n] (shifted); -> [b, n, H].

        With a cache (decoding, b = 1), new entries are appended; `tree_mask: [n, m]` restricts
        attention over the last m entries, the new ones included (see `attention_mask_4d`). Without a cache (training)
        attention is causal over the n positions.
        """
        x = self.fuse(features, tokens)
        positions, mask = layer_positions_and_mask(x, cache, positions, tree_mask)
        return self.layers[0](x, attention_mask=mask, position_ids=positions,
                              past_key_values=cache, use_cache=cache is not None,
                              position_embeddings=self.rotary(x, positions))

    # --- save / load ----------------------------------------------------------------------
    def config_dict(self) -> dict:
        return {"format": "eagle_mini.head/1", "target_name": self.target_name,
                "target_config": self.target_config.to_dict(), "fc_bias": self.fc.bias is not None,
                "input_mode": self.input_mode, "draft_vocab_size": self.draft_vocab_size}

    def save(self, out_dir, dtype=torch.bfloat16, extra: dict | None = None) -> Path:
        """safetensors (trainable weights + draft vocabulary map) + config.json."""
        return save_head_dir(self, out_dir, dtype, extra)

    @classmethod
    def load(cls, head_dir, target=None) -> "DraftHead":
        """Load a head saved by `save` and attach it (`heads.load_head` also reads EAGLE-3 heads
        and official EAGLE-1 checkpoints). A missing or damaged file is named in an
        `EagleMiniError`."""
        d, cfg, tensors = read_head_dir(head_dir)
        try:
            target_config = AutoConfig.for_model(**cfg["target_config"])
            head = cls(target_config, fc_bias=cfg["fc_bias"],
                       draft_vocab=tensors.pop("draft_to_target"),
                       input_mode=cfg.get("input_mode", "feature+token"),
                       target_name=cfg.get("target_name", ""))
        except (KeyError, TypeError, ValueError) as e:
            raise EagleMiniError(f"{d / 'config.json'} is damaged or not a head config "
                                 f"({type(e).__name__}: {e})") from None
        load_weights(head, tensors, d)
        head.meta = cfg
        return head.attach(target) if target is not None else head


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


def new_head(target, seed: int = 0, **kw) -> DraftHead:
    """A randomly initialized head for `target`, attached."""
    torch.manual_seed(seed)
    return DraftHead(target.config, target_name=target.name, **kw).float().attach(target)
