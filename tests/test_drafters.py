"""The drafter protocol (`draft.TreeDrafter`), prompt lookup (`lookup.py`), the drafter that
needs no head, and the hybrid of the head and lookup in one tree (`hybrid.py`).

Oracles: a brute-force search for the lookup rule (every n-gram length, every earlier position);
Hugging Face's own prompt lookup (`generate(prompt_lookup_num_tokens=...)`) for the number of
target forwards, which equals ours when both apply the same rule; vanilla decoding for the tokens.
Its sampling is checked against the exact joint law in `test_lossless_sampling.py`.
"""
import random

import pytest
import torch

import eagle_mini.methods
from eagle_mini import EagleDecoder, EagleMiniError, generate, generate_vanilla, tiny_target
from eagle_mini.draft import Draft, Drafter, TreeDrafter
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.hybrid import HybridDrafter
from eagle_mini.lookup import LookupDrafter, lookup, lookup_match
from eagle_mini.methods import (EAGLE2, EAGLE2_LOOKUP, HF_PROMPT_LOOKUP, PROMPT_LOOKUP, VANILLA,
                                Method, method)
from eagle_mini.runtime.run import run_method
from eagle_mini.tree import DynamicTree, chain


def brute_force_lookup(text, tokens, ngram):
    """The rule as words: for n from `ngram` down to 1, the first position i < len - n whose n
    tokens equal the text's last n; the `tokens` tokens after them."""
    for n in range(min(ngram, len(text) - 1), 0, -1):
        for i in range(len(text) - n):
            if text[i:i + n] == text[-n:]:
                return text[i + n:i + n + tokens]
    return []


def test_lookup_is_the_rule_on_random_texts():
    rng = random.Random(0)
    for _ in range(2000):
        text = [rng.randrange(4) for _ in range(rng.randrange(0, 30))]
        tokens, ngram = rng.randrange(1, 6), rng.randrange(1, 4)
        assert lookup(text, tokens, ngram) == brute_force_lookup(text, tokens, ngram), text


def test_the_lookup_check_sees_a_latest_match_rule():
    """Control: taking the latest earlier match instead of the earliest differs on some text."""
    text = [7, 1, 2, 7, 3, 7]
    assert lookup(text, 1, 1) == [1] and text[text[:-1].index(7, 1) + 1:][:1] == [3]


def test_lookup_drafter_hears_the_prompt_and_what_was_accepted():
    d = LookupDrafter(tokens=4, ngram=2)
    d.begin([1, 2, 3, 4, 1], None, root=2)          # "... 1 2": "1 2" came first at 0
    assert d.draft(2).tokens.tolist() == [2, 3, 4, 1, 2]
    d.extend(None, [3, 9])                          # accepted 3, bonus 9: nothing after a 9
    draft = d.draft(9)
    assert draft.tokens.tolist() == [9] and draft.tree.num_nodes == 1   # a vanilla step
    assert d.tree == chain(4) and not d.sampled and d.head_forwards == 0


@pytest.mark.parametrize("tree, says", [("dynamic:8,3,2", "drafts a chain"),
                                        ("[[0], [1]]", "drafts a chain")])
def test_lookup_takes_only_a_chain(tree, says):
    with pytest.raises(EagleMiniError, match=says):
        LookupDrafter.build(None, tree, None)
    assert LookupDrafter.build(None, "chain:3", None).tokens == 3


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, vocab_size=48, num_hidden_layers=2)


PROMPTS = ([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], [7, 8, 9, 10, 11, 12], list(range(20, 40)) * 2)


@pytest.mark.parametrize("prompt", PROMPTS, ids=["repeats", "short", "long-repeat"])
def test_prompt_lookup_equals_vanilla_and_hf_prompt_lookup(target, prompt):
    """Greedy, fp32: our prompt lookup's tokens are vanilla's, and it needs exactly as many target
    forwards as Hugging Face's prompt lookup with the same settings (the same rule)."""
    ours = run_method(target, None, PROMPT_LOOKUP, prompt, 40)
    hf = run_method(target, None, HF_PROMPT_LOOKUP, prompt, 40)
    vanilla = run_method(target, None, VANILLA, prompt, 40)
    assert ours.output_ids == vanilla.output_ids == hf.output_ids
    assert ours.stats["target_forwards"] == hf.stats["target_forwards"]
    assert ours.stats["head_forwards"] == 0


