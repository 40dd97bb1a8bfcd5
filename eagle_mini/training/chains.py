"""Draft chains run from every position at once, as decoding runs them (EAGLE §3.1, EAGLE-3 §3).

Both training losses and the teacher-forced n-alpha read these: `unrolled_predictions` makes the
chains, `chain_acceptance` counts how far they would be accepted (`chain_outcomes`: position by
position), `loss_mask_positions` says which positions count and `reading_ids` which token each
position reads.

Unrolled pass k attends over a cache of k + 1 blocks of n entries, but each query sees only the
true entries 0..j-k of block 0 and one entry of each later block, its own chain. A dense mask
makes attention cost (k + 1) n^2 per pass; `chain_attention` scores the true block as one n x n
product and the chain as k dot products per query, n^2 + kn, as the authors' training code does.
Over K passes (pass 0 is plain causal) this takes K (K + 1) / 2 n^2 down to K n^2. What attention
cost of a training step with the dense mask is measured by `scripts/probe_eagle3_step.py`
(data/heads/smollm2-135m/EXPERIMENTS.md).
"""
from contextlib import contextmanager, nullcontext

import torch
from transformers import AttentionInterface

from eagle_mini.errors import EagleMiniError

CHAIN_ATTENTION = "eagle_mini_chain"


def chain_attention(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0,
                    **kwargs):
    """Attention of unrolled pass k, exactly as the dense chain mask of `unrolled_predictions`
    would give it, without scoring the masked-out entries. A Hugging Face attention function
    (registered as CHAIN_ATTENTION; `attention_mask` is not read: the layout says it all).

    query: [b, h, n, d]; key, value: [b, h_kv, (k + 1) n, d], blocks of n: block 0 the true
    entries, block m pass m's. Query j reads block 0's entries 0..j-k and entry j-k+m of block m
    (clamped at 0, rows j < k are unused). -> ([b, n, h, d], None).
    """
    n = query.shape[-2]
    k = key.shape[-2] // n - 1
    if k < 1 or key.shape[-2] != (k + 1) * n:
        raise EagleMiniError(f"chain attention reads a cache of whole passes of the {n} queries, "
                             f"got {key.shape[-2]} entries")
    groups = query.shape[1] // key.shape[1]           # grouped-query attention: share kv heads
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    j = torch.arange(n, device=query.device)
    true = (query @ key[..., :n, :].transpose(-1, -2)) * scaling                    # [b, h, n, n]
    true = true.masked_fill(j[None, :] > j[:, None] - k, float("-inf"))
    at = torch.stack([(j - k + m).clamp(min=0) + m * n for m in range(1, k + 1)], 1)  # [n, k]
    chain_k, chain_v = key[..., at, :], value[..., at, :]                     # [b, h, n, k, d]
    chain = (query.unsqueeze(-2) * chain_k).sum(-1) * scaling                       # [b, h, n, k]
    p = torch.cat([true, chain], -1).float().softmax(-1).to(query.dtype)
    out = p[..., :n] @ value[..., :n, :] + (p[..., n:].unsqueeze(-1) * chain_v).sum(-2)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(CHAIN_ATTENTION, chain_attention)


@contextmanager
def _chain_layout(head):
    """While inside, the head's attention is `chain_attention` (its layer config is shared by
    its attention module, which looks the function up on every call)."""
    cfg = getattr(head, "module", head).layer_config
    before = cfg._attn_implementation
    cfg._attn_implementation = CHAIN_ATTENTION
    try:
        yield
    finally:
        cfg._attn_implementation = before


def loss_mask_positions(loss_mask: torch.Tensor) -> torch.Tensor:
    """Which head positions i (predicting f_{i+1}) count: those whose token t_{i+1} is assistant."""
    return loss_mask[:, 1:].float()


def reading_ids(input_ids: torch.Tensor, token_shift: int = 1) -> torch.Tensor:
    """Ids `r` such that the head at position i reads `r[:, i + 1]`: t_{i+1} for EAGLE's shifted
    token (token_shift=1, `input_ids` itself), t_i for the *unshifted* token of the feature-
    uncertainty ablation (token_shift=0, EAGLE §3.1, Fig. 8). input_ids: [b, T] -> [b, T].

        >>> reading_ids(torch.tensor([[5, 6, 7]]), token_shift=0)
        tensor([[5, 5, 6]])
    """
    if token_shift not in (0, 1):
        raise EagleMiniError(f"token_shift must be 0 or 1, got {token_shift!r}")
    return input_ids if token_shift else torch.cat([input_ids[:, :1], input_ids[:, :-1]], dim=1)


