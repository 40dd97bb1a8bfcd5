"""Exact verification: every node of a tree forward gets bit-identical logits to the one-token
forward vanilla decoding makes at that node's position along its path (EAGLE §3.3 made literal).

In reduced precision a stock tree forward is not *batch invariant*: a row's result depends on how
many rows run beside it, so bf16 EAGLE can part from bf16 vanilla where two tokens nearly tie.
Two places change the order of a reduction with the row count:

* **attention**: a query among many masked queries is reduced differently from a query alone.
  Here every query attends, by the same computation a one-token step makes, to exactly its own
  keys: the cached prefix and its tree ancestors, in order (the keys a one-token step at that node
  would see, contiguous after cache compaction). The fast way cuts those keys into blocks at fixed
  places and reduces them in a fixed order, the cache's blocks shared by all queries
  (`blocks.blocked`); where this machine's products defeat it, queries with as many keys run
  together (`single_queries`), or each runs alone through `scaled_dot_product_attention`;
* **linears**: a matmul's kernel may split its K reduction by the number of rows. A linear whose
  rows come out the same for every row count is left alone; the others are summed over fixed
  K-chunks, in fp32, in a fixed order (`FixedKLinear`), which vanilla then uses too.

Which linears need the chunks depends on the CPU and its kernels, so `make_exact` measures each
weight shape on the machine at hand, then checks a whole tree forward against one-token replays
(`self_check`). Where invariance cannot be had it says why in one line and leaves the model as it
was. Vanilla decoding on an exact target runs the same modules, so "exact vanilla" is the baseline
EAGLE is compared with, and the prefill, shared by both, stays one batched call. What the mode
costs is measured by `profile-target --compare-exact`, both forwards timed in one run.
"""
import hashlib
import sys
import weakref
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface

from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.blocks import BLOCK, blocked, min_rows, plan_of
from eagle_mini.runtime.machine_cache import cached_finding, machine_key
from eagle_mini.runtime.packed import pack_linears, packed_kind
from eagle_mini.runtime.state import edits_of
from eagle_mini.target import crop_cache, head_dim
from eagle_mini.tree import from_choices

ATTENTION = "eagle_mini_exact"
# `exact_attention`'s three ways, fastest first: every query over fixed blocks of its keys, merged in
# a fixed order (`blocked`); batched products over queries with as many keys (`single_queries`); or,
# where neither is invariant, one `scaled_dot_product_attention` call per query.
BLOCKS, GROUPED, ALONE = "fixed key blocks", "grouped by key count", "one query at a time"
CHUNKS = (512, 256, 128)          # K-chunk sizes tried, largest (fewest extra ops) first
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 8, 11, 16, 26, 32, 60, 64)   # the tree sizes a forward may carry
# The self-check's tree: siblings, a chain and both depths of branching, 9 nodes, 4 leaves.
CHECK_CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]


