"""A generation one draft-verify cycle at a time, with everything a cycle decides laid out
(notebook 05's stepper; EAGLE §3.3 verification, EAGLE-2 §4 top-k trees).

`Stepper` drives the package's public per-cycle API, `EagleDecoder.draft()` -> `verify(draft)` ->
`accept(verified)`, the very code `generate` runs, and records each cycle as a `Cycle`:

* the draft tree: every node's token, parent, depth and draft confidence;
* the target's choice at every node (its argmax after the node, which greedy verification compares
  with the children's tokens), the accepted path and the bonus token;
* at T > 0, every accept/reject draw: the uniform u and the accept ratio (min(1, p/q) on sampled
  trees, p(x) on top-k trees) of each tried child, and the last draw that picks the bonus token,
  as verification makes them (`EagleDecoder.step`'s observer: any seed, None included);
* the target's KV cache before and after compaction, read off the cache tensors: which tree slot
  each entry of the compacted cache came from (`kept_slots`), found by matching the last layer's
  keys (a target of two layers or more). They equal the prefix plus the accepted path: what `keep_cache_entries` promises.

Stepping until `done` writes exactly `generate`'s tokens (same seed, same cut at EOS,
`max_new_tokens` and the end of the context, where the trees shrink as `generate`'s do). What it
leaves out: stop strings, streaming, and the statistics `generate` sums.

    >>> s = Stepper(target, head, "Why is the sky blue?")   # doctest: +SKIP
    >>> s.step().path, s.output_ids                          # doctest: +SKIP
"""
from dataclasses import dataclass, field

import torch

from eagle_mini.course.explorer import Explorer
from eagle_mini.decode import EagleDecoder
from eagle_mini.methods import EAGLE, EAGLE2, EAGLE_CHAIN, resolve_tree
from eagle_mini.sampling import SamplingConfig

ACCEPTED, TRIED, UNTRIED, BONUS = "#2a9d8f", "#e76f51", "#d9d9d9", "#6a4c93"  # no clash with depth colours


@dataclass
class Draw:
    """One uniform draw of sampled verification: child `node` of `parent` (token `token`) tried with
    accept ratio `ratio`, accepted when u < ratio; `node` None is the last draw, the bonus token from
    the target's (residual) distribution after `parent`."""
    parent: int
    node: int | None
    token: int
    u: float
    ratio: float | None

    @property
    def accepted(self) -> bool:
        return self.ratio is None or self.u < self.ratio


@dataclass
class Cycle:
    """What one draft-verify cycle did. Node lists are indexed by node id (0 = the root)."""
    index: int
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    confidence: list[float]
    valid: list[bool]
    target_choice: list[int]   # the target's argmax after each node
    path: list[int]
    bonus: int
    new_tokens: list[int]      # what the generation keeps (cut at EOS / max_new_tokens / context)
    prefix: int                # target cache entries before the tree
    cache_before: int          # after verification: prefix + tree nodes
    cache_after: int           # after compaction: prefix + accepted path
    kept_slots: list[int]      # the tree slot each compacted entry was copied from
    head_stable: tuple[int, int]  # the head's stable cache entries before and after accept
    draws: list[Draw] = field(default_factory=list)  # T > 0 only

    @property
    def tried(self) -> set[int]:
        """Children verification looked at: greedy tries every valid child of a path node."""
        if self.draws:
            return {d.node for d in self.draws if d.node is not None}
        return {c for c in range(1, len(self.tokens)) if self.valid[c] and self.parents[c] in self.path}


def _tree_keys(cache, start: int) -> torch.Tensor:
    """The last layer's keys of cache slots start.. as [slots, kv heads * head dim]. Past the first
    layer a key depends on the whole context, so no two tree nodes share one (in the first layer
    two nodes with the same token at the same depth do)."""
    keys = cache.layers[-1].keys[0, :, start:, :]
    return keys.transpose(0, 1).reshape(keys.shape[1], -1).clone()


