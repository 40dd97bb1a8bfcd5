"""Specifications of eagle_mini.data: parsing the cut-off ShareGPT file, the assistant loss mask,
the fixed split, and the evaluation prompt sets."""
import copy
import json
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from eagle_mini.data import (SPLITS, encode_conversation, evenly_spaced, iter_conversations,
                             length_stats, load_prompts, humaneval_prompts, mtbench_prompts,
                             mtbench_questions, parse_json_array, read_sharegpt, split_indices,
                             to_messages)
from eagle_mini.errors import EagleMiniError
from eagle_mini.models import load_target

END = "<|im_end|>"


@pytest.fixture(scope="module")
def tok():
    return load_target("smollm2-135m").tokenizer


@pytest.fixture(scope="module")
def sharegpt():
    return read_sharegpt()


def masked_text(tok, ex):
    return tok.decode([t for t, m in zip(ex.input_ids, ex.loss_mask) if m])


def assistant_text(messages):
    return "".join(m["content"] + END for m in messages if m["role"] == "assistant")


# --- ShareGPT parsing ---------------------------------------------------------------------------

def test_parse_keeps_whole_elements_and_measures_the_cut():
    assert parse_json_array('[{"a": 1}, {"b": "x"}]') == ([{"a": 1}, {"b": "x"}], 0)
    items, tail = parse_json_array('[\n {"a": 1},\n {"b": "cut here')
    assert items == [{"a": 1}] and tail == len('{"b": "cut here')


def test_sharegpt_file_is_cut_off_after_17671_records(sharegpt):
    assert len(sharegpt.records) == len(sharegpt.messages) == 17671
    assert sharegpt.truncated and sharegpt.tail_chars > 0
    # the packaged file has no malformed records, only empty conversations
    assert sharegpt.skipped == Counter({"empty": 126})
    assert sum(m is None for m in sharegpt.messages) == 126


def test_roles_map_to_user_assistant_system(sharegpt):
    roles = Counter(m["role"] for ms in sharegpt.messages if ms for m in ms)
    assert set(roles) == {"user", "assistant", "system"}
    assert roles["system"] == 41
    first = Counter(ms[0]["role"] for ms in sharegpt.messages if ms)
    assert first == {"user": 11146, "assistant": 6358, "system": 41}
    rare = [{"from": r, "value": r} for r in ("user", "chatgpt", "bing", "bard")]
    assert [m["role"] for m in to_messages({"id": "x", "conversations": rare})] == \
        ["user", "assistant", "assistant", "assistant"]


def test_malformed_records_are_skipped_and_counted_by_reason(tmp_path):
    good = {"id": "a", "conversations": [{"from": "human", "value": "hi"}]}
    records = [good,
               {"id": "b", "conversations": []},
               {"id": "c", "conversations": [{"from": "robot", "value": "x"}]},
               {"id": "d", "conversations": [{"from": "gpt", "value": 3}]},
               {"id": "e", "conversations": [{"from": "gpt"}]},
               {"conversations": [{"from": "gpt", "value": "x"}]}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records, indent=1)[:-2] + ', {"id": "f", "conv')
    data = read_sharegpt(path)
    assert len(data.records) == 6 and data.truncated
    assert data.skipped == {"empty": 1, "unknown role": 1, "non-string value": 1, "missing keys": 2}
    assert data.messages[0] == [{"role": "user", "content": "hi"}]
    assert data.messages[1:] == [None] * 5


# --- Templating and the loss mask ---------------------------------------------------------------

CHAT = [{"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "It is 4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "Six, of course.\nAnything else?"}]


def test_loss_mask_covers_exactly_assistant_content_and_closing_token(tok):
    ex = encode_conversation(CHAT, tok)
    assert len(ex.input_ids) == len(ex.loss_mask)
    assert masked_text(tok, ex) == "It is 4.<|im_end|>Six, of course.\nAnything else?<|im_end|>"
    # everything else -- system prompt, user turns, headers, separators -- is unmasked
    unmasked = tok.decode([t for t, m in zip(ex.input_ids, ex.loss_mask) if not m])
    assert "<|im_start|>assistant\n" in unmasked and "What is 2+2?" in unmasked
    assert "It is" not in unmasked
    # the tokens are exactly what apply_chat_template gives
    assert ex.input_ids == tok.apply_chat_template(CHAT, tokenize=True)["input_ids"]


def test_conversation_may_start_with_an_assistant_turn(tok):
    chat = [{"role": "assistant", "content": "continuing the list: 3. eggs"},
            {"role": "user", "content": "thanks"}]
    ex = encode_conversation(chat, tok)
    text = tok.decode(ex.input_ids)
    assert text.startswith("<|im_start|>system\n")   # the template's default system prompt
    assert masked_text(tok, ex) == "continuing the list: 3. eggs<|im_end|>"


def test_system_and_user_only_conversation_has_empty_mask(tok):
    ex = encode_conversation([{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "hi"}], tok)
    assert sum(ex.loss_mask) == 0 and len(ex.input_ids) > 0


