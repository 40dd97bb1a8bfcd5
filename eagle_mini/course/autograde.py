"""Autograding submitted notebooks, assignments and numbered notebooks alike, one graded cell per
fresh process.

For each graded cell of an exercise, grading builds a job from the *source* (`plan`):

1. a prelude (one torch thread, warnings off);
2. the setup: an assignment's locked setup cells whole, a numbered notebook's cells tagged
   `exercise-setup` reduced to their definitions;
3. each solution cell as `submission.define` takes it from the submission: the functions the
   exercise asks for, the cell's helpers, imports and constants, screened, in a namespace of their
   own (`submission.extract`); nothing else the student wrote runs;
4. the definitions of the graded cells before it, then its own definitions and hidden tests.

The visible tests do not run: they call the student's code outside the guard, on data the
narration made. The hidden tests check the same properties on fresh tiny inputs, with the package's
answer out of reach (`guard.reference_off`).

Every job runs in a child forked from one process (`serve`, `python -m eagle_mini.course.autograde`)
that imports torch and the package once and never runs a submission: each graded cell gets a fresh
copy of it, so nothing one cell's code leaves behind reaches another; it runs in an empty temporary
folder and is killed after `timeout` seconds. A cell scores its points when it runs without an
error; its process says so with a token that its code cannot read (a local of the process that
forked it).

    python -m eagle_mini assignments grade path/to/submitted.ipynb
"""
import ast
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from eagle_mini.course.assignments import (HIDDEN_TESTS, NOTEBOOKS, SETUP_TAG, SOURCE, _definitions,
                                           _nbgrader, grade_ids, numbered_notebooks,
                                           source_notebooks)
from eagle_mini.course.submission import extract
from eagle_mini.errors import EagleMiniError

CELL_TIMEOUT = 120  # seconds one graded cell may run, its setup included
STARTUP = 300       # seconds the forking process may take to import torch and the package
PRELUDE = ("import warnings\n\nimport torch\n\n"
           "warnings.simplefilter(\"ignore\")\ntorch.set_num_threads(1)\n")
RESULT_BYTES = 8000  # the most a cell's process reports


