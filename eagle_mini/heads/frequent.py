"""Drafting over the most frequent tokens only (FR-Spec: Zhao et al., 2025, "FR-Spec: Accelerating
Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling", arXiv 2502.14856).

Every draft step ends in a product with the vocabulary-sized output matrix, and on a small target
with a large vocabulary that product is the largest single cost of drafting: it reads every row of
the matrix to score a few candidates. Drafting need not be exact, only verification must be
(EAGLE §3.3), so the draft may score only the N tokens the target writes most often in its
training replies: each draft step reads N rows instead of all of them. A token outside the N is
never drafted; where the target wants one, that cycle's path ends there and the target's own token
(the bonus) still comes, so the output is unchanged and only tau can drop:

* greedy: verification compares each drafted token with the target's argmax, whoever drafted it;
* sampling, EAGLE-2's tree: a node's children are the draft's top-k, fixed by the context, which
  the top-k rule (`verify.TopKTreeRule`) needs and a smaller vocabulary keeps;
* sampling, a static tree: a child is drawn from q, the draft's distribution over the N tokens
  (zero elsewhere), and the p/q rule uses that same q: lossless for any q.

The N tokens come from the head's training conversations (`training.commands.frequent_tokens`,
counted once per target and kept in the cache); `FrequentVocabHead` wraps any head, EAGLE-1 or EAGLE-3 (whose draft
vocabulary is reduced already: the two sets meet).
"""
import torch
from torch import nn

from eagle_mini.errors import EagleMiniError


class FrequentVocabHead(nn.Module):
    """`head` drafting over `target_ids` (target token ids) only: the head's output rows for those
    of them in its draft vocabulary, copied once into a linear of their own (packed with the head's
    linears, `runtime.run.pick_head`), and `draft_to_target` mapping them back. Everything else is
    the head's own (attributes are looked up there)."""

    def __init__(self, head, target_ids):
        super().__init__()
        d2t = head.draft_to_target
        ids = torch.as_tensor(list(target_ids), dtype=torch.long, device=d2t.device)
        rows = torch.isin(d2t, ids).nonzero().squeeze(1)
        if not rows.numel():
            raise EagleMiniError("the frequent tokens and the head's draft vocabulary have no "
                                 "token in common")
        weight = head.draft_weight().detach()
        self.out = nn.Linear(weight.shape[1], rows.numel(), bias=False, device=weight.device,
                             dtype=weight.dtype)
        with torch.no_grad():
            self.out.weight.copy_(weight[rows.to(weight.device)])
        self.out.requires_grad_(False)
        self.register_buffer("draft_to_target", d2t[rows], persistent=False)
        self.inner = head   # last: before it, no attribute is looked up in the head

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "inner":
                raise
            return getattr(self.inner, name)

    @property
    def draft_vocab_size(self) -> int:
        return self.draft_to_target.numel()

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """predicted [n, H] -> draft logits [n, N] over the frequent tokens (`draft_to_target`)."""
        return self.out(self.inner.draft_input(predicted))


def narrowed(heads, ids):
    """`heads` (one head, or {kind: head}) drafting over the target ids `ids` only."""
    if isinstance(heads, dict):
        return {kind: FrequentVocabHead(head, ids) for kind, head in heads.items()}
    return FrequentVocabHead(heads, ids)
