"""Notebook 04's EAGLE-2 explorer: one draft-verify cycle anywhere in a greedy answer, for any
dynamic-tree settings (EAGLE-2 §4; EAGLE §3.1 tree attention, §3.3 verification).

Greedy EAGLE is lossless, so whatever tree it drafts, the text before every cycle is the prompt
plus a prefix of the target's greedy answer. The explorer therefore picks a cycle by *position*
in that answer: the context is the prompt and the answer's first `position` tokens, the root is
the answer's next token. For `DynamicTree(total_tokens, depth, topk)` it runs the package's own
cycle, `EagleDecoder(...).draft()` then `.verify(draft)`, and returns the tree, its mask, the
target's greedy choice after every node, the accepted path and the bonus token.

    explorer = TreeExplorer(target, head, "Why is the sky blue?", max_new_tokens=32)
    cycle = explorer.cycle(position=5, total_tokens=12, depth=4, topk=3)
    cycle.path, cycle.new_tokens == explorer.answer[6:6 + len(cycle.new_tokens)]

A cycle costs one prefill of the context, `depth` head forwards and one tree forward; each result
is kept, so moving a slider back is free. Left out: sampling (notebook 05) and `accept`, which
would move the decoder on: every cycle here starts from the greedy answer.
"""
from dataclasses import dataclass

import torch

from eagle_mini.decode import EagleDecoder, generate_vanilla, prepare_prompt
from eagle_mini.draft import Draft
from eagle_mini.tree import DynamicTree
from eagle_mini.errors import EagleMiniError


@dataclass
class Cycle:
    """One draft-verify cycle. `prefix` is the number of tokens before the root (positions start
    there); `choice[i]` is the target's greedy next token after node i (its argmax over the tree
    forward); `path` the accepted node ids, root first; `bonus` the target's token after them."""
    position: int
    settings: DynamicTree
    prefix: int
    draft: Draft
    choice: list[int]
    path: list[int]
    bonus: int

    @property
    def mask(self) -> torch.Tensor:
        """The tree attention mask [N, N]: row i is true at node i and its ancestors."""
        return self.draft.tree.mask

    @property
    def positions(self) -> torch.Tensor:
        """Position ids [N]: prefix + depth."""
        return self.draft.tree.positions(self.prefix)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (the bonus token not counted)."""
        return len(self.path) - 1

    @property
    def new_tokens(self) -> list[int]:
        """What the cycle adds: the accepted draft tokens, then the bonus token."""
        return self.draft.tokens[self.path[1:]].tolist() + [self.bonus]

    @property
    def agrees(self) -> list[bool]:
        """Per node: its token is the target's choice after its parent (the root: True), so the
        target accepts it whenever it accepts the parent."""
        tokens, parents = self.draft.tokens.tolist(), self.draft.tree.parents
        return [i == 0 or tokens[i] == self.choice[parents[i]] for i in range(len(tokens))]


class TreeExplorer:
    """Cycles of `EagleDecoder` with a `DynamicTree` at any position of the greedy answer to
    `prompt` (a string or token ids), `max_new_tokens` long."""

    def __init__(self, target, head, prompt, max_new_tokens: int = 32):
        self.target, self.head = target, head
        self.prompt_ids = prepare_prompt(target, prompt)
        self.answer = generate_vanilla(target, self.prompt_ids, max_new_tokens).output_ids
        self._cycles = {}

    @property
    def last_position(self) -> int:
        """The last position whose root is not an end-of-sequence token."""
        ends = self.answer[-1] in self.target.eos_token_ids
        return len(self.answer) - 1 - ends

    def cycle(self, position: int, total_tokens: int, depth: int, topk: int) -> Cycle:
        """The cycle whose root is `answer[position]`, drafted with
        `DynamicTree(total_tokens, depth, topk)` and verified greedily by the target."""
        if not 0 <= position <= self.last_position:
            raise EagleMiniError(f"position must be in 0..{self.last_position}, got {position}")
        key = (position, total_tokens, depth, topk)
        if key not in self._cycles:
            settings = DynamicTree(total_tokens, depth, topk)
            context = self.prompt_ids + self.answer[:position]
            decoder = EagleDecoder(self.target, self.head, context, tree=settings)
            assert decoder.root == self.answer[position], "the prefill's token is the answer's"
            draft = decoder.draft()
            verified = decoder.verify(draft)
            choice = verified.logits.argmax(-1).tolist()
            self._cycles[key] = Cycle(position, settings, len(context), draft, choice,
                                      verified.path, verified.bonus)
        return self._cycles[key]
