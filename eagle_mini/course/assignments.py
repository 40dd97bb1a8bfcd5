"""Classroom assignments with nbgrader: the helpers their tests use, releasing and autograding.

Seven assignments, one idea of EAGLE / EAGLE-2 each, live in nbgrader's course layout under
`notebooks/assignments/source/<name>/<name>.ipynb`. Each asks for one or two functions in solution
cells and grades them in locked cells whose visible asserts and hidden tests compare them with
eagle_mini's own implementation on random inputs: the package is the oracle.

* `release()` runs nbgrader's `generate_assignment` (solutions replaced by a stub, hidden tests
  removed) in a throwaway course directory and writes the student versions to
  `notebooks/assignments/release/`; the output is deterministic, so it is committed.
* `grade(paths)` autogrades submitted notebooks in a throwaway course directory with a fresh
  gradebook: grade cells, hidden tests included, are restored from the sources, and every notebook
  runs in a kernel of *this* interpreter, offline, with a timeout per cell.
* `random_choices` is what the notebooks' tests import; the guard their hidden tests run a
  student's code under, `reference_off`, is `guard.py`.

nbgrader is a development dependency; only `release` and `grade` import it.

    python -m eagle_mini.course.assignments release
    python -m eagle_mini.course.assignments grade path/to/submitted.ipynb
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EagleMiniError

ASSIGNMENTS = Path(__file__).resolve().parents[2] / "notebooks" / "assignments"
SOURCE = ASSIGNMENTS / "source"
RELEASE = ASSIGNMENTS / "release"
CELL_TIMEOUT = 120  # seconds a cell may run when autograding; every assignment cell needs a few


# ---------------------------------------------------------------- used by the notebooks' tests

def random_choices(rng, n_nodes: int, max_rank: int = 3) -> list[list[int]]:
    """`n_nodes` random draft nodes as EAGLE-1 choices (EAGLE §3.2), in the order they were made.

    Each new node hangs from a random earlier node (the root included) with fewer than `max_rank`
    children and takes the next free rank, so every prefix of a choice is a choice too.

    >>> import random
    >>> random_choices(random.Random(0), 4)
    [[0], [0, 0], [1], [0, 0, 0]]
    """
    paths, children = [()], {(): 0}
    while len(paths) <= n_nodes:
        parent = rng.choice(paths)
        if children[parent] < max_rank:
            child = parent + (children[parent],)
            children[parent] += 1
            children[child] = 0
            paths.append(child)
    return [list(p) for p in paths[1:]]


# ---------------------------------------------------------------- the instructor's side

def source_notebooks(source: Path = SOURCE) -> dict[str, Path]:
    """Assignment name -> its source notebook `source/<name>/<name>.ipynb`, sorted by name."""
    if not source.is_dir():
        raise EagleMiniError(f"no assignment sources at {source}")
    return {d.name: d / f"{d.name}.ipynb" for d in sorted(source.iterdir())
            if (d / f"{d.name}.ipynb").is_file()}


def grade_ids(notebook: dict) -> list[str]:
    """The grade ids of a notebook's graded cells, in cell order."""
    return [c["metadata"]["nbgrader"]["grade_id"] for c in notebook["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


@contextmanager
def _environment(**variables):
    """Set environment variables (seen by the kernels nbgrader starts) for the block only."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _check(result: dict, what: str) -> None:
    if not result["success"]:
        tail = "\n".join(result.get("log", "").splitlines()[-15:])
        raise EagleMiniError(f"nbgrader failed {what}:\n{tail}")


def _strip_run_metadata(path: Path) -> None:
    """Drop the timestamps a run leaves in cell metadata: sources are committed executed, student
    versions must not change with every run."""
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


@contextmanager
def _course(names, source: Path):
    """A throwaway nbgrader course with `names` generated from `source`; yields (api, root).

    Kernels: a `python3` kernelspec of this interpreter comes first on JUPYTER_PATH, so a user's
    own `python3` kernel (another environment) is never picked. nbgrader creates its gradebook by
    running the `alembic` script, which sits next to this interpreter.
    """
    from ipykernel.kernelspec import write_kernel_spec
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.exc import SAWarning
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="eagle_mini_course.") as tmp:
        root = Path(tmp)
        for name in names:
            shutil.copytree(source / name, root / "source" / name)
            for nb in (root / "source" / name).glob("*.ipynb"):
                _strip_run_metadata(nb)
        write_kernel_spec(root / "kernels" / "python3")
        config = Config()
        config.CourseDirectory.root = str(root)
        config.Execute.timeout = CELL_TIMEOUT
        config.KernelManager.transport_encryption = "auto"  # the kernelspec offers CurveZMQ
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        with _environment(JUPYTER_PATH=str(root), PATH=path), warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook sessions are noisy
            api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
            for name in names:
                _check(api.generate_assignment(name), f"to generate {name}")
            yield api, root


def release(source: Path = SOURCE, out: Path = RELEASE) -> list[Path]:
    """Write every assignment's student version to `out/<name>/`; returns the notebooks written.

    Earlier versions go first, so a removed assignment disappears too (only folders that hold a
    `<folder>.ipynb` are removed: nothing else in `out` is touched).
    """
    names = list(source_notebooks(source))
    out.mkdir(parents=True, exist_ok=True)
    with _course(names, source) as (_, root):
        for stale in source_notebooks(out).values():
            shutil.rmtree(stale.parent)
        for name in names:
            shutil.copytree(root / "release" / name, out / name)
    return [out / name / f"{name}.ipynb" for name in names]


@dataclass
class Grade:
    """Points of one submitted notebook. scores: grade id -> (points, max points), in cell order;
    errors: cell (grade id, else cell id) -> "ExceptionName: message" for every cell that raised."""
    submission: Path
    assignment: str
    scores: dict[str, tuple[float, float]]
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> tuple[float, float]:
        return (sum(s for s, _ in self.scores.values()), sum(m for _, m in self.scores.values()))

    def report(self) -> str:
        """A few lines for a terminal: points per exercise, the error of a failed one, the total."""
        width = max(len(g) for g in self.scores) + 2
        lines = [f"{self.submission} ({self.assignment})"]
        for gid, (score, most) in self.scores.items():
            why = f"   {self.errors[gid][:100]}" if gid in self.errors and score < most else ""
            lines.append(f"  {gid:<{width}}{score:g} / {most:g}{why}")
        score, most = self.total
        lines.append(f"  {'total':<{width}}{score:g} / {most:g}")
        return "\n".join(lines)


def _read_notebook(path: Path) -> dict:
    if not path.is_file():
        raise EagleMiniError(f"submission {path} is not a file")
    try:
        notebook = json.loads(path.read_text())
        notebook["cells"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise EagleMiniError(f"submission {path} is not a Jupyter notebook") from None
    return notebook


def identify(path: Path, sources: dict[str, Path]) -> str:
    """Which assignment a submitted notebook answers, from its graded cells' ids (the file may
    have been renamed)."""
    ids = set(grade_ids(_read_notebook(path)))
    for name, notebook in sources.items():
        if ids & set(grade_ids(json.loads(notebook.read_text()))):
            return name
    raise EagleMiniError(f"submission {path} has no graded cell of any assignment in "
                         f"{', '.join(sources)}")


def _errors(notebook: dict) -> dict[str, str]:
    out = {}
    for cell in notebook["cells"]:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                name = cell["metadata"].get("nbgrader", {}).get("grade_id", cell.get("id"))
                out[name] = f"{o['ename']}: {o['evalue']}".strip().splitlines()[0]
                break
    return out


def grade(submissions, source: Path = SOURCE) -> list[Grade]:
    """Autograde submitted notebooks (any mix of assignments), one fresh kernel each."""
    from nbgrader.api import Gradebook

    paths = [Path(p) for p in submissions]
    sources = source_notebooks(source)
    names = [identify(p, sources) for p in paths]
    with _course(sorted(set(names)), source) as (api, root):
        for i, (path, name) in enumerate(zip(paths, names)):
            dest = root / "submitted" / f"student{i}" / name / f"{name}.ipynb"
            dest.parent.mkdir(parents=True)
            shutil.copyfile(path, dest)
        for name in sorted(set(names)):
            _check(api.autograde(name, "*"), f"to autograde {name}")
        grades = []
        with Gradebook(api.coursedir.db_url) as gb:
            for i, (path, name) in enumerate(zip(paths, names)):
                student = f"student{i}"
                cells = {g.name: g for g in gb.find_submission_notebook(name, name, student).grades}
                order = grade_ids(json.loads(sources[name].read_text()))
                executed = root / "autograded" / student / name / f"{name}.ipynb"
                scores = {gid: (cells[gid].score, cells[gid].max_score) for gid in order}
                grades.append(Grade(path, name, scores, _errors(json.loads(executed.read_text()))))
    return grades


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle_mini.course.assignments",
                                     description="Release and autograde the nbgrader assignments.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("release", help=f"write the student versions to {RELEASE}")
    grading = commands.add_parser("grade", help="autograde one submitted notebook")
    grading.add_argument("submission", nargs="?", default="", help="path to the .ipynb")
    args = parser.parse_args(argv)
    try:
        if args.command == "release":
            for path in release():
                print(f"wrote {path}")
        else:
            if not args.submission:
                raise EagleMiniError("say which notebook to grade: "
                                     "make grade SUBMISSION=path/to/notebook.ipynb")
            print(grade([args.submission])[0].report())
    except EagleMiniError as e:
        print(f"eagle-mini: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
