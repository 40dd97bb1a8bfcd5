"""Draft heads: `base` (what every head shares), `eagle1` (EAGLE's head), `eagle3` (EAGLE-3's),
`formats` (the authors' checkpoint layouts), and here which head to use: an explicit directory,
the shipped head of a target, or a random one.

Shipped heads live in `data/heads/<target>/` of the repository (bf16 safetensors + config.json +
model card). A random head is allowed -- EAGLE stays lossless with any head -- but it accepts almost
nothing, so every caller is told which one it got.
"""
import json
from pathlib import Path

from eagle_mini.errors import EagleMiniError
from eagle_mini.heads.eagle1 import KIND as EAGLE1_KIND, DraftHead, new_head
from eagle_mini.heads.eagle3 import KIND, Eagle3Head
from eagle_mini.heads.formats import EAGLE3_ARCH, load_eagle3, load_official

HEAD_KINDS = (EAGLE1_KIND, KIND)   # what `train-head --kind` builds; a config's "kind"
SHIPPED = Path(__file__).resolve().parents[2] / "data" / "heads"


def repository_path(path) -> str:
    """A path as the repository names it (`data/heads/...`), wherever the command ran; a path
    outside the repository stays as given.

    >>> repository_path(SHIPPED / "smollm2-135m")
    'data/heads/smollm2-135m'
    """
    root = SHIPPED.parent.parent
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def head_kind(head) -> str:
    """"eagle3" for an EAGLE-3 head, "eagle1" for an EAGLE-1 head (`DraftHead`)."""
    return getattr(head, "kind", EAGLE1_KIND)


def check_head_dir(head_dir) -> Path:
    """`head_dir` as a Path when it is a folder; a one-line error saying it does not exist (or is
    a file) otherwise, before any loader looks for the files inside it."""
    d = Path(head_dir)
    if not d.exists():
        raise EagleMiniError(f"draft head folder {head_dir} does not exist")
    if not d.is_dir():
        raise EagleMiniError(f"draft head {head_dir} is a file; give the folder that holds a "
                             "head's config.json and weights")
    return d


def load_head(head_dir, target=None):
    """A head directory in our format (`DraftHead.save`, `Eagle3Head.save`, told apart by the
    config's "kind"), an EAGLE-3 head in the authors' layout (`formats.load_eagle3`) or an official
    EAGLE-1 checkpoint."""
    d = check_head_dir(head_dir)
    cfg = read_config(d)
    if EAGLE3_ARCH in cfg.get("architectures", []):   # the authors' EAGLE-3: safetensors or a bin
        return load_eagle3(d, target)
    if (d / "pytorch_model.bin").exists() and not (d / "model.safetensors").exists():
        return load_official(d, target)
    if config_kind(cfg) == KIND:
        return Eagle3Head.load(d, target)
    return DraftHead.load(d, target)


def read_config(d: Path) -> dict:
    """A head directory's parsed config.json, {} when it has none or it is not a JSON object (the
    loaders then name what is missing or damaged)."""
    try:
        cfg = json.loads((Path(d) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def config_kind(cfg: dict) -> str:
    """The kind of head a parsed config describes: "eagle3" for ours (`"kind": "eagle3"`) and for
    the authors' EAGLE-3 layout (architecture `LlamaForCausalLMEagle3`), else "eagle1".

        >>> config_kind({"kind": "eagle3"}), config_kind({"architectures": [EAGLE3_ARCH]})
        ('eagle3', 'eagle3')
        >>> config_kind({"architectures": ["LlamaForCausalLM"]})
        'eagle1'
    """
    archs = cfg.get("architectures") or []
    return KIND if cfg.get("kind") == KIND or EAGLE3_ARCH in archs else EAGLE1_KIND


def shipped_heads(target_name: str) -> list[Path]:
    """Every shipped head directory for `target_name` (its config names the target)."""
    out = []
    for d in sorted(SHIPPED.glob("*/config.json")):
        try:
            if json.loads(d.read_text()).get("target_name") == target_name:
                out.append(d.parent)
        except json.JSONDecodeError:
            continue
    return out


def measured_tau(head_dir: Path) -> float | None:
    """The MT-bench tau `eval-head` recorded for a shipped head
    (`data/results/eval_head_<dir name>.json`), None if it was never evaluated."""
    path = SHIPPED.parent / "results" / f"eval_head_{Path(head_dir).name}.json"
    try:
        return json.loads(path.read_text())["mtbench"]["tau"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return None


def default_head(target, head_dir=None, kind: str | None = None) -> tuple:
    """(head, one-line note saying which head it is and why).

    head_dir: that head. Otherwise the shipped head for the target with the highest measured
    MT-bench tau (`measured_tau`), of `kind` ("eagle1" / "eagle3") when given; with none shipped,
    a random EAGLE-1 head, said so."""
    if head_dir is not None:
        head = load_head(head_dir, target)
        if kind is not None and head_kind(head) != kind:
            raise EagleMiniError(f"{repository_path(head_dir)} holds an {head_kind(head)} head, "
                                 f"not an {kind} head")
        return head, f"draft head from {repository_path(head_dir)}"
    shipped = [d for d in shipped_heads(target.name) if kind is None or config_kind(read_config(d)) == kind]
    if shipped:
        best = max(shipped, key=lambda d: (measured_tau(d) or 0.0, d.name))
        head = load_head(best, target)
        seen = getattr(head, "meta", {}).get("tokens_seen")
        tau = measured_tau(best)
        why = (f", MT-bench tau {tau:.2f}" if tau is not None else "") + (
            f", best of {len(shipped)} shipped" if len(shipped) > 1 else "")
        return head, (f"shipped {head_kind(head).upper().replace('EAGLE', 'EAGLE-')} head "
                      f"{repository_path(best)}" + (f" ({seen:,} training tokens{why})" if seen
                                                    else f" ({why.lstrip(', ')})" if why else ""))
    if kind == KIND:
        raise EagleMiniError(f"no shipped EAGLE-3 head for {target.name} yet: pass --head DIR "
                             "(train one with `train-head --kind eagle3`)")
    return new_head(target, seed=0), ("UNTRAINED random draft head (no shipped head for "
                                      f"{target.name} yet): lossless, but it accepts almost nothing")
