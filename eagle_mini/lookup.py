"""Prompt lookup as a drafter: no head, no training; the draft is copied from the text so far.

Prompt lookup decoding (Saxena, 2023; Hugging Face's `generate(prompt_lookup_num_tokens=...)`)
bets that a reply repeats stretches of its prompt, or of itself: code being edited, a passage
being summarised, a name being repeated. Its rule, the one Hugging Face applies:

* take the last n tokens of the text so far (prompt and output, the root last), for n from
  `ngram` down to 1;
* find their earliest earlier occurrence in the text; the `tokens` tokens that followed it there
  are the draft, a chain under the root;
* no occurrence for any n: no draft, and the cycle is a vanilla step (the root alone).

    >>> d = LookupDrafter(tokens=3, ngram=2)
    >>> d.begin([5, 6, 7, 8, 5, 6], None, root=7)   # the text ends "... 5 6 7"
    >>> d.draft(7).tokens.tolist()                   # "5 6 7" was followed by "8 5 6"
    [7, 8, 5, 6]
    >>> d.extend(None, [9]); d.draft(9).tokens.tolist()   # "9" never came before
    [9]

The draft is fixed by the context, not drawn from a distribution, so it is verified as EAGLE-2's
top-k children are (`verify.TopKTreeRule`): lossless at any temperature, and token-identical to
vanilla decoding when greedy. It is a `draft.TreeDrafter` like the head's drafter, so
`EagleDecoder` runs it unchanged; the methods table's `prompt-lookup` row runs it by name.
"""
import torch

from eagle_mini.draft import Draft, TreeDrafter
from eagle_mini.errors import EagleMiniError
from eagle_mini.tree import STRUCTURE, chain, tree_from_spec

# Hugging Face's defaults (`prompt_lookup_num_tokens` is set by the caller; 10 is the value its
# docs and the methods table use; `max_matching_ngram_size` defaults to 2).
TOKENS, NGRAM = 10, 2


def lookup(text: list[int], tokens: int = TOKENS, ngram: int = NGRAM) -> list[int]:
    """The continuation prompt lookup proposes after `text`: up to `tokens` tokens that followed
    the earliest earlier occurrence of the text's last n tokens, the longest n <= `ngram` first.

    >>> lookup([1, 2, 3, 1, 2], tokens=2), lookup([1, 2, 3, 4, 2], tokens=2), lookup([1, 2, 3])
    ([3, 1], [3, 4], [])
    """
    return lookup_match(text, tokens, ngram)[1]


def lookup_match(text: list[int], tokens: int = TOKENS, ngram: int = NGRAM) -> tuple[int, list[int]]:
    """`lookup`'s continuation with the length n of the n-gram that found it (0: none found)."""
    if len(text) < 2:
        return 0, []
    h = torch.tensor(text, device=STRUCTURE)
    for n in range(min(ngram, len(text) - 1), 0, -1):
        # windows that start at i with i + n < len(text): each is followed by one token at least
        windows = h[:-1].unfold(0, n, 1)
        hits = (windows == h[-n:]).all(dim=1).nonzero()
        if hits.numel():
            start = int(hits[0]) + n
            return n, text[start:start + tokens]
    return 0, []


class LookupDrafter(TreeDrafter):
    """Drafts a chain of at most `tokens` tokens by prompt lookup (`lookup`) over the prompt and
    everything accepted since. Reads nothing of the target's (its `extend` ignores the reads)."""

    def __init__(self, tokens: int = TOKENS, ngram: int = NGRAM):
        if not isinstance(tokens, int) or tokens < 1 or not isinstance(ngram, int) or ngram < 1:
            raise EagleMiniError(f"prompt lookup needs tokens >= 1 and ngram >= 1, got "
                                 f"tokens={tokens!r}, ngram={ngram!r}")
        self.tokens, self.ngram = tokens, ngram
        self.chains = [chain(k) for k in range(tokens + 1)]   # every shape a draft can take
        self.tree = self.chains[-1]
        self.text: list[int] = []
        self.device = STRUCTURE   # the target's, learnt from its reads

    @classmethod
    def build(cls, head, tree, sampling) -> "LookupDrafter":
        """The drafter of a table row: its tree must be a chain ("chain:K"), whose length K is
        the most tokens a lookup proposes; `head` and `sampling` play no part."""
        shape = tree_from_spec(tree)
        if not hasattr(shape, "num_nodes") or shape.num_nodes != shape.max_depth + 1:
            raise EagleMiniError(f"prompt lookup drafts a chain: give its tree as chain:K, got {tree}")
        return cls(tokens=shape.max_depth)

    def begin(self, prompt_ids, reads, root) -> None:
        self.text = list(prompt_ids) + [int(root)]
        if reads is not None:
            self.device = reads.device

    def extend(self, reads, shifted_tokens) -> None:
        self.text += torch.as_tensor(shifted_tokens).view(-1).tolist()

    def draft(self, root_token: int) -> Draft:
        found = lookup(self.text, self.tokens, self.ngram)
        tokens = torch.tensor([int(root_token)] + found, device=self.device)
        n = tokens.numel()
        # a copied token has no draft probability: its confidence is 1
        return Draft(self.chains[len(found)], tokens, torch.ones(n, dtype=torch.bool, device=self.device),
                     torch.ones(n, device=self.device))
