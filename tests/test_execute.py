"""`python -m eagle_mini notebooks`: a notebook runs in place at the scale asked, records its run,
and a failing one leaves its file untouched with a one-line error."""
import json

import nbformat
import pytest

from eagle_mini.errors import EagleMiniError
from eagle_mini.tooling.execute import KEY, execute, execute_all


def notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_a_notebook_runs_in_place_at_the_scale_asked_and_records_its_run(tmp_path):
    path = notebook(tmp_path / "00_a.ipynb", "import os; print(os.environ['EAGLE_MINI_SCALE'])",
                    "import pathlib; print(pathlib.Path.cwd().name)")
    lines = []
    run = execute_all([path], scale="ci", command="python -m eagle_mini notebooks x", report=lines.append)[path]
    nb = json.loads(path.read_text())
    outputs = ["".join(c["outputs"][0]["text"]) for c in nb["cells"]]
    assert outputs == ["ci\n", f"{tmp_path.name}\n"]
    assert [c["execution_count"] for c in nb["cells"]] == [1, 2]
    assert all("shell.execute_reply" in c["metadata"]["execution"] for c in nb["cells"])
    assert nb["metadata"][KEY] == run and run["scale"] == "ci" and run["machine"]["cpu"]
    assert run["command"] == "python -m eagle_mini notebooks x" and "ci scale" in lines[0]


def test_a_failing_cell_leaves_the_file_as_it_was(tmp_path):
    path = notebook(tmp_path / "01_b.ipynb", "print('fine')", "raise ValueError('broken on purpose')")
    before = path.read_bytes()
    with pytest.raises(EagleMiniError, match="a cell raised .*broken on purpose.*unchanged"):
        execute(path, scale="ci")
    assert path.read_bytes() == before


def test_bad_input_is_a_one_line_error(tmp_path):
    with pytest.raises(EagleMiniError, match="not a notebook file"):
        execute(tmp_path / "missing.ipynb")
    (tmp_path / "x.ipynb").write_text("{ not json")
    with pytest.raises(EagleMiniError, match="not a readable notebook"):
        execute(tmp_path / "x.ipynb")
    with pytest.raises(EagleMiniError, match="scale must be one of"):
        execute(notebook(tmp_path / "y.ipynb", "1"), scale="huge")


def test_the_watchdog_nudges_an_idle_kernel_and_the_run_is_unchanged_by_it(tmp_path):
    path = notebook(tmp_path / "02_c.ipynb", "import time; time.sleep(4); print('slept')", "print(6 * 7)")
    run = execute(path, scale="ci", idle=1.0)
    nb = json.loads(path.read_text())
    assert ["".join(c["outputs"][0]["text"]) for c in nb["cells"]] == ["slept\n", "42\n"]
    assert run["nudges"] >= 1 and nb["metadata"][KEY]["nudges"] == run["nudges"]


def test_with_no_paths_every_numbered_notebook_runs_in_course_order(monkeypatch):
    from eagle_mini.course.assignments import numbered_notebooks
    from eagle_mini.tooling import execute as module
    ran = []
    monkeypatch.setattr(module, "execute", lambda path, *args: ran.append(path) or {
        "minutes": 0.0, "machine": {"cpu": "x"}, "nudges": 0})
    execute_all(report=lambda line: None)
    assert ran == list(numbered_notebooks().values()) and len(ran) == 11
