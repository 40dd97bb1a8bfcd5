"""Writes notebooks/05b_eagle_in_one_page.ipynb (unexecuted) from the cells below."""
import json
import sys
from pathlib import Path

SETUP = {"tags": ["exercise-setup"]}
SOLUTION = {"nbgrader": {"grade": False, "grade_id": "nb05_one_page_verify", "locked": False,
                         "schema_version": 3, "solution": True, "task": False}}
TESTS = {"nbgrader": {"grade": True, "grade_id": "nb05_one_page_verify_test", "locked": True,
                      "points": 3, "schema_version": 3, "solution": False, "task": False}}

CELLS = []


def md(text, meta=None):
    CELLS.append(("markdown", text.strip("\n"), meta or {}))


def code(text, meta=None):
    CELLS.append(("code", text.strip("\n"), meta or {}))


md('''
# 05b · EAGLE in one page

Notebooks 01-05 took EAGLE apart: the head (03), the tree and its mask (04), verification and the
cache bookkeeping (05), each time through the package. Here you put it back together **from
torch, the Hugging Face model and the shipped head's weights alone**: nothing below imports
`eagle_mini`'s decoding, drafting, tree or verification code. The package only loads the target
(the GGUF as a Hugging Face model) and, in the checks, answers back.

**Why here.** This is the capstone of the core: every piece was explained in 01-05, so each step
below is a few lines you can read against what you learnt. Notebook 06 then asks what all of this
buys on a real machine, and it measures the package's version of this loop.

EAGLE (arXiv 2401.15077) in four lines:
1. a small head predicts the target's next *feature* (its last hidden state) from the current
   feature and the token one step ahead (§3.1);
2. the head drafts a tree of candidate tokens (§3.2);
3. the target scores every node in one forward, with a mask that lets each node see only its
   ancestors, and keeps the longest path it agrees with, plus one token of its own, the bonus (§3.3);
4. the caches keep that path; the head re-reads the target's true features of it; repeat.

**After this notebook you can** write each of these steps, check each against an oracle (the
head against the package's head, a tree forward against plain forwards, a cycle against vanilla
decoding), and say what the package adds to the loop you wrote.
''')

code('''
import copy
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

import eagle_mini
from eagle_mini import load_target           # loading only: the GGUF as a Hugging Face model
from eagle_mini.course import pick, scale

torch.manual_seed(0)
target = load_target("smollm2-135m", dtype="fp32")
model, tokenizer = target.model, target.tokenizer
HEAD_DIR = Path(eagle_mini.__file__).parents[1] / "data" / "heads" / "smollm2-135m"


def chat(text):
    """A user turn -> the prompt's token ids, as the target's chat template writes them."""
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                              add_generation_prompt=True, return_dict=False))


prompt_ids = chat("Explain in three sentences why the sky is blue.")
print("scale:", scale(), "| target:", target.name, "| prompt:", len(prompt_ids), "tokens")
''', SETUP)

md('''
## Step 1: the head

One decoder layer of the target's own type, fed `fc(cat(embed(t[i+1]), f[i]))`: the feature at
position i and the token one step *ahead* of it. Its output is the head's guess of `f[i+1]`, and
the target's own `lm_head` turns a feature into next-token logits. The layer's input norm is
dropped (the features come out of the target's final norm already); the embedding and the output
rows are the target's. The shipped head drafts over the most frequent tokens only
(`draft_to_target` maps them back to the target's ids).
''')

