"""Shared fixtures: the embedded target is loaded once per test session.

Thread count per test: tiny random models run ~10x slower with 2 OpenMP threads than with 1 (the
work is too small to split), while the 135M target profits from both cores.
"""
import pytest
import torch
from hypothesis import settings

# Property tests draw the same examples on every run: CI must not pass or fail by luck.
settings.register_profile("course", derandomize=True)
settings.load_profile("course")


@pytest.fixture(autouse=True)
def threads(request):
    torch.set_num_threads(2 if "smollm" in request.fixturenames else 1)
    yield


@pytest.fixture(scope="session")
def smollm():
    from eagle_mini import load_target
    return load_target("smollm2-135m")


@pytest.fixture(scope="session")
def mt_prompts():
    from eagle_mini.data import mtbench_prompts
    return mtbench_prompts()
