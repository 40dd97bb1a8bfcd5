"""The notebook-05 stepper is `generate` cut into cycles, and what it shows is what happened.

Oracles: `generate` (the same tokens, greedy and sampled, same seed), Hugging Face `generate` for
greedy decoding, and the cache tensors themselves for the compaction view.
"""
import pytest
import torch

from eagle_mini import generate, tiny_target
from eagle_mini.course.stepper import Stepper, StepperWidget, cycle_rows, draw_cycle, matched_slots
from eagle_mini.heads.eagle1 import new_head


@pytest.fixture(scope="module")
def tiny():
    """A random Llama and a head built (not trained) to draft it well: fc passes the shifted
    token's embedding through and the head's layer is a copy of the target's first, so trees accept
    paths of several tokens, off rank 0 too, and some children get rejected. The target's second
    layer adds nothing to the residual stream (zero output projections) but its keys depend on the
    context: a one-layer model's cache cannot tell two nodes with one token at one depth apart."""
    target = tiny_target("llama", seed=0, vocab_size=64, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    head, hidden = new_head(target, seed=0), target.hidden_size
    with torch.no_grad():
        second = target.model.model.layers[1]
        second.self_attn.o_proj.weight.zero_()
        second.mlp.down_proj.weight.zero_()
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1))
        head.fc.bias.zero_()
        head.layers[0].load_state_dict({k: v for k, v in target.model.model.layers[0].state_dict().items()
                                        if not k.startswith("input_layernorm")})
    return target, head


@pytest.fixture(scope="module")
def untrained():
    target = tiny_target("qwen3", seed=2, vocab_size=64)
    return target, new_head(target, seed=1)


def hf_greedy(target, ids, n):
    out = target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("tree, temperature", [("eagle2", 0.0), ("eagle1", 0.0), ("chain:3", 0.0),
                                               ("eagle1", 1.0), ("eagle2", 0.7), ("chain:3", 1.0)])
def test_stepping_to_the_end_is_generate(tiny, untrained, tree, temperature):
    for target, head in (tiny, untrained):
        gen = generate(target, head, [1, 2, 3], 24, temperature=temperature, tree=tree, seed=5)
        s = Stepper(target, head, [1, 2, 3], tree, temperature, seed=5, max_new_tokens=24)
        assert s.run() == gen.output_ids and s.done and s.stop == gen.stats["stop"]
        assert [len(c.new_tokens) for c in s.cycles] == gen.stats["cycle_lengths"]
        assert s.target_forwards == gen.stats["target_forwards"] and s.step() is None
        if temperature == 0:
            assert s.output_ids == hf_greedy(target, [1, 2, 3], 24)


def test_a_stop_token_cuts_the_last_cycle_as_generate_does(tiny):
    target, head = tiny
    full = generate(target, head, [1, 2, 3], 30, tree="eagle1").output_ids
    target.eos_token_ids = {full[9]}
    try:
        gen = generate(target, head, [1, 2, 3], 30, tree="eagle1")
        s = Stepper(target, head, [1, 2, 3], "eagle1", max_new_tokens=30)
        assert s.run() == gen.output_ids == full[:full.index(full[9]) + 1] and s.stop == "eos"
    finally:
        target.eos_token_ids = set()


def test_greedy_view_shows_the_targets_choice_and_the_path_it_implies(tiny):
    """Each accepted child's token is the target's argmax at its parent; the bonus is the argmax at
    the path's end; no other tried child matches."""
    target, head = tiny
    s = Stepper(target, head, [1, 2, 3], "eagle1", seed=0, max_new_tokens=30)
    s.run()
    for c in s.cycles:
        assert all(c.tokens[n] == c.target_choice[c.parents[n]] for n in c.path[1:])
        assert c.bonus == c.target_choice[c.path[-1]] and not c.draws
        assert not [n for n in c.tried - set(c.path)
                    if c.parents[n] == c.path[-1] and c.tokens[n] == c.target_choice[c.path[-1]]]
        verdicts = {r["node"]: r["verdict"] for r in cycle_rows(c)}
        assert {n for n, v in verdicts.items() if v == "accepted"} == set(c.path[1:])


