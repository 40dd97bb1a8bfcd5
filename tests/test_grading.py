"""Grading that cannot be gamed: every route a submission can take to full marks without doing the
exercise scores 0, with a reason, while the real solutions keep full marks (test_assignments.py,
test_exercises.py) and a wrong one loses points. A bad submission gets a verdict, not a crash.

Each route is a submission: a student edition with its solution cells replaced. They are graded in
one `grade` call (each graded cell in a process of its own, two at a time, 30 s each).
"""
import json
import re

import pytest

from eagle_mini.cli import main
from eagle_mini.course.assignments import RELEASE, SOURCE, STUDENT
from eagle_mini.course.autograde import _failed_assert, grade

NOTEBOOK = SOURCE / "greedy_verification" / "greedy_verification.ipynb"

# route -> (exercise, {solution cell's grade id: its source}, what the failed cells' errors say)
ROUTES = {
    # the solution cell rebinds the guard (top level) and calls the package's function
    "rebinding the guard": ("greedy_verification", {"greedy_verification_solution": '''
reference_off = None


def greedy_verify(draft, logits):
    return verify_greedy(draft, logits)
'''}, "verify_greedy is switched off"),
    # a copy of the reference with one constant more, captured in a default argument
    "copying the reference": ("greedy_verification", {"greedy_verification_solution": '''
import types

from eagle_mini.verify import verify_greedy as reference


def greedy_verify(draft, logits, copy=types.FunctionType(reference.__code__.replace(
        co_consts=reference.__code__.co_consts + ("one more",)), reference.__globals__)):
    return copy(draft, logits)
'''}, "was not graded: line 1: `import types`"),
    # the package's helper that is the answer to reject
    "an unguarded helper (assignment)": ("rejection_sampling", {"rejection_sampling_solution": '''
from eagle_mini.course.sampling_explorer import residual


def reject(p, q, x):
    r = residual(p, q)
    q = q.clone()
    q[x] = 0
    return (r if r.sum() > 0 else p), (q / q.sum() if q.sum() > 0 else q)


def verify_sampled(draft, p, uniforms):
    raise NotImplementedError()
'''}, "residual is switched off|NotImplementedError"),
    "an unguarded helper (notebook 01)": ("01_speculative_sampling", {"nb01_speculative_step": '''
from eagle_mini.course.sampling_explorer import residual


def speculative_step(p, q, x, u_accept, u_draw):
    if u_accept < min(1.0, float(p[x] / q[x])):
        return x
    return draw(residual(p, q), u_draw)
'''}, "residual is switched off|NotImplementedError"),
    # the package's module patched while the tests run
    "patching the package": ("greedy_verification", {"greedy_verification_solution": '''
import eagle_mini.verify


def greedy_verify(draft, logits):
    eagle_mini.verify.verify_greedy = lambda d, l: ([0], 0)
    return [0], 0
'''}, "AssertionError|changed what the tests rely on"),
    # torch's comparison patched so that every check passes
    "patching torch": ("tree_attention", {"tree_attention_solution": '''
import torch


def tree_attention(choices, prefix_len):
    torch.equal = lambda a, b: True
    return torch.zeros(1, 1, dtype=torch.bool), torch.zeros(1, dtype=torch.long)
'''}, "changed what the tests rely on: torch.equal"),
    "sys.modules": ("greedy_verification", {"greedy_verification_solution": '''
import sys


def greedy_verify(draft, logits):
    sys.modules["eagle_mini.verify"].verify_greedy = greedy_verify
    return [0], 0
'''}, "`import sys`"),
    "a gc walk": ("greedy_verification", {"greedy_verification_solution": '''
import torch


def greedy_verify(draft, logits):
    found = [f for f in torch.serialization.gc.get_objects() if callable(f)]
    return found[0](draft, logits)
'''}, r"`\.(gc|get_objects)`"),
    "importlib.reload": ("greedy_verification", {"greedy_verification_solution": '''
import importlib

import eagle_mini.verify


def greedy_verify(draft, logits):
    return importlib.reload(eagle_mini.verify).verify_greedy(draft, logits)
'''}, "`import importlib`"),
    # the instructor's notebook read from disk, through a library that opens files
    "reading the solutions": ("greedy_verification", {"greedy_verification_solution": f'''
import numpy

NOTEBOOK = {str(NOTEBOOK)!r}


def greedy_verify(draft, logits):
    numpy.loadtxt(NOTEBOOK, dtype=str, delimiter="\\x01", comments=None)
    return [0], 0
'''}, "reading .*not allowed"),
    "a result equal to anything": ("greedy_verification", {"greedy_verification_solution": '''
def greedy_verify(draft, logits):
    class Anything:
        def __eq__(self, other):
            return True
    return Anything()
'''}, "TypeError: a Anything is not a value the tests compare"),
    "a decorator": ("greedy_verification", {"greedy_verification_solution": '''
@lambda f: verify_greedy
def greedy_verify(draft, logits):
    return [0], 0
'''}, "has a decorator"),
    "getattr with a made-up name": ("greedy_verification", {"greedy_verification_solution": '''
import eagle_mini.verify


def greedy_verify(draft, logits):
    return getattr(eagle_mini.verify, "verify_" + "greedy")(draft, logits)
'''}, "`getattr` needs a literal attribute name"),
    "an endless loop": ("greedy_verification", {"greedy_verification_solution": '''
def greedy_verify(draft, logits):
    while True:
        pass
'''}, "TimeoutError: the cell ran past its time limit"),
    "leaving the process": ("greedy_verification", {"greedy_verification_solution": '''
def greedy_verify(draft, logits):
    raise SystemExit(0)
'''}, "SystemExit"),
    "a renamed function": ("greedy_verification", {"greedy_verification_solution": '''
def greedy_verify_v2(draft, logits):
    return [0], 0
'''}, "greedy_verify was not graded: the submission defines no function greedy_verify"),
}

