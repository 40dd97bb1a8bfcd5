"""The engine against independent oracles: EAGLE-2's dynamic tree against a brute-force
enumeration (EAGLE-2 §4), EAGLE-1's default tree against the authors' `generate_tree_buffers`
(EAGLE §3.1), and the training noise against the recipe (EAGLE §3.2, U(-0.1, 0.1) on input features).
"""
import functools
import math

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from eagle_mini import tiny_target
from eagle_mini.draft import Drafter
from eagle_mini.tree import DynamicTree
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.training.train import TrainConfig, eagle_loss
from eagle_mini.tree import EAGLE1_CHOICES, from_choices, parse_tree

# ================================================================ EAGLE-2: the kept node set
#
# The reference below never touches the drafter's bookkeeping (candidate arrays, tree masks, the
# head's draft cache). A candidate is a root-to-node token path; its children's distribution comes
# from running the head *without a cache* on the stable context followed by that path as a plain
# causal chain, each chain step reading the previous step's predicted feature (EAGLE §3.1).

TIE = 1e-4  # closer values than this at a selection boundary would make either choice right


@functools.lru_cache(maxsize=None)
def _setup(target_seed: int, head_seed: int, draft_vocab: int = 0):
    """A tiny target with a sharpened lm_head (a random one gives near-uniform drafts, whose
    values would all order by depth alone) and a random head on it."""
    target = tiny_target("llama", seed=target_seed, vocab_size=64)
    with torch.no_grad():
        target.model.lm_head.weight.mul_(40)  # before the head shares (or copies) it
    kw = {}
    if draft_vocab:
        g = torch.Generator().manual_seed(head_seed)
        kw["draft_vocab"] = torch.randperm(64, generator=g)[:draft_vocab].sort().values
    return target, new_head(target, seed=head_seed, **kw)


def _prompt(seed: int, length: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (length,), generator=g).tolist()


@torch.no_grad()
def package_tree(target, head, prompt, cfg: DynamicTree):
    """What the package keeps: {root-to-node token path (root excluded): value}, and the root.
    Set up as `EagleDecoder.__init__` does: prefill, then the head over the shifted prompt."""
    step = target.forward(prompt, target.new_cache(), all_logits=False)
    root = int(step.logits[-1].argmax())
    drafter = Drafter(head, cfg)
    drafter.extend(step.features, prompt[1:] + [root])
    draft = drafter.draft(root)
    tree, paths, values = draft.tree, {0: ()}, {0: 0.0}
    for i in range(1, tree.num_nodes):
        p = tree.parents[i]
        paths[i] = paths[p] + (int(draft.tokens[i]),)
        values[i] = values[p] + math.log(float(draft.confidence[i]))
    assert int(draft.tokens[0]) == root
    return {paths[i]: values[i] for i in range(1, tree.num_nodes)}, root


@torch.no_grad()
def reference_tree(target, head, prompt, cfg: DynamicTree, frontier_key="value", rerank_key="value"):
    """Brute-force EAGLE-2 (§4) -> ({token path: value}, tie seen at a selection boundary).

    The root's top-k children are draft level 1; each further level expands the top-k frontier
    nodes of the level before (by path value = sum of draft log-probs) into their top-k children;
    every candidate is remembered and the best total_tokens - 1 by value are kept. (`depth` counts
    draft levels, as `DynamicTree` does.) `frontier_key` / `rerank_key` = "last" rank by the last
    step's log-prob instead -- deliberately wrong variants, to show this oracle can disagree.
    """
    ids = torch.tensor(prompt)
    hidden = target.model.model(input_ids=ids[None]).last_hidden_state[0]
    root = int(target.model.lm_head(hidden[-1]).argmax())
    shifted = prompt[1:] + [root]
    lm = target.model.lm_head.weight[head.draft_to_target]

    @functools.lru_cache(maxsize=None)
    def predicted(path):
        """The head's predicted feature after reading `path` (the root's own for ())."""
        if not path:
            return head(hidden[None], torch.tensor([shifted]))[0, -1]
        feats = [hidden] + [predicted(path[:d])[None] for d in range(len(path))]
        return head(torch.cat(feats)[None], torch.tensor([shifted + list(path)]))[0, -1]

    tie = False

    def top(scores: dict, k: int):
        nonlocal tie
        ranked = sorted(scores, key=lambda c: -scores[c])
        if len(ranked) > k and scores[ranked[k - 1]] - scores[ranked[k]] < TIE:
            tie = True
        return ranked[:k]

    value, last = {}, {}

    def children(path):
        logp = (predicted(path) @ lm.T).log_softmax(-1)
        best = top(dict(enumerate(logp.tolist())), cfg.topk)
        for idx in best:
            child = path + (int(head.draft_to_target[idx]),)
            value[child] = value.get(path, 0.0) + float(logp[idx])
            last[child] = float(logp[idx])
            yield child

    new = list(children(()))
    for _ in range(cfg.depth - 1):
        key = value if frontier_key == "value" else last
        frontier = top({c: key[c] for c in new}, cfg.topk)
        new = [c for f in frontier for c in children(f)]
    key = value if rerank_key == "value" else last
    kept = top(dict(key), cfg.total_tokens - 1)
    return {c: value[c] for c in kept}, tie


