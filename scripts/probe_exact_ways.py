"""Probe: other ways to make a bf16 tree forward exact, and what each costs against stock.

Exact mode (`runtime/exact/`) makes every tree node's logits bit-identical to the one-token step
vanilla decoding takes there, by running vanilla and verification through the same batch-invariant
computation: attention over fixed key blocks (`blocks.blocked`) and `down_proj` summed over fixed
K-chunks (`FixedKLinear`). Vanilla then pays for it too. This probe asks whether a way exists that
leaves vanilla's step as stock as it is, or costs less, and measures each in one run:

* `stock`: the stock forward (not exact: the baseline);
* `blocks+fixedk`: exact mode as it runs (`apply`, `BLOCKS`);
* `blocks+stock`: the blocked attention with stock linears (what the attention alone costs);
* `grouped+fixedk`: exact mode's `GROUPED` way (queries with as many keys batched, math attention);
* `views+rows`: vanilla's step left fully stock; a tree query gets the stock one-query
  `scaled_dot_product_attention` call over a view of exactly its keys (the cache itself where the
  query's path is laid out contiguously, else a scratch copy the path is written into), and
  `down_proj` runs one row at a time through the stock (packed) linear. Exact against the stock
  one-token forward, by construction, if the kernels depend only on their inputs' values.

Part one times `scaled_dot_product_attention` in bf16 on its own: one query alone (vanilla's
step) against a batch of masked queries (a stock tree's call), per key count. Part two checks
every way on trees of 4, 8 and 16 nodes and a chain of 4 over three prefixes (each node against
its one-token replay, bitwise; `views+rows` against the stock forward), then times c(1), the chain
and the trees over a 200-token prefix, the ways interleaved round by round.

    python scripts/probe_exact_ways.py --out data/results/probe_exact_ways.json
"""
import argparse
import statistics
import sys
import time
import weakref

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

WAYS = ("stock", "blocks+fixedk", "blocks+stock", "grouped+fixedk", "views+rows")
_PATHS = [None, None]   # (weak reference to a mask, its paths): every layer gets the same mask


def paths_of(attention_mask, q: int, k: int):
    """The tree's root-to-leaf paths, longest first: (cache indices of the path's nodes, whether
    they sit right after the committed keys in order, [(node, depth)] not yet computed)."""
    if attention_mask is None:
        allowed = torch.ones(q, q, dtype=torch.bool).tril()
    elif _PATHS[0] is not None and _PATHS[0]() is attention_mask:
        return _PATHS[1]
    else:
        rows = attention_mask[0, 0]
        allowed = (rows if rows.dtype == torch.bool else rows == 0)[:, k - q:].cpu()
    committed = k - q
    ancestors = [row.nonzero().squeeze(1).tolist() for row in allowed]
    below = allowed.clone().fill_diagonal_(False)
    leaves = [i for i in range(q) if not bool(below[:, i].any())]
    done, paths = set(), []
    for leaf in sorted(leaves, key=lambda i: -len(ancestors[i])):
        nodes = ancestors[leaf]
        todo = [(j, depth) for depth, j in enumerate(nodes) if j not in done]
        done.update(j for j, _ in todo)
        paths.append((torch.tensor(nodes) + committed, nodes == list(range(len(nodes))), todo))
    if attention_mask is not None:
        _PATHS[:] = [weakref.ref(attention_mask), (committed, paths)]
    return committed, paths


