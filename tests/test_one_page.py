"""Notebook 05b's promise: the learner's EAGLE loop is written from torch, the Hugging Face model
and the head's weights, in about a page, and its committed run equals vanilla decoding.

The notebook's own cells check each step against an oracle (nbval runs them); this file checks
what a cell cannot say about itself: what the loop's cells import, how long the loop is, and that
the committed outputs record the equality.
"""
import ast
import json

from eagle_mini.course.assignments import numbered_notebooks

NOTEBOOK = numbered_notebooks()["05b_eagle_in_one_page"]
SIDE_BY_SIDE = "## What the package adds"     # after it the package is read, not used
# what the loop may take from the package: loading the target, the course's scale, and (in a
# check, never in the loop) the package's head to compare with
ALLOWED = {"eagle_mini": set(), "eagle_mini.course": {"pick", "scale"},
           "eagle_mini.heads": {"load_head"}}
LOOP = ("Head", "draft_topk", "additive_mask", "causal", "target_forward", "vanilla_generate",
        "Tree", "crop", "prefill", "draft_tree", "verify", "keep", "eagle_generate")


def loop_cells():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    end = next(i for i, c in enumerate(cells)
               if c["cell_type"] == "markdown" and SIDE_BY_SIDE in "".join(c["source"]))
    # a graded cell's hidden tests are the grader's, not the loop's: they may call the package
    return ["".join(c["source"]).partition("### BEGIN HIDDEN TESTS")[0] for c in cells[:end]
            if c["cell_type"] == "code"], cells


def imports(source):
    """(module, names) for every import in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            yield node.module, {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            yield from ((a.name, set()) for a in node.names)


def test_the_loop_takes_nothing_from_the_package_but_loading():
    sources, _ = loop_cells()
    from_package = [(m, names) for s in sources for m, names in imports(s)
                    if m.split(".")[0] == "eagle_mini"]
    assert from_package, "the loop cells load the target through the package"
    for module, names in from_package:
        assert module in ALLOWED and names <= ALLOWED[module] | {"load_target"}, (module, names)
    # the package module itself is imported only to find the head's file
    code = "\n".join(sources)
    for attribute in {n.attr for n in ast.walk(ast.parse(code))
                      if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                      and n.value.id == "eagle_mini"}:
        assert attribute == "__file__", attribute
    assert not any(name in code for name in ("target.forward", "run_method", "generate(target"))


def test_the_loop_fits_on_about_a_page():
    sources, _ = loop_cells()
    defined = {}
    for source in sources:
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined[node.name] = node.end_lineno - node.lineno + 1
    assert set(LOOP) <= set(defined), set(LOOP) - set(defined)
    assert sum(defined[name] for name in LOOP) <= 180, {n: defined[n] for n in LOOP}


def test_the_committed_run_equals_vanilla_and_is_timed_beside_it():
    _, cells = loop_cells()
    text = "\n".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code"
                     for o in c.get("outputs", []))
    assert text.count("identical to vanilla: True") == 2 and "identical to vanilla: False" not in text
    assert "EAGLE / vanilla:" in text and "vanilla_generate equals Hugging Face's greedy generate: True" in text
