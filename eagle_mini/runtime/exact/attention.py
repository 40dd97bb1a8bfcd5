"""Exact attention: every query of a tree forward attends, by the computation a one-token step
makes, to exactly its own keys (EAGLE §3.3 made literal for attention).

In reduced precision a query among many masked queries is reduced differently from a query alone,
so a stock tree forward can give a node other bits than the one-token step vanilla makes there.
Here every query attends to the cached prefix and its tree ancestors, in order: the keys a
one-token step at that node would see, contiguous after cache compaction. Three ways compute that,
fastest first (`make_exact` takes the first that passes its self-check):

* `BLOCKS`: those keys cut into blocks at fixed places and reduced in a fixed order, the cache's
  blocks shared by all queries (`runtime/blocks.py`);
* `GROUPED`: queries with as many keys run together in batched products (`single_queries`);
* `ALONE`: one `scaled_dot_product_attention` call per query.

Which keys each query reads depends only on the forward's mask, and Hugging Face hands every
layer the same one, so the key lists (or the blocks' `Plan`) are made once per forward
(`forward_keys`) by `pass_keys`, a pre-hook on the decoder stack that exact mode registers, and
reach every layer as the keyword `exact_keys`: transformers passes a decoder layer's extra keywords
down to the attention function. A caller without the hook gets them made in place, layer by layer:
the same bits, more work.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from eagle_mini.runtime.blocks import Plan, blocked, chain_plan, plan_of

ATTENTION = "eagle_mini_exact"
BLOCKS, GROUPED, ALONE = "fixed key blocks", "grouped by key count", "one query at a time"
PREFILL_CHUNK = 256   # a long chain runs this many queries at a time (rows are row invariant)


@dataclass
class ForwardKeys:
    """Which keys each of a forward's `q` queries reads among `k`, under the 4-D `mask` the layers
    get (None: a causal chain) and the attention `way`: `plan`, the blocks of `BLOCKS`; `chunks`,
    a long chain's plans, `PREFILL_CHUNK` queries each; else `lists`, each query's key indices
    (`keys_of`); nothing at all: one causal call (a prefill, outside `BLOCKS`)."""
    mask: torch.Tensor | None
    q: int
    k: int
    way: str
    plan: Plan | None = None
    chunks: list[Plan] | None = None
    lists: list[torch.Tensor] | None = None

    def fits(self, mask, q: int, k: int, way: str) -> bool:
        """Whether these are the keys of a layer's call with this mask, sizes and way."""
        return self.mask is mask and (self.q, self.k, self.way) == (q, k, way)


def forward_keys(mask, q: int, k: int, device, way: str) -> ForwardKeys:
    """The `ForwardKeys` of q queries over k keys under `mask` (4-D, or None: a causal chain)."""
    found = ForwardKeys(mask, q, k, way)
    plan = plan_of(mask, q, k, device) if way == BLOCKS else None
    if plan is not None and plan.seen is not None and q > PREFILL_CHUNK:
        found.chunks = [chain_plan(min(q, start + PREFILL_CHUNK) - start,
                                   k - q + min(q, start + PREFILL_CHUNK), device)
                        for start in range(0, q, PREFILL_CHUNK)]
    elif plan is not None:
        found.plan = plan
    elif mask is not None:
        found.lists = keys_of(mask)
    elif q == 1 or q != k:   # a chain over a cache (q == k > 1: a prefill, one causal call)
        chain = torch.ones(q, k, dtype=torch.bool, device=device).tril(k - q)
        found.lists = keys_of(chain[None, None])
    return found


def keys_of(attention_mask) -> list[torch.Tensor]:
    """Each query's allowed key indices, in order, from a 4-D mask (additive, 0 = allowed, or
    bool)."""
    rows = attention_mask[0, 0]
    allowed = rows if rows.dtype == torch.bool else rows == 0
    return [row.nonzero().squeeze(1) for row in allowed]


def pass_keys(stack, args, kwargs):
    """Forward pre-hook of the decoder stack (`model.model`): the forward's `ForwardKeys`, made
    once, added to its keywords as `exact_keys`. The layers' attention gets the 4-D mask the stack
    was given, unchanged, and None for any other (`create_causal_mask` makes no mask for an
    attention function it has no mask function for), so the keys are made from that same form.
    Nothing is added outside exact attention or for a batch (each sequence makes its own)."""
    config = stack.config
    ids = kwargs.get("input_ids", args[0] if args else None)
    tokens = ids if ids is not None else kwargs.get("inputs_embeds")
    if config._attn_implementation != ATTENTION or tokens is None or tokens.shape[0] != 1:
        return None
    cache, mask = kwargs.get("past_key_values"), kwargs.get("attention_mask")
    q = tokens.shape[1]
    k = q + (cache.get_seq_length() if cache is not None else 0)
    mask = mask if mask is not None and mask.ndim == 4 else None
    way = getattr(config, "exact_attention", GROUPED)
    return args, {**kwargs, "exact_keys": forward_keys(mask, q, k, tokens.device, way)}


