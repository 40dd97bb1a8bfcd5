"""Draft tree structure (EAGLE §3.1): hand-worked trees, EAGLE-1's default tree, random trees."""
import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

from eagle_mini.errors import EagleMiniError
from eagle_mini.tree import (EAGLE1_CHOICES, Tree, chain, from_choices, from_parents, parse_tree,
                             topk_needed)

# ---------------------------------------------------------------- a tree worked out by hand
#
#   choices [[0], [1], [0, 0]]:        0 (root)
#                                     / \
#                             rank 0 1   2 rank 1
#                                    |
#                             rank 0 3


def test_small_tree_by_hand():
    t = from_choices([[0], [1], [0, 0]])
    assert t.parents == [-1, 0, 0, 1]
    assert t.ranks == [0, 0, 1, 0]
    assert t.children == [[1, 2], [3], [], []]
    assert t.depths.tolist() == [0, 1, 1, 2]
    assert t.mask.dtype == torch.bool
    assert t.mask.tolist() == [[True, False, False, False],
                               [True, True, False, False],
                               [True, False, True, False],
                               [True, True, False, True]]
    assert t.retrieve_paths.tolist() == [[0, 1, 3], [0, 2, -1]]
    assert t.positions(7).tolist() == [7, 8, 8, 9]
    assert (t.num_nodes, t.max_depth, t.nodes_per_depth) == (4, 2, [1, 2, 1])
    assert topk_needed(t) == 2
    assert t.choices() == [[0], [1], [0, 0]]


def test_choice_order_does_not_matter_nodes_sort_by_depth_then_path():
    assert from_choices([[0, 0], [1], [0]]) == from_choices([[0], [1], [0, 0]])
    assert from_choices([[1, 0], [0, 0], [1], [0]]).choices() == [[0], [1], [0, 0], [1, 0]]


def test_from_parents_ranks_children_in_index_order_by_default():
    t = from_parents([-1, 0, 0, 1])
    assert t == from_choices([[0], [1], [0, 0]])
    # EAGLE-2 may keep rank 0 and rank 2 of a node and drop rank 1: ranks need not be contiguous.
    t = from_parents([-1, 0, 0], ranks=[0, 0, 2])
    assert t.choices() == [[0], [2]] and topk_needed(t) == 3


def test_root_only_tree():
    t = chain(0)
    assert (t.num_nodes, t.max_depth, topk_needed(t)) == (1, 0, 0)
    assert t.mask.tolist() == [[True]]
    assert t.retrieve_paths.tolist() == [[0]]


# ---------------------------------------------------------------- EAGLE-1's default tree


def test_eagle1_default_tree_matches_the_paper():
    """mc_sim_7b_63: 25 draft nodes + root = 26 tokens, depth 5, 4/8/8/3/2 per depth, 15 leaves."""
    t = from_choices(EAGLE1_CHOICES)
    assert len(EAGLE1_CHOICES) == 25
    assert t.num_nodes == 26
    assert t.max_depth == 5
    assert t.nodes_per_depth == [1, 4, 8, 8, 3, 2]
    assert t.retrieve_paths.shape == (15, 6)
    assert topk_needed(t) == 4
    assert t.describe() == "26 nodes, depth 5, per depth 1/4/8/8/3/2, 15 paths, top-4"
    # The longest path follows the top-1 draft all the way down.
    assert [0, 0, 0, 0, 0] in t.choices()


def test_chain():
    t = chain(4)
    assert t.parents == [-1, 0, 1, 2, 3]
    assert t.ranks == [0] * 5
    assert t.retrieve_paths.tolist() == [[0, 1, 2, 3, 4]]
    assert t.mask.equal(torch.ones(5, 5, dtype=torch.bool).tril())
    assert topk_needed(t) == 1


# ---------------------------------------------------------------- what is refused


@pytest.mark.parametrize("choices, message", [
    ([[0], [0, 1, 0]], "prefix"),        # [0, 1] missing
    ([[1, 0]], "prefix"),                # [1] missing
    ([[0], [1], [0]], "twice"),
    ([[0], []], "root is implicit"),
    ([[0], [-1]], "negative rank"),
    ([[0], [0.5]], "integer"),
    ([0, 1], "non-empty list"),
    ("[[0]]", "list of paths"),
])
def test_invalid_choices_are_refused(choices, message):
    with pytest.raises(EagleMiniError, match=message):
        from_choices(choices)


@pytest.mark.parametrize("parents, ranks, message", [
    ([], None, "root"),
    ([0, 0], None, "root"),
    ([-1, 1], None, "parent must come first"),
    ([-1, 0, 3, 0], None, "parent must come first"),
    ([-1, 0, 1, 0], None, "sorted by depth"),
    ([-1, 0, 0], [0, 1, 1], "two children of rank 1"),
    ([-1, 0], [0], "ranks"),
    ([-1, 0], [1, 0], "root's rank"),
])
def test_invalid_parent_lists_are_refused(parents, ranks, message):
    with pytest.raises(EagleMiniError, match=message):
        from_parents(parents, ranks)


