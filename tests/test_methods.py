"""The table of methods: one place for names, trees and head kinds; one clock for every method."""
import ast
import pathlib
import time

import pytest

import eagle_mini
from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.draft import Drafter, TreeDrafter
from eagle_mini.heads.eagle1 import new_head
from eagle_mini.heads.eagle3 import new_eagle3_head
from eagle_mini.methods import (AUTO, BENCH_DEFAULT, BY_NAME, EAGLE_METHODS, METHOD_NAMES, METHODS,
                                method, resolve_tree)
from eagle_mini.runtime.run import RUNNERS, method_tree, pick_head, run_method
from eagle_mini.tree import DynamicTree, Tree, parse_tree, tree_from_spec

PACKAGE = pathlib.Path(eagle_mini.__file__).parent
# Words that are method names and also another vocabulary's: "auto" is the automatic choice of a
# setting (`--kernels auto`, `--exact auto`, `--mixed-precision auto`, a Jupyter option), "eagle3"
# a head kind (`heads/eagle3.py`'s KIND), "eagle2" EAGLE-2's tree in the tree-spec language (as
# "eagle1" is EAGLE-1's). The check skips these words in the modules that use them so.
# the same words meaning a mode ("auto") or a head kind ("eagle3") in these modules
OTHER_VOCABULARY = {"auto": {"cli", "runtime/kernels.py", "runtime/exact/mode.py",
                             "training/commands.py", "course/assignments.py", "course/gpu_scale.py"},
                    "eagle3": {"heads/eagle3.py", "course/gpu_scale.py", "course/gpu_fit.py"},
                    "eagle2": {"tree.py"}}


def method_name_literals(package=PACKAGE) -> dict[str, set[str]]:
    """module (path under the package) -> method names written in it as string literals."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in BY_NAME:
                users = OTHER_VOCABULARY.get(node.value, set())
                if rel in users or rel.split("/")[0] in users or rel.removesuffix(".py") in users:
                    continue
                out.setdefault(rel, set()).add(node.value)
    return out


def test_every_row_is_whole():
    assert len(set(METHOD_NAMES)) == len(METHODS)
    for m in METHODS:
        assert m.runner in RUNNERS and m.about       # every runner runs (`run.RUNNERS`)
        assert (m.tree is not None) == m.drafts == (m.runner == "draft-verify")
        assert m.drafts or not m.is_eagle            # a head drafts
        if m.drafts:
            assert issubclass(m.drafter, TreeDrafter)   # the drafter protocol
            assert m.drafter.build is not TreeDrafter.build, m.name
        if m.drafts and m.name != AUTO:
            resolve_tree(m.name)   # every fixed tree in the table parses
    assert set(EAGLE_METHODS) <= set(METHOD_NAMES) and set(BENCH_DEFAULT) <= set(METHOD_NAMES)


def test_method_names_are_written_once():
    """Outside the table, method names come from it: at most one more module writes one."""
    found = method_name_literals()
    assert set(found) <= {"methods.py"}, found


def test_the_literal_check_finds_a_planted_name(tmp_path):
    (tmp_path / "a.py").write_text('x = "eagle2"\ny = "eagle1"\n')
    (tmp_path / "b.py").write_text('def f(kernels="auto"):\n    return "vanilla"\n')
    assert method_name_literals(tmp_path) == {"a.py": {"eagle2"}, "b.py": {"auto", "vanilla"}}


def test_resolve_tree_takes_names_specs_and_trees():
    assert resolve_tree("eagle2") == DynamicTree() == tree_from_spec(BY_NAME["eagle2"].tree)
    assert resolve_tree("eagle") == parse_tree("eagle1")
    assert resolve_tree("eagle-chain").choices() == [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]
    assert resolve_tree("dynamic:8,3,2") == DynamicTree(8, 3, 2)
    t = parse_tree("chain:2")
    assert resolve_tree(t) is t and isinstance(resolve_tree("[[0], [1]]"), Tree)
    for bad, says in (("vanilla", "drafts no tree"), ("auto", "measured on the machine"),
                      ("eagle7", "tree spec must be one of")):
        with pytest.raises(EagleMiniError, match=says):
            resolve_tree(bad)
    with pytest.raises(EagleMiniError, match="unknown method 'eagle7'"):
        method("eagle7")


def test_drafter_default_tree_is_the_tables_eagle2():
    """`Drafter`'s default is the table's eagle2 tree; the algorithm reads tree specs, and the
    table's names resolve at the edge (`resolve_tree`)."""
    target = tiny_target("llama", seed=0, vocab_size=64)
    assert Drafter(new_head(target)).tree == DynamicTree() == resolve_tree("eagle2")
    assert Drafter(new_head(target), tree="eagle2").tree == DynamicTree()
    assert Drafter(new_head(target), tree=resolve_tree("eagle")).tree == parse_tree("eagle1")
    with pytest.raises(EagleMiniError, match="tree spec must be one of"):
        Drafter(new_head(target), tree="eagle-chain")   # a method's name: the edge resolves it


def test_pick_head_and_method_tree_follow_the_table():
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    h1, h3 = new_head(target), new_eagle3_head(target, warm_start=False)
    assert pick_head("eagle3", {"eagle1": h1, "eagle3": h3}) is h3
    assert pick_head("eagle2", {"eagle1": h1, "eagle3": h3}) is h1
    with pytest.raises(EagleMiniError, match="drafts with an eagle3 head"):
        pick_head("eagle3", h1)
    assert method_tree(target, h1, "eagle-chain") == parse_tree("chain:4")
    assert method_tree(target, h1, "eagle2", tree="eagle") == parse_tree("eagle1")
    with pytest.raises(EagleMiniError, match="drafts no tree"):
        method_tree(target, h1, "hf-generate")


def test_one_clock_for_every_method():
    """Templating and tokenising happen before the clock starts, for every method of the table:
    a tokenizer that sleeps shows up in no method's seconds."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    heads = {"eagle1": new_head(target), "eagle3": new_eagle3_head(target, warm_start=False)}
    nap = 1.0

    def slow_chat_ids(prompt):
        time.sleep(nap)
        return [1, 2, 3, 4, 5]

    target.chat_ids = slow_chat_ids
    for name in METHOD_NAMES:
        tree = "chain:2" if name == AUTO else None   # auto's measured tree: not this test's subject
        if BY_NAME[name].hf_options.get("compiled"):  # its first call compiles: a bench's warm-up
            run_method(target, heads, name, "Hi!", 6)
        start = time.perf_counter()
        gen = run_method(target, heads, name, "Hi!", 6, tree=tree)
        wall = time.perf_counter() - start
        assert wall >= nap, name                     # the tokenizer did run (and slept)
        assert gen.stats["seconds"] < nap, (name, gen.stats["seconds"])
        assert gen.stats["seconds"] <= wall - nap + 1e-3, name
