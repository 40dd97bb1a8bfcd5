"""Where training batches come from: conversations featurized on the fly, stored features, or
a mix of two streams.

Every source has `take(batch_tokens)` (the next examples, at least one, about that many tokens),
`materialize(picked)` (their features) and `cursor` (its data position: all a checkpoint needs to
resume it exactly).

`MixedSource` is how EAGLE-3's data recipe (the target's own replies instead of ShareGPT's) fits a
CPU, where regenerating is several times slower than training on a token: each batch takes a fixed share of its tokens from the target's regenerated replies and
the rest from ShareGPT's original ones, so a small regenerated file is stretched over a long run
without the head forgetting human-written text.
"""
import math

from eagle_mini.errors import EagleMiniError


class StreamingSource:
    """Conversations of a split, featurized by the target on the fly, never stored.

    `cursor` counts records of the split consumed so far; it is all a checkpoint needs to resume.
    With `wrap`, the split starts again when it is used up, as `DumpSource` cycles its shards.
    """

    def __init__(self, target, split="train", max_len=1024, cursor=0, data=None, wrap=False,
                 layers=None):
        from eagle_mini.data import SPLITS, read_sharegpt
        self.layers = layers  # an EAGLE-3 head's `aux_layers`: featurize them too
        self.target, self.split, self.max_len, self.cursor = target, split, max_len, cursor
        self.wrap = wrap  # at the split's end, start it again (a new epoch) instead of stopping
        self.data = data if data is not None else read_sharegpt()
        self.first = SPLITS[split][0]
        self._iter = None

    def _examples(self):
        from eagle_mini.data import iter_conversations
        for ex in iter_conversations(self.split, self.target.tokenizer, max_len=self.max_len,
                                     start=self.cursor, data=self.data):
            if sum(ex.loss_mask) == 0 or len(ex.input_ids) < 2:
                self.cursor = ex.index + 1 - self.first
                continue
            yield ex

    def take(self, batch_tokens: int) -> list:
        """The next conversations, up to `batch_tokens` tokens (at least one)."""
        if self._iter is None:
            self._iter = self._examples()
        picked, tokens = [], 0
        for ex in self._iter:
            picked.append(ex)
            tokens += len(ex.input_ids)
            if tokens >= batch_tokens:
                break
        if not picked and self.wrap and self.cursor > 0:
            self.cursor, self._iter = 0, None
            return self.take(batch_tokens)
        if not picked:
            where = self.data.source
            raise EagleMiniError(f"the {self.split} split is used up (cursor {self.cursor})"
                                 + (f": {where} has no more regenerated conversations" if where else ""))
        self.cursor = picked[-1].index + 1 - self.first
        return picked

    def materialize(self, picked) -> list[dict]:
        from eagle_mini.training.features import compute_features
        return compute_features(self.target, picked, layers=self.layers)


class DumpSource:
    """Stored features (`dump-features`), cycled in order for as many epochs as the run needs."""

    def __init__(self, dataset, cursor=0):
        self.dataset, self.cursor = dataset, cursor

    def take(self, batch_tokens: int) -> list[dict]:
        picked, tokens = [], 0
        while tokens < batch_tokens:
            e = self.dataset[self.cursor % len(self.dataset)]
            self.cursor += 1
            picked.append(e)
            tokens += len(e["input_ids"])
        return picked

    def materialize(self, picked) -> list[dict]:
        return picked


class MixedSource:
    """Two streams in one batch: `share` of its tokens from `first`, the rest from `second`.

    Both must featurize alike (the same target and layers). The cursor is the pair of cursors.
    """

    def __init__(self, first, second, share: float):
        if not 0 < share < 1:
            raise EagleMiniError(f"a mixed source's share must be between 0 and 1, got {share}")
        self.first, self.second, self.share = first, second, share

    @property
    def cursor(self):
        return [self.first.cursor, self.second.cursor]

    @cursor.setter
    def cursor(self, value):
        self.first.cursor, self.second.cursor = value
        for s in (self.first, self.second):
            if hasattr(s, "_iter"):
                s._iter = None   # a streaming source restarts its iterator at the new cursor

    def take(self, batch_tokens: int) -> list:
        n = max(1, math.ceil(self.share * batch_tokens))
        picked = self.first.take(n)
        got = sum(len(e.input_ids) if hasattr(e, "input_ids") else len(e["input_ids"]) for e in picked)
        return picked + self.second.take(max(1, batch_tokens - got))

    def materialize(self, picked) -> list[dict]:
        return self.first.materialize(picked)
