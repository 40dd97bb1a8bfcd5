"""Small helpers the notebooks share: the run scale and a consistent look for figures.

`EAGLE_MINI_SCALE=ci` runs every notebook in <= 2 minutes on a 2-core CPU (what CI executes under
nbval); `classroom` (the default) is the learner's run, <= 10 minutes per notebook; `gpu` is the
learner's run on a CUDA GPU with a real target, named by `EAGLE_MINI_TARGET` (a hub id or a
local model directory), else the card class's (`gpu_fit.py`: a 1.5B target on a T4, 7B on the
larger cards); `gpu_scale.py` runs it.

    >>> pick(ci=2, classroom=20)   # doctest: +SKIP
    20
    >>> pick(ci=2, classroom=20, gpu=2000)   # at EAGLE_MINI_SCALE=gpu  # doctest: +SKIP
    2000
"""
import os

SCALES = ("ci", "classroom", "gpu")
DEFAULT_GPU_TARGET = "vicuna-7b"   # `EAGLE_MINI_TARGET` unset: the paper's target


def scale() -> str:
    s = os.environ.get("EAGLE_MINI_SCALE", "classroom")
    if s not in SCALES:
        raise ValueError(f"EAGLE_MINI_SCALE must be one of {SCALES}, got {s!r}")
    return s


def pick(ci, classroom, gpu=None):
    """The value for the current scale; at `gpu` scale `gpu`, or `classroom` when not given."""
    s = scale()
    if s == "ci":
        return ci
    return classroom if s == "classroom" or gpu is None else gpu


def gpu_target() -> str:
    """The target of the `gpu` scale: `EAGLE_MINI_TARGET` (a course name, hub id or local model
    directory), else the card class's (`EAGLE_MINI_GPU_SCALE`, or the GPU at hand:
    `gpu_fit.card_scale`), else, without a GPU, `DEFAULT_GPU_TARGET`."""
    import torch

    from eagle_mini.course.gpu_fit import card_scale
    if os.environ.get("EAGLE_MINI_TARGET"):
        return os.environ["EAGLE_MINI_TARGET"]
    if os.environ.get("EAGLE_MINI_GPU_SCALE") or torch.cuda.is_available():
        return card_scale().target
    return DEFAULT_GPU_TARGET


def check(claim: str, holds) -> None:
    """Print a checked claim as the learner reads it: "✓ claim" when it holds, "✗ claim" when not.
    nbval compares these lines with the committed run's (cells tagged `nbval-check-output`), so a
    claim that stops holding fails CI.

    >>> check("two tokens cost less than two forwards", 1.3 < 2)
    ✓ two tokens cost less than two forwards
    """
    boolean = (type(holds).__name__ in ("bool", "bool_")   # Python's or numpy's
               or (str(getattr(holds, "dtype", "")) == "torch.bool" and holds.numel() == 1))
    if not boolean:
        raise TypeError(f"check({claim!r}, ...) takes whether the claim holds, a bool; got {holds!r}")
    print(("✓ " if bool(holds) else "✗ ") + claim)


def setup_plots():
    """seaborn's clean style, readable sizes; call once at the top of a notebook."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="notebook")
    plt.rcParams["figure.dpi"] = 90


def roofline_seconds(n: int, weight_bytes: float, flops_per_token: float, bytes_per_s: float,
                     flops_per_s: float) -> float:
    """The roofline estimate of one batch-1 forward of n new tokens: the slower of reading every
    weight once (shared by all n tokens) and doing n tokens' matmuls. KV cache, activations and
    per-kernel overheads are left out, so a measured forward is never faster than this.

    >>> roofline_seconds(1, weight_bytes=4e8, flops_per_token=2e8, bytes_per_s=1e10, flops_per_s=1e11)
    0.04
    """
    return max(weight_bytes / bytes_per_s, n * flops_per_token / flops_per_s)
