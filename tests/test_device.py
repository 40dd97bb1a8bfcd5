"""Drafting and verification never assume the CPU: every tensor and generator names its device.

The check: run whole generations with torch's default device set to "meta". A tensor made
without an explicit device then lands on "meta", where it has no values, and the first time the
loop reads it (an index, an `int()`, a mix with the target's tensors) it raises. A path that names
the target's device everywhere runs unchanged and gives the same tokens. On a CUDA machine the
same loop runs with the target on the GPU (`EAGLE_MINI_TEST_DEVICE=cuda`, see
`test_lossless_sampling.py`).
"""
import pytest
import torch

from eagle_mini import DynamicTree, generate, generate_vanilla, tiny_target
from eagle_mini.draft import Draft, Drafter
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.sampling import make_generator

TREES = ["eagle1", "chain:3", [[0], [1], [0, 0]], DynamicTree(8, 3, 3)]


@pytest.fixture(scope="module")
def tiny():
    target = tiny_target("llama", seed=0, vocab_size=64)
    return target, new_head(target, seed=0)


@pytest.mark.parametrize("tree", TREES, ids=str)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_eagle_names_every_device(tiny, tree, temperature):
    target, head = tiny
    ref = generate(target, head, [1, 2, 3], 12, temperature=temperature, tree=tree, seed=1)
    with torch.device("meta"):
        got = generate(target, head, [1, 2, 3], 12, temperature=temperature, tree=tree, seed=1)
    assert got.output_ids == ref.output_ids


def test_vanilla_sampling_names_every_device(tiny):
    target, _ = tiny
    ref = generate_vanilla(target, [1, 2, 3], 12, temperature=1.0, seed=1)
    with torch.device("meta"):
        got = generate_vanilla(target, [1, 2, 3], 12, temperature=1.0, seed=1)
    assert got.output_ids == ref.output_ids


class DeviceBlindDrafter(Drafter):
    """A planted fault: the draft's confidences are made without naming a device."""

    def draft(self, root_token):
        d = super().draft(root_token)
        return Draft(d.tree, d.tokens, d.valid, torch.ones(d.tree.num_nodes), d.q)


def test_the_check_catches_a_tensor_made_without_its_device(tiny):
    target, head = tiny
    drafter = DeviceBlindDrafter(head, "chain:3")
    generate(target, head, [1, 2, 3], 8, tree="chain:3", drafter=drafter)  # fine on the CPU
    with torch.device("meta"), pytest.raises((RuntimeError, NotImplementedError)):
        generate(target, head, [1, 2, 3], 8, tree="chain:3", drafter=DeviceBlindDrafter(head, "chain:3"))


def test_one_generator_on_the_target_device(tiny):
    target, _ = tiny
    g = make_generator(7, target.device)
    assert g.device == target.device and g.initial_seed() == 7
    assert make_generator(None, target.device) is None