def matched_slots(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    """For each row of `after`, the first row of `before` equal to it (-1 when none).

    >>> matched_slots(torch.tensor([[1.], [2.], [3.]]), torch.tensor([[1.], [3.]]))
    [0, 2]
    """
    same = (after[:, None, :] == before[None, :, :]).all(-1)
    return [int(row.nonzero()[0]) if row.any() else -1 for row in same]


class Stepper:
    """`generate`, one cycle per `step()` (`EagleDecoder.step`, the very cycle `generate` runs);
    `cycles` keeps every `Cycle`, `output_ids` the tokens. `seed` None draws a fresh one. `tree`:
    a method name or a tree spec (`methods.resolve_tree`)."""

    def __init__(self, target, head, prompt, tree=EAGLE2, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int | None = 0,
                 max_new_tokens: int = 64):
        self.target, self.max_new_tokens = target, max_new_tokens
        self.decoder = EagleDecoder(target, head, prompt, resolve_tree(tree),
                                    SamplingConfig(temperature, top_p, top_k), seed,
                                    max_new_tokens=max_new_tokens)
        self.cycles: list[Cycle] = []

    @property
    def output_ids(self) -> list[int]:
        return self.decoder.output_ids

    @property
    def stop(self) -> str | None:
        """Why the generation ended ("eos", "max_new_tokens", "context"); None while it goes on."""
        return self.decoder.stop

    @property
    def done(self) -> bool:
        return self.stop is not None

    @property
    def target_forwards(self) -> int:
        return self.decoder.target_forwards

    @torch.no_grad()
    def step(self) -> Cycle | None:
        """Run one cycle and return what it did; None once the generation has stopped."""
        if self.done:
            return None
        dec, draws, seen = self.decoder, [], {}

        def before_accept(verified):   # the whole tree is still in the target cache
            seen["keys"] = _tree_keys(dec.cache, verified.prefix)
            seen["stable"] = dec.drafter.stable
        done = dec.step(observe=lambda *draw: draws.append(Draw(*draw)), inspect=before_accept)
        draft, verified = done.draft, done.verified
        prefix, n = verified.prefix, draft.tree.num_nodes
        kept = [prefix + i for i in matched_slots(seen["keys"], _tree_keys(dec.cache, prefix))]
        cycle = Cycle(len(self.cycles), draft.tokens.tolist(), list(draft.tree.parents),
                      draft.tree.depths.tolist(), draft.confidence.tolist(), draft.valid.tolist(),
                      verified.logits.argmax(-1).tolist(), list(verified.path), verified.bonus,
                      done.new_tokens, prefix, prefix + n, dec.cache.get_seq_length(), kept,
                      (seen["stable"], dec.drafter.stable), draws)
        self.cycles.append(cycle)
        return cycle

    def run(self) -> list[int]:
        """Step until the generation stops; the output ids (equal to `generate`'s)."""
        while self.step() is not None:
            pass
        return self.output_ids


def cycle_rows(cycle: Cycle, text=str) -> list[dict]:
    """One row per draft node: its token, the target's choice at its parent, and the verdict.
    `text(token_id)` shows a token (e.g. the tokenizer's decode)."""
    draws = {d.node: d for d in cycle.draws if d.node is not None}
    rows = []
    for i in range(1, len(cycle.tokens)):
        parent = cycle.parents[i]
        if i in cycle.path:
            verdict = "accepted"
        elif i in cycle.tried:
            verdict = "rejected"
        else:
            verdict = "not tried" if cycle.valid[i] else "invalid"
        row = {"node": i, "parent": parent, "depth": cycle.depths[i], "draft token": text(cycle.tokens[i]),
               "draft conf.": round(cycle.confidence[i], 3),
               "target's argmax at parent": text(cycle.target_choice[parent]), "verdict": verdict}
        if cycle.draws:
            d = draws.get(i)
            row["u"] = None if d is None else round(d.u, 3)
            row["accept ratio"] = None if d is None else round(d.ratio, 3)
        rows.append(row)
    return rows


def _layout(cycle: Cycle) -> dict[int, tuple[float, float]]:
    """x = depth, y = minus the leaf order (a parent sits at the mean of its children)."""
    children = {i: [] for i in range(len(cycle.tokens))}
    for i in range(1, len(cycle.tokens)):
        children[cycle.parents[i]].append(i)
    pos, leaves = {}, [0]

    def place(node):
        for c in children[node]:
            place(c)
        if children[node]:
            y = sum(pos[c][1] for c in children[node]) / len(children[node])
        else:
            y, leaves[0] = -leaves[0], leaves[0] + 1
        pos[node] = (cycle.depths[node], y)

    place(0)
    return pos


def draw_cycle(cycle: Cycle, text=str, axes=None):
    """The tree (node colour = verdict, the target's choice beside each path node, the bonus token
    after the path) above the target cache before and after compaction. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    pos, tried = _layout(cycle), cycle.tried
    leaves = 1 - min(y for _, y in pos.values())
    if axes is None:
        tall = max(2.5, 0.36 * leaves)
        fig, axes = plt.subplots(2, 1, figsize=(10, tall + 1.8), layout="constrained",
                                 gridspec_kw={"height_ratios": [tall, 1.3]})
    ax, cax = axes
    draws = {d.node: d for d in cycle.draws if d.node is not None}
    for i in range(1, len(cycle.tokens)):
        (x0, y0), (x1, y1) = pos[cycle.parents[i]], pos[i]
        ax.plot([x0, x1], [y0, y1], color="0.6", lw=2.2 if i in cycle.path else 0.8, zorder=1)
    for i, (x, y) in pos.items():
        color = ACCEPTED if i in cycle.path else TRIED if i in tried else UNTRIED
        label = text(cycle.tokens[i])
        if i in draws:
            label += f"\nu={draws[i].u:.2f} {'<' if draws[i].accepted else '>='} {draws[i].ratio:.2f}"
        elif i in cycle.path and not cycle.draws:
            label += f"\ntarget: {text(cycle.target_choice[i])}"
        ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=2,
                bbox=dict(boxstyle="round", fc=color, ec="0.3", lw=0.6))
    bx, by = max(cycle.depths) + 1, pos[cycle.path[-1]][1]
    ax.text(bx, by, f"bonus\n{text(cycle.bonus)}", ha="center", va="center", fontsize=8, color="white",
            bbox=dict(boxstyle="round", fc=BONUS, ec="0.3"), zorder=2)
    ax.annotate("", (bx - 0.3, by), (pos[cycle.path[-1]][0] + 0.3, by), zorder=1,
                arrowprops=dict(arrowstyle="->", color=BONUS, ls="--", alpha=0.7))
    ax.set_xlim(-0.6, max(cycle.depths) + 1.6)
    ax.set_ylim(-leaves + 0.3, 0.7)
    ax.set_xticks(range(max(cycle.depths) + 2), [*range(max(cycle.depths) + 1), "bonus"])
    ax.set_yticks([])
    ax.set_xlabel("depth")
    ax.set_title(f"cycle {cycle.index + 1}: {len(cycle.tokens)} draft nodes, path {cycle.path}, "
                 f"adds {len(cycle.path)} token(s)", fontsize=10)
    ax.legend(handles=[Patch(fc=ACCEPTED, label="accepted path"), Patch(fc=TRIED, label="tried, rejected"),
                       Patch(fc=UNTRIED, label="not tried"), Patch(fc=BONUS, label="bonus (target's token)")],
              fontsize=7, loc="lower left")
    draw_cache(cycle, cax)
    return ax.figure


def draw_cache(cycle: Cycle, ax, shown_prefix: int = 3):
    """Two rows of cache slots: after verification (prefix + every tree node) and after compaction
    (prefix + the path), with an arrow from each kept entry's old slot to its new one."""
    n = cycle.cache_before - cycle.prefix
    for row, (label, slots) in enumerate((("after verify", list(range(n))),
                                          ("after accept", [s - cycle.prefix for s in cycle.kept_slots]))):
        y = 1 - row
        ax.text(-shown_prefix - 1.2, y, f"{label}\n{cycle.prefix + len(slots)} entries", ha="right",
                va="center", fontsize=8)
        ax.text(-shown_prefix / 2 - 0.5, y, f"prefix\n({cycle.prefix})", ha="center", va="center", fontsize=7,
                bbox=dict(boxstyle="square", fc="0.9", ec="0.5"))
        for j, node in enumerate(slots):
            color = ACCEPTED if node in cycle.path else UNTRIED
            ax.text(j, y, str(node), ha="center", va="center", fontsize=7,
                    bbox=dict(boxstyle="square", fc=color, ec="0.4", lw=0.5))
            if row == 1:
                ax.annotate("", (j, y + 0.2), (node, 1 - 0.2), arrowprops=dict(arrowstyle="->", color="0.4", lw=0.6))
    ax.set_xlim(-shown_prefix - 4, max(n, 8))
    ax.set_ylim(-0.6, 1.6)
    ax.axis("off")
    ax.set_title(f"target KV cache: slot {cycle.prefix} + node id; kept = {cycle.kept_slots}", fontsize=9)


def token_text(target):
    """A token id -> readable text: quotes show leading spaces, escapes show newlines."""
    if target.tokenizer is None:
        return str
    return lambda t: repr(target.tokenizer.decode([int(t)]))


class StepperWidget(Explorer):
    """Notebook 05's controls around a `Stepper`: prompt, tree and temperature pickers, a "next
    cycle" and a "reset" button, and an output showing the text so far and the last cycle.
    Changing a picker starts a new generation. Buttons can be pressed from code (`.next.click()`)."""

    def __init__(self, target, head, prompts, trees=(EAGLE2, EAGLE, EAGLE_CHAIN),
                 temperatures=(0.0, 0.7, 1.0), max_new_tokens: int = 48, seed: int = 0):
        import ipywidgets as w
        self.target, self.head, self.max_new_tokens, self.seed = target, head, max_new_tokens, seed
        self.text = token_text(target)
        self.prompt = w.Dropdown(options=list(prompts), description="prompt",
                                 layout=w.Layout(width="420px"))
        self.tree = w.Dropdown(options=list(trees), description="tree", layout=w.Layout(width="200px"))
        self.temperature = w.SelectionSlider(options=list(temperatures), description="T")
        self.next = w.Button(description="next cycle", button_style="primary", icon="step-forward")
        self.reset = w.Button(description="reset", icon="undo")
        self.next.on_click(lambda _: self.advance())
        self.reset.on_click(lambda _: self.restart())
        self.wire(w.HBox([self.prompt, self.tree, self.temperature]), w.HBox([self.next, self.reset]),
                  observe=(self.prompt, self.tree, self.temperature), on_change=self.restart)

    def restart(self):
        self.stepper = Stepper(self.target, self.head, self.prompt.value, self.tree.value,
                               self.temperature.value, seed=self.seed, max_new_tokens=self.max_new_tokens)
        self.show(None)

    def advance(self):
        self.show(self.stepper.step())

    def summary(self) -> str:
        s = self.stepper
        cycles = [len(c.new_tokens) for c in s.cycles]
        tau = f"{sum(cycles) / len(cycles):.2f}" if cycles else "-"
        state = f"stopped ({s.stop})" if s.done else "press 'next cycle'"
        return (f"{len(s.output_ids)} tokens from {s.target_forwards} target forwards (prefill + "
                f"{len(cycles)} cycles; vanilla decoding needs {len(s.output_ids)}); tau so far {tau}; "
                f"{state}\ntext: {self.target.decode(s.output_ids) if self.target.tokenizer else s.output_ids}")

    def show(self, cycle):
        import matplotlib.pyplot as plt
        import pandas as pd
        from IPython.display import clear_output, display
        with self.output:
            clear_output(wait=True)
            print(self.summary())
            if cycle is not None:
                print(f"this cycle adds {[self.text(t) for t in cycle.new_tokens]}; cache {cycle.cache_before}"
                      f" -> {cycle.cache_after} entries; head's stable cache {cycle.head_stable[0]} -> "
                      f"{cycle.head_stable[1]}")
                fig = draw_cycle(cycle, self.text)
                display(fig)
                plt.close(fig)
                display(pd.DataFrame(cycle_rows(cycle, self.text)).set_index("node"))
