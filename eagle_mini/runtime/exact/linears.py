"""Exact linears: every output row reduced in the same order whatever the row count, so a tree
forward's linears give each node the bits of a one-token step (EAGLE §3.3 made literal).

A matmul's kernel may split its K reduction by the number of rows, so in reduced precision a row's
result can depend on how many rows run beside it. A linear whose rows come out the same for every
row count is left alone. For the others, three fixes, tried in this order:

* **padded rows** (`PaddedRowsLinear`): every product runs on exactly `PAD_ROWS` rows, a forward's
  rows cut into blocks of that many and the last block padded with zero rows, so the kernel sees
  one row count, always. A one-token step is one such block, and so is a tree of up to `PAD_ROWS`
  nodes: the same kernel, the same bits per row, if a row's bits do not depend on its place in
  the block or on the rows beside it (measured). No copy of the weight, no extra operation per
  chunk: on the CPUs measured, the cheapest of the three;
* **fixed K-chunks**, summed in fp32 in a fixed order (`FixedKLinear`, over views of the weight: no
  copy; on a CPU with the memory for it, `StackedFixedKLinear`, a copy laid out for one weight
  read per one-token step);
* **row by row**, where nothing else will do (`RowByRowLinear`).

Vanilla then runs the same linears. Which linears need which depends on the CPU (or GPU) and its
kernels, so each weight shape is measured on the machine at hand, in the layout that will run
(`measure_chunks`, `layout_for`).
"""
import torch
import torch.nn.functional as F
from torch import nn

from eagle_mini.runtime.packed import pack_linears

CHUNKS = (512, 256, 128)          # K-chunk sizes tried, largest (fewest extra ops) first
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 8, 11, 16, 26, 32, 60, 64)   # the tree sizes a forward may carry
ROW_BY_ROW = -1   # `chunked` value of a linear that runs `RowByRowLinear`
PADDED = -2       # `chunked` value of a linear that runs `PaddedRowsLinear`
PAD_ROWS = 16     # its block: the trees of the methods table (16 nodes, the root included) fit one
VIEWS, STACKED = "views", "stacked"   # the chunked linears' layouts (`layout_for`)


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
    dimension cut into fixed chunks of `chunk`, each chunk's product in the weight's dtype, added
    in fp32 from the first chunk to the last, then cast back (bias added last, in fp32).

    It holds no weight of its own: each chunk's product is one `F.linear` on a slice of the input
    and the same slice of the shared weight (a view, its rows `in_features` apart, which the
    matmul reads in place), the last chunk shorter when `in_features` is not a multiple of
    `chunk`. So exact mode costs no memory for its linears (`tests/test_exact_memory.py`): the
    layout for a GPU, or a CPU short of memory (`layout_for`). A batched product over strided
    views of every chunk was timed too, and is far slower on a CPU (`scripts/probe_exact_linear.py`).
    Whether a chunk's product gives a row the same bits for every row count is a fact of the
    machine's kernels: `chunk_for` measures it, and the self-check tests the whole forward."""

    def __init__(self, linear: nn.Linear, chunk: int):
        super().__init__(linear)
        self.chunk = chunk

    def forward(self, x):
        rows = x.reshape(-1, self.in_features)
        total = None
        for start in range(0, self.in_features, self.chunk):   # chunk by chunk, in order
            stop = start + self.chunk
            part = F.linear(rows[:, start:stop], self.weight[:, start:stop]).float()
            total = part if total is None else total.add_(part)
        if self.bias is not None:
            total += self.bias.float()
        return total.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, chunk={self.chunk}"


