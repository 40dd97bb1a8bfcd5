"""The nbgrader assignments: sources earn full marks, student versions zero, a classic mistake loses
exactly its exercise's points, so does calling the package's private helper, nothing of a solution
or a hidden test leaks, and release/ and student/ are what `make assignments` writes.

Autograding forks one process per graded cell from a process that imported torch once, so one
module-scoped fixture grades every notebook these tests need in one call, two cells at a time.
"""
import json
import random
import re

import pytest

from eagle_mini.cli import main
from eagle_mini.course.assignments import (RELEASE, SOURCE, STUDENT, grade_ids, random_choices,
                                           release, source_notebooks)
from eagle_mini.course.autograde import grade
from eagle_mini.tree import from_choices

SOURCES = source_notebooks()

# assignment: (a line of the solution, the same line with a classic mistake, the cell it fails)
MISTAKES = {
    # off-by-one depth: the root one position too far
    "tree_attention": ("positions = torch.tensor([prefix_len + len(p) for p in paths]",
                       "positions = torch.tensor([prefix_len + len(p) + 1 for p in paths]",
                       "tree_attention_positions"),
    # accept a child only when p(x) >= q(x), without the coin flip of probability p(x) / q(x)
    "rejection_sampling": ("if next(uniforms) < min(1.0, float(res[x] / q[x])):",
                           "if res[x] >= q[x]:",
                           "rejection_sampling_verify"),
}

# assignment: a solution that calls what the reference calls (the guard refuses the private helper)
CHEATS = {
    "training_loss": '''from eagle_mini.training.train import _step_sums


def eagle_loss(head, features, input_ids, loss_mask, w_cls=0.1):
    weight = loss_mask[:, 1:].float()
    reg, cls, _, count = _step_sums(head(features[:, :-1], input_ids[:, 1:]), features[:, 1:],
                                    weight, head._shared["lm_head"])
    count = count.clamp(min=1)
    return (reg + w_cls * cls) / count, reg / count, cls / count
''',
}

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def read(path):
    return json.loads(path.read_text())


def regions(notebook, begin, end):
    """(lines between `begin` and `end` markers, all other lines), stripped, over all cells."""
    inside, outside, within = [], [], False
    for cell in notebook["cells"]:
        for line in "".join(cell["source"]).splitlines():
            if begin in line:
                within = True
            elif end in line:
                within = False
            else:
                (inside if within else outside).append(line.strip())
    return inside, outside


