"""EAGLE-3's two training ideas at course scale: multi-layer features and training-time test.

EAGLE-3 (arXiv 2503.01840, §3) changes what the draft head reads and how it is trained:

* **Multi-layer features.** The head reads the target's hidden states of a low, a middle and a
  high layer, concatenated and fused by an fc layer 3H -> H, instead of the last feature alone.
* **Training-time test.** Training unrolls drafting as decoding runs it: step k reads the head's
  own output of step k-1 in place of the target's feature (EAGLE-3 unrolls 7 steps). The loss is
  the token loss only, step k weighted 0.8^k; the feature-regression loss of EAGLE-1 is dropped,
  so the head's output no longer has to *be* a target feature, only to decode like one.

Our version keeps the course's head (fc 2H -> H, one decoder layer, the target's frozen lm_head
over the draft vocabulary, `head.py`) and puts the fusion in front of it:

    g_i = fuse3(cat(rms(h^low_i), rms(h^mid_i), rms(f_i)))     # Linear(3H -> H), no bias
    the head reads (g_i, t_{i+1}) where EAGLE-1 reads (f_i, t_{i+1})

`rms` is a weightless RMS normalization per layer, our choice: SmolLM2's residual stream carries
massive activations (|h| ~ 2.5e4 at a few positions) that would swamp an unnormalized fc. The
high layer is the feature f itself (after the final norm), so the fused head sees all EAGLE-1 sees.

    >>> r = layer_features(target, examples)[0]                      # doctest: +SKIP
    >>> head = new_fused_head(target, seed=0)                        # doctest: +SKIP
    >>> loss, parts = ttt_loss(head, r["layers"][None], r["features"][None],
    ...                        r["input_ids"][None], r["loss_mask"][None])  # doctest: +SKIP

Left out: decoding with a fused head (`generate` hands a drafter the last feature only), saving or
exporting one, EAGLE-3's own draft lm_head and its 2H-wide attention input, 7 steps at scale.
"""
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import EagleMiniError
from ..head import DraftHead
from ..training.train import chain_acceptance, loss_mask_positions, unrolled_predictions