# Stand-ins for the oracles the hidden tests used to take from the setup cells, wrong but agreeing
# with the exercise's answer: the tests now take their oracles from the package themselves.
SHADOWS = {
    "00_why_decoding_is_slow": {"nb00_flat_until": '''
def roofline_seconds(n, *machine):
    return 1.0 if n <= 1 else 2.0


def flat_until(weight_bytes, flops_per_token, bytes_per_s, flops_per_s):
    return 1
'''},
    "01_speculative_sampling": {"nb01_speculative_step": '''
def verify_sampling(draft, p, rule, uniforms=None):
    return [0], 0


def speculative_step(p, q, x, u_accept, u_draw):
    return 0
''', "nb01_multi_round": '''
def verify_sampling(draft, p, rule, uniforms=None):
    return [0], 0


def multi_round(p, q, children, uniforms):
    return 0
'''},
    "04_draft_trees": {"nb04_mask_positions": '''
def from_choices(choices):
    return chain(0)


def mask_and_positions(choices, prefix_len):
    return torch.ones(1, 1, dtype=torch.bool), torch.tensor([prefix_len])
'''},
    "05_verification": {"nb05_greedy_verify": '''
def verify_greedy(draft, logits):
    return [0], 0


def greedy_verify(draft, logits):
    return [0], 0
''', "nb05_compact": '''
def keep_cache_entries(cache, start, path):
    pass


def compact(cache, start, path):
    pass
'''},
    "06_speedups": {"nb06_cost_at": '''
def relative_cost(curve, n):
    return 1.0


def cost_at(curve, n):
    return 1.0
''', "nb06_speedup_bound": '''
def predict(stats, curve, size):
    return 1.0


def speedup_bound(stats_list, curve, tree_size):
    return 1.0
'''},
    "08_eagle3": {"nb08_ttt_loss": '''
def ttt_loss(head, layers, features, input_ids, loss_mask, steps=3, decay=0.8):
    return torch.zeros(()), {"top1_steps": [0.0] * steps}


def my_ttt_loss(head, layers, features, input_ids, loss_mask, steps=3, decay=0.8):
    return torch.zeros(()), [0.0] * steps
'''},
}

# A deliberately wrong solution to a numbered notebook: among matching children take the last.
MUTANT = ("05_verification", "nb05_greedy_verify", "path.append(match[0])", "path.append(match[-1])",
          "nb05_greedy_verify_test")


def edition(exercise: str) -> dict:
    path = RELEASE / exercise / f"{exercise}.ipynb" if (RELEASE / exercise).is_dir() else \
        STUDENT / f"{exercise}.ipynb"
    return json.loads(path.read_text())


def source(exercise: str) -> dict:
    path = SOURCE / exercise / f"{exercise}.ipynb" if (SOURCE / exercise).is_dir() else \
        STUDENT.parent / f"{exercise}.ipynb"
    return json.loads(path.read_text())


def gid(cell) -> str:
    return cell["metadata"].get("nbgrader", {}).get("grade_id", "")


def with_solutions(notebook: dict, answers: dict[str, str]) -> dict:
    for cell in notebook["cells"]:
        if gid(cell) in answers:
            cell["source"] = answers[gid(cell)].lstrip("\n")
    return notebook


