"""Exact mode on a 7B shape holds no second copy of any weight (issue 49, item 2): the linears it
chunks (`FixedKLinear`) read views of the weights they replace, and the linears it pads
(`PaddedRowsLinear`) call the linears they replace, so an exact target's tensors take the bytes of
a stock one. Built on the `meta` device (shapes, no memory), with Vicuna-7B's and
Llama-3.1-8B's hidden sizes and two layers, every linear chunked: the worst case, a machine where
no linear is row invariant as it is."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from eagle_mini.models import big_config
from eagle_mini.runtime.exact import (CHUNKS, GROUPED, PADDED, apply, linear_modules, restore,
                                      shape_of)
from eagle_mini.target import Target


def held_bytes(model) -> int:
    """The bytes of every tensor the model holds: parameters, buffers and tensors kept in module
    attributes out of the registry (tuples of modules, dicts of packed weights), a view counted
    as its base, each base once."""
    bases, seen = {}, set()

    def visit(value):
        if isinstance(value, torch.Tensor):
            base = value._base if value._base is not None else value
            bases[id(base)] = base.numel() * base.element_size()
        elif isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            for v in [*value._parameters.values(), *value._buffers.values(),
                      *value._modules.values(), *vars(value).values()]:
                visit(v)
        elif isinstance(value, (tuple, list)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
    visit(model)
    return sum(bases.values())


@pytest.mark.parametrize("fix,kind", [(CHUNKS[0], "FixedKLinear"), (PADDED, "PaddedRowsLinear")])
@pytest.mark.parametrize("name", ["vicuna-7b", "llama3.1-8b-instruct"])
def test_an_exact_7b_shaped_target_holds_the_bytes_of_a_stock_one(name, fix, kind):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(big_config(name, num_hidden_layers=2),
                                                 dtype=torch.bfloat16)
    target = Target(model.eval(), tokenizer=None, name=f"meta:{name}")
    stock = held_bytes(model)
    chunked = {shape_of(linear): fix for _, _, linear in linear_modules(model)}
    apply(target, chunked, GROUPED)
    assert sum(type(m).__name__ == kind for m in model.modules()) == 2 * 7 + 1
    assert held_bytes(model) / stock <= 1.05
    restore(target)
    assert held_bytes(model) == stock