def exact_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                    is_causal=None, **kwargs):
    """HF attention function (query [b, h, q, d], key and value [b, kv_heads, k, d]). Every query
    is a single query over exactly the keys its mask row allows (no mask: a causal chain), in
    order: a one-token step is the case of one query over the whole cache. Three ways compute
    that (`make_exact` takes the first that passes its self-check): `BLOCKS` (`blocks.blocked`),
    `GROUPED` (`single_queries`), `ALONE`. With `BLOCKS` a prefill, too, gives every token the
    bits of a one-token step, so a prompt split anywhere (Hugging Face's prompt lookup prefills
    the prompt with its first candidates) caches the same keys; the other ways prefill with one
    causal call, shared by vanilla and EAGLE alike."""
    if query.shape[0] > 1:   # a batch: each sequence on its own, as batch 1 computes it
        return torch.cat([exact_attention(
            module, query[b:b + 1], key[b:b + 1], value[b:b + 1],
            None if attention_mask is None else attention_mask[b:b + 1], scaling=scaling)[0]
            for b in range(query.shape[0])]), None
    q, k = query.shape[2], key.shape[2]
    scale = scaling or query.shape[-1] ** -0.5
    way = getattr(module.config, "exact_attention", GROUPED)
    plan = plan_of(attention_mask, q, k, query.device) if way == BLOCKS else None
    if plan is not None and plan.seen is not None and q > PREFILL_CHUNK:
        return chunked_prefill(query, key, value, scale, module.config.exact_rows), None
    if plan is not None:
        out = blocked(query[0], key[0], value[0], plan, scale, module.config.exact_rows)
        return out.transpose(0, 1).unsqueeze(0), None
    if q > 1 and q == k and attention_mask is None:
        gqa = {"enable_gqa": True} if key.shape[1] != query.shape[1] else {}
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                             **gqa)
        return out.transpose(1, 2).contiguous(), None
    keys = (keys_of(torch.ones(q, k, dtype=torch.bool, device=key.device).tril(k - q)[None, None])
            if attention_mask is None else keys_of(attention_mask))
    if way == ALONE:
        out = torch.cat([F.scaled_dot_product_attention(
            query[:, :, i:i + 1], key.index_select(2, idx), value.index_select(2, idx),
            scale=scaling, enable_gqa=key.shape[1] != query.shape[1]) for i, idx in enumerate(keys)],
            dim=2)
    else:
        out = single_queries(query, key, value, keys, scale)
    return out.transpose(1, 2).contiguous(), None


PREFILL_CHUNK = 256   # a long chain runs this many queries at a time (rows are row invariant)


def chunked_prefill(query, key, value, scale: float, rows: int):
    """A causal chain of many queries, `PREFILL_CHUNK` at a time, each chunk over the keys up to
    its last query: the same bits per query, in bounded memory."""
    q, k = query.shape[2], key.shape[2]
    outs = []
    for start in range(0, q, PREFILL_CHUNK):
        stop = min(q, start + PREFILL_CHUNK)
        keys = k - q + stop
        plan = plan_of(None, stop - start, keys, query.device)
        outs.append(blocked(query[0, :, start:stop], key[0, :, :keys], value[0, :, :keys], plan,
                            scale, rows))
    return torch.cat(outs, dim=1).transpose(0, 1).unsqueeze(0)


_LAST_MASK = [None, None]   # (weak reference to a mask, its key lists): every layer gets one mask


def keys_of(attention_mask) -> list[torch.Tensor]:
    """Each query's allowed key indices, in order, from a 4-D mask (additive, 0 = allowed, or
    bool). HF hands every layer the same mask tensor, so the lists are made once per forward."""
    if _LAST_MASK[0] is not None and _LAST_MASK[0]() is attention_mask:
        return _LAST_MASK[1]
    rows = attention_mask[0, 0]
    allowed = rows if rows.dtype == torch.bool else rows == 0
    keys = [row.nonzero().squeeze(1) for row in allowed]
    _LAST_MASK[:] = [weakref.ref(attention_mask), keys]
    return keys


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


