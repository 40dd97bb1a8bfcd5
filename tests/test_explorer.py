"""The wiring every course explorer shares (`course.explorer.Explorer`): the rows in order above
one output, a redraw on every observed control, and the box as what a notebook displays."""
import ipywidgets as w

from eagle_mini.course.explorer import Explorer


class Counting(Explorer):
    """A slider, and a dropdown and a checkbox in one row; counts its redraws."""

    def __init__(self, observed=None, on_change=None):
        self.shown = 0
        self.a, self.b, self.c = w.IntSlider(), w.Dropdown(options=["x", "y"]), w.Checkbox()
        observe = None if observed is None else [getattr(self, name) for name in observed]
        self.wire(self.a, w.HBox([self.b, self.c]), observe=observe, on_change=on_change)

    def show(self):
        self.shown += 1


def test_the_rows_then_the_output_shown_once_and_again_on_each_change():
    e = Counting()
    assert e.box.children[0] is e.a and e.box.children[1].children == (e.b, e.c)
    assert e.box.children[2] is e.output and len(e.box.children) == 3
    assert e.shown == 1
    e.a.value = 3
    assert e.shown == 2
    assert e._repr_mimebundle_()["application/vnd.jupyter.widget-view+json"]["model_id"] == e.box.model_id


def test_controls_inside_a_row_are_observed_when_named():
    e = Counting(observed=("a", "b", "c"))
    e.b.value, e.c.value = "y", True
    assert e.shown == 3


def test_on_change_replaces_show_and_only_named_controls_are_observed():
    calls = []
    e = Counting(observed=("b",), on_change=lambda: calls.append(1))
    assert calls == [1] and e.shown == 0
    e.a.value = 1
    assert calls == [1]
    e.b.value = "y"
    assert calls == [1, 1]
