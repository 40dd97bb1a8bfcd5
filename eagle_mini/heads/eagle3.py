"""The EAGLE-3 draft model (EAGLE-3 §3; reference §5), as the authors define it.

EAGLE-3 changes what the draft reads and what it predicts. It reads the target's hidden states of
a low, a middle and a high layer, and it no longer has to predict the target's next feature: it
is trained on tokens only, through the "training-time test" (`training.eagle3`).

    g_i     = fc(cat(h^low_i, h^mid_i, h^high_i))             # Linear(3H -> H), no bias
    x       = cat(input_layernorm(embed(t_{i+1})), hidden_norm(g_i))   # 2H: embedding first
    a       = g_i + self_attn(x)                               # q, k, v read 2H; residual is g_i
    o_i     = a + mlp(post_attention_layernorm(a))             # the layer's pre-norm output
    p_draft = softmax(lm_head(norm(o_i)))                      # its own lm_head, draft vocabulary

The h's are the hidden states *entering* decoder layers 2, L//2 and L-3 of an L-layer target
(raw, before any norm; Hugging Face `hidden_states` indices 2, L//2, L-3; `aux_layers`). The layer
is a Llama layer whatever the target's family, as the authors' `LlamaForCausalLMEagle3` is
(`draft_layer_config`), and its RoPE is its own (`Eagle3Head.rope`). A draft step after the
first reads o of the previous step in place of g (the width tells which: 3H is the target's, H the
draft's own). The embedding is the target's, frozen; `lm_head` is the draft's own, over the
reduced draft vocabulary. `draft_to_target[i]` is the target id of draft id i; the authors store it
as the offset `d2t[i] = draft_to_target[i] - i`, and `t2d` marks the target ids that have a draft id.

The head has the same interface as the EAGLE-1 head (`head.DraftHead`): `forward(features, tokens,
cache, positions, tree_mask)`, `draft_logits`, `draft_to_target`, `new_cache`, `attach`, so the
drafter, every tree, greedy and sampled verification and the stable cache use it unchanged; the
decoder hands it `target.forward(..., hidden_layers=head.aux_layers)`'s layers instead of the
feature.

    >>> aux_layers(30)
    (2, 15, 27)
"""
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, LlamaConfig
from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaMLP, LlamaRMSNorm,
                                                      LlamaRotaryEmbedding)

from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.base import (architecture_config, check_compatible, layer_positions_and_mask,
                                    load_weights, move_keeping_rope_fp32, read_head_dir,
                                    save_head_dir)
from eagle_mini.target import head_dim

KIND = "eagle3"


def aux_layers(num_hidden_layers: int) -> tuple[int, int, int]:
    """The low, middle and high layers an L-layer target lends the draft, as Hugging Face
    `hidden_states` indices (`hidden_states[i]` enters layer i: the output of layer i - 1).

    From 7 layers on these are the authors' 2, L//2, L-3. Shallower targets (the tests' tiny
    models) would get them out of order or repeated, so they get 1, L//2, L-1: still three
    different raw layer outputs, low to high. Index 0 (the embeddings) and L (the last state,
    after the final norm in Hugging Face) are never used: serving engines capture neither. Under
    4 layers there are not three such states: an error.

        >>> aux_layers(4), aux_layers(6), aux_layers(7)
        ((1, 2, 3), (1, 3, 5), (2, 3, 4))
    """
    if num_hidden_layers < 4:
        raise EagleMiniError(f"EAGLE-3 reads three different layers of the target: a target of "
                             f"{num_hidden_layers} layers has too few (at least 4)")
    if num_hidden_layers < 7:
        return 1, num_hidden_layers // 2, num_hidden_layers - 1
    return 2, num_hidden_layers // 2, num_hidden_layers - 3


# What a draft layer keeps of its target's config; the rest is a Llama config's default.
DRAFT_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "hidden_act", "max_position_embeddings",
                "initializer_range", "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id")


def draft_layer_config(target_config, rope: dict | None = None, rms_norm_eps=None) -> LlamaConfig:
    """The draft layer's config: one Llama layer at the target's sizes, whatever the target's
    family, as the authors' `LlamaForCausalLMEagle3` has it: q/k/v/o and the MLP without
    biases, no q/k norms (a Qwen2 target's q/k/v biases and a Qwen3 target's q/k norms stay the
    target's). `rope` (`rope_parameters` form) and `rms_norm_eps`: the draft's own where a
    published file gives them (`formats.file_rope`), else the target's."""
    kw = {k: getattr(target_config, k) for k in DRAFT_FIELDS if hasattr(target_config, k)}
    kw["head_dim"] = head_dim(target_config)
    if rms_norm_eps is not None:
        kw["rms_norm_eps"] = rms_norm_eps
    cfg = LlamaConfig(**kw, num_hidden_layers=1, attention_bias=False, mlp_bias=False,
                      tie_word_embeddings=False,
                      rope_parameters=dict(rope or target_config.rope_parameters))
    return cfg   # built from fields: no runtime state of the target's (its attention) comes along


