"""Exact verification (`runtime/exact/`): every tree node's logits bit-identical to vanilla's
one-token step at that node, so EAGLE in bf16 is token-identical to vanilla in bf16.

The oracle is vanilla decoding itself: a prefill of the prefix, then one one-token forward per
token of the node's path. Where this machine cannot make a forward batch invariant, `make_exact`
says why and the bitwise tests skip with that reason."""
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from eagle_mini import default_head, tiny_target
from eagle_mini.decode import generate
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.runtime.auto import auto_tree
from eagle_mini.runtime.cost import cost_curve
from eagle_mini.runtime.exact import (ALONE, ATTENTION, BLOCKS, GROUPED, PADDED, PREFILL_CHUNK,
                                      STACKED, VIEWS, FixedKLinear, PaddedRowsLinear,
                                      StackedFixedKLinear, apply, chunk_for,
                                      attention, layout_for, make_exact, replay_path,
                                      restore, row_invariant, stock_forward, use_exact)
from eagle_mini.runtime.run import run_method
from eagle_mini.target import crop_cache, keep_cache_entries
from eagle_mini.tree import DynamicTree, from_parents


def test_row_invariance_check_finds_a_planted_row_count_dependence():
    rowwise = lambda x: x[:, :8] * 2.0 + 1.0               # noqa: E731  each row on its own
    assert row_invariant(rowwise, 16, torch.float32, "cpu", rows=(1, 2, 5))
    leaky = lambda x: rowwise(x) + 1e-3 * x.shape[0]        # noqa: E731  depends on the row count
    assert not row_invariant(leaky, 16, torch.float32, "cpu", rows=(1, 2, 5))


class RowCountKernel(torch.nn.Linear):
    """A linear whose kernel, like a real one, may reduce differently with the row count: here it
    adds a planted error of the row count (`by_count`) or of a row's place among the rows
    (`by_place`)."""

    def __init__(self, by_count=0.0, by_place=0.0):
        super().__init__(64, 8)
        self.by_count, self.by_place = by_count, by_place

    def forward(self, x):
        place = torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1)
        return super().forward(x) + self.by_count * x.shape[0] + self.by_place * place


def test_padded_rows_make_a_row_count_dependent_kernel_exact_and_compute_the_linear():
    """Every product padded to the block (several blocks past it): a kernel that depends on the row
    count gives every row one answer, that of its row alone in a padded block, and the linear's."""
    torch.manual_seed(0)
    leaky = RowCountKernel(by_count=1e-3)
    assert not row_invariant(leaky, 64, torch.float32, "cpu")
    padded = PaddedRowsLinear(leaky, rows=4)
    assert padded.weight is leaky.weight and not list(padded.buffers())
    assert row_invariant(padded, 64, torch.float32, "cpu")      # 1 to 64 rows: up to 16 blocks
    x = torch.randn(11, 64)
    torch.testing.assert_close(padded(x), F.linear(x, leaky.weight, leaky.bias) + 4e-3)
    assert padded(x.view(1, 11, 64)).shape == (1, 11, 8)
    assert chunk_for(leaky, layout=VIEWS, pad_rows=4) == PADDED


def test_padding_is_not_chosen_where_a_row_depends_on_its_place_in_the_block():
    """The padded fix assumes a row's bits do not depend on where in the block it sits; a kernel
    where they do is measured and given K-chunks instead (each chunk's product still depends on
    the place here, so it ends row by row)."""
    placed = RowCountKernel(by_place=1e-3)
    assert not row_invariant(PaddedRowsLinear(placed, rows=4), 64, torch.float32, "cpu")
    assert chunk_for(placed, layout=VIEWS, pad_rows=4) != PADDED


def test_fixed_k_linear_computes_the_linear():
    torch.manual_seed(0)
    lin = torch.nn.Linear(1536, 64).to(torch.bfloat16)
    x = torch.randn(5, 1536).to(torch.bfloat16)
    chunked = FixedKLinear(lin, 512)
    assert torch.allclose(chunked(x).float(), lin(x).float(), atol=0.05, rtol=0.02)
    assert chunked(x).dtype == torch.bfloat16


