"""The one way the runtime changes a target's Hugging Face model, and undoes it.

Exact mode (`runtime/exact/`) swaps some modules, sets the attention implementation, writes the
config fields its attention function reads and hooks the decoder stack. Done directly, each change
forgets what it replaced: undoing it then means guessing ("sdpa" for the attention, say), and a
mode switched off could leave half of itself behind. `ModelEdits` makes every such change remember
what was there the first time it was changed, so that `undo` puts back all of it, and `suspended`
puts it back for a while and then re-applies the *same* replacement objects (nothing is rebuilt,
and whoever holds a replacement, a draft head sharing `lm_head` say, still holds the live one).

    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(2, 2))
    >>> edits = ModelEdits(model)
    >>> edits.swap(model, "0", nn.Identity())
    >>> type(model[0]).__name__
    'Identity'
    >>> edits.undo(); type(model[0]).__name__
    'Linear'
"""
from contextlib import contextmanager

_ABSENT = object()   # a config field that was not there before it was written


class ModelEdits:
    """The changes made to `model`: modules swapped, config fields written, attention set, each
    with what it replaced, and forward pre-hooks added."""

    def __init__(self, model):
        self.model = model
        self.modules = {}      # (id(parent), name) -> [parent, name, original, replacement]
        self.fields = {}       # config field -> [value before, value now]
        self.attention = None  # [implementation before, implementation now]
        self.hooks = {}        # (id(module), hook) -> [module, hook, handle (None: removed)]

    def __bool__(self) -> bool:
        return bool(self.modules or self.fields or self.attention or self.hooks)

    def swap(self, parent, name: str, module) -> None:
        """`parent.name = module`, remembering the first module that stood there."""
        entry = self.modules.setdefault((id(parent), name), [parent, name, getattr(parent, name), None])
        entry[3] = module
        setattr(parent, name, module)

    def set_field(self, name: str, value) -> None:
        """`model.config.name = value`, remembering the value before (or that it was absent)."""
        entry = self.fields.setdefault(name, [getattr(self.model.config, name, _ABSENT), None])
        entry[1] = value
        setattr(self.model.config, name, value)

    def set_attention(self, implementation: str) -> None:
        """The model's attention implementation, remembering the one it had."""
        if self.attention is None:
            self.attention = [self.model.config._attn_implementation, None]
        self.attention[1] = implementation
        self.model.set_attn_implementation(implementation)

    def pre_hook(self, module, hook) -> None:
        """`hook(module, args, kwargs)` run before every forward of `module`, free to return new
        arguments (`register_forward_pre_hook(hook, with_kwargs=True)`); added once however often
        asked."""
        entry = self.hooks.setdefault((id(module), hook), [module, hook, None])
        if entry[2] is None:
            entry[2] = module.register_forward_pre_hook(hook, with_kwargs=True)

    def _put(self, which: int) -> None:
        """Every edited place to its value before (`which` 0) or after (1) the edits."""
        for parent, name, *values in self.modules.values():
            setattr(parent, name, values[which])
        for name, values in self.fields.items():
            if values[which] is _ABSENT:
                delattr(self.model.config, name)
            else:
                setattr(self.model.config, name, values[which])
        if self.attention is not None:
            self.model.set_attn_implementation(self.attention[which])
        for entry in self.hooks.values():
            if which == 1:
                self.pre_hook(*entry[:2])
            elif entry[2] is not None:
                entry[2].remove()
                entry[2] = None

    def undo(self) -> None:
        """Put back everything as it was before the first edit, and forget the edits."""
        self._put(0)
        self.modules, self.fields, self.attention, self.hooks = {}, {}, None, {}

    @contextmanager
    def suspended(self):
        """The model as it was before the edits for a while, then the same edits again."""
        self._put(0)
        try:
            yield
        finally:
            self._put(1)


def edits_of(target) -> ModelEdits:
    """The target's `ModelEdits` (`target.runtime.edits`), made on first use."""
    if target.runtime.edits is None:
        target.runtime.edits = ModelEdits(target.model)
    return target.runtime.edits
