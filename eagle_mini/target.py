"""The target model as EAGLE sees it: features, tree-masked forwards and a KV cache we can compact.

EAGLE §3 verifies a whole draft tree in one forward of the unmodified target. Three things make that
possible with any Hugging Face causal LM, without forking its modeling file:

* **explicit position ids**: a node at depth d sits at position `prefix_len + d` (EAGLE §3.1), so
  siblings share a position;
* **a 4D attention mask**: each new token attends to the whole cached prefix and to its tree
  ancestors and itself; HF passes a ready 4D mask through unchanged;
* **cache compaction**: after verification only the accepted path's entries are kept, gathered into
  contiguous positions, so the cache looks as if only that path had been run.

The **feature** (EAGLE §3.1) is the last hidden state *after* the final norm, i.e. the input of
`lm_head`; we run `model.model` and `model.lm_head` ourselves so both come out of one forward.

The algorithm needs nothing else from the model, and changes nothing in it. *How* a forward runs on
a machine is the runtime layer's business (`eagle_mini/runtime/`), and everything it may change is
declared in `Target.runtime` (`Runtime`):

* `runtime/packed.py` (through `runtime/kernels.py`) routes each linear's `forward` through
  weights laid out once; which kernels run is `runtime.kernels`, and `unpack_linears` undoes it;
* `runtime/exact/` swaps linears for fixed-order ones, sets the attention implementation and
  the config fields that attention reads, and hooks `model.model` to hand every layer the
  forward's key lists; its finding is `runtime.exact`, and every change goes through
  `runtime.edits` (`runtime/state.py`), which saved what was there and restores all of it.

A draft head never inherits any of this: it is built from the target config's architecture
fields only (`heads/base.architecture_config`).
"""
import contextlib
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from eagle_mini.data import require_chat_template
from eagle_mini.errors import EagleMiniError


@dataclass
class Step:
    """What one target forward returns: `logits: [n, vocab]`, `features: [n, hidden]` and, when
    asked for (`hidden_layers`), `layers: [n, k * hidden]`, the hidden states entering k layers."""
    logits: torch.Tensor
    features: torch.Tensor
    layers: torch.Tensor | None = None


@dataclass
class Runtime:
    """What a target's forwards run with beyond its weights, all of it set by `eagle_mini/runtime`
    and read from here (results files record it): `kernels`, the matmul kernels' record
    (`runtime.kernels.use_kernels`, None: as loaded); `exact`, exact mode's record
    (`runtime.exact.ExactRecord`, None: off); `edits`, the changes made to the model with what they
    replaced (`runtime.state.ModelEdits`, None: none); `prefill`, how an exact target prefills an
    empty cache: "stock" (the stock forward, exact mode's edits suspended for that one call) or
    "exact" (row invariant, as every later forward).

    A prefill may run the stock forward because vanilla and EAGLE both prefill the prompt with the
    same single call: they then hold the same cache, and every later forward, where EAGLE's tree
    must give vanilla's one-token bits, runs exact. What that gives up: a decoder that prefills the
    prompt with more tokens in the same call (Hugging Face's prompt lookup, with its first
    candidates) caches other bits for the prompt than vanilla's stock prefill, and may part from
    vanilla at near-ties; "exact" keeps it equal, for a prefill several times slower on a CPU."""
    kernels: dict | None = None
    exact: object | None = None
    edits: object | None = field(default=None, repr=False)
    prefill: str = "stock"

    @property
    def stock_prefill(self) -> bool:
        """Whether a prefill of an empty cache runs the stock forward (exact mode on, "stock")."""
        return self.is_exact and self.prefill == "stock" and self.edits is not None

    @property
    def is_exact(self) -> bool:
        """Whether verification runs in exact mode (its self-check passed)."""
        return bool(self.exact is not None and self.exact.exact)


