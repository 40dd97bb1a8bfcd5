"""Sampling losslessness (EAGLE §3.3, EAGLE-2 §4): EAGLE's sampled tokens follow the target's own
warped distribution p exactly, checked against exact enumeration.

Two levels:

* One verification step, exactly. `verify_sampling` consumes one uniform per random choice, so we
  can integrate over those uniforms branch by branch (`exact_first_token_law`) and compare the law
  of the first new token with p, to float precision. Each rule is lossless with its own children
  (`SampledTreeRule`: drawn from q without replacement; `TopKTreeRule`: any fixed children); the
  p/q rule on deterministic top-k children, and two broken rules, are visibly biased.
* Whole decoding loops, statistically. A tiny random target (vocabulary 5) is small enough that the
  exact joint law of generated tokens 2-4 can be enumerated (5^4 sequences). EAGLE sampling, run
  with many fixed seeds, must fit it by a chi-square test: EAGLE-1 on its static sampled tree and
  EAGLE-2 on its dynamic top-k tree, with a random head and with a head accurate enough to get
  three draft tokens accepted in a row, at T = 1 and at T = 0.7 with top-p 0.9. Three deliberately
  broken verification rules, run the same way, must be rejected (p < 1e-6): the test can tell.
"""
import itertools
from unittest import mock

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.stats import chisquare

import eagle_mini.decode
from eagle_mini.decode import generate
from eagle_mini.draft import Draft, Drafter
from eagle_mini.hybrid import HybridDrafter
from eagle_mini.lookup import LookupDrafter
from eagle_mini.tree import DynamicTree
from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.frequent import FrequentVocabHead
from eagle_mini.models import tiny_target
from eagle_mini.sampling import warp
from eagle_mini.tree import from_choices
from eagle_mini.verify import SampledTreeRule, TopKTreeRule, verify_sampling

# ---------------------------------------------------------------- one verification step, exactly


class Branch(Exception):
    """verify_sampling asked for a uniform we have not chosen yet: `kind` says what it feeds."""

    def __init__(self, kind, threshold=None):
        super().__init__(kind)
        self.kind, self.threshold = kind, threshold


class Undecided:
    """The next uniform, left open: comparing it with an acceptance probability (`u < a`) or
    scaling it for the inverse-CDF draw (`u * total`) raises `Branch`, so we learn which choice it
    is before we pick its value."""

    def __lt__(self, threshold):
        raise Branch("accept?", float(threshold))

    def __mul__(self, total):
        raise Branch("draw")

    __rmul__ = __mul__


class Spy:
    """Wraps a rule and remembers the distribution a final draw would come from (p at a new node,
    then each residual the rule returns)."""

    def __init__(self, rule, p):
        self.rule, self.p = rule, p

    def start(self, draft, node):
        self.residual = self.p[node]
        return self.rule.start(draft, node)

    def accept_probability(self, p, q, x):
        return self.rule.accept_probability(p, q, x)

    def reject(self, p, q, x):
        self.residual, q = self.rule.reject(p, q, x)
        return self.residual, q


def exact_first_token_law(draft, p, rule) -> torch.Tensor:
    """The exact law [vocab] of the first new token `verify_sampling` emits for a fixed draft.

    Every run is scripted with chosen uniforms; at the first unchosen one we branch: an acceptance
    test with probability a gets u = 0 (accept, weight a) and u = a (reject, weight 1 - a); a final
    draw from residual r gets, for each token y, the midpoint of y's CDF interval (weight r[y]).
    """
    law = torch.zeros(p.shape[-1], dtype=torch.float64)
    todo = [((), 1.0)]
    while todo:
        script, weight = todo.pop()
        spy = Spy(rule, p)
        try:
            path, token = verify_sampling(draft, p, spy,
                                          uniforms=itertools.chain(script, [Undecided()]))
        except Branch as b:
            if b.kind == "accept?":
                if b.threshold > 0:
                    todo.append((script + (0.0,), weight * b.threshold))
                if b.threshold < 1:
                    todo.append((script + (b.threshold,), weight * (1 - b.threshold)))
            else:
                r = spy.residual.double()
                cdf, total = r.cumsum(0), float(r.sum())
                for y in r.nonzero().flatten().tolist():
                    u = (float(cdf[y]) - float(r[y]) / 2) / total
                    todo.append((script + (u,), weight * float(r[y]) / total))
            continue
        law[int(draft.tokens[path[1]]) if len(path) > 1 else token] += weight
    return law


