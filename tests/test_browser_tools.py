"""The parts of `make test-browser` that need no browser: which notebooks it opens, what counts as
a change in the outputs, when it installs Chromium, and how it starts JupyterLab."""
import json
import subprocess
import sys
from pathlib import Path

from eagle_mini.tooling.browser import (browser_problem, describe_change, lab_command, raised,
                                       uses_widgets, widget_notebooks)

ROOT = Path(__file__).resolve().parents[1]


def notebook(*cells):
    return {"cells": [{"cell_type": kind, "source": source.splitlines(keepends=True)}
                      for kind, source in cells], "metadata": {}, "nbformat": 4}


def test_a_notebook_uses_widgets_when_its_code_imports_ipywidgets():
    for code in ("import ipywidgets as widgets\n", "x = 1\nfrom ipywidgets import interact\n",
                 "if True:\n    import ipywidgets\n"):
        assert uses_widgets(notebook(("code", code)))
    for cells in ([("markdown", "import ipywidgets as widgets")],      # prose
                  [("code", "# import ipywidgets later\nprint(1)")],   # a comment
                  [("code", "import ipywidgetsx")]):
        assert not uses_widgets(notebook(*cells))


def test_a_notebook_uses_widgets_when_its_saved_state_holds_a_slider_or_a_button():
    def saved(*models):
        state = {str(i): {"model_name": m, "state": {}} for i, m in enumerate(models)}
        return {"cells": [{"cell_type": "code", "source": ["StepperWidget(target, head)"]}],
                "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json":
                                         {"state": state}}}}
    for control in ("IntSliderModel", "SelectionSliderModel", "ButtonModel", "ToggleButtonsModel"):
        assert uses_widgets(saved("LayoutModel", control, "OutputModel"))
    assert not uses_widgets(saved("FloatProgressModel", "HTMLModel", "HBoxModel"))  # tqdm's bar
    assert not uses_widgets(saved("RadioButtonsModel", "HTMLModel", "VBoxModel"))   # a quiz
    assert not uses_widgets(saved())


def test_widget_notebooks_are_the_numbered_ones_with_widgets_in_course_order(tmp_path):
    def write(name, *cells):
        (tmp_path / name).write_text(json.dumps(notebook(*cells)))
    write("05_b.ipynb", ("code", "import ipywidgets as w"))
    write("01_a.ipynb", ("code", "from ipywidgets import IntSlider"))
    write("02_plain.ipynb", ("code", "print('no widgets')"))
    write("scratch.ipynb", ("code", "import ipywidgets"))
    assert [p.name for p in widget_notebooks(tmp_path)] == ["01_a.ipynb", "05_b.ipynb"]


def test_the_course_has_a_widget_notebook():
    assert ROOT / "notebooks" / "04_draft_trees.ipynb" in widget_notebooks(ROOT / "notebooks")


def test_outputs_changed_only_when_a_part_differs():
    before = ["round", "0", "data:image/png;base64,AAAA"]
    assert describe_change(before, list(before)) is None
    line = describe_change(before, ["round", "0", "data:image/png;base64,BBBB"])
    assert line.startswith("1 change in 3 parts") and "image sha256" in line and "BBBB" not in line
    assert describe_change(before, before[:2]).endswith("gone")                 # an image cleared
    assert describe_change(before, before + ["clicked 1"]).endswith("'clicked 1' new")
    assert describe_change(["a", "b"], ["b", "a"]) is not None                  # order counts


def test_a_new_traceback_in_the_outputs_is_an_error():
    trace = "ValueError      Traceback (most recent call last)"
    assert raised(["s", trace, "ValueError: bad b"], before=["s", "a"])
    assert not raised(["s", "b"], before=["s", "a"])
    assert not raised(["old", trace, "x = 2"], before=["old", trace, "x = 1"])  # one already there


def test_chromium_is_installed_only_by_root_with_apt_otherwise_one_line_says_how():
    assert browser_problem(have_browser=True, is_root=False, has_apt=False) is None
    assert browser_problem(have_browser=False, is_root=True, has_apt=True) == "install"
    for is_root, has_apt in ((False, True), (True, False)):
        line = browser_problem(have_browser=False, is_root=is_root, has_apt=has_apt)
        assert "\n" not in line and "apt-get install -y chromium chromium-driver" in line


def test_jupyterlab_listens_on_localhost_with_a_token():
    command = lab_command(8123, "secret", Path("/tmp/nb"), as_root=False)
    assert command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert {"--ip=127.0.0.1", "--port=8123", "--port-retries=0",
            "--IdentityProvider.token=secret", "--ServerApp.root_dir=/tmp/nb"} <= set(command)
    assert "--allow-root" not in command
    assert "--allow-root" in lab_command(8123, "secret", Path("/tmp/nb"), as_root=True)


def test_the_package_imports_without_selenium():
    code = ("import sys; sys.modules['selenium'] = None; "
            "import eagle_mini.tooling.browser as b; print(b.CHROMEDRIVER)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr


def test_ci_runs_the_browser_test_after_the_test_suite():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines.index("make test-browser") == lines.index("make test") + 1
    assert "\ntest-browser: $(STAMP)\n" in (ROOT / "Makefile").read_text()
