"""Drafting a token tree with the head: static trees (EAGLE §3.1) and dynamic trees (EAGLE-2 §4).

The head keeps its own KV cache in two parts. The *stable* part holds entries computed from the
target's true features; drafting appends entries computed from the head's own *predicted* features,
which are thrown away after verification (EAGLE §3.3: the head is re-run over the accepted tokens
with the true features from the verification forward, `Drafter.extend`).

A node's children come from the head's distribution at that node:
* greedy / EAGLE-2 trees: the deterministic top-k of the draft distribution;
* EAGLE-1 trees at T > 0: drawn *without replacement* from the warped draft distribution q (the
  j-th child in rank order is the j-th draw, so ranks [0, 2] take draws 0 and 1) -- the condition
  for multi-round speculative sampling to be lossless (`verify.SampledTreeRule`).

EAGLE-2 grows the tree where the draft is confident: a node's value is the product of the draft
probabilities along its path; each step expands the top-k frontier nodes, and the tree keeps the
`total_tokens - 1` best nodes of all candidates (a child never beats its parent, so it is connected).

Every drafter speaks one protocol, `TreeDrafter` (on the model of Hugging Face's
`CandidateGenerator`): it is told the prompt and, after each cycle, what was accepted, and it
proposes the next cycle's tree under the root. `Drafter` (the head, this module) is one;
`lookup.LookupDrafter` (prompt lookup, no head) is another; `EagleDecoder` runs any of them.
"""
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from eagle_mini.sampling import warp
from eagle_mini.target import crop_cache
from eagle_mini.tree import DynamicTree, Tree, fit_tree, from_parents, tree_from_spec


@dataclass
class Draft:
    """A drafted tree. tokens: [N] target ids (tokens[0] = root); valid: [N] bool (a sampled
    parent can run out of draft mass); confidence: [N] draft probability of each node's token
    given its parent; q: [N, vocab] the warped draft distribution each node's children were
    drawn from (EAGLE-1 sampled trees only, else None)."""
    tree: Tree
    tokens: torch.Tensor
    valid: torch.Tensor
    confidence: torch.Tensor
    q: torch.Tensor | None = None

    def fit(self, max_nodes: int) -> "Draft":
        """This draft cut to at most `max_nodes` nodes (`tree.fit_tree`: parents kept before
        children, each node a prefix of its children in drawing order, so verification stays
        lossless), e.g. where the target's context ends before the whole tree."""
        tree, kept = fit_tree(self.tree, max_nodes)
        if tree is self.tree:
            return self
        kept = torch.tensor(kept, device=self.tokens.device)
        return Draft(tree, self.tokens[kept], self.valid[kept], self.confidence[kept],
                     None if self.q is None else self.q[kept])


class TreeDrafter(ABC):
    """The drafter protocol: what `EagleDecoder` asks of anything that drafts.

    A cycle: `draft(root)` proposes a tree of candidate tokens under the root (a `Draft`); the
    target verifies it; `extend(reads, tokens)` tells the drafter what was accepted: the target's
    reads at the accepted nodes (`target_layers` says which: the last feature, or an EAGLE-3 head's
    layers) and the accepted tokens advanced by one step, the bonus token last, which is the next
    root. `begin` does the same for the prompt after the prefill.

    Declared here, read by the decoder:
    * `tree`: the largest tree it drafts (a `Tree`, or a `DynamicTree`'s settings), for the stats;
    * `sampled`: True when a node's children are draws from a distribution q held in `Draft.q`
      (EAGLE-1 at T > 0: verified by `verify.SampledTreeRule`), False when they are fixed by the
      context (top-k, a lookup: `verify.TopKTreeRule`); both keep verification lossless;
    * `generator`: the RNG the decoder hands it for its draws; `head_forwards`: a counter.

    A drafter that runs as a row of the methods table (`eagle_mini/methods.py`) also offers
    `build(head, tree, sampling)`: the decoder's drafter for that row.
    """
    tree = None
    sampled = False
    target_layers = None
    generator = None
    head_forwards = 0

    @classmethod
    def build(cls, head, tree, sampling) -> "TreeDrafter":
        """The drafter a method row runs with: its `head` (None for a row without one), its tree
        and a `sampling.SamplingConfig`."""
        raise NotImplementedError(f"{cls.__name__} does not run as a row of the methods table")

    def begin(self, prompt_ids: list[int], reads: torch.Tensor, root: int) -> None:
        """After the prefill: the prompt, the target's reads at every prompt position and the first
        token. By default: `extend` over the prompt's tokens advanced by one step (EAGLE §3.1)."""
        self.extend(reads, list(prompt_ids[1:]) + [root])

    @abstractmethod
    def extend(self, reads: torch.Tensor, shifted_tokens) -> None:
        """What the last cycle accepted: the reads [n, ...] at the accepted nodes and the tokens
        that follow each, t_{i+1} [n] (the last is the bonus token, the next root)."""

    @abstractmethod
    def draft(self, root_token: int) -> Draft:
        """The next cycle's tree under `root_token`."""


