"""The wiring every course explorer shares: controls above one output, redrawn when a control moves.

An explorer is pure functions (`view`, `reading`, ...) that a test can call, and a thin widget
around them: its controls, a `state()` that reads them into what those functions return, and a
`show()` that draws that state into `self.output`. What is the same in every one of them lives
here, once: the controls observed, the box (the rows in order, then the output) and the notebook's
display of it. A subclass builds its controls, then calls `wire` last in its `__init__`.

    class KExplorer(Explorer):
        def __init__(self):
            import ipywidgets as w
            self.k = w.IntSlider(max=4)
            self.wire(self.k)                # VBox([k, output]), k observed, shown once
        def state(self):
            return {"k": self.k.value}
        def show(self):
            with self.output: ...

Left out: what a control means (each explorer's own) and buttons (`stepper.StepperWidget` wires
its own and passes the pickers it observes).
"""


class Explorer:
    """Controls, an output and the box holding them; `show` draws into the output."""

    def wire(self, *rows, observe=None, on_change=None):
        """Lay out `rows` (controls, or boxes of them) above a new `self.output` in `self.box`,
        call `on_change` (default `self.show`) whenever one of `observe` (default: the rows) changes
        value, and call it once now."""
        import ipywidgets as w
        on_change = on_change or self.show
        self.output = w.Output()
        for control in rows if observe is None else observe:
            control.observe(lambda _: on_change(), "value")
        self.box = w.VBox([*rows, self.output])
        on_change()

    def show(self):
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)
