"""A diagram of a draft head drawn from its modules (notebooks 03 and 08): what goes in, each part
with its real shapes, what it shares with the target and what comes out.

`head_boxes(head)` reads the head as built, so the diagram is the module it describes, never a
hand-drawn copy: the width of `fc`, every linear of the decoder layer with its in and out
features, the norms, and the output layer (the target's rows of the draft vocabulary for EAGLE-1,
the head's own `lm_head` for EAGLE-3). EAGLE-1 (EAGLE §3.1): (f_i, e(t_(i+1))) -> fc (2H -> H)
-> one decoder layer without its input norm -> f'_(i+1) -> the target's lm_head. EAGLE-3 (EAGLE-3
§3): three layers' hidden states -> fc (3H -> H), normed beside the normed token embedding -> a
decoder layer reading 2H -> norm -> its own lm_head over the draft vocabulary.

    >>> from eagle_mini import tiny_target
    >>> from eagle_mini.heads.eagle3 import new_eagle3_head
    >>> [b.role for b in head_boxes(new_eagle3_head(tiny_target("llama", num_hidden_layers=4)))]
    ['input', 'frozen', 'trained', 'trained', 'trained', 'trained', 'output']
"""
from dataclasses import dataclass

from torch import nn

COLORS = {"input": "#deebf7", "trained": "#fdd0a2", "frozen": "#d9d9d9", "output": "#c7e9c0"}


@dataclass
class Box:
    title: str
    detail: str
    role: str   # input, trained (the head's own), frozen (the target's, shared), output


def _linears(module: nn.Module) -> str:
    """Each linear of a module as name in -> out, in module order."""
    return ", ".join(f"{name.split('.')[-1]} {m.in_features}->{m.out_features}"
                     for name, m in module.named_modules() if isinstance(m, nn.Linear))


def _trained(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def _layer_box(title: str, layer: nn.Module) -> Box:
    norms = [n for n, m in layer.named_children() if "Norm" in type(m).__name__]   # not an Identity
    parts = [f"{n}: {_linears(m)}" for n, m in layer.named_children() if _linears(m)]
    return Box(f"{title} ({_trained(layer):,} parameters)",
               "\n".join(parts + [f"norms: {', '.join(norms) or 'none'}"]), "trained")


def head_boxes(head) -> list[Box]:
    """The diagram's boxes, top to bottom (the first two side by side: the head's two inputs)."""
    h, n = head.fc.out_features, head.draft_vocab_size
    fc = Box(f"fc: Linear({head.fc.in_features} -> {h}{', bias' if head.fc.bias is not None else ''})",
             f"{_trained(head.fc):,} parameters", "trained")
    token = Box("t_(i+1) -> embedding", f"the target's, frozen: [{h}]", "frozen")
    if hasattr(head, "midlayer"):   # EAGLE-3
        layers = ", ".join(map(str, head.aux_layers))
        return [Box(f"hidden states entering layers {layers}", f"[3 x {h} = {head.fc.in_features}]", "input"),
                token, fc, _layer_box("decoder layer, reading [fused, token] = 2H", head.midlayer),
                Box(f"norm: RMSNorm({h})", f"{_trained(head.norm):,} parameters", "trained"),
                Box(f"lm_head: Linear({h} -> {n:,}), the head's own", f"{_trained(head.lm_head):,} parameters",
                    "trained" if _trained(head.lm_head) else "frozen"),
                Box("draft logits", f"[{n:,}] over the draft vocabulary", "output")]
    return [Box("f_i: the target's feature", f"last hidden state after its final norm: [{h}]", "input"),
            token, fc, _layer_box("decoder layer, no input norm", head.layers[0]),
            Box("f'_(i+1): the predicted feature", f"[{h}]", "output"),
            Box(f"lm_head: the target's rows for the draft vocabulary ({n:,} x {h})", "frozen, shared",
                "frozen"),
            Box("draft logits", f"[{n:,}]", "output")]


def draw_head(head, ax, title: str = "") -> None:
    """Draw `head_boxes(head)` on a matplotlib axis: two inputs on top, then one column down."""
    from matplotlib.patches import FancyBboxPatch
    boxes = head_boxes(head)
    rows = len(boxes) - 1
    place = [(0.27, rows), (0.73, rows)] + [(0.5, rows - k) for k in range(1, rows)]
    for (x, y), b in zip(place, boxes):
        w, tall = (0.42 if y == rows else 0.9), (0.84 if b.detail.count("\n") > 1 else 0.72)
        ax.add_patch(FancyBboxPatch((x - w / 2, y - tall / 2), w, tall, boxstyle="round,pad=0.02",
                                    fc=COLORS[b.role], ec="0.3"))
        ax.text(x, y + 0.2, b.title, ha="center", va="center", fontsize=8, weight="bold")
        ax.text(x, y - 0.1, b.detail, ha="center", va="center", fontsize=7)
    joins = place[3] if hasattr(head, "midlayer") else place[2]   # where the token comes in
    for (x0, y0), (x1, y1) in [(place[0], place[2]), (place[1], joins)] + list(zip(place[2:], place[3:])):
        ax.annotate("", (x1, y1 + 0.38), (x0, y0 - 0.38), arrowprops=dict(arrowstyle="->", color="0.3"))
    ax.set(xlim=(0, 1), ylim=(0.4, rows + 0.5), title=title or type(head).__name__)
    ax.axis("off")
