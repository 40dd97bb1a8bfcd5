"""Lossless to the last position of the context (EAGLE §3.3): every method of the table stops where
vanilla decoding stops, with vanilla's tokens when greedy.

A prompt of L tokens leaves C - L positions of the target's context C to the output, and vanilla
decoding fills exactly those. EAGLE's last cycles verify only the part of their tree that still
fits (`Draft.fit`, `tree.fit_tree`), down to the root alone, a vanilla step. A prompt that leaves
no position is refused in one line by every method.

Oracles: vanilla decoding (greedy: the same tokens; sampled: the same length and stop reason), the
exact joint law of a 5-token target sampled through shrunk trees, the exact first-token law of a
cut tree, and the cut's structure (parents kept, each node's children a prefix in rank order).
"""
import numpy as np
import pytest
import torch

import eagle_mini.draft
import eagle_mini.runtime.run
from eagle_mini import EagleMiniError, generate, generate_vanilla, tiny_target
from eagle_mini.course.stepper import Stepper
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.methods import METHOD_NAMES, resolve_tree
from eagle_mini.runtime.run import run_method
from eagle_mini.tree import EAGLE1_CHOICES, DynamicTree, Tree, fit_tree, from_choices

CONTEXT = 40
LEFT = (1, 2, 5, 20)                   # positions a prompt leaves to the output
AUTO_TREE = DynamicTree(6, 3, 2)       # what `auto` measures here: not this test's subject


@pytest.fixture(scope="module")
def world():
    """A random Llama of context 40 and a head built (not trained) to draft it well, as in
    test_stepper: fc passes the token embedding through, the head's layer is a copy of the target's
    first and the other layers add nothing, so trees accept paths of several tokens and the last
    cycles accept whole shrunk trees. The EAGLE-3 head is random."""
    target = tiny_target("llama", seed=0, vocab_size=64, hidden_size=32, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                         max_position_embeddings=CONTEXT)
    head, hidden = new_head(target, seed=0), target.hidden_size
    with torch.no_grad():
        for layer in target.model.model.layers[1:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1))
        head.fc.bias.zero_()
        first = target.model.model.layers[0].state_dict()
        head.layers[0].load_state_dict({k: v for k, v in first.items()
                                        if not k.startswith("input_layernorm")})
    assert target.context_length == CONTEXT and target.eos_token_ids == set()
    return target, {"eagle1": head, "eagle3": new_eagle3_head(target, warm_start=False)}


@pytest.fixture
def measured_auto(monkeypatch):
    """`auto` resolves its tree through the runtime as always, from a measurement faked here."""
    monkeypatch.setattr(eagle_mini.runtime.run, "auto_tree", lambda target, head: AUTO_TREE)


def leaving(left: int) -> list[int]:
    """A prompt that leaves `left` positions (no token 0: HF `generate` reads it as padding)."""
    return [1 + (7 * i) % 63 for i in range(CONTEXT - left)]


@pytest.mark.parametrize("left", LEFT)
def test_greedy_every_method_writes_vanillas_tokens_to_the_last_position(world, measured_auto,
                                                                         left):
    target, heads = world
    vanilla = generate_vanilla(target, leaving(left), 64)
    assert len(vanilla.output_ids) == left and vanilla.stats["stop"] == "context"
    for name in METHOD_NAMES:
        gen = run_method(target, heads, name, leaving(left), 64)
        assert gen.output_ids == vanilla.output_ids, name
        assert gen.stats["stop"] == "context", name


@pytest.mark.parametrize("left", LEFT)
def test_sampled_every_method_stops_at_the_last_position(world, measured_auto, left):
    target, heads = world
    for name in METHOD_NAMES:
        for seed in (0, 1):
            gen = run_method(target, heads, name, leaving(left), 64, temperature=1.0, seed=seed)
            assert len(gen.output_ids) == left and gen.stats["stop"] == "context", (name, seed)


def test_when_both_ends_fall_on_one_token_every_method_says_max_new_tokens(world, measured_auto):
    target, heads = world
    for name in METHOD_NAMES:
        gen = run_method(target, heads, name, leaving(5), 5)
        assert len(gen.output_ids) == 5 and gen.stats["stop"] == "max_new_tokens", name
        gen = run_method(target, heads, name, leaving(5), 4)
        assert len(gen.output_ids) == 4 and gen.stats["stop"] == "max_new_tokens", name


