"""Regenerated training text: the target's replies, batched, must be its greedy replies; resumable."""
import json

import pytest

from eagle_mini.data import iter_conversations
from eagle_mini.decode import generate_vanilla
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.regenerate import (generate_batch, read_regenerated, regenerate_conversations,
                                   regenerate_split, remake_command)


def test_batched_replies_equal_vanilla_greedy(smollm):
    # oracle: our one-sequence greedy loop; the batch pads the shorter prompt on the left
    prompts = ["Name three colours.", "Write one sentence about the sea, please, in English."]
    ids = [smollm.chat_ids(p) for p in prompts]
    assert len(ids[0]) != len(ids[1])
    for (reply, stop), p in zip(generate_batch(smollm, ids, 6), prompts):
        van = generate_vanilla(smollm, p, 6)
        assert stop == "length" and reply == van.output_ids


def test_turns_are_replaced_in_order(smollm):
    conv = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "ORIGINAL-1"},
            {"role": "user", "content": "Now say bye."}, {"role": "assistant", "content": "ORIGINAL-2"}]
    (msgs, stop), = regenerate_conversations(smollm, [conv], max_new_tokens=64)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[0] == conv[0] and msgs[2] == conv[2]
    assert "ORIGINAL" not in msgs[1]["content"] + msgs[3]["content"]
    # the second reply is the target's greedy reply to the conversation with its own first reply
    second = generate_vanilla(smollm, msgs[:3], 64)
    assert msgs[3]["content"] == smollm.tokenizer.decode(
        [t for t in second.output_ids if t not in smollm.eos_token_ids], skip_special_tokens=True).strip()
    assert stop in ("done", "length")


def test_cut_reply_ends_the_conversation_and_a_reply_to_nobody_is_dropped(smollm):
    conv = [{"role": "assistant", "content": "hello?"}, {"role": "user", "content": "Count to 50."},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "again"},
            {"role": "assistant", "content": "y"}]
    (msgs, stop), = regenerate_conversations(smollm, [conv], max_new_tokens=3)
    assert stop == "length"
    assert [m["role"] for m in msgs] == ["user", "assistant"]


def test_max_turns_stops_after_that_many_replies(smollm):
    conv = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "ORIGINAL-1"},
            {"role": "user", "content": "Now say bye."}, {"role": "assistant", "content": "ORIGINAL-2"}]
    (one, stop), = regenerate_conversations(smollm, [conv], max_new_tokens=64, max_turns=1)
    assert [m["role"] for m in one] == ["user", "assistant"] and stop == "turns"
    (both, _), = regenerate_conversations(smollm, [conv], max_new_tokens=64)
    assert both[:2] == one and len(both) == 4


def test_split_batches_similar_lengths_and_records_max_turns(smollm, tmp_path):
    out = tmp_path / "regen.jsonl"
    seen = []
    import eagle_mini.training.regenerate as regen
    real = regen.generate_batch

    def spy(target, prompts, *a, **k):
        seen.append([len(p) for p in prompts])
        return real(target, prompts, *a, **k)
    regen.generate_batch = spy
    try:
        regenerate_split(smollm, out, split="validation", max_conversations=6, batch_size=2,
                         max_new_tokens=2, max_len=256, max_turns=1, log=lambda *a: None)
    finally:
        regen.generate_batch = real
    flat = [n for b in seen for n in b]
    assert flat == sorted(flat)          # one pool of 8 batches: prompts go shortest first
    header, *records = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["max_turns"] == 1
    assert all(sum(m["role"] == "assistant" for m in r["messages"]) <= 1 for r in records)


