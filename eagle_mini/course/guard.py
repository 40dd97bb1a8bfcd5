"""Grading a student's function against eagle_mini with eagle_mini's own answer out of reach.

An exercise re-implements one function of the package, and its hidden tests compare the two: the
package is the oracle. A hidden test computes the expected values first, then calls the student's
code, and checks what it returned, all inside `reference_off(reference, ...)`. While the block
runs:

* **the references are switched off**: they get a code object that raises. Swapping `__code__`
  reaches every alias, `from ... import` included, which `mock.patch` misses.
* **every Python frame is watched**: a profile hook (`sys.setprofile`, also in threads the block
  starts) raises in a frame that runs a reference's code: the code object itself or any copy with
  the same bytecode and names, whatever its constants, local names, file or lines (`fingerprint`).
  The same holds for the references' private helpers (functions named `_x` that they reach by name,
  transitively: `_step_sums` behind `eagle_loss`) when code outside the package calls them; the
  package's own code still may, since the functions a student is allowed to call can need them.
* **the way out is closed**: an audit hook (`sys.addaudithook`) refuses what a function under test
  never needs and a cheat does: another process or a signal, a new profile, trace or audit hook,
  other frames and the garbage collector's object lists (the test's expected values, the saved
  reference), making code or functions from code objects, `ctypes`, writing files, and reading
  any file outside the interpreter's own folders, eagle_mini's included (the instructor's notebooks,
  the package's source to copy).
* **what the checks rely on is checked**: when the block ends, `sys.modules`, every module's names
  and every class's attributes must be the ones it started with, and torch may hold no new
  function mode. Anything changed is put back and fails the block: a patched
  `eagle_mini.verify.verify_greedy`, `torch.allclose` or `Tree.positions`, a reloaded module.

A refused or reached route fails the block when it ends, even when the student's code caught the
error. What stays possible inside one process: changing objects in place that the checks do not
read back (a library's private registry), and a hand-edited copy of the package's code typed into
the solution cell, where a reader sees it. Grading (`autograde`) therefore runs each graded cell
in a fresh process that ends with it, and takes only the functions an exercise asks for from the
submission (`submission`).
"""
import _thread
import inspect
import os
import sys
import threading
import types
from contextlib import contextmanager
from pathlib import Path

# Audit events (docs.python.org/3/library/audit_events.html), by prefix, that a block refuses.
# torch loads libraries with ctypes on first use: the tests import what they need before a block.
_REFUSED = (
    # another process, a signal, or the watch taken away
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill", "sys.setprofile", "sys.settrace",
    "sys.addaudithook", "setopencodehook",
    # other frames and objects: the test's expected values, the references' saved code
    "sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents",
    # new functions from code objects, a function's code or defaults replaced, raw memory
    "code.__new__", "function.__new__", "object.__setattr__", "object.__delattr__", "ctypes.",
    # the file system and the network beyond reading the interpreter's own files
    "os.listdir", "os.scandir", "os.chdir", "os.remove", "os.rename", "os.rmdir", "os.mkdir",
    "os.symlink", "os.link", "os.truncate", "shutil.", "socket.", "pickle.find_class")
_FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_READABLE = tuple({os.path.realpath(p) + os.sep for p in
                   (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
_PACKAGE = os.path.realpath(Path(__file__).resolve().parents[1]) + os.sep
# The packages whose names and classes must not change at all, additions included; elsewhere a
# library may add a name (a lazily imported submodule).
_STRICT = ("eagle_mini", "__main__", "builtins")
_MISSING = object()
_CACHED = {"__slotnames__"}  # what Python itself adds to a class on first use (copy, pickle)
_ACTIVE = []   # the watches of the blocks running now, innermost last
_PAUSED = []   # non-empty while the guard itself sets a block up or takes it down
_AUDITING = []  # the audit hook, once installed (it cannot be removed)


def fingerprint(code: types.CodeType) -> tuple:
    """What every copy of `code` shares, whatever its name, file, line numbers, constants or local
    names: the bytecode, the global and attribute names it reads (nested code by its fingerprint)
    and the arguments. A copy with one constant changed or added runs the same instructions.

    >>> def f(x): return x + 1
    >>> g = f.__code__.replace(co_name="g", co_firstlineno=99, co_consts=(None, 2), co_varnames=("y",))
    >>> fingerprint(g) == fingerprint(f.__code__)
    True
    """
    nested = tuple(fingerprint(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return (code.co_code, nested, code.co_names, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount)


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


def _open_refusal(path, mode, flags) -> str | None:
    """Why opening `path` is refused in a block: any write, any read outside the interpreter's
    folders, and any read of eagle_mini's own files (None: allowed)."""
    if isinstance(mode, str) and set(mode) & set("wax+") or (flags or 0) & _WRITE_FLAGS:
        return f"writing {path}"
    if isinstance(path, int):
        return None  # a file already open
    real = os.path.realpath(os.fsdecode(path))
    if real.startswith(_PACKAGE) or not real.startswith(_READABLE):
        return f"reading {real}"
    return None


def refusal(event: str, args: tuple) -> str | None:
    """Why a block refuses audit event `event` with `args` (None: allowed).

    >>> refusal("gc.get_objects", (-1,)), refusal("open", ("/dev/null", "w", 0))
    ('gc.get_objects', 'writing /dev/null')
    """
    if event == "open":
        return _open_refusal(*args[:3])
    if event == "object.__getattr__":
        return f"reading .{args[1]}" if args[1] in _FRAME_ATTRIBUTES else None
    if event.startswith(_REFUSED):
        name = f" {args[1]}" if event.startswith("object.") and len(args) > 1 else ""
        return event + name
    return None


def _audit(event, args):
    if not _ACTIVE or _PAUSED or _thread.get_ident() not in _ACTIVE[-1].threads:
        return  # another thread's work, a Jupyter kernel's say, is not the block's
    if event == "sys.setprofile" and (_ACTIVE[-1].unsetting or sys.getprofile() is None):
        # Python drops a profile hook that raised (the block fails anyway), and a thread started
        # in the block installs the watch's hook when it starts
        _ACTIVE[-1].unsetting = False
        return
    why = refusal(event, args)
    if why is not None:
        _ACTIVE[-1].refused.append(why)
        raise RuntimeError(f"{why}: not allowed while your code is graded")


def _torch_modes() -> tuple:
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def _is_class(value) -> bool:
    return issubclass(type(value), type)


def _bookkeeping(module: str, before, after) -> bool:
    """A number a library outside the package keeps on its own (a test library's gc timers, a
    counter) moved while the block ran: not something the checks read."""
    numbers = (int, float)
    return (module.partition(".")[0] not in _STRICT + ("torch", "numpy")
            and type(before) in numbers and type(after) in numbers)


class _State:
    """What a block's code could change to fool the checks that follow it, taken when the block
    starts: the loaded modules, every module's names, the attributes of every class a module
    defines, torch's function and dispatch modes. `changes()` names what differs now; `restore()`
    puts it back."""

    def __init__(self):
        self.modules = dict(sys.modules)
        self.names, self.classes = {}, {}
        for name, module in self.modules.items():
            if not isinstance(module, types.ModuleType):
                continue
            names = self.names[name] = dict(module.__dict__)
            for value in names.values():
                if _is_class(value) and vars(value).get("__module__") == name:
                    self.classes[id(value)] = (value, dict(vars(value)))
        self.modes = _torch_modes()
        torch = sys.modules.get("torch")
        self.grad = torch.is_grad_enabled() if torch else None

    def changes(self) -> list[str]:
        out = [f"sys.modules[{name!r}]" for name, module in self.modules.items()
               if sys.modules.get(name, _MISSING) is not module]
        for name, saved in self.names.items():
            now = vars(self.modules[name])
            out += [f"{name}.{key}" for key, value in saved.items()
                    if now.get(key, _MISSING) is not value
                    and not _bookkeeping(name, value, now.get(key, _MISSING))]
            if name.partition(".")[0] in _STRICT and len(now) != len(saved):
                out += [f"{name}.{key}" for key in now.keys() - saved.keys()]
        for cls, saved in self.classes.values():
            now = vars(cls)
            if now.keys() - _CACHED != saved.keys() - _CACHED or any(
                    now.get(k, _MISSING) is not v for k, v in saved.items()):
                out.append(f"{cls.__module__}.{cls.__qualname__}")
        if _torch_modes() != self.modes:
            out.append("torch's function or dispatch modes")
        return out

    def restore(self):
        for name, module in self.modules.items():
            if sys.modules.get(name, _MISSING) is not module:
                sys.modules[name] = module
        for name, saved in self.names.items():
            now = vars(self.modules[name])
            for key in [k for k in now if k not in saved and name.partition(".")[0] in _STRICT]:
                del now[key]
            now.update((k, v) for k, v in saved.items() if now.get(k, _MISSING) is not v)
        for cls, saved in self.classes.values():
            for key in [k for k in vars(cls) if k not in saved and k not in _CACHED]:
                delattr(cls, key)
            for key, value in saved.items():
                if vars(cls).get(key, _MISSING) is not value:
                    setattr(cls, key, value)
        if self.grad is not None:
            sys.modules["torch"].set_grad_enabled(self.grad)


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
        self.reached, self.refused, self.changed = [], [], []
        self.unsetting = False
        self.threads = {_thread.get_ident()}  # the block's thread, and the threads it starts

    def profile(self, frame, event, arg):
        if event != "call":
            return
        self.threads.add(_thread.get_ident())
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
        self.unsetting = True
        raise RuntimeError(f"{name} is switched off while your code is graded")

    def __enter__(self):
        if not _AUDITING:
            sys.addaudithook(_audit)
            _AUDITING.append(_audit)
        if _ACTIVE:  # nested: the outer block's references stay watched
            self.keys = _ACTIVE[-1].keys | self.keys
            self.refusals = _ACTIVE[-1].refusals | self.refusals
            self.threads = self.threads | _ACTIVE[-1].threads
        self.saved = sys.getprofile(), threading.getprofile()
        self.state = _State()
        with _paused():
            sys.setprofile(self.profile)
            threading.setprofile(self.profile)
        _ACTIVE.append(self)

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        with _paused():
            sys.setprofile(self.saved[0])
            threading.setprofile(self.saved[1])
        changed = self.state.changes()
        if changed:
            self.state.restore()
        self.changed += changed
        if _ACTIVE:  # what an inner block saw fails the outer one too
            for kind in ("reached", "refused", "changed"):
                getattr(_ACTIVE[-1], kind).extend(getattr(self, kind))

    def verdict(self) -> str | None:
        """Why the block fails although no exception left it (None: it passes)."""
        parts = []
        for what, found in (("eagle_mini's reference ran while your code was graded", self.reached),
                            ("your code did what grading refuses", self.refused),
                            ("your code changed what the tests rely on", self.changed)):
            if found:
                parts.append(f"{what}: " + ", ".join(list(dict.fromkeys(found))[:5]))
        return "; ".join(parts) or None


@contextmanager
def _paused():
    _PAUSED.append(True)
    try:
        yield
    finally:
        _PAUSED.pop()


@contextmanager
def reference_off(*functions):
    """While the block runs, `functions` cannot run, by any name or copy, nor can their private
    helpers be called from outside the package, and the way out is closed (see the module's
    docstring); if the block's code reached or changed any of it anyway, the block raises
    RuntimeError when it ends.

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
    with _paused():  # in a block already: the guard's own work is not the student's
        saved = {f: f.__code__ for f in functions}
        # a closure's code must keep its free variables: the watch stops it instead
        refusals = {f: _refusal(f) for f in functions if not f.__code__.co_freevars}
        watch = _Watch(functions, private_helpers(functions), refusals.values())
    try:
        with _paused():
            for f, code in refusals.items():
                f.__code__ = code
        with watch:
            yield
    finally:
        with _paused():
            for f, code in saved.items():
                f.__code__ = code
    why = watch.verdict()
    if why:
        raise RuntimeError(why)