code('''
class Head(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        one = copy.deepcopy(config)
        one.num_hidden_layers, one._attn_implementation = 1, "sdpa"
        self.fc = torch.nn.Linear(2 * config.hidden_size, config.hidden_size, bias=True)
        layer = LlamaDecoderLayer(one, layer_idx=0)
        layer.input_layernorm = torch.nn.Identity()
        self.layers = torch.nn.ModuleList([layer])
        self.rotary = LlamaRotaryEmbedding(one)

    def forward(self, features, shifted, cache, positions, mask):
        """features [n, H] and the tokens one step ahead [n] -> predicted next features [n, H]."""
        x = self.fc(torch.cat([model.model.embed_tokens(shifted), features], -1))[None]
        out = self.layers[0](x, attention_mask=mask, position_ids=positions[None],
                             past_key_values=cache, use_cache=True,
                             position_embeddings=self.rotary(x, positions[None]))
        return out[0]                                         # batch of one


weights = load_file(HEAD_DIR / "model.safetensors")
draft_to_target = weights.pop("draft_to_target")
head = Head(model.config).eval()
head.load_state_dict({k: v.float() for k, v in weights.items()})
out_rows = model.lm_head.weight[draft_to_target].detach()   # the draft vocabulary's output rows


def draft_topk(predicted, k):
    """The head's k best next tokens (target ids) for each predicted feature [n, H] -> [n, k]."""
    return draft_to_target[(predicted @ out_rows.T).topk(k, dim=-1).indices]
''', SETUP)

md('''
**Check.** On the prompt, with its true features: our head's predictions equal the package's head
(`DraftHead`, loaded from the same file), and its top-1 guesses the prompt's token after next as
often as it does.
''')

code('''
from eagle_mini.heads import load_head     # the package's head: only to check ours

with torch.no_grad():
    prompt = torch.tensor(prompt_ids)
    features = model.model(input_ids=prompt[None]).last_hidden_state[0]
    shifted = prompt[1:]                    # t[i+1] beside f[i]
    n = len(shifted)
    causal_mask = torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(),
                                                      torch.finfo(torch.float32).min)
    ours = head(features[:n], shifted, DynamicCache(), torch.arange(n), causal_mask)
    package = load_head(HEAD_DIR, target)
    theirs = package(features[None, :n], shifted[None], cache=package.new_cache())[0]
print("largest difference from the package's head:", float((ours - theirs).abs().max()))
assert torch.allclose(ours, theirs, atol=1e-4)
guesses = draft_topk(ours[:-1], 1)[:, 0]    # from f[i] and t[i+1]: a guess of t[i+2]
print(f"top-1 guesses the prompt's next token at {float((guesses == prompt[2:]).float().mean()):.0%}"
      f" of its {len(guesses)} positions")
''')

md('''
## Step 2: masks, the target's forward, and vanilla decoding

A forward of n new tokens over `past` cached ones sees every cached token, and among the new ones
what `allowed` (n x n, bool) says: a chain is lower-triangular, a tree is "my ancestors and me".
Hugging Face's layers take that as an additive mask: 0 where a token may look, minus infinity
where it may not. Vanilla decoding, the baseline and the oracle, is the same forward one token
at a time.
''')

code('''
def additive_mask(allowed, past):
    """[n, m] bool over the last m entries -> the [1, 1, n, past + n] mask HF's layers take."""
    n, m = allowed.shape
    full = torch.cat([torch.ones(n, past + n - m, dtype=torch.bool), allowed], 1)
    return torch.zeros(full.shape).masked_fill(~full, torch.finfo(torch.float32).min)[None, None]


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


def target_forward(tokens, cache, positions, allowed):
    """New tokens at `positions` over the cached ones -> (their features, their logits)."""
    out = model.model(input_ids=tokens[None], position_ids=positions[None], past_key_values=cache,
                      attention_mask=additive_mask(allowed, cache.get_seq_length()), use_cache=True)
    features = out.last_hidden_state[0]
    return features, model.lm_head(features)


@torch.no_grad()
def vanilla_generate(prompt_ids, max_new_tokens):
    cache, tokens, output = DynamicCache(), torch.tensor(prompt_ids), []
    positions = torch.arange(len(tokens))
    while len(output) < max_new_tokens:
        _, logits = target_forward(tokens, cache, positions, causal(len(tokens)))
        output.append(int(logits[-1].argmax()))
        tokens, positions = torch.tensor(output[-1:]), torch.tensor([cache.get_seq_length()])
    return output
''', SETUP)

code('''
n_check = pick(8, 24)
hf = model.generate(torch.tensor([prompt_ids]), max_new_tokens=n_check, do_sample=False,
                    min_new_tokens=n_check)[0, len(prompt_ids):].tolist()
mine = vanilla_generate(prompt_ids, n_check)
print("vanilla_generate equals Hugging Face's greedy generate:", mine == hf)
assert mine == hf
''')

