"""Training sources: a mixed source gives each stream its share of a batch and resumes exactly."""
import pytest

from eagle_mini.errors import EagleMiniError
from eagle_mini.data import ShareGPT
from eagle_mini.training.sources import MixedSource, StreamingSource


def _data(tag: str, n: int = 12) -> ShareGPT:
    msgs = [[{"role": "user", "content": f"{tag} question {i}?"},
             {"role": "assistant", "content": f"{tag} answer number {i}, with a few more words."}]
            for i in range(n)]
    return ShareGPT([{"id": str(i)} for i in range(n)], msgs)


def _mixed(smollm, cursor=None, share=0.5):
    src = MixedSource(StreamingSource(smollm, "train", data=_data("own")),
                      StreamingSource(smollm, "train", data=_data("target"), cursor=6), share=share)
    if cursor is not None:
        src.cursor = cursor
    return src


def _tokens(examples) -> int:
    return sum(len(e.input_ids) for e in examples)


def test_each_stream_gets_its_share_of_a_batch(smollm):
    one = len(StreamingSource(smollm, "train", data=_data("own")).take(1)[0].input_ids)
    src = _mixed(smollm, share=0.25)
    batch = src.take(8 * one)
    own = [e for e in batch if "own" in smollm.tokenizer.decode(e.input_ids)]
    # ceil(0.25 * 8 conversations' tokens) from the first stream: two (it stops once it has enough)
    assert len(own) == 2 and own == batch[:2]
    assert _tokens(batch) >= 8 * one - one
    assert src.cursor == [2, 6 + len(batch) - 2]


def test_a_resumed_mixed_source_continues_where_it_stopped(smollm):
    straight = _mixed(smollm)
    first, second = straight.take(200), straight.take(200)
    stopped = _mixed(smollm)
    assert [e.index for e in stopped.take(200)] == [e.index for e in first]
    resumed = _mixed(smollm, cursor=stopped.cursor)
    assert [e.index for e in resumed.take(200)] == [e.index for e in second]


def test_share_must_be_a_proper_fraction(smollm):
    with pytest.raises(EagleMiniError, match="between 0 and 1"):
        _mixed(smollm, share=1.0)


def test_cli_mix_needs_regenerated_replies(tmp_path, capsys):
    from eagle_mini.cli import main
    assert main(["train-head", "--stream", "--mix-sharegpt", "0.5", "--steps", "1",
                 "--out", str(tmp_path / "h"), "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--regenerated" in err
    with pytest.raises(SystemExit) as e:
        main(["train-head", "--stream", "--mix-sharegpt", "1.5", "--out", str(tmp_path / "h")])
    assert e.value.code == 2


def test_train_head_mixes_regenerated_and_sharegpt_replies_and_records_both_positions(smollm, tmp_path):
    import json

    from eagle_mini.cli import main
    from eagle_mini.training.features import target_fingerprint
    regen = tmp_path / "regen.jsonl"
    header = {"format": "eagle_mini.regenerated/1", "target": "smollm2-135m",
              "fingerprint": target_fingerprint(smollm), "split": "train", "max_new_tokens": 8,
              "max_len": 64, "temperature": 0.0, "seed": 0}
    records = [{"index": i, "id": str(i), "stop": "done", "messages": [
        {"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}!"}]}
        for i in range(3)]
    regen.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))
    out = tmp_path / "head"
    assert main(["train-head", "--stream", "--regenerated", str(regen), "--mix-sharegpt", "0.5",
                 "--steps", "2", "--warmup", "1", "--batch-tokens", "64", "--max-len", "128",
                 "--eval-conversations", "1", "--out", str(out), "--work", str(tmp_path / "w"),
                 "--threads", "1"]) == 0
    meta = json.loads((out / "config.json").read_text())
    assert meta["next_train_record"] == 2            # one regenerated conversation per step
    assert meta["next_mix_record"] > 3               # ShareGPT's own replies start after them
    assert "ShareGPT's own replies from record 3" in meta["rounds"][-1]["source"]
