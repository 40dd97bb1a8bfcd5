"""Classroom exercises with nbgrader's markings: the sources, their student editions, and the
helpers grading shares with them, for two kinds of notebook.

* The seven assignments, in nbgrader's course layout
  `notebooks/assignments/source/<name>/<name>.ipynb`: one idea of EAGLE / EAGLE-2 each, on tiny
  models that run in seconds.
* The inline exercises of the numbered notebooks `notebooks/NN_*.ipynb`, marked the same way:
  nbgrader cell metadata (solution cells, graded cells with points), `### BEGIN SOLUTION` and
  `### BEGIN HIDDEN TESTS` regions, and the cells whose definitions the exercises need tagged
  `exercise-setup`.

* `release()` runs nbgrader's `generate_assignment` (solutions replaced by a stub, hidden tests
  removed) in a throwaway course directory and writes the student editions: every assignment to
  `notebooks/assignments/release/<name>/`, every numbered notebook to `notebooks/student/`.
  Solution and graded cells start without output (execution counts kept), and so do the cells
  that give a predict-then-run question's answer away (tagged `predict-answer`); the narration
  keeps its outputs. The output is deterministic, so it is committed.
* Grading lives in `autograde` (`grade`), the guard in `guard`, what of a submission is graded in
  `submission`.
* `random_choices` is a helper the notebooks' tests import.

nbgrader is a development dependency; only `release` imports it.

    python -m eagle_mini assignments release
"""
import ast
import json
import os
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

from eagle_mini.errors import EagleMiniError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ASSIGNMENTS = NOTEBOOKS / "assignments"
SOURCE = ASSIGNMENTS / "source"
RELEASE = ASSIGNMENTS / "release"
STUDENT = NOTEBOOKS / "student"
GLOSSARY = "GLOSSARY.md"  # the numbered notebooks link to it; student editions get a copy
SETUP_TAG = "exercise-setup"  # a numbered notebook's cell whose definitions its exercises need
PREDICT_TAG = "predict-answer"  # a cell that reveals a predict-then-run answer: no output in student editions
HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


# ---------------------------------------------------------------- used by the notebooks' tests

def random_choices(rng, n_nodes: int, max_rank: int = 3) -> list[list[int]]:
    """`n_nodes` random draft nodes as EAGLE-1 choices (EAGLE §3.1), in the order they were made.

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


def numbered_notebooks(folder: Path = NOTEBOOKS) -> dict[str, Path]:
    """Numbered notebook name -> its path `NN_*.ipynb`, sorted: every one gets a student edition."""
    return {p.stem: p for p in sorted(folder.glob("[0-9]*.ipynb"))}


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)  # a constant, e.g. ROOT = -1
            return True
        except (ValueError, TypeError):
            return False
    return isinstance(node, DEFINITIONS)


def _definitions(source: str) -> str:
    """A cell's top-level imports, functions, classes and constants, without the statements that
    run them on the notebook's own data. A cell that does not parse is kept whole (it fails).

    >>> print(_definitions("import math\\nN = 4\\ndef f(x):\\n    return x\\nprint(f(N))"), end="")
    import math
    N = 4
    def f(x):
        return x
    """
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return source
    lines, kept = source.splitlines(), []
    # a statement runs from its first line (decorators included) to the next statement's: the
    # comments that end a function (### END SOLUTION) belong to it
    starts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) for n in body]
    for node, start, end in zip(body, starts, starts[1:] + [len(lines) + 1]):
        if _is_definition(node):
            kept += lines[start - 1:end - 1]
    return "".join(line + "\n" for line in kept)


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


def _without_run_metadata(notebook: dict) -> dict:
    """Drop the timestamps a run leaves in cell metadata: sources are committed executed, student
    editions must not change with every run."""
    for cell in notebook["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    return notebook


def _write(notebook: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def _student_edition(path: Path, out: Path) -> Path:
    """Copy a notebook nbgrader generated to `out`, solution and graded cells without outputs
    (they came from the solutions and the hidden tests), and so are the cells tagged
    `predict-answer` (they reveal a predict-then-run question's answer), and no cell keeps a
    predict question's stored answer (`metadata["eagle_mini"]["answer"]`); the narration keeps its
    outputs. Every
    code cell keeps its execution count, as nbval and the notebook checks expect of an executed
    notebook."""
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        ours = cell["metadata"].get("eagle_mini", {})
        ours.pop("answer", None)          # a predict question's stored answer stays with the teacher
        if not ours:
            cell["metadata"].pop("eagle_mini", None)
        answer = PREDICT_TAG in cell["metadata"].get("tags", [])
        if cell["cell_type"] == "code" and (_nbgrader(cell) or answer):
            cell["outputs"] = []
            for key in ("collapsed", "scrolled"):
                cell["metadata"].pop(key, None)
    _write(notebook, out)
    return out


@contextmanager
def _course(notebooks: dict[str, dict]):
    """A throwaway nbgrader course whose assignments are `notebooks` (name -> notebook), each
    generated; yields (api, root).

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
        for name, notebook in notebooks.items():
            _write(_without_run_metadata(notebook), root / "source" / name / f"{name}.ipynb")
        write_kernel_spec(root / "kernels" / "python3")
        config = Config()
        config.CourseDirectory.root = str(root)
        config.ClearOutput.enabled = False  # _student_edition clears what a student must not see
        config.KernelManager.transport_encryption = "auto"  # the kernelspec offers CurveZMQ
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        with _environment(JUPYTER_PATH=str(root), PATH=path), warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)  # nbgrader's gradebook sessions are noisy
            api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
            for name in notebooks:
                _check(api.generate_assignment(name), f"to generate {name}")
            yield api, root


def release(source: Path = SOURCE, out: Path = RELEASE, numbered: Path = NOTEBOOKS,
            student: Path = STUDENT) -> list[Path]:
    """Write the student editions: every assignment's to `out/<name>/<name>.ipynb`, every
    numbered notebook's to `student/<name>.ipynb`, and beside them a copy of the glossary the
    notebooks link to (`GLOSSARY.md`, so the links resolve in `student/` too); returns the files
    written.

    Earlier editions go first, so a removed notebook's disappears too (only `out` folders that hold
    a `<folder>.ipynb` and `student` files named like a numbered notebook: nothing else is touched).
    """
    assignments, lessons = source_notebooks(source), numbered_notebooks(numbered)
    notebooks = {name: json.loads(path.read_text())
                 for name, path in {**assignments, **lessons}.items()}
    with _course(notebooks) as (_, root):
        for stale in source_notebooks(out).values() if out.is_dir() else ():
            shutil.rmtree(stale.parent)
        for stale in numbered_notebooks(student).values():
            stale.unlink()
        written = []
        for name in notebooks:
            to = out / name / f"{name}.ipynb" if name in assignments else student / f"{name}.ipynb"
            written.append(_student_edition(root / "release" / name / f"{name}.ipynb", to))
        glossary = numbered / GLOSSARY
        if glossary.exists() and lessons:
            written.append(Path(shutil.copyfile(glossary, student / GLOSSARY)))
        return written
