"""Attention over fixed key blocks (`runtime/blocks.py`), on random tensors.

Two oracles: `scaled_dot_product_attention` over each query's own keys (the same attention, to
float noise), and the blocked attention of one query alone over its keys laid out contiguously,
as vanilla's one-token step has them (the same bits). Prefixes and trees are drawn so that paths
cross block boundaries and some prefixes hold no whole block."""
import pytest
import torch
import torch.nn.functional as F

from eagle_mini.runtime.blocks import (BLOCK, Plan, blocked, chain_plan, min_rows, plan_of,
                                      tree_plan)
from eagle_mini.target import attention_mask_4d

HEADS, KV_HEADS, DIM = 6, 2, 32


def random_tree(size: int, g: torch.Generator) -> torch.Tensor:
    """[size, size] bool ancestor mask (self included) of a random tree in topological order."""
    mask = torch.eye(size, dtype=torch.bool)
    for node in range(1, size):
        parent = int(torch.randint(0, node, (1,), generator=g))
        mask[node] |= mask[parent]
    return mask


def case(committed: int, size: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    n = committed + size
    q = torch.randn(HEADS, size, DIM, generator=g).to(dtype)
    k, v = (torch.randn(KV_HEADS, n, DIM, generator=g).to(dtype) for _ in range(2))
    return q, k, v, random_tree(size, g)


def own_keys(ancestors, committed: int, i: int) -> torch.Tensor:
    return torch.cat([torch.arange(committed), committed + ancestors[i].nonzero().squeeze(1)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("committed,size", [(5, 9), (BLOCK - 3, 16), (BLOCK, 12), (3 * BLOCK + 60, 26)])
def test_every_query_gets_the_bits_it_gets_alone(dtype, committed, size):
    rows = min_rows(DIM, "cpu")
    if rows is None:
        pytest.skip("no row count makes this machine's products row invariant")
    q, k, v, ancestors = case(committed, size, dtype, seed=committed + size)
    out = blocked(q, k, v, tree_plan(ancestors, committed), DIM ** -0.5, rows)
    for i in range(size):
        keys = own_keys(ancestors, committed, i)
        plan = plan_of(None, 1, len(keys), "cpu")
        alone = blocked(q[:, i:i + 1], k[:, keys], v[:, keys], plan, DIM ** -0.5, rows)
        assert torch.equal(alone[:, 0], out[:, i]), f"query {i} differs from its one-token step"


@pytest.mark.parametrize("committed,size", [(0, 1), (7, 5), (2 * BLOCK + 1, 10)])
def test_it_is_attention(committed, size):
    q, k, v, ancestors = case(committed, size, torch.float32, seed=1)
    out = blocked(q, k, v, tree_plan(ancestors, committed), 0.3, rows=4)
    for i in range(size):
        keys = own_keys(ancestors, committed, i)
        want = F.scaled_dot_product_attention(q[None, :, i:i + 1], k[None, :, keys], v[None, :, keys],
                                              scale=0.3, enable_gqa=True)[0, :, 0]
        torch.testing.assert_close(out[:, i], want, atol=1e-5, rtol=1e-5)


def test_the_plan_lays_out_each_querys_virtual_sequence():
    ancestors = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    plan = tree_plan(ancestors, committed=BLOCK + 2)
    assert plan.shared == BLOCK and plan.seen is None and plan.index.shape == (3, BLOCK)
    assert plan.index[1, :4].tolist() == [BLOCK, BLOCK + 1, BLOCK + 2, BLOCK + 3]
    assert plan.index[2, :4].tolist() == [BLOCK, BLOCK + 1, BLOCK + 2, BLOCK + 4]
    assert plan.valid.sum(1).tolist() == [3, 4, 4]
    chain = chain_plan(3, BLOCK + 5, "cpu")   # 3 new tokens after BLOCK + 2 cached ones
    assert chain.shared == 2 * BLOCK and chain.index.shape == (3, 0)
    assert chain.seen.sum(1).tolist() == [BLOCK + 3, BLOCK + 4, BLOCK + 5]


def test_a_mask_from_the_target_gives_the_plan_and_a_wider_mask_gives_none():
    tree = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    plan = plan_of(attention_mask_4d(tree, 70, torch.float32, "cpu"), 2, 72, "cpu")
    assert isinstance(plan, Plan) and plan.shared == 2 * BLOCK and plan.seen.sum(1).tolist() == [71, 72]
    fork = torch.tensor([[1, 0], [0, 1]], dtype=torch.bool)   # two siblings: a tree, not a chain
    plan = plan_of(attention_mask_4d(fork, 70, torch.float32, "cpu"), 2, 72, "cpu")
    assert plan.shared == BLOCK and plan.valid.sum(1).tolist() == [7, 7]
    wide = torch.tensor([[0, 1, 0], [0, 1, 1]], dtype=torch.bool)   # hides committed entry 69
    assert plan_of(attention_mask_4d(wide, 70, torch.float32, "cpu"), 2, 72, "cpu") is None


def test_min_rows_is_a_row_count_or_none():
    rows = min_rows(DIM, "cpu")
    assert rows is None or 1 <= rows <= 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_prefill_split_anywhere_gives_the_same_bits(dtype):
    """A chain of many tokens (a prefill, or a prompt with its first candidates) against the same
    keys fed as a shorter chain then one token at a time."""
    rows = min_rows(DIM, "cpu")
    if rows is None:
        pytest.skip("no row count makes this machine's products row invariant")
    n = 2 * BLOCK + 9
    q, k, v, _ = case(0, n, dtype, seed=3)
    whole = blocked(q, k, v, chain_plan(n, n, "cpu"), 0.2, rows)
    split = n - 11
    part = blocked(q[:, :split], k[:, :split], v[:, :split], chain_plan(split, split, "cpu"), 0.2, rows)
    assert torch.equal(part, whole[:, :split])
    for i in range(split, n):
        one = blocked(q[:, i:i + 1], k[:, :i + 1], v[:, :i + 1], chain_plan(1, i + 1, "cpu"), 0.2, rows)
        assert torch.equal(one[:, 0], whole[:, i]), f"token {i}"
