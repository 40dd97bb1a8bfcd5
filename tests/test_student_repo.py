"""`make student-repo DIR=...` (`python -m eagle_mini student-repo DIR`): what a class is given.

The folder it writes holds every student edition and every released assignment, the package and
what runs it, and nothing of the instructor's side: no instructor notebook, no assignment source,
no hidden test or solution, no predicted answer, no guide for instructors or graders, no test
suite. The checker that says so (`student_repo.leaks`) is run on the written folder and must
catch a leak planted in a copy of it. A DIR that exists and is not empty is one line on stderr and
exit code 2.
"""
import json
import re
import shutil

import pytest

from eagle_mini.cli import main
from eagle_mini.course.assignments import (NOTEBOOKS, RELEASE, SOURCE, STUDENT, numbered_notebooks,
                                           source_notebooks)
from eagle_mini.course.figures import prose_findings
from eagle_mini.course.student_repo import ROOT, leaks, write

LESSONS = numbered_notebooks()
ASSIGNMENTS = source_notebooks()
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN SOLUTION", "END SOLUTION")


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
                 "environment.yml", "requirements-assets.txt", "notebooks/GLOSSARY.md",
                 "data/heads/smollm2-135m/config.json", "data/results/uncertainty.json",
                 "scripts/check_eagle3_against_authors.py", "CHANGELOG.md", "docs/usage.md"):
        assert (repo / name).is_file(), name
    assert not list(repo.rglob("__pycache__"))
    makefile = (repo / "Makefile").read_text()
    ours = (ROOT / "Makefile").read_text()
    setup = ours[ours.index("$(STAMP): "):ours.index("\n\n", ours.index("$(STAMP): "))]
    assert setup in makefile                       # the repository's own set-up recipe
    for target in ("setup:", "assets:", "demo:", "lab:", "clean:"):
        assert f"\n{target}" in makefile, target
    for target in ("test:", "grade:", "assignments:", "student-repo:"):
        assert f"\n{target}" not in makefile, target


def test_nothing_of_the_instructors_side_is_there(repo):
    assert leaks(repo) == []
    files = [p.relative_to(repo) for p in repo.rglob("*") if p.is_file()]
    assert not [f for f in files if f.name == "INSTRUCTOR.md"]
    assert not [f for f in files if "source" in f.parts or f.parts[0] == "tests"]
    assert not (repo / "notebooks" / "assignments" / "README.md").exists()  # the grading guide
    instructor = {p.read_bytes() for p in [*LESSONS.values(), *ASSIGNMENTS.values()]}
    instructor_cells = {json.dumps(sources(read(p))) for p in [*LESSONS.values(), *ASSIGNMENTS.values()]}
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


@pytest.mark.parametrize("plant, found", [
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
    assert leaks(tree) == []
    plant(tree)
    assert any(re.search(found, line) for line in leaks(tree)), leaks(tree)


def test_the_class_readme_names_no_measured_figure_and_no_instructor_material(repo):
    text = (repo / "README.md").read_text()
    table = text[text.index("| notebook |"):text.index("## Assignments")]
    assert all(f"(notebooks/{n}.ipynb)" in table for n in LESSONS)   # the course's own table
    assert prose_findings(text.replace(table, "")) == []
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
