"""Specifications of eagle_mini.training.features: offline features for draft-head training (EAGLE §4).

Oracle: the target run on each example alone (`Target.forward`, what decoding sees). Batching,
padding and sorting must not change a feature beyond fp16 rounding; a dump must round-trip; a killed
dump must resume into the very same bytes without recomputing finished shards.
"""
import json

import pytest
import torch

from eagle_mini import tiny_target
from eagle_mini.data import Example
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.features import (FeatureDataset, compute_features, dump_features, length_batches,
                                 stream_features, target_fingerprint)

LENGTHS = [5, 17, 3, 30, 9, 1, 12, 8, 21, 4, 14]
INFO = {"split": "train", "max_len": 32}


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, vocab_size=64)


def make_examples(lengths=LENGTHS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Example(torch.randint(0, 64, (n,), generator=g).tolist(),
                    torch.randint(0, 2, (n,), generator=g).tolist(), index=i)
            for i, n in enumerate(lengths)]


class Examples:
    """A deterministic examples iterable that can crash after `fail_after` examples, like a kill."""

    def __init__(self, examples, fail_after=None):
        self.examples, self.fail_after = examples, fail_after

    def __iter__(self):
        for i, ex in enumerate(self.examples):
            if i == self.fail_after:
                raise KeyboardInterrupt("killed")
            yield ex


@pytest.fixture
def forwarded_rows(target):
    """How many examples went through the target's body (rows of all batched forwards)."""
    count = [0]
    hook = target.model.model.register_forward_hook(
        lambda m, args, kwargs, out: count.__setitem__(0, count[0] + kwargs["input_ids"].shape[0]),
        with_kwargs=True)
    yield count
    hook.remove()


def shard_bytes(d):
    return {p.name: p.read_bytes() for p in sorted(d.glob("shard_*"))}


# --- batching ---------------------------------------------------------------------------------

def test_length_batches_cover_each_example_once_within_the_budget():
    batches = length_batches(LENGTHS, 40)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    for b in batches:
        assert [LENGTHS[i] for i in b] == sorted((LENGTHS[i] for i in b), reverse=True)
        assert len(b) == 1 or len(b) * LENGTHS[b[0]] <= 40
    assert length_batches([50, 3], 40) == [[0], [1]]   # too long for the budget: alone


def test_batched_features_equal_each_example_run_alone(target):
    examples = make_examples()
    rows = compute_features(target, examples, max_tokens_per_batch=48)
    assert any(len(b) > 1 and LENGTHS[b[0]] != LENGTHS[b[-1]] for b in length_batches(LENGTHS, 48))
    for ex, row in zip(examples, rows):
        assert row["input_ids"].tolist() == ex.input_ids
        assert row["loss_mask"].tolist() == ex.loss_mask and row["loss_mask"].dtype == torch.uint8
        assert row["features"].dtype == torch.float16
        assert row["features"].shape == (len(ex.input_ids), target.hidden_size)
        alone = target.forward(ex.input_ids, target.new_cache()).features
        torch.testing.assert_close(row["features"].float(), alone, atol=1e-3, rtol=1e-3)
        alone16 = compute_features(target, [ex])[0]["features"]
        torch.testing.assert_close(row["features"], alone16, atol=1e-3, rtol=1e-3)


def test_stream_yields_the_same_rows_while_consuming_lazily(target):
    examples, consumed = make_examples(), []

    def source():
        for ex in examples:
            consumed.append(ex)
            yield ex

    stream = stream_features(target, source(), max_tokens_per_batch=48, window=4)
    first = next(stream)
    assert len(consumed) == 4
    rows = [first] + list(stream)
    for row, ref in zip(rows, compute_features(target, examples, max_tokens_per_batch=48),
                        strict=True):
        assert torch.equal(row["input_ids"], ref["input_ids"])
        torch.testing.assert_close(row["features"], ref["features"], atol=1e-3, rtol=1e-3)


# --- dump and read back -------------------------------------------------------------------------