def one_level_draft(children, q=None) -> Draft:
    """The root (token 0, whose next-token law is being tested) with the given children in rank
    order; `q` is the draft distribution at the root, for the p/q rule."""
    tree = from_choices([[r] for r in range(len(children))])
    n = tree.num_nodes
    q_rows = None
    if q is not None:
        q_rows = torch.zeros(n, q.numel())
        q_rows[0] = q
    return Draft(tree, torch.tensor([0] + list(children)), torch.ones(n, dtype=torch.bool),
                 torch.ones(n), q_rows)


def draws_without_replacement(q, k):
    """Every ordered k-tuple of distinct tokens with its probability under k draws from q
    without replacement (the j-th child of an EAGLE-1 sampled node is the j-th draw)."""
    for xs in itertools.permutations(range(q.numel()), k):
        prob, left = 1.0, 1.0
        for x in xs:
            prob *= float(q[x]) / left
            left -= float(q[x])
        if prob > 0:
            yield xs, prob


def law_with_sampled_children(p, q, k, rule=SampledTreeRule()):
    """Exact first-token law when the root's k children are drawn from q without replacement."""
    return sum(prob * exact_first_token_law(one_level_draft(xs, q), p.expand(k + 1, -1), rule)
               for xs, prob in draws_without_replacement(q, k))


def law_with_fixed_children(p, children, q=None, rule=TopKTreeRule()):
    """Exact first-token law when the root's children are the given tokens, in rank order."""
    draft = one_level_draft(children, q)
    return exact_first_token_law(draft, p.expand(draft.tree.num_nodes, -1), rule)


def assert_law_is(law, p):
    """Equal up to the float32 arithmetic inside the rules."""
    torch.testing.assert_close(law, p.double(), rtol=0, atol=1e-6)


class AcceptEveryDraft(SampledTreeRule):
    """Broken on purpose: trusts the draft blindly."""

    def accept_probability(self, p, q, x):
        return torch.tensor(1.0)


class ForgetTriedToken(SampledTreeRule):
    """Broken on purpose: after a rejection the tried token stays in q (SpecInfer's rule for draws
    *with* replacement, applied to draws without)."""

    def reject(self, p, q, x):
        residual = torch.clamp(p - q, min=0)
        return residual / residual.sum(), q


# p puts no mass on token 4 (as after top-p); q is peaked on token 0, which p finds unlikely.
P = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
Q = torch.tensor([0.5, 0.1, 0.1, 0.1, 0.2])


def test_sampled_rule_by_hand():
    """EAGLE-1: children drawn from q without replacement, p/q rule -> exactly p, however many
    children; the deterministic top-k children of the same q, or the broken rules, -> not p."""
    for k in range(1, 6):
        assert_law_is(law_with_sampled_children(P, Q, k), P)
    top3 = Q.topk(3).indices.tolist()
    assert (law_with_fixed_children(P, top3, Q, SampledTreeRule()) - P).abs().max() > 0.1
    assert (law_with_sampled_children(P, Q, 3, AcceptEveryDraft()) - P).abs().max() > 0.1
    assert (law_with_sampled_children(P, Q, 3, ForgetTriedToken()) - P).abs().max() > 0.01


def test_topk_rule_by_hand():
    """EAGLE-2: deterministic children, accept p(x), on rejection p(x) <- 0 -> exactly p, whatever
    the children and their order."""
    for children in ([0], [3, 2], [0, 4, 3], [4, 3, 2, 1, 0]):
        assert_law_is(law_with_fixed_children(P, children), P)


def distributions(vocab):
    """Probability vectors [vocab], often with exact zeros (as top-p leaves them)."""
    weights = st.lists(st.one_of(st.just(0.0), st.floats(0.01, 1.0)), min_size=vocab,
                       max_size=vocab).filter(lambda w: sum(w) > 0)
    return weights.map(lambda w: torch.tensor(w) / sum(w))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(distributions(4), distributions(4), st.data())