def unrolled_predictions(head, features, input_ids, steps: int = 4, dense: bool = False):
    """Chain drafts from every position at once, as decoding would make them (EAGLE §3.1).

    Pass 0 reads true features: entry j = (f_j, t_{j+1}). Pass k reads pass k-1's prediction:
    entry j = (p_{k-1, j-1}, t_{j+1}) at position j, and attends to the true entries 0..j-k plus
    its own chain (pass m entry j-k+m, m = 1..k): exactly the head cache of a k-step chain draft
    started at position j-k. Each pass is one forward appended to the same cache with that mask
    (EAGLE-3's "training-time test" unrolls drafting the same way).
    features: [1, T, H], input_ids: [1, T] -> list of `steps` tensors [T-1, H].
    dense: attend through the dense mask (the reference `chain_attention` is tested against)
    instead of `chain_attention`.
    """
    f, tok = features[0, :-1].float(), input_ids[0, 1:]
    n = f.shape[0]
    cache = getattr(head, "module", head).new_cache()
    preds = [head(f[None], tok[None], cache=cache)[0]]
    j = torch.arange(n)
    for k in range(1, steps):
        prev = torch.cat([preds[-1][:1] * 0, preds[-1][:-1]])  # p_{k-1, j-1}; row 0 is unused
        mask = torch.zeros(n, (k + 1) * n, dtype=torch.bool)
        mask[:, :n] = j[None, :] <= (j[:, None] - k)               # true entries 0..j-k
        for m in range(1, k + 1):                                   # the chain, self included
            mask[j, m * n + (j - k + m).clamp(min=0)] = True
        with _chain_layout(head) if not dense else nullcontext():
            preds.append(head(prev[None], tok[None], cache=cache, positions=j, tree_mask=mask)[0])
    return preds


@torch.no_grad()
def chain_outcomes(head, features, input_ids, loss_mask, steps: int = 4, token_shift: int = 1,
                   inputs=None) -> dict:
    """What `chain_acceptance` counts, position by position: `preds` (`unrolled_predictions`, a
    list of `steps` tensors [T-1, H]), `target_next` [T-1] (the target's argmax from f_{j+1}, the
    label of position j), `draft` [steps, T-1] (each step's draft token, target ids), `correct`
    (draft == target_next) and `tried` [steps, T-1] (the chain reached step k at position j: an
    assistant position whose ancestors were accepted and followed by the text). Arguments as
    `chain_acceptance`'s."""
    f = features[0].float()
    target_next = (f[1:] @ head._shared["target_lm_head"].float().T).argmax(-1)  # target's t_{j+2}
    preds = unrolled_predictions(head, features if inputs is None else inputs,
                                 reading_ids(input_ids, token_shift), steps)
    tok = input_ids[0]
    n = f.shape[0] - 1
    agree = torch.zeros(n, dtype=torch.bool)
    agree[:-1] = tok[2:] == target_next[:-1]
    drafts, corrects, tried = [], [], []
    for k, p in enumerate(preds):
        draft = head.draft_to_target[head.draft_logits(p).argmax(-1)]
        correct = draft == target_next
        ok = loss_mask[0, 1:].bool().clone()
        for m in range(k):  # chain ancestor at j-k+m: accepted, and the text followed it
            idx = torch.arange(n) - k + m
            anc = torch.zeros(n, dtype=torch.bool)
            anc[idx >= 0] = corrects[m][idx[idx >= 0]] & agree[idx[idx >= 0]]
            ok &= anc
        drafts.append(draft)
        corrects.append(correct)
        tried.append(ok)
    return {"preds": preds, "target_next": target_next, "draft": torch.stack(drafts),
            "correct": torch.stack(corrects), "tried": torch.stack(tried)}


@torch.no_grad()
def chain_acceptance(head, features, input_ids, loss_mask, steps: int = 4,
                     token_shift: int = 1, inputs=None) -> dict:
    """n-alpha for n = 0..steps-1 (reference §6), teacher-forced on one sequence, as counts.

    n-alpha = acceptance of the draft token at chain step n given that every earlier step was
    accepted -- and that the text's token agrees with the target's choice there, so that the chain
    is one greedy decoding would have followed. 0-alpha is top-1 accuracy against the target's
    argmax. Returns {n: (accepted, tried)} so callers can pool sequences (`chain_outcomes` gives
    them per position).
    token_shift=0: a head that reads the unshifted token t_j at entry j (`reading_ids`); its chain
    has the same labels and conditions, only the tokens it reads move (see `uncertainty.py`).
    inputs: what the head reads where it is not the feature itself (an EAGLE-3 fused head's
    normalized layers, `eagle3.head_inputs`); `features` still give the labels.
    """
    out = chain_outcomes(head, features, input_ids, loss_mask, steps, token_shift, inputs)
    return {k: (int((correct & ok).sum()), int(ok.sum()))
            for k, (correct, ok) in enumerate(zip(out["correct"], out["tried"]))}