def test_dump_round_trips_through_the_dataset(target, tmp_path):
    examples = make_examples()
    manifest = dump_features(target, examples, tmp_path, INFO, shard_size=4, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["manifest.json", "shard_00000.safetensors", "shard_00001.safetensors",
         "shard_00002.safetensors"]
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == manifest and manifest["complete"]
    assert manifest["counts"] == {"examples": len(LENGTHS), "tokens": sum(LENGTHS),
                                  "loss_tokens": sum(sum(ex.loss_mask) for ex in examples)}
    assert [s["first_example"] for s in manifest["shards"]] == [0, 4, 8]
    assert manifest["fingerprint"] == target_fingerprint(target)
    assert manifest["hidden_size"] == target.hidden_size and manifest["info"] == INFO

    ds = FeatureDataset(tmp_path)
    ds.check_target(target)
    assert len(ds) == len(examples)
    for ex, row, ref in zip(examples, ds, compute_features(target, examples), strict=True):
        assert row["input_ids"].tolist() == ex.input_ids
        assert row["loss_mask"].tolist() == ex.loss_mask
        torch.testing.assert_close(row["features"], ref["features"], atol=1e-3, rtol=1e-3)
    assert ds[9]["input_ids"].tolist() == examples[9].input_ids


def test_killed_dump_resumes_into_identical_shards_without_recomputing(target, tmp_path,
                                                                       forwarded_rows):
    examples = make_examples()
    full, cut = tmp_path / "full", tmp_path / "cut"
    dump_features(target, examples, full, INFO, shard_size=3, progress=False)

    with pytest.raises(KeyboardInterrupt):   # killed in the middle of shard 2
        dump_features(target, Examples(examples, fail_after=7), cut, INFO, shard_size=3,
                      progress=False)
    partial = json.loads((cut / "manifest.json").read_text())
    assert [s["file"] for s in partial["shards"]] == ["shard_00000.safetensors",
                                                      "shard_00001.safetensors"]
    assert not partial["complete"]
    (cut / "shard_00002.safetensors.x1.tmp").write_bytes(b"half a write")   # a write cut short

    forwarded_rows[0] = 0
    dump_features(target, Examples(examples), cut, INFO, shard_size=3, max_shards=1, progress=False)
    assert forwarded_rows[0] == 3   # shard 2 only
    resumed = dump_features(target, Examples(examples), cut, INFO, shard_size=3, progress=False)
    assert forwarded_rows[0] == len(examples) - 6   # shards 0 and 1 were never recomputed

    assert shard_bytes(cut) == shard_bytes(full)
    reference = json.loads((full / "manifest.json").read_text())
    assert resumed["counts"] == reference["counts"] and resumed["shards"] == reference["shards"]


def test_resume_recomputes_a_shard_whose_examples_changed(target, tmp_path, forwarded_rows):
    examples = make_examples()
    dump_features(target, examples, tmp_path, INFO, shard_size=4, progress=False)
    changed = examples[:5] + make_examples([LENGTHS[5]], seed=1) + examples[6:]
    forwarded_rows[0] = 0
    dump_features(target, changed, tmp_path, INFO, shard_size=4, progress=False)
    assert forwarded_rows[0] == 4   # only shard 1 holds example 5
    assert [row["input_ids"].tolist() for row in FeatureDataset(tmp_path)] == \
        [ex.input_ids for ex in changed]


def test_corrupt_shard_is_named_by_the_dataset_and_redone_by_the_dump(target, tmp_path,
                                                                      forwarded_rows):
    examples = make_examples()
    dump_features(target, examples, tmp_path, INFO, shard_size=4, progress=False)
    good = shard_bytes(tmp_path)
    path = tmp_path / "shard_00001.safetensors"
    data = bytearray(good[path.name])
    data[-10] ^= 0xFF   # one flipped byte inside the features
    path.write_bytes(bytes(data))

    ds = FeatureDataset(tmp_path)
    assert len(ds) == len(examples)   # the manifest alone
    assert ds[0]["input_ids"].tolist() == examples[0].input_ids   # shard 0 is fine
    with pytest.raises(EagleMiniError, match="shard_00001.safetensors"):
        list(ds)

    forwarded_rows[0] = 0
    dump_features(target, examples, tmp_path, INFO, shard_size=4, progress=False)
    assert forwarded_rows[0] == 4
    assert shard_bytes(tmp_path) == good
    assert len(list(FeatureDataset(tmp_path))) == len(examples)


def test_features_of_another_target_or_split_are_refused(target, tmp_path):
    examples = make_examples()
    dump_features(target, examples, tmp_path, INFO, shard_size=4, progress=False)
    other = tiny_target("llama", seed=1, vocab_size=64)
    assert target_fingerprint(other) != target_fingerprint(target)

    with pytest.raises(EagleMiniError, match="fingerprint"):
        dump_features(other, examples, tmp_path, INFO, shard_size=4, progress=False)
    with pytest.raises(EagleMiniError, match="split: 'train' there, 'validation' now"):
        dump_features(target, examples, tmp_path, {**INFO, "split": "validation"}, shard_size=4,
                      progress=False)
    with pytest.raises(EagleMiniError) as refused:
        FeatureDataset(tmp_path).check_target(other)
    assert target_fingerprint(target) in str(refused.value)
    assert target_fingerprint(other) in str(refused.value)
    with pytest.raises(EagleMiniError, match="manifest.json"):
        FeatureDataset(tmp_path / "nowhere")
