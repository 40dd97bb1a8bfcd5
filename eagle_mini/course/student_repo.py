"""What a class is given: a repository of its own, written from this one, with the course as the
students see it and nothing of the instructor's side.

* `write(out)` fills a new (or empty) folder with
  - the student editions of the numbered notebooks (`notebooks/student/`, as `make assignments`
    writes them) as `notebooks/NN_*.ipynb`, beside the glossary they link to;
  - the released assignments (`notebooks/assignments/release/<name>/`) as
    `notebooks/assignments/<name>/<name>.ipynb`;
  - the package and what runs it: `eagle_mini/`, `pyproject.toml`, `environment.yml`,
    `requirements-assets.txt`, `requirements-gpu.txt`, the data the notebooks read (`data/`), the
    documents and scripts they read or link (`docs/`, `scripts/`, `RESULTS.md`, `CHANGELOG.md`);
  - a README for students (with the course's notebook table, and the course README's sections its
    documents point to) and a Makefile whose set-up rules, and the asset macro they call, are this
    repository's own (`setup`, `assets`, `gpu-setup`, `demo`, `clean`, plus `lab`): `make setup`
    on a fresh machine installs the packages and the course assets.

  Left out: the instructor editions (`notebooks/NN_*.ipynb` here), the assignments' sources with
  their solutions and hidden tests (`notebooks/assignments/source/`), the grading guide
  (`notebooks/assignments/README.md`), this guide for instructors (`notebooks/INSTRUCTOR.md`), the
  test suite and the reasoning behind the predict-then-run answers (`course/answers.py`). The
  answers themselves, which the student editions keep in cell metadata
  (`metadata["eagle_mini"]["answer"]`), are dropped on the way.
* `leaks(root, answers())` lists everything of the instructor's side under a folder, one line
  each, and every file that states a predict-then-run answer (`answers`: each telling phrase of
  the instructor editions' stored answers; a notebook may state its own once its answer cells have
  run); `write` runs it on what it wrote and fails if it finds anything.

    python -m eagle_mini student-repo ../eagle-mini-class      # make student-repo DIR=...
"""
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from eagle_mini.course.assignments import (GLOSSARY, HIDDEN_TESTS, NOTEBOOKS, PREDICT_TAG, RELEASE,
                                           SOURCE, STUDENT, _write, grade_ids, numbered_notebooks,
                                           source_notebooks)
from eagle_mini.errors import EagleMiniError

ROOT = NOTEBOOKS.parent
# Copied as they are (when present): the package, its set-up, the data and documents it reads.
COPIED = ("eagle_mini", "data", "docs", "scripts", "pyproject.toml", "environment.yml",
          "requirements-assets.txt", "requirements-gpu.txt", "RESULTS.md", "CHANGELOG.md", ".gitignore")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")
INSTRUCTOR_GUIDE = "INSTRUCTOR.md"
# Files of the instructor's side inside the copied folders: left out on the way.
WITHHELD = {"eagle_mini/course/answers.py": "the reasoning behind the predict questions' answers"}
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", HIDDEN_TESTS, "### END HIDDEN TESTS")
STUB = "raise NotImplementedError()"
# The Makefile's rules a class needs, and the macro they install the course assets with, taken
# from this repository's Makefile as they are.
MAKE_RULES = ("setup", "$(STAMP)", "assets", "gpu-setup", "demo", "clean")
ASSET_MACRO = "install_assets"
# When each assignment fits (the grading guide's suggested order): after this numbered notebook.
AFTER = {"draft_head": "03", "training_loss": "03", "tree_attention": "04", "eagle2_tree": "04",
         "greedy_verification": "05", "rejection_sampling": "05", "cache_compaction": "05"}


# ---------------------------------------------------------------- the checker

def notebook_leaks(notebook: dict) -> list[str]:
    """What of a notebook belongs to the instructor: solution or hidden-test markers, a solution
    cell that holds more than the stub, outputs of solution, graded or answer cells (they came from
    the solutions, the hidden tests and the answers), a predict question's stored answer."""
    found = []
    for i, cell in enumerate(notebook.get("cells", [])):
        source, meta = "".join(cell.get("source", "")), cell.get("metadata", {})
        nbgrader, tags = meta.get("nbgrader", {}), meta.get("tags", [])
        found += [f"cell {i}: {marker}" for marker in MARKERS if marker in source]
        if nbgrader.get("solution") and cell.get("cell_type") == "code" and STUB not in source:
            found.append(f"cell {i}: a solution cell without the `{STUB}` stub")
        if cell.get("outputs") and (nbgrader.get("solution") or nbgrader.get("grade")):
            found.append(f"cell {i}: outputs of a solution or graded cell")
        if cell.get("outputs") and PREDICT_TAG in tags:
            found.append(f"cell {i}: outputs of a `{PREDICT_TAG}` cell")
        if meta.get("eagle_mini", {}).get("answer"):
            found.append(f"cell {i}: a predict question's answer in its metadata")
    return found