class Drafter(TreeDrafter):
    """Runs the head over the stable context and drafts one tree per verification cycle.
    `tree`: a `Tree`, a `DynamicTree` or a spec (`tree.tree_from_spec`); default EAGLE-2's."""

    def __init__(self, head, tree=DynamicTree(), temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, generator=None):
        self.head = head
        self.tree = tree_from_spec(tree)
        self.sampled = temperature > 0 and not isinstance(self.tree, DynamicTree)
        self.warp_args = (temperature, top_p, top_k)
        self.generator = generator
        self.reset()

    @classmethod
    def build(cls, head, tree, sampling) -> "Drafter":
        return cls(head, tree, sampling.temperature, sampling.top_p, sampling.top_k)

    @property
    def target_layers(self):
        """What the head reads of the target: None, the last feature (EAGLE-1), or the indices of
        the layers whose inputs it reads (an EAGLE-3 head's `aux_layers`), which the decoder asks
        the target's forward for."""
        return getattr(self.head, "aux_layers", None)

    def reset(self):
        self.cache = self.head.new_cache()
        self.stable = 0
        self.root_feature = None
        self.head_forwards = 0

    @torch.no_grad()
    def extend(self, features: torch.Tensor, shifted_tokens) -> None:
        """Drop draft entries, then run the head on true features [n, H] and tokens t_{i+1} [n]."""
        crop_cache(self.cache, self.stable)
        tokens = torch.as_tensor(shifted_tokens, device=features.device).view(1, -1)
        out = self.head(features[None], tokens, cache=self.cache)[0]
        self.stable += features.shape[0]
        self.root_feature = out[-1]
        self.head_forwards += 1

    def _run(self, parent_features, tokens, depth: int, mask) -> torch.Tensor:
        """One draft step: new head entries at position stable - 1 + depth; -> predicted [n, H]."""
        n = tokens.shape[0]
        positions = torch.full((n,), self.stable - 1 + depth, device=tokens.device)
        self.head_forwards += 1
        return self.head(parent_features[None], tokens[None], cache=self.cache,
                         positions=positions, tree_mask=mask)[0]

    def _to_target(self, draft_ids):
        return self.head.draft_to_target[draft_ids]

    @torch.no_grad()
    def draft(self, root_token: int) -> Draft:
        crop_cache(self.cache, self.stable)
        if isinstance(self.tree, DynamicTree):
            return self._draft_dynamic(root_token)
        return self._draft_static(root_token)

    def _draft_static(self, root_token: int) -> Draft:
        tree, dev = self.tree, self.root_feature.device
        n = tree.num_nodes
        tokens = torch.zeros(n, dtype=torch.long, device=dev)
        tokens[0] = root_token
        valid = torch.ones(n, dtype=torch.bool, device=dev)
        confidence = torch.ones(n, device=dev)
        q_full = (torch.zeros(n, self.head.target_config.vocab_size, device=dev)
                  if self.sampled else None)
        out = {0: self.root_feature}  # node -> its predicted next feature
        slots = []                    # nodes with entries in the head's draft cache, in order
        depths = tree.depths.tolist()
        for d in range(1, tree.max_depth + 1):
            parents = [i for i in range(n) if depths[i] == d - 1 and tree.children[i] and valid[i]]
            if parents:
                logits = self.head.draft_logits(torch.stack([out[p] for p in parents])).float()
            for row, p in enumerate(parents):
                kids = sorted(tree.children[p], key=lambda c: tree.ranks[c])
                # Sampled children take consecutive draws: a draw skipped over a rank gap (e.g.
                # choices [[0], [2]]) would bias the p/q rule, which removes only tried tokens from q.
                slot = {c: j if self.sampled else tree.ranks[c] for j, c in enumerate(kids)}
                need = max(slot.values()) + 1
                if self.sampled:
                    q = warp(logits[row], *self.warp_args)
                    drawn = torch.multinomial(q, min(need, int((q > 0).sum())), replacement=False,
                                              generator=self.generator)
                    q_full[p, self._to_target(torch.arange(q.numel(), device=dev))] = q
                else:
                    q = logits[row].softmax(-1)
                    drawn = logits[row].topk(need).indices
                for c in kids:
                    r = slot[c]
                    if r >= drawn.numel():
                        valid[c] = False
                        continue
                    tokens[c] = self._to_target(drawn[r])
                    confidence[c] = q[drawn[r]]
            for i in range(n):
                if depths[i] == d and not valid[tree.parents[i]]:
                    valid[i] = False
            run = [i for i in range(n) if depths[i] == d and tree.children[i] and valid[i]]
            if d < tree.max_depth and run:
                cols = slots + run
                mask = tree.mask[run][:, cols]
                pred = self._run(torch.stack([out[tree.parents[i]] for i in run]), tokens[run], d, mask)
                out.update({i: pred[k] for k, i in enumerate(run)})
                slots = cols
        return Draft(tree, tokens, valid, confidence, q_full)

    def _draft_dynamic(self, root_token: int) -> Draft:
        return self.grow(root_token).rerank(self.tree.total_tokens, self.root_feature.device)

    @torch.no_grad()
    def grow(self, root_token: int) -> "Candidates":
        """EAGLE-2's expansion (§4): `depth` steps, each giving the `topk` best frontier nodes by
        path value their `topk` children; every node made is a candidate (`Candidates.rerank`
        keeps the best)."""
        crop_cache(self.cache, self.stable)
        cfg, dev = self.tree, self.root_feature.device
        cands = Candidates(root_token)
        ancestors = [{0}]
        feature = {0: self.root_feature}
        frontier, slots = [0], []
        for step in range(1, cfg.depth + 1):
            if step > 1:  # run the head on the frontier to get its children's distribution
                cols = slots + frontier
                mask = torch.tensor([[c in ancestors[f] for c in cols] for f in frontier],
                                    device=dev)
                pred = self._run(torch.stack([feature[cands.parent[f]] for f in frontier]),
                                 torch.tensor([cands.token[f] for f in frontier], device=dev),
                                 step - 1, mask)
                feature.update({f: pred[k] for k, f in enumerate(frontier)})
                slots = cols
            logp = self.head.draft_logits(torch.stack([feature[f] for f in frontier])).float()
            logp = logp.log_softmax(-1)
            top = logp.topk(cfg.topk, dim=-1)
            values, tokens = top.values.tolist(), self._to_target(top.indices).tolist()  # one read
            new = []
            for row, f in enumerate(frontier):
                for lp, token in zip(values[row], tokens[row]):
                    c = cands.add(f, token, cands.value[f] + lp, math.exp(lp))
                    ancestors.append(ancestors[f] | {c})
                    new.append(c)
            # the next frontier: the top-k of this step's candidates by path value
            frontier = sorted(new, key=lambda c: -cands.value[c])[:cfg.topk]
        return cands


