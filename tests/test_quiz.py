"""The end-of-notebook quizzes (`course/quiz.py`): every numbered notebook ends with one, each
question has exactly one right choice (its stored digest) and a hint for every other, the
instructor's key is the one INSTRUCTOR.md prints, and a class's repository, which leaves the
reasons out, still checks answers."""
import json
import sys

import pytest

from eagle_mini.course import answers
from eagle_mini.course.assignments import NOTEBOOKS, numbered_notebooks
from eagle_mini.course.quiz import WITHHELD, Question, answer_key, digest, questions, quiz
from eagle_mini.course.quizzes import QUIZZES
from eagle_mini.errors import EagleMiniError


def test_every_numbered_notebook_ends_with_its_quiz():
    prefixes = {name.split("_")[0] for name in numbered_notebooks()}
    assert set(QUIZZES) == prefixes
    for name, path in numbered_notebooks().items():
        key = name.split("_")[0]
        cells = json.loads(path.read_text())["cells"]
        calls = [c for c in cells if c["cell_type"] == "code" and f'quiz("{key}")' in "".join(c["source"])]
        assert len(calls) == 1, name
        assert calls[0]["outputs"], f"{name}: the quiz cell has not run"
        assert 3 <= len(questions(key)) <= 5


def test_each_question_has_one_right_choice_and_a_hint_for_every_other():
    for notebook in QUIZZES:
        for q in questions(notebook):
            right = [k for k, c in enumerate(q.choices) if digest(q.id, c) == q.answer]
            assert right == [answers.QUIZ[q.id][0]], q.id
            assert set(q.hints) == set(range(len(q.choices))) - set(right), q.id
            assert q.feedback(right[0]).startswith("Right. ") and answers.QUIZ[q.id][1] in q.feedback(right[0])
            for k in q.hints:
                assert q.feedback(k) == f"Not quite: {q.hints[k]}"


def test_no_right_choice_is_spelled_out_in_the_questions_module():
    from pathlib import Path

    import eagle_mini.course.quizzes as module
    source = Path(module.__file__).read_text()
    assert "import answers" not in source and "course.answers import" not in source


def test_a_bad_choice_or_question_is_a_clear_error():
    q = quiz("00")
    with pytest.raises(EagleMiniError, match="choices 0 to"):
        q.answer("00.1", 9)
    with pytest.raises(EagleMiniError, match="has questions"):
        q.answer("01.1", 0)
    with pytest.raises(EagleMiniError, match="no quiz"):
        quiz("99")


def test_without_the_instructors_module_answers_are_still_checked(monkeypatch):
    monkeypatch.setitem(sys.modules, "eagle_mini.course.answers", None)   # a class's repository
    q = questions("04")[0]
    right = next(k for k, c in enumerate(q.choices) if digest(q.id, c) == q.answer)
    assert q.feedback(right) == f"Right. {WITHHELD}"


def test_the_widget_gives_feedback_when_a_choice_is_picked():
    box = quiz("05").widget()
    radio, said = box.children[1], box.children[2]
    q = questions("05")[0]
    radio.value = answers.QUIZ[q.id][0]
    assert said.value.startswith("<i>Right.")


def test_instructor_md_prints_the_key():
    assert answer_key() in (NOTEBOOKS / "INSTRUCTOR.md").read_text()


def test_a_question_checks_its_own_digest():
    q = Question("t.1", "?", ("a", "b"), {1: "no"}, digest("t.1", "a"))
    assert q.right(0) and not q.right(1)