def forbidden(path: Path) -> str:
    """Why a file (its path relative to the student repository) must not be there, or ''."""
    parts = path.parts
    if path.as_posix() in WITHHELD:
        return WITHHELD[path.as_posix()]
    if path.name == INSTRUCTOR_GUIDE:
        return "the instructor's guide"
    if any(a == "assignments" and b == "source" for a, b in zip(parts, parts[1:])):
        return "an assignment's source (solutions and hidden tests)"
    if path.name == "README.md" and len(parts) > 1 and parts[-2] == "assignments":
        return "the grading guide"
    if parts[0] == "tests":
        return "the test suite (grading routes, cheats, oracles)"
    return ""


@dataclass(frozen=True)
class Answer:
    """One phrase of a predict-then-run answer, as the instructor edition of `notebook` stores it
    (`metadata["eagle_mini"]["answer"]`); that notebook may say it from cell `shown` on, where its
    answer cells have run."""
    phrase: str
    notebook: str
    shown: int


NUMBER = re.compile(r"\d[\d,]*(\.\d+)?")


def telling(phrase: str) -> bool:
    """Whether finding `phrase` in a file gives an answer away, not a coincidence: a number with
    at least 4 significant digits (shorter ones recur in any table of measurements), or text of
    at least 3 words. Markdown emphasis and a trailing `x` or `%` do not count.

    >>> [telling(p) for p in ("1,234,567", "**1.25**", "3.5x", "half a day", "(b)")]
    [True, False, False, True, False]
    """
    bare = phrase.strip("*` ").rstrip("x%")
    if NUMBER.fullmatch(bare):
        return len(re.sub(r"\D", "", bare).lstrip("0")) >= 4
    return len(re.findall(r"[A-Za-z]+", bare)) >= 3


def spelled(phrase: str) -> re.Pattern:
    """Every way a file may write `phrase`: a number with or without thousands separators (`,` or
    `_`), not as part of a longer number; text in any case.

    >>> [bool(spelled("1,234,567").search(t)) for t in ("1234567", "1_234_567", "11234567")]
    [True, True, False]
    """
    bare = phrase.strip("*` ").rstrip("x%")
    if not NUMBER.fullmatch(bare):
        return re.compile(re.escape(bare), re.IGNORECASE)
    whole, _, decimals = bare.replace(",", "").partition(".")
    groups = [whole[max(0, i - 3):i] for i in range(len(whole), 0, -3)][::-1]
    return re.compile(r"(?<![\d.,_])" + "[,_]?".join(groups)
                      + (re.escape("." + decimals) if decimals else "") + r"(?![\d])")


def answers(root: Path = ROOT) -> list[Answer]:
    """Every telling phrase (`telling`) of every predict-then-run answer in the numbered notebooks'
    instructor editions under `root`, with the cell from which its own notebook may say it."""
    found = []
    for name, path in numbered_notebooks(root / NOTEBOOKS.relative_to(ROOT)).items():
        cells = json.loads(path.read_text())["cells"]
        tagged = [k for k, c in enumerate(cells)
                  if PREDICT_TAG in c.get("metadata", {}).get("tags", [])]
        for i, cell in enumerate(cells):
            phrases = cell.get("metadata", {}).get("eagle_mini", {}).get("answer") or []
            shown = next((k for k in tagged if k > i), len(cells))
            found += [Answer(p, name, shown) for p in phrases if telling(p)]
    return found


def cell_text(cell: dict) -> str:
    """A cell as a reader sees it: its source and the text of its outputs."""
    parts = ["".join(cell.get("source", ""))]
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        parts += ["".join(t) for t in (output.get("text"), *(data.get(k) for k in (
            "text/plain", "text/markdown", "text/html"))) if t]
    return "\n".join(parts)


