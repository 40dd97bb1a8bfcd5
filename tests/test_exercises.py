"""The numbered notebooks' inline exercises: every one is marked for grading, sources earn full
marks, student editions zero, a submission that reaches the package's answer loses its exercise,
and the student editions hold no solution or hidden test but keep the narration.

Grading runs, for each graded cell, the exercises' definitions and that cell's hidden tests (not
the notebook's minutes of runs) in a process forked for it (`autograde.plan`); the module-scoped
fixture grades all the submissions these tests need in one call.
"""
import contextlib
import json
import re
from unittest import mock

import pytest

from eagle_mini.course.assignments import (PREDICT_TAG, SETUP_TAG, STUDENT, grade_ids,
                                           numbered_notebooks, source_notebooks)
from eagle_mini.course.autograde import PRELUDE, plan
from test_assignments import MARKERS, grade_in_two_processes, read, regions

NOTEBOOKS = numbered_notebooks()
GRADED = {name: path for name, path in NOTEBOOKS.items() if grade_ids(read(path))}

# Notebook 01 answered by calling the package: exercise 1 returns what verify_sampling says,
# exercise 2 keeps a copy of it made before the grader switches it off (the screen refuses it).
CHEAT = "01_speculative_sampling"
CHEATS = {
    "nb01_speculative_step": '''def speculative_step(p, q, x, u_accept, u_draw):
    d = one_level_draft([x], q)
    uniforms = iter([u_accept, u_draw])
    path, token = verify_sampling(d, p.expand(2, -1), SampledTreeRule(), uniforms=uniforms)
    return first_new_token(d, path, token)
''',
    "nb01_multi_round": '''import types


def multi_round(p, q, children, uniforms, copy=types.FunctionType(
        verify_sampling.__code__, verify_sampling.__globals__, None, verify_sampling.__defaults__)):
    d = one_level_draft(children, q)
    path, token = copy(d, p.expand(len(children) + 1, -1), SampledTreeRule(), uniforms=uniforms)
    return first_new_token(d, path, token)
''',
}


DEFINE = "from eagle_mini.course.submission import define"


def cells(notebook, **nbgrader):
    """The cells whose nbgrader metadata has every key = value of `nbgrader`."""
    return [c for c in notebook["cells"]
            if all(c["metadata"].get("nbgrader", {}).get(k) == v for k, v in nbgrader.items())]