def exact_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                    is_causal=None, exact_keys: ForwardKeys | None = None, **kwargs):
    """HF attention function (query [b, h, q, d], key and value [b, kv_heads, k, d]). Every query
    is a single query over exactly the keys its mask row allows (no mask: a causal chain), in
    order: a one-token step is the case of one query over the whole cache. `exact_keys`: those
    keys as `pass_keys` made them for the whole forward (made here when absent). With `BLOCKS` a
    prefill, too, gives every token the bits of a one-token step, so a prompt split anywhere
    (Hugging Face's prompt lookup prefills the prompt with its first candidates) caches the same
    keys; the other ways prefill with one causal call, shared by vanilla and EAGLE alike."""
    if query.shape[0] > 1:   # a batch: each sequence on its own, as batch 1 computes it
        return torch.cat([exact_attention(
            module, query[b:b + 1], key[b:b + 1], value[b:b + 1],
            None if attention_mask is None else attention_mask[b:b + 1], scaling=scaling)[0]
            for b in range(query.shape[0])]), None
    q, k = query.shape[2], key.shape[2]
    scale = scaling or query.shape[-1] ** -0.5
    way = getattr(module.config, "exact_attention", GROUPED)
    keys = exact_keys
    if keys is None or not keys.fits(attention_mask, q, k, way):
        keys = forward_keys(attention_mask, q, k, query.device, way)
    if keys.chunks is not None:
        rows = module.config.exact_rows
        return chunked_prefill(query, key, value, scale, rows, keys.chunks), None
    if keys.plan is not None:
        out = blocked(query[0], key[0], value[0], keys.plan, scale, module.config.exact_rows)
        return out.transpose(0, 1).unsqueeze(0), None
    if keys.lists is None:
        gqa = {"enable_gqa": True} if key.shape[1] != query.shape[1] else {}
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                             **gqa)
        return out.transpose(1, 2).contiguous(), None
    if way == ALONE:
        out = torch.cat([F.scaled_dot_product_attention(
            query[:, :, i:i + 1], key.index_select(2, idx), value.index_select(2, idx),
            scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
            for i, idx in enumerate(keys.lists)], dim=2)
    else:
        out = single_queries(query, key, value, keys.lists, scale)
    return out.transpose(1, 2).contiguous(), None


def chunked_prefill(query, key, value, scale: float, rows: int, plans: list[Plan]):
    """A causal chain of many queries, `PREFILL_CHUNK` at a time (`plans`, one a chunk), each chunk
    over the keys up to its last query: the same bits per query, in bounded memory."""
    q, k = query.shape[2], key.shape[2]
    outs = []
    for start, plan in zip(range(0, q, PREFILL_CHUNK), plans):
        stop = min(q, start + PREFILL_CHUNK)
        keys = k - q + stop
        outs.append(blocked(query[0, :, start:stop], key[0, :, :keys], value[0, :, :keys], plan,
                            scale, rows))
    return torch.cat(outs, dim=1).transpose(0, 1).unsqueeze(0)


def single_queries(query, key, value, keys, scale: float):
    """Each query i alone over `keys[i]` (key indices in order), batch 1. Queries whose key lists
    have the same length run together, one batched product per step: for each key-value head
    and query, a [g, d] x [d, n] product (g: the query heads sharing that key-value head), softmax
    in fp32 over its own n keys, then [g, n] x [n, d]. A one-token step is one such query."""
    _, h, q, d = query.shape
    kv_heads = key.shape[1]
    g = h // kv_heads
    out = torch.empty(q, h, d, dtype=query.dtype, device=query.device)
    by_length = {}
    for i, idx in enumerate(keys):
        by_length.setdefault(len(idx), []).append(i)
    for rows in by_length.values():
        idx = torch.stack([keys[i] for i in rows])                         # [r, n]
        if len(rows) == 1 and len(idx[0]) == key.shape[2]:   # the whole cache: a view, as laid out
            k, v = key[0].unsqueeze(1), value[0].unsqueeze(1)                # [kv, 1, n, d]
        else:
            k, v = key[0][:, idx], value[0][:, idx]                       # [kv, r, n, d]
        qs = query[0][:, rows].view(kv_heads, g, len(rows), d).transpose(1, 2)   # [kv, r, g, d]
        scores = torch.matmul(qs, k.transpose(-1, -2)).float() * scale    # [kv, r, g, n]
        p = torch.softmax(scores, dim=-1).to(v.dtype)
        o = torch.matmul(p, v)                                            # [kv, r, g, d]
        out[rows] = o.permute(1, 0, 2, 3).reshape(len(rows), h, d)
    return out.transpose(0, 1).unsqueeze(0)                               # batch, heads, q, d


AttentionInterface.register(ATTENTION, exact_attention)