def test_split_resumes_after_a_torn_line_and_checks_settings(smollm, tmp_path):
    out = tmp_path / "regen.jsonl"
    kw = dict(split="validation", batch_size=2, max_new_tokens=4, max_len=256, log=lambda *a: None)
    first = regenerate_split(smollm, out, max_conversations=2, **kw)
    assert first["conversations"] == 2
    kept = out.read_text()
    with open(out, "a") as f:
        f.write('{"index": 15002, "messa')          # a run killed while writing
    again = regenerate_split(smollm, out, max_conversations=3, **kw)
    text = out.read_text()
    assert text.startswith(kept) and again["conversations"] == 3
    lines = [json.loads(line) for line in text.splitlines()]   # every line parses: tail is gone
    assert len(lines) == 1 + 3 and len({r["index"] for r in lines[1:]}) == 3
    with pytest.raises(EagleMiniError, match="other settings"):
        regenerate_split(smollm, out, max_conversations=3, **{**kw, "max_new_tokens": 5})

    data = read_regenerated(out)
    assert remake_command(data) == (   # what the card prints so that the file can be made again
        "python -m eagle_mini regenerate --split validation --start 0 --max-conversations 3 "
        f"--max-new-tokens 4 --max-len 256 --out {out}")
    got = list(iter_conversations("validation", smollm.tokenizer, data=data))
    regenerated = [r for r in lines[1:] if any(m["role"] == "assistant" for m in r["messages"])]
    assert [e.index for e in got] == sorted(r["index"] for r in regenerated)
    for ex in got:
        assert sum(ex.loss_mask) > 0      # replies are trained on


def test_training_takes_replies_of_this_target_in_its_own_or_the_featurizing_dtype(smollm, tmp_path):
    from eagle_mini.training.features import target_fingerprint
    from eagle_mini.training.commands import featurizer, regenerated_for
    bf16 = featurizer(smollm, "bf16")
    record = {"index": 15000, "id": "x", "stop": "done", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
    for name, fingerprint, dtype in [("fp32", target_fingerprint(smollm), ""),
                                     ("bf16", target_fingerprint(bf16), "--dtype bf16 "),
                                     ("other", "0123456789abcdef", None)]:
        path = tmp_path / f"{name}.jsonl"
        header = {"format": "eagle_mini.regenerated/1", "target": "smollm2-135m",
                  "fingerprint": fingerprint, "split": "validation", "max_new_tokens": 8,
                  "max_len": 64, "temperature": 0.0, "seed": 0}
        path.write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n")
        if dtype is not None:
            data, remake = regenerated_for(path, smollm, bf16, "bf16")
            assert data.messages[15000] == record["messages"]
            assert remake == (f"python -m eagle_mini regenerate {dtype}--split validation --start 0 "
                              f"--max-conversations 1 --max-new-tokens 8 --max-len 64 --out {path}")
        else:
            with pytest.raises(EagleMiniError, match="another target or dtype"):
                regenerated_for(path, smollm, bf16, "bf16")
    with pytest.raises(EagleMiniError, match="another target or dtype"):   # bf16 text, fp32 features
        regenerated_for(tmp_path / "bf16.jsonl", smollm, smollm, None)


def test_not_a_regenerated_file(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"format": "something else"}\n')
    with pytest.raises(EagleMiniError, match="not a regenerated"):
        read_regenerated(bad)


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    from eagle_mini.cli import main
    assert main(["regenerate", "--out", str(tmp_path / "r.jsonl"), "--temperature", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--temperature" in err
    assert main(["train-head", "--stream", "--regenerated", str(tmp_path / "missing.jsonl"),
                 "--out", str(tmp_path / "h"), "--threads", "2"]) == 2
    err = capsys.readouterr().err   # checked before anything loads
    assert err.count("\n") == 1 and "missing.jsonl does not exist" in err


def test_card_says_how_to_write_the_regenerated_file_again(tmp_path):
    from eagle_mini import tiny_target
    from eagle_mini.heads.eagle1 import new_head
    from eagle_mini.training.commands import write_card
    head = new_head(tiny_target("llama", seed=0, vocab_size=64), seed=0)
    remake = "python -m eagle_mini regenerate --split train --start 5 --max-conversations 7 --out r.jsonl"
    base = {"date": "2026-12-03", "steps": 1, "tokens": 10, "seconds": 1.0,
            "validation": {"top1": 0.5, "alpha": [0.5]}, "command": "python -m eagle_mini train-head"}
    for rounds, said in [([base, {**base, "regenerate_command": remake}], True),
                         ([{**base, "regenerate_command": remake}, base], False)]:
        write_card(tmp_path, "tiny", head, {"tokens_seen": 20, "train_seconds": 2.0, "rounds": rounds})
        assert (remake in (tmp_path / "README.md").read_text()) == said   # only for the last round
