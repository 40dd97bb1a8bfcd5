"""RESULTS.md and the README's generated tables are what the committed results files produce.

`python -m eagle_mini results-md` writes them (`eagle_mini.tooling.report`); these tests
regenerate both from `data/results/` and `data/heads/` and compare. A failure means a results file
(or a committed notebook, whose run time the README shows) changed without the documents: run the
command and commit what it writes.
"""
import json
import re
import shutil
from pathlib import Path

import pytest

from eagle_mini.errors import EagleMiniError
from eagle_mini.tooling import report
from eagle_mini.tooling.report import expected, fill, notebook_minutes, notebook_run, results_markdown



@pytest.fixture(scope="module")
def root():
    import eagle_mini
    return Path(eagle_mini.__file__).resolve().parents[1]


def test_committed_results_md_and_readme_blocks_are_what_the_results_files_produce(root):
    for path, text in expected(root).items():
        assert path.read_text() == text, \
            f"{path.name} is out of date: run `python -m eagle_mini results-md` and commit it"


def test_every_measured_figure_names_its_file_and_the_command_that_writes_it(root):
    """The file's own command, with the `--out` that writes it there made explicit: a measuring
    command writes under runs/ unless told otherwise."""
    text = results_markdown(root)
    for name in (report.COST, report.COST_BF16, report.EVAL, report.EVAL_PAPER_TREE,
                 report.LOSSLESS, report.ABLATION, report.REHEARSAL,
                 *(f"{b}/bench.json" for b in report.BENCHES)):
        doc = json.loads((root / report.RESULTS / name).read_text())
        out = f"{report.RESULTS}/{name}".removesuffix("/bench.json")
        command = re.search(rf"`{re.escape(report.RESULTS)}/{re.escape(name)}`, made by `([^`]*)`", text)
        assert command and command[1].startswith(doc["command"]), name
        assert f" --out {out}" in command[1] and command[1].count("--out") == 1, name
    assert "generated:results" in (root / "README.md").read_text()


def test_a_changed_results_file_changes_the_documents(root, tmp_path):
    shutil.copytree(root / "data", tmp_path / "data")
    shutil.copytree(root / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns("student", "assignments"))
    shutil.copy(root / "README.md", tmp_path / "README.md")
    path = tmp_path / report.RESULTS / report.EVAL
    doc = json.loads(path.read_text())
    doc["mtbench"]["tau"] = 9.8765
    path.write_text(json.dumps(doc))
    readme = expected(tmp_path)[tmp_path / "README.md"]
    assert "9.88 ±" in readme and "9.88 ±" in results_markdown(tmp_path)
    assert report.stale(tmp_path) == [tmp_path / "RESULTS.md", tmp_path / "README.md"]
    report.write(tmp_path)
    assert report.stale(tmp_path) == []


def test_fill_replaces_only_the_marked_block_and_names_a_missing_one():
    text = "a\n<!-- generated:x -->\nold\n<!-- /generated:x -->\nb\n"
    assert fill(text, {"x": "new"}) == "a\n<!-- generated:x -->\nnew\n<!-- /generated:x -->\nb\n"
    with pytest.raises(EagleMiniError, match="generated:y"):
        fill(text, {"y": "new"})


def test_a_notebooks_run_time_is_read_from_its_cell_timestamps(tmp_path):
    def cell(start, end):
        return {"cell_type": "code", "metadata": {"execution": {
            "iopub.execute_input": start, "shell.execute_reply": end}}}
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}},
                    cell("2026-01-01T10:00:00.0Z", "2026-01-01T10:00:30.0Z"),
                    cell("2026-01-01T10:01:00.0Z", "2026-01-01T10:03:00.0Z")]}
    (tmp_path / "a.ipynb").write_text(json.dumps(nb))
    assert notebook_minutes(nb) == 3.0
    (tmp_path / "b.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}}]}))
    assert notebook_minutes({"cells": [{"cell_type": "code", "metadata": {}}]}) is None
    assert notebook_run(tmp_path / "a.ipynb") == "3.0 min" and notebook_run(tmp_path / "b.ipynb") == "-"
    nb["metadata"] = {"eagle_mini": {"scale": "classroom", "machine": {"cpu": "Some CPU"}}}
    (tmp_path / "a.ipynb").write_text(json.dumps(nb))
    assert notebook_run(tmp_path / "a.ipynb") == "3.0 min (Some CPU, classroom)"


def test_without_a_rehearsal_file_the_section_says_how_to_make_one(tmp_path):
    lines = report.rehearsal_section(report.Files(tmp_path))
    assert "Not run yet" in "\n".join(lines) and "rehearse" in "\n".join(lines)


def test_a_bench_run_is_called_current_only_with_the_shipped_heads_token_count(tmp_path):
    head = tmp_path / report.HEAD
    head.mkdir(parents=True)
    (head / "config.json").write_text(json.dumps({"tokens_seen": 18692439}))
    f = report.Files(tmp_path)
    assert report.uses_shipped_head(f, {"head": "shipped EAGLE-1 head x (18,692,439 training tokens)"})
    assert not report.uses_shipped_head(f, {"head": "shipped head x (10,130,252 training tokens)"})
    assert not report.uses_shipped_head(f, {"head": "a head with no token count"})