class ExactLinear(nn.Module):
    """What replaces an `nn.Linear` in exact mode: it shares the weight and bias, and keeps the
    linear itself (unregistered, with any packed copy of its weight) for `restore`."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.replaced = (linear,)   # a tuple: not a submodule, so its parameters are not listed twice
        self.in_features, self.out_features = linear.in_features, linear.out_features


class FixedKLinear(ExactLinear):
    """A linear whose every output row is reduced in the same order whatever the row count: the K
    dimension cut into fixed chunks of `chunk` (the last one padded with zeros), each chunk's
    product in the weight's dtype, summed in fp32 from the first chunk to the last, then cast back
    (bias added last, in fp32). Two layouts of the chunked weight are made once:

    * up to `STACKED_ROWS` rows (a one-token step), where a product costs one read
      of the weight: the chunks stacked as one weight of `chunks` x out rows by `chunk`, packed by
      oneDNN where it can (`packed.py`), and every row's chunks multiplied by all of it in one
      call; each chunk's product is its own block of the result (the rest, chunk i against
      weight j, is thrown away: `chunks` times the FLOPs, one weight read, one call);
    * more rows: all chunks' products in one batched call.

    Whether the two give a row the same bits is a fact of the machine's kernels: `chunk_for`
    measures every row count against rows alone across the switch, and the self-check tests the
    whole forward."""
    STACKED_ROWS = 2

    def __init__(self, linear: nn.Linear, chunk: int):
        super().__init__(linear)
        self.chunk, self.chunks = chunk, -(-self.in_features // chunk)
        with torch.no_grad():
            w = F.pad(linear.weight, (0, self.chunks * chunk - self.in_features))
            by_chunk = w.view(self.out_features, self.chunks, chunk).permute(1, 2, 0).contiguous()
            self.register_buffer("by_chunk", by_chunk, persistent=False)   # [chunks, chunk, out]
            stacked = nn.Linear(chunk, self.chunks * self.out_features, bias=False,
                                device=w.device, dtype=w.dtype)
            stacked.weight.copy_(by_chunk.transpose(1, 2).reshape(-1, chunk))
            stacked.requires_grad_(False)
            pack_linears(stacked, "onednn")
            self.stacked = (stacked,)   # a tuple: a kernel's layout, not a parameter of the model

    def forward(self, x):
        rows = x.reshape(-1, self.in_features)
        if self.chunks * self.chunk != self.in_features:
            rows = F.pad(rows, (0, self.chunks * self.chunk - self.in_features))
        n, c, out = rows.shape[0], self.chunks, self.out_features
        if n <= self.STACKED_ROWS:
            every = self.stacked[0](rows.reshape(n * c, self.chunk)).view(n, c, c, out)
            parts = every.diagonal(dim1=1, dim2=2).permute(2, 0, 1)       # [chunks, rows, out]
        else:
            parts = torch.bmm(rows.view(n, c, self.chunk).transpose(0, 1), self.by_chunk)
        total = parts.float().sum(0)                                  # [rows, out], chunk by chunk
        if self.bias is not None:
            total = total + self.bias.float()
        return total.to(x.dtype).view(*x.shape[:-1], out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, chunk={self.chunk}"


class RowByRowLinear(ExactLinear):
    """The last resort: every row its own one-row product, as a one-token step computes it. Exact
    by construction, but it reads the weight once per row, so verifying n tokens costs about n
    one-token products of this linear (`ExactRecord.line` says so)."""

    def forward(self, x):
        rows = x.reshape(-1, self.in_features)
        out = torch.cat([F.linear(rows[i:i + 1], self.weight, self.bias) for i in range(len(rows))])
        return out.view(*x.shape[:-1], self.out_features)


ROW_BY_ROW = -1   # `chunked` value of a linear that runs `RowByRowLinear`


def row_invariant(fn, in_features: int, dtype, device, rows=ROW_COUNTS, seed: int = 0) -> bool:
    """Whether `fn` (a linear) gives every row the same bits for each row count in `rows`: row i
    of an n-row product against row i alone."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(max(rows), in_features, generator=g).to(device, dtype)
    alone = torch.cat([fn(x[i:i + 1]) for i in range(max(rows))])
    return all(torch.equal(fn(x[:n]), alone[:n]) for n in rows)