def feature_layers(num_hidden_layers: int) -> tuple[int, int]:
    """Indices into HF `hidden_states` (0 = embeddings, i = after layer i) of the low and middle
    layers; the high layer is the feature itself.

        >>> feature_layers(30)
        (3, 15)
    """
    return max(1, num_hidden_layers // 8), max(1, num_hidden_layers // 2)


@torch.no_grad()
def layer_features(target, examples) -> list[dict]:
    """Examples (`.input_ids`, `.loss_mask`) -> dicts with `input_ids: [L]`, `features: [L, H]`
    (the last feature, EAGLE-1's input and the labels' source), `layers: [L, 3H]` (low, middle,
    high = features; raw, fp32) and `loss_mask: [L]`. One forward per example."""
    low, mid = feature_layers(target.config.num_hidden_layers)
    rows = []
    for ex in examples:
        ids = torch.as_tensor(list(ex.input_ids), dtype=torch.long, device=target.device)
        if not 2 <= ids.numel() <= target.context_length:
            raise EagleMiniError(f"an example of {ids.numel()} tokens does not fit: need 2 to "
                                 f"{target.context_length} tokens")
        out = target.model.model(input_ids=ids[None], output_hidden_states=True, use_cache=False)
        f = out.last_hidden_state[0].float().cpu()
        low_h, mid_h = (out.hidden_states[i][0].float().cpu() for i in (low, mid))
        rows.append({"input_ids": ids.cpu(), "features": f,
                     "layers": torch.cat([low_h, mid_h, f], -1),
                     "loss_mask": torch.as_tensor(list(ex.loss_mask), dtype=torch.uint8)})
    return rows


class FusedHead(DraftHead):
    """A head reading fused multi-layer features: `fuse3`, then the EAGLE-1 head (EAGLE-3 §3)."""

    def __init__(self, target_config, **kw):
        super().__init__(target_config, **kw)  # fc and layer drawn first: same init as DraftHead
        hidden = target_config.hidden_size
        self.fuse3 = nn.Linear(3 * hidden, hidden, bias=False)

    def fuse_layers(self, layers: torch.Tensor) -> torch.Tensor:
        """layers: [..., 3H] raw (low, mid, high) -> g: [..., H]; each layer is RMS-normalized."""
        parts = layers.to(self.fuse3.weight.dtype).chunk(3, dim=-1)
        h = parts[0].shape[-1]
        return self.fuse3(torch.cat([F.rms_norm(p, (h,), eps=1e-12) for p in parts], dim=-1))


def new_fused_head(target, seed: int = 0, **kw) -> FusedHead:
    """A random `FusedHead`, attached; its fc and layer equal those of `new_head(target, seed)`."""
    torch.manual_seed(seed)
    return FusedHead(target.config, target_name=target.name, **kw).float().attach(target)


def head_inputs(head, inputs: torch.Tensor) -> torch.Tensor:
    """What the head's first draft step reads: fused layers [b, T, 3H] -> [b, T, H] for a
    `FusedHead`; the features themselves for an EAGLE-1 head."""
    return head.fuse_layers(inputs) if isinstance(head, FusedHead) else inputs.float()


def ttt_loss(head, inputs, features, input_ids, loss_mask, steps: int = 3, decay: float = 0.8):
    """Training-time test (EAGLE-3 §3): sum over k < steps of decay^k * CE_k -> (loss, parts).

    CE_k is the soft cross-entropy of the k-th unrolled draft step (`unrolled_predictions`: step k
    reads the head's step k-1 prediction) against the target's next-token distribution
    softmax(lm_head(f_{j+1})) over the draft vocabulary, averaged over assistant positions j whose
    chain starts inside the sequence (j >= k). No feature loss, no input noise.
    inputs: [1, T, H] features or [1, T, 3H] layers (`head_inputs`); features: [1, T, H];
    input_ids, loss_mask: [1, T].
    """
    preds = unrolled_predictions(head, head_inputs(head, inputs), input_ids, steps)
    lm = head._shared["lm_head"]
    with torch.no_grad():
        target_logits = features[0, 1:].float() @ lm.T
        target_p = target_logits.softmax(-1)
    weight = loss_mask_positions(loss_mask)[0]
    loss, ce, top1 = 0.0, [], []
    for k, pred in enumerate(preds):
        w = weight.clone()
        w[:k] = 0  # chains that would start before the sequence
        denom = w.sum().clamp(min=1)
        logits = head.draft_logits(pred)
        ce_k = (-(target_p * logits.log_softmax(-1)).sum(-1) * w).sum() / denom
        loss = loss + decay ** k * ce_k
        ce.append(ce_k.item())
        top1.append(((logits.argmax(-1) == target_logits.argmax(-1)).float() * w).sum().item()
                    / denom.item())
    return loss, {"loss": loss.item(), "ce": ce, "top1": top1, "tokens": int(weight.sum())}


def evaluate(head, rows, steps: int = 3) -> dict:
    """Pooled top-1 (= 0-alpha) and n-alpha over `layer_features` rows, for either kind of head."""
    key = "layers" if isinstance(head, FusedHead) else "features"
    pooled = [[0, 0] for _ in range(steps)]
    for r in rows:
        counts = chain_acceptance(head, r["features"][None], r["input_ids"][None],
                                  r["loss_mask"][None], steps,
                                  inputs=head_inputs(head, r[key][None]))
        for k in range(steps):
            pooled[k][0] += counts[k][0]
            pooled[k][1] += counts[k][1]
    alpha = [a / n if n else float("nan") for a, n in pooled]
    return {"top1": alpha[0], "alpha": alpha, "counts": pooled}
