"""The warped distribution shared by vanilla sampling and lossless verification."""
import torch
from hypothesis import given, settings, strategies as st

from eagle_mini.sampling import warp


def test_top_k_keeps_exactly_k():
    p = warp(torch.tensor([3.0, 2.0, 1.0, 0.0]), temperature=1.0, top_k=2)
    assert (p > 0).tolist() == [True, True, False, False]
    torch.testing.assert_close(p.sum(), torch.tensor(1.0))


def test_top_p_keeps_smallest_set_reaching_p():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    assert (warp(logits, 1.0, top_p=0.7) > 0).tolist() == [True, True, False, False]
    assert (warp(logits, 1.0, top_p=0.8) > 0).tolist() == [True, True, False, False]
    assert (warp(logits, 1.0, top_p=0.81) > 0).tolist() == [True, True, True, False]


def test_temperature_matches_hf_logits_processors():
    from transformers.generation.logits_process import (TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 50, generator=g) * 3
    x = TemperatureLogitsWarper(0.7)(None, logits.clone())
    x = TopKLogitsWarper(20)(None, x)
    x = TopPLogitsWarper(0.9)(None, x)
    torch.testing.assert_close(warp(logits, 0.7, top_p=0.9, top_k=20), x.softmax(-1))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=30), st.floats(0.1, 2.0),
       st.floats(0.05, 1.0))
def test_warp_is_a_distribution(values, t, top_p):
    p = warp(torch.tensor(values), t, top_p=top_p)
    assert torch.isclose(p.sum(), torch.tensor(1.0), atol=1e-5) and (p >= 0).all()
    full = warp(torch.tensor(values), t)
    assert (p > 0)[full == full.max()].any()  # a most likely token always survives top-p


def test_the_inverse_cdf_draw_sums_in_float64_where_the_device_has_it():
    """verify.draw sums probabilities in float64 on the CPU and CUDA (the draw then depends on u
    alone, not on rounding), and in float32 on Apple's MPS, which has no float64."""
    from eagle_mini.verify import cdf_dtype
    assert cdf_dtype(torch.device("cpu")) == torch.float64
    assert cdf_dtype(torch.device("cuda")) == torch.float64
    assert cdf_dtype(torch.device("mps")) == torch.float32
    assert cdf_dtype("mps:0") == torch.float32
