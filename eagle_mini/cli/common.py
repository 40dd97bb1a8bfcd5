"""What every command shares: the parser class, argument types, the target and head option groups,
loading the target and the head, and turning parsed options into a package's dataclass config."""
import argparse
import dataclasses
import os
import sys

from eagle_mini.errors import EagleMiniError


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (exit code 2) like every other user error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def bounded_int(text: str, least: int, words: str) -> int:
    """An argparse type: `text` as an integer of at least `least`, else `words` in the error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {words}, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    return bounded_int(text, 0, "an integer >= 0")


def positive_int(text: str) -> int:
    return bounded_int(text, 1, "a positive integer")


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a share strictly between 0 and 1, got {value}")
    return value


def checked(check):
    """An argparse type running `check(text)` (a package check that raises `EagleMiniError`) before
    anything loads: its error becomes argparse's one line; the text is kept as given."""
    def parse(text: str) -> str:
        try:
            check(text)
        except EagleMiniError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text
    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def _check_device(text):
    from eagle_mini.models import check_device
    check_device(text)


def _check_methods(text):
    from eagle_mini.methods import method
    for name in text.split(","):
        method(name.strip())


def _check_head_dir(text):
    from eagle_mini.heads import check_head_dir
    check_head_dir(text)


def _check_tree(text):
    from eagle_mini.methods import resolve_tree
    resolve_tree(text)


# --device (`models.check_device`), --methods a,b (every name the table's), --head DIR (a folder
# that exists), --tree as text (the one reader of trees, `methods.resolve_tree`)
device, method_names = checked(_check_device), checked(_check_methods)
head_dir, tree_spec = checked(_check_head_dir), checked(_check_tree)


def config_from(cls, args, **given):
    """A dataclass `cls` from the parsed options that share a name with its fields (`given`
    overrides or adds fields the options do not name alike)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{**values, **given})


def command_line() -> str:
    """The command as a user typed it, for the results files."""
    return "python -m eagle_mini " + " ".join(sys.argv[1:])


def add_target_args(p):
    p.add_argument("--model", default="smollm2-135m",
                   help="course target name, local HF model directory, or hub id")
    p.add_argument("--dtype", default="fp32", help="fp32 (default), bf16 or fp16")
    p.add_argument("--device", type=device, default="cpu",
                   help="cpu (default), cuda, cuda:N or mps: one this machine has")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--kernels", default="auto",
                   choices=["auto", "packed", "onednn", "mkl", "stock"],
                   help="CPU matmuls: weights laid out once (packed.py: onednn, fp32 and bf16; mkl, "
                        "fp32; packed: the first of these here), the stock kernels, or auto (the "
                        "fastest here, timed once per CPU model and cached)")
    p.add_argument("--no-pack", dest="kernels", action="store_const", const="stock",
                   help="the same as --kernels stock")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "medium"],
                   help="fp32 matmuls (torch.set_float32_matmul_precision): highest, exact, the "
                        "default; high/medium allow bf16-based internals, lossless only against "
                        "vanilla in the same mode, up to ties (check-lossless it first)")


def add_decode_target_args(p):
    """The target's options for a command that decodes or times forwards, plus `--exact`."""
    add_target_args(p)
    p.add_argument("--exact", default="auto", choices=["auto", "on", "off"],
                   help="batch-invariant verification (runtime/exact/): every tree node's logits "
                        "bit-identical to vanilla's one-token step, checked on this machine; auto "
                        "(default): on in bf16/fp16, off in fp32; off: the stock forward, equal to "
                        "vanilla only up to near-ties in bf16, and faster (profile-target "
                        "--compare-exact)")
    p.add_argument("--prefill", default="stock", choices=["stock", "exact"],
                   help="in exact mode, how the prompt is prefilled: stock (default: the stock "
                        "forward, shared by vanilla and EAGLE, so both hold the same cache) or "
                        "exact (row invariant like every later forward: slower, and Hugging Face's "
                        "prompt lookup, which prefills the prompt with its candidates, then keeps "
                        "vanilla's text too)")


def add_head_args(p):
    p.add_argument("--head", type=head_dir, default=None,
                   help="draft head directory (default: the shipped head for the target, if any)")
    from eagle_mini.methods import tree_forms
    p.add_argument("--tree", default=None,
                   help=f"the draft tree, overriding the method's: {tree_forms()}; the same as "
                        "Python's tree= (methods.resolve_tree)".replace("%", "%%"))
    add_draft_vocab(p)


def add_draft_vocab(p):
    p.add_argument("--draft-vocab", type=nonnegative_int, default=0, metavar="N",
                   help="draft over the N tokens the target writes most often in the head's "
                        "training replies only (FR-Spec, heads/frequent.py): cheaper draft steps, "
                        "the output unchanged; 0 (default): the head's own draft vocabulary")