def same_tree(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(abs(got[c] - want[c]) < 1e-4 for c in want)


@settings(max_examples=100, deadline=None)
@given(target_seed=st.integers(0, 2), head_seed=st.integers(0, 2),
       draft_vocab=st.sampled_from([0, 0, 40]), prompt_seed=st.integers(0, 10 ** 6),
       prompt_len=st.integers(1, 8), total=st.integers(4, 12), depth=st.integers(1, 4),
       topk=st.integers(1, 3))
def test_dynamic_tree_keeps_the_brute_force_eagle2_node_set(target_seed, head_seed, draft_vocab,
                                                             prompt_seed, prompt_len, total, depth,
                                                             topk):
    """The drafted tree is exactly EAGLE-2's: the same token paths with the same values."""
    target, head = _setup(target_seed, head_seed, draft_vocab)
    prompt, cfg = _prompt(prompt_seed, prompt_len), DynamicTree(total, depth, topk)
    want, tie = reference_tree(target, head, prompt, cfg)
    assume(not tie)  # random fp32 heads rarely tie; a tie would leave two right answers
    got, _ = package_tree(target, head, prompt, cfg)
    assert got.keys() == want.keys()
    for path, v in want.items():
        assert got[path] == pytest.approx(v, abs=1e-4), path
    assert len(got) == min(total - 1, topk + (depth - 1) * topk * topk)


# Fixed cases where the frontier and the rerank matter (several levels, more than one child).
MUTANT_CASES = [(ts, hs, ps, total, depth, topk) for ts in (0, 1) for hs in (0, 1) for ps in (0, 1)
                for total, depth, topk in ((8, 3, 2), (12, 4, 3), (10, 4, 2))]


@pytest.mark.parametrize("wrong", [dict(frontier_key="last"), dict(rerank_key="last")],
                         ids=["frontier-by-last-prob", "rerank-by-last-prob"])
def test_a_wrong_reference_disagrees_so_the_oracle_can_fail(wrong):
    """The comparison above is not vacuous: ranking by the last step's probability instead of the
    path value (EAGLE-2 §4 insists on the path value) gives another tree on some fixed case,
    while the right reference agrees on all of them."""
    disagree = 0
    for ts, hs, ps, total, depth, topk in MUTANT_CASES:
        target, head = _setup(ts, hs)
        prompt, cfg = _prompt(ps, 6), DynamicTree(total, depth, topk)
        want, tie = reference_tree(target, head, prompt, cfg)
        bad, bad_tie = reference_tree(target, head, prompt, cfg, **wrong)
        if tie or bad_tie:
            continue
        got, _ = package_tree(target, head, prompt, cfg)
        assert same_tree(got, want)
        disagree += not same_tree(got, bad)
    assert disagree >= 1


# ================================================================ EAGLE-1's default tree
#
# Facts from the authors' code (SafeAILab/EAGLE, `eagle/model/utils.py` generate_tree_buffers on
# `eagle/model/choices.py` mc_sim_7b_63; branches v1 and main agree), run on CPU and written down.
# Their node 0 is the root and nodes 1..25 are the choices sorted by (length, path): our
# `from_choices` sorts the same way, so node indices coincide and everything compares exactly,
# row order of the retrieve indices included (theirs: sorted by node indices, -1 padded).

AUTHORS_TREE_ATTN_MASK = [  # row i: which nodes node i attends to (ancestors, itself, the root)
    "10000000000000000000000000",
    "11000000000000000000000000",
    "10100000000000000000000000",
    "10010000000000000000000000",
    "10001000000000000000000000",
    "11000100000000000000000000",
    "11000010000000000000000000",
    "11000001000000000000000000",
    "10100000100000000000000000",
    "10100000010000000000000000",
    "10010000001000000000000000",
    "10010000000100000000000000",
    "10001000000010000000000000",
    "11000100000001000000000000",
    "11000100000000100000000000",
    "11000100000000010000000000",
    "11000010000000001000000000",
    "11000010000000000100000000",
    "11000001000000000010000000",
    "11000001000000000001000000",
    "10100000100000000000100000",
    "11000100000001000000010000",
    "11000100000001000000001000",
    "11000100000001000000000100",
    "11000100000001000000010010",
    "11000100000001000000010001",
]
AUTHORS_TREE_POSITION_IDS = [0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                             4, 4, 4, 5, 5]
AUTHORS_RETRIEVE_INDICES = [
    [0, 1, 5, 13, 21, 24],
    [0, 1, 5, 13, 21, 25],
    [0, 1, 5, 13, 22, -1],
    [0, 1, 5, 13, 23, -1],
    [0, 1, 5, 14, -1, -1],
    [0, 1, 5, 15, -1, -1],
    [0, 1, 6, 16, -1, -1],
    [0, 1, 6, 17, -1, -1],
    [0, 1, 7, 18, -1, -1],
    [0, 1, 7, 19, -1, -1],
    [0, 2, 8, 20, -1, -1],
    [0, 2, 9, -1, -1, -1],
    [0, 3, 10, -1, -1, -1],
    [0, 3, 11, -1, -1, -1],
    [0, 4, 12, -1, -1, -1],
]
# tree_indices: node i's slot in their flat top-10 candidate array, TOPK * (parent row) + rank + 1
AUTHORS_TREE_INDICES = [0, 1, 2, 3, 4, 11, 12, 13, 21, 22, 31, 32, 41, 51, 52, 53, 61, 62, 71, 72,
                        81, 91, 92, 93, 101, 102]
AUTHORS_MC_SIM_7B_63 = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1],
                        [3, 0], [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0],
                        [0, 2, 1], [1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
                        [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]


def test_eagle1_choices_are_the_authors_mc_sim_7b_63():
    assert EAGLE1_CHOICES == AUTHORS_MC_SIM_7B_63
    assert parse_tree("eagle1") == from_choices(AUTHORS_MC_SIM_7B_63)


@pytest.mark.parametrize("order", ["as released", "reversed"])
def test_eagle1_tree_buffers_equal_the_authors_generate_tree_buffers(order):
    """Mask, position ids (= depths) and retrieve indices equal the authors' node for node; the
    choices' order in the list does not matter (both sides sort by (length, path))."""
    choices = EAGLE1_CHOICES if order == "as released" else EAGLE1_CHOICES[::-1]
    tree = from_choices(choices)
    assert ["".join(str(int(b)) for b in row) for row in tree.mask.tolist()] == AUTHORS_TREE_ATTN_MASK
    assert tree.depths.tolist() == AUTHORS_TREE_POSITION_IDS
    assert tree.positions(0).tolist() == AUTHORS_TREE_POSITION_IDS
    assert tree.retrieve_paths.tolist() == AUTHORS_RETRIEVE_INDICES
    # a node's top-k rank is its slot in the parent's candidate row: (tree_index - 1) mod TOPK
    assert tree.ranks[1:] == [(i - 1) % 10 for i in AUTHORS_TREE_INDICES[1:]]


# ================================================================ training noise (EAGLE §3.2)

H = 64


@pytest.fixture(scope="module")
def batch():
    target = tiny_target("llama", seed=0, vocab_size=64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (4, 24), generator=g)
    with torch.no_grad():
        features = target.model.model(input_ids=ids).last_hidden_state
    mask = torch.ones(4, 24, dtype=torch.long)
    mask[:, :4] = 0
    return target, features, ids, mask


def fc_inputs(head, fn):
    """Run fn() and return every input the head's fc received."""
    seen = []
    hook = head.fc.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
    try:
        fn()
    finally:
        hook.remove()
    return seen


def test_noise_is_uniform_on_plus_minus_noise_on_input_features_only(batch):
    """noise=0.1 draws U(-0.1, 0.1) (the paper's range, and `TrainConfig`'s default) on every
    input feature; the shifted token's embedding is untouched, and so are the labels: the noisy
    loss equals the loss computed by hand from the noisy inputs against the clean next features."""
    target, features, ids, mask = batch
    head = new_head(target, seed=1)
    noise = 0.1
    assert TrainConfig().noise == noise
    gen = torch.Generator().manual_seed(5)
    (clean_in,) = fc_inputs(head, lambda: eagle_loss(head, features, ids, mask, noise=0.0))
    holder = {}
    (noisy_in,) = fc_inputs(head, lambda: holder.update(out=eagle_loss(
        head, features, ids, mask, noise=noise, generator=gen)))
    assert torch.equal(noisy_in[..., :H], clean_in[..., :H])  # embeddings of t_{i+1}
    assert torch.equal(clean_in[..., H:], features[:, :-1])
    u = (noisy_in[..., H:] - features[:, :-1]).flatten()
    assert u.numel() == 4 * 23 * H
    assert u.min() >= -noise - 1e-6 and u.max() <= noise + 1e-6
    assert u.min() < -0.99 * noise and u.max() > 0.99 * noise  # the whole range, not +-noise/2
    assert abs(u.mean()) < 0.04 * noise  # 5 standard errors
    assert u.var().item() == pytest.approx(noise ** 2 / 3, rel=0.05)  # (2 noise)^2 / 12
    counts = torch.histc(u, bins=10, min=-noise, max=noise)
    assert (counts - u.numel() / 10).abs().max() < 0.15 * u.numel() / 10  # flat, not bell-shaped

    loss, parts = holder["out"]
    with torch.no_grad():
        pred = head(noisy_in[..., H:], ids[:, 1:])
    lm = target.model.lm_head.weight
    w = mask[:, 1:].float()
    reg = (torch.nn.functional.smooth_l1_loss(pred, features[:, 1:], reduction="none").mean(-1)
           * w).sum() / w.sum()
    q = (features[:, 1:] @ lm.T).softmax(-1)
    cls = ((-(q * (pred @ lm.T).log_softmax(-1)).sum(-1)) * w).sum() / w.sum()
    assert parts["reg"] == pytest.approx(reg.item(), rel=1e-5)
    assert parts["cls"] == pytest.approx(cls.item(), rel=1e-5)
    assert loss.item() == pytest.approx(reg.item() + 0.1 * cls.item(), rel=1e-5)


def test_noise_changes_the_loss_and_a_seeded_generator_reproduces_it(batch):
    target, features, ids, mask = batch
    head = new_head(target, seed=1)

    def loss(noise, seed=None):
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        return eagle_loss(head, features, ids, mask, noise=noise, generator=gen)[0].item()

    clean = loss(0.0)
    assert loss(0.1, seed=3) != clean
    assert loss(0.1, seed=3) == loss(0.1, seed=3)   # same seed, same draws, same loss
    assert loss(0.1, seed=3) != loss(0.1, seed=4)
    assert abs(loss(0.1, seed=3) - clean) < abs(loss(1.0, seed=3) - clean)  # grows with the range


def test_zero_noise_is_deterministic_and_draws_nothing(batch):
    """noise=0 is exactly the clean loss, run after run, and leaves the generator untouched (so a
    resumed run's noise stream does not depend on how many clean evaluations ran)."""
    target, features, ids, mask = batch
    head = new_head(target, seed=1)
    gen = torch.Generator().manual_seed(7)
    before = gen.get_state()
    a = eagle_loss(head, features, ids, mask, noise=0.0)[0]
    b = eagle_loss(head, features, ids, mask, noise=0.0, generator=gen)[0]
    assert torch.equal(a, b)
    assert torch.equal(gen.get_state(), before)
