"""The draft layer's decoding step in fewer ops: what drafting costs on a CPU is mostly per-op
overhead, not arithmetic.

EAGLE's head is one decoder layer of the target's type (EAGLE §3.1), and a cycle runs it about
`depth` times on a handful of rows (EAGLE-2 §4). On a 2-core CPU each run is bound by the number of
small ops, not by reading its weights: Hugging Face's layer computes the rotary angles from the
positions every call, builds an additive mask, repeats the key/value heads for grouped-query
attention, and runs q, k, v, gate and up as five products. This step computes the same function
with fewer, larger ops:

* q, k and v as one product, gate and up as another (`Fused`: the weights concatenated once,
  refreshed when the head's weights change);
* the rotary angles read from a table the head's own rotary module fills once per length, and the
  rotation of each half done by one `flip` against a signed sine;
* attention by `scaled_dot_product_attention` with a boolean mask and grouped heads, no repeat;
* the post-attention norm by `rms_norm` in fp32, cast back as Hugging Face's is.

Drafting need not be exact (only verification must be, EAGLE §3.3): the step agrees with the
Hugging Face layer to rounding (tests compare both on trees of every shape the drafter makes), and a
layer it does not know (norms on q and k, a sliding window, a rope that depends on the length, an
activation other than SiLU) keeps the Hugging Face forward (`lean_step` says None).
"""
import torch
import torch.nn.functional as F
from torch import nn

# rope types whose angles depend on the position alone (a dynamic or long rope rescales with length)
STATIC_ROPES = ("default", "linear", "llama3", "yarn")


def supports(layer, rotary, config) -> bool:
    """Whether `layer` is the plain Llama-style layer this step computes (module docstring)."""
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    needed = [(attn, ("q_proj", "k_proj", "v_proj", "o_proj")), (mlp, ("gate_proj", "up_proj", "down_proj"))]
    if any(m is None or not all(isinstance(getattr(m, n, None), nn.Linear) for n in names)
           for m, names in needed):
        return False
    norm = getattr(layer, "post_attention_layernorm", None)
    return (not hasattr(attn, "q_norm") and not hasattr(attn, "k_norm")
            and isinstance(layer.input_layernorm, nn.Identity)
            and type(norm).__name__.endswith("RMSNorm") and hasattr(norm, "variance_epsilon")
            and getattr(config, "hidden_act", None) == "silu"
            and not getattr(config, "sliding_window", None)
            and getattr(rotary, "rope_type", None) in STATIC_ROPES
            and not getattr(config, "attn_logit_softcapping", None))


class Fused(nn.Module):
    """Linears sharing one input as one product: their weights (and biases) concatenated. A copy,
    kept in step with the linears: refreshed in place when any of them changed, so a packed copy
    of it (`runtime/packed.py`) repacks too. The two copies hold about two thirds of the layer's
    weights, made at the first decoding step, not at load; a head with `use_lean = False` makes
    none."""

    def __init__(self, linears):
        super().__init__()
        self.parts = tuple(linears)
        self.sizes = [m.out_features for m in self.parts]
        w = self.parts[0].weight
        bias = self.parts[0].bias is not None
        self.linear = nn.Linear(w.shape[1], sum(self.sizes), bias=bias, device=w.device, dtype=w.dtype)
        self.linear.requires_grad_(False)
        self.seen = None
        self.refresh()

    def versions(self):
        return [(m.weight.data_ptr(), m.weight._version, m.weight.dtype) for m in self.parts]

    @torch.no_grad()
    def refresh(self):
        if self.seen == self.versions():
            return
        w = self.parts[0].weight
        if self.linear.weight.dtype != w.dtype or self.linear.weight.device != w.device:
            self.linear.to(device=w.device, dtype=w.dtype)
        self.linear.weight.copy_(torch.cat([m.weight for m in self.parts]))
        if self.linear.bias is not None:
            self.linear.bias.copy_(torch.cat([m.bias for m in self.parts]))
        self.seen = self.versions()

    def forward(self, x):
        self.refresh()
        return self.linear(x).split(self.sizes, dim=-1)


class LeanStep:
    """The decoding step of a head's one decoder layer (module docstring). Call it as the layer is
    called in decoding: `x: [1, n, H]` (the fc output), the head's cache, the n positions and the
    tree mask over the last m cache entries (None: causal over the n new ones)."""

    def __init__(self, layer, rotary):
        attn, mlp = layer.self_attn, layer.mlp
        self.layer, self.rotary = layer, rotary
        self.qkv = Fused([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate_up = Fused([mlp.gate_proj, mlp.up_proj])
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.eps = layer.post_attention_layernorm.variance_epsilon
        self.cos = self.sin = None

    def linears(self) -> list:
        """The fused copies, for a runtime to lay out as it lays out the head's own linears."""
        return [self.qkv.linear, self.gate_up.linear]

    def angles(self, positions: torch.Tensor, like: torch.Tensor):
        """cos and the signed sin ([n, d], in `like`'s dtype) for `positions`, from a table the
        head's rotary fills for every position up to the largest asked (doubling)."""
        top = int(positions.max()) + 1
        if (self.cos is None or self.cos.shape[0] < top or self.cos.dtype != like.dtype
                or self.cos.device != like.device):
            length = max(top, 2 * (0 if self.cos is None else self.cos.shape[0]), 256)
            ids = torch.arange(length, device=like.device).view(1, -1)
            cos, sin = self.rotary(like, ids)
            half = cos.shape[-1] // 2
            self.cos = cos[0]
            self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
        return self.cos[positions], self.sin[positions]

    def rotate(self, x, cos, sin):
        """RoPE: x * cos + rotate_half(x) * sin, the halves swapped by one flip."""
        d = self.head_dim
        swapped = x.unflatten(-1, (2, d // 2)).flip(-2).flatten(-2)
        return x * cos + swapped * sin

    def __call__(self, x, cache, positions, tree_mask=None):
        _, n, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(x)
        q = q.view(1, n, -1, d).transpose(1, 2)
        k = k.view(1, n, -1, d).transpose(1, 2)
        v = v.view(1, n, -1, d).transpose(1, 2)
        cos, sin = self.angles(positions.view(-1), x)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        past = cache.get_seq_length()
        k, v = cache.update(k, v, 0)
        if tree_mask is None:
            tree_mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device)
        mask[:, past + n - tree_mask.shape[1]:] = tree_mask
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling,
                                             enable_gqa=q.shape[1] != k.shape[1])
        h = x + self.layer.self_attn.o_proj(out.transpose(1, 2).reshape(1, n, -1))
        norm = self.layer.post_attention_layernorm
        y = norm.weight * F.rms_norm(h.float(), (h.shape[-1],), eps=self.eps).to(h.dtype)
        gate, up = self.gate_up(y)
        return h + self.layer.mlp.down_proj(F.silu(gate) * up)