@dataclass
class Grade:
    """Points of one submitted notebook. scores: grade id -> (points, max points), in cell order;
    errors: grade id -> "ExceptionName: message" for every graded cell that failed; notes: what
    grading left out of the submission or could not find; verdict: why nothing was graded (not a
    notebook, no exercise of the course, another exercise than the one asked for)."""
    submission: Path
    assignment: str
    scores: dict[str, tuple[float, float]]
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    verdict: str = ""

    @property
    def total(self) -> tuple[float, float]:
        return (sum(s for s, _ in self.scores.values()), sum(m for _, m in self.scores.values()))

    def report(self) -> str:
        """A few lines for a terminal: points per exercise, the error of a failed one, the total,
        then the notes."""
        if self.verdict:
            return f"{self.submission}: not graded: {self.verdict}"
        width = max(len(g) for g in self.scores) + 2
        lines = [f"{self.submission} ({self.assignment})"]
        for gid, (score, most) in self.scores.items():
            why = f"   {self.errors[gid][:100]}" if gid in self.errors and score < most else ""
            lines.append(f"  {gid:<{width}}{score:g} / {most:g}{why}")
        score, most = self.total
        lines.append(f"  {'total':<{width}}{score:g} / {most:g}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ---------------------------------------------------------------- what a submission is

def read_notebook(path: Path) -> dict:
    if not path.is_file():
        raise EagleMiniError(f"submission {path} is not a file")
    try:
        notebook = json.loads(path.read_text())
        [c["cell_type"] for c in notebook["cells"]]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise EagleMiniError(f"submission {path} is not a Jupyter notebook") from None
    return notebook


def _code(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def asked(cell: dict) -> list[str]:
    """The functions a source solution cell defines: what the exercise asks for."""
    return [n.name for n in ast.parse(_code(cell)).body if isinstance(n, ast.FunctionDef)]


def _defined(cell: dict) -> set[str]:
    """The functions a submitted code cell defines at top level (none if it does not parse)."""
    try:
        return {n.name for n in ast.parse(_code(cell)).body if isinstance(n, ast.FunctionDef)}
    except SyntaxError:
        return set()


def _solution_ids(notebook: dict) -> set[str]:
    return {_nbgrader(c).get("grade_id") for c in notebook["cells"] if _nbgrader(c).get("solution")}


def identify(submitted: dict, sources: dict[str, dict]) -> str:
    """Which exercise a submission answers: by its graded or solution cells' ids (the file may have
    been renamed), else by the functions it defines, when one exercise alone asks for them all."""
    ids = set(grade_ids(submitted)) | _solution_ids(submitted)
    for name, notebook in sources.items():
        if ids & (set(grade_ids(notebook)) | _solution_ids(notebook)):
            return name
    defined = set().union(*[_defined(c) for c in submitted["cells"] if c["cell_type"] == "code"])
    matches = [name for name, notebook in sources.items()
               if (wanted := {f for c in notebook["cells"] if _nbgrader(c).get("solution")
                              for f in asked(c)}) and wanted <= defined]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise EagleMiniError(f"its cells lost their grading marks, and its functions fit "
                             f"{' and '.join(matches)}: say which with --assignment")
    raise EagleMiniError(f"no graded cell of any assignment or numbered notebook "
                         f"({', '.join(sources)})")


def _which(submitted: dict, sources: dict[str, dict], expected: str) -> str:
    """The exercise a submission is graded as: the one it answers, which must be `expected` when
    that is given; one that cannot be identified is graded as `expected`."""
    try:
        name = identify(submitted, sources)
    except EagleMiniError:
        if expected:
            return expected
        raise
    if expected and name != expected:
        raise EagleMiniError(f"it answers {name}, not {expected}")
    return name


# ---------------------------------------------------------------- what grading runs

def _solution(cell: dict, submitted: dict) -> tuple[str, list[str]]:
    """The grading cell for one source solution cell: `define` of what the submission's answer
    keeps -> (code, notes)."""
    gid, names = _nbgrader(cell)["grade_id"], asked(cell)
    answers = [c for c in submitted["cells"] if _nbgrader(c).get("grade_id") == gid]
    notes = []
    if not answers:
        answers = [c for c in submitted["cells"]
                   if c["cell_type"] == "code" and set(names) <= _defined(c)][-1:]
        notes.append(f"no solution cell {gid} (deleted, or its grading marks removed)"
                     + (f": {', '.join(names)} taken from another cell" if answers
                        else f": {', '.join(names)} not found"))
    kept = extract(_code(answers[0]) if answers else "", names)
    notes += [f"{gid}: {n}" for n in kept.notes if answers]
    code = ("from eagle_mini.course.submission import define\n"
            f"define(globals(), {gid!r}, {kept.code!r}, {names!r}, {kept.refused!r})\n")
    return code, notes


def plan(source: dict, submitted: dict, lesson: bool) -> tuple[list[tuple[str, float, list[str]]],
                                                               list[str]]:
    """What grading runs for each graded cell of exercise `source` (a numbered notebook when
    `lesson`) on `submitted` -> ([(grade id, points, cells)], notes); see the module docstring."""
    cells, jobs, notes = [PRELUDE], [], []
    for cell in source["cells"]:
        meta, text = _nbgrader(cell), _code(cell)
        if cell["cell_type"] != "code":
            continue
        if meta.get("grade"):
            visible, marker, hidden = text.partition(HIDDEN_TESTS)
            jobs.append((meta["grade_id"], meta["points"], cells + [_definitions(visible) + marker
                                                                    + hidden]))
            cells = cells + [_definitions(visible)]
        elif meta.get("solution"):
            code, more = _solution(cell, submitted)
            cells, notes = cells + [code], notes + more
        elif lesson and SETUP_TAG in cell["metadata"].get("tags", []):
            cells = cells + [_definitions(text)]
        elif not lesson and meta.get("locked"):
            cells = cells + [text]
    return jobs, notes


def _imports(cells: list[str]) -> list[str]:
    """The modules the cells import at top level: the forking process imports them once."""
    found = []
    for text in cells:
        try:
            body = ast.parse(text).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
    return sorted(set(found))


def grade(submissions, source: Path = SOURCE, numbered: Path = NOTEBOOKS, expected: str = "",
          timeout: float = CELL_TIMEOUT, workers: int = 1) -> list[Grade]:
    """Autograde submitted notebooks (any mix of assignments and numbered notebooks), each graded
    cell in a fresh process (the module's docstring). A file that cannot be graded gets a Grade
    with a verdict; `expected` names the exercise every submission must answer."""
    lessons = numbered_notebooks(numbered)
    sources = {name: json.loads(path.read_text())
               for name, path in {**source_notebooks(source), **lessons}.items()}
    if expected and expected not in sources:
        raise EagleMiniError(f"there is no exercise {expected} ({', '.join(sources)})")
    grades, jobs = [], []
    for path in map(Path, submissions):
        try:
            submitted = read_notebook(path)
            name = _which(submitted, sources, expected)
        except EagleMiniError as e:
            grades.append(Grade(path, "", {}, verdict=str(e)))
            continue
        todo, notes = plan(sources[name], submitted, name in lessons)
        grades.append(Grade(path, name, {gid: (0.0, p) for gid, p, _ in todo}, notes=notes))
        jobs += [(grades[-1], gid, points, cells) for gid, points, cells in todo]
    results = run([cells for *_, cells in jobs], timeout, workers)
    for (g, gid, points, _), error in zip(jobs, results):
        g.scores[gid] = (0.0 if error else float(points), float(points))
        if error:
            g.errors[gid] = error
    return grades


# ---------------------------------------------------------------- running the jobs

def run(jobs: list[list[str]], timeout: float = CELL_TIMEOUT, workers: int = 1) -> list[str | None]:
    """Run each job (its cells, in order) in a fresh process forked by one `serve` process ->
    per job, None when its last cell ran without an error, else why it failed."""
    if not jobs:
        return []
    spec = {"jobs": jobs, "timeout": timeout, "workers": workers,
            "preload": _imports([c for cells in jobs for c in cells])}
    deadline = STARTUP + math.ceil(len(jobs) / workers) * (timeout + 10)
    package = str(Path(__file__).resolve().parents[2])  # this eagle_mini, wherever it is imported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package,
                                                                      os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="eagle_mini_grading.") as tmp:
        log = Path(tmp) / "server.log"
        with log.open("wb") as err:
            server = subprocess.Popen([sys.executable, "-m", "eagle_mini.course.autograde"],
                                      cwd=tmp, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            try:
                out, _ = server.communicate(json.dumps(spec).encode(), timeout=deadline)
                why = f"the grading process stopped: {_last_line(log)}"
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                out, _ = server.communicate()
                why = f"grading stopped after {deadline} s before this cell finished"
    results = [f"RuntimeError: {why}"] * len(jobs)
    for line in out.decode(errors="replace").splitlines():
        done = json.loads(line)
        results[done["job"]] = done["error"]
    return results


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no error message"


def _printable(value, depth: int = 0) -> bool:
    """Whether printing `value` runs only Python's and torch's code: text, numbers, exact tensors
    and short lists or tuples of them (a hidden test's assert message)."""
    kind = type(value)
    if kind in (str, int, float, bool, type(None)):
        return True
    if kind in (list, tuple) and depth < 3 and len(value) <= 100:
        return all(_printable(v, depth + 1) for v in value)
    torch = sys.modules.get("torch")
    return torch is not None and kind is torch.Tensor


def _describe(error: BaseException) -> str:
    """"Name: message" of an exception, without running code the exception's class may define."""
    kind = type(error)
    args = vars(BaseException)["args"].__get__(error, kind)
    known = kind.__module__.partition(".")[0] in ("builtins", "torch", "eagle_mini")
    message = BaseException.__str__(error) if known and _printable(args) else ""
    return f"{kind.__name__}: {message}".strip().splitlines()[0][:RESULT_BYTES // 2]


def _failed_assert(error: BaseException, text: str, filename: str) -> str:
    """"AssertionError: `test` failed" for an assert of the cell `text` (compiled as `filename`)
    that failed, with its message when that is text; '' for any other error. A hidden test's
    message is its inputs and results, data that says less than the assert it failed."""
    if type(error) is not AssertionError:
        return ""
    tb, line = error.__traceback__, None
    while tb is not None:  # the cell's last line on the way to the error
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    asserts = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Assert)
               and node.lineno <= (line or 0) <= node.end_lineno]
    if not asserts:
        return ""
    test = " ".join(ast.get_source_segment(text, asserts[-1].test).split())
    args = vars(BaseException)["args"].__get__(error, AssertionError)
    said = f": {args[0]}" if len(args) == 1 and type(args[0]) is str else ""
    return f"AssertionError: `{test}` failed{said}".splitlines()[0][:RESULT_BYTES // 2]


def _execute(cells: list[str]) -> str | None:
    """Run the cells in a fresh `__main__` namespace -> the last cell's error, or None; an assert
    of the cell itself that failed is reported by its test (`_failed_assert`)."""
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    error = None
    for i, text in enumerate(cells):
        filename = f"<grading cell {i}>"
        try:
            exec(compile(text, filename, "exec"), module.__dict__)
            error = None
        except BaseException as e:  # a submission's error, whatever its kind, fails the cell
            error = _failed_assert(e, text, filename) or _describe(e)
    return error


def _child(cells: list[str], folder: str, fd: int, nonce: str, others: list[int]):
    """The forked process of one job: run it in `folder`, write the nonce and the result, exit.
    `others`: the pipes of the jobs running beside it, closed here."""
    write, leave = os.write, os._exit
    try:
        for other in others:
            os.close(other)
        os.chdir(folder)
        quiet = os.open(os.devnull, os.O_RDONLY)
        log = os.open("cell.log", os.O_WRONLY | os.O_CREAT, 0o600)
        for target, source in ((0, quiet), (1, log), (2, log)):
            os.dup2(source, target)
        error = _execute(cells)
    except BaseException as e:
        error = _describe(e)
    write(fd, (nonce + "\n" + (error or "")).encode()[:RESULT_BYTES])
    leave(0)


def _reap(pid: int, status_fd: int, nonce: str, killed: bool) -> str | None:
    data = b""
    while chunk := os.read(status_fd, RESULT_BYTES):
        data += chunk
    os.close(status_fd)
    if killed:
        return "TimeoutError: the cell ran past its time limit (an endless loop?)"
    head, _, error = data.decode(errors="replace").partition("\n")
    if head != nonce:
        return "RuntimeError: the cell's process ended without a result"
    return error or None


def serve():
    """The forking process: read the jobs (JSON on stdin), import what they import, then run each
    in a forked child, `workers` at a time; write one JSON line per finished job."""
    spec = json.loads(sys.stdin.buffer.read())
    for module in spec["preload"]:
        try:
            __import__(module)
        except Exception:  # a cell that needs it fails, with its own error
            pass
    pending, running = list(enumerate(spec["jobs"])), {}
    root = Path(tempfile.mkdtemp(prefix="jobs.", dir="."))
    while pending or running:
        while pending and len(running) < spec["workers"]:
            index, cells = pending.pop(0)
            folder, nonce = root / str(index), secrets.token_hex(16)
            folder.mkdir()
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _child(cells, str(folder), write, nonce, [r for _, r, _, _ in running.values()])
            os.close(write)
            running[pid] = (index, read, nonce, time.monotonic() + spec["timeout"])
        time.sleep(0.02)
        for pid, (index, read, nonce, deadline) in list(running.items()):
            killed = time.monotonic() > deadline
            if killed:
                os.kill(pid, signal.SIGKILL)
            if os.waitpid(pid, 0 if killed else os.WNOHANG)[0] == pid:
                del running[pid]
                error = _reap(pid, read, nonce, killed)
                print(json.dumps({"job": index, "error": error}), flush=True)


if __name__ == "__main__":
    serve()
