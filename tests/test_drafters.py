"""The drafter protocol (`draft.TreeDrafter`) and prompt lookup (`lookup.py`), the drafter that
needs no head.

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
from eagle_mini.lookup import LookupDrafter, lookup
from eagle_mini.methods import HF_PROMPT_LOOKUP, PROMPT_LOOKUP, VANILLA, Method, method
from eagle_mini.runtime.run import run_method
from eagle_mini.tree import chain


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