def test_sampled_rule_is_lossless_on_children_drawn_without_replacement(p, q, data):
    """For any p, q and any number of children up to q's support: the first token's law is p."""
    k = data.draw(st.integers(1, int((q > 0).sum())))
    assert_law_is(law_with_sampled_children(p, q, k), p)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(distributions(5), st.permutations(range(5)), st.integers(1, 5))
def test_topk_rule_is_lossless_on_any_fixed_children(p, order, k):
    """For any p and any k distinct children in any order: the first token's law is p."""
    assert_law_is(law_with_fixed_children(p, order[:k]), p)


# ---------------------------------------------------------------- whole decoding loops

VOCAB = 5
PROMPT = [1, 2, 3]
SAMPLES = 2000  # seeded generations per configuration, controls included
EAGLE1_TREE = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1]]  # depth 3
EAGLE2_TREE = DynamicTree(total_tokens=8, depth=3, topk=3)
WARPS = {"T=1": (1.0, 1.0), "T=0.7,top-p=0.9": (0.7, 0.9)}
DEVICE = os.environ.get("EAGLE_MINI_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tensors here are tiny: thread hand-offs would cost more than the arithmetic (~10x)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_target(**config):
    """A 1-layer Llama with 5 tokens whose next-token law is peaked and depends on the context:
    embeddings of RMS 1 (so the layer's input norm is ~ the identity), logits of std ~1.4 and an
    attention layer strong enough to matter. `config` overrides fields (a shorter context)."""
    target = tiny_target("llama", seed=0, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         **config)
    g = torch.Generator().manual_seed(0)
    model = target.model
    with torch.no_grad():
        emb = torch.randn(model.model.embed_tokens.weight.shape, generator=g)
        model.model.embed_tokens.weight.copy_(emb / emb.pow(2).mean(-1, keepdim=True).sqrt())
        model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape, generator=g) * 0.25)
        attn = model.model.layers[0].self_attn
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) * 0.3)
    assert target.eos_token_ids == set()  # every run makes all 4 tokens
    return target


def close_head(target):
    """A head built, not trained, to draft well: fc passes the shifted token's embedding through
    and its layer is a copy of the target's, so it runs the target's own computation on the same
    tokens. It still differs (no final norm, never sees the first prompt token): q ~ p, q != p."""
    head = new_head(target, seed=0)
    hidden = target.hidden_size
    with torch.no_grad():
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1))
        head.fc.bias.zero_()
        layer = target.model.model.layers[0].state_dict()
        head.layers[0].load_state_dict({k: v for k, v in layer.items()
                                        if not k.startswith("input_layernorm")})
    return head


@torch.no_grad()
def exact_joint(target, prompt, n, temperature, top_p) -> torch.Tensor:
    """P(t_1..t_n) of vanilla sampling, [vocab] * n, by running every prefix (one batch a step)."""
    dev = target.device
    joint, prefixes = torch.ones(1, dtype=torch.float64, device=dev), torch.tensor([prompt], device=dev)
    for _ in range(n):
        p = warp(target.model(prefixes).logits[:, -1], temperature, top_p).double()
        joint = (joint[:, None] * p).flatten()
        prefixes = torch.cat([prefixes.repeat_interleave(VOCAB, 0),
                              torch.arange(VOCAB, device=dev).repeat(len(prefixes))[:, None]], dim=1)
    return joint.view([VOCAB] * n).cpu()


def chi_square_pvalue(samples, law, min_expected=5.0) -> float:
    """Goodness of fit of token tuples to `law`; cells expecting fewer than `min_expected` counts
    are pooled into one bin (grown until it expects that many too)."""
    probs = law.flatten().numpy()
    cells = np.ravel_multi_index(np.array(samples).T, law.shape)
    observed = np.bincount(cells, minlength=probs.size).astype(float)
    expected = probs / probs.sum() * len(samples)
    order = np.argsort(expected, kind="stable")
    k = int(np.searchsorted(expected[order], min_expected))
    while 0 < k < len(order) and expected[order[:k]].sum() < min_expected:
        k += 1
    pooled, kept = order[:k], order[k:]
    observed = np.append(observed[kept], observed[pooled].sum())
    expected = np.append(expected[kept], expected[pooled].sum())
    return float(chisquare(observed[expected > 0], expected[expected > 0]).pvalue)