def test_fixed_k_linear_sums_its_chunks_in_order_over_the_shared_weight():
    """Two whole chunks and a shorter last one, each its own product: every row count must give
    every chunk's product summed in fp32 in order (the oracle: that sum written out). The chunks
    are views of the linear's own weight (no copy): a chunk zeroed there is felt at once."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(1100, 40, bias=True).to(torch.bfloat16)
    chunked = FixedKLinear(lin, 512)
    assert chunked.weight is lin.weight and not list(chunked.buffers())
    x = torch.randn(5, 1100).to(torch.bfloat16)
    cuts = [(0, 512), (512, 1024), (1024, 1100)]
    parts = [x[:, a:b] @ lin.weight[:, a:b].T for a, b in cuts]
    oracle = ((parts[0].float() + parts[1].float()) + parts[2].float() + lin.bias.float())
    for rows in (1, 2, len(x)):
        torch.testing.assert_close(chunked(x[:rows]).float(), oracle[:rows].bfloat16().float(),
                                   atol=0.02, rtol=0.01)
    with torch.no_grad():
        lin.weight[:, 512:1024] = 0                 # the second chunk lost in the shared weight
    assert not torch.allclose(chunked(x[:1]).float(), oracle[:1].float(), atol=0.05, rtol=0.02)


def test_stacked_fixed_k_linear_takes_both_paths_and_the_chunks_run_in_order():
    """The CPU's layout with a copy: a one-token step runs the stacked weight, a tree the batched
    one; each must be every chunk's product (the last padded with zeros), summed in fp32 in
    order. A zero chunk planted in the stacked weight is caught."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(1100, 40, bias=True).to(torch.bfloat16)
    chunked = StackedFixedKLinear(lin, 512)
    x = torch.randn(StackedFixedKLinear.STACKED_ROWS + 3, 1100).to(torch.bfloat16)
    padded = torch.nn.functional.pad(x, (0, 3 * 512 - 1100))
    w = torch.nn.functional.pad(lin.weight, (0, 3 * 512 - 1100))
    parts = [padded[:, i * 512:(i + 1) * 512] @ w[:, i * 512:(i + 1) * 512].T for i in range(3)]
    oracle = ((parts[0].float() + parts[1].float()) + parts[2].float() + lin.bias.float())
    for rows in (1, StackedFixedKLinear.STACKED_ROWS, len(x)):   # stacked, stacked, batched
        torch.testing.assert_close(chunked(x[:rows]).float(), oracle[:rows].bfloat16().float(),
                                   atol=0.02, rtol=0.01)
    with torch.no_grad():
        chunked.stacked[0].weight[40:80] = 0          # the second chunk lost in the stacked layout
    assert not torch.allclose(chunked(x[:1]).float(), oracle[:1].float(), atol=0.05, rtol=0.02)


def test_the_layout_is_views_on_a_gpu_and_where_memory_is_short(monkeypatch):
    """A copy of the weights only on a CPU whose free memory holds it twice over; never on a GPU
    (a model on the meta device stands in for one: no CPU memory is in play)."""
    from eagle_mini.runtime.exact import linears
    model = torch.nn.Sequential(torch.nn.Linear(64, 64)).to(torch.bfloat16)
    need = 2 * 64 * 64 * 2
    monkeypatch.setattr(linears, "free_memory", lambda: need)
    assert layout_for(model) == STACKED
    monkeypatch.setattr(linears, "free_memory", lambda: need - 1)
    assert layout_for(model) == VIEWS
    assert layout_for(model.to("meta")) == VIEWS


def random_tree(rng: random.Random, n: int):
    """A random tree of n nodes: each node's parent among the earlier nodes, depths sorted."""
    parents, depth = [-1], [0]
    for _ in range(n - 1):
        p = rng.randrange(len(parents))
        parents.append(p)
        depth.append(depth[p] + 1)
    order = sorted(range(n), key=lambda i: (depth[i], i))
    new = {old: k for k, old in enumerate(order)}
    return from_parents([-1] + [new[parents[old]] for old in order[1:]])


