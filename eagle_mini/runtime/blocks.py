"""Attention over fixed key blocks: the fast batch-invariant way of `exact_attention`
(`runtime/exact/attention.py`).

A tree query's keys are the committed cache plus its ancestors; the one-token step vanilla makes at
that node sees the same keys, contiguous. Number them by their place in that "virtual" sequence
and cut it into blocks of `BLOCK` keys at fixed places (0-63, 64-127, ...). Then every reduction
runs over the same numbers in the same order, however many queries share the forward:

* the scores of a query against one block: a product with K = head_dim; every block of the
  committed cache is shared by all queries, so those run as one product with no gather;
* the row's maximum (order does not matter for a maximum) and `exp(score - max)`;
* each block's sum of weights and its weights times values (K = `BLOCK`), then the blocks summed
  from the first to the last (`cumsum`, a sequential scan; the padding blocks add exact zeros).

Two facts of the machine are needed, and `make_exact`'s self-check tests them: a product's rows
do not depend on how many rows run beside it once there are at least `rows` of them (fewer are
padded with zero rows up to `rows`; `min_rows` measures it), and a product's columns do not depend
on how many columns it has. Everything runs in fp32 (the scores of bf16 keys are exact products
accumulated in fp32), so this attention is no less precise than the stock one.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F


BLOCK = 64


@dataclass
class Plan:
    """Where each query's keys lie. The first `shared` keys of the cache (whole blocks, the cache
    padded with zeros up to them) are read by every query where `seen` allows (None: all of them);
    each query's tail, the rest of its virtual sequence padded to whole blocks, is `index` (into
    the cache) where `valid`."""
    shared: int
    seen: torch.Tensor | None   # [q, shared] bool
    index: torch.Tensor         # [q, tail] long
    valid: torch.Tensor         # [q, tail] bool


def blocks_of(keys: int) -> int:
    """`keys` rounded up to whole blocks."""
    return -(-keys // BLOCK) * BLOCK


def chain_plan(q: int, keys: int, device) -> Plan:
    """q new tokens in a chain over keys - q cached ones (a one-token step, a prefill, a chain of
    candidates): the cache *is* each query's virtual sequence, so every key is shared and query i
    sees the first keys - q + i + 1 of them."""
    shared = blocks_of(keys)
    seen = (torch.arange(shared, device=device)
            < (keys - q + 1 + torch.arange(q, device=device)).unsqueeze(1))
    empty = torch.zeros(q, 0, dtype=torch.long, device=device)
    return Plan(shared, seen, empty, empty.bool())


def tree_plan(ancestors: torch.Tensor, committed: int) -> Plan:
    """`ancestors` [q, q] bool: which new keys each query sees (itself included), over a cache of
    `committed` keys every query sees in full: the cache's whole blocks are shared, and each
    query gathers the rest of its virtual sequence (the cache's last part block, then its
    ancestors in order)."""
    q, device = ancestors.shape[0], ancestors.device
    shared = committed // BLOCK * BLOCK
    rest = committed - shared
    counts = ancestors.sum(1)
    order = torch.where(ancestors, torch.arange(q, device=device),
                        q + torch.arange(q, device=device)).sort(1).values
    tail = blocks_of(rest + int(counts.max()))
    index = torch.zeros(q, tail, dtype=torch.long, device=device)
    index[:, :rest] = torch.arange(shared, committed, device=device)
    width = min(q, tail - rest)
    index[:, rest:rest + width] = (order[:, :width] % q) + committed
    valid = torch.arange(tail, device=device) < (rest + counts).unsqueeze(1)
    return Plan(shared, None, index, valid)


def plan_of(attention_mask, q: int, k: int, device) -> Plan | None:
    """The plan of a forward: a chain over the whole cache when there is no mask (a one-token
    step, a prefill), else read from the mask (made once per forward, as every layer gets the same
    mask: `exact.attention.forward_keys`). None for a mask that hides some committed keys (a draft
    head growing its tree over its own earlier entries): such a forward is not a step of vanilla
    decoding, and its caller attends another way."""
    if attention_mask is None:
        return chain_plan(q, k, device)
    rows = attention_mask[0, 0]
    allowed = rows if rows.dtype == torch.bool else rows == 0
    committed = k - q
    new = allowed[:, committed:]
    if not bool(allowed[:, :committed].all()):
        return None
    if torch.equal(new, torch.ones_like(new).tril()):
        return chain_plan(q, k, device)
    return tree_plan(new, committed)


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """`x` with zero rows appended (dim -2) up to `rows`: fewer rows may take another kernel."""
    return x if x.shape[-2] >= rows else F.pad(x, (0, 0, 0, rows - x.shape[-2]))


def blocked(query, key, value, plan: Plan, scale: float, rows: int):
    """query [h, q, d], key and value [kv_heads, n, d] -> [h, q, d] (the module's docstring)."""
    h, q, d = query.shape
    kv, g = key.shape[0], h // key.shape[0]
    shared, tail = plan.shared, plan.index.shape[1]
    qf = (query.float() * scale).view(kv, g, q, d).transpose(1, 2)          # [kv, q, g, d]
    kf, vf = key.float(), value.float()
    parts = []
    if shared:
        ks, vs = (F.pad(x[:, :shared], (0, 0, 0, max(0, shared - x.shape[1]))) for x in (kf, vf))
        first = torch.matmul(pad_rows(qf.reshape(kv, q * g, d), rows), ks.transpose(-1, -2))
        first = first[:, :q * g].view(kv, q, g, shared)
        if plan.seen is not None:
            first = first.masked_fill(~plan.seen.view(1, q, 1, shared), float("-inf"))
        parts.append(first)
    if tail:
        kt, vt = kf[:, plan.index], vf[:, plan.index]                        # [kv, q, tail, d]
        last = torch.matmul(pad_rows(qf, rows), kt.transpose(-1, -2))[:, :, :g]
        parts.append(last.masked_fill(~plan.valid.view(1, q, 1, tail), float("-inf")))
    scores = torch.cat(parts, dim=-1) if len(parts) == 2 else parts[0]
    e = torch.exp(scores - scores.amax(-1, keepdim=True))                    # [kv, q, g, keys]
    e = e.view(kv, q, g, (shared + tail) // BLOCK, BLOCK)
    sums = e.sum(-1)                                                         # [kv, q, g, blocks]
    outs = []
    if shared:
        by_block = e[:, :, :, :shared // BLOCK].permute(0, 3, 1, 2, 4).reshape(
            kv, shared // BLOCK, q * g, BLOCK)
        head = torch.matmul(pad_rows(by_block, rows), vs.view(kv, -1, BLOCK, d))
        outs.append(head[:, :, :q * g].view(kv, -1, q, g, d).permute(0, 2, 3, 1, 4))
    if tail:
        rest = torch.matmul(pad_rows(e[:, :, :, shared // BLOCK:].transpose(2, 3), rows),
                            vt.view(kv, q, tail // BLOCK, BLOCK, d))
        outs.append(rest[..., :g, :].transpose(2, 3))
    out = torch.cat(outs, dim=-2) if len(outs) == 2 else outs[0]             # [kv, q, g, blocks, d]
    total = torch.cumsum(out, dim=-2)[..., -1, :] / torch.cumsum(sums, dim=-1)[..., -1:]
    return total.to(query.dtype).permute(0, 2, 1, 3).reshape(h, q, d)


def min_rows(head_dim: int, device, most: int = 8, seed: int = 0) -> int | None:
    """The fewest rows r from which an fp32 product's rows no longer depend on the row count: any
    count from r up to 256 gives the rows the 256-row product gives (K = head_dim and K = `BLOCK`,
    the two products `blocked` runs). None when no r up to `most` will do."""
    g = torch.Generator().manual_seed(seed)
    bad = 0                       # the largest row count that disagrees with the full product
    for k in (head_dim, BLOCK):
        a = torch.randn(2, 256, k, generator=g).to(device)     # batched, as `blocked` runs them
        b = torch.randn(2, k, 3 * BLOCK, generator=g).to(device)
        full = a @ b
        for n in [*range(1, 17), 24, 32, 48, 64, 100, 128, 200, 255]:
            if not torch.equal(a[:, :n] @ b, full[:, :n]):
                bad = max(bad, n)
    return bad + 1 if bad < most else None