md('''
## Step 3: a tree, as paths of ranks

A tree is a list of paths from the root (EAGLE's "choices"): `[0, 1]` is the head's 2nd guess
after its 1st guess after the root. Node 0 is the root, the last token the target produced. A node's
ancestors give its row of the mask; its depth gives its position. A **chain** is the tree in which
every node is the head's first guess.
''')

code('''
class Tree:
    """A draft tree from EAGLE's choices: each node's path of ranks, its parent, its rank among
    its siblings, its depth, and its ancestors (itself included) as a row of bools."""

    def __init__(self, choices):
        self.paths = [()] + [tuple(c) for c in choices]
        self.parent = [-1] + [self.paths.index(p[:-1]) for p in self.paths[1:]]
        self.rank = [0] + [p[-1] for p in self.paths[1:]]
        self.depth = torch.tensor([len(p) for p in self.paths])
        self.ancestors = torch.tensor([[q == p[:len(q)] for q in self.paths] for p in self.paths])


CHAIN = [[0], [0, 0], [0, 0, 0]]
SMALL_TREE = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
chain, tree = Tree(CHAIN), Tree(SMALL_TREE)
print("chain mask:\\n", chain.ancestors.int(), "\\ntree mask:\\n", tree.ancestors.int())
''', SETUP)

md('''
**Check.** One forward of the tree's tokens (any tokens will do) over the prompt's cache must give,
at every node, the logits that a plain forward of the prompt plus that node's path gives. That is
what the mask and the positions are for.
''')

code('''
with torch.no_grad():
    cache = DynamicCache()
    target_forward(prompt, cache, torch.arange(len(prompt)), causal(len(prompt)))
    tokens = torch.randint(0, model.config.vocab_size, (len(tree.paths),))
    _, tree_logits = target_forward(tokens, cache, len(prompt) + tree.depth, tree.ancestors)
    worst = 0.0
    for i in range(len(tree.paths)):
        alone = torch.cat([prompt, tokens[tree.ancestors[i]]])
        plain = model(input_ids=alone[None]).logits[0, -1]
        worst = max(worst, float((plain - tree_logits[i]).abs().max()))
print(f"one tree forward vs {len(tree.paths)} plain forwards, largest logit difference: {worst:.1e}")
assert worst < 1e-3
''')

md('''
## Step 4: the prefill, then drafting level by level

The prefill runs the prompt through the target once; its greedy token is the first root. The head
then reads the prompt's true features, each beside the token one step ahead (the last one beside
the root), and its last prediction is its guess of the root's feature: the root's children come
from it.

Drafting runs the head once per depth, on that depth's nodes that have children. Their cache
entries go after the *stable* ones (the accepted text), and a node's entry may read only its
ancestors' entries: the same mask rule as the target's, on the head's cache.
''')

code('''
@torch.no_grad()
def prefill(prompt_ids):
    prompt = torch.tensor(prompt_ids)
    n = len(prompt)
    target_cache, head_cache = DynamicCache(), DynamicCache()
    features, logits = target_forward(prompt, target_cache, torch.arange(n), causal(n))
    root = int(logits[-1].argmax())
    shifted = torch.cat([prompt[1:], torch.tensor([root])])
    predicted = head(features, shifted, head_cache, torch.arange(n), additive_mask(causal(n), 0))
    return target_cache, head_cache, root, predicted[-1]


@torch.no_grad()
def draft_tree(tree, root, root_prediction, head_cache, stable):
    """The tree's tokens [nodes]; the head's draft entries are left after its `stable` ones."""
    n = len(tree.paths)
    tokens = torch.full((n,), root)
    predicted = {0: root_prediction}   # node -> the head's guess of the feature at that node
    in_cache = []                      # nodes with head entries, in cache order
    for d in range(1, int(tree.depth.max()) + 1):
        level = [i for i in range(n) if tree.depth[i] == d]
        parents = sorted({tree.parent[i] for i in level})
        guesses = draft_topk(torch.stack([predicted[p] for p in parents]), 1 + max(tree.rank))
        for i in level:
            tokens[i] = guesses[parents.index(tree.parent[i]), tree.rank[i]]
        grow = [i for i in level if i in tree.parent]
        if grow:
            cols = in_cache + grow
            mask = additive_mask(tree.ancestors[grow][:, cols], head_cache.get_seq_length())
            out = head(torch.stack([predicted[tree.parent[i]] for i in grow]), tokens[grow],
                       head_cache, torch.full((len(grow),), stable - 1 + d), mask)
            predicted.update({i: out[k] for k, i in enumerate(grow)})
            in_cache = cols
    return tokens
''', SETUP)