words = st.text(st.sampled_from("abcdefgh XYZ.,!?0123\n"), min_size=1, max_size=40) \
    .filter(lambda s: not s[0].isspace())


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), words), min_size=1, max_size=6))
def test_masked_tokens_decode_to_assistant_turns(tok, turns):
    messages = [{"role": r, "content": c} for r, c in turns]
    ex = encode_conversation(messages, tok)
    assert masked_text(tok, ex) == assistant_text(messages)
    assert ex.input_ids == tok.apply_chat_template(messages, tokenize=True)["input_ids"]


def test_template_that_is_not_prefix_stable_is_refused(tok):
    odd = copy.copy(tok)
    # a footer after the last message: rendering k messages is no prefix of rendering k+1
    odd.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                         "<|im_end|>\n{% endfor %}<|im_start|>footer<|im_end|>")
    with pytest.raises(EagleMiniError, match="prefix-stable"):
        encode_conversation(CHAT, odd)


def test_max_len_truncates_ids_and_mask_together(tok):
    full = encode_conversation(CHAT, tok)
    cut = encode_conversation(CHAT, tok, max_len=10)
    assert cut.input_ids == full.input_ids[:10] and cut.loss_mask == full.loss_mask[:10]


# --- Split and iteration ------------------------------------------------------------------------

def test_split_is_fixed_by_record_index_and_disjoint():
    n = 17671
    parts = {s: split_indices(s, n) for s in SPLITS}
    assert [len(parts[s]) for s in ("train", "validation", "test")] == [15000, 1000, 671 + 1000]
    seen = [i for s in SPLITS for i in parts[s]]
    assert sorted(seen) == list(range(n))   # disjoint and covering
    with pytest.raises(EagleMiniError, match="train, validation, test"):
        split_indices("dev", n)


def test_iter_conversations_is_lazy_truncates_and_resumes(tok, sharegpt):
    exs = list(iter_conversations("validation", tok, max_len=64, max_conversations=5,
                                  data=sharegpt))
    assert len(exs) == 5
    assert all(len(e.input_ids) == len(e.loss_mask) <= 64 for e in exs)
    assert all(15000 <= e.index < 16000 for e in exs)
    assert [e.id for e in exs] == [sharegpt.records[e.index]["id"] for e in exs]
    resumed = next(iter_conversations("validation", tok, max_len=64, start=3, data=sharegpt))
    assert resumed.index == next(i for i in range(15003, 16000) if sharegpt.messages[i])
    # skipped (empty) records are never yielded
    assert all(sharegpt.messages[e.index] is not None for e in exs)


def test_sample_lengths_are_in_the_range_the_issue_reports(tok, sharegpt):
    # whole-file numbers (mean ~1.7k tokens, ~46% over 2048) take a minute; a sample is enough
    # to catch a template or mask that lost or duplicated turns
    stats = length_stats(iter_conversations("train", tok, max_conversations=200, data=sharegpt))
    assert stats["n"] == 200
    assert 1000 < stats["mean_tokens"] < 2500 and 0.25 < stats["frac_longer"] < 0.65


# --- Evaluation prompts -------------------------------------------------------------------------

def test_mtbench_has_80_two_turn_questions_in_8_categories():
    qs = mtbench_questions()
    assert len(qs) == 80 and all(len(q["turns"]) == 2 for q in qs)
    assert set(Counter(q["category"] for q in qs).values()) == {10}
    assert len({q["category"] for q in qs}) == 8
    assert mtbench_prompts() == [q["turns"][0] for q in qs]


def test_a_small_mtbench_sample_is_spread_over_every_category():
    qs = mtbench_questions()
    assert {q["category"] for q in qs[:10]} == {"writing"}     # why the first ten will not do
    for n in (8, 16, 24):
        sample = evenly_spaced(qs, n)
        assert len(sample) == n and len({q["question_id"] for q in sample}) == n
        assert set(Counter(q["category"] for q in sample).values()) == {n // 8}
    assert evenly_spaced(qs, 80) == qs and evenly_spaced(qs, None) == qs and evenly_spaced(qs, 500) == qs


def test_humaneval_has_164_code_prompts():
    prompts = humaneval_prompts()
    assert len(prompts) == 164 and all("def " in p for p in prompts)


def test_load_prompts_registry(sharegpt):
    assert load_prompts("mtbench", n=3) == mtbench_prompts()[:3]
    assert len(load_prompts("humaneval")) == 164
    test_users = [sharegpt.messages[i][0]["content"] for i in split_indices("test", 17671)
                  if sharegpt.messages[i] and sharegpt.messages[i][0]["role"] == "user"]
    assert load_prompts("sharegpt-test") == test_users and len(test_users) > 1000
    with pytest.raises(EagleMiniError, match="mtbench, humaneval, sharegpt-test"):
        load_prompts("alpaca")