def with_mistake(name, tmp_path):
    """A copy of the source notebook with MISTAKES[name] made in its solution."""
    right, wrong, _ = MISTAKES[name]
    notebook = read(SOURCES[name])
    cells = [c for c in notebook["cells"] if right in "".join(c["source"])]
    assert len(cells) == 1, f"{name}'s solution no longer contains {right!r}"
    cells[0]["source"] = "".join(cells[0]["source"]).replace(right, wrong)
    path = tmp_path / f"{name}_with_a_mistake.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def with_cheat(name, tmp_path):
    """The student version of `name` with CHEATS[name] as its solution."""
    notebook = read(RELEASE / name / f"{name}.ipynb")
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = CHEATS[name]
    path = tmp_path / f"{name}_cheat.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def grade_in_two_processes(paths, **options):
    """grade(paths), two graded cells at a time (one per core): grades in the order of paths."""
    return grade(paths, workers=2, **options)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grades of every source, released version, mistake and cheat."""
    tmp = tmp_path_factory.mktemp("submissions")
    kinds = ([("source", n, p) for n, p in SOURCES.items()]
             + [("release", n, RELEASE / n / f"{n}.ipynb") for n in SOURCES]
             + [("mistake", n, with_mistake(n, tmp)) for n in MISTAKES]
             + [("cheat", n, with_cheat(n, tmp)) for n in CHEATS])
    grades = grade_in_two_processes([p for _, _, p in kinds])
    return {(kind, name): g for (kind, name, _), g in zip(kinds, grades)}


def test_there_are_seven_assignments_each_with_graded_cells_and_hidden_tests():
    assert list(SOURCES) == sorted(["tree_attention", "greedy_verification", "rejection_sampling",
                                    "cache_compaction", "draft_head", "eagle2_tree",
                                    "training_loss"])
    for name, path in SOURCES.items():
        notebook = read(path)
        tests = [c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
        assert tests and all(c["metadata"]["nbgrader"]["points"] > 0 for c in tests)
        assert all("BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in tests), name
        assert regions(notebook, "BEGIN SOLUTION", "END SOLUTION")[0], name


def test_sources_score_full_marks(graded):
    for name in SOURCES:
        g = graded["source", name]
        assert g.errors == {}, g.report()
        assert all(score == most for score, most in g.scores.values()), g.report()
        assert list(g.scores) == grade_ids(read(SOURCES[name]))


def test_released_versions_run_and_score_zero(graded):
    for name in SOURCES:
        g = graded["release", name]
        assert all(score == 0 for score, _ in g.scores.values()), g.report()
        # only the graded cells fail, and only because the functions are not written yet
        assert set(g.errors) == set(g.scores), g.errors
        assert all(e.startswith("NotImplementedError") for e in g.errors.values()), g.errors


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_classic_mistake_loses_exactly_its_exercise(graded, name):
    g = graded["mistake", name]
    failing = MISTAKES[name][2]
    for gid, (score, most) in g.scores.items():
        assert score == (0 if gid == failing else most), g.report()


def test_calling_the_references_private_helper_scores_zero(graded):
    g = graded["cheat", "training_loss"]
    assert all(score == 0 for score, _ in g.scores.values()), g.report()
    assert all("_step_sums is switched off" in e for e in g.errors.values()), g.errors


def test_released_versions_hold_no_solution_and_no_hidden_test():
    for name, path in SOURCES.items():
        source = read(path)
        student = read(RELEASE / name / f"{name}.ipynb")
        text = "\n".join("".join(c["source"]) for c in student["cells"])
        assert not any(marker in text for marker in MARKERS), name
        assert "raise NotImplementedError()" in text
        lines = {line.strip() for line in text.splitlines()}
        for begin, end in [MARKERS[:2], MARKERS[2:]]:
            secret, public = regions(source, begin, end)
            # a hidden test may repeat a visible line; any other secret line must be gone
            leaked = [line for line in secret if line and line in lines and line not in public]
            assert leaked == [], (name, leaked)
        assert grade_ids(student) == grade_ids(source)


def normalized(notebook):
    """What a student sees and nbgrader checks: cell kinds, sources, outputs, nbgrader metadata."""
    return {"kernelspec": notebook["metadata"].get("kernelspec"),
            "cells": [(c["cell_type"], "".join(c["source"]), c.get("outputs"),
                       c["metadata"].get("nbgrader")) for c in notebook["cells"]]}


def test_committed_student_editions_are_what_make_assignments_writes(tmp_path):
    fresh = release(out=tmp_path / "release", student=tmp_path / "student")
    for committed, new in ((RELEASE, tmp_path / "release"), (STUDENT, tmp_path / "student")):
        files = sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(new) for p in fresh if new in p.parents), \
            f"{committed} is out of date: run `make assignments`"
        for path in files:
            if path.suffix != ".ipynb":  # the glossary the student editions link to
                assert (new / path).read_text() == (committed / path).read_text(), path
                continue
            assert normalized(read(new / path)) == normalized(read(committed / path)), \
                f"{committed / path} is out of date: run `make assignments`"


def test_random_choices_make_valid_trees_of_the_asked_size():
    rng = random.Random(0)
    for n in range(30):
        choices = random_choices(rng, n)
        assert len(choices) == n and from_choices(choices).num_nodes == n + 1


UNGRADED = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "no exercise"}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.parametrize("args, message", [
    (["grade", ""], "say which notebook"),
    (["grade", "no/such/notebook.ipynb"], "is not a file"),
    (["grade", str(SOURCE.parent / "README.md")], "is not a Jupyter notebook"),
    (["grade", "{ungraded}"], "no graded cell of any"),
])
def test_a_bad_submission_is_one_line_and_exit_code_2(capsys, tmp_path, args, message):
    ungraded = tmp_path / "notes.ipynb"
    ungraded.write_text(json.dumps(UNGRADED))
    assert main(["assignments", *(a.format(ungraded=ungraded) for a in args)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
