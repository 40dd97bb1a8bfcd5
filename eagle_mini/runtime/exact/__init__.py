"""Exact verification: every node of a tree forward gets bit-identical logits to the one-token
forward vanilla decoding makes at that node's position along its path (EAGLE §3.3 made literal).

In reduced precision a stock tree forward is not *batch invariant*: a row's result depends on how
many rows run beside it, so bf16 EAGLE can part from bf16 vanilla where two tokens nearly tie.
Two places change the order of a reduction with the row count, and each has its module:

* `attention.py`: every query attends, by the computation a one-token step makes, to exactly its
  own keys (over fixed key blocks, `runtime/blocks.py`, where this machine allows), with the keys
  made once per forward and passed down through it;
* `linears.py`: a linear whose rows depend on the row count runs every product on a fixed number
  of rows (padded), or is summed over fixed K-chunks in a fixed order; vanilla then uses it too.

Which of these a machine needs is measured on it, then proved on a whole tree forward against
one-token replays (`probe.py`: `make_exact`, `self_check`); `surgery.py` applies the finding to
the model and takes it back off (`apply`, `restore`, `stock_forward`), every change recorded by
the target's `ModelEdits`; `mode.py` is `--exact auto|on|off` (`use_exact`), the finding cached
per machine. Vanilla decoding on an exact target runs the same modules, so "exact vanilla" is the
baseline EAGLE is compared with, and the prefill, shared by both, stays one batched call. What the
mode costs is measured by `profile-target --compare-exact`, both forwards timed in one run.
"""
from eagle_mini.runtime.exact.attention import (ALONE, ATTENTION, BLOCKS, GROUPED, PREFILL_CHUNK,
                                                ForwardKeys, chunked_prefill, exact_attention,
                                                forward_keys, keys_of, pass_keys, single_queries)
from eagle_mini.runtime.exact.linears import (CHUNKS, LAYOUTS, PAD_ROWS, PADDED, ROW_BY_ROW,
                                              ROW_COUNTS, STACKED, VIEWS, ExactLinear,
                                              FixedKLinear, PaddedRowsLinear, RowByRowLinear,
                                              StackedFixedKLinear, chunk_for, layout_for,
                                              linear_modules, measure_chunks, row_invariant,
                                              shape_of)
from eagle_mini.runtime.exact.mode import source_tag, use_exact
from eagle_mini.runtime.exact.probe import CHECK_CHOICES, make_exact, replay_path, self_check
from eagle_mini.runtime.exact.surgery import ExactRecord, apply, exact_of, restore, stock_forward

__all__ = ["ALONE", "ATTENTION", "BLOCKS", "CHECK_CHOICES", "CHUNKS", "ExactLinear",
           "ExactRecord", "FixedKLinear", "ForwardKeys", "GROUPED", "LAYOUTS", "PADDED",
           "PAD_ROWS", "PREFILL_CHUNK", "PaddedRowsLinear", "ROW_BY_ROW", "ROW_COUNTS",
           "RowByRowLinear", "STACKED", "StackedFixedKLinear", "VIEWS", "apply", "chunk_for",
           "chunked_prefill", "exact_attention", "exact_of", "forward_keys", "keys_of",
           "layout_for", "linear_modules", "make_exact", "measure_chunks", "pass_keys",
           "replay_path", "restore", "row_invariant", "self_check", "shape_of", "single_queries",
           "source_tag", "stock_forward", "use_exact"]