def write(tmp, name: str, notebook: dict):
    path = tmp / f"{re.sub(r'[^a-z0-9]+', '_', name)}.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def damaged(tmp):
    """Submissions whose cells were deleted or lost their marks -> name -> path."""
    deleted = edition("greedy_verification")
    deleted["cells"] = [c for c in deleted["cells"] if gid(c) != "greedy_verification_solution"]
    unmarked = source("greedy_verification")  # the real solution, in a cell with no marks
    for cell in unmarked["cells"]:
        if gid(cell) == "greedy_verification_solution":
            del cell["metadata"]["nbgrader"]
    right, wrong, *_ = MUTANT
    mutant = source(right)
    for cell in mutant["cells"]:
        if gid(cell) == MUTANT[1]:
            cell["source"] = "".join(cell["source"]).replace(MUTANT[2], MUTANT[3])
    return {"deleted": write(tmp, "deleted", deleted), "unmarked": write(tmp, "unmarked", unmarked),
            "mutant": write(tmp, "mutant", mutant)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("red_team")
    paths = {name: write(tmp, name, with_solutions(edition(exercise), answers))
             for name, (exercise, answers, _) in ROUTES.items()}
    paths |= {f"shadowing in {n}": write(tmp, f"shadow {n}", with_solutions(edition(n), answers))
              for n, answers in SHADOWS.items()}
    paths |= damaged(tmp)
    grades = grade(list(paths.values()), workers=2, timeout=30)
    return dict(zip(paths, grades))


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_every_route_around_the_exercise_scores_zero_with_its_reason(graded, route):
    g = graded[route]
    assert g.total[0] == 0, g.report()
    assert g.errors and all(re.search(ROUTES[route][2], e) for e in g.errors.values()), g.report()


@pytest.mark.parametrize("exercise", sorted(SHADOWS))
def test_a_stand_in_for_the_oracle_changes_nothing(graded, exercise):
    g = graded[f"shadowing in {exercise}"]
    shadowed = {f"{i}_test" for i in SHADOWS[exercise]}
    assert all(g.scores[i][0] == 0 for i in shadowed), g.report()
    assert all("AssertionError" in g.errors[i] for i in shadowed), g.report()


def test_a_deleted_solution_cell_scores_zero_and_says_so(graded):
    g = graded["deleted"]
    assert g.total == (0, 4), g.report()
    assert g.notes == ["no solution cell greedy_verification_solution (deleted, or its grading "
                       "marks removed): greedy_verify not found"]


def test_a_solution_in_a_cell_without_marks_still_counts(graded):
    g = graded["unmarked"]
    assert g.total == (4, 4), g.report()
    assert "greedy_verify taken from another cell" in g.notes[0]


def test_a_wrong_solution_loses_its_exercise(graded):
    g = graded["mutant"]
    assert g.scores[MUTANT[4]][0] == 0 and g.total == (2, 5), g.report()


def test_a_failed_hidden_test_is_reported_by_its_assert_not_its_data(graded):
    """The report shows the hidden test's assert that failed, which is in the graded cell's source,
    and none of the inputs or results its message carries."""
    error = graded["mutant"].errors[MUTANT[4]]
    test = re.fullmatch(r"AssertionError: `([^`]+)` failed", error)
    assert test, error
    cell = next(c for c in source(MUTANT[0])["cells"] if gid(c) == MUTANT[4])
    hidden = "".join(cell["source"]).split("### BEGIN HIDDEN TESTS")[1]
    assert f"assert {test.group(1)}," in hidden
    assert f"  {MUTANT[4]}" in graded["mutant"].report() and error in graded["mutant"].report()


def failing(code: str) -> str:
    """What grading reports for a cell `code` that raises."""
    name = "<grading cell 3>"
    try:
        exec(compile(code, name, "exec"), {})
    except BaseException as e:
        return _failed_assert(e, code, name)
    raise AssertionError("the cell did not raise")


def test_an_asserts_test_and_text_message_are_reported_and_data_is_not():
    data = "import torch\ng, e = torch.arange(5), torch.zeros(5)\n"
    assert failing(data + "assert torch.equal(g,\n             e), (g, e)\n") == \
        "AssertionError: `torch.equal(g, e)` failed"
    assert failing(data + "assert g.sum() == 0, 'inputs changed'\n") == \
        "AssertionError: `g.sum() == 0` failed: inputs changed"
    called = "def check(x):\n    assert x > 1, [x] * 50\n\nfor x in (2, 1):\n    check(x)\n"
    assert failing(called) == "AssertionError: `x > 1` failed"
    assert failing("raise AssertionError((1, 2))\n") == ""   # no assert: the exception's own text
    assert failing("x = 1 / 0\n") == ""


def test_a_renamed_function_is_named_in_the_report(graded):
    g = graded["a renamed function"]
    assert any("it defines greedy_verify_v2" in n for n in g.notes), g.report()


def test_a_bad_file_or_the_wrong_notebook_gets_a_verdict(tmp_path):
    fresh = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": "".join(c["source"])} for c in source("greedy_verification")["cells"]
                       if c["cell_type"] == "code"], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    unmarked = write(tmp_path, "no marks at all", fresh)
    other = RELEASE / "tree_attention" / "tree_attention.ipynb"
    g_other, g_unmarked, g_missing = grade([other, unmarked, tmp_path / "none.ipynb"],
                                           expected="greedy_verification")
    assert g_other.verdict == "it answers tree_attention, not greedy_verification"
    assert g_unmarked.total == (4, 4), g_unmarked.report()
    assert "is not a file" in g_missing.verdict and "not graded" in g_missing.report()
    fresh["cells"].append({**fresh["cells"][0], "source": "def compact(cache, start, path):\n    pass\n"})
    ambiguous, = grade([write(tmp_path, "two exercises", fresh)])
    assert "fit cache_compaction and greedy_verification and 05_verification" in ambiguous.verdict


def test_the_wrong_notebook_on_the_command_line_is_one_line_and_exit_code_2(capsys):
    other = RELEASE / "tree_attention" / "tree_attention.ipynb"
    assert main(["assignments", "grade", str(other), "--assignment", "greedy_verification"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "eagle-mini: error: it answers tree_attention, not greedy_verification"
