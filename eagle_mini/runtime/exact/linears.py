"""Exact linears: every output row reduced in the same order whatever the row count, so a tree
forward's linears give each node the bits of a one-token step (EAGLE §3.3 made literal).

A matmul's kernel may split its K reduction by the number of rows, so in reduced precision a row's
result can depend on how many rows run beside it. A linear whose rows come out the same for every
row count is left alone; the others are summed over fixed K-chunks, in fp32, in a fixed order
(`FixedKLinear`, over views of the weight: no copy), which vanilla then uses too, and where no
chunk will do, every row runs alone (`RowByRowLinear`). Which linears need the chunks depends on
the CPU (or GPU) and its kernels, so each weight shape is measured on the machine at hand
(`measure_chunks`).
"""
import torch
import torch.nn.functional as F
from torch import nn

CHUNKS = (512, 256, 128)          # K-chunk sizes tried, largest (fewest extra ops) first
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 8, 11, 16, 26, 32, 60, 64)   # the tree sizes a forward may carry
ROW_BY_ROW = -1   # `chunked` value of a linear that runs `RowByRowLinear`


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

    It holds no weight of its own: the chunks are views of the shared weight, made at call time
    (`[chunks, chunk, out]` over the same storage), all whole chunks multiplied in one batched
    call and a shorter last chunk (`in_features` not a multiple of `chunk`) in one more. So exact
    mode costs no memory for its linears, on a CPU or a GPU (`tests/test_exact_memory.py`).
    Whether a batched product gives a row the same bits for every row count is a fact of the
    machine's kernels: `chunk_for` measures it, and the self-check tests the whole forward."""

    def __init__(self, linear: nn.Linear, chunk: int):
        super().__init__(linear)
        self.chunk, self.whole = chunk, self.in_features // chunk   # whole chunks; a tail after

    def forward(self, x):
        rows = x.reshape(-1, self.in_features)
        n, out, cut = rows.shape[0], self.out_features, self.whole * self.chunk
        w = self.weight[:, :cut].view(out, self.whole, self.chunk).permute(1, 2, 0)
        parts = list(torch.bmm(rows[:, :cut].view(n, self.whole, self.chunk).transpose(0, 1), w))
        if cut < self.in_features:
            parts.append(F.linear(rows[:, cut:], self.weight[:, cut:]))
        total = parts[0].float()
        for part in parts[1:]:              # chunk by chunk, in order: elementwise, row by row
            total += part.float()
        if self.bias is not None:
            total += self.bias.float()
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

