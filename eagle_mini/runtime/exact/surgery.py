"""Applying exact mode to a target's model and taking it back off: the module surgery.

`apply` routes the model through exact attention (`attention.py`) and swaps the linears that need
it for fixed-order ones (`linears.py`); every change goes through the target's `ModelEdits`
(`runtime/state.py`), which saves what was there, so `restore` returns the model to stock bit for
bit and `stock_forward` can lend out the stock forward for a while without rebuilding anything.
What exact mode found and did is an `ExactRecord`, kept as `target.runtime.exact`.
"""
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from eagle_mini.runtime.exact.attention import ATTENTION, GROUPED, pass_keys
from eagle_mini.runtime.exact.linears import (LAYOUTS, PAD_ROWS, PADDED, ROW_BY_ROW, VIEWS,
                                              PaddedRowsLinear, RowByRowLinear, linear_modules,
                                              shape_of)
from eagle_mini.runtime.state import edits_of


@dataclass
class ExactRecord:
    """What `make_exact` did and found: `exact` (the self-check passed), `why` (one line),
    `chunked` ({shape "KxN": chunk} for the linears that needed a fix: a K-chunk, `PADDED` for
    products padded to `pad_rows` rows, `ROW_BY_ROW`), `how` (measured now, or read from this
    machine's cache)."""
    exact: bool
    why: str
    chunked: dict = field(default_factory=dict)
    attention: str = GROUPED
    rows: int = 0          # `BLOCKS`: products padded to at least this many rows (`min_rows`)
    how: str = "measured now"
    layout: str = VIEWS    # how the chunked linears hold their weights (`linears.layout_for`)
    pad_rows: int = PAD_ROWS   # the block of the `PADDED` linears

    def line(self) -> str:
        """One line for a command's header."""
        if not self.exact:
            return f"exact verification OFF: {self.why} (outputs equal vanilla's up to near-ties)"
        def fix(chunk):
            return {ROW_BY_ROW: "row by row (slow)", PADDED: f"padded to {self.pad_rows} rows"}.get(
                chunk, f"in K-chunks of {chunk} ({self.layout})")
        fixes = ", ".join(f"{s} {fix(c)}" for s, c in self.chunked.items()) or "none"
        return (f"exact verification on ({self.why}; attention {self.attention}; linears fixed: "
                f"{fixes}; {self.how})")


def apply(target, chunked: dict, attention: str = GROUPED, rows: int = 0,
          layout: str = VIEWS, pad_rows: int = PAD_ROWS) -> None:
    """Route the target through exact attention (`attention`: `BLOCKS` with products of at least
    `rows` rows, `GROUPED` or `ALONE`), with each forward's keys made once by the decoder stack's
    pre-hook (`attention.pass_keys`), and its `chunked` linears through their fix: products
    padded to `pad_rows` rows (`PaddedRowsLinear`), `FixedKLinear` in `layout` (`linears.LAYOUTS`:
    views of the weight, or a stacked copy), or row by row. Every
    change goes through the target's `ModelEdits` (`runtime/state.py`), so `restore` undoes it."""
    edits = edits_of(target)
    for parent, name, linear in linear_modules(target.model):
        chunk = chunked.get(shape_of(linear))
        if chunk:
            exact = (RowByRowLinear(linear) if chunk == ROW_BY_ROW else
                     PaddedRowsLinear(linear, pad_rows) if chunk == PADDED else
                     LAYOUTS[layout](linear, chunk))
            edits.swap(parent, name, exact)
    edits.set_attention(ATTENTION)
    edits.set_field("exact_attention", attention)
    edits.set_field("exact_rows", rows)
    edits.pre_hook(target.model.model, pass_keys)


def restore(target) -> None:
    """Undo `apply`: the linears, the attention implementation, the config fields and the hook as
    they were before exact mode; the target's `runtime.exact` is None again."""
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


def exact_of(target) -> dict | None:
    """What a results file records of the target's exact mode: the record and how it prefills
    (`target.Runtime.prefill`), or None when off."""
    record = target.runtime.exact
    return None if record is None else {**asdict(record), "prefill": target.runtime.prefill}
