"""Decoding loops: vanilla autoregressive decoding (the baseline and the oracle's twin) and EAGLE.

Vanilla decoding runs one target forward per new token: that is what EAGLE speeds up. Its greedy
output is token-identical to Hugging Face `generate` in fp32, which the tests check; EAGLE's greedy
output must then be identical to vanilla's (lossless, EAGLE §3.3).

An EAGLE generation is a prefill followed by draft-verify *cycles* (EAGLE §3). `EagleDecoder` runs
one cycle at a time in three public steps, so a notebook can stop between them:

    dec = EagleDecoder(target, head, "Hi!")   # prefill: the target's first token is dec.root
    draft = dec.draft()                       # the head drafts a tree under dec.root
    checked = dec.verify(draft)               # one target forward over the tree: path + bonus
    new_tokens = dec.accept(checked)          # compact the caches to the path; bonus is the new root

Every loop returns a `Generation` with the same `stats` contract the CLI prints with `--json`:
`new_tokens`, `seconds` (generation wall time from the prefill on: model loading, templating and
tokenising excluded, the same clock for every method; EAGLE splits it into
`draft_seconds` and `verify_seconds` of the cycles, the prefill in `other_seconds`), `target_forwards`
(prefill included), `tau` -- the papers' tau: the mean number of tokens a draft-verify cycle adds,
bonus token included, prefill not counted (a last cycle cut by `max_new_tokens` or EOS counts the
tokens kept; None when no cycle ran) -- and `tokens_per_forward` (new tokens / target forwards,
prefill included). Vanilla decoding's cycle is one plain step, so its tau is 1.

Every loop ends the same way, with `stats["stop"]`: "eos", "max_new_tokens", or "context" when
the prompt and the output fill the target's context (`token_limit`). A prompt must leave at least
one position for the output: a prompt of `context_length` tokens is refused (`prepare_prompt`).
Near the end of the context EAGLE verifies only the part of its tree whose tokens still fit, down
to the root alone, a vanilla step (`EagleDecoder.room`, `Draft.fit`), so it stops with exactly
vanilla's tokens.
"""
import time
from dataclasses import dataclass, field

import torch

from eagle_mini.draft import Draft, Drafter, TreeDrafter
from eagle_mini.errors import EagleMiniError
from eagle_mini.sampling import SamplingConfig, make_generator, next_token, warp
from eagle_mini.target import keep_cache_entries
from eagle_mini.tree import DynamicTree
from eagle_mini.verify import SampledTreeRule, TopKTreeRule, verify_greedy, verify_sampling


@dataclass
class Generation:
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    stats: dict = field(default_factory=dict)


def prepare_prompt(target, prompt) -> list[int]:
    """str or chat messages -> templated ids; a list of ints is taken as ids already."""
    if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
        ids = list(prompt)
    else:
        ids = target.chat_ids(prompt)
    if not ids:
        raise EagleMiniError("empty prompt")
    if len(ids) >= target.context_length:
        raise EagleMiniError(f"prompt of {len(ids)} tokens does not fit {target.name}'s context "
                             f"length {target.context_length}")
    return ids


def token_limit(target, prompt_ids, max_new_tokens: int | None) -> int:
    """How many tokens a generation may add: `max_new_tokens` (None: no limit of its own), or fewer
    where the prompt and the output would pass the target's context (they fill at most
    `context_length` positions)."""
    room = target.context_length - len(prompt_ids)
    return room if max_new_tokens is None else min(max_new_tokens, room)


def limit_stop(produced: int, max_new_tokens: int | None) -> str:
    """Why a generation that reached its `token_limit` stopped ("max_new_tokens" when both ends
    fall on the same token, as vanilla decoding checks it first).

    >>> limit_stop(4, 4), limit_stop(3, 4), limit_stop(3, None)
    ('max_new_tokens', 'context', 'context')
    """
    return "max_new_tokens" if max_new_tokens is not None and produced >= max_new_tokens else "context"


def stop_reason(output_ids: list[int], limit: int, max_new_tokens: int | None, eos) -> str | None:
    """The one stop rule of every decoding loop: after its last token, a generation stops at an
    EOS token ("eos"), else at its `token_limit` ("max_new_tokens" or "context"); None: it goes on.

    >>> stop_reason([5, 9], 4, 4, eos={9}), stop_reason([5, 6], 2, 4, eos={9}), stop_reason([5], 2, 4, {9})
    ('eos', 'context', None)
    """
    if output_ids[-1] in eos:
        return "eos"
    if len(output_ids) >= limit:
        return limit_stop(len(output_ids), max_new_tokens)
    return None