md('''
**Check.** A chain is drafted first, then the small tree from the same state. The tree's rank-0
path must hold the chain's tokens: the other branches' entries sit in the same cache, and the
mask keeps them out of sight.
''')

code('''
target_cache, head_cache, root, root_prediction = prefill(prompt_ids)
stable = head_cache.get_seq_length()
chain_tokens = draft_tree(chain, root, root_prediction, head_cache, stable)
head_cache.crop(stable)                     # drop the chain's draft entries
tree_tokens = draft_tree(tree, root, root_prediction, head_cache, stable)
head_cache.crop(stable)
first_guesses = [tree.paths.index((0,) * d) for d in range(4)]
print("chain:", repr(tokenizer.decode(chain_tokens)))
print("tree: ", [repr(tokenizer.decode(t)) for t in tree_tokens.tolist()])
assert tree_tokens[first_guesses].tolist() == chain_tokens.tolist()
''')

md('''
## Step 5: greedy verification and the bonus token (your turn)

One target forward scores every node: row i of the logits is the target's next-token choice
*after node i*. Walk down from the root: the walk goes on to a child whose token is the target's
choice at the current node, and stops where no child is. The target's choice at the last node of
the walk is the **bonus** token: the target's own, so a cycle always adds at least one token.

Write `verify(tree, tokens, logits)`: it returns the accepted path as a list of node indices
(starting with the root, 0) and the bonus token as an int. Where two children hold the same
token, take the first in node order.
''')

code('''
def verify(tree, tokens, logits):
    ### BEGIN SOLUTION
    path = [0]
    while True:
        want = int(logits[path[-1]].argmax())
        match = [i for i in range(len(tree.paths))
                 if tree.parent[i] == path[-1] and tokens[i] == want]
        if not match:
            return path, want
        path.append(match[0])
    ### END SOLUTION


with torch.no_grad():
    past = target_cache.get_seq_length()
    features, logits = target_forward(tree_tokens, target_cache, past + tree.depth, tree.ancestors)
path, bonus = verify(tree, tree_tokens, logits)
print("accepted path:", path, "| bonus:", repr(tokenizer.decode([bonus])))
''', SOLUTION)

code('''
new = [root] + [int(tree_tokens[i]) for i in path[1:]] + [bonus]
assert new == vanilla_generate(prompt_ids, len(new)), "not what the target says one token at a time"
planted = torch.full((len(tree.paths), 5), -1.0)
planted[0, 3] = planted[tree.paths.index((0,)), 4] = planted[tree.paths.index((0, 0)), 1] = 1.0
planted_tokens = torch.tensor([0, 3, 2, 1, 4, 0, 3, 2])
assert verify(tree, planted_tokens, planted) == ([0, 1, 4], 1)
print(f"the cycle's {len(new) - 1} new tokens are vanilla's; the planted tree checks out")
### BEGIN HIDDEN TESTS
def hidden_test():
    import random

    import eagle_mini.verify as oracle
    from eagle_mini.course.assignments import random_choices
    from eagle_mini.course.guard import reference_off
    from eagle_mini.course.submission import plain

    def walk(t, tokens, logits):   # the walk, as a set of agreeing nodes
        best = logits.argmax(-1).tolist()
        agree = [True] + [False] * (len(t.paths) - 1)
        for i in range(1, len(t.paths)):
            agree[i] = agree[t.parent[i]] and int(tokens[i]) == best[t.parent[i]]
        path = [0]
        while True:
            kids = [i for i in range(len(t.paths)) if t.parent[i] == path[-1] and agree[i]]
            if not kids:
                return path, best[path[-1]]
            path.append(kids[0])

    rng = random.Random(2401)
    cases = []
    for _ in range(300):
        t = Tree(random_choices(rng, rng.randint(0, 25)))
        vocab = rng.choice([2, 3, 5, 50])
        logits = torch.randn(len(t.paths), vocab,
                             generator=torch.Generator().manual_seed(rng.randrange(10**6)))
        best = logits.argmax(-1).tolist()
        tokens = [rng.randrange(vocab)] + [best[t.parent[i]] if rng.random() < 0.7
                                           else rng.randrange(vocab) for i in range(1, len(t.paths))]
        cases.append((t, torch.tensor(tokens), logits))
    expected = [walk(*case) for case in cases]
    with reference_off(oracle.verify_greedy):
        got = [plain(verify(*case)) for case in cases]
    bad = [(case[0].paths, case[1].tolist()) for case, g, e in zip(cases, got, expected)
           if (list(g[0]), int(g[1])) != e]
    assert not bad, bad[:2]


hidden_test()
### END HIDDEN TESTS
''', TESTS)

