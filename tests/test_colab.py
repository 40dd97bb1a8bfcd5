"""Colab's first steps (`eagle_mini/course/colab.py`), Colab mocked: detected by its module, never
assumed; the clone URL derived from a git remote, or one line saying where to paste it; the scale
set for the card at hand only on Colab."""
import subprocess

from IPython.core.inputtransformer2 import TransformerManager

from eagle_mini.course import colab

COLAB = {"google.colab": object()}
URL = "https://example.org/course/eagle_mini.git"


def test_off_colab_nothing_is_set_and_nothing_is_run():
    environ = {}
    assert colab.colab_setup(modules={}, environ=environ, url=URL, total_bytes=16 * 10**9) == []
    assert environ == {}


def test_on_colab_the_commands_clone_install_and_the_scale_follows_the_card(monkeypatch):
    monkeypatch.delenv("EAGLE_MINI_GPU_SCALE", raising=False)
    environ = {}
    commands = colab.colab_setup(modules=COLAB, environ=environ, url=URL, total_bytes=16 * 10**9)
    assert commands == [f"!git clone {URL} eagle_mini", "%cd eagle_mini", "!make gpu-setup"]
    assert environ == {"EAGLE_MINI_SCALE": "gpu", "EAGLE_MINI_GPU_SCALE": "t4"}
    chosen = {"EAGLE_MINI_GPU_SCALE": "a100"}           # a learner's own choice stays
    colab.colab_setup(modules=COLAB, environ=chosen, url=URL, total_bytes=16 * 10**9)
    assert chosen["EAGLE_MINI_GPU_SCALE"] == "a100"


def test_the_clone_url_comes_from_the_git_remote_or_a_line_says_where_to_paste_it(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert colab.clone_url(tmp_path) == colab.clone_url(tmp_path / "missing")  # metadata, or None
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", URL], check=True)
    assert colab.clone_url(tmp_path) == URL
    (line,) = colab.setup_commands(None)
    assert "Code button" in line and "<" not in line


def test_the_first_cell_detects_colab_and_sets_the_scale_with_env():
    cell = colab.first_cell(URL)
    assert "if 'google.colab' in sys.modules:" in cell
    assert f"    !git clone {URL} eagle_mini" in cell and "    %env EAGLE_MINI_SCALE=gpu" in cell
    python = TransformerManager().transform_cell(cell)          # as IPython runs it
    compile(python, "first_cell", "exec")
    assert "get_ipython().system('git clone" in python and "run_line_magic('env'" in python