@pytest.mark.parametrize("tree, temperature", [("eagle2", 0.0), ("eagle1", 1.0), ("eagle2", 1.0)])
def test_compaction_view_keeps_exactly_the_accepted_path(tiny, tree, temperature):
    """Read off the last layer's keys: the compacted cache holds the prefix, then the tree slots of
    the accepted path in order; its length is prefix + path."""
    target, head = tiny
    s = Stepper(target, head, [1, 2, 3], tree, temperature, seed=3, max_new_tokens=30)
    s.run()
    assert any(c.path != list(range(len(c.path))) for c in s.cycles)   # entries that move
    for c in s.cycles:
        assert c.kept_slots == [c.prefix + n for n in c.path]
        assert c.cache_before == c.prefix + len(c.tokens) and c.cache_after == c.prefix + len(c.path)
        assert c.head_stable[1] == c.head_stable[0] + len(c.path)


def test_sampled_draws_replay_the_decision(tiny):
    """Every accepted child had u < ratio, every rejected one u >= ratio; the draws walk down the
    path and end with one draw for the bonus token; ratios are probabilities."""
    target, head = tiny
    for tree in ("eagle1", "eagle2"):
        s = Stepper(target, head, [4, 5, 6], tree, 1.0, seed=11, max_new_tokens=40)
        s.run()
        assert any(len(c.path) > 1 for c in s.cycles) and any(
            not d.accepted for c in s.cycles for d in c.draws)
        for c in s.cycles:
            *tries, last = c.draws
            assert last.node is None and last.token == c.bonus and last.parent == c.path[-1]
            assert [d.node for d in tries if d.accepted] == c.path[1:]
            assert all(0 <= d.u < 1 and 0 <= d.ratio <= 1 and d.accepted == (d.u < d.ratio) for d in tries)
            assert all(d.parent in c.path for d in tries)


def test_the_stepper_needs_no_seed_to_show_its_draws(tiny):
    """With `seed=None` the draws come from verification itself (an observer), not from a replay
    of a seeded generator: each cycle's draws still walk its path and pick its bonus token."""
    target, head = tiny
    s = Stepper(target, head, [4, 5, 6], "eagle1", 1.0, seed=None, max_new_tokens=20)
    s.run()
    assert s.done and len(s.output_ids) <= 20
    for c in s.cycles:
        *tries, last = c.draws
        assert last.node is None and last.token == c.bonus
        assert [d.node for d in tries if d.accepted] == c.path[1:]


def test_matched_slots_finds_rows():
    before = torch.tensor([[0., 1.], [2., 3.], [4., 5.]])
    assert matched_slots(before, before[[0, 2]]) == [0, 2]
    assert matched_slots(before, torch.tensor([[9., 9.]])) == [-1]


def test_widget_steps_resets_and_restarts_on_a_new_temperature(tiny):
    """The widget's buttons drive the stepper; no browser needed (ipywidgets run headless)."""
    import matplotlib
    matplotlib.use("Agg")
    target, head = tiny
    ui = StepperWidget(target, head, prompts=[[1, 2, 3], [7, 8]], trees=("eagle2", "chain:3"),
                       max_new_tokens=12)
    ui.next.click()
    ui.next.click()
    assert len(ui.stepper.cycles) == 2 and "tau so far" in ui.summary()
    ui.reset.click()
    assert ui.stepper.cycles == []
    ui.temperature.value = 1.0
    ui.next.click()
    assert ui.stepper.decoder.cfg.temperature == 1.0 and ui.stepper.cycles[0].draws
    fig = draw_cycle(ui.stepper.cycles[0])
    assert len(fig.axes) == 2