def test_prompt_lookup_drafts_where_the_text_repeats(target):
    """The oracle above has teeth: on a repeating prompt lookup saves forwards."""
    gen = run_method(target, None, PROMPT_LOOKUP, PROMPTS[2], 40)
    assert gen.stats["target_forwards"] < 40 and gen.stats["tau"] > 1


def test_the_method_tree_sets_the_lookup_length(target):
    gen = run_method(target, None, PROMPT_LOOKUP, PROMPTS[2], 30, tree="chain:2")
    assert max(gen.stats["cycle_lengths"]) <= 3 and gen.stats["tree"] == str(chain(2))


def test_the_decoder_takes_only_a_drafter_under_the_protocol(target):
    class DuckDrafter:   # has the methods, but does not declare the protocol
        sampled, generator, head_forwards, tree = False, None, 0, chain(1)

        def extend(self, reads, tokens): pass

        def draft(self, root): return None

    with pytest.raises(EagleMiniError, match="must be an eagle_mini.draft.TreeDrafter"):
        EagleDecoder(target, None, [1, 2, 3], drafter=DuckDrafter())


class RepeatDrafter(TreeDrafter):
    """A drafter written for this test: it proposes the root again, k times in a row."""

    def __init__(self, k):
        self.tree, self.k = chain(k), k

    @classmethod
    def build(cls, head, tree, sampling):
        return cls(tree.max_depth)

    def extend(self, reads, shifted_tokens):
        pass

    def draft(self, root_token):
        n = self.k + 1
        return Draft(self.tree, torch.full((n,), root_token), torch.ones(n, dtype=torch.bool),
                     torch.ones(n))


def test_a_new_drafter_is_a_class_and_a_table_row(target, monkeypatch):
    """Nothing else changes: `run_method` runs the new row by its name, greedy output = vanilla's."""
    row = Method("repeat", "draft-verify", "the root again, k times", tree="chain:3",
                 drafter=RepeatDrafter)
    monkeypatch.setitem(eagle_mini.methods.BY_NAME, "repeat", row)
    prompt = [5, 5, 5, 5, 6]
    gen = run_method(target, None, "repeat", prompt, 24)
    assert method("repeat") is row and gen.stats["method"] == "repeat"
    assert gen.output_ids == generate_vanilla(target, prompt, 24).output_ids


def test_the_head_drafter_still_drafts_the_default_eagle2_tree(target):
    head = new_head(target, seed=1)
    prompt = PROMPTS[0]
    gen = generate(target, head, prompt, 24)
    assert gen.stats["tree"] == "dynamic:16,5,4" and isinstance(Drafter(head), TreeDrafter)
    assert gen.output_ids == generate_vanilla(target, prompt, 24).output_ids


# --- the hybrid drafter: EAGLE-2's head and prompt lookup in one tree (hybrid.py) -------------

def hybrid_after_prompt(target, prompt, tree=DynamicTree(8, 3, 2)):
    """A hybrid drafter that has read `prompt` (a prefill run here) and a root that continues the
    prompt's pattern (so the lookup finds a chain), and that root."""
    head = new_head(target, seed=1)
    out = target.forward(prompt, target.new_cache(), all_logits=False)
    root = prompt[0]
    drafter = HybridDrafter(head, tree)
    drafter.begin(prompt, out.features, root)
    return drafter, root


def paths(draft):
    """Every node's token path from the root (root excluded)."""
    tokens, parents = draft.tokens.tolist(), draft.tree.parents
    def path(i):
        return [] if i == 0 else path(parents[i]) + [tokens[i]]
    return [path(i) for i in range(len(tokens))]


def test_the_hybrid_tree_holds_the_lookup_chain_when_lookups_are_trusted(target):
    prompt = list(range(20, 30)) * 2
    drafter, root = hybrid_after_prompt(target, prompt)
    n, chain = lookup_match(drafter.lookup.text)
    assert n and chain
    for key in drafter.counts:                      # lookups that were always right
        drafter.counts[key] = [999.0, 1000.0]
    draft = drafter.draft(root)
    assert draft.tree.num_nodes <= 8                # EAGLE-2's size, no more
    assert chain[:7] in paths(draft)                # the root and 7 chain tokens fill 8 nodes
    siblings = {}
    for i, p in enumerate(draft.tree.parents[1:], 1):   # the graft merges, never repeats
        siblings.setdefault(p, []).append(int(draft.tokens[i]))
    assert all(len(v) == len(set(v)) for v in siblings.values())


