"""Hand-typed measured figures in prose: the rule that keeps the course's numbers from drifting.

A measured number (a tau, a speedup, a time, a share) must come from a results file or a run:
printed by a code cell, or written into Markdown by code (`IPython.display.Markdown`, or the
generated README block and RESULTS.md). `hand_typed_figures(text)` finds the figures a person typed
into prose instead. It reads Markdown *sources* only; what code renders is an output and is never
scanned.

A **figure** is a number that

1. has a decimal point (`3.08`, `0.78`), or
2. is followed by `%`, or directly by `x` or `×` (a ratio: `2.8x`), or
3. is followed by a unit of time, size or rate (`40 s`, `538 MB`, `31 GB/s`, `14 tok/s`,
   `0.27 GFLOP`).

Whole numbers without a unit (`26` tokens, depth `6`, `80` prompts) are settings and counts, not
figures. A number is **structural**, never a figure, when it is part of a name (`SmolLM2-135M`,
`fp32`, `EAGLE-2`, `Llama-3.1-8B`, `7B`), a section, figure, table or equation reference (`§3.1`,
`Fig. 8`), an arXiv id or a version (`0.2.0`, `eagle_mini 0.2`), a bound (after `under`,
`within`, `at most`, `up to`, `below`, `above`, `over`, `<`, `>=`, ...) or the value of a
one-letter variable (`T = 0.7`, `p = 0.2`). Code spans, math, fenced blocks, link targets and HTML
are not prose and are not read: write a setting such as a loss weight as `0.1`, in a code span.

A figure is **cited**, and allowed, when its sentence (for a table cell: the cell with its column
header) says whose it is: the paper(s) (`paper`, `papers'`, an arXiv id, `published`, "EAGLE-2
reports / measured / found"), or an assumption (`assumed`, `spec sheet`). "EAGLE-1 reaches tau 3.9
on Vicuna-7B (the paper)" passes; "our head reaches tau 2.0" does not: render it from its file.

    >>> [f.text for f in hand_typed_figures("Our head reaches tau 2.01 in 12 ms, see §3.1.")]
    ['2.01', '12 ms']
    >>> hand_typed_figures("The paper reports 2.8x on Vicuna-7B; `--lr 3e-4` in fp32.")
    []
"""
import json
import re
from dataclasses import dataclass
from pathlib import Path

UNITS = (r"(?:[kKMGT]i?B(?:/s)?|[GT]FLOPs?(?:/s)?|tok(?:en)?s?/s|ms|µs|us|ns|s|sec|seconds?|min|"
         r"minutes?|h|hours?|microseconds?|milliseconds?)")
NUMBER = re.compile(
    r"(?<![\w.\-/§])"                         # not inside a name, a path or a version
    r"(?P<num>\d[\d,]*(?:\.\d+)?)"
    r"(?P<suffix>\s?%|[x×](?!\w)|\s?" + UNITS + r"(?![\w/]))?"
    r"(?![\w.]*\d)(?![A-Za-z])")               # not followed by more of a version or a name
STRUCTURAL_BEFORE = re.compile(
    r"(?:§|\bSections?|\bSec\.|\bFigs?\.|\bFigures?|\bTables?|\bEqs?\.|\bEquation|\barXiv:?|"
    r"\bversion|\bv|\beagle_mini|[<>≤≥]=?|\b(?:under|within|at most|up to|below|above|over)|"
    r"(?<![\w-])[A-Za-z]\s*=)\s*$", re.IGNORECASE)
CITED = re.compile(r"\bpapers?\b|papers?'s?|\barXiv\b|\bpublished\b|\bassum(?:ed|ption)|spec[- ]sheet|"
                   r"\b(?:EAGLE(?:-\d)?|the authors)\b[^.;]*?\b(?:reports?|reported|measures?|"
                   r"measured|finds|found)\b", re.IGNORECASE)
CODE = re.compile(r"```.*?```|~~~.*?~~~|`(?:[^`\n]|\n(?!\s*\n))*`|\$\$.*?\$\$|"
                  r"\$(?:[^$\n]|\n(?!\s*\n))*\$|<!--.*?-->|<[^>\n]*>|\]\([^)]*\)|https?://\S+",
                  re.DOTALL)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.)\s)")


