"""Shared fixtures: the embedded target is loaded once per test session."""
import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def smollm():
    from eagle_mini import load_target
    return load_target("smollm2-135m")


@pytest.fixture(scope="session")
def mt_prompts():
    from eagle_mini.data import mtbench_prompts
    return mtbench_prompts()