def assert_tree_cycles_equal_replays(target, prefix_len=120, cycles=4, seed=0):
    """Random trees over a long prefix, cycle after cycle with the cache compacted to a random
    accepted path: every node's logits equal vanilla's one-token replay of its path, bitwise."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    done = torch.randint(0, target.vocab_size, (prefix_len,), generator=g).tolist()
    cache = target.new_cache()
    target.forward(done, cache, all_logits=False)
    for cycle in range(cycles):
        tree = random_tree(rng, rng.randint(2, 20))
        tokens = torch.randint(0, target.vocab_size, (tree.num_nodes,), generator=g)
        start = cache.get_seq_length()
        logits = target.forward(tokens, cache, positions=tree.positions(start),
                                tree_mask=tree.mask).logits
        replay = target.new_cache()
        target.forward(done[:prefix_len], replay, all_logits=False)
        replay_path(target, replay, done[prefix_len:])   # the earlier cycles, one token a step
        for node in range(tree.num_nodes):
            path = tree.mask[node].nonzero().squeeze(1)
            got = replay_path(target, replay, tokens[path].tolist())[-1]
            assert torch.equal(got, logits[node]), f"cycle {cycle}, node {node} of {tree.num_nodes}"
            crop_cache(replay, len(done))
        accepted = tree.mask[rng.randrange(tree.num_nodes)].nonzero().squeeze(1)
        keep_cache_entries(cache, start, accepted)
        done += tokens[accepted].tolist()


@pytest.mark.parametrize("prefill", ["stock", "exact"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_tiny_tree_forwards_equal_their_one_token_replays(dtype, prefill):
    target = tiny_target("llama", seed=0, dtype=dtype, vocab_size=96, hidden_size=64,
                         intermediate_size=1536, num_hidden_layers=2)
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    target.runtime.prefill = prefill
    assert_tree_cycles_equal_replays(target)
    restore(target)
    assert target.model.config._attn_implementation == "sdpa" and target.exact is None


def test_a_stock_prefill_caches_the_stock_forwards_bits_and_only_the_prefill_is_stock():
    """`Runtime.prefill` "stock": a prefill of an empty cache is the stock forward's, bit for bit
    (logits and every cached key and value), exact mode's edits back in place after it; the next
    forward over that cache is the exact one, and "exact" prefills as a one-token chain would."""
    size = dict(seed=0, dtype="bf16", vocab_size=96, hidden_size=64, intermediate_size=1536,
                num_hidden_layers=2)
    target, stock = tiny_target("llama", **size), tiny_target("llama", **size)
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    prompt = torch.randint(0, 96, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    mine, theirs = target.new_cache(), stock.new_cache()
    assert target.runtime.prefill == "stock"
    assert torch.equal(target.forward(prompt, mine).logits, stock.forward(prompt, theirs).logits)
    for a, b in zip(mine.layers, theirs.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert target.model.config._attn_implementation == ATTENTION    # the edits are back
    step = target.forward([5], mine).logits
    with stock_forward(target):
        again = target.new_cache()
        target.forward(prompt, again)
    assert torch.equal(target.forward([5], again).logits, step)      # exact after, either way
    target.runtime.prefill = "exact"
    exact_cache = target.new_cache()
    exact_logits = target.forward(prompt, exact_cache).logits
    crop_cache(exact_cache, len(prompt) - 3)
    replays = replay_path(target, exact_cache, prompt[-3:])
    assert all(torch.equal(a, b) for a, b in zip(replays, exact_logits[-3:]))


@pytest.mark.parametrize("way", [BLOCKS, GROUPED, ALONE])
def test_a_forward_makes_its_key_lists_once_and_passes_them_to_every_layer(way, monkeypatch):
    """Exact mode's hook on the decoder stack makes a forward's key lists (`forward_keys`) once
    and every layer's attention reads them, in the package's forwards (a prefill long enough to
    be chunked, a step, a chain, a tree) and in Hugging Face's prompt lookup alike. The oracle: the
    same attention with no hook, its lists made layer by layer: the same bits, the same tokens."""
    made = []
    real = attention.forward_keys
    monkeypatch.setattr(attention, "forward_keys", lambda *a: made.append(a[1:3]) or real(*a))
    size = dict(seed=0, dtype="bf16", num_hidden_layers=3)
    hooked, plain = tiny_target("llama", **size), tiny_target("llama", **size)
    apply(hooked, {}, way, rows=4)
    plain.model.set_attn_implementation(ATTENTION)
    plain.model.config.exact_attention, plain.model.config.exact_rows = way, 4
    tree = from_parents([-1, 0, 0, 1])
    logits, forwards = [], []
    for target in (hooked, plain):
        made.clear()
        cache, prompt = target.new_cache(), [i % 200 + 1 for i in range(PREFILL_CHUNK + 9)]
        logits.append(torch.cat([target.forward(prompt, cache).logits,
                                 target.forward([5], cache).logits,
                                 target.forward([6, 7, 8], cache).logits,
                                 target.forward([1, 2, 3, 4], cache, tree_mask=tree.mask,
                                                positions=tree.positions(len(prompt) + 4)).logits]))
        forwards.append(len(made))
    assert torch.equal(logits[0], logits[1])
    assert forwards == [4, 4 * 3]                  # once a forward, against once a layer
    ids = torch.tensor([[1, 2, 3, 1, 2, 3, 1]])
    made.clear()
    stack = []
    counter = hooked.model.model.register_forward_pre_hook(lambda module, args: stack.append(1))
    out = hooked.model.generate(ids, max_new_tokens=6, do_sample=False, prompt_lookup_num_tokens=2)
    counter.remove()
    assert len(made) == len(stack) > 1
    assert torch.equal(out, plain.model.generate(ids, max_new_tokens=6, do_sample=False,
                                                 prompt_lookup_num_tokens=2))


@pytest.fixture(scope="module")
def smollm_bf16():
    from eagle_mini import load_target
    torch.set_num_threads(2)
    target = load_target("smollm2-135m", dtype="bf16")
    record = use_exact(target, "on")
    return target, record


def test_the_embedded_target_in_bf16_verifies_trees_exactly(smollm_bf16):
    target, record = smollm_bf16
    if not record.exact:
        pytest.skip(record.why)
    assert_tree_cycles_equal_replays(target, prefix_len=200, cycles=3)


def test_greedy_bf16_eagle_equals_bf16_vanilla_for_every_method(smollm_bf16, mt_prompts):
    """chain, the EAGLE-1 tree, EAGLE-2, `auto` (its tree measured here) and EAGLE-3: the same
    tokens as vanilla in the same precision, on prompts of two kinds."""
    target, record = smollm_bf16
    if not record.exact:
        pytest.skip(record.why)
    heads = {"eagle1": default_head(target)[0], "eagle3": default_head(target, kind="eagle3")[0]}
    curve = cost_curve(target, ns=(1, 2, 4, 8, 16), repeats=1, progress=False)
    tree = auto_tree(target, heads["eagle1"], curve=curve, prompts=[mt_prompts[0]])
    for prompt in (mt_prompts[0], mt_prompts[-1]):
        vanilla = run_method(target, heads, "vanilla", prompt, 40).output_ids
        for name in ("eagle-chain", "eagle", "eagle2", "auto", "eagle3"):
            gen = run_method(target, heads, name, prompt, 40, tree=tree if name == "auto" else None)
            assert gen.output_ids == vanilla, name


def test_sampling_stays_lossless_in_exact_mode():
    """The chi-square test of `test_lossless_sampling` on an exact target: EAGLE-1 and EAGLE-2
    trees at T = 1 against the exact joint law of tokens 2-4."""
    from test_lossless_sampling import (PROMPT, SAMPLES, WARPS, chi_square_pvalue, close_head,
                                        exact_joint, make_target)
    torch.set_num_threads(1)
    target = make_target()
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    law = exact_joint(target, PROMPT, 4, *WARPS["T=1"]).sum(0)
    head = close_head(target)
    for tree in ("eagle1", DynamicTree(total_tokens=8, depth=3, topk=3)):
        tokens = [generate(target, head, PROMPT, max_new_tokens=5, temperature=1.0, tree=tree,
                           seed=seed).output_ids[1:4] for seed in range(SAMPLES)]
        assert chi_square_pvalue(tokens, law) > 1e-3, tree
    assert np.isfinite(law).all()


def test_exact_mode_is_chosen_by_dtype_and_said_in_one_line():
    fp32 = tiny_target("llama", seed=0, vocab_size=64)
    assert use_exact(fp32, "auto") is None and fp32.exact is None
    bf16 = tiny_target("llama", seed=0, dtype="bf16", vocab_size=64)
    record = make_exact(bf16)
    line = record.line()
    assert "\n" not in line and line.startswith("exact verification")
    with pytest.raises(Exception, match="--exact must be auto, on or off"):
        use_exact(bf16, "sometimes")
    unused = new_head(bf16)   # a head attaches to an exact target like to any other
    assert unused is not None


def test_the_cost_curve_times_the_stock_forward_beside_the_exact_one():
    target = tiny_target("llama", seed=0, dtype="bf16")
    record = make_exact(target)
    if not record.exact:
        pytest.skip(record.why)
    curve = cost_curve(target, ns=(1, 4), prefix_len=8, repeats=1, warmup=0, progress=False,
                       compare_exact=True)
    assert curve["exact"]["exact"] and len(curve["stock_forward"]["median_ms"]) == 2
    assert target.exact is record and target.model.config._attn_implementation == ATTENTION
