"""The grading guard: inside `reference_off`, every route to the reference fails, and the block
fails when it ends even if the student's code caught the error; outside it nothing changes.

One test per route a submission can take: the name, an alias, a private helper, a function object
captured before the block (also as a default argument), a saved `__code__`, the module imported or
compiled a second time, another thread, another process, and taking the watch away.
"""
import importlib.util
import inspect
import subprocess
import sys
import threading
import types

import pytest
import torch

import eagle_mini.tree
from eagle_mini.course.guard import fingerprint, private_helpers, reference_off
from eagle_mini.draft import Drafter
from eagle_mini.training import train
from eagle_mini.tree import chain as imported_by_name

SWITCHED_OFF = "switched off while your code is graded"
REACHED = "reference ran while your code was graded"


def parents_of_chain(k, chain=eagle_mini.tree.chain):
    return chain(k).parents


def test_the_reference_is_refused_by_any_name_then_restored():
    with pytest.raises(RuntimeError, match=SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            imported_by_name(2)
    with pytest.raises(RuntimeError, match=SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            eagle_mini.tree.chain(2)
    assert imported_by_name(2).parents == eagle_mini.tree.chain(2).parents == [-1, 0, 1]


def test_code_that_does_not_reach_the_reference_runs_unchanged():
    with reference_off(eagle_mini.tree.chain):
        tree = eagle_mini.tree.from_parents([-1, 0, 1])
    assert tree == imported_by_name(2)


def test_a_caught_refusal_still_fails_the_block():
    def sneaky(k):
        try:
            return imported_by_name(k).parents
        except RuntimeError:
            return [-1] + list(range(k))

    with pytest.raises(RuntimeError, match=REACHED):
        with reference_off(eagle_mini.tree.chain):
            assert sneaky(2) == [-1, 0, 1]


def test_private_helpers_are_refused_to_the_student_but_not_to_the_package():
    assert private_helpers([train.eagle_loss]) == [train._step_sums]
    helpers = {f.__qualname__ for f in private_helpers([Drafter._draft_dynamic])}
    assert helpers == {"Drafter._run", "Drafter._to_target"}
    pred = torch.zeros(1, 3, 4)
    with pytest.raises(RuntimeError, match="_step_sums is " + SWITCHED_OFF):
        with reference_off(train.eagle_loss):
            train._step_sums(pred, pred, torch.ones(1, 3), torch.eye(4))
    assert train._step_sums(pred, pred, torch.ones(1, 3), torch.eye(4))[3] == 3
    assert eagle_mini.tree._as_int in private_helpers([eagle_mini.tree.chain])
    with reference_off(eagle_mini.tree.chain):  # Tree checks its input with _as_int
        assert eagle_mini.tree.from_parents([-1, 0]).parents == [-1, 0]


@pytest.mark.parametrize("route", ["FunctionType copy", "default argument", "closure"])
def test_a_function_object_captured_before_the_block_is_stopped(route):
    f = eagle_mini.tree.chain
    copy = types.FunctionType(f.__code__, f.__globals__)

    def with_default(k, _chain=types.FunctionType(f.__code__, f.__globals__)):
        return _chain(k).parents

    def in_closure(k):
        return copy(k).parents

    call = {"FunctionType copy": lambda k: copy(k).parents, "default argument": with_default,
            "closure": in_closure}[route]
    assert call(2) == [-1, 0, 1]  # before the block: the copy works
    with pytest.raises(RuntimeError, match="chain is " + SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            call(2)


def test_a_saved_code_object_run_later_is_stopped():
    snapshot = eagle_mini.tree.chain.__code__
    with pytest.raises(RuntimeError, match="chain is " + SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            types.FunctionType(snapshot, eagle_mini.tree.__dict__)(2)


def test_a_second_import_of_the_module_is_stopped():
    spec = importlib.util.spec_from_file_location("eagle_mini._again", eagle_mini.tree.__file__)
    with pytest.raises(RuntimeError, match="chain is " + SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            again = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(again)
            again.chain(2)


def test_the_source_compiled_again_is_stopped():
    namespace = {"Tree": eagle_mini.tree.Tree, "_as_int": eagle_mini.tree._as_int,
                 "EagleMiniError": eagle_mini.EagleMiniError}
    source = inspect.getsource(eagle_mini.tree.chain)
    with pytest.raises(RuntimeError, match="chain is " + SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            exec(source, namespace)
            namespace["chain"](2)


def test_a_thread_started_in_the_block_is_watched():
    copy = types.FunctionType(eagle_mini.tree.chain.__code__, eagle_mini.tree.__dict__)
    errors = []

    def run():
        try:
            copy(2)
        except RuntimeError as e:
            errors.append(e)

    with pytest.raises(RuntimeError, match=REACHED):
        with reference_off(eagle_mini.tree.chain):
            thread = threading.Thread(target=run)
            thread.start()
            thread.join()
    assert errors and SWITCHED_OFF in str(errors[0])


def test_another_process_fails_the_block():
    with pytest.raises(RuntimeError, match="subprocess.Popen"):
        with reference_off(eagle_mini.tree.chain):
            subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_taking_the_watch_away_fails_the_block():
    with pytest.raises(RuntimeError, match="sys.setprofile"):
        with reference_off(eagle_mini.tree.chain):
            sys.setprofile(None)
    assert sys.getprofile() is None


def test_nested_blocks_keep_the_outer_reference_watched():
    copy = types.FunctionType(eagle_mini.tree.chain.__code__, eagle_mini.tree.__dict__)
    with pytest.raises(RuntimeError, match=REACHED):
        with reference_off(eagle_mini.tree.chain):
            with pytest.raises(RuntimeError, match=SWITCHED_OFF):
                with reference_off(eagle_mini.tree.from_parents):
                    copy(2)
    assert parents_of_chain(2) == [-1, 0, 1] and sys.getprofile() is None


def test_a_decorated_reference_is_unwrapped():
    assert inspect.unwrap(Drafter.draft) is not Drafter.draft  # @torch.no_grad()
    with pytest.raises(RuntimeError, match="Drafter.draft is " + SWITCHED_OFF):
        with reference_off(Drafter.draft):
            Drafter.draft(None, 0)


def test_a_fingerprint_ignores_name_and_lines_but_not_the_code():
    code = eagle_mini.tree.chain.__code__
    assert fingerprint(code.replace(co_name="renamed", co_firstlineno=1)) == fingerprint(code)
    assert fingerprint(eagle_mini.tree.from_parents.__code__) != fingerprint(code)
