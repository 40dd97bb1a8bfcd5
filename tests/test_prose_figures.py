"""No Markdown cell of a numbered notebook, and no hand-written part of the README or the usage
guide, carries a measured figure typed by hand.

The rule (`eagle_mini.course.figures`, where it is spelled out in full): a *figure* is a number with
a decimal point, a `%`, a ratio (`2.8x`) or a unit of time, size or rate (`40 s`, `538 MB`,
`14 tok/s`). Whole numbers without a unit are settings and counts; numbers inside names (`EAGLE-2`,
`SmolLM2-135M`), section references (`§3.1`), versions, bounds (`under 10`, `p >= 0.2`) and
one-letter settings (`T = 0.7`) are structural; code spans, math and link targets are not prose.
A figure is allowed when its sentence (a table cell: with its column header) cites it as the
paper's (`paper`, an arXiv id, `published`, "EAGLE reports") or as an assumption (`assumed`,
`spec sheet`). Anything measured here must be rendered by code instead: printed, or Markdown
produced by a code cell (outputs are never scanned), or generated into RESULTS.md and the README's
blocks by `python -m eagle_mini results-md`.
"""
import re
from pathlib import Path

import pytest

import eagle_mini
from eagle_mini.course.figures import hand_typed_figures, notebook_figures

ROOT = Path(eagle_mini.__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
# Notebooks other helpers are rewriting right now (issue 19); their figures are listed by the test
# and fixed there. Remove a name once its notebook passes.
PENDING = set()


def report(found) -> str:
    return "\n".join(f"cell {i}: {f.text!r} in: {f.context[:160]}" for i, f in found)


@pytest.mark.parametrize("path", [
    pytest.param(p, id=p.stem, marks=pytest.mark.xfail(
        strict=False, reason=f"{p.stem} is being rewritten by another helper (issue 19); its "
                             "hand-typed figures are listed in the failure")) if p.stem in PENDING
    else pytest.param(p, id=p.stem) for p in NOTEBOOKS])
def test_no_markdown_cell_carries_a_hand_typed_figure(path):
    found = notebook_figures(path)
    assert not found, f"{path.name}: render these from their results file or run:\n{report(found)}"


@pytest.mark.parametrize("name", ["README.md", "docs/usage.md", "notebooks/GLOSSARY.md",
                                  "notebooks/INSTRUCTOR.md"])
def test_hand_written_documents_carry_no_figure(name):
    text = (ROOT / name).read_text()
    text = re.sub(r"<!-- generated:(\w+) -->.*?<!-- /generated:\1 -->", "", text, flags=re.DOTALL)
    assert not hand_typed_figures(text), [f.text for f in hand_typed_figures(text)]


def test_the_instructor_guide_names_no_cpu_model_and_no_tracker():
    """The guide for instructors points to where a measured value comes from; it names no CPU
    model and no issue or session number either (the package's prose rule, `prose_findings`)."""
    from eagle_mini.course.figures import prose_findings
    found = prose_findings((ROOT / "notebooks" / "INSTRUCTOR.md").read_text())
    assert not found, [(f.text, f.context[:120]) for f in found]


@pytest.mark.parametrize("text, figures", [
    ("Our head reaches tau 2.01 on MT-bench.", ["2.01"]),
    ("EAGLE-2 is 17% faster here, 1.2x vanilla, at 36 ms per forward.", ["17%", "1.2x", "36 ms"]),
    ("The notebook takes 4 min and reads 538 MB at 31 GB/s, 14 tok/s.",
     ["4 min", "538 MB", "31 GB/s", "14 tok/s"]),
    ("| method | speedup |\n|---|---|\n| eagle2 | 0.83x |", ["0.83x"]),
])
def test_measured_figures_are_found(text, figures):
    assert [f.text for f in hand_typed_figures(text)] == figures


@pytest.mark.parametrize("text", [
    "EAGLE-1 reaches tau 3.94 on Vicuna-7B (the paper).",
    "The paper reports 2.8x for the shifted input.",
    "EAGLE measured 2.90x at batch 1 on an RTX 3090.",
    "EAGLE-2 (arXiv 2406.16858) §5 gives tau 4.98.",
    "An H200 streams 4.8 TB/s (an assumed spec-sheet figure).",
    "| variant | paper (Vicuna-7B) |\n|---|---|\n| shifted | 2.8x, ~0.78 |",
    "SmolLM2-135M and Llama-3.1-8B in fp32, EAGLE §3.1 and Fig. 8, eagle_mini 0.2, torch 2.13.0.",
    "A tree of 26 tokens, depth 6, top-10, on 80 prompts, under 10 minutes, p >= 0.2, T = 0.7.",
    "Settings in code: `--lr 3e-4`, `0.1` x the cross-entropy, $\\alpha = 0.4$.",
    "See [the log](runs/2.5x/log.txt) and <!-- 3.4 -->.",
])
def test_structural_cited_and_code_numbers_are_not_figures(text):
    assert hand_typed_figures(text) == []


# The same rule for the package's own prose: docstrings (read with `ast`) and `#` comments (read
# with `tokenize`) explain, and point to the results file that holds a figure; they carry no
# measured figure, CPU model or issue/session number. Doctest lines, code spans and figures cited
# as the paper's are not findings (`eagle_mini.course.figures.code_figures`).
PACKAGE = ROOT / "eagle_mini"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_docstring_or_comment_of_the_package_carries_a_figure(path):
    from eagle_mini.course.figures import code_figures
    found = code_figures(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)}: point to the results file instead:\n" + "\n".join(
        f"line {line}: {f.text!r} in: {f.context[:160]}" for line, f in found))


PLANTED = '''"""Packing pays on the Xeon: c(8)/c(1) 1.49 packed (issue 18).

    >>> speedup(2.5)
    2.5x
"""
# measured 45x slower on an AMD EPYC, session 12; see #18
LR = 3e-4  # the paper's 2.8x; `0.1` x the cross-entropy, EAGLE §3.1, 2**k nodes


def f():
    """One step took 2.2 s on Zen 2."""
'''


def test_figures_in_code_prose_are_found():
    from eagle_mini.course.figures import code_figures
    assert [(line, f.text) for line, f in code_figures(PLANTED)] == [
        (1, "1.49"), (1, "Xeon"), (1, "issue 18"), (6, "45x"), (6, "EPYC"), (6, "session 12"),
        (6, "#18"), (11, "2.2 s"), (11, "Zen 2")]