@dataclass
class Figure:
    text: str       # the figure as typed, with its unit
    context: str    # the sentence (or table cell) it stands in


def _blank(match) -> str:
    """Keep offsets and line breaks, drop what code spans and tags hold."""
    return "".join("\n" if c == "\n" else " " for c in match.group(0))


def _pieces(text: str):
    """Sentences of the prose, and each table cell with its column header."""
    prose, header = [], None
    for line in text.split("\n"):
        if line.lstrip().startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            if header is None:
                header = cells
                yield from (c for c in cells)
            else:
                yield from (f"{h} | {c}" for h, c in zip(header + [""] * len(cells), cells))
        else:
            header = None
            prose.append(line)
    yield from SENTENCE_END.split("\n".join(prose))


def hand_typed_figures(markdown: str) -> list[Figure]:
    """The measured figures typed into this Markdown that cite no source (the module's rule)."""
    found = []
    for piece in _pieces(CODE.sub(_blank, markdown)):
        if CITED.search(piece):
            continue
        for m in NUMBER.finditer(piece):
            before, suffix = piece[:m.start()], m.group("suffix")
            if STRUCTURAL_BEFORE.search(before):
                continue
            if "." in m.group("num") or suffix:
                found.append(Figure(m.group(0).strip(), " ".join(piece.split())))
    return found


def notebook_figures(path) -> list[tuple[int, Figure]]:
    """(cell index, figure) for every hand-typed figure in a notebook's Markdown cells."""
    cells = json.loads(Path(path).read_text())["cells"]
    return [(i, f) for i, c in enumerate(cells) if c["cell_type"] == "markdown"
            for f in hand_typed_figures("".join(c["source"]))]


CPU_MODEL = re.compile(r"\b(?:Xeon|EPYC|Ryzen|Threadripper|Zen\s?\d\+?|Zen|(?:Sapphire|Emerald|Granite) "
                       r"Rapids|(?:Ice|Cascade|Cooper|Coffee|Kaby|Alder|Raptor) Lake|Skylake|"
                       r"Broadwell|Haswell|Genoa|Graviton|Neoverse|Core i[3579])\b")
TRACKER = re.compile(r"\b(?:issues?|sessions?|sittings?|PRs?|pull requests?|tickets?)\s*#?\d+\b|"
                     r"(?<![\w&#])#\d+\b", re.IGNORECASE)
DOCTEST = re.compile(r"^[ \t]*>>>.*?(?=\n[ \t]*\n|\Z)", re.DOTALL | re.MULTILINE)


def prose_findings(text: str) -> list[Figure]:
    """`hand_typed_figures` of a docstring or comment, plus the CPU models and tracker references
    (`issue 18`, `#18`, `session 12`) it names; doctest lines (`>>>` and the expected output below
    them, to the next blank line) are code, not prose.

        >>> [f.text for f in prose_findings("On Zen 4 (issue 18) a step took 2.2 s.")]
        ['2.2 s', 'Zen 4', 'issue 18']
        >>> prose_findings("EAGLE §3.1: the paper's 2.8x; `lr=3e-4`; 2**k nodes.")
        []
    """
    text = DOCTEST.sub(_blank, text)
    found = hand_typed_figures(text)
    for piece in _pieces(CODE.sub(_blank, text)):
        if CITED.search(piece):
            continue
        found += [Figure(m.group(0), " ".join(piece.split()))
                  for pattern in (CPU_MODEL, TRACKER) for m in pattern.finditer(piece)]
    return found


def code_figures(source: str) -> list[tuple[int, Figure]]:
    """(line, finding) for every `prose_findings` in a Python module's docstrings (read with `ast`)
    and `#` comments (read with `tokenize`; a comment continued by whole-line comments right
    below it is one text, a comment after code starts a new one)."""
    import ast
    import io
    import tokenize
    texts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                texts.append((node.body[0].lineno, doc))
    block, last = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        own_line = tok.line.lstrip().startswith("#")
        if block and (tok.start[0] != last + 1 or not own_line):
            texts.append(block[0])
            block = []
        text = tok.string.lstrip("#").strip()
        block = [(block[0][0], block[0][1] + "\n" + text)] if block else [(tok.start[0], text)]
        last = tok.start[0]
    texts += block
    return [(line, f) for line, text in sorted(texts) for f in prose_findings(text)]
