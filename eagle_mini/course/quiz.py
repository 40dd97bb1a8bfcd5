"""End-of-notebook quizzes: three to five questions a learner answers in the notebook, each checked
on the spot with feedback, with no answer written in the notebook.

A question (`quizzes.QUIZZES`) is multiple choice. What a class's repository ships is its text, its
choices, a hint for every wrong choice (what that choice confuses) and the right choice's
*digest*, sha256 of the question's id and the choice's text, so reading the notebook or the
module does not give the answer away (a learner may still try every choice: a quiz is for the
learner, the graded work is elsewhere). Why the right choice is right lives on the instructor's
side, `course.answers.QUIZ`, which `make student-repo` leaves out; INSTRUCTOR.md's answer key is
written from it (`answer_key`) and a test keeps the two and the digests in step.

    >>> q = Question("x.1", "2 + 2?", ("3", "4"), {0: "count again"}, digest("x.1", "4"))
    >>> q.feedback(0), q.feedback(1)[:6]
    ('Not quite: count again', 'Right.')

In a notebook, `quiz("00")` draws the questions of notebook 00 as radio buttons, each with its
feedback line under it; `Quiz.answer(question_id, choice)` gives the same feedback as text.
"""
import hashlib
from dataclasses import dataclass, field

from eagle_mini.course.predictions import WITHHELD, withheld_table
from eagle_mini.errors import EagleMiniError


def digest(question_id: str, choice: str) -> str:
    """What a question stores of its right choice."""
    return hashlib.sha256(f"{question_id}\n{choice}".encode()).hexdigest()


def why(question_id: str) -> str:
    """Why a question's right choice is right (`course.answers.QUIZ`, the instructor's side; in a
    class's repository, which leaves it out, `predictions.WITHHELD`)."""
    table = withheld_table("QUIZ")
    return WITHHELD if table is None else table.get(question_id, (None, ""))[1]


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    choices: tuple
    hints: dict = field(default_factory=dict)   # wrong choice's index -> what it confuses
    answer: str = ""                            # digest(id, the right choice)

    def right(self, choice: int) -> bool:
        return digest(self.id, self.choices[choice]) == self.answer

    def feedback(self, choice: int) -> str:
        """One line for a chosen index: right and why, or the hint of the wrong choice."""
        if not 0 <= choice < len(self.choices):
            raise EagleMiniError(f"question {self.id} has choices 0 to {len(self.choices) - 1}, "
                                 f"got {choice}")
        if self.right(choice):
            return f"Right. {why(self.id)}".rstrip()
        return f"Not quite: {self.hints.get(choice, 'read the section again')}"


class Quiz:
    """A notebook's questions, displayed as a widget (one radio group and feedback line each)."""

    def __init__(self, notebook: str, questions: list[Question]):
        self.notebook, self.questions = notebook, list(questions)
        self.by_id = {q.id: q for q in self.questions}

    def answer(self, question_id: str, choice: int) -> str:
        if question_id not in self.by_id:
            raise EagleMiniError(f"notebook {self.notebook}'s quiz has questions "
                                 f"{', '.join(self.by_id)}; got {question_id!r}")
        return self.by_id[question_id].feedback(choice)

    def markdown(self) -> str:
        return (f"**Quiz ({len(self.questions)} questions).** Pick an answer: a line under it says "
                "whether it is right, and if not, what it confuses.")

    def widget(self):
        import ipywidgets as widgets
        rows = []
        for i, q in enumerate(self.questions, 1):
            pick = widgets.RadioButtons(options=[(c, k) for k, c in enumerate(q.choices)], value=None,
                                        layout=widgets.Layout(width="90%"))
            said = widgets.HTML("")

            def show(change, q=q, said=said):
                if change["new"] is not None:
                    said.value = f"<i>{q.feedback(change['new'])}</i>"
            pick.observe(show, names="value")
            rows += [widgets.HTML(f"<b>{i}. {q.text}</b>"), pick, said]
        return widgets.VBox(rows)

    def _ipython_display_(self):
        from IPython.display import Markdown, display
        display(Markdown(self.markdown()))
        display(self.widget())


def questions(notebook: str) -> list[Question]:
    """The questions of a numbered notebook's quiz ("00", "05b", ...)."""
    from eagle_mini.course.quizzes import QUIZZES
    if notebook not in QUIZZES:
        raise EagleMiniError(f"no quiz for notebook {notebook!r}; quizzes: {', '.join(QUIZZES)}")
    return [Question(*q) for q in QUIZZES[notebook]]


def quiz(notebook: str) -> Quiz:
    """The quiz at the end of a numbered notebook."""
    return Quiz(notebook, questions(notebook))


def answer_key() -> str:
    """INSTRUCTOR.md's quiz answer key, from the questions and `course.answers.QUIZ`."""
    from eagle_mini.course.answers import QUIZ
    from eagle_mini.course.quizzes import QUIZZES
    return "\n\n".join(f"**{notebook}.** " + "; ".join(
        f"Q{k}: {q.choices[QUIZ[q.id][0]]}" for k, q in enumerate(questions(notebook), 1))
        for notebook in QUIZZES)
