"""Predict-then-run questions: the learner writes a number down, the next cell measures it and says
how close the prediction was. Never raises, so a notebook left at its default still runs (nbval).

A question is a pair of cells: the *predict* cell, where the learner types, holds the answer in its
metadata (`metadata["eagle_mini"]["answer"]`, the phrases that state it), and the cells after it
that measure and reveal it are tagged `predict-answer` (their outputs are cleared in the student
editions). Nothing before an answer cell may state the answer, its source included: a reason that
would give it away is printed by `why` when the learner runs the check, from `course.answers`,
which a class's repository does not ship.

    >>> check_prediction(2.0, 2.1, tolerance=0.15).within
    True
"""
import importlib
from dataclasses import dataclass

# What `why` says where the reasoning is not shipped (a class's repository).
WITHHELD = ("the reasoning is left for the class to discuss (this copy of the course does not "
            "ship it).")


def withheld_table(name: str):
    """A table of `course.answers` (the instructor's side), or None in a class's repository, which
    leaves that module out."""
    try:
        answers = importlib.import_module("eagle_mini.course.answers")
    except ImportError:
        return None
    return getattr(answers, name)


def why(question: str) -> str:
    """The reasoning behind a predict-then-run question's answer, from `course.answers.WHY` (the
    instructor's side, which a class's repository leaves out: then `WITHHELD`).

    >>> why("no-such-question")
    Traceback (most recent call last):
    KeyError: 'no-such-question'
    """
    table = withheld_table("WHY")
    return WITHHELD if table is None else table[question]


@dataclass
class Verdict:
    guess: float | None
    answer: float
    tolerance: float
    relative: bool = False

    @property
    def within(self) -> bool:
        if self.guess is None:
            return False
        limit = self.tolerance * abs(self.answer) if self.relative else self.tolerance
        return abs(self.guess - self.answer) <= limit

    def markdown(self, what: str, digits: int = 2) -> str:
        band = f"{self.tolerance:.0%}" if self.relative else f"{self.tolerance:.{digits}f}"
        if self.guess is None:
            return f"No prediction set. {what}: **{self.answer:.{digits}f}**."
        word = "within" if self.within else "outside"
        return (f"Your prediction {self.guess:.{digits}f}; {what}: **{self.answer:.{digits}f}**, "
                f"{word} the tolerance of {band}" + (" ✔" if self.within else " ✘") + ".")


def check_prediction(guess, answer: float, tolerance: float, relative: bool = False) -> Verdict:
    """Compare a prediction with the measured answer: absolute tolerance, or relative to the answer."""
    return Verdict(None if guess is None else float(guess), float(answer), tolerance, relative)