@dataclass
class ExactRecord:
    """What `make_exact` did and found: `exact` (the self-check passed), `why` (one line),
    `chunked` ({shape "KxN": chunk} for the linears that needed fixed K-chunks), `how` (measured
    now, or read from this machine's cache)."""
    exact: bool
    why: str
    chunked: dict = field(default_factory=dict)
    attention: str = GROUPED
    rows: int = 0          # `BLOCKS`: products padded to at least this many rows (`min_rows`)
    how: str = "measured now"

    def line(self) -> str:
        """One line for a command's header."""
        if not self.exact:
            return f"exact verification OFF: {self.why} (outputs equal vanilla's up to near-ties)"
        chunks = ", ".join(f"{s} row by row (slow)" if c == ROW_BY_ROW else f"{s} in K-chunks of {c}"
                           for s, c in self.chunked.items()) or "none"
        return (f"exact verification on ({self.why}; attention {self.attention}; linears chunked: "
                f"{chunks}; {self.how})")


def linear_modules(model) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, linear) for every nn.Linear of the model, lm_head included."""
    return [(parent, name, child) for parent in model.modules()
            for name, child in parent.named_children() if isinstance(child, nn.Linear)]


def chunk_for(linear: nn.Linear, rows=ROW_COUNTS) -> int | None:
    """0 when the linear is row invariant as it is, else the largest chunk of `CHUNKS` that makes
    it so, else `ROW_BY_ROW`."""
    w = linear.weight
    with torch.no_grad():
        if row_invariant(linear, linear.in_features, w.dtype, w.device, rows):
            return 0
        for chunk in CHUNKS:
            if chunk < linear.in_features and row_invariant(
                    FixedKLinear(linear, chunk), linear.in_features, w.dtype, w.device, rows):
                return chunk
    return ROW_BY_ROW


def shape_of(linear) -> str:
    return f"{linear.in_features}x{linear.out_features}"


def measure_chunks(model, rows=ROW_COUNTS) -> dict:
    """{shape: chunk} for every linear shape of the model (0: invariant as it is)."""
    chunks = {}
    for _, _, linear in linear_modules(model):
        if shape_of(linear) not in chunks:
            chunks[shape_of(linear)] = chunk_for(linear, rows)
    return chunks


def apply(target, chunked: dict, attention: str = GROUPED, rows: int = 0) -> None:
    """Route the target through exact attention (`attention`: `BLOCKS` with products of at least
    `rows` rows, `GROUPED` or `ALONE`) and its `chunked` linears through `FixedKLinear`. Every
    change goes through the target's `ModelEdits` (`runtime/state.py`), so `restore` undoes it."""
    edits = edits_of(target)
    for parent, name, linear in linear_modules(target.model):
        chunk = chunked.get(shape_of(linear))
        if chunk:
            exact = RowByRowLinear(linear) if chunk == ROW_BY_ROW else FixedKLinear(linear, chunk)
            edits.swap(parent, name, exact)
    edits.set_attention(ATTENTION)
    edits.set_field("exact_attention", attention)
    edits.set_field("exact_rows", rows)


def restore(target) -> None:
    """Undo `apply`: the linears, the attention implementation and the config fields as they were
    before exact mode; the target's `runtime.exact` is None again."""
    if target.runtime.edits is not None:
        target.runtime.edits.undo()
    target.runtime.exact = None


@contextmanager
def stock_forward(target):
    """An exact target's stock forward for a while (the cost curve times both in one run): the
    edits suspended, then the same modules back in place (nothing is rebuilt)."""
    record = target.runtime.exact
    target.runtime.exact = None
    try:
        with edits_of(target).suspended():
            yield target
    finally:
        target.runtime.exact = record


def make_exact(target, rows=ROW_COUNTS, check: bool = True) -> ExactRecord:
    """Make `target`'s forwards batch invariant (see the module's docstring), measured on this
    machine, then self-check a tree forward; on failure the model is left as it was and the record
    says why. The record is kept as `target.runtime.exact`."""
    restore(target)   # measured on the stock modules, whatever ran before
    chunked = {s: c for s, c in measure_chunks(target.model, rows).items() if c}
    least = min_rows(head_dim(target.model.config), target.device)
    ways = ((BLOCKS,) if least else ()) + (GROUPED, ALONE)   # the fastest first
    for attention in ways:
        apply(target, chunked, attention, least or 0)
        ok, why = self_check(target) if check else (True, "not self-checked")
        if ok:
            break
    record = ExactRecord(ok, why, chunked if ok else {}, attention,
                         least if attention == BLOCKS else 0)
    if not ok:
        restore(target)
    target.runtime.exact = record
    return record