class Target:
    """A HF causal LM plus what drafting and verification need from it; `runtime` declares
    what the runtime layer changed in it (see the module's docstring)."""

    def __init__(self, model, tokenizer=None, name: str = "target"):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.runtime = Runtime()
        self.config = model.config
        eos = getattr(model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = getattr(model.config, "eos_token_id", None)
        self.eos_token_ids = set([eos] if isinstance(eos, int) else (eos or []))

    @property
    def kernels(self) -> dict | None:
        """`runtime.kernels`: which CPU matmul kernels run (`runtime.kernels.use_kernels`)."""
        return self.runtime.kernels

    @kernels.setter
    def kernels(self, record: dict | None) -> None:
        self.runtime.kernels = record

    @property
    def exact(self):
        """`runtime.exact`: exact mode's record (`runtime.exact`), None when off."""
        return self.runtime.exact

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.lm_head.weight.dtype

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.model.lm_head.weight.shape[0]

    @property
    def context_length(self) -> int:
        return self.config.max_position_embeddings

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

    def chat_ids(self, prompt) -> list[int]:
        """A user prompt (str) or a list of chat messages -> token ids ready for generation."""
        if self.tokenizer is None:
            raise EagleMiniError(f"{self.name} has no tokenizer: pass token ids")
        require_chat_template(self.tokenizer, self.name)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def decode(self, ids) -> str:
        if self.tokenizer is None:
            return " ".join(str(i) for i in ids)
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @torch.no_grad()
    def forward(self, input_ids, cache: DynamicCache, positions=None, tree_mask=None,
                all_logits: bool = True, hidden_layers=None) -> Step:
        """Run n new tokens over the cached prefix and append their keys/values to `cache`.

        input_ids: [n] new tokens. positions: [n] absolute positions (default: right after the
        cache). tree_mask: [n, n] bool, row i = which new tokens token i may see (ancestors + self);
        None means an ordinary causal chain (see `attention_mask_4d` for wider masks). With
        `all_logits=False` only the last position's logits are computed (a prefill needs every
        feature but only one distribution). hidden_layers: indices into HF `hidden_states` (i = the
        input of layer i) whose states come back concatenated as `Step.layers` (what an EAGLE-3
        head reads, `eagle3.aux_layers`).
        """
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device).view(1, -1)
        n = ids.shape[1]
        past = cache.get_seq_length()
        if past + n > self.context_length:
            raise EagleMiniError(f"{past + n} tokens exceed {self.name}'s context length "
                                 f"{self.context_length}")
        if positions is None:
            positions = torch.arange(past, past + n, device=self.device)
        positions = torch.as_tensor(positions, dtype=torch.long, device=self.device).view(1, -1)
        mask = None
        if tree_mask is not None:
            mask = attention_mask_4d(tree_mask, past, self.dtype, self.device)
        stock = past == 0 and self.runtime.stock_prefill   # `Runtime.prefill`
        with self.runtime.edits.suspended() if stock else contextlib.nullcontext():
            out = self.model.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                   past_key_values=cache, use_cache=True,
                                   output_hidden_states=hidden_layers is not None)
            features = out.last_hidden_state[0]
            logits = self.model.lm_head(features if all_logits else features[-1:])
        layers = None
        if hidden_layers is not None:
            layers = torch.cat([out.hidden_states[i][0] for i in hidden_layers], dim=-1)
        return Step(logits=logits.float(), features=features, layers=layers)


def head_dim(config) -> int:
    """A config's attention head size: its own `head_dim`, else hidden size over heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def attention_mask_4d(tree_mask, past: int, dtype, device) -> torch.Tensor:
    """[n, m] bool mask over the last m cache entries -> [1, 1, n, past + n] additive mask.

    The n new tokens are the last n of the m entries the mask covers; everything before those m
    entries (the stable prefix) is always visible. The target passes m = n (its tree); the draft
    head passes m > n while it grows a tree over its own earlier draft entries. An explicit mask is
    also what keeps SDPA from its `is_causal` shortcut, which aligns the triangle wrongly once
    there is a cache.
    """
    tree_mask = torch.as_tensor(tree_mask, device=device).bool()
    n, m = tree_mask.shape
    total = past + n
    allowed = torch.cat([torch.ones(n, total - m, dtype=torch.bool, device=device), tree_mask], dim=1)
    mask = torch.zeros(n, total, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.view(1, 1, n, total)


def keep_cache_entries(cache: DynamicCache, start: int, keep) -> None:
    """Keep the prefix `[:start]` and the new entries `start + keep` (in that order), drop the rest.

    After tree verification, `keep` is the accepted path's node indices; the kept entries become
    contiguous, exactly as if only that path had been run (EAGLE §3.3). Works in place on every
    layer: only the kept entries that must move are copied (down to `start + i`), then the cache
    is cut after them, so the prefix (hundreds of entries) is never copied.
    """
    keep = torch.as_tensor(keep, dtype=torch.long, device="cpu")   # node ids, read on the host
    n = len(keep)
    moves = not torch.equal(keep, torch.arange(n, device="cpu"))  # a chain's path stays in place
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False):
            continue
        if moves:
            idx = (start + keep).to(layer.keys.device)
            layer.keys[..., start:start + n, :] = layer.keys.index_select(-2, idx)
            layer.values[..., start:start + n, :] = layer.values.index_select(-2, idx)
        layer.keys = layer.keys[..., :start + n, :]
        layer.values = layer.values[..., :start + n, :]


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Cut the cache back to its first `length` entries (`crop` takes a negative count in 5.x)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