def cheating_submission(tmp_path):
    notebook = read(STUDENT / f"{CHEAT}.ipynb")
    for cell in cells(notebook, solution=True):
        cell["source"] = CHEATS[cell["metadata"]["nbgrader"]["grade_id"]]
    path = tmp_path / "cheat.ipynb"
    path.write_text(json.dumps(notebook))
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grades of every source, every student edition and the cheating submission."""
    kinds = ([("source", n, p) for n, p in GRADED.items()]
             + [("student", n, STUDENT / f"{n}.ipynb") for n in GRADED]
             + [("cheat", CHEAT, cheating_submission(tmp_path_factory.mktemp("cheat")))])
    grades = grade_in_two_processes([p for _, _, p in kinds])
    return {(kind, name): g for (kind, name, _), g in zip(kinds, grades)}


def test_every_numbered_notebook_marks_its_exercises_for_grading():
    assignment_ids = {gid for p in source_notebooks().values() for gid in grade_ids(read(p))}
    seen = set()
    for name, path in NOTEBOOKS.items():
        notebook = read(path)
        ids = grade_ids(notebook)
        if name == "06b_speedups_appendix":   # the optional appendix: read, not graded
            assert not ids
            continue
        assert ids and all(gid.startswith(f"nb{name[:2]}_") for gid in ids), name
        assert not (set(ids) & (seen | assignment_ids)), name  # a submission is known by its ids
        seen |= set(ids)
        for cell in cells(notebook, grade=True):
            meta, source = cell["metadata"]["nbgrader"], "".join(cell["source"])
            assert meta["points"] > 0 and meta["locked"], name
            hidden = source.partition("### BEGIN HIDDEN TESTS")[2]
            assert re.search(r"with .*reference_off\(", hidden), name
            assert hidden.rstrip().endswith("### END HIDDEN TESTS"), name
        for cell in cells(notebook, solution=True):
            assert cell["cell_type"] == "code"
            assert re.search(r"### BEGIN SOLUTION.*### END SOLUTION", "".join(cell["source"]), re.S)
        tagged = [c for c in notebook["cells"] if SETUP_TAG in c["metadata"].get("tags", [])]
        assert all(c["cell_type"] == "code" for c in tagged), name


def test_sources_score_full_marks(graded):
    for name, path in GRADED.items():
        g = graded["source", name]
        assert g.errors == {}, g.report()
        assert all(score == most for score, most in g.scores.values()), g.report()
        assert list(g.scores) == grade_ids(read(path))


def test_student_editions_score_zero(graded):
    for name in GRADED:
        g = graded["student", name]
        assert all(score == 0 for score, _ in g.scores.values()), g.report()
        # only the graded cells fail, and only because the functions are not written yet
        assert set(g.errors) == set(g.scores), g.errors
        assert all(e.startswith("NotImplementedError") for e in g.errors.values()), g.errors


def test_calling_the_package_or_a_copy_made_before_grading_scores_zero(graded):
    g = graded["cheat", CHEAT]
    assert all(score == 0 for score, _ in g.scores.values()), g.report()
    assert "verify_sampling is switched off" in g.errors["nb01_speculative_step_test"], g.errors
    assert "`import types`" in g.errors["nb01_multi_round_test"], g.errors


def test_the_cheat_passes_every_test_when_nothing_stops_it(tmp_path):
    """The cheats run as written (no screen) and with nothing switched off: full marks, so the
    zeros above come from grading, not from a broken cheat."""
    submission = read(cheating_submission(tmp_path))
    jobs, _ = plan(read(NOTEBOOKS[CHEAT]), submission, lesson=True)
    with mock.patch("eagle_mini.course.guard.reference_off", lambda *f: contextlib.nullcontext()):
        for _, _, cells in jobs:
            namespace = {"__name__": "__main__"}
            answers = iter(CHEATS.values())
            for cell in cells:
                exec(next(answers) if cell.startswith(DEFINE) else cell, namespace)


def test_student_editions_hold_no_solution_and_no_hidden_test():
    for name, path in NOTEBOOKS.items():
        source, student = read(path), read(STUDENT / f"{name}.ipynb")
        text = "\n".join("".join(c["source"]) for c in student["cells"])
        assert not any(marker in text for marker in MARKERS), name
        assert text.count("raise NotImplementedError()") == len(cells(source, solution=True)), name
        lines = {line.strip() for line in text.splitlines()}
        for begin, end in [MARKERS[:2], MARKERS[2:]]:
            secret, public = regions(source, begin, end)
            # a hidden test may repeat a visible line; any other secret line must be gone
            leaked = [line for line in secret if line and line in lines and line not in public]
            assert leaked == [], (name, leaked)
        assert grade_ids(student) == grade_ids(source)


def test_student_editions_keep_the_narration_and_clear_the_exercises():
    for name, path in NOTEBOOKS.items():
        source, student = read(path), read(STUDENT / f"{name}.ipynb")
        assert student["metadata"] == source["metadata"], name  # widget state included
        assert len(student["cells"]) == len(source["cells"]), name
        for theirs, mine in zip(source["cells"], student["cells"]):
            assert mine.get("execution_count") == theirs.get("execution_count"), name
            if mine["metadata"].get("nbgrader"):
                assert mine.get("outputs") == [], name
            elif PREDICT_TAG in mine["metadata"].get("tags", []):   # the answer is not given away
                assert mine["source"] == theirs["source"] and mine.get("outputs") == [], name
            else:
                assert mine["source"] == theirs["source"], name
                assert mine.get("outputs") == theirs.get("outputs"), name


def notebook(*cells_):
    return {"cells": [{"cell_type": kind, "id": f"c{i}", "metadata": meta, "source": source,
                       "outputs": [], "execution_count": None} for i, (kind, meta, source)
                      in enumerate(cells_)], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_grading_runs_the_exercises_definitions_and_hidden_tests_only():
    solution = {"nbgrader": {"grade_id": "nb99_f", "solution": True, "grade": False}}
    tests = {"nbgrader": {"grade_id": "nb99_f_test", "solution": False, "grade": True, "points": 1}}
    source = notebook(
        ("markdown", {}, "# narration"),
        ("code", {"tags": [SETUP_TAG]}, "import math\nBASE = 2\nslow = run_for_minutes()\n"),
        ("code", {}, "result = run_for_minutes()\n"),
        ("code", solution, "def f(x):\n    ### BEGIN SOLUTION\n    return BASE * x\n"
                           "    ### END SOLUTION\n\n\nprint(f(result))\n"),
        ("code", tests, "def check(g):\n    assert g(result) == 2 * result\n\n\ncheck(f)\n"
                        "### BEGIN HIDDEN TESTS\nassert f(3) == 6\n### END HIDDEN TESTS"))
    (gid, points, graded), = plan(source, source, lesson=True)[0]
    assert (gid, points) == ("nb99_f_test", 1)
    assert graded[:2] == [PRELUDE, "import math\nBASE = 2\n"]
    assert graded[2].startswith(DEFINE) and "return BASE * x" in graded[2]
    assert "print" not in graded[2]
    assert graded[3] == ("def check(g):\n    assert g(result) == 2 * result\n\n\n"
                         "### BEGIN HIDDEN TESTS\nassert f(3) == 6\n### END HIDDEN TESTS")
    answer = notebook(("code", solution, "TABLE = (0, 2, 4)\ndef f(x):\n    return TABLE[x]\n"
                                         "f(1)\n"))
    kept = plan(source, answer, lesson=True)[0][0][2][2]
    assert "TABLE = (0, 2, 4)" in kept and "f(1)" not in kept
    jobs, notes = plan(source, notebook(), lesson=True)  # the solution cell deleted
    assert notes == ["no solution cell nb99_f (deleted, or its grading marks removed): f not found"]


# ---------------------------------------------------------------- predict, then run

def text_of(cell, outputs: bool = True) -> str:
    """What a reader sees of a cell: its source, and the text of its outputs (no images)."""
    parts = ["".join(cell["source"])]
    for o in cell.get("outputs", []) if outputs else ():
        data = o.get("data", {})
        for text in (o.get("text"), data.get("text/plain"), data.get("text/markdown"),
                     data.get("text/html")):
            if text:
                parts.append("".join(text))
    return "\n".join(parts)


def questions(notebook) -> list[tuple[int, list[str], list[int]]]:
    """Every predict-then-run question: (the predict cell, its answer phrases, the answer cells
    after it, up to the next predict cell)."""
    found, cells = [], notebook["cells"]
    for i, cell in enumerate(cells):
        answers = cell["metadata"].get("eagle_mini", {}).get("answer")
        if answers:
            found.append((i, answers, []))
        if PREDICT_TAG in cell["metadata"].get("tags", []):
            assert found, f"answer cell {i} comes before any predict cell"
            found[-1][2].append(i)
    return found


def said(needle: str, text: str) -> bool:
    if re.fullmatch(r"[\d.,]+", needle):  # a number, not the start of a longer one
        return re.search(rf"(?<![\d.,]){re.escape(needle)}(?!\d)", text) is not None
    return needle in text


def leaks(student, source) -> list[str]:
    """Each answer phrase, and each line the source's answer cells print, that a student edition
    shows before its answer cells run: in an earlier cell, or in an answer cell itself."""
    found = []
    for _, answers, answer_cells in questions(source):
        code = "\n".join("".join(source["cells"][k]["source"]) for k in answer_cells)
        printed = {line.strip() for k in answer_cells for line in text_of(source["cells"][k]).splitlines()
                   if len(line.strip()) > 15 and line.strip() not in code  # computed, not typed
                   and not re.fullmatch(r"<.*>", line.strip())}  # <Figure ...>, not a value
        first = answer_cells[0] if answer_cells else len(student["cells"])  # none: all is early
        seen = "\n".join(text_of(c) for c in student["cells"][:first] +
                          [student["cells"][k] for k in answer_cells])
        found += [n for n in list(answers) + sorted(printed) if said(n, seen)]
    return found


def test_every_predict_then_run_question_stores_its_answer_and_has_answer_cells():
    asked = 0
    for name, path in NOTEBOOKS.items():
        notebook = read(path)
        prompts = [c for c in notebook["cells"] if c["cell_type"] == "markdown"
                   and re.search(r"\*\*Predict|### Predict", "".join(c["source"]))]
        found = questions(notebook)
        assert len(found) == len(prompts), (name, len(found), len(prompts))
        assert all(answers and cells_ for _, answers, cells_ in found), name
        asked += len(found)
    assert asked >= 6


def test_student_editions_give_no_predicted_answer_away():
    for name, path in NOTEBOOKS.items():
        student = read(STUDENT / f"{name}.ipynb")
        assert leaks(student, read(path)) == [], name
        stored = [i for i, c in enumerate(student["cells"]) if "answer" in c["metadata"].get("eagle_mini", {})]
        assert stored == [], f"{name}: cells {stored} keep a stored answer in their metadata"


def test_the_leak_check_finds_an_answer_shown_too_early():
    name = "08_eagle3"
    source, student = read(NOTEBOOKS[name]), read(STUDENT / f"{name}.ipynb")
    (_, _, answer_cells), = questions(source)
    first = answer_cells[0]
    untagged, shown = json.loads(json.dumps(source)), json.loads(json.dumps(student))
    untagged["cells"][first]["metadata"]["tags"].remove(PREDICT_TAG)  # the answer cell untagged
    shown["cells"][first]["outputs"] = source["cells"][first]["outputs"]
    assert "9,808,128" in leaks(shown, untagged)
    told = json.loads(json.dumps(student))
    told["cells"][first - 1]["source"] = "The answer is (c)."
    assert "The answer is (c)" in leaks(told, source)