def test_the_hybrid_tree_drops_lookups_that_keep_failing(target):
    prompt = list(range(20, 30)) * 2
    drafter, root = hybrid_after_prompt(target, prompt)
    _, chain = lookup_match(drafter.lookup.text)
    for key in drafter.counts:                      # lookups that were always wrong
        drafter.counts[key] = [1.0, 1e9]
    head_only = Drafter(drafter.head_drafter.head, drafter.tree)
    head_only.cache, head_only.stable = drafter.head_drafter.cache, drafter.head_drafter.stable
    head_only.root_feature = drafter.head_drafter.root_feature
    draft = drafter.draft(root)
    assert draft.tokens.tolist() == head_only.draft(root).tokens.tolist()   # EAGLE-2's own tree
    assert drafter.proposed[1] == []


def test_the_hybrid_counts_what_the_target_accepted_of_its_lookups(target):
    prompt = list(range(20, 30)) * 2
    drafter, root = hybrid_after_prompt(target, prompt)
    for key in drafter.counts:
        drafter.counts[key] = [999.0, 1000.0]
    drafter.draft(root)
    n, chain = drafter.proposed
    assert len(chain) >= 2
    before = {k: list(v) for k, v in drafter.counts.items()}
    wrong = (chain[1] + 1) % target.vocab_size
    drafter.extend(torch.zeros(3, target.hidden_size), [chain[0], wrong, 7])   # 1st kept, 2nd not
    assert drafter.counts[(n, 1)] == [before[(n, 1)][0] + 1, before[(n, 1)][1] + 1]
    assert drafter.counts[(n, 2)] == [before[(n, 2)][0], before[(n, 2)][1] + 1]
    assert drafter.counts[(n, 3)] == before[(n, 3)]                           # never tried


@pytest.mark.parametrize("prompt", PROMPTS, ids=["repeats", "short", "long-repeat"])
def test_eagle2_with_lookup_equals_vanilla(target, prompt):
    heads = new_head(target, seed=1)
    ours = run_method(target, heads, EAGLE2_LOOKUP, prompt, 40)
    assert ours.output_ids == generate_vanilla(target, prompt, 40).output_ids
    assert ours.stats["tree"] == str(DynamicTree())


def test_eagle2_with_lookup_saves_forwards_where_the_text_repeats(target):
    head = new_head(target, seed=1)
    hybrid = run_method(target, head, EAGLE2_LOOKUP, PROMPTS[2], 40)
    eagle2 = run_method(target, head, EAGLE2, PROMPTS[2], 40)
    assert hybrid.stats["target_forwards"] < eagle2.stats["target_forwards"]


def test_the_hybrid_takes_only_a_dynamic_tree():
    with pytest.raises(EagleMiniError, match="dynamic tree"):
        HybridDrafter(None, "chain:3")


def test_auto_chooses_its_drafter_as_it_sizes_its_tree(target, monkeypatch):
    """`auto` calibrates every size with the head alone and with lookup grafted in, and keeps the
    pair predicted fastest; a run of `auto` then drafts with that pair's drafter. The prediction
    is planted (the hybrid at 6 nodes wins) so that the choice, not the machine, is tested."""
    import eagle_mini.runtime.auto as auto
    from eagle_mini.runtime.auto import AUTO_DRAFTERS, AUTO_SIZES, AutoChoice, choose_auto_tree
    head = new_head(target, seed=1)
    tried = []

    def planted(stats, curve, size):
        tried.append(size)
        return 2.0 if len(tried) == 2 * AUTO_SIZES.index(6) + 2 else 1.0   # (6, hybrid)
    monkeypatch.setattr(auto, "predict", planted)
    choice, scores = choose_auto_tree(target, head, curve=None, prompts=[PROMPTS[2]],
                                      max_new_tokens=8)
    assert choice == AutoChoice(EAGLE2_LOOKUP, DynamicTree(6, 5, 4))
    assert [s for s, _ in scores][:2] == ["dynamic:3,2,2", "eagle2+lookup dynamic:3,2,2"]
    assert len(scores) == len(AUTO_SIZES) * len(AUTO_DRAFTERS)
    built = []
    monkeypatch.setattr(HybridDrafter, "build", classmethod(
        lambda cls, head, tree, sampling: built.append(tree) or cls(head, tree)))
    gen = run_method(target, head, "auto", PROMPTS[2], 20, tree=choice)
    assert built == [choice.tree] and gen.output_ids == generate_vanilla(target, PROMPTS[2], 20).output_ids