@pytest.mark.parametrize("extra", [0, 1])
def test_a_prompt_that_leaves_no_position_is_one_line_for_every_method(world, measured_auto,
                                                                        extra):
    """Leaving 0 positions: the prompt fills the context, so no method may add a token."""
    target, heads = world
    for name in METHOD_NAMES:
        with pytest.raises(EagleMiniError, match=f"prompt of {CONTEXT + extra} tokens does not "
                                                 f"fit .* context length {CONTEXT}"):
            run_method(target, heads, name, leaving(-extra), 8)


def stepped(target, head, tree, left: int):
    """`Stepper` run to the end on a prompt leaving `left` positions; -> its cycles, each cycle's
    room (the tokens it could still add) and the tree's full size, after checking that stepping
    is `generate` and vanilla decoding, and that every verified tree fits its room."""
    prompt = leaving(left)
    s = Stepper(target, head, prompt, tree, max_new_tokens=64)
    assert s.run() == generate_vanilla(target, prompt, 64).output_ids and s.stop == "context"
    gen = generate(target, head, prompt, 64, tree=resolve_tree(tree))   # a name: the edge resolves it
    assert gen.stats["cycle_lengths"] == [len(c.new_tokens) for c in s.cycles]
    full = resolve_tree(tree)
    full = full.total_tokens if isinstance(full, DynamicTree) else full.num_nodes
    rooms = [CONTEXT - c.prefix - 1 for c in s.cycles]
    assert all(len(c.parents) <= min(room, full) for c, room in zip(s.cycles, rooms))
    return s.cycles, rooms, full


@pytest.mark.parametrize("tree", ["eagle", "eagle-chain", "eagle2"])
def test_the_last_cycles_shrink_their_tree_down_to_a_vanilla_step(world, tree):
    """Every verified tree fits: at most `room` nodes, the tokens a cycle may still add. Trees
    shrink near the end, and the target accepts a shrunk tree's path down to its deepest level.
    With one position left a cycle verifies the root alone. Stepping is `generate`."""
    target, heads = world
    cycles, rooms, full = stepped(target, heads["eagle1"], tree, left=20)
    shrunk = [c for c, room in zip(cycles, rooms) if room < full]
    assert shrunk and any(len(c.new_tokens) == max(c.depths) + 1 > 1 for c in shrunk)
    (last,), rooms, _ = stepped(target, heads["eagle1"], tree, left=2)  # prefill's token, 1 cycle
    assert rooms == [1] and last.parents == [-1] and last.path == [0] and len(last.new_tokens) == 1


def test_the_decoder_refuses_a_cycle_once_the_context_is_full(world):
    target, heads = world
    from eagle_mini import EagleDecoder
    dec = EagleDecoder(target, heads["eagle1"], leaving(1), tree="eagle1")
    assert dec.room == 0
    with pytest.raises(EagleMiniError, match=f"the context \\({CONTEXT} tokens\\) is full"):
        dec.draft()


# ---------------------------------------------------------------- the cut keeps sampling lossless


def rank_prefixes(tree: Tree, kept: list[int], full: Tree) -> bool:
    """Every kept node's kept children are the first ones of its children in `full`, by rank."""
    for new, old in enumerate(kept):
        ranks = sorted(full.ranks[c] for c in full.children[old])
        kept_ranks = sorted(tree.ranks[c] for c in tree.children[new])
        if kept_ranks != ranks[:len(kept_ranks)]:
            return False
    return True


@pytest.mark.parametrize("full", [from_choices(EAGLE1_CHOICES), Tree([-1, 0, 0, 0, 2, 1, 1],
                                                                     [0, 2, 0, 1, 0, 1, 0])],
                         ids=["eagle1", "ranks-out-of-index-order"])
def test_the_cut_keeps_parents_and_a_rank_prefix_of_children(full):
    for n in range(1, full.num_nodes + 1):
        tree, kept = fit_tree(full, n)
        assert tree.num_nodes == n and kept[0] == 0 and len(set(kept)) == n
        assert all(kept.index(full.parents[old]) == tree.parents[new]
                   for new, old in enumerate(kept) if new)          # parents kept, edges kept
        assert [full.ranks[old] for old in kept] == tree.ranks
        assert rank_prefixes(tree, kept, full), n
        assert tree.max_depth <= n - 1
    assert fit_tree(full, full.num_nodes)[0] is full
    assert fit_tree(full, 1)[0].num_nodes == 1
    with pytest.raises(EagleMiniError, match="at least its root"):
        fit_tree(full, 0)