md('''
## Step 6: cache bookkeeping

The target cached an entry for every node of the tree; only the accepted path's entries are true
text. Keep those, as if only the path had run. (The head's draft entries were cropped already:
the head re-reads the accepted tokens with the target's true features instead, in the loop below.)
''')

code('''
def keep(cache, past, path):
    """Keep the entries of the tree's nodes `path` (after `past` stable ones), in path order."""
    index = torch.tensor([past + i for i in path])
    kept = [(layer.keys[:, :, index], layer.values[:, :, index]) for layer in cache.layers]
    cache.crop(past)
    for i, (k, v) in enumerate(kept):
        cache.update(k, v, i)
''', SETUP)

md('''
**Check.** After `keep`, the cache holds what running the prompt and the accepted tokens as plain
text would have cached.
''')

code('''
keep(target_cache, past, path)
with torch.no_grad():
    fresh = DynamicCache()
    text = torch.cat([prompt, tree_tokens[path]])
    target_forward(text, fresh, torch.arange(len(text)), causal(len(text)))
worst = max(float((a.keys - b.keys).abs().max()) for a, b in zip(target_cache.layers, fresh.layers))
print(f"{target_cache.get_seq_length()} entries kept; largest difference from a plain run: {worst:.1e}")
assert target_cache.get_seq_length() == len(text) and worst < 1e-4
''')

md('''
## Step 7: the loop

Prefill; then per cycle: draft the tree, verify it in one target forward, keep the path, and let
the head read the accepted tokens beside the target's true features (the root's feature beside
the first accepted token, ..., the last accepted node's beside the bonus). The bonus becomes the
next root. tau, the mean number of tokens a cycle adds (bonus included), is counted on the way.
''')

code('''
@torch.no_grad()
def eagle_generate(prompt_ids, max_new_tokens, tree=tree):
    target_cache, head_cache, root, prediction = prefill(prompt_ids)
    output, cycles = [root], 0
    while len(output) < max_new_tokens:
        stable, past = head_cache.get_seq_length(), target_cache.get_seq_length()
        tokens = draft_tree(tree, root, prediction, head_cache, stable)
        head_cache.crop(stable)
        features, logits = target_forward(tokens, target_cache, past + tree.depth, tree.ancestors)
        path, root = verify(tree, tokens, logits)
        keep(target_cache, past, path)
        new = [int(tokens[i]) for i in path[1:]] + [root]
        read = head(features[path], torch.tensor(new), head_cache,
                    torch.arange(stable, stable + len(path)), additive_mask(causal(len(path)), stable))
        prediction, cycles, output = read[-1], cycles + 1, output + new
    return output[:max_new_tokens], (len(output) - 1) / cycles   # tau: the prefill's token aside
''')

md('''
## The check: vanilla's tokens, and the clock

Two prompts, each decoded by vanilla and by our EAGLE, then timed in the same cell (each best of
two runs): equal tokens are the whole point, the speed is what they cost here.
''')