def _stated(path: Path, rel: Path, told) -> list[str]:
    """The answers (`told`) that a file states; a notebook may state its own answers from their
    answer cells on."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:  # weights, figures: no prose
        return []
    cells = None
    if path.suffix == ".ipynb":
        try:
            cells = [cell_text(c) for c in json.loads(text)["cells"]]
        except (json.JSONDecodeError, KeyError, TypeError):
            cells = None
    found = []
    for answer in told:
        seen = text if cells is None or answer.notebook != path.stem else \
            "\n".join(cells[:answer.shown])
        if spelled(answer.phrase).search(seen):
            found.append(f"{rel.as_posix()}: states {answer.phrase!r}, an answer of "
                         f"{answer.notebook}'s predict question")
    return found


def leaks(root, told=()) -> list[str]:
    """Everything of the instructor's side under `root`, as "path: why" lines: files that must not
    be there (`forbidden`), in every notebook what `notebook_leaks` finds, and in every file each
    of the answers `told` (`answers`) that it states."""
    root, found = Path(root), []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        why = forbidden(rel)
        if why:
            found.append(f"{rel.as_posix()}: {why}")
        found += _stated(path, rel, told)
        if path.suffix == ".ipynb":
            try:
                notebook = json.loads(path.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError):
                found.append(f"{rel.as_posix()}: not a readable notebook")
                continue
            found += [f"{rel.as_posix()}: {why}" for why in notebook_leaks(notebook)]
    return found


# ---------------------------------------------------------------- the writer

def _editions(root: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """The student editions and released assignments to hand out, by name; a missing or stale
    one (other grade ids or cells than its source's) is an error that says to release first."""
    notebooks, source = root / NOTEBOOKS.relative_to(ROOT), root / SOURCE.relative_to(ROOT)
    student, release = root / STUDENT.relative_to(ROOT), root / RELEASE.relative_to(ROOT)
    sources = {**numbered_notebooks(notebooks), **source_notebooks(source)}
    lessons = {name: student / f"{name}.ipynb" for name in numbered_notebooks(notebooks)}
    assignments = {name: release / name / f"{name}.ipynb" for name in source_notebooks(source)}
    for name, path in {**lessons, **assignments}.items():
        ours, theirs = json.loads(sources[name].read_text()), None
        if path.is_file():
            theirs = json.loads(path.read_text())
        if theirs is None or grade_ids(theirs) != grade_ids(ours) or \
                len(theirs["cells"]) != len(ours["cells"]):
            raise EagleMiniError(f"{path} is missing or out of date: run `make assignments` first")
    return lessons, assignments


def _check_folder(out: Path, root: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EagleMiniError(f"{out} exists and is not an empty folder: name a new or empty one")
    if out == root or root in out.parents:
        raise EagleMiniError(f"{out} is inside this repository ({root}): write the class's "
                             "repository somewhere else")


def _hand_out(path: Path, to: Path) -> None:
    """Copy a student edition, without the predict questions' answers in its cell metadata."""
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        meta = cell.get("metadata", {})
        if isinstance(meta.get("eagle_mini"), dict):
            meta["eagle_mini"].pop("answer", None)
            if not meta["eagle_mini"]:
                del meta["eagle_mini"]
    _write(notebook, to)


def _block(makefile: str, head: str) -> str:
    """One piece of a Makefile, with the comment lines just above it: a rule (`head` is
    "target:", its recipe lines follow) or a macro (`head` is "define name", up to `endef`)."""
    lines = makefile.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(head)), None)
    if start is None:
        raise EagleMiniError(f"the Makefile has no `{head}` to give the class")
    end, first = start + 1, start
    while first > 0 and lines[first - 1].startswith("#"):
        first -= 1
    if head.startswith("define "):
        while lines[end - 1] != "endef":
            end += 1
    else:
        while end < len(lines) and lines[end].startswith("\t"):
            end += 1
    return "\n".join(lines[first:end]) + "\n"


def makefile(root: Path = ROOT) -> str:
    """The class's Makefile: this repository's variables, its asset macro and set-up rules as
    they are (`MAKE_RULES`), and `lab`."""
    ours = (root / "Makefile").read_text()
    variables = [line for line in ours.splitlines()
                 if line.split(" ")[0] in ("PYTHON", "VENV", "PY", "STAMP")]
    phony = [r for r in MAKE_RULES if r[0] != "$"]
    return ("# eagle_mini, the course.\n"
            "#   make setup - create .venv, install the pinned packages and the course assets\n"
            "#   make lab   - JupyterLab on the notebooks\n"
            "#   make demo  - vanilla decoding against EAGLE-2 on the embedded target\n"
            "#   make gpu-setup - on Colab or a CUDA machine: the same versions with a CUDA\n"
            "#                    torch, into the current Python (no venv), and the course assets\n"
            + "\n".join(variables) + "\n\n.PHONY: " + " ".join(phony) + " lab\n\n"
            + _block(ours, f"define {ASSET_MACRO}") + "\n"
            + "\n".join(_block(ours, f"{r}:") for r in MAKE_RULES)
            + "\nlab: $(STAMP)\n\t$(PY) -m jupyter lab notebooks\n")