def test_the_rank_prefix_is_what_keeps_the_pq_rule_exact():
    """The exact first-token law after the root (test_lossless_sampling's enumeration): the root's
    first k draws without replacement give p for every k, the cut's choice; keeping the second
    draw without the first, a cut that ignored ranks, does not."""
    from test_lossless_sampling import (P, Q, assert_law_is, draws_without_replacement,
                                        exact_first_token_law, law_with_sampled_children,
                                        one_level_draft)
    from eagle_mini.verify import SampledTreeRule
    for k in range(0, 4):
        law = (law_with_sampled_children(P, Q, k) if k else
               exact_first_token_law(one_level_draft([], Q), P[None], SampledTreeRule()))
        assert_law_is(law, P)
    second_only = sum(prob * exact_first_token_law(one_level_draft(xs[1:], Q), P.expand(2, -1),
                                                   SampledTreeRule())
                      for xs, prob in draws_without_replacement(Q, 2))
    assert (second_only - P).abs().max() > 0.01


def last_draws_first(tree: Tree) -> Tree:
    """The tree with each node's children ranked backwards: a cut of it keeps the last draws."""
    ranks = list(tree.ranks)
    for kids in tree.children:
        for c in kids:
            ranks[c] = max(tree.ranks[k] for k in kids) - tree.ranks[c]
    return Tree(tree.parents, ranks)


@pytest.mark.parametrize("tree, cut", [
    pytest.param("eagle1", fit_tree, id="EAGLE-1"),
    pytest.param(DynamicTree(total_tokens=8, depth=3, topk=3), fit_tree, id="EAGLE-2"),
    pytest.param("eagle1", lambda tree, n: fit_tree(last_draws_first(tree), n),
                 id="control-EAGLE-1-cut-keeping-the-last-draws")])
def test_sampling_through_shrunk_trees_matches_the_exact_joint(monkeypatch, tree, cut):
    """The chi-square test of test_lossless_sampling (half its samples) on a target whose context
    ends 4 tokens after the prompt: every cycle after the prefill verifies a cut tree (3 nodes, then
    2 or 1), with the close head, whose drafts are often accepted. The control cuts EAGLE-1's tree
    keeping the last draws of q instead of the first: the test rejects it (p < 1e-6)."""
    from test_lossless_sampling import (PROMPT, SAMPLES, WARPS, chi_square_pvalue, close_head,
                                        exact_joint, make_target)
    monkeypatch.setattr(eagle_mini.draft, "fit_tree", cut)
    torch.set_num_threads(1)
    target = make_target(max_position_embeddings=len(PROMPT) + 4)
    head = close_head(target)
    law = exact_joint(target, PROMPT, 4, *WARPS["T=1"]).sum(0)
    gens = [generate(target, head, PROMPT, max_new_tokens=8, temperature=1.0, tree=tree, seed=seed)
            for seed in range(SAMPLES // 2)]
    assert all(g.stats["stop"] == "context" and len(g.output_ids) == 4 for g in gens)
    first_cycle = np.array([g.stats["cycle_lengths"][0] for g in gens])
    assert np.mean(first_cycle == 2) > 0.1     # the 3-node cut tree's draft accepted, often
    pvalue = chi_square_pvalue([g.output_ids[1:4] for g in gens], law)
    assert pvalue > 1e-3 if cut is fit_tree else pvalue < 1e-6


@pytest.mark.parametrize("method", ["vanilla", "eagle2"])
def test_the_cli_says_in_one_line_that_the_context_is_full(world, monkeypatch, capsys, method):
    """`generate` on a target whose context ends 5 tokens after the prompt (the tiny target stands
    in for the embedded one: same code from the command line on)."""
    import eagle_mini.cli.decode as cli_decode
    import eagle_mini.measure.load as load
    from eagle_mini.cli import main
    target, heads = world
    monkeypatch.setattr(cli_decode, "load", lambda args: target)
    monkeypatch.setattr(cli_decode, "head_for",
                        lambda args, target, names: (heads["eagle1"], "a head"))
    monkeypatch.setattr(target, "chat_ids", lambda prompt: leaving(5))
    monkeypatch.setattr(load, "load_average", lambda: None)   # a busy machine warns after it
    assert main(["generate", "--prompt", "Hi!", "--max-new-tokens", "64", "--method", method]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"stopped after 5 of 64 tokens: the context ({CONTEXT} tokens) is full"
    assert main(["generate", "--prompt", "Hi!", "--max-new-tokens", "5", "--method", method]) == 0
    assert "context" not in capsys.readouterr().err   # max_new_tokens came first: nothing to say
    monkeypatch.setattr(target, "chat_ids", lambda prompt: leaving(0))
    assert main(["generate", "--prompt", "Hi!", "--method", method]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("eagle-mini: error: prompt of 40 tokens does not fit")
