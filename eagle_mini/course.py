"""Small helpers the notebooks share: the run scale and a consistent look for figures.

`EAGLE_MINI_SCALE=ci` runs every notebook in <= 2 minutes on a 2-core CPU (what CI executes under
nbval); `classroom` (the default) is the learner's run, <= 10 minutes per notebook.

    >>> pick(ci=2, classroom=20)   # doctest: +SKIP
    20
"""
import os

SCALES = ("ci", "classroom")


def scale() -> str:
    s = os.environ.get("EAGLE_MINI_SCALE", "classroom")
    if s not in SCALES:
        raise ValueError(f"EAGLE_MINI_SCALE must be one of {SCALES}, got {s!r}")
    return s


def pick(ci, classroom):
    """The value for the current scale."""
    return ci if scale() == "ci" else classroom


def setup_plots():
    """seaborn's clean style, readable sizes; call once at the top of a notebook."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    sns.set_theme(style="whitegrid", context="notebook")
    plt.rcParams["figure.dpi"] = 90
