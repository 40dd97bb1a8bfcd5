"""Every example in the package's docstrings runs and prints what it says (a stale example fails)."""
import doctest
import importlib
import pkgutil

import pytest

import eagle_mini

MODULES = sorted(m.name for m in pkgutil.walk_packages(eagle_mini.__path__, "eagle_mini.")
                 if not m.name.endswith("__main__"))


def test_the_package_has_examples():
    finder = doctest.DocTestFinder()
    examples = sum(len(t.examples) for name in MODULES
                   for t in finder.find(importlib.import_module(name)))
    assert examples > 40


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
