"""The grading guard: inside `reference_off`, every route to the reference fails, and the block
fails when it ends even if the student's code caught the error; outside it nothing changes.

One test per route a submission can take: the name, an alias, a private helper, a function object
captured before the block (also as a default argument), a saved `__code__`, the module imported or
compiled a second time, another thread, another process, and taking the watch away.
"""
import importlib.util
import inspect
import pathlib
import subprocess
import sys
import threading
import types

import pytest
import torch

import eagle_mini.tree
from eagle_mini.course.guard import fingerprint, private_helpers, reference_off
from eagle_mini.draft import Candidates, Drafter
from eagle_mini.training import train
from eagle_mini.tree import chain as imported_by_name

SWITCHED_OFF = "switched off while your code is graded"
REACHED = "reference ran while your code was graded"
STOPPED = "switched off while your code is graded|not allowed while your code is graded"


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
    helpers = {f.__qualname__ for f in private_helpers([Drafter.grow])}
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
    with pytest.raises(RuntimeError, match="function.__new__: not allowed"):
        with reference_off(eagle_mini.tree.chain):
            types.FunctionType(snapshot, eagle_mini.tree.__dict__)(2)


def test_a_copy_with_other_constants_made_before_the_block_is_stopped():
    code = eagle_mini.tree.chain.__code__
    consts = code.co_consts + ("one constant more",)
    copy = types.FunctionType(code.replace(co_consts=consts, co_name="mine"), eagle_mini.tree.__dict__)
    assert copy(2).parents == [-1, 0, 1]
    with pytest.raises(RuntimeError, match="chain is " + SWITCHED_OFF):
        with reference_off(eagle_mini.tree.chain):
            copy(2)


def test_a_second_import_of_the_module_is_stopped():
    spec = importlib.util.spec_from_file_location("eagle_mini._again", eagle_mini.tree.__file__)
    with pytest.raises(RuntimeError, match=STOPPED):
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


# ---------------------------------------------------------------- the way out, closed

CHANGED = "changed what the tests rely on"


def test_patching_a_package_function_fails_the_block_and_is_undone():
    original = eagle_mini.tree.from_choices
    with pytest.raises(RuntimeError, match=CHANGED + ".*eagle_mini.tree.from_choices"):
        with reference_off(eagle_mini.tree.chain):
            eagle_mini.tree.from_choices = lambda choices: None
    assert eagle_mini.tree.from_choices is original


def test_patching_a_class_or_torch_fails_the_block_and_is_undone():
    positions, allclose = eagle_mini.tree.Tree.positions, torch.allclose
    with pytest.raises(RuntimeError, match=CHANGED + ".*(Tree|torch.allclose).*(Tree|allclose)"):
        with reference_off(eagle_mini.tree.chain):
            eagle_mini.tree.Tree.positions = lambda self, start: None
            torch.allclose = lambda *args, **kwargs: True
    assert eagle_mini.tree.Tree.positions is positions and torch.allclose is allclose


def test_sys_modules_tricks_fail_the_block_and_are_undone():
    module = sys.modules["eagle_mini.verify"]
    with pytest.raises(RuntimeError, match=CHANGED + r".*sys.modules\['eagle_mini.verify'\]"):
        with reference_off(eagle_mini.tree.chain):
            sys.modules["eagle_mini.verify"] = types.ModuleType("eagle_mini.verify")
    assert sys.modules["eagle_mini.verify"] is module


def test_a_torch_function_mode_left_on_fails_the_block():
    class Always(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return True

    mode = Always()
    with pytest.raises(RuntimeError, match=CHANGED + ".*torch's function or dispatch modes"):
        with reference_off(eagle_mini.tree.chain):
            mode.__enter__()
    mode.__exit__(None, None, None)


@pytest.mark.parametrize("route, refused", [
    ("gc walk", "gc.get_objects"),
    ("frames", "sys._getframe"),
    ("traceback frames", "reading .tb_frame"),
    ("reload", "reading"),
    ("the instructor's notebook", "reading"),
    ("writing a file", "writing"),
    ("a new code object", "code.__new__"),
    ("a function's code replaced", "object.__setattr__ __code__"),
])
def test_the_way_out_is_refused_even_when_the_error_is_caught(route, refused, tmp_path):
    import gc
    import importlib

    notebook = pathlib.Path(eagle_mini.__file__).parents[1] / "notebooks" / "05_verification.ipynb"
    attempts = {
        "gc walk": lambda: gc.get_objects(),
        "frames": lambda: sys._getframe(1).f_locals,
        "traceback frames": lambda: _frame_of_an_error(),
        "reload": lambda: importlib.reload(eagle_mini.tree),
        "the instructor's notebook": lambda: notebook.read_text(),
        "writing a file": lambda: (tmp_path / "x").write_text("x"),
        "a new code object": lambda: eagle_mini.tree.chain.__code__.replace(co_name="x"),
        "a function's code replaced": lambda: setattr(parents_of_chain, "__code__",
                                                      eagle_mini.tree.chain.__code__),
    }
    with pytest.raises(RuntimeError, match=f"grading refuses: {refused}"):
        with reference_off(eagle_mini.tree.chain):
            try:
                attempts[route]()
            except RuntimeError:
                pass
    assert eagle_mini.tree.chain(2).parents == [-1, 0, 1]


def _frame_of_an_error():
    try:
        raise ValueError
    except ValueError as e:
        return e.__traceback__.tb_frame


def test_the_interpreters_own_files_stay_readable():
    import json as json_module
    with reference_off(eagle_mini.tree.chain):
        source = pathlib.Path(json_module.__file__).read_text()
    assert "def dumps" in source


def test_no_other_package_function_shares_a_switched_off_functions_fingerprint():
    from eagle_mini.course import sampling_explorer
    from eagle_mini.verify import SampledTreeRule, verify_greedy, verify_sampling
    references = [verify_greedy, verify_sampling, SampledTreeRule.reject, sampling_explorer.residual,
                  eagle_mini.tree.Tree.positions, train.eagle_loss, Drafter.grow,
                  Candidates.best, Candidates.rerank]
    mine = {fingerprint(f.__code__): f for f in map(inspect.unwrap, references)}  # grow: no_grad
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("eagle_mini")]:
        for value in list(vars(module).values()):
            for f in [value, *(vars(value).values() if isinstance(value, type) else ())]:
                f = getattr(f, "__func__", f)
                if isinstance(f, types.FunctionType) and fingerprint(f.__code__) in mine:
                    assert mine[fingerprint(f.__code__)] is f, (f, mine[fingerprint(f.__code__)])


def test_a_librarys_own_counters_may_move_but_a_package_number_may_not():
    """Hypothesis keeps gc timers in module globals that move whenever gc runs; the package's
    numbers (a tolerance, a threshold) are what a check reads, so rebinding one fails the block."""
    counters = types.ModuleType("some_test_library")
    counters.elapsed = 0.0
    sys.modules["some_test_library"] = counters
    try:
        with reference_off(eagle_mini.tree.chain):
            counters.elapsed += 1.5
    finally:
        del sys.modules["some_test_library"]
    saved = eagle_mini.tree.__dict__.get("PLANTED_LIMIT")
    eagle_mini.tree.PLANTED_LIMIT = 1
    try:
        with pytest.raises(RuntimeError, match="changed what the tests rely on"):
            with reference_off(eagle_mini.tree.chain):
                eagle_mini.tree.PLANTED_LIMIT = 10 ** 9
        assert eagle_mini.tree.PLANTED_LIMIT == 1   # and it was put back
    finally:
        del eagle_mini.tree.PLANTED_LIMIT
        assert saved is None
