"""`make notebooks`: run the numbered notebooks the way their committed outputs are made.

Each notebook runs top to bottom in a fresh kernel, one after the other (never two at once: the
notebooks time things), at `EAGLE_MINI_SCALE=classroom` unless told otherwise, with its folder as
the working directory, and is written back in place with its outputs, execution counts, each cell's
timestamps and its widgets' state. The notebook's metadata gains what the run was:

    "eagle_mini": {"scale": ..., "minutes": ..., "machine": {...machine_info()...},
                   "command": "python -m eagle_mini notebooks ..."}

so the README's run-time table (`python -m eagle_mini results-md`) can name the machine beside
each time. A cell that raises stops that notebook and leaves its file as it was.

    python -m eagle_mini notebooks                                 # what `make notebooks` runs
    python -m eagle_mini notebooks notebooks/04_draft_trees.ipynb --scale ci
"""
import os
import time
from contextlib import contextmanager
from pathlib import Path

from eagle_mini.course import SCALES
from eagle_mini.errors import EagleMiniError
from eagle_mini.results import machine_info

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1200          # seconds one cell may run
KEY = "eagle_mini"      # the notebook metadata entry this writes


def numbered(root: Path = ROOT) -> list[Path]:
    """The course's numbered notebooks, in order."""
    return sorted((Path(root) / "notebooks").glob("[0-9]*.ipynb"))


@contextmanager
def _scale(name: str):
    """`EAGLE_MINI_SCALE` for the kernels started inside (they inherit this process's environment)."""
    old = os.environ.get("EAGLE_MINI_SCALE")
    os.environ["EAGLE_MINI_SCALE"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("EAGLE_MINI_SCALE", None)
        else:
            os.environ["EAGLE_MINI_SCALE"] = old


def execute(path, scale: str = "classroom", timeout: int = TIMEOUT, command: str = "") -> dict:
    """Run one notebook in place; returns the run's record (also stored in its metadata)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    path = Path(path)
    if scale not in SCALES:
        raise EagleMiniError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")
    if path.suffix != ".ipynb" or not path.is_file():
        raise EagleMiniError(f"{path}: not a notebook file")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several kinds for a file that is not a notebook
        raise EagleMiniError(f"{path}: not a readable notebook ({type(e).__name__})") from None
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            store_widget_state=True,
                            resources={"metadata": {"path": str(path.resolve().parent)}})
    start = time.perf_counter()
    with _scale(scale):
        try:
            client.execute()
        except CellTimeoutError:
            raise EagleMiniError(f"{path}: a cell ran past {timeout} s; the file is unchanged") from None
        except CellExecutionError as e:
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise EagleMiniError(f"{path}: a cell raised ({last}); the file is unchanged") from None
    run = {"scale": scale, "minutes": round((time.perf_counter() - start) / 60, 2),
           "machine": machine_info(), "command": command}
    nb.metadata[KEY] = run
    nbformat.write(nb, path)
    return run


def execute_all(paths=None, scale: str = "classroom", timeout: int = TIMEOUT, command: str = "",
                report=print) -> dict[Path, dict]:
    """Run each notebook in turn (default: every numbered one); stops at the first that fails."""
    paths = [Path(p) for p in paths] if paths else numbered()
    if not paths:
        raise EagleMiniError("no notebooks to run")
    runs = {}
    for path in paths:
        runs[path] = execute(path, scale, timeout, command)
        report(f"{path}: {runs[path]['minutes']:.1f} min at {scale} scale "
               f"({runs[path]['machine']['cpu']})")
    return runs