def test_negative_chain_is_refused():
    with pytest.raises(EagleMiniError, match="k >= 0"):
        chain(-1)


# ---------------------------------------------------------------- parse_tree


def test_parse_tree_accepts_every_documented_form(tmp_path):
    eagle1 = from_choices(EAGLE1_CHOICES)
    assert parse_tree("eagle1") == eagle1
    assert parse_tree("default") == eagle1
    assert parse_tree("chain:4") == chain(4)
    assert parse_tree("[[0], [1], [0, 0]]") == from_choices([[0], [1], [0, 0]])
    assert parse_tree([[0], [1]]) == from_choices([[0], [1]])
    assert parse_tree(eagle1) is eagle1
    f = tmp_path / "tree.json"
    f.write_text(json.dumps(EAGLE1_CHOICES))
    assert parse_tree(str(f)) == eagle1


@pytest.mark.parametrize("spec", ["eagle3", "chain:", "chain:x", "", 7, None])
def test_parse_tree_unknown_spec_lists_the_accepted_forms_on_one_line(spec):
    with pytest.raises(EagleMiniError) as e:
        parse_tree(spec)
    msg = str(e.value)
    assert "\n" not in msg
    assert all(form in msg for form in ("eagle1", "default", "chain:K", "JSON", ".json"))


def test_parse_tree_bad_json_and_missing_file(tmp_path):
    with pytest.raises(EagleMiniError, match="not valid JSON"):
        parse_tree("[[0], [1")
    with pytest.raises(EagleMiniError, match="not found"):
        parse_tree(str(tmp_path / "nope.json"))
    with pytest.raises(EagleMiniError, match="prefix"):
        parse_tree("[[0, 0]]")


# ---------------------------------------------------------------- random trees


@st.composite
def trees(draw, max_nodes=40):
    """A random depth-sorted tree with random distinct sibling ranks, as EAGLE-2 could build."""
    n = draw(st.integers(1, max_nodes))
    parents, ranks, depths = [-1], [0], [0]
    used = {0: set()}
    for i in range(1, n):
        # Any earlier node whose child would not be shallower than node i - 1 keeps depth order.
        allowed = [j for j in range(i) if depths[j] + 1 >= depths[i - 1]]
        p = draw(st.sampled_from(allowed))
        r = draw(st.sampled_from([r for r in range(10) if r not in used[p]] or [10 + len(used[p])]))
        used[p].add(r)
        used[i] = set()
        parents.append(p)
        ranks.append(r)
        depths.append(depths[p] + 1)
    return Tree(parents, ranks)


def ancestors_and_self(t, i):
    out = {i}
    while t.parents[i] != -1:
        i = t.parents[i]
        out.add(i)
    return out


@settings(max_examples=150, deadline=None, derandomize=True)
@given(trees())
def test_mask_row_is_exactly_ancestors_and_self(t):
    for i in range(t.num_nodes):
        assert set(t.mask[i].nonzero().flatten().tolist()) == ancestors_and_self(t, i)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(trees(), st.integers(0, 4096))
def test_positions_are_prefix_plus_depth(t, prefix_len):
    pos = t.positions(prefix_len)
    assert pos.dtype == torch.long
    assert pos.tolist() == [prefix_len + len(ancestors_and_self(t, i)) - 1
                            for i in range(t.num_nodes)]
    assert t.depths.tolist() == sorted(t.depths.tolist())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(trees())
def test_paths_cover_every_leaf_once_each_a_root_to_leaf_chain(t):
    paths = t.retrieve_paths
    assert paths.shape[1] == t.max_depth + 1
    leaves = [i for i in range(t.num_nodes) if not t.children[i]]
    ends = []
    for row in paths.tolist():
        nodes = [x for x in row if x != -1]
        assert row == nodes + [-1] * (len(row) - len(nodes))  # padding only at the end
        assert nodes[0] == 0
        assert all(t.parents[b] == a for a, b in zip(nodes, nodes[1:]))
        ends.append(nodes[-1])
    assert sorted(ends) == leaves


@settings(max_examples=150, deadline=None, derandomize=True)
@given(trees())
def test_choices_round_trip_reproduces_the_tree(t):
    rebuilt = from_choices(t.choices())
    # Same set of rank paths, so the same tree up to the order of nodes within a depth...
    assert sorted(rebuilt.choices()) == sorted(t.choices())
    assert rebuilt.nodes_per_depth == t.nodes_per_depth
    assert len(rebuilt.retrieve_paths) == len(t.retrieve_paths)
    assert topk_needed(rebuilt) == topk_needed(t)
    # ...and a tree built from choices is already in that canonical order: a fixed point.
    assert from_choices(rebuilt.choices()) == rebuilt
    assert from_parents(rebuilt.parents, rebuilt.ranks) == rebuilt
