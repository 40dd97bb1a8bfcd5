"""Predict-then-run questions: the learner writes a number down, the next cell measures it and says
how close the prediction was. Never raises, so a notebook left at its default still runs (nbval).

    >>> check_prediction(2.0, 2.1, tolerance=0.15).within
    True
"""
from dataclasses import dataclass


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