code('''
N_NEW = pick(24, 96)
prompts = [prompt_ids, chat("Write a short Python function that checks whether a number is prime.")]
seconds = {"vanilla": [], "EAGLE, one page": []}
for ids in prompts:
    ours, tau = eagle_generate(ids, N_NEW)
    reference = vanilla_generate(ids, N_NEW)
    print(f"identical to vanilla: {ours == reference} (tau {tau:.2f}): {tokenizer.decode(ours[:24])!r}...")
    assert ours == reference
    for name, run in (("vanilla", vanilla_generate), ("EAGLE, one page", eagle_generate)):
        times = []
        for _ in range(2):
            start = time.perf_counter()
            run(ids, N_NEW)
            times.append(time.perf_counter() - start)
        seconds[name].append(min(times))
rate = {name: len(prompts) * N_NEW / sum(s) for name, s in seconds.items()}
print(" | ".join(f"{name}: {r:.1f} tok/s" for name, r in rate.items()),
      f"| EAGLE / vanilla: {rate['EAGLE, one page'] / rate['vanilla']:.2f}x ({target.name}, fp32)")
''')

md('''
Whether the ratio above is above 1 depends on this machine: on a small CPU a forward over the
whole tree costs more than a one-token forward, and every cycle pays for the head. Notebook 06 measures that cost
curve and the package's faster loop against the fastest vanilla.

## What the package adds

The package's loop is the same loop. Side by side, here is where each of your pieces lives in the
package, and how long each is there (lines counted from the source, now):
''')

code('''
import inspect

import pandas as pd
from eagle_mini import decode, draft, target as target_module, verify as verify_module
from eagle_mini.heads import eagle1

pairs = [("Head", Head, eagle1.DraftHead), ("draft_tree", draft_tree, draft.Drafter),
         ("verify", verify, verify_module.verify_greedy),
         ("keep", keep, target_module.keep_cache_entries),
         ("eagle_generate", eagle_generate, decode.generate)]


def lines(obj):
    return len(inspect.getsource(obj).splitlines())


pd.DataFrame([{"step": step, "here (lines)": lines(mine),
               "package": f"{theirs.__module__}.{theirs.__qualname__}", "there (lines)": lines(theirs)}
              for step, mine, theirs in pairs]).set_index("step")
''')

md('''
What those extra lines buy:

- **Trees that grow** (EAGLE-2, notebook 04): the package's `Drafter` grows a dynamic tree by the
  head's confidence instead of a fixed list of paths, and other drafters (prompt lookup, the
  hybrid) fill the same tree: the verifier never asks who drafted a node.
- **Sampling** (notebook 05): at T > 0 `verify_sampling` accepts or rejects each child with the
  lossless rule, which is the part that is easy to get subtly wrong; the greedy walk above is its
  T = 0 case.
- **Exact mode**: in bf16, a tree forward and one-token forwards round differently, so a loop like
  ours can part from vanilla at a near-tie. The package's exact mode makes them bit-identical.
- **The runtime**: packed linears, a lean head step, stats (tau, draft and verify time) and the
  end of the context and of the text (EOS) handled, which this page ignores.

Run the package's EAGLE-2 on the same prompts, and compare its text with yours:
''')

code('''
from eagle_mini import generate, default_head

package_head, note = default_head(target)
for ids in prompts:
    gen = generate(target, package_head, ids, N_NEW)
    mine = eagle_generate(ids, N_NEW)[0][:len(gen.output_ids)]   # the package stops at EOS
    print(f"package EAGLE-2 equals your loop's text: {gen.output_ids == mine}"
          f" (its tau {gen.stats['tau']:.2f}, over its own tree)")
''')

md('''
**Try it.** Change `SMALL_TREE` in Step 3 (a wider first level, a deeper chain) and run the
notebook again from there: tau moves, the tokens do not. Then break something on purpose (drop `keep`, or give every node the same
position) and watch which check catches it.
''')


def build(path):
    cells = []
    for i, (kind, text, meta) in enumerate(CELLS):
        cell = {"cell_type": kind, "id": f"onepage-{i:02d}", "metadata": meta,
                "source": text.splitlines(keepends=True)}
        if kind == "code":
            cell.update(outputs=[], execution_count=None)
        cells.append(cell)
    nb = {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build(sys.argv[1])
