"""Features: the target's last hidden states, computed once for training the draft head.

EAGLE §3.2 trains the head offline: each sample keeps its `input_ids`, the target's feature (the
post-norm last hidden state, EAGLE §3.1) `features: [seq, hidden]` in fp16, and the `loss_mask`.
Running the target is most of the training cost, so we batch it (right padding plus an attention
mask, examples sorted by length so rows waste little padding, a token budget bounding memory) and
store the result in safetensors shards with a manifest that makes a killed dump resumable: shards
are written atomically, listed with their size and sha256 after each one, and a rerun keeps the
verified shards and recomputes the rest.

    >>> rows = compute_features(target, examples)                         # doctest: +SKIP
    >>> dump_features(target, examples, "feats", {"split": "train"})     # doctest: +SKIP
    >>> next(iter(FeatureDataset("feats")))["features"].shape            # doctest: +SKIP
    torch.Size([L, H])

What this module leaves out: regenerating responses with the target (EAGLE's "fixed dataset" uses
ShareGPT's answers as they are), the soft labels (the trainer recomputes `lm_head(features)`).
"""
import hashlib
import json
import os
from itertools import islice
from pathlib import Path

import torch
from safetensors.torch import load_file, save as save_tensors
from tqdm.auto import tqdm

from eagle_mini.data import iter_conversations, read_sharegpt
from eagle_mini.errors import EagleMiniError
from eagle_mini.models import load_target

FORMAT = "eagle_mini.features/1"


