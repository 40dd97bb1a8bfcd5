"""One tree drafted by the head and by prompt lookup together (`eagle2+lookup`).

EAGLE-2 (§4) grows a tree where the head is confident and keeps the `total_tokens - 1` best nodes
by *value*, the product of draft probabilities along a node's path: an estimate of the chance the
target accepts the whole path. Prompt lookup (`lookup.py`) proposes a chain copied from the text
so far, which the head never sees: a reply that repeats its prompt (a summary, code being edited,
a RAG answer) gives the lookup long runs the head cannot guess.

This drafter puts both in one tree of EAGLE-2's size, ranked by one value:

* the head grows EAGLE-2's candidates as usual (`Drafter.grow`);
* the lookup chain is grafted from the root: where a chain token is already a candidate under the
  same parent, the two are one node (with the higher of the two values), else a new node;
* a chain token's value is the log of the *measured* acceptance rates of the lookup tokens before
  it and itself: the rate of the k-th token of a chain found by an n-gram match, counted over this
  generation's cycles (accepted / tried, from a prior of 1 in 2), so a lookup that keeps being
  wrong sinks below the head's candidates and one that keeps being right displaces them;
* the best `total_tokens - 1` nodes form the tree (`Candidates.rerank`): a child's value is never
  above its parent's on either side, so the tree stays connected.

Every node's children are fixed by the context (the head's top-k, the lookup's copy), not drawn,
so the tree is verified by the top-k rule (`verify.TopKTreeRule`): lossless at any temperature,
token-identical to vanilla when greedy; siblings never repeat a token (the graft merges them).
"""
import math

import torch

from eagle_mini.draft import Draft, Drafter, TreeDrafter
from eagle_mini.errors import EagleMiniError
from eagle_mini.lookup import NGRAM, TOKENS, LookupDrafter, lookup_match
from eagle_mini.tree import DynamicTree, tree_from_spec

PRIOR = (1.0, 2.0)   # (accepted, tried) before any cycle: a lookup token starts at 1 in 2


class HybridDrafter(TreeDrafter):
    """EAGLE-2's dynamic tree drafted by `head`, with prompt lookup's chain (at most `tokens`
    tokens, n-grams up to `ngram`) grafted in and ranked by measured acceptance (module docstring).
    `tree`: a `DynamicTree` (its `total_tokens` bounds the whole tree)."""

    def __init__(self, head, tree=DynamicTree(), tokens: int = TOKENS, ngram: int = NGRAM):
        shape = tree_from_spec(tree)
        if not isinstance(shape, DynamicTree):
            raise EagleMiniError(f"the hybrid drafter grows EAGLE-2's dynamic tree: give its tree "
                                 f"as dynamic:TOTAL,DEPTH,TOPK, got {tree}")
        self.head_drafter = Drafter(head, shape)
        self.lookup = LookupDrafter(tokens, ngram)
        self.tree = shape
        self.target_layers = self.head_drafter.target_layers
        # per (n-gram length, position in the chain): [accepted, tried]
        self.counts = {(n, k): list(PRIOR) for n in range(1, ngram + 1) for k in range(1, tokens + 1)}
        self.proposed = (0, [])   # the last draft's lookup: n-gram length, chain tokens kept

    @classmethod
    def build(cls, head, tree, sampling) -> "HybridDrafter":
        return cls(head, tree)

    @property
    def head_forwards(self) -> int:
        return self.head_drafter.head_forwards

    def rate(self, n: int, k: int) -> float:
        """The measured chance that the k-th token of a chain found by an n-gram match is accepted,
        given the ones before it were."""
        accepted, tried = self.counts[(n, k)]
        return accepted / tried

    def begin(self, prompt_ids, reads, root) -> None:
        self.head_drafter.begin(prompt_ids, reads, root)
        self.lookup.begin(prompt_ids, reads, root)

    def extend(self, reads, shifted_tokens) -> None:
        tokens = torch.as_tensor(shifted_tokens).view(-1).tolist()
        n, chain = self.proposed
        accepted = tokens[:-1]                 # the draft tokens on the accepted path
        for k, token in enumerate(chain, 1):   # tried while every earlier one was accepted
            self.counts[(n, k)][1] += 1
            if k > len(accepted) or accepted[k - 1] != token:
                break
            self.counts[(n, k)][0] += 1
        self.proposed = (0, [])
        self.head_drafter.extend(reads, tokens)
        self.lookup.extend(reads, tokens)

    @torch.no_grad()
    def draft(self, root_token: int) -> Draft:
        head = self.head_drafter
        cands = head.grow(root_token)
        n, found = lookup_match(self.lookup.text, self.lookup.tokens, self.lookup.ngram)
        parent, value, chain = 0, 0.0, []
        for k, token in enumerate(found, 1):
            p = self.rate(n, k)
            value += math.log(p)
            node = cands.child(parent, token)
            if node is None:
                node = cands.add(parent, token, value, p)
            else:
                cands.value[node] = max(cands.value[node], value)
            chain.append(node)
            parent = node
        best = cands.best(self.tree.total_tokens)
        kept, chosen = 0, set(best)   # the chain's nodes kept: a prefix, values fall along it
        while kept < len(chain) and chain[kept] in chosen:
            kept += 1
        self.proposed = (n, found[:kept])
        return cands.rerank(self.tree.total_tokens, head.root_feature.device, best)
