"""Run any method of the table (`eagle_mini/methods.py`) by name, on one clock.

Each row names its runner, and `RUNNERS` runs it: "plain" is `decode.generate_vanilla`;
"draft-verify" is `decode.generate` with the drafter the row's `drafter` class builds for its
tree and head kind (the EAGLE rows draft with a head, `prompt-lookup` with none); "hf" is Hugging
Face `generate` on the same model with the row's options. Method names are resolved here, at the
edge: the algorithm takes trees and drafters. "auto" is EAGLE-2 with the tree size measured for
this machine (`auto.py`): measuring the machine is the runtime's job, so it happens here too.

The clock. Every method is timed from the same point: after templating and tokenising the prompt
(`decode.prepare_prompt`), before the prefill; it stops when the last token is out. The bench
(`eagle_mini/measure/bench.py`) compares these `stats["seconds"]`, nothing else.
"""
import contextlib
import time

import torch

from eagle_mini.decode import (Generation, cycle_stats, generate, generate_vanilla, limit_stop,
                               prepare_prompt, stop_reason, token_limit)
from eagle_mini.errors import EagleMiniError
from eagle_mini.heads import head_kind
from eagle_mini.heads.eagle3 import KIND as EAGLE3_KIND
from eagle_mini.methods import DRAFTING, MEASURED, method, resolve_tree
from eagle_mini.sampling import SamplingConfig
from eagle_mini.runtime.auto import AutoChoice, auto_tree
from eagle_mini.runtime.exact import stock_forward
from eagle_mini.runtime.packed import pack_linears, packed_kind, stock_kernels


def pick_head(name: str, heads, pack_like=None):
    """The head method `name` drafts with. `heads` is one head, or {"eagle1": head, "eagle3": head}
    when a run compares both kinds (the row's head kind picks). A row that names the EAGLE-3 kind
    needs an EAGLE-3 head; the other EAGLE rows draft with whichever head they are given. Given a
    target as `pack_like`, the head's linears, its frozen ones too (a draft vocabulary's output
    rows), are packed as that target's are (`packed.py`): drafting is forwards too."""
    want = method(name).head
    if isinstance(heads, dict):
        heads = heads.get(want) or next(iter(heads.values()))
    if want == EAGLE3_KIND and head_kind(heads) != want:
        raise EagleMiniError(f"--method {name} drafts with an {want} head; this head is an "
                             f"{head_kind(heads)} head (train one with `train-head --kind {want}`, "
                             "or pass --head DIR)")
    kind = None if pack_like is None else packed_kind(pack_like.model)
    if kind:
        for module in (heads, *heads.frozen_linears()):
            pack_linears(module, kind)
    return heads


def method_tree(target, head, name: str, tree=None):
    """The tree method `name` decodes with: `tree` (a method name or a spec, `resolve_tree`) when
    given, the measured choice for a method whose tree is measured ("auto": an `AutoChoice`, its
    drafter and tree), else the table's."""
    row = method(name)
    if not row.drafts:
        raise EagleMiniError(f"{name!r} drafts no tree; methods that draft: {', '.join(DRAFTING)}")
    if tree is not None:
        return resolve_tree(tree)
    if row.tree == MEASURED:
        return auto_tree(target, pick_head(name, head, pack_like=target))
    return resolve_tree(row.tree)


def _no_options(row, options):
    if options:
        raise EagleMiniError(f"{row.name} takes no Hugging Face options; got {sorted(options)}")


def _plain(target, head, row, prompt, max_new_tokens, tree, options, **kw) -> Generation:
    _no_options(row, options)
    return generate_vanilla(target, prompt, max_new_tokens, **kw)


def _draft_verify(target, head, row, prompt, max_new_tokens, tree, options, **kw) -> Generation:
    _no_options(row, options)
    head = pick_head(row.name, head, pack_like=target) if row.is_eagle else None
    shape = tree if isinstance(tree, AutoChoice) else method_tree(target, head, row.name, tree)
    sampling = SamplingConfig(kw.get("temperature", 0.0), kw.get("top_p", 1.0), kw.get("top_k", 0))
    if isinstance(shape, AutoChoice):   # `auto`'s measured drafter and tree
        drafter, shape = shape.build(head, sampling), shape.tree
    else:
        drafter = row.drafter.build(head, shape, sampling)
    return generate(target, head, prompt, max_new_tokens, tree=shape, drafter=drafter, **kw)


def _hf(target, head, row, prompt, max_new_tokens, tree, options, streamer=None, **kw) -> Generation:
    if streamer is not None:
        raise EagleMiniError(f"{row.name} runs Hugging Face `generate`, which streams nothing here")
    return run_hf(target, prompt, max_new_tokens, {**row.hf_options, **options}, **kw)


# How each runner of the table runs a row (`methods.Method.runner`).
RUNNERS = {"plain": _plain, "draft-verify": _draft_verify, "hf": _hf}