@pytest.fixture(scope="module")
def world():
    """The tiny target and heads on DEVICE (`EAGLE_MINI_TEST_DEVICE`, default cpu; cuda on a GPU
    machine runs the same chi-square tests with every draw made on the GPU)."""
    target = make_target()
    target.model.to(DEVICE)
    return {"target": target,
            "heads": {"random head": new_head(target, seed=1), "close head": close_head(target),
                      "eagle3 head": new_eagle3_head(target, seed=1, layers=(0, 0, 1)),
                      # FR-Spec: the close head drafting 3 of the 5 tokens (`heads/frequent.py`)
                      "close head, 3 tokens": FrequentVocabHead(close_head(target), [0, 2, 3])},
            "laws": {w: exact_joint(target, PROMPT, 4, *WARPS[w]).sum(0) for w in WARPS}}


def eagle_samples(world, head, tree, warp_name, drafter_cls=None):
    """Tokens 2-4 of SAMPLES seeded EAGLE generations, and each run's first cycle length."""
    temperature, top_p = WARPS[warp_name]
    head = world["heads"][head]
    tokens, first_cycle = [], []
    for seed in range(SAMPLES):
        drafter = drafter_cls(head, tree, temperature, top_p) if drafter_cls else None
        # 5 new tokens: the first cycle (after the prefill's token) can keep 3 drafts + its bonus
        gen = generate(world["target"], head, PROMPT, max_new_tokens=5, temperature=temperature,
                       top_p=top_p, tree=tree, seed=seed, drafter=drafter)
        tokens.append(gen.output_ids[1:4])
        first_cycle.append(gen.stats["cycle_lengths"][0])
    return tokens, np.array(first_cycle)


@pytest.mark.parametrize("warp_name", WARPS)
@pytest.mark.parametrize("head", ["random head", "close head", "eagle3 head",
                                  "close head, 3 tokens"])
@pytest.mark.parametrize("tree, rule", [
    pytest.param(EAGLE1_TREE, SampledTreeRule, id="EAGLE-1"),
    pytest.param(EAGLE2_TREE, TopKTreeRule, id="EAGLE-2")])
def test_eagle_sampling_matches_the_exact_joint_of_tokens_2_to_4(world, tree, rule, head,
                                                                 warp_name):
    """The empirical joint of tokens 2-4 fits the exact one (chi-square p > 1e-3, fixed seeds).
    Token 2 is the first token verification emits; the runs cover both of its ways: every child
    rejected (token 2 from the residual) and, for the close head, three drafts accepted in a row."""
    temperature, top_p = WARPS[warp_name]
    drafter = Drafter(world["heads"][head], tree, temperature, top_p)
    assert isinstance(drafter.tree, DynamicTree) != drafter.sampled  # each variant, its own rule
    assert rule is (SampledTreeRule if drafter.sampled else TopKTreeRule)
    tokens, first_cycle = eagle_samples(world, head, tree, warp_name)
    pvalue = chi_square_pvalue(tokens, world["laws"][warp_name])
    print(f"{rule.__name__} {head} {warp_name}: p = {pvalue:.3g}, all rejected "
          f"{np.mean(first_cycle == 1):.2f}, depth >= 3 {np.mean(first_cycle >= 4):.2f}")
    assert pvalue > 1e-3
    assert np.mean(first_cycle == 1) > 0.02
    if head == "close head":
        assert np.mean(first_cycle >= 4) > 0.25


class KeepTriedToken(TopKTreeRule):
    """Broken on purpose: after a rejection the tried token keeps its mass in p."""

    def reject(self, p, q, x):
        return p, q


LOOKUP_DRAFTERS = {"prompt lookup": lambda world: LookupDrafter(tokens=3),
                   "eagle2+lookup": lambda world: HybridDrafter(world["heads"]["close head"],
                                                                EAGLE2_TREE, tokens=3)}


