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
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig

from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.base import (architecture_config, check_compatible, decoder_classes,
                                    frozen_linear, layer_config, layer_positions_and_mask, load_weights, move_keeping_rope_fp32, read_head_dir,
                                    save_head_dir)
from eagle_mini.heads.lean import LeanStep, supports

INPUT_MODES = ("feature+token", "feature", "token")
KIND = "eagle1"


class DraftHead(nn.Module):
    """fc + one decoder layer; `attach(target)` lends it the target's embedding and lm_head."""

    def __init__(self, target_config, fc_bias: bool = True, draft_vocab=None,
                 input_mode: str = "feature+token", target_name: str = ""):
        super().__init__()
        if input_mode not in INPUT_MODES:
            raise EagleMiniError(f"unknown input_mode {input_mode!r}; known: {', '.join(INPUT_MODES)}")
        self.target_config = architecture_config(target_config)   # the head's own, never the live one
        self.target_name = target_name
        self.input_mode = input_mode
        self.layer_config = layer_config(target_config)
        hidden = target_config.hidden_size
        width = 2 * hidden if input_mode == "feature+token" else hidden
        self.fc = nn.Linear(width, hidden, bias=fc_bias)
        layer_cls, rope_cls = decoder_classes(target_config.model_type)
        layer = layer_cls(self.layer_config, layer_idx=0)
        layer.input_layernorm = nn.Identity()  # features are already normalized
        self.layers = nn.ModuleList([layer])
        self.rotary = rope_cls(self.layer_config)
        vocab = target_config.vocab_size
        d2t = torch.arange(vocab) if draft_vocab is None else torch.as_tensor(draft_vocab).long()
        self.register_buffer("draft_to_target", d2t, persistent=False)
        self._shared = {}  # the target's embedding and lm_head: shared, frozen, never saved
        self.use_lean = True   # decode with `lean_step` where it applies

    # --- wiring ---------------------------------------------------------------------------
    def attach(self, target) -> "DraftHead":
        """Share `target`'s embedding and lm_head (restricted to the draft vocabulary)."""
        check_compatible(self, target)
        weight = target.model.lm_head.weight.detach()  # frozen: never part of the head's graph
        full = self.draft_to_target.numel() == weight.shape[0]
        rows = weight if full else weight[self.draft_to_target.to(weight.device)]
        self._shared = {"embed": target.model.model.embed_tokens, "target_lm_head": weight,
                        "lm_head": rows,
                        # the full vocabulary: the target's own module, with its kernels (packed.py);
                        # a draft vocabulary: a frozen linear on its rows, packed with the head's
                        # linears (`frozen_linears`, `runtime.run.pick_head`)
                        "lm_head_module": target.model.lm_head if full else frozen_linear(rows)}
        return move_keeping_rope_fp32(self, weight.device, weight.dtype)

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
        return self._shared["lm_head_module"](self.draft_input(predicted))

    def frozen_linears(self) -> list:
        """The linears the head runs but neither owns nor saves (its draft vocabulary's rows of the
        target's lm_head, the lean step's fused copies), for a runtime to lay out as it lays out the
        head's own."""
        module = self._shared.get("lm_head_module")
        own = module is not None and self.draft_to_target.numel() < self.target_config.vocab_size
        lean = self.lean_step()
        return ([module] if own else []) + ([] if lean is None else lean.linears())

    def lean_step(self):
        """The decoding step of the head's layer in fewer ops (`heads/lean.py`), or None where
        the layer is not one it computes or `use_lean` is off (the Hugging Face forward runs)."""
        if not self.use_lean:
            return None
        if "_lean" not in self.__dict__:
            layer = self.layers[0]
            self.__dict__["_lean"] = (LeanStep(layer, self.rotary)
                                      if supports(layer, self.rotary, self.layer_config) else None)
        lean = self.__dict__["_lean"]
        if lean is not None and lean.rotary is not self.rotary:   # a move replaces the rotary
            lean.rotary, lean.cos, lean.sin = self.rotary, None, None
        return lean

    def draft_input(self, predicted: torch.Tensor) -> torch.Tensor:
        """What the output rows (`draft_weight`) multiply: the predicted features, in their dtype."""
        return predicted.to(self._shared["lm_head"].dtype)

    def draft_weight(self) -> torch.Tensor:
        """The output rows [draft_vocab, H]: the target's lm_head's, for the draft vocabulary."""
        return self._shared["lm_head"]

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
        lean = self.lean_step() if cache is not None and x.shape[0] == 1 else None
        if lean is not None and not torch.is_grad_enabled():   # decoding: the same layer, fewer ops
            n, past = x.shape[1], cache.get_seq_length()
            positions = (torch.arange(past, past + n, device=x.device) if positions is None
                         else torch.as_tensor(positions, device=x.device))
            mask = None if tree_mask is None else torch.as_tensor(tree_mask, device=x.device).bool()
            return lean(x, cache, positions, mask)
        positions, mask = layer_positions_and_mask(x, cache, positions, tree_mask)
        return self.layers[0](x, attention_mask=mask, position_ids=positions,
                              past_key_values=cache, use_cache=cache is not None,
                              position_embeddings=self.rotary(x, positions))

    # --- save / load ----------------------------------------------------------------------
    def config_dict(self) -> dict:
        return {"format": "eagle_mini.heads.eagle1/1", "target_name": self.target_name,
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


def new_head(target, seed: int = 0, **kw) -> DraftHead:
    """A randomly initialized head for `target`, attached."""
    torch.manual_seed(seed)
    return DraftHead(target.config, target_name=target.name, **kw).float().attach(target)