def check_max_new_tokens(max_new_tokens: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise EagleMiniError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def cycle_stats(new_tokens: int, target_forwards: int) -> dict:
    """tau (per draft-verify cycle, prefill not counted) and tokens per target forward.

    Every token after the prefill's first one comes from a cycle, so pooled over any number of
    generations tau = (tokens - generations) / (forwards - generations).

    >>> cycle_stats(9, 4)
    {'tau': 2.6666666666666665, 'tokens_per_forward': 2.25}
    """
    cycles = target_forwards - 1
    return {"tau": (new_tokens - 1) / cycles if cycles > 0 else None,
            "tokens_per_forward": new_tokens / target_forwards}


@torch.no_grad()
def generate_vanilla(target, prompt, max_new_tokens: int = 128, temperature: float = 0.0,
                     top_p: float = 1.0, top_k: int = 0, seed: int | None = 0,
                     streamer=None) -> Generation:
    """One token per target forward. `streamer(list_of_new_ids)` is called as tokens arrive."""
    check_max_new_tokens(max_new_tokens)
    cfg = SamplingConfig(temperature, top_p, top_k)
    ids = prepare_prompt(target, prompt)
    gen = make_generator(seed, target.device)
    start = time.perf_counter()
    cache = target.new_cache()
    logits = target.forward(ids, cache, all_logits=False).logits[-1]
    forwards, out, limit = 1, [], token_limit(target, ids, max_new_tokens)
    while True:
        token = next_token(logits, cfg, gen)
        out.append(token)
        if streamer is not None:
            streamer([token])
        stop = stop_reason(out, limit, max_new_tokens, target.eos_token_ids)
        if stop is not None:
            break
        logits = target.forward([token], cache).logits[-1]
        forwards += 1
    seconds = time.perf_counter() - start
    return Generation(ids, out, target.decode(out), stats={
        "new_tokens": len(out), "seconds": seconds,
        "tokens_per_second": len(out) / seconds, "target_forwards": forwards,
        **cycle_stats(len(out), forwards), "stop": stop})


@dataclass
class Verified:
    """One verified draft: `path` the accepted node ids (root first), `bonus` the target's own next
    token, `features` what the head reads at every node (the feature [N, hidden], or an EAGLE-3
    head's target layers [N, 3 * hidden]) and `logits: [N, vocab]`; the target cache holds
    `prefix` entries plus the whole tree until `accept`."""
    draft: Draft
    path: list[int]
    bonus: int
    features: torch.Tensor
    logits: torch.Tensor
    prefix: int

    @property
    def new_tokens(self) -> list[int]:
        """The tokens this cycle adds: the accepted draft tokens, then the bonus token."""
        return self.draft.tokens[self.path[1:]].tolist() + [self.bonus]


@dataclass
class CycleOutcome:
    """What one draft-verify cycle did (`EagleDecoder.step`): the `draft`, its verification
    (`verified`: path, bonus, logits), the tokens the generation keeps (`new_tokens`: the accepted
    path and the bonus, cut at an EOS or the token limit) and `stop`, why the generation stopped
    after this cycle ("eos", "max_new_tokens", "context"), None while it goes on."""
    draft: Draft
    verified: Verified
    new_tokens: list[int]
    stop: str | None


class EagleDecoder:
    """EAGLE decoding one draft-verify cycle at a time (EAGLE §3, EAGLE-2 §4).

    The constructor runs the prefill and the head over the prompt; then each cycle is `step()`,
    or its three parts `draft()` -> `verify(draft)` -> `accept(verified)`. `output_ids` grows by
    the tokens each cycle keeps, and `stop` says why the generation ended (None until it has):
    an EOS, `max_new_tokens` (None: only the context limits it) or the end of the context.
    tree: a tree spec ("eagle1", "eagle2", "chain:K", "dynamic:T,D,K", a choices list), a
    `Tree` or a `DynamicTree` (a method's name is resolved at the edge: `methods.resolve_tree`).
    `sampling`: a `SamplingConfig` (default greedy). `drafter`: any `draft.TreeDrafter` in place
    of the head's `Drafter` over `tree` (e.g. `lookup.LookupDrafter`, which needs no head).
    """

    @torch.no_grad()
    def __init__(self, target, head, prompt, tree=DynamicTree(),
                 sampling: SamplingConfig | None = None, seed: int | None = 0, drafter=None,
                 max_new_tokens: int | None = None):
        self.target, self.cfg = target, sampling or SamplingConfig()
        self.prompt_ids = prepare_prompt(target, prompt)
        self.max_new_tokens = max_new_tokens
        self.limit = token_limit(target, self.prompt_ids, max_new_tokens)
        self.generator = make_generator(seed, target.device)
        if drafter is None:
            drafter = Drafter(head, tree, self.cfg.temperature, self.cfg.top_p, self.cfg.top_k)
        elif not isinstance(drafter, TreeDrafter):
            raise EagleMiniError(f"a drafter must be an eagle_mini.draft.TreeDrafter (the drafter "
                                 f"protocol); got {type(drafter).__name__}")
        drafter.generator = self.generator
        self.drafter, self.tree = drafter, drafter.tree
        # an EAGLE-3 head reads the hidden states entering some layers, not the last feature
        self.layers = drafter.target_layers
        self.rule = SampledTreeRule() if drafter.sampled else TopKTreeRule()
        self.cache = target.new_cache()
        step = target.forward(self.prompt_ids, self.cache, all_logits=False,
                              hidden_layers=self.layers)
        self.root = next_token(step.logits[-1], self.cfg, self.generator)
        self.drafter.begin(self.prompt_ids, self._head_input(step), self.root)
        self.output_ids = [self.root]
        self.stop = stop_reason(self.output_ids, self.limit, max_new_tokens, target.eos_token_ids)
        self.target_forwards = 1
        self.seconds = {"draft": 0.0, "verify": 0.0}  # cycles only: drafting + head re-runs, verifying

    def _head_input(self, step):
        return step.features if self.layers is None else step.layers

    @torch.no_grad()
    def step(self, observe=None, inspect=None) -> CycleOutcome:
        """One draft-verify cycle: draft, verify, accept. `observe(parent, child, token, u, ratio)`
        sees every draw of sampled verification (`verify_sampling`); `inspect(verified)` runs
        between verification and compaction, while the target cache still holds the whole tree."""
        if self.stop is not None:
            raise EagleMiniError(f"the generation has stopped ({self.stop}): no cycle is left")
        draft = self.draft()
        verified = self.verify(draft, observe)
        if inspect is not None:
            inspect(verified)
        return CycleOutcome(draft, verified, self.accept(verified), self.stop)

    @torch.no_grad()
    def draft(self) -> Draft:
        """The head's draft tree under the current root (EAGLE §3.1 static, EAGLE-2 §4 dynamic),
        cut to `room` nodes where the context ends before the whole tree (`Draft.fit`)."""
        room = self.room
        if room < 1:
            raise EagleMiniError(f"the context ({self.target.context_length} tokens) is full: "
                                 "no token fits after the root")
        start = time.perf_counter()
        draft = self.drafter.draft(self.root).fit(room)
        self.seconds["draft"] += time.perf_counter() - start
        return draft

    @property
    def room(self) -> int:
        """How many tokens the next cycle may add before the context is full: the positions left
        after the cached prefix and the root. A tree of `room` nodes is as many as fit: a cycle
        adds its accepted path (at most depth + 1 <= nodes tokens, the bonus included), and the
        target caches every node; at `room` = 1 the tree is the root alone, a vanilla step."""
        return self.target.context_length - self.cache.get_seq_length() - 1

    @torch.no_grad()
    def verify(self, draft: Draft, observe=None) -> Verified:
        """Score every node in one tree-masked target forward and walk the tree (EAGLE §3.3);
        `observe` as in `step`."""
        start = time.perf_counter()
        prefix = self.cache.get_seq_length()
        step = self.target.forward(draft.tokens, self.cache, positions=draft.tree.positions(prefix),
                                   tree_mask=draft.tree.mask, hidden_layers=self.layers)
        self.target_forwards += 1
        if self.cfg.greedy:
            path, bonus = verify_greedy(draft, step.logits)
        else:
            p = warp(step.logits, self.cfg.temperature, self.cfg.top_p, self.cfg.top_k)
            path, bonus = verify_sampling(draft, p, self.rule, generator=self.generator,
                                          observe=observe)
        self.seconds["verify"] += time.perf_counter() - start
        return Verified(draft, path, bonus, self._head_input(step), step.logits, prefix)

    @torch.no_grad()
    def accept(self, verified: Verified) -> list[int]:
        """Keep the prefix and the accepted path's target cache entries, re-run the head over the
        accepted tokens with the target's true features (EAGLE §3.3); the bonus is the next root.
        -> the tokens the generation keeps (`kept_tokens`); `stop` says if it has ended."""
        start = time.perf_counter()
        keep_cache_entries(self.cache, verified.prefix, verified.path)
        compacted = time.perf_counter()
        self.drafter.extend(verified.features[verified.path], verified.new_tokens)
        self.seconds["verify"] += compacted - start
        self.seconds["draft"] += time.perf_counter() - compacted
        new = kept_tokens(verified.new_tokens, len(self.output_ids), self.limit,
                          self.target.eos_token_ids)
        self.output_ids += new
        self.stop = stop_reason(self.output_ids, self.limit, self.max_new_tokens,
                                self.target.eos_token_ids)
        self.root = verified.bonus
        return new


def kept_tokens(new: list[int], produced: int, limit: int, eos) -> list[int]:
    """A cycle's tokens that a generation keeps: up to the first EOS or its `limit`-th token
    (`produced` came before this cycle).

    >>> kept_tokens([5, 6, 7], produced=2, limit=4, eos={9}), kept_tokens([9, 6], 0, 4, {9})
    ([5, 6], [9])
    """
    for i, token in enumerate(new):
        if token in eos or produced + i + 1 >= limit:
            return new[:i + 1]
    return new


@torch.no_grad()
def generate(target, head, prompt, max_new_tokens: int = 128, temperature: float = 0.0,
             top_p: float = 1.0, top_k: int = 0, tree=DynamicTree(), seed: int | None = 0,
             streamer=None, drafter=None) -> Generation:
    """EAGLE decoding (EAGLE §3): draft a tree with the head, verify it in one target forward,
    one `EagleDecoder.step` after another until it stops.

    The output is lossless: token-identical to `generate_vanilla` when greedy, and distributed
    exactly like it when sampling. `tree` and `drafter` as in `EagleDecoder`.
    """
    check_max_new_tokens(max_new_tokens)
    ids = prepare_prompt(target, prompt)   # templating and tokenising stay off the clock
    start = time.perf_counter()
    dec = EagleDecoder(target, head, ids, tree, SamplingConfig(temperature, top_p, top_k), seed,
                       drafter, max_new_tokens)
    cycles, depth_tries, depth_hits, confidence = [], {}, {}, []
    if streamer is not None:
        streamer([dec.root])
    while dec.stop is None:
        cycle = dec.step()
        cycles.append(len(cycle.new_tokens))
        _count_depths(cycle.draft, cycle.verified.path, depth_tries, depth_hits, confidence)
        if streamer is not None:
            streamer(cycle.new_tokens)
    seconds = time.perf_counter() - start
    out, forwards, timer = dec.output_ids, dec.target_forwards, dec.seconds
    return Generation(dec.prompt_ids, out, target.decode(out), stats={
        "tree": str(dec.tree), "new_tokens": len(out), "seconds": seconds,
        "tokens_per_second": len(out) / seconds, "target_forwards": forwards,
        **cycle_stats(len(out), forwards), "cycle_lengths": cycles,
        "acceptance_per_depth": {d: depth_hits.get(d, 0) / n for d, n in sorted(depth_tries.items())},
        "draft_seconds": timer["draft"], "verify_seconds": timer["verify"],
        "other_seconds": seconds - timer["draft"] - timer["verify"],
        "head_forwards": dec.drafter.head_forwards, "confidence_accepted": confidence,
        "stop": dec.stop})


def _count_depths(draft, path, tries, hits, confidence):
    """Acceptance per depth d: P(a depth-d token is accepted | the path reached depth d - 1 and the
    tree offered a child there). Also (draft confidence, accepted?) pairs for EAGLE-2's calibration."""
    on_path = set(path)
    for d in range(1, len(path) + 1):
        parent = path[d - 1]
        kids = [c for c in draft.tree.children[parent] if draft.valid[c]]
        if not kids:
            break
        tries[d] = tries.get(d, 0) + 1
        if d < len(path):
            hits[d] = hits.get(d, 0) + 1
        confidence.extend((float(draft.confidence[c]), c in on_path) for c in kids)
