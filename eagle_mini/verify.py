"""Verifying a draft tree against the target: greedy and lossless sampling (EAGLE §3.3).

The target scores every tree node in one forward; `p[i]` is its (warped) distribution for the token
after node i. Verification walks down from the root, accepts children, and ends with one token from
the target itself (the "bonus" token), so every cycle adds at least one token.

* Greedy: accept the child whose token is the target's argmax at its parent; the longest such path
  wins, plus the argmax after it.
* Sampling, EAGLE-1 (`SampledTreeRule`): children were *drawn from q without replacement*. Try them
  in draw order: accept x with probability min(1, p(x)/q(x)); on rejection the target distribution
  becomes the residual norm(max(0, p - q)) and x is removed from q. If every child is rejected the
  next token is drawn from the residual. The residual rounds are SpecInfer's multi-step speculative
  sampling (arXiv 2305.09781), whose candidates are drawn independently so its q stays; removing x
  from q is what draws without replacement need (recursive rejection sampling, Jeon et al., arXiv
  2402.14160). Together they keep the output distribution exactly p.
* Sampling, EAGLE-2 (`TopKTreeRule`): children are the deterministic top-k, i.e. q(x) = 1 for the
  tried token: accept with probability p(x); on rejection set p(x) = 0 and renormalize. (The p/q rule
  on deterministic children is biased, so each rule goes with its own kind of tree.)
"""
import torch

from eagle_mini.sampling import uniform as draw_uniform


def verify_greedy(draft, logits: torch.Tensor) -> tuple[list[int], int]:
    """logits: [N, vocab] target logits per node -> (accepted path of node ids, bonus token)."""
    best = logits.argmax(-1).tolist()
    tokens = draft.tokens.tolist()
    path, node = [0], 0
    while True:
        child = next((c for c in draft.tree.children[node]
                      if draft.valid[c] and tokens[c] == best[node]), None)
        if child is None:
            return path, best[node]
        path.append(child)
        node = child


class TopKTreeRule:
    """EAGLE-2: deterministic children, q(x) = 1 for the tried token.

    Lossless whatever drafted the children (the head's top-k, a prompt lookup's copy, both in one
    tree: `lookup.py`, `hybrid.py`), as long as they were fixed before this node's draws and are
    distinct tokens. Proof: at a node with children x_1..x_k, write P_j = p(x_1) + ... + p(x_j).
    The walk reaches x_i when x_1..x_{i-1} were rejected, with probability 1 - P_{i-1} (true for
    i = 1; each step rejects with 1 - p(x_j) / (1 - P_{j-1}) = (1 - P_j) / (1 - P_{j-1})), and
    accepts it with p(x_i) / (1 - P_{i-1}), the renormalised p after the removals: so x_i comes
    out with probability p(x_i). With every child rejected (probability 1 - P_k) the token is drawn
    from p without the children, renormalised: any other token y comes out with p(y). So the
    node's token is distributed as p, and, since the next node's children are again fixed by the
    path so far, the whole output by induction. Nothing in it reads how the children were chosen;
    a repeated sibling would only be tried at p = 0 (the graft in `hybrid.py` never makes one)."""

    def start(self, draft, node):
        return None

    def accept_probability(self, p, q, x):
        return p[x]

    def reject(self, p, q, x):
        p = p.clone()
        p[x] = 0
        return p / p.sum(), q


class SampledTreeRule:
    """EAGLE-1: children drawn from q without replacement; accept min(1, p/q), residual max(0, p-q)."""

    def start(self, draft, node):
        return draft.q[node].clone()

    def accept_probability(self, p, q, x):
        return torch.clamp(p[x] / q[x], max=1.0)

    def reject(self, p, q, x):
        residual = torch.clamp(p - q, min=0)
        total = residual.sum()
        p = residual / total if total > 0 else p  # total = 0 only when p == q (never rejected)
        q = q.clone()
        q[x] = 0
        return p, q / q.sum() if q.sum() > 0 else q


def cdf_dtype(device) -> torch.dtype:
    """The dtype `draw` sums a distribution in: float64 (a vocabulary-long sum keeps its last
    digits, so the token depends on u alone), float32 on Apple's MPS, which has no float64.

        >>> cdf_dtype("cpu"), cdf_dtype("mps")
        (torch.float64, torch.float32)
    """
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


def draw(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF sampling: the token where the cumulative mass first exceeds u in [0, 1)."""
    cdf = probs.to(cdf_dtype(probs.device)).cumsum(-1)
    point = torch.tensor([u * float(cdf[-1])], dtype=cdf.dtype, device=cdf.device)
    return int(torch.searchsorted(cdf, point, right=True).clamp(max=probs.numel() - 1))


def verify_sampling(draft, p: torch.Tensor, rule, generator=None, uniforms=None, observe=None):
    """p: [N, vocab] warped target distributions per node -> (accepted path, next token).

    Every random choice is one uniform draw, from `generator` or from the iterator `uniforms`
    (which makes grading deterministic). `observe(parent, child, token, u, ratio)`, when given, sees
    each draw as it is made: a tried child with its accept ratio, then the last draw, which picks
    the next token from the (residual) distribution, with child and ratio None.
    """
    def uniform():
        return next(uniforms) if uniforms is not None else draw_uniform(generator)

    tokens = draft.tokens.tolist()
    path, node = [0], 0
    while True:
        res, q, accepted = p[node], rule.start(draft, node), None
        for child in sorted(draft.tree.children[node], key=lambda c: draft.tree.ranks[c]):
            if not draft.valid[child]:
                break  # children are drawn in rank order: the rest are invalid too
            x = tokens[child]
            u = uniform()
            ratio = float(rule.accept_probability(res, q, x))
            if observe is not None:
                observe(node, child, x, u, ratio)
            if u < ratio:
                accepted = child
                break
            res, q = rule.reject(res, q, x)
        if accepted is None:  # every child rejected, or a leaf: the target's own token
            u = uniform()
            token = draw(res, u)
            if observe is not None:
                observe(node, None, token, u, None)
            return path, token
        path.append(accepted)
        node = accepted