class StackedFixedKLinear(FixedKLinear):
    """`FixedKLinear`'s sums from a copy of the weight laid out by chunk (the last chunk padded with
    zeros): the layout for a CPU with the memory for the copy (`layout_for`), where a one-token
    step (up to `STACKED_ROWS` rows) is then one product that reads the weight once:

    * up to `STACKED_ROWS` rows: the chunks stacked as one weight of `chunks` x out rows by
      `chunk`, packed by oneDNN where it can (`packed.py`), and every row's chunks multiplied by
      all of it in one call; each chunk's product is its own block of the result (the rest, chunk
      i against weight j, is thrown away: `chunks` times the FLOPs, one weight read, one call);
    * more rows: all chunks' products in one batched call.

    On the CPUs measured, the embedded target's exact one-token step runs faster this way than
    with views (`scripts/probe_exact_linear.py` per linear; `generate --method vanilla --exact on`
    in each layout for the step), for a copy of the chunked weights. Whether the two paths give a row the same bits is a fact of the
    machine's kernels: `chunk_for` measures every row count across the switch."""
    STACKED_ROWS = 2

    def __init__(self, linear: nn.Linear, chunk: int):
        super().__init__(linear, chunk)
        self.chunks = -(-self.in_features // chunk)
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


LAYOUTS = {VIEWS: FixedKLinear, STACKED: StackedFixedKLinear}


def layout_for(model) -> str:
    """How the chunked linears hold their weights: `STACKED` (a copy per chunked weight, faster on
    a CPU) on a CPU whose free memory holds a copy of every linear twice over, else `VIEWS` (no
    copy): always on a GPU, where exact mode never multiplies the weights."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        return VIEWS
    copies = sum(lin.weight.numel() * lin.weight.element_size() for _, _, lin in linear_modules(model))
    return STACKED if 2 * copies <= free_memory() else VIEWS


def free_memory() -> int:
    """Bytes of host memory available now (psutil, which accelerate installs)."""
    import psutil
    return psutil.virtual_memory().available


class PaddedRowsLinear(ExactLinear):
    """A linear whose every product has exactly `rows` rows: a forward's rows in blocks of `rows`,
    the last block padded with zero rows, each block one call of the replaced linear (packed or
    not, as it was) and the padding's outputs dropped. A one-token step and a tree of up to `rows`
    nodes are then the same product, so a node gets the bits of its one-token step wherever the
    kernel gives a row the same bits at every place in the block, whatever the other rows hold:
    a fact of the machine's kernels, which `chunk_for` measures (row counts past `rows`, several
    blocks, included). Verifying up to `rows` tokens costs one `rows`-row product, as a one-token
    step now does; the weight is not copied (`tests/test_exact_memory.py`)."""

    def __init__(self, linear: nn.Linear, rows: int = PAD_ROWS):
        super().__init__(linear)
        self.rows = rows

    def forward(self, x):
        flat = x.reshape(-1, self.in_features)
        n, rows, linear = flat.shape[0], self.rows, self.replaced[0]
        whole = -(-n // rows) * rows
        if whole != n:
            flat = F.pad(flat, (0, 0, 0, whole - n))
        out = (linear(flat) if whole == rows else
               torch.cat([linear(flat[start:start + rows]) for start in range(0, whole, rows)]))
        return out[:n].view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rows={self.rows}"


class RowByRowLinear(ExactLinear):
    """The last resort: every row its own one-row product, as a one-token step computes it. Exact
    by construction, but it reads the weight once per row, so verifying n tokens costs about n
    one-token products of this linear (`ExactRecord.line` says so)."""

    def forward(self, x):
        rows = x.reshape(-1, self.in_features)
        out = torch.cat([F.linear(rows[i:i + 1], self.weight, self.bias) for i in range(len(rows))])
        return out.view(*x.shape[:-1], self.out_features)


def row_invariant(fn, in_features: int, dtype, device, rows=ROW_COUNTS, seed: int = 0) -> bool:
    """Whether `fn` (a linear) gives every row the same bits for each row count in `rows`: row i
    of an n-row product against row i alone."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(max(rows), in_features, generator=g).to(device, dtype)
    alone = torch.cat([fn(x[i:i + 1]) for i in range(max(rows))])
    return all(torch.equal(fn(x[:n]), alone[:n]) for n in rows)


def linear_modules(model) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, linear) for every nn.Linear of the model, lm_head included."""
    return [(parent, name, child) for parent in model.modules()
            for name, child in parent.named_children() if isinstance(child, nn.Linear)]


def chunk_for(linear: nn.Linear, rows=ROW_COUNTS, layout: str = VIEWS,
              pad_rows: int = PAD_ROWS) -> int | None:
    """0 when the linear is row invariant as it is, else `PADDED` when its products padded to
    `pad_rows` rows make it so (0: not tried), else the largest chunk of `CHUNKS` that does in
    `layout`, else `ROW_BY_ROW`."""
    w = linear.weight
    with torch.no_grad():
        if row_invariant(linear, linear.in_features, w.dtype, w.device, rows):
            return 0
        if pad_rows and row_invariant(PaddedRowsLinear(linear, pad_rows), linear.in_features,
                                      w.dtype, w.device, rows):
            return PADDED
        for chunk in CHUNKS:
            if chunk < linear.in_features and row_invariant(
                    LAYOUTS[layout](linear, chunk), linear.in_features, w.dtype, w.device, rows):
                return chunk
    return ROW_BY_ROW


def shape_of(linear) -> str:
    return f"{linear.in_features}x{linear.out_features}"


def measure_chunks(model, rows=ROW_COUNTS, layout: str = VIEWS, pad_rows: int = PAD_ROWS) -> dict:
    """{shape: chunk} for every linear shape of the model (`chunk_for`; 0: invariant as it is)."""
    chunks = {}
    for _, _, linear in linear_modules(model):
        if shape_of(linear) not in chunks:
            chunks[shape_of(linear)] = chunk_for(linear, rows, layout, pad_rows)
    return chunks