def views_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                    is_causal=None, **kwargs):
    """HF attention function: every query through the stock one-query SDPA call over its keys."""
    q, k = query.shape[2], key.shape[2]
    if q == 1:
        return sdpa_attention_forward(module, query, key, value, None, scaling=scaling,
                                      is_causal=False)
    if q == k and attention_mask is None:   # a prefill: one causal call, shared by every method
        return sdpa_attention_forward(module, query, key, value, None, scaling=scaling)
    committed, paths = paths_of(attention_mask, q, k)
    out, scratch = [None] * q, None
    for nodes, contiguous, todo in paths:
        if not todo:
            continue
        if contiguous:
            keys, values = key, value
        else:
            if scratch is None:
                scratch = (key.clone(), value.clone())
            keys, values = scratch
            keys[:, :, committed:committed + len(nodes)] = key[:, :, nodes]
            values[:, :, committed:committed + len(nodes)] = value[:, :, nodes]
        for j, depth in todo:
            n = committed + depth + 1
            out[j] = sdpa_attention_forward(module, query[:, :, j:j + 1], keys[:, :, :n],
                                            values[:, :, :n], None, scaling=scaling,
                                            is_causal=False)[0]
    return torch.cat(out, dim=1), None


def row_by_row(exact):
    class RowByRowStock(exact.ExactLinear):
        """Every row through the linear it replaced (packed or not), one row per call."""

        def forward(self, x):
            rows, linear = x.reshape(-1, self.in_features), self.replaced[0]
            if len(rows) == 1:
                return linear(x)
            out = torch.cat([linear(rows[i:i + 1]) for i in range(len(rows))])
            return out.view(*x.shape[:-1], self.out_features)
    return RowByRowStock


class Ways:
    """Switches a target between `WAYS`, the exact linears made once (packing is not timed)."""

    def __init__(self, target, chunked: dict, rows: int):
        from eagle_mini.runtime import exact
        self.exact, self.target, self.chunked, self.rows = exact, target, chunked, rows
        self.made = {}
        AttentionInterface.register("eagle_mini_probe_views", views_attention)
        # each forward's keys made once, as `apply` has them (a no-op outside exact attention)
        target.model.model.register_forward_pre_hook(exact.pass_keys, with_kwargs=True)

    def set(self, way: str):
        exact, model = self.exact, self.target.model
        exact.restore(self.target)
        if way == "stock":
            return
        attention, linears = way.split("+")
        for parent, name, linear in exact.linear_modules(model):
            chunk = self.chunked.get(exact.shape_of(linear))
            if chunk and linears != "stock":
                if (id(linear), linears) not in self.made:
                    self.made[id(linear), linears] = (exact.FixedKLinear(linear, chunk)
                                                      if linears == "fixedk" else
                                                      row_by_row(exact)(linear))
                setattr(parent, name, self.made[id(linear), linears])
        if attention == "views":
            model.set_attn_implementation("eagle_mini_probe_views")
        else:
            model.set_attn_implementation(exact.ATTENTION)
            model.config.exact_attention = exact.BLOCKS if attention == "blocks" else exact.GROUPED
            model.config.exact_rows = self.rows if attention == "blocks" else 0


def shapes():
    from eagle_mini.tree import chain, from_choices
    return {"chain 4": chain(3),
            "tree 4": from_choices([[0], [1], [0, 0]]),
            "tree 8": from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]),
            "tree 16": from_choices([[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1],
                                     [2, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0],
                                     [0, 0, 0, 0]])}


