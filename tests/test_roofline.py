"""The roofline under the cost curve (`runtime/roofline.py`): bytes and FLOPs counted by hand on a
tiny model, the floor as the larger of memory and compute time, and the curve carrying it."""
import torch

from eagle_mini import tiny_target
from eagle_mini.runtime.cost import cost_curve
from eagle_mini.runtime.roofline import floor_ms, forward_flops, kv_bytes, weight_bytes


def test_bytes_and_flops_match_a_count_by_hand():
    target = tiny_target()
    model, cfg = target.model, target.model.config
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    params = sum(p.numel() for p in model.parameters())
    assert weight_bytes(model) == 4 * (params if tied else params - cfg.vocab_size * cfg.hidden_size)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * sum(m.weight.numel() for m in linears)
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * 13
    assert forward_flops(model, 3, 10) == 3 * (per_token + attention)
    assert kv_bytes(model, 10, 2) == (2 * cfg.num_hidden_layers * cfg.num_key_value_heads
                                      * head_dim * 10 * 2)


def test_the_floor_is_the_larger_of_memory_and_compute_time():
    target = tiny_target()
    read = weight_bytes(target.model) + kv_bytes(target.model, 5, 4)
    slow_memory = {"read_GBps": 1e-6, "peak_GFLOPs": 1e6}
    assert floor_ms(target, 2, 5, slow_memory) == 1000 * read / 1e3
    slow_compute = {"read_GBps": 1e6, "peak_GFLOPs": 1e-6}
    assert floor_ms(target, 2, 5, slow_compute) == 1000 * forward_flops(target.model, 2, 5) / 1e3


def test_the_cost_curve_carries_the_roofline_measured_in_its_run():
    curve = cost_curve(tiny_target(), ns=(1, 2, 4), prefix_len=8, repeats=1, warmup=0,
                       progress=False)
    roof = curve["roofline"]
    assert roof["read_GBps"] > 0 and roof["peak_GFLOPs"] > 0
    assert len(roof["floor_ms"]) == 3 and roof["floor_ms"] == sorted(roof["floor_ms"])
