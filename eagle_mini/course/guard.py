"""Grading a student's function against eagle_mini with eagle_mini's own answer out of reach.

An exercise re-implements one function of the package, and its hidden tests compare the two: the
package is the oracle. The tests compute the expected values first, then run the student's code
inside `reference_off(reference, ...)`. While the block runs, the reference cannot run by any route
the student's code takes to it:

* **switched off**: the reference functions get a code object that raises. Swapping `__code__`
  reaches every alias, `from ... import` included, which `mock.patch` misses.
* **watched**: a profile hook (`sys.setprofile`, also in threads the block starts) sees every
  Python frame that begins. A frame that runs a reference's code raises: the code object itself or
  any copy with the same bytecode, names and constants. That stops what a switch-off cannot: a
  function object made before the block (`types.FunctionType(f.__code__, f.__globals__)`, a
  default argument), a `__code__` saved and run later, the module imported or compiled again. The
  same holds for the references' private helpers (functions named `_x` that they reach by name,
  transitively: `_step_sums` behind `eagle_loss`) when code outside the package calls them; the
  package's own code still may, since the functions a student is allowed to call can need them.
* **sealed**: an audit hook (`sys.addaudithook`) marks the block when its code starts another
  process or replaces the profile or trace hook.

A reached reference fails the block when it ends, even when the student's code caught the error.
What the guard cannot stop: code that edits the grader itself (ctypes, patching `torch` or the
test's own helpers), code compiled under a package file name to pass for the package's own, or a
copy of the package's source edited by hand. All of it shows in the solution cell, which is short;
the instructor guide says so.
"""
import inspect
import os
import sys
import threading
import types
from contextlib import contextmanager
from pathlib import Path

# Audit events (docs.python.org/3/library/audit_events.html) that leave the watched process or
# take the watch away. ctypes is not listed: torch loads libraries with it on first use.
_ESCAPES = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
            "os.forkpty", "sys.setprofile", "sys.settrace")
_ACTIVE = []   # the watches of the blocks running now, innermost last
_AUDITING = []  # the audit hook, once installed (it cannot be removed)


