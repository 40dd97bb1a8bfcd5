"""The README's code map names every module of the package, and docs/architecture.md answers the
reader's questions from at most two package files each."""
import ast
import pathlib
import re

import eagle_mini

PACKAGE = pathlib.Path(eagle_mini.__file__).parent
ROOT = PACKAGE.parent


def code_map(readme: str) -> str:
    """The README's "Read the code in this order" section."""
    start = readme.index("## Read the code in this order")
    return readme[start:readme.index("\n## ", start + 1)]


def unmapped(section: str, package=PACKAGE) -> list[str]:
    """Package modules the section does not name: a top-level module by `eagle_mini/x.py` or
    `x.py`; a module in a folder by `name.py` on a line that names `eagle_mini/<folder>/`. A
    folder's `__init__.py` that holds only its docstring is the folder's, not a module to map."""
    lines = section.splitlines()
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.name == "__init__.py" and len(rel.parts) > 1 and docstring_only(path):
            continue
        name = f"`{rel.name}`"
        if len(rel.parts) == 1:
            ok = f"eagle_mini/{rel.name}" in section or name in section
        else:
            folder = f"eagle_mini/{rel.parent.as_posix()}/"
            ok = any(folder in line and (name in line or f"{folder}{rel.name}" in line)
                     for line in lines)
        if not ok:
            missing.append(rel.as_posix())
    return missing


def docstring_only(path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) <= 1 and all(isinstance(n, ast.Expr) for n in body)


def test_the_readme_code_map_names_every_module():
    assert unmapped(code_map((ROOT / "README.md").read_text())) == []


def test_the_map_check_finds_a_missing_module(tmp_path):
    (tmp_path / "runtime").mkdir()
    for f in ("decode.py", "runtime/auto.py", "runtime/cost.py"):
        (tmp_path / f).write_text("")
    section = "| `eagle_mini/decode.py` |\n| `eagle_mini/runtime/`: `auto.py` |\n`cost.py` alone"
    assert unmapped(section, tmp_path) == ["runtime/cost.py"]


def test_architecture_answers_each_question_from_at_most_two_package_files():
    text = (ROOT / "docs" / "architecture.md").read_text()
    answers = re.findall(r"^\*\*Q: (.+?)\*\*\n(.+?)(?=\n\n)", text, flags=re.M | re.S)
    asked = {q for q, _ in answers}
    for q in ("Which tree does `--method X` use?", "How does the bench time a method?",
              "Where is the accept rule for sampling?", "How is a head trained?"):
        assert q in asked, q
    for q, a in answers:
        files = set(re.findall(r"`(eagle_mini/[\w/]+\.py)`", a))
        assert 1 <= len(files) <= 2, (q, files)
        for f in files:
            assert (ROOT / f).is_file(), f