def use_exact(target, mode: str = "auto") -> ExactRecord | None:
    """`--exact`: "on" makes the target exact (`make_exact`), "auto" does so in reduced precision
    (where stock trees part from vanilla at near-ties), "off" leaves it stock, or returns an exact
    target to stock (`restore`). The finding is cached per target, dtype, CPU model, thread count
    and versions, like the kernel choice."""
    if mode not in ("auto", "on", "off"):
        raise EagleMiniError(f"--exact must be auto, on or off, got {mode!r}")
    restore(target)
    if mode == "off" or (mode == "auto" and target.dtype == torch.float32):
        return None
    made = []

    def measure():
        made.append(make_exact(target))
        return {k: v for k, v in asdict(made[0]).items() if k != "how"}
    key = machine_key(target, packed_kind(target.model) or "stock", source_tag())
    saved, how = cached_finding("exact", key, measure)
    if made:
        return made[0]
    record = ExactRecord(**{**saved, "how": how})
    if record.exact:
        apply(target, record.chunked, record.attention, record.rows)
    target.runtime.exact = record
    return record


def exact_of(target) -> dict | None:
    """What a results file records of the target's exact mode: the record, or None when off."""
    record = target.runtime.exact
    return None if record is None else asdict(record)


def source_tag() -> str:
    """A short hash of the exact mode's code and the kernels it measures: a finding cached by other
    code is not reused."""
    from eagle_mini.runtime import blocks, packed
    text = "".join(Path(m.__file__).read_text() for m in (blocks, packed, sys.modules[__name__]))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


PREFILL_TAIL = 3   # the self-check's prefill: its last tokens against one-token steps


@torch.no_grad()
def self_check(target, prefix_len: int = 2 * BLOCK - 2, seed: int = 0) -> tuple[bool, str]:
    """A prefill's last tokens, then a tree forward (`CHECK_CHOICES`) over the prefix, against
    one-token replays (of every root-to-leaf path): (every logit bit-identical, one line saying
    so or where they part)."""
    tree = from_choices(CHECK_CHOICES)
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, target.vocab_size, (prefix_len,), generator=g).tolist()
    tokens = torch.randint(0, target.vocab_size, (tree.num_nodes,), generator=g)
    cache = target.new_cache()
    prefill = target.forward(prefix, cache).logits
    logits = target.forward(tokens, cache, positions=tree.positions(prefix_len),
                            tree_mask=tree.mask).logits
    crop_cache(cache, prefix_len - PREFILL_TAIL)
    replays = replay_path(target, cache, prefix[-PREFILL_TAIL:])
    if not all(torch.equal(a, b) for a, b in zip(replays, prefill[-PREFILL_TAIL:])):
        return False, "not exact on this machine: a prefill differs from one-token steps"
    for path in tree.retrieve_paths.tolist():
        path = [node for node in path if node >= 0]
        for node, replay in zip(path, replay_path(target, cache, tokens[path].tolist())):
            if not torch.equal(replay, logits[node]):
                gap = (replay - logits[node]).abs().max().item()
                return False, (f"not exact on this machine: node {node} of a {tree.num_nodes}-node "
                               f"tree differs from its one-token replay by up to {gap:.3g}")
        crop_cache(cache, prefix_len)
    return True, f"{tree.num_nodes} tree nodes bit-identical to their one-token replays"


def replay_path(target, cache, path: list[int]) -> list[torch.Tensor]:
    """The logits vanilla decoding computes along `path` over `cache`: one one-token forward per
    token, as `generate_vanilla` steps."""
    return [target.forward([token], cache).logits[-1] for token in path]