def run_method(target, head, name, prompt, max_new_tokens, tree=None, options=None,
               **kw) -> Generation:
    """One generation with a method name, through its row's runner; `tree` overrides a drafting
    method's tree, `options` adds to an "hf" row's options (a bench variant's). `kw`:
    temperature, top_p, top_k, seed, streamer."""
    row = method(name)
    gen = RUNNERS[row.runner](target, head, row, prompt, max_new_tokens, tree, options or {}, **kw)
    gen.stats["method"] = name
    return gen


class ForwardCounter:
    """Counts target forwards of HF `generate` (a hook on the model's forward)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1

    def close(self):
        self.handle.remove()


def static_cache_len(needed: int) -> int:
    """The static cache a compiled `generate` sizes for `needed` positions: the next power of two
    from 256, so that prompts of many lengths share a few compiled graphs (HF keeps the largest
    cache it has made and reuses it; a bench sizes one for its longest prompt up front).

        >>> static_cache_len(100), static_cache_len(257), static_cache_len(2048)
        (256, 512, 2048)
    """
    return max(256, 1 << (needed - 1).bit_length())


def compile_options(device) -> dict:
    """`generate`'s options for a static cache and a compiled decoding step (HF's own route: the
    prefill runs eager, every later step through `torch.compile`). On a GPU HF compiles by itself
    with its default `CompileConfig` (CUDA graphs); on a CPU it must be told to
    (`_compile_all_devices`), and inductor's freezing lets it lay the weights out once, as
    `packed.py` does by hand."""
    from transformers import CompileConfig
    if torch.device(device).type == "cuda":
        config = CompileConfig(dynamic=False)
    else:
        config = CompileConfig(dynamic=False, mode=None, options={"freezing": True})
        config._compile_all_devices = True
    return {"cache_implementation": "static", "compile_config": config}


def hf_model_as_stock(target, compiled: bool):
    """The context HF `generate` runs in: the target as it is, or for the compiled peer the stock
    model a learner has (exact mode's edits suspended, the stock matmul kernels), so that inductor
    compiles Hugging Face's own forward."""
    stack = contextlib.ExitStack()
    if compiled:
        if target.runtime.is_exact:
            stack.enter_context(stock_forward(target))
        stack.enter_context(stock_kernels(target.model))
    return stack


def run_hf(target, prompt, max_new_tokens, options: dict, temperature: float = 0.0,
           top_p: float = 1.0, top_k: int = 0, seed: int | None = 0) -> Generation:
    """Hugging Face `generate` on the target's model with `options`, timed on the same clock, with
    the stats the package's loops give where they exist; it stops where they stop at the end of the
    context (`decode.token_limit`), which HF's `generate` does not check.

    `options["compiled"]`: the static-cache, compiled-step peer on the stock model
    (`compile_options`, `hf_model_as_stock`), its cache `options["max_cache_len"]` long or
    `static_cache_len` of what this call needs. Its forwards are not hooked (a hook would be traced
    into the compiled graph): it is vanilla, one forward per new token."""
    ids = prepare_prompt(target, prompt)
    limit = token_limit(target, ids, max_new_tokens)   # HF stops only at an EOS or at the limit
    options = dict(options)
    compiled = options.pop("compiled", False)
    if compiled:
        options.setdefault("max_cache_len", static_cache_len(len(ids) + limit))
        options.update(compile_options(target.device))
    kw = {"do_sample": temperature > 0, "max_new_tokens": limit,
          "eos_token_id": sorted(target.eos_token_ids) or None, "pad_token_id": 0, **options}
    if temperature > 0:
        kw["temperature"] = temperature
        kw.update({k: v for k, v in (("top_p", top_p), ("top_k", top_k)) if v not in (1.0, 0)})
    prompt_tensor = torch.tensor([ids], device=target.device)
    counter = None if compiled else ForwardCounter(target.model)
    # HF samples from torch's global generator: seeded for this call only, then as it was
    devices = [target.device.index or 0] if target.device.type == "cuda" else []
    try:
        with hf_model_as_stock(target, compiled), torch.random.fork_rng(
                devices=devices, enabled=seed is not None and temperature > 0):
            if seed is not None and temperature > 0:
                torch.manual_seed(seed)
            start = time.perf_counter()
            out = target.model.generate(prompt_tensor, **kw)
            seconds = time.perf_counter() - start
    finally:
        if counter is not None:
            counter.close()
    new = out[0, len(ids):].tolist()
    forwards = len(new) if compiled else counter.calls
    stop = stop_reason(new, limit, max_new_tokens, target.eos_token_ids) or limit_stop(
        len(new), max_new_tokens)
    return Generation(ids, new, target.decode(new), stats={
        "new_tokens": len(new), "seconds": seconds, "tokens_per_second": len(new) / seconds,
        "target_forwards": forwards, **cycle_stats(len(new), forwards), "stop": stop})

