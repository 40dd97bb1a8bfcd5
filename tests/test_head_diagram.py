"""The head diagram of notebooks 03 and 08 is read off the module it draws: change the head and the
diagram changes with it."""
import matplotlib
import pytest
from torch import nn

from eagle_mini import tiny_target
from eagle_mini.course.head_diagram import draw_head, head_boxes
from eagle_mini.heads.eagle1 import DraftHead
from eagle_mini.heads.eagle3 import new_eagle3_head


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)


def test_eagle1_boxes_carry_the_modules_shapes(target):
    head = DraftHead(target.config, draft_vocab=list(range(10))).attach(target)
    boxes = head_boxes(head)
    h = target.hidden_size
    assert [b.role for b in boxes] == ["input", "frozen", "trained", "trained", "output", "frozen", "output"]
    assert f"Linear({2 * h} -> {h}" in boxes[2].title
    layer = head.layers[0]
    for name, m in layer.named_modules():
        if isinstance(m, nn.Linear):
            assert f"{name.split('.')[-1]} {m.in_features}->{m.out_features}" in boxes[3].detail
    assert "input_layernorm" not in boxes[3].detail   # EAGLE-1's layer has no input norm
    assert f"{sum(p.numel() for p in layer.parameters() if p.requires_grad):,} parameters" in boxes[3].title
    assert "10" in boxes[-1].detail


def test_eagle3_boxes_follow_its_layers_and_vocabulary(target):
    head = new_eagle3_head(target, seed=0, layers=(1, 2, 3), draft_vocab=list(range(12)))
    boxes = head_boxes(head)
    assert "layers 1, 2, 3" in boxes[0].title and f"Linear({3 * target.hidden_size} ->" in boxes[2].title
    assert "hidden_norm" in boxes[3].detail and "12" in boxes[-2].title


def test_it_draws(target):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    draw_head(new_eagle3_head(target, seed=0), ax)
    assert len(ax.patches) == 7 and ax.texts
    plt.close(fig)
