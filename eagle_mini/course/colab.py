"""Colab as a learner meets it: telling a Colab runtime apart, the commands that
clone and install the course there, and the scale set for the card at hand.

A notebook opened in Colab starts in a bare runtime: the package is not installed yet, so its first
cell cannot import it. `first_cell` writes that cell's source: it detects Colab itself
(`'google.colab' in sys.modules`), clones and installs only there, and sets the scale with `%env`.
After the install, `colab_setup` does the same from Python (`os.environ`). The clone URL is
derived (`clone_url`: this checkout's git remote, else the package's metadata); where neither has
one, `setup_commands` says in one line where to paste it instead of printing a placeholder.
"""
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch

from eagle_mini.course.gpu_fit import card_scale

ROOT = Path(__file__).resolve().parents[2]
PASTE = ("no clone URL here (no git remote, no URL in the package's metadata): copy it from the "
         "repository's page (its Code button) into `!git clone URL eagle_mini`")


def on_colab(modules=None) -> bool:
    """Whether this Python runs on Colab: its `google.colab` module is loaded there.

        >>> on_colab({"google.colab": object()}), on_colab({})
        (True, False)
    """
    return "google.colab" in (sys.modules if modules is None else modules)


def clone_url(root=ROOT) -> str | None:
    """The URL to clone the course from: `root`'s git remote `origin`, else a source URL in the
    installed package's metadata (`Project-URL`, `Home-page`); None when neither says."""
    try:
        remote = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"],
                                capture_output=True, text=True, timeout=10)
        if remote.returncode == 0 and remote.stdout.strip():
            return remote.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        meta = metadata.metadata("eagle-mini")
    except metadata.PackageNotFoundError:
        return None
    urls = [entry.partition(",")[2].strip() for entry in meta.get_all("Project-URL") or []]
    return next((u for u in urls + [meta.get("Home-page") or ""] if u), None)


def setup_commands(url: str | None) -> list[str]:
    """The notebook lines that clone and install the course (README.md, 'On a GPU'), or the one
    line saying where to paste the URL when there is none."""
    if not url:
        return [f"# {PASTE}"]
    return [f"!git clone {url} eagle_mini", "%cd eagle_mini", "!make gpu-setup"]


def first_cell(url: str | None = None) -> str:
    """The source of a notebook's first cell: on Colab only, clone and install, then the `gpu`
    scale with `%env` (the card class follows from the GPU: `gpu_fit.card_scale`)."""
    lines = setup_commands(url if url is not None else clone_url())
    body = "\n".join(f"    {line}" for line in [*lines, "%env EAGLE_MINI_SCALE=gpu"])
    return ("# On Colab (detected, not assumed): clone and install the course, then its GPU scale.\n"
            "import sys\n"
            "if 'google.colab' in sys.modules:\n" + body + "\n")


def colab_setup(modules=None, environ=None, url: str | None = None,
                total_bytes: int | None = None) -> list[str]:
    """On Colab: the setup commands (`setup_commands`) to run, with `EAGLE_MINI_SCALE=gpu` and the
    card class (`EAGLE_MINI_GPU_SCALE`) set in `environ` (default `os.environ`) where a GPU is
    there and they are not set already. Elsewhere: [] and nothing set."""
    if not on_colab(modules):
        return []
    environ = os.environ if environ is None else environ
    if total_bytes is not None or torch.cuda.is_available():
        environ.setdefault("EAGLE_MINI_SCALE", "gpu")
        environ.setdefault("EAGLE_MINI_GPU_SCALE", card_scale(total_bytes).name)
    return setup_commands(url if url is not None else clone_url())