def target_fingerprint(target) -> str:
    """A short hash of the weights: every tensor's name, shape, dtype and ~1k of its values.

    Milliseconds even for 7B, yet it changes with the seed, a fine-tune of any layer, or the dtype.
    """
    h = hashlib.sha256()
    for name, p in sorted(target.model.state_dict().items()):
        flat = p.detach().reshape(-1)
        sample = flat[::max(1, flat.numel() // 1024)].contiguous().cpu()
        h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
        h.update(sample.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def length_batches(lengths: list[int], max_tokens_per_batch: int) -> list[list[int]]:
    """Group indices longest first so that rows * longest <= budget (a longer row goes alone).

        >>> length_batches([3, 9, 4, 8], 18)
        [[1, 3], [2, 0]]
    """
    batches, cur = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if cur and (len(cur) + 1) * lengths[cur[0]] > max_tokens_per_batch:
            batches.append(cur)
            cur = []
        cur.append(i)
    return batches + [cur] if cur else batches


@torch.no_grad()
def _forward(target, rows: list[list[int]], layers=None) -> list[tuple]:
    """Right-padded batch -> per row (fp16 features `[len_i, hidden]`, bf16 layers
    `[len_i, k * hidden]` or None), padding dropped. `layers`: indices into HF `hidden_states` whose
    states an EAGLE-3 head reads (`eagle3.aux_layers`); bf16, since raw residual states can carry
    activations beyond fp16's range."""
    n = max(len(r) for r in rows)
    if n > target.context_length:
        raise EagleMiniError(f"an example of {n} tokens exceeds {target.name}'s context length "
                             f"{target.context_length}; pass a smaller max_len")
    ids = torch.zeros(len(rows), n, dtype=torch.long)
    mask = torch.zeros(len(rows), n, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.as_tensor(row, dtype=torch.long)
        mask[r, :len(row)] = 1
    # Right padding keeps every real token at positions 0..len-1, as when the row runs alone.
    res = target.model.model(input_ids=ids.to(target.device), attention_mask=mask.to(target.device),
                             use_cache=False, output_hidden_states=layers is not None)
    out = res.last_hidden_state
    feats = [out[r, :len(row)].to("cpu", torch.float16) for r, row in enumerate(rows)]
    if not all(torch.isfinite(f).all() for f in feats):
        raise EagleMiniError(f"{target.name}'s features overflow fp16")
    if layers is None:
        return [(f, None) for f in feats]
    stacked = torch.cat([res.hidden_states[i] for i in layers], dim=-1)
    return [(f, stacked[r, :len(row)].to("cpu", torch.bfloat16))
            for r, (f, row) in enumerate(zip(feats, rows))]


def compute_features(target, examples, max_tokens_per_batch: int = 4096,
                     progress=None, layers=None) -> list[dict]:
    """Examples (`.input_ids`, `.loss_mask`) -> `{"input_ids": [L] long, "features": [L, H] fp16,
    "loss_mask": [L] uint8}` in input order; `progress.update(tokens)` is called per batch.
    With `layers` (an EAGLE-3 head's `aux_layers`) each dict also holds `layers: [L, 3H]` bf16."""
    examples = list(examples)
    rows = [list(ex.input_ids) for ex in examples]
    if any(len(ex.loss_mask) != len(r) for ex, r in zip(examples, rows)):
        raise EagleMiniError("an example's loss_mask and input_ids differ in length")
    width = target.hidden_size * len(layers or ())
    feats = [(torch.zeros(0, target.hidden_size, dtype=torch.float16),
              torch.zeros(0, width, dtype=torch.bfloat16) if layers else None)] * len(rows)
    nonempty = [i for i, r in enumerate(rows) if r]
    for batch in length_batches([len(rows[i]) for i in nonempty], max_tokens_per_batch):
        batch = [nonempty[j] for j in batch]
        for i, f in zip(batch, _forward(target, [rows[i] for i in batch], layers)):
            feats[i] = f
        if progress is not None:
            progress.update(sum(len(rows[i]) for i in batch))
    return [{"input_ids": torch.tensor(r, dtype=torch.long), "features": f,
             "loss_mask": torch.tensor(list(ex.loss_mask), dtype=torch.uint8),
             **({"layers": h} if layers else {})}
            for ex, r, (f, h) in zip(examples, rows, feats)]


def stream_features(target, examples_iter, max_tokens_per_batch: int = 4096, window: int = 64,
                    layers=None):
    """Online mode (notebooks, streaming training): yield `compute_features` dicts in input order,
    sorting by length only within windows of `window` examples: nothing waits on the whole set."""
    it = iter(examples_iter)
    while chunk := list(islice(it, window)):
        yield from compute_features(target, chunk, max_tokens_per_batch, layers=layers)


def _pack(examples) -> dict:
    """Concatenate examples' ids and masks; `offsets: [n + 1]` marks where each one starts."""
    ids = [t for ex in examples for t in ex.input_ids]
    mask = [m for ex in examples for m in ex.loss_mask]
    lengths = [0] + [len(ex.input_ids) for ex in examples]
    return {"input_ids": torch.tensor(ids, dtype=torch.long),
            "loss_mask": torch.tensor(mask, dtype=torch.uint8),
            "offsets": torch.tensor(lengths, dtype=torch.long).cumsum(0)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    """Temp file + fsync + rename: a reader (or a resumed run) sees the old file or the new one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _verify(path: Path, entry: dict) -> None:
    """EagleMiniError unless the shard has the manifest's size and sha256 (hashed in chunks)."""
    ok = path.is_file() and path.stat().st_size == entry["bytes"]
    if ok:
        with open(path, "rb") as f:
            ok = hashlib.file_digest(f, "sha256").hexdigest() == entry["sha256"]
    if not ok:
        raise EagleMiniError(f"feature shard {path} is missing or corrupt (its size or sha256 "
                             "differs from manifest.json); rerun the dump to redo it")


def _identity(manifest: dict) -> dict:
    """What must match for a dump to resume: format, fingerprint, shard size, the info keys."""
    return {**{k: manifest.get(k) for k in ("format", "fingerprint", "shard_size", "dtype",
                                            "layers")},
            **manifest.get("info", {})} if manifest else {}


def _remove_unlisted(out: Path, shards: dict) -> None:
    """Delete shard files (and temp files of killed writes) the manifest does not vouch for."""
    keep = {s["file"] for s in shards.values()}
    for path in [*out.glob("shard_*"), *out.glob("manifest.json.*.tmp")]:
        if path.name not in keep:
            path.unlink()


def _write_manifest(out: Path, manifest: dict, shards: dict) -> None:
    listed = [shards[k] for k in sorted(shards)]
    manifest["counts"] = {key: sum(s[key] for s in listed)
                          for key in ("examples", "tokens", "loss_tokens")}
    manifest["shards"] = listed
    _write_atomic(out / "manifest.json", json.dumps(manifest, indent=1).encode())


def _resume_dump(out: Path, manifest: dict, target) -> dict:
    """The shards an earlier dump into `out` left that still verify, by index; refuses a dump of
    another run. Unlisted files are deleted and the manifest rewritten (incomplete)."""
    path = out / "manifest.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    was, now = _identity(old), _identity(manifest)
    differ = [f"{k}: {was.get(k)!r} there, {now.get(k)!r} now" for k in {**was, **now}
              if old and was.get(k) != now.get(k)]
    if differ:
        raise EagleMiniError(f"{out} holds features of another run (target {old.get('target')}; "
                             f"{'; '.join(differ)}), not {target.name}'s: use another directory")
    manifest.update(target=target.name, hidden_size=target.hidden_size, complete=False)
    shards = {}
    for entry in old.get("shards", []):
        try:
            _verify(out / entry["file"], entry)
            shards[entry["first_example"] // manifest["shard_size"]] = entry
        except EagleMiniError:
            pass  # partial or corrupt: deleted below and redone
    _remove_unlisted(out, shards)
    _write_manifest(out, manifest, shards)
    return shards


def _write_shard(target, out: Path, k: int, shard_size: int, chunk: list, packed: dict,
                 ids_hash: str, max_tokens_per_batch: int, bar, layers) -> dict:
    """Compute shard k's features (and `layers`' hidden states), write it; its manifest entry."""
    rows = compute_features(target, chunk, max_tokens_per_batch, progress=bar, layers=layers)
    packed["features"] = torch.cat([r["features"] for r in rows])
    if layers:
        packed["layers"] = torch.cat([r["layers"] for r in rows])
    data = save_tensors(packed, metadata={"first_example": str(k * shard_size)})
    name = f"shard_{k:05d}.safetensors"
    _write_atomic(out / name, data)
    return {"file": name, "first_example": k * shard_size, "examples": len(chunk),
            "tokens": len(packed["input_ids"]),
            "loss_tokens": int(packed["loss_mask"].sum()), "bytes": len(data),
            "sha256": _sha256(data), "examples_sha256": ids_hash}


def dump_features(target, examples, out_dir, manifest_info: dict, shard_size: int = 256,
                  max_tokens_per_batch: int = 4096, max_shards: int | None = None,
                  progress: bool = True, layers=None) -> dict:
    """Compute features shard by shard into `out_dir`; resumable; returns the manifest.

    Shard k (`shard_{k:05d}.safetensors`) holds examples [k * shard_size, (k + 1) * shard_size) of
    the deterministic `examples` iterable: `input_ids`, `loss_mask`, `offsets`, `features`. On a
    rerun a listed shard whose file verifies (size + sha256) and whose ids/masks match the examples
    again is kept without a forward; anything else is recomputed. `manifest_info` (split, max_len,
    tokenizer, ...) and the target fingerprint must match an existing manifest: no mixing.
    `max_shards` stops after writing that many new shards. `layers` (an EAGLE-3 head's
    `aux_layers`) also stores the hidden states entering those layers, bf16, as `layers`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"format": FORMAT, "fingerprint": target_fingerprint(target),
                "info": json.loads(json.dumps(manifest_info)), "shard_size": shard_size,
                "dtype": "float16", **({"layers": list(layers)} if layers else {})}
    shards = _resume_dump(out, manifest, target)
    bar = tqdm(desc=f"features {out.name}", unit="tok", unit_scale=True, disable=not progress)
    it, k, written = iter(examples), 0, 0
    while max_shards is None or written < max_shards:
        chunk = list(islice(it, shard_size))
        if not chunk:
            manifest["complete"] = True
            shards = {i: s for i, s in shards.items() if i < k}  # the data may have shrunk
            _remove_unlisted(out, shards)
            break
        packed = _pack(chunk)
        ids_hash = _sha256(b"".join(t.numpy().tobytes() for t in packed.values()))
        if k not in shards or shards[k]["examples_sha256"] != ids_hash:
            shards[k] = _write_shard(target, out, k, shard_size, chunk, packed, ids_hash,
                                     max_tokens_per_batch, bar, layers)
            written += 1
            _write_manifest(out, manifest, shards)
        k += 1
        bar.set_postfix(shards=f"{k}", examples=sum(s["examples"] for s in shards.values()))
    bar.close()
    _write_manifest(out, manifest, shards)
    return manifest


class FeatureDataset:
    """Dumped features as a dataset of `compute_features` dicts; a shard is checked on first read.

        >>> ds = FeatureDataset("feats"); ds.check_target(target); len(ds)  # doctest: +SKIP
    """

    def __init__(self, path):
        self.dir = Path(path)
        if not (self.dir / "manifest.json").is_file():
            raise EagleMiniError(f"{self.dir} has no manifest.json: not a feature dump "
                                 "(run `python -m eagle_mini dump-features`)")
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        if self.manifest.get("format") != FORMAT:
            raise EagleMiniError(f"{self.dir}/manifest.json is not in format {FORMAT}")
        self.shards = self.manifest["shards"]
        self._verified = set()        # shard positions whose bytes matched the manifest
        self._loaded = (None, None)   # (shard position, its examples): random access reuses it

    def __len__(self) -> int:
        return sum(s["examples"] for s in self.shards)

    def _shard(self, j: int) -> list[dict]:
        if self._loaded[0] != j:
            if j not in self._verified:
                _verify(self.dir / self.shards[j]["file"], self.shards[j])
                self._verified.add(j)
            t = load_file(self.dir / self.shards[j]["file"])
            o = t["offsets"].tolist()
            keys = [k for k in ("input_ids", "features", "loss_mask", "layers") if k in t]
            self._loaded = (j, [{key: t[key][a:b] for key in keys} for a, b in zip(o, o[1:])])
        return self._loaded[1]

    def __iter__(self):
        for j in range(len(self.shards)):
            yield from self._shard(j)

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        j = 0
        while i >= self.shards[j]["examples"]:
            i -= self.shards[j]["examples"]
            j += 1
        return self._shard(j)[i]

    def check_target(self, target) -> None:
        """Refuse to train a head for `target` on features another target computed."""
        fp = target_fingerprint(target)
        if fp != self.manifest["fingerprint"]:
            raise EagleMiniError(f"{self.dir} holds features of {self.manifest['target']} "
                                 f"(fingerprint {self.manifest['fingerprint']}), not of "
                                 f"{target.name} (fingerprint {fp}): dump features for this target")


def dump_command(target_name: str = "smollm2-135m", data: str = "sharegpt", split: str = "train",
                 max_conversations: int | None = None, max_len: int = 2048, out: str = "features",
                 start: int = 0, shard_size: int = 256, batch_tokens: int = 4096,
                 dtype: str = "fp32", device: str = "cpu", progress: bool = True,
                 eagle3: bool = False) -> dict:
    """`dump-features`: load the target, template ShareGPT with its chat template, dump (resumable).

    Everything but `max_conversations` identifies the dump: a larger one extends it on a rerun.
    Conversations without assistant tokens (within `max_len`) teach the head nothing: not stored.
    eagle3: also store the layers an EAGLE-3 head reads (`eagle3.aux_layers`), several times the disk.
    """
    if data != "sharegpt":
        raise EagleMiniError(f"unknown training data {data!r}; known: sharegpt")
    target = load_target(target_name, dtype=dtype, device=device)
    return dump_target(target, target_name, split, max_conversations, max_len, out, start,
                       shard_size, batch_tokens, progress, eagle3)


def dump_target(target, target_name: str, split: str = "train", max_conversations: int | None = None,
                max_len: int = 2048, out: str = "features", start: int = 0, shard_size: int = 256,
                batch_tokens: int = 4096, progress: bool = True, eagle3: bool = False) -> dict:
    """`dump_command` on a target already loaded (a 7B target is loaded once for dump and training:
    `course/gpu_scale.py`); `target_name` is what the dump's manifest names its tokenizer by."""
    data = "sharegpt"
    template = getattr(target.tokenizer, "chat_template", None) or ""
    info = {"data": data, "split": split, "max_len": max_len, "start": start,
            "tokenizer": target_name, "template_sha256": _sha256(str(template).encode())[:16]}
    examples = (ex for ex in iter_conversations(split, target.tokenizer, max_len,
                                                max_conversations, start, read_sharegpt())
                if any(ex.loss_mask))
    from eagle_mini.heads.eagle3 import aux_layers
    layers = aux_layers(target.config.num_hidden_layers) if eagle3 else None
    return dump_features(target, examples, out, info, shard_size, batch_tokens, progress=progress,
                         layers=layers)