class Eagle3Layer(nn.Module):
    """The draft's one decoder layer ("midlayer"): attention over (embedding, fused hidden) at 2H."""

    def __init__(self, layer_config):
        super().__init__()
        hidden, eps = layer_config.hidden_size, layer_config.rms_norm_eps
        self.hidden_norm = LlamaRMSNorm(hidden, eps=eps)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.self_attn = LlamaAttention(layer_config, layer_idx=0)
        for name in ("q_proj", "k_proj", "v_proj"):  # the same outputs, read from 2H
            old = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * hidden, old.out_features, bias=False))
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=eps)
        self.mlp = LlamaMLP(layer_config)

    def forward(self, embedded, hidden, **attn):
        x = torch.cat([self.input_layernorm(embedded), self.hidden_norm(hidden)], dim=-1)
        a = hidden + self.self_attn(hidden_states=x, **attn)[0]
        return a + self.mlp(self.post_attention_layernorm(a))


class Eagle3Head(nn.Module):
    """fc (3H -> H) + midlayer + norm + own lm_head; `attach(target)` lends the frozen embedding."""

    kind = KIND

    def __init__(self, target_config, draft_vocab=None, target_name: str = "", layers=None,
                 rope: dict | None = None, rms_norm_eps: float | None = None):
        super().__init__()
        self.target_config = architecture_config(target_config)   # the head's own, never the live one
        self.target_name = target_name
        # one config for the layer, its rotary and its cache: training switches its attention
        self.layer_config = draft_layer_config(target_config, rope, rms_norm_eps)
        hidden = target_config.hidden_size
        self.aux_layers = tuple(layers) if layers is not None else aux_layers(
            target_config.num_hidden_layers)
        self.fc = nn.Linear(len(self.aux_layers) * hidden, hidden, bias=False)
        self.midlayer = Eagle3Layer(self.layer_config)
        self.norm = LlamaRMSNorm(hidden, eps=self.layer_config.rms_norm_eps)
        vocab = target_config.vocab_size
        d2t = (torch.arange(vocab, device="cpu") if draft_vocab is None  # checked on the host
               else torch.as_tensor(draft_vocab, device="cpu").long())
        if d2t.numel() and (d2t.min() < 0 or d2t.max() >= vocab or d2t.unique().numel() != d2t.numel()):
            raise EagleMiniError("a draft vocabulary must hold distinct target ids")
        self.lm_head = nn.Linear(hidden, d2t.numel(), bias=False)
        self.register_buffer("draft_to_target", d2t, persistent=False)
        self.rotary = LlamaRotaryEmbedding(self.layer_config)
        self._shared = {}

    # --- wiring ---------------------------------------------------------------------------
    def attach(self, target) -> "Eagle3Head":
        """Share the target's embedding (frozen); keep its lm_head for labels and checks only."""
        check_compatible(self, target)
        weight = target.model.lm_head.weight.detach()
        self._shared = {"embed": target.model.model.embed_tokens, "target_lm_head": weight}
        return move_keeping_rope_fp32(self, weight.device, weight.dtype)

    def init_from_target(self, target, norm_scale: float = 1.0) -> "Eagle3Head":
        """Warm start (ours, not the authors' random lm_head): lm_head = the target's rows of the
        draft vocabulary, norm = the target's final norm times `norm_scale`. A head whose output
        equals the target's last pre-norm hidden state then already predicts the target's next
        token. A random layer's output read through those rows gives confident, wrong logits (a
        cross-entropy far above a uniform guess's); a small `norm_scale` starts near uniform
        instead, and the norm's weight learns its own size."""
        if not 0.0 <= norm_scale <= 1.0:
            raise EagleMiniError(f"the warm start's norm scale lies in [0, 1], got {norm_scale}")
        with torch.no_grad():
            rows = target.model.lm_head.weight[self.draft_to_target.to(target.device)]
            self.lm_head.weight.copy_(rows.to(self.lm_head.weight.dtype))
            self.norm.weight.copy_(norm_scale * target.model.model.norm.weight.to(self.norm.weight.dtype))
        return self

    def freeze_lm_head(self) -> "Eagle3Head":
        """Train no lm_head (ours, not the authors'): after `init_from_target` the head reads
        through the target's own rows, as an EAGLE-1 head reads through the target's frozen
        lm_head, and only fc, the layer and the norm learn. The layout and export are unchanged."""
        self.lm_head.weight.requires_grad_(False)
        return self

    @property
    def lm_head_frozen(self) -> bool:
        return not self.lm_head.weight.requires_grad

    @property
    def draft_vocab_size(self) -> int:
        return self.draft_to_target.numel()

    @property
    def rope(self) -> dict:
        """The draft's RoPE (`rope_parameters` form): the target's unless the head was built with
        its own (`load_eagle3` reads a published draft's); saved, loaded and exported with it."""
        return dict(self.layer_config.rope_parameters)

    @property
    def t2d(self) -> torch.Tensor:
        """[vocab] bool: which target ids the draft vocabulary holds (the authors' `t2d`)."""
        mask = torch.zeros(self.target_config.vocab_size, dtype=torch.bool,
                           device=self.draft_to_target.device)
        mask[self.draft_to_target] = True
        return mask

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache(config=self.layer_config)

    # --- computation ----------------------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's embedding of `tokens`, frozen (no gradient flows into the target)."""
        return self._shared["embed"](tokens).detach()

    def frozen_linears(self) -> list:
        """None: the head's lm_head is its own (`DraftHead.frozen_linears`)."""
        return []

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """The layer's pre-norm outputs [n, H] -> draft logits [n, draft_vocab]."""
        return self.lm_head(self.draft_input(predicted))

    def draft_input(self, predicted: torch.Tensor) -> torch.Tensor:
        """What the output rows (`draft_weight`) multiply: the normed outputs."""
        return self.norm(predicted)

    def draft_weight(self) -> torch.Tensor:
        """The output rows [draft_vocab, H]: the head's own lm_head."""
        return self.lm_head.weight

    def forward(self, features, tokens, cache=None, positions=None, tree_mask=None):
        """One draft step. features: [b, n, 3H] target layers (first step) or [b, n, H] the
        draft's own outputs; tokens: [b, n] (shifted). -> pre-norm outputs [b, n, H].
        Cache, positions and tree_mask as in `DraftHead.forward`."""
        w = self.fc.weight
        hidden = features.to(w.dtype)
        if hidden.shape[-1] == self.fc.in_features:
            hidden = self.fc(hidden)
        elif hidden.shape[-1] != self.fc.out_features:
            raise EagleMiniError(f"an EAGLE-3 head reads {self.fc.in_features} (target layers) "
                                 f"or {self.fc.out_features} (its own output) wide inputs, "
                                 f"got {hidden.shape[-1]}")
        emb = self.embed(tokens).to(w.dtype)
        positions, mask = layer_positions_and_mask(hidden, cache, positions, tree_mask)
        return self.midlayer(emb, hidden, attention_mask=mask, position_ids=positions,
                             past_key_values=cache, use_cache=cache is not None,
                             position_embeddings=self.rotary(hidden, positions))

    # --- save / load ----------------------------------------------------------------------
    def config_dict(self) -> dict:
        return {"format": "eagle_mini.heads.eagle1/1", "kind": KIND, "target_name": self.target_name,
                "target_config": self.target_config.to_dict(), "aux_layers": list(self.aux_layers),
                "rope_parameters": self.rope, "rms_norm_eps": self.layer_config.rms_norm_eps,
                "draft_vocab_size": self.draft_vocab_size,
                **({"lm_head_frozen": True} if self.lm_head_frozen else {})}

    def save(self, out_dir, dtype=torch.bfloat16, extra: dict | None = None) -> Path:
        """safetensors (weights + draft vocabulary map) + config.json, as `DraftHead.save`."""
        return save_head_dir(self, out_dir, dtype, extra)

    @classmethod
    def load(cls, head_dir, target=None) -> "Eagle3Head":
        """Load a head saved by `save` and attach it; errors as `DraftHead.load`."""
        d, cfg, tensors = read_head_dir(head_dir)
        if cfg.get("kind") != KIND:
            raise EagleMiniError(f"{d} holds a {cfg.get('kind', 'eagle1')} head, not an EAGLE-3 head")
        try:
            target_config = AutoConfig.for_model(**cfg["target_config"])
            head = cls(target_config, draft_vocab=tensors.pop("draft_to_target"),
                       target_name=cfg.get("target_name", ""), layers=cfg.get("aux_layers"),
                       rope=cfg.get("rope_parameters"), rms_norm_eps=cfg.get("rms_norm_eps"))
        except (KeyError, TypeError, ValueError) as e:
            raise EagleMiniError(f"{d / 'config.json'} is damaged or not a head config "
                                 f"({type(e).__name__}: {e})") from None
        load_weights(head, tensors, d)
        if cfg.get("lm_head_frozen"):
            head.freeze_lm_head()
        head.meta = cfg
        return head.attach(target) if target is not None else head


def new_eagle3_head(target, seed: int = 0, draft_vocab=None, warm_start: bool = True,
                    freeze_lm_head: bool = False, norm_scale: float = 1.0, **kw) -> Eagle3Head:
    """A randomly initialized EAGLE-3 head for `target`, attached; `warm_start` copies the
    target's lm_head rows and final norm, scaled by `norm_scale` (`Eagle3Head.init_from_target`),
    `freeze_lm_head` then keeps those rows (`Eagle3Head.freeze_lm_head`)."""
    if freeze_lm_head and not warm_start:
        raise EagleMiniError("a frozen lm_head must start from the target's rows (warm_start): "
                             "a random one would never learn")
    if norm_scale != 1.0 and not warm_start:
        raise EagleMiniError("a norm scale scales the warm start's norm (warm_start: "
                             "--lm-head-init target or frozen); a random lm_head has none")
    torch.manual_seed(seed)
    head = Eagle3Head(target.config, draft_vocab=draft_vocab, target_name=target.name, **kw)
    head = head.float().attach(target)
    if warm_start:
        head.init_from_target(target, norm_scale)
    return head.freeze_lm_head() if freeze_lm_head else head