@pytest.mark.parametrize("drafter", LOOKUP_DRAFTERS)
@pytest.mark.parametrize("warp_name, broken", [(w, False) for w in WARPS] + [("T=1", True)],
                         ids=list(WARPS) + ["control: tried-token-kept"])
def test_lookup_sampling_matches_the_exact_joint_of_tokens_2_to_4(world, drafter, warp_name,
                                                                  broken, monkeypatch):
    """Prompt lookup's chains are fixed by the text, not drawn, and the hybrid's tree is the
    head's top-k with such a chain grafted in: verified by the top-k rule, tokens 2-4 keep
    vanilla's joint law. With 5 tokens the text repeats, so lookups draft and are accepted often.
    The control breaks the rule's rejection step: the same harness rejects it."""
    if broken:
        monkeypatch.setattr(eagle_mini.decode, "TopKTreeRule", KeepTriedToken)
    temperature, top_p = WARPS[warp_name]
    tokens, first_cycle = [], []
    for seed in range(SAMPLES):
        gen = generate(world["target"], None, PROMPT, max_new_tokens=5, temperature=temperature,
                       top_p=top_p, seed=seed, drafter=LOOKUP_DRAFTERS[drafter](world))
        tokens.append(gen.output_ids[1:4])
        first_cycle.append(gen.stats["cycle_lengths"][0])
    pvalue = chi_square_pvalue(tokens, world["laws"][warp_name])
    first_cycle = np.array(first_cycle)
    print(f"{drafter} {warp_name}: p = {pvalue:.3g}, first cycle > 1 token "
          f"{np.mean(first_cycle > 1):.2f}")
    if broken:
        assert pvalue < 1e-6
    else:
        assert pvalue > 1e-3 and np.mean(first_cycle > 1) > 0.2


class TopKChildrenWithQ(Drafter):
    """Broken on purpose: an EAGLE-1 static tree whose children are the deterministic top-k of q
    (as EAGLE-2's are) while Draft.q is still filled in, so the p/q rule runs on them."""

    def draft(self, root_token):
        with mock.patch.object(torch, "multinomial", lambda q, n, **kw: q.topk(n).indices):
            return super().draft(root_token)


@pytest.mark.parametrize("broken_rule, drafter_cls, head", [
    (AcceptEveryDraft, None, "random head"),
    (ForgetTriedToken, None, "close head"),
    (SampledTreeRule, TopKChildrenWithQ, "close head")],
    ids=["accept-every-draft", "tried-token-stays-in-q", "pq-rule-on-topk-children"])
def test_broken_verification_is_detected(world, monkeypatch, broken_rule, drafter_cls, head):
    """Same harness, same sample size, a broken rule: the chi-square test rejects (p < 1e-6)."""
    # the decoder picks its rule by the name eagle_mini.decode imported
    monkeypatch.setattr(eagle_mini.decode, "SampledTreeRule", broken_rule)
    tokens, _ = eagle_samples(world, head, EAGLE1_TREE, "T=1", drafter_cls)
    pvalue = chi_square_pvalue(tokens, world["laws"]["T=1"])
    print(f"p = {pvalue:.3g}")
    assert pvalue < 1e-6


def test_sampled_children_take_consecutive_draws_across_rank_gaps(world):
    """A static tree may skip ranks (choices [[0], [2]]). At T > 0 its j-th child in rank order is
    the j-th draw from q, as in the gap-free tree; a skipped draw would bias the p/q rule, which
    removes only the tokens it tried from q."""
    target, head = world["target"], world["heads"]["random head"]
    gappy = [[0], [2], [0, 0], [0, 3]]
    dense = [[0], [1], [0, 0], [0, 1]]
    for seed in range(20):
        tokens = []
        for tree in (gappy, dense):
            drafter = Drafter(head, tree, temperature=1.0,
                              generator=torch.Generator().manual_seed(seed))
            step = target.forward(PROMPT, target.new_cache())
            drafter.extend(step.features, PROMPT[1:] + [0])
            tokens.append(drafter.draft(0).tokens)
        assert torch.equal(*tokens)