def notebook_table(readme: str) -> str:
    """The course README's generated notebook table (its links fit the class's layout too)."""
    begin, end = "<!-- generated:notebooks -->", "<!-- /generated:notebooks -->"
    if begin not in readme or end not in readme:
        return ""
    return readme.split(begin, 1)[1].split(end, 1)[0].strip() + "\n"


def section(readme: str, title: str, stop: str = "") -> str:
    """The course README's section `## title` (up to the next `## ` heading, or to the first line
    that starts with `stop`), heading included; '' when it has none."""
    begin = readme.find(f"\n## {title}\n")
    if begin < 0:
        return ""
    text = readme[begin + 1:]
    end = text.find("\n## ", 1)
    text = text if end < 0 else text[:end + 1]
    return (text.split(f"\n{stop}", 1)[0] if stop else text).rstrip("\n") + "\n"


def readme(lessons: dict[str, Path], assignments: dict[str, Path], root: Path = ROOT) -> str:
    """The class's README: set-up, the notebooks, the assignments and how work is handed in, then
    the course README's sections the shipped documents point to: "On a GPU", and the code map's
    algorithm table (its tables of the layers above and of what lies beside the package name the
    course's own tooling and the instructor's side)."""
    ours = (root / "README.md").read_text()
    table = notebook_table(ours) or "".join(f"- [`{n}`](notebooks/{n}.ipynb)\n" for n in lessons)
    borrowed = "\n".join(filter(None, (section(ours, "On a GPU"),
                                       section(ours, "Read the code in this order",
                                               stop="Below it, "))))
    work = "".join(f"- [`{n}`](notebooks/assignments/{n}/{n}.ipynb)"
                   + (f", after notebook {AFTER[n]}" if n in AFTER else "") + "\n"
                   for n in sorted(assignments, key=lambda n: (AFTER.get(n, "99"), n)))
    return f"""# eagle_mini: EAGLE speculative decoding, the course

Executed Jupyter notebooks, and the small tested package they import, that rebuild EAGLE
speculative decoding from the papers: EAGLE (arXiv 2401.15077), EAGLE-2 (arXiv 2406.16858) and
EAGLE-3 (arXiv 2503.01840). Everything runs on a CPU with the embedded target SmolLM2-135M-Instruct.
Terms such as tau, n-alpha or bonus token are defined in the [glossary](notebooks/{GLOSSARY}).

## Set up

```bash
make setup   # creates .venv, installs the pinned packages and the course assets
make lab     # JupyterLab on notebooks/
make demo    # vanilla decoding against EAGLE-2 on the embedded target
```

Conda users: `environment.yml` lists the same versions. `EAGLE_MINI_SCALE=ci` runs every notebook
in a couple of minutes; the default `classroom` scale is the full run.

## The notebooks

Read them in order; each opens with what you will be able to do and the paper section it
follows, and closes with exercises. Their figures and tables are already there; the exercise
cells and the cells that answer a predict-then-run question are empty until you run them.

{table}
## Assignments

{work}
## Exercises, and handing them in

Replace the `{STUB}` line of each exercise's solution cell with
your code, then run the test cell under it: its asserts compare your function with the package's
on a few inputs.
Hand in the notebook file itself. Grading runs hidden tests of the same properties on fresh
inputs, each exercise on its own, with the package's own answer switched off: call the package
where the exercise says you may, and write the rest yourself.

The package's documentation is [docs/usage.md](docs/usage.md) and
[docs/architecture.md](docs/architecture.md); the measurements the notebooks read are in
[RESULTS.md](RESULTS.md) and `data/results/`.

{borrowed}"""


def write(out, root: Path = ROOT) -> Path:
    """Write what a class is given to `out` (a new or empty folder outside this repository) and
    check it with `leaks`; returns the folder."""
    root, out = Path(root).resolve(), Path(out).resolve()
    _check_folder(out, root)
    lessons, assignments = _editions(root)
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (root / name).is_dir():
            shutil.copytree(root / name, out / name, ignore=IGNORED)
        elif (root / name).is_file():
            shutil.copy2(root / name, out / name)
    for rel in WITHHELD:
        (out / rel).unlink(missing_ok=True)
    for name, path in lessons.items():
        _hand_out(path, out / "notebooks" / f"{name}.ipynb")
    shutil.copyfile(root / NOTEBOOKS.relative_to(ROOT) / GLOSSARY, out / "notebooks" / GLOSSARY)
    for name, path in assignments.items():
        _hand_out(path, out / "notebooks" / "assignments" / name / f"{name}.ipynb")
    (out / "Makefile").write_text(makefile(root))
    (out / "README.md").write_text(readme(lessons, assignments, root))
    found = leaks(out, answers(root))
    if found:
        raise EagleMiniError(f"{out} holds the instructor's side ({len(found)} finding(s)), "
                             f"first: {found[0]}")
    return out