def set_threads(threads: int | None) -> None:
    """--threads N: torch's CPU threads, at most the CPUs this process may run on (more threads
    than cores only contend for them); a cap is said in one line."""
    if not threads:
        return
    import torch
    from eagle_mini.measure.load import usable_cores
    cpus = usable_cores()
    if cpus and threads > cpus:
        print(f"eagle-mini: --threads {threads} is more than the {cpus} CPUs this process may use: "
              f"using {cpus}", file=sys.stderr)
        threads = cpus
    torch.set_num_threads(threads)


def check_kernels(kernels: str, dtype: str, device: str) -> None:
    """An explicit packed kind (`--kernels mkl|onednn`) this CPU cannot run in `dtype` is an error
    before loading, not a silent fall back to the stock kernels (MKL packs fp32 only)."""
    from eagle_mini.runtime.packed import KINDS, available
    if kernels not in KINDS or dtype == "auto" or not device.startswith("cpu"):
        return
    from eagle_mini.models import torch_dtype
    if not available(torch_dtype(dtype), kernels):
        here = [k for k in KINDS if available(torch_dtype(dtype), k)]
        raise EagleMiniError(f"--kernels {kernels} cannot run {dtype} on this CPU (mkl packs fp32 "
                             f"only; onednn needs oneDNN, and bf16 support for bf16): use "
                             + " or ".join(f"--kernels {k}" for k in here + ["stock"])
                             + (", or --dtype fp32" if dtype != "fp32" else ""))


def load(args):
    from eagle_mini.models import load_target
    set_threads(args.threads)
    check_kernels(args.kernels, args.dtype, args.device)
    device = args.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:  # `accelerate launch`: one GPU per process
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    if args.matmul_precision != "highest":
        from eagle_mini.runtime.precision import set_matmul_precision
        print(set_matmul_precision(args.matmul_precision), file=sys.stderr)
    from eagle_mini.runtime.kernels import use_kernels
    target = load_target(args.model, dtype=args.dtype, device=device, pack=args.kernels != "stock")
    use_kernels(target, args.kernels)
    if getattr(args, "exact", None) is not None:   # only the decoding commands have --exact
        from eagle_mini.runtime.exact import use_exact
        record = use_exact(target, args.exact)
        target.runtime.prefill = getattr(args, "prefill", "stock")
        if record is not None:
            prefill = "" if not record.exact else f"; prefill: {target.runtime.prefill}"
            print(record.line() + prefill, file=sys.stderr)
    return target


def head_for(args, target, methods=()):
    """--head DIR, else the best shipped head for the target, else a random head (said loudly).
    When `methods` draft with more than one head kind (the table's `head` column): {kind: head},
    the best shipped head of each kind (`runtime.run.pick_head` hands each method its own).
    `--draft-vocab N`: each drafting over the N most frequent tokens (`heads/frequent.py`)."""
    head, note = _heads(args, target, methods)
    n = getattr(args, "draft_vocab", 0)
    if n:
        from eagle_mini.heads.frequent import narrowed
        from eagle_mini.training.commands import frequent_tokens
        head = narrowed(head, frequent_tokens(target, n))
        note += f"; drafting over the {n:,} most frequent tokens (FR-Spec)"
    return head, note


def _heads(args, target, methods):
    from eagle_mini.heads import HEAD_KINDS, default_head
    from eagle_mini.methods import method
    kinds = sorted({method(m).head for m in methods if method(m).is_eagle}, key=HEAD_KINDS.index)
    if args.head is not None or kinds in ([], [HEAD_KINDS[0]]):
        return default_head(target, args.head)
    heads = {kind: default_head(target, kind=kind) for kind in kinds}
    if len(heads) == 1:
        return next(iter(heads.values()))
    return ({k: h for k, (h, _) in heads.items()}, "; ".join(n for _, n in heads.values()))


def tree_arg(spec):
    """--tree text -> the tree Python's `tree=` gives for it (`methods.resolve_tree`, the one
    reader of tree names and specs); a bad spec fails before any loading."""
    from eagle_mini.methods import resolve_tree
    return None if spec is None else resolve_tree(spec)


def refuse_ignored(args, options, why):
    """An option given explicitly that the chosen method would ignore is an error, not dropped."""
    given = [flag for flag in options if getattr(args, flag.lstrip("-").replace("-", "_")) is not None]
    if given:
        raise EagleMiniError(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect "
                             f"{why}; leave {'it' if len(given) == 1 else 'them'} out")


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def write_text(path, text: str) -> None:
    """`--out PATH`: write it, its folder made first."""
    from pathlib import Path
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
