"""Decoding loops: vanilla autoregressive decoding (the baseline and the oracle's twin) and EAGLE.

Vanilla decoding runs one target forward per new token: that is what EAGLE speeds up. Its greedy
output is token-identical to Hugging Face `generate` in fp32, which the tests check; EAGLE's greedy
output must then be identical to vanilla's (lossless, EAGLE §3.3).

Every loop returns a `Generation` with the same `stats` contract the CLI prints with `--json`:
`new_tokens`, `seconds` (generation wall time, model loading excluded), `target_forwards`
(prefill included) and `tau` (new tokens per target forward).
"""
import time
from dataclasses import dataclass, field

import torch

from .errors import EagleMiniError
from .sampling import SamplingConfig, next_token
from .target import keep_cache_entries


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


def check_max_new_tokens(max_new_tokens: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise EagleMiniError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


@torch.no_grad()
def generate_vanilla(target, prompt, max_new_tokens: int = 128, temperature: float = 0.0,
                     top_p: float = 1.0, top_k: int = 0, seed: int | None = 0,
                     streamer=None) -> Generation:
    """One token per target forward. `streamer(list_of_new_ids)` is called as tokens arrive."""
    check_max_new_tokens(max_new_tokens)
    cfg = SamplingConfig(temperature, top_p, top_k)
    ids = prepare_prompt(target, prompt)
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    start = time.perf_counter()
    cache = target.new_cache()
    logits = target.forward(ids, cache, all_logits=False).logits[-1]
    forwards, out, stop = 1, [], "max_new_tokens"
    while True:
        token = next_token(logits, cfg, gen)
        out.append(token)
        if streamer is not None:
            streamer([token])
        if token in target.eos_token_ids:
            stop = "eos"
            break
        if len(out) >= max_new_tokens:
            break
        if len(ids) + len(out) >= target.context_length:
            stop = "context"
            break
        logits = target.forward([token], cache).logits[-1]
        forwards += 1
    seconds = time.perf_counter() - start
    return Generation(ids, out, target.decode(out), stats={
        "method": "vanilla", "new_tokens": len(out), "seconds": seconds,
        "tokens_per_second": len(out) / seconds, "target_forwards": forwards,
        "tau": len(out) / forwards, "stop": stop})


METHODS = {
    "eagle-chain": "chain:4",   # a chain of 4 draft tokens
    "eagle": "eagle1",          # EAGLE-1's static 26-token tree
    "eagle2": None,             # EAGLE-2 dynamic tree (DynamicTree defaults)
}


@torch.no_grad()
def generate(target, head, prompt, max_new_tokens: int = 128, temperature: float = 0.0,
             top_p: float = 1.0, top_k: int = 0, tree="eagle2", seed: int | None = 0,
             streamer=None, drafter=None) -> Generation:
    """EAGLE decoding (EAGLE §3): draft a tree with the head, verify it in one target forward.

    tree: a method name ("eagle-chain", "eagle", "eagle2", "auto": EAGLE-2 sized for this
    machine, see `auto.py`), a static tree spec ("eagle1",
    "chain:K", a choices list) or a `DynamicTree`. The output is lossless: token-identical to
    `generate_vanilla` when greedy, and distributed exactly like it when sampling.
    `drafter` replaces the head's `Drafter` with any object offering `extend`, `draft`, `sampled`,
    `generator` and `head_forwards` (notebooks plug in simple drafters; tests an oracle).
    """
    from .draft import Drafter, DynamicTree
    from .verify import SampledTreeRule, TopKTreeRule, verify_greedy, verify_sampling
    from .sampling import warp

    check_max_new_tokens(max_new_tokens)
    cfg = SamplingConfig(temperature, top_p, top_k)
    if isinstance(tree, str) and tree == "auto":
        from .auto import auto_tree
        tree = auto_tree(target, head)
    elif isinstance(tree, str) and tree in METHODS:
        tree = METHODS[tree] or DynamicTree()
    ids = prepare_prompt(target, prompt)
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    if drafter is None:
        drafter = Drafter(head, tree, temperature, top_p, top_k, generator=gen)
    else:
        drafter.generator = gen
    rule = SampledTreeRule() if drafter.sampled else TopKTreeRule()
    timer = {"draft": 0.0, "verify": 0.0}
    clock = time.perf_counter
    start = clock()

    cache = target.new_cache()
    step = target.forward(ids, cache, all_logits=False)
    root = next_token(step.logits[-1], cfg, gen)
    t = clock()
    drafter.extend(step.features, ids[1:] + [root])
    timer["draft"] += clock() - t
    out, cycles, depth_tries, depth_hits, confidence = [root], [], {}, {}, []
    stop = "eos" if root in target.eos_token_ids else "max_new_tokens"
    if streamer is not None:
        streamer([root])
    while stop != "eos" and len(out) < max_new_tokens:
        t = clock()
        draft = drafter.draft(root)
        timer["draft"] += clock() - t
        prefix = cache.get_seq_length()
        if prefix + draft.tree.num_nodes > target.context_length:
            stop = "context"
            break
        t = clock()
        step = target.forward(draft.tokens, cache, positions=draft.tree.positions(prefix),
                              tree_mask=draft.tree.mask)
        if cfg.greedy:
            path, bonus = verify_greedy(draft, step.logits)
        else:
            p = warp(step.logits, temperature, top_p, top_k)
            path, bonus = verify_sampling(draft, p, rule, generator=gen)
        keep_cache_entries(cache, prefix, path)
        timer["verify"] += clock() - t
        new = draft.tokens[path[1:]].tolist() + [bonus]
        cycles.append(len(new))
        _count_depths(draft, path, depth_tries, depth_hits, confidence)
        t = clock()
        drafter.extend(step.features[path], new)
        timer["draft"] += clock() - t
        for i, token in enumerate(new):
            if token in target.eos_token_ids or len(out) + i + 1 >= max_new_tokens:
                new = new[:i + 1]
                stop = "eos" if token in target.eos_token_ids else stop
                break
        out.extend(new)
        if streamer is not None:
            streamer(new)
        root = bonus
        if len(ids) + len(out) >= target.context_length:
            stop = "context"
            break
    seconds = clock() - start
    forwards = 1 + len(cycles)
    return Generation(ids, out, target.decode(out), stats={
        "method": "eagle", "tree": str(tree), "new_tokens": len(out), "seconds": seconds,
        "tokens_per_second": len(out) / seconds, "target_forwards": forwards,
        "tau": len(out) / forwards, "cycle_lengths": cycles,
        "mean_cycle_length": sum(cycles) / len(cycles) if cycles else 0.0,
        "acceptance_per_depth": {d: depth_hits.get(d, 0) / n for d, n in sorted(depth_tries.items())},
        "draft_seconds": timer["draft"], "verify_seconds": timer["verify"],
        "other_seconds": seconds - timer["draft"] - timer["verify"],
        "head_forwards": drafter.head_forwards, "confidence_accepted": confidence, "stop": stop})


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
