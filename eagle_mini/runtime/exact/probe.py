"""Finding exact mode on the machine at hand, and proving it: `make_exact` and its self-check.

Batch invariance is a fact of this CPU's (or GPU's) kernels, not of the code, so `make_exact`
measures it: which linears need fixed K-chunks (`linears.measure_chunks`), how few rows the
blocked attention's products need (`blocks.min_rows`), then, for each attention way fastest first,
a whole tree forward checked against one-token replays of every path (`self_check`), the oracle
being vanilla decoding itself. Where invariance cannot be had it says why in one line and leaves
the model as it was.
"""
import torch

from eagle_mini.runtime.blocks import BLOCK, min_rows
from eagle_mini.runtime.exact.attention import ALONE, BLOCKS, GROUPED
from eagle_mini.runtime.exact.linears import PAD_ROWS, ROW_COUNTS, layout_for, measure_chunks
from eagle_mini.runtime.exact.surgery import ExactRecord, apply, restore
from eagle_mini.target import crop_cache, head_dim
from eagle_mini.tree import from_choices

# The self-check's tree: siblings, a chain and both depths of branching, 9 nodes, 4 leaves.
CHECK_CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]
PREFILL_TAIL = 3   # the self-check's prefill: its last tokens against one-token steps


def make_exact(target, rows=ROW_COUNTS, check: bool = True,
               pad_rows: int = PAD_ROWS) -> ExactRecord:
    """Make `target`'s forwards batch invariant (see the package's docstring), measured on this
    machine, then self-check a tree forward; on failure the model is left as it was and the record
    says why. The record is kept as `target.runtime.exact`. `pad_rows`: the block of the linears
    fixed by padded rows (0: none are, the K-chunks are tried first)."""
    restore(target)   # measured on the stock modules, whatever ran before
    layout = layout_for(target.model)
    chunked = {s: c for s, c in measure_chunks(target.model, rows, layout, pad_rows).items() if c}
    least = min_rows(head_dim(target.model.config), target.device)
    ways = ((BLOCKS,) if least else ()) + (GROUPED, ALONE)   # the fastest first
    for attention in ways:
        apply(target, chunked, attention, least or 0, layout, pad_rows)
        ok, why = self_check(target) if check else (True, "not self-checked")
        if ok:
            break
    record = ExactRecord(ok, why, chunked if ok else {}, attention,
                         least if attention == BLOCKS else 0, layout=layout,
                         pad_rows=pad_rows)
    if not ok:
        restore(target)
    target.runtime.exact = record
    return record


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