def time_sdpa(keys=(200, 400), queries=(1, 2, 4, 8), repeats: int = 300) -> list[dict]:
    """Microseconds per bf16 SDPA call: `n` queries alone, each its own batch element (the
    one-query call, n times over), and `n` queries in one masked call (a stock tree's)."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for n_keys in keys:
        for n in queries:
            alone = [torch.randn(n, h, length, 64, generator=g).bfloat16()
                     for h, length in ((9, 1), (3, n_keys), (3, n_keys))]
            tree = [torch.randn(1, h, length, 64, generator=g).bfloat16()
                    for h, length in ((9, n), (3, n_keys + n), (3, n_keys + n))]
            mask = torch.ones(n, n_keys + n, dtype=torch.bool).tril(n_keys)
            calls = {"queries alone": lambda: F.scaled_dot_product_attention(*alone, enable_gqa=True),
                     "one masked call": lambda: F.scaled_dot_product_attention(
                         *tree, attn_mask=mask, enable_gqa=True)}
            row = {"keys": n_keys, "queries": n}
            for name, call in calls.items():
                for _ in range(20):
                    call()
                start = time.perf_counter()
                for _ in range(repeats):
                    call()
                row[name] = round((time.perf_counter() - start) / repeats * 1e6, 1)
            rows.append(row)
    return rows


@torch.no_grad()
def check(target, ways: Ways, way: str, reference: str, prefixes=(126, 300, 77)) -> dict:
    """Tree nodes whose logits equal their one-token replay under `reference`, bitwise."""
    from eagle_mini.target import crop_cache
    g = torch.Generator().manual_seed(0)
    equal = total = 0
    for prefix_len in prefixes:
        for tree in shapes().values():
            prefix = torch.randint(0, target.vocab_size, (prefix_len,), generator=g).tolist()
            tokens = torch.randint(0, target.vocab_size, (tree.num_nodes,), generator=g)
            ways.set(way)
            cache = target.new_cache()
            target.forward(prefix, cache)
            logits = target.forward(tokens, cache, positions=tree.positions(prefix_len),
                                    tree_mask=tree.mask).logits
            ways.set(reference)
            for path in tree.retrieve_paths.tolist():
                crop_cache(cache, prefix_len)
                for node in (n for n in path if n >= 0):
                    replay = target.forward([int(tokens[node])], cache).logits[-1]
                    equal += torch.equal(replay, logits[node])
                    total += 1
    return {"way": way, "against": reference, "equal": equal, "nodes": total}


@torch.no_grad()
def time_ways(target, ways: Ways, repeats: int, prefix_len: int = 200) -> dict:
    """{way: {forward: median ms}}: c(1), then each shape, over a cached prefix, the ways
    interleaved (order reversed every other round), two warm-up rounds."""
    from eagle_mini.runtime.cost import prefilled_cache
    from eagle_mini.target import crop_cache
    g = torch.Generator().manual_seed(1)
    ways.set("stock")
    cache = prefilled_cache(target, prefix_len, g)
    forwards = {"c(1)": None, **shapes()}
    times = {(w, f): [] for w in WAYS for f in forwards}
    for r in range(2 + repeats):
        for way in WAYS if r % 2 == 0 else WAYS[::-1]:
            ways.set(way)
            for name, tree in forwards.items():
                n = 1 if tree is None else tree.num_nodes
                tokens = torch.randint(0, target.vocab_size, (n,), generator=g)
                kwargs = {} if tree is None else {"positions": tree.positions(prefix_len),
                                                  "tree_mask": tree.mask}
                start = time.perf_counter()
                target.forward(tokens, cache, **kwargs)
                if r >= 2:
                    times[way, name].append((time.perf_counter() - start) * 1e3)
                crop_cache(cache, prefix_len)
    return {w: {f: round(statistics.median(times[w, f]), 2) for f in forwards} for w in WAYS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", help="JSON path for the results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from eagle_mini import load_target
    from eagle_mini.results import machine_info, results_json
    from eagle_mini.runtime.exact import restore, use_exact
    sdpa = time_sdpa()
    for row in sdpa:
        print(row, flush=True)
    target = load_target("smollm2-135m", dtype="bf16", pack=True)
    record = use_exact(target, "on")
    if not record.exact:
        sys.exit(f"exact mode is off here: {record.line()}")
    restore(target)
    ways = Ways(target, dict(record.chunked), record.rows)
    checks = [check(target, ways, w, "stock" if w == "views+rows" else w)
              for w in WAYS if w not in ("stock", "blocks+stock")]
    for row in checks:
        print(row, flush=True)
    ms = time_ways(target, ways, args.repeats)
    for way, row in ms.items():
        print(f"{way:>15}: " + ", ".join(f"{f} {v:.1f}" for f, v in row.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(results_json({
                "command": "python scripts/probe_exact_ways.py " + " ".join(sys.argv[1:]),
                "sdpa_us": sdpa, "checks": checks, "ms": ms, "prefix_len": 200,
                "repeats": args.repeats, "exact": record.line(), "machine": machine_info()}))


if __name__ == "__main__":
    main()
