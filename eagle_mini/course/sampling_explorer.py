"""Notebook 01's explorer: one step of speculative sampling on a toy vocabulary, with the package's
own verifier doing the sampling (Leviathan et al. 2023 §2.3; EAGLE §2 and §3.3).

A draft token x ~ q is accepted with probability min(1, p(x)/q(x)); on rejection the target's
token comes from the residual norm(max(0, p - q)). The acceptance rate is
alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q), and the token the step emits is distributed as p.
Here every one of those numbers comes from the package: alpha from `SampledTreeRule`'s accept
probability, the samples from `verify_sampling` on a one-level `Draft`. The notebook only adds
sliders and plots; what it shows is what `explore` returns.

    >>> view = explore([2, 0, 2], [1, 1, 2], trials=200)
    >>> view.alpha, view.residual.tolist()
    (0.75, [1.0, 0.0, 0.0])

Left out: trees deeper than one level (notebook 05) and the EAGLE-2 rule for top-k children
(`TopKTreeRule`, usable here through `rule=`).
"""
from dataclasses import dataclass

import torch
from scipy.stats import chisquare

from eagle_mini.draft import Draft
from eagle_mini.errors import EagleMiniError
from eagle_mini.tree import from_choices
from eagle_mini.verify import SampledTreeRule, verify_sampling

ROOT = -1  # the root's token: never read by verification, so a placeholder outside the vocabulary


def as_distribution(weights) -> torch.Tensor:
    """Non-negative weights [vocab] -> probabilities [vocab] (float32).

    >>> as_distribution([1, 3]).tolist()
    [0.25, 0.75]
    """
    w = torch.as_tensor(weights, dtype=torch.float32)
    if w.dim() != 1 or (w < 0).any() or not w.sum() > 0:
        raise EagleMiniError(f"weights must be a 1-D list of non-negative numbers, one positive, "
                             f"got {w.tolist()}")
    return w / w.sum()


def one_level_draft(children, q: torch.Tensor) -> Draft:
    """The root with `children` (token ids, in draw order) as its only nodes, drawn from q: [vocab].

    >>> one_level_draft([2], torch.tensor([0.5, 0.0, 0.5])).tree.parents
    [-1, 0]
    """
    tree = from_choices([[rank] for rank in range(len(children))])
    n = tree.num_nodes
    tokens = torch.tensor([ROOT] + list(children))
    q_rows = torch.zeros(n, q.numel())
    q_rows[0] = q  # the root's children came from q; the children have no children
    confidence = torch.ones(n)
    confidence[1:] = q[tokens[1:]]
    return Draft(tree, tokens, torch.ones(n, dtype=torch.bool), confidence, q_rows)


def first_new_token(draft: Draft, path: list[int], token: int) -> int:
    """The token a step emits right after the root: an accepted child, or the residual draw."""
    return int(draft.tokens[path[1]]) if len(path) > 1 else token


def acceptance_rate(p: torch.Tensor, q: torch.Tensor, rule=None) -> float:
    """P(the draft token is accepted) = sum_x q(x) * accept_probability(p, q, x), from the package's
    rule (`SampledTreeRule`: min(1, p/q), which makes it sum_x min(p(x), q(x)))."""
    rule = rule or SampledTreeRule()
    return sum(float(q[x]) * float(rule.accept_probability(p, q, x))
               for x in range(q.numel()) if q[x] > 0)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """TV(p, q) = 1/2 sum_x |p(x) - q(x)|."""
    return 0.5 * float((p - q).abs().sum())


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) [vocab]: where a rejected step draws from. All zeros when p == q, where
    nothing is ever rejected."""
    positive = torch.clamp(p - q, min=0)
    total = positive.sum()
    return positive / total if total > 0 else positive


def first_token_counts(p: torch.Tensor, q: torch.Tensor, trials: int, rule=None, k: int = 1,
                       children: str = "sampled", seed: int = 0) -> tuple[torch.Tensor, int]:
    """Run `trials` verification steps with the package's verifier -> (counts [vocab] of the first
    new token, number of steps that accepted a draft token).

    Each step drafts k children, drawn from q without replacement ("sampled", EAGLE-1) or the
    deterministic top-k of q ("topk", EAGLE-2), and calls `verify_sampling` with `rule`
    (default `SampledTreeRule`). One seeded generator drives drafting and verification.
    """
    rule = rule or SampledTreeRule()
    g = torch.Generator().manual_seed(seed)
    counts, accepted = torch.zeros(p.numel()), 0
    p_rows = p.expand(k + 1, -1)  # after any child the target would say p again: any row will do
    for _ in range(trials):
        if children == "sampled":
            kids = torch.multinomial(q, k, replacement=False, generator=g).tolist()
        else:
            kids = q.topk(k).indices.tolist()
        draft = one_level_draft(kids, q)
        path, token = verify_sampling(draft, p_rows, rule, generator=g)
        counts[first_new_token(draft, path, token)] += 1
        accepted += len(path) > 1
    return counts, accepted


def chi2_pvalue(counts: torch.Tensor, dist: torch.Tensor) -> float:
    """Chi-square goodness of fit of `counts` [vocab] to `dist` [vocab]. Tokens dist gives no mass
    are left out of the test, unless one was observed: then the counts cannot come from dist (0)."""
    support = dist > 0
    if counts[~support].sum() > 0:
        return 0.0
    if int(support.sum()) < 2:
        return 1.0  # a single possible token: every count is on it
    observed = counts[support].double()
    expected = observed.sum() * dist[support].double() / dist[support].double().sum()
    return float(chisquare(observed.numpy(), expected.numpy()).pvalue)


@dataclass
class SamplingView:
    """Everything the explorer shows for one setting of the sliders."""
    p: torch.Tensor          # [vocab] target distribution
    q: torch.Tensor          # [vocab] draft distribution
    alpha: float             # acceptance rate from the rule, = sum min(p, q) = 1 - TV(p, q)
    tv: float                # total variation distance TV(p, q)
    residual: torch.Tensor   # [vocab] norm(max(0, p - q)), zeros when p == q
    counts: torch.Tensor     # [vocab] first new token over `trials` steps of the real verifier
    accepted: float          # fraction of those steps that accepted the draft token
    pvalue: float            # chi-square of counts against p

    @property
    def observed(self) -> torch.Tensor:
        """The empirical law of the first new token [vocab]."""
        return self.counts / self.counts.sum()


def explore(p_weights, q_weights, trials: int = 2000, seed: int = 0) -> SamplingView:
    """Weights for p and q (any non-negative numbers) -> the explorer's numbers and samples."""
    p, q = as_distribution(p_weights), as_distribution(q_weights)
    counts, accepted = first_token_counts(p, q, trials, seed=seed)
    return SamplingView(p, q, acceptance_rate(p, q), total_variation(p, q), residual(p, q),
                        counts, accepted / trials, chi2_pvalue(counts, p))