def fingerprint(code: types.CodeType) -> tuple:
    """What every copy of `code` shares, whatever its name, file or line numbers: the bytecode,
    the names, the constants (nested code by its fingerprint) and the arguments.

    >>> def f(x): return x + 1
    >>> fingerprint(f.__code__.replace(co_name="g", co_firstlineno=99)) == fingerprint(f.__code__)
    True
    """
    consts = tuple(fingerprint(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)


def _names(code: types.CodeType) -> set[str]:
    """Global and attribute names read by `code` and the code nested in it."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


def _package(f) -> str:
    """The top-level package a function comes from ("" for one made at run time)."""
    return (f.__module__ or "").partition(".")[0]


def _function(obj):
    """The plain function behind a method, static or class method, property or decorator."""
    obj = getattr(obj, "__func__", None) or getattr(obj, "fget", None) or obj
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return obj if isinstance(obj, types.FunctionType) else None


def _scopes(f) -> list:
    """Where a name read by `f` may live, as lookups `name -> object or None`: its module, its
    class (for a method), and the modules of its own package that its module imported."""
    package = _package(f)
    scopes = [f.__globals__.get]
    owner, *path = f.__qualname__.split(".")[:-1] or [None]
    if owner is not None and "<locals>" not in path:
        cls = f.__globals__.get(owner)
        for part in path:
            cls = getattr(cls, part, None)
        if isinstance(cls, type):
            scopes.append(lambda name: inspect.getattr_static(cls, name, None))
    scopes += [vars(m).get for m in f.__globals__.values() if isinstance(m, types.ModuleType)
               and m.__name__.partition(".")[0] == package]
    return scopes


def private_helpers(functions) -> list:
    """The functions named `_x` (one leading underscore) that `functions` reach by name,
    transitively, within their own package: module functions, methods of their class, functions
    of the package's modules they import.

    >>> from eagle_mini.training import train
    >>> [f.__name__ for f in private_helpers([train.eagle_loss])]
    ['_step_sums']
    """
    functions = [_function(f) for f in functions]
    found, todo = {}, list(functions)
    while todo:
        f = todo.pop()
        package = _package(f)
        for name in sorted(_names(f.__code__)):
            if not name.startswith("_") or name.startswith("__"):
                continue
            for scope in _scopes(f):
                helper = _function(scope(name))
                if (helper is not None and _package(helper) == package
                        and helper not in found and helper not in functions):
                    found[helper] = None
                    todo.append(helper)
    return list(found)


def _refused(*args, **kwargs):
    raise RuntimeError("MESSAGE")  # runs with the switched-off function's globals: builtins only


def _refusal(f) -> types.CodeType:
    """A code object for `f` that raises, naming it."""
    message = f"{f.__qualname__} is switched off while your code is graded"
    code = _refused.__code__
    return code.replace(co_consts=tuple(message if c == "MESSAGE" else c for c in code.co_consts),
                        co_name=f.__name__, co_qualname=f.__qualname__)


def _audit(event, args):
    if _ACTIVE and event.startswith(_ESCAPES):
        _ACTIVE[-1].reached.append(f"{event} (another process, or the watch taken away)")


class _Watch:
    """The profile hook of one `reference_off` block. It raises in a frame that runs a reference's
    code (any copy, found by fingerprint), or a private helper's code called from outside the
    helper's package; it notes the references' refusals (found by identity), which raise anyway."""

    def __init__(self, functions, helpers, refusals):
        self.keys = {fingerprint(f.__code__): (f.__qualname__, None) for f in functions}
        for f in helpers:  # the package's own code may call a helper: allowed code may need it
            folder = str(Path(sys.modules[_package(f)].__file__).parent) + os.sep
            self.keys.setdefault(fingerprint(f.__code__), (f.__qualname__, folder))
        self.refusals = {id(code): code.co_qualname for code in refusals}
        self.seen = {}   # id(code) -> (code, its entry in keys or None): one fingerprint per code
        self.reached = []

    def profile(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if id(code) in self.refusals:
            self.reached.append(self.refusals[id(code)])
            return  # the refusal raises by itself
        seen = self.seen.get(id(code))
        if seen is None or seen[0] is not code:
            seen = self.seen[id(code)] = (code, self.keys.get(fingerprint(code)))
        if seen[1] is None:
            return
        name, package_folder = seen[1]
        caller = frame.f_back
        if package_folder and caller and caller.f_code.co_filename.startswith(package_folder):
            return
        self.reached.append(name)
        raise RuntimeError(f"{name} is switched off while your code is graded")

    def __enter__(self):
        if not _AUDITING:
            sys.addaudithook(_audit)
            _AUDITING.append(_audit)
        if _ACTIVE:  # nested: the outer block's references stay watched
            self.keys = _ACTIVE[-1].keys | self.keys
            self.refusals = _ACTIVE[-1].refusals | self.refusals
        self.saved = sys.getprofile(), threading.getprofile()
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)
        _ACTIVE.append(self)

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        sys.setprofile(self.saved[0])
        threading.setprofile(self.saved[1])
        if _ACTIVE:
            _ACTIVE[-1].reached += self.reached


@contextmanager
def reference_off(*functions):
    """While the block runs, `functions` cannot run, by any name or copy, nor can their private
    helpers be called from outside the package; if the block's code reached one anyway, the block
    raises RuntimeError when it ends.

    functions: plain functions or methods (`Tree.__post_init__`); decorated ones are unwrapped.

    >>> from eagle_mini import tree
    >>> with reference_off(tree.chain):
    ...     tree.chain(2)
    Traceback (most recent call last):
    RuntimeError: chain is switched off while your code is graded
    """
    functions = [_function(f) for f in functions]
    if None in functions:
        raise TypeError("reference_off takes Python functions")
    saved = {f: f.__code__ for f in functions}
    # a closure's code must keep its free variables: the watch stops it instead
    refusals = {f: _refusal(f) for f in functions if not f.__code__.co_freevars}
    watch = _Watch(functions, private_helpers(functions), refusals.values())
    try:
        for f, code in refusals.items():
            f.__code__ = code
        with watch:
            yield
    finally:
        for f, code in saved.items():
            f.__code__ = code
    if watch.reached:
        raise RuntimeError("eagle_mini's reference ran while your code was graded: "
                           + ", ".join(dict.fromkeys(watch.reached)))