class Candidates:
    """Every node a dynamic draft made before its rerank (EAGLE-2 §4). Candidate 0 is the root;
    each other has a parent (an earlier candidate), a target token, a value (the log of its path's
    confidences, the root's 0) and a confidence (its draft probability given its parent). A child's
    value is never above its parent's, which keeps the best `n` connected (`rerank`)."""

    def __init__(self, root_token: int):
        self.parent, self.token, self.value = [-1], [int(root_token)], [0.0]
        self.depth, self.confidence = [0], [1.0]
        self.index = {}   # (parent, token) -> candidate

    def add(self, parent: int, token: int, value: float, confidence: float) -> int:
        self.parent.append(parent)
        self.token.append(token)
        self.value.append(value)
        self.depth.append(self.depth[parent] + 1)
        self.confidence.append(confidence)
        self.index.setdefault((parent, token), len(self.parent) - 1)
        return len(self.parent) - 1

    def child(self, parent: int, token: int) -> int | None:
        """The candidate for `token` under `parent`, if one was made."""
        return self.index.get((parent, token))

    def best(self, total_tokens: int) -> list[int]:
        """The best `total_tokens - 1` candidates by value; the stable sort keeps a parent (an
        earlier candidate) before its child on ties."""
        return sorted(range(1, len(self.parent)), key=lambda c: -self.value[c])[:total_tokens - 1]

    def rerank(self, total_tokens: int, device, best: list[int] | None = None) -> Draft:
        """The draft of the root and the `best` candidates (default: `best(total_tokens)`)."""
        best = self.best(total_tokens) if best is None else best
        nodes = [0] + sorted(best, key=lambda c: (self.depth[c], -self.value[c], c))
        index = {c: i for i, c in enumerate(nodes)}
        parents = [-1] + [index[self.parent[c]] for c in nodes[1:]]
        ranks, seen = [0], {}
        for c in nodes[1:]:
            seen[self.parent[c]] = seen.get(self.parent[c], -1) + 1
            ranks.append(seen[self.parent[c]])
        tokens = torch.tensor([self.token[c] for c in nodes], device=device)
        return Draft(from_parents(parents, ranks), tokens,
                     torch.ones(len(nodes), dtype=torch.bool, device=device),
                     torch.tensor([self.confidence[c] for c in nodes], device=device))
