"""Vanilla decoding is token-identical to Hugging Face `generate` (the oracle) in fp32."""
import pytest
import torch

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.decode import generate_vanilla
from eagle_mini.sampling import SamplingConfig


def hf_greedy(target, ids, n):
    out = target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                eos_token_id=sorted(target.eos_token_ids) or None,
                                pad_token_id=0)
    return out[0, len(ids):].tolist()


def test_vanilla_greedy_equals_hf_generate_on_mtbench(smollm, mt_prompts):
    """>= 10 MT-bench prompts x 64 tokens, the embedded target, fp32."""
    for prompt in mt_prompts[:10]:
        ours = generate_vanilla(smollm, prompt, max_new_tokens=64)
        assert ours.output_ids == hf_greedy(smollm, ours.prompt_ids, 64), prompt[:60]
        assert ours.stats["tau"] == 1.0
        assert ours.stats["target_forwards"] == ours.stats["new_tokens"]


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_vanilla_greedy_equals_hf_generate_tiny(family):
    target = tiny_target(family, seed=5)
    ids = list(range(3, 12))
    assert generate_vanilla(target, ids, max_new_tokens=24).output_ids == hf_greedy(target, ids, 24)


def test_sampling_is_reproducible_and_seed_dependent():
    target = tiny_target("llama", seed=0)
    a = generate_vanilla(target, [1, 2, 3], 20, temperature=1.0, seed=7).output_ids
    b = generate_vanilla(target, [1, 2, 3], 20, temperature=1.0, seed=7).output_ids
    c = generate_vanilla(target, [1, 2, 3], 20, temperature=1.0, seed=8).output_ids
    assert a == b and a != c


def test_eos_stops_and_streamer_sees_every_token():
    target = tiny_target("llama", seed=0)
    first = generate_vanilla(target, [1, 2, 3], 10).output_ids
    target.eos_token_ids = {first[3]}
    seen = []
    gen = generate_vanilla(target, [1, 2, 3], 10, streamer=seen.extend)
    assert gen.output_ids == first[:first.index(first[3]) + 1] == seen
    assert gen.stats["stop"] == "eos"


def test_bad_input_gives_clear_errors():
    target = tiny_target("llama", seed=0, max_position_embeddings=16)
    with pytest.raises(EagleMiniError, match="positive"):
        generate_vanilla(target, [1, 2], 0)
    with pytest.raises(EagleMiniError, match="context length"):
        generate_vanilla(target, list(range(20)), 4)
    gen = generate_vanilla(target, list(range(10)), 50)
    assert gen.stats["stop"] == "context" and len(gen.prompt_ids) + gen.stats["new_tokens"] == 16


@pytest.mark.parametrize("tree, temperature", [("eagle2", 0.0), ("eagle1", 1.0), ("chain:3", 0.7)])
def test_stepping_the_decoder_is_generate(tree, temperature):
    """`EagleDecoder` one cycle at a time (draft -> verify -> accept) writes `generate`'s tokens,
    one target forward per cycle after the prefill, and records no autograd graph."""
    from eagle_mini import EagleDecoder, generate
    from eagle_mini.heads.eagle1 import new_head
    target = tiny_target("llama", seed=0, vocab_size=64)
    head = new_head(target, seed=1)
    gen = generate(target, head, [1, 2, 3], 20, temperature=temperature, tree=tree, seed=5)
    dec = EagleDecoder(target, head, [1, 2, 3], tree=tree, sampling=SamplingConfig(temperature),
                       seed=5)
    cycles = []
    while len(dec.output_ids) < 20:
        verified = dec.verify(dec.draft())
        assert not verified.logits.requires_grad and verified.new_tokens[-1] == verified.bonus
        cycles.append(len(dec.accept(verified)))
        assert dec.root == verified.bonus
    assert dec.output_ids[:20] == gen.output_ids
    assert dec.target_forwards == 1 + len(cycles) == gen.stats["target_forwards"]
    assert cycles[:-1] == gen.stats["cycle_lengths"][:-1]   # the last one is cut at 20 tokens


@pytest.mark.parametrize("tree, temperature", [("eagle2", 0.0), ("eagle1", 1.0)])
def test_one_step_is_one_cycle_of_generate_and_says_when_it_stops(tree, temperature):
    """`EagleDecoder.step()` until `stop`: `generate`'s tokens, cycles and stop reason; a step
    after the stop is a one-line error."""
    from eagle_mini import EagleDecoder, generate
    from eagle_mini.errors import EagleMiniError
    from eagle_mini.heads.eagle1 import new_head
    target = tiny_target("llama", seed=0, vocab_size=64)
    head = new_head(target, seed=1)
    gen = generate(target, head, [1, 2, 3], 17, temperature=temperature, tree=tree, seed=5)
    dec = EagleDecoder(target, head, [1, 2, 3], tree, SamplingConfig(temperature), seed=5,
                       max_new_tokens=17)
    outcomes = []
    while dec.stop is None:
        outcomes.append(dec.step())
    assert dec.output_ids == gen.output_ids and dec.stop == gen.stats["stop"] == "max_new_tokens"
    assert [len(o.new_tokens) for o in outcomes] == gen.stats["cycle_lengths"]
    assert [o.stop for o in outcomes] == [None] * (len(outcomes) - 1) + ["max_new_tokens"]
    with pytest.raises(EagleMiniError, match="has stopped"):
        dec.step()
