"""Notebook 04's EAGLE-2 explorer returns the package's real cycle: a tree of the requested shape
whose mask is "ancestors and itself", the target's greedy choice after every node (checked against
plain forwards without a tree), the path a greedy target walks, and tokens that continue the greedy
answer (lossless). Tiny random target and head: a draft token is right by chance, often enough at
a 16-token vocabulary."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.course.tree_explorer import TreeExplorer
from eagle_mini.heads.eagle1 import new_head

VOCAB = 16
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
ANSWER = 20

shapes = st.tuples(st.integers(0, ANSWER - 1), st.integers(2, 30), st.integers(1, 5),
                   st.integers(1, 5))


@pytest.fixture(scope="module")
def explorer():
    target = tiny_target("llama", seed=2, vocab_size=VOCAB)
    return TreeExplorer(target, new_head(target, seed=1), PROMPT, max_new_tokens=ANSWER)


def ancestors(parents, i):
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def token_paths(cycle):
    paths, tokens = [], cycle.draft.tokens.tolist()
    for i, parent in enumerate(cycle.draft.tree.parents):
        paths.append((paths[parent] if parent >= 0 else ()) + (tokens[i],))
    return paths


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_the_tree_has_the_requested_shape_and_its_mask_is_ancestors(explorer, shape):
    position, total, depth, topk = shape
    cycle = explorer.cycle(position, total, depth, topk)
    tree = cycle.draft.tree
    made = topk + (depth - 1) * topk ** 2  # candidates expansion makes
    assert tree.num_nodes == min(total, made + 1)
    assert tree.max_depth <= depth and all(len(kids) <= topk for kids in tree.children)
    assert int(cycle.draft.tokens[0]) == explorer.answer[position]  # the root continues the answer
    for i in range(tree.num_nodes):
        assert set(torch.nonzero(cycle.mask[i]).flatten().tolist()) == ancestors(tree.parents, i)
    assert torch.equal(cycle.positions, tree.depths + len(PROMPT) + position)


@settings(max_examples=15, deadline=None)
@given(shapes)
def test_the_target_choices_are_plain_greedy_forwards_and_the_path_is_the_greedy_walk(explorer,
                                                                                      shape):
    position, total, depth, topk = shape
    cycle = explorer.cycle(position, total, depth, topk)
    context = PROMPT + explorer.answer[:position]
    target, paths, tree = explorer.target, token_paths(cycle), cycle.draft.tree
    for i, path in enumerate(paths):  # node i's choice, from the context and its path, no tree
        logits = target.forward(context + list(path), target.new_cache()).logits[-1]
        assert logits[cycle.choice[i]] >= logits.max() - 1e-4, (shape, i)
    walk, node = [0], 0
    while True:
        nxt = [c for c in tree.children[node] if paths[c][-1] == cycle.choice[node]]
        if not nxt:
            break
        node = nxt[0]
        walk.append(node)
    assert cycle.path == walk and cycle.bonus == cycle.choice[walk[-1]]
    assert all(cycle.agrees[i] for i in cycle.path)
    later = explorer.answer[position + 1:position + 1 + len(cycle.new_tokens)]
    assert cycle.new_tokens[:len(later)] == later  # lossless: the greedy answer goes on


def test_cycles_accept_none_one_or_several_draft_tokens(explorer):
    accepted = {explorer.cycle(pos, 20, 3, 4).accepted for pos in range(explorer.last_position + 1)}
    assert {0, 1, 2} <= accepted  # the path checks above are not only about the root


@settings(max_examples=15, deadline=None)
@given(st.integers(0, ANSWER - 1), st.integers(2, 15), st.integers(1, 15), st.integers(1, 4),
       st.integers(1, 4))
def test_a_bigger_budget_keeps_the_smaller_tree_so_never_accepts_less(explorer, position, small,
                                                                      extra, depth, topk):
    little = explorer.cycle(position, small, depth, topk)
    big = explorer.cycle(position, small + extra, depth, topk)
    assert set(token_paths(little)) <= set(token_paths(big))
    assert big.accepted >= little.accepted


def test_cycles_are_kept_and_positions_checked(explorer):
    assert explorer.cycle(3, 10, 3, 3) is explorer.cycle(3, 10, 3, 3)
    assert explorer.last_position == ANSWER - 1  # no end-of-sequence token in a tiny model
    with pytest.raises(EagleMiniError):
        explorer.cycle(ANSWER, 10, 3, 3)
    with pytest.raises(EagleMiniError):
        explorer.cycle(0, 1, 3, 3)  # a tree needs a draft node
