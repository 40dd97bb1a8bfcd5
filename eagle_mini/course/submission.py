"""What of a submitted notebook is graded, and what of a function's result is compared.

An exercise asks for named functions (`asked`: the functions its solution cell defines). Grading
takes from the submission's solution cell only what can define them (`extract`), reading it with
`ast`, never running it:

* the asked functions and the cell's other functions (helpers), without decorators and with
  default values that are literals: nothing of the student's runs when a function is defined, so
  nothing can be captured before grading starts (a copy of the package's function in a default
  argument);
* the cell's imports of the modules graded code may use (`ALLOWED_MODULES`), and its constants
  (names bound to a literal, `EPS = 1e-9`);
* nothing else: no statement that runs, no class, no assignment of anything but a literal.

What is kept is screened (`screen`): no name or attribute with double underscores (`__code__`,
`__globals__`, `__class__`), none of the builtins that reach beyond the function's own values
(`eval`, `open`, `globals`, `setattr`, ...), no attribute that leads to the interpreter's
machinery (`.sys`, `.modules`, `.f_back`, the grading modules), `getattr` only with a literal name.
A refused function raises the reason when a test calls it, so the report says why.

`define` runs the kept code in a namespace of its own, a copy of the grading notebook's names: the
student's functions can read the setup's helpers but rebinding a name rebinds it in the copy, and
only the asked names go back into the notebook. Hidden tests take their oracles from inside
themselves (`import eagle_mini.verify as oracle`), so a helper named like an oracle changes nothing.

`plain(value)` is what a hidden test compares: a copy made only of builtin values, numpy values and
exact torch tensors, so a result cannot carry an `__eq__` that says yes to everything.

    >>> extract("import math\\nprint(1)\\ndef f(x, k=2):\\n    return x * k\\n", ["f"]).code
    'import math\\n\\ndef f(x, k=2):\\n    return x * k'
"""
import ast
import builtins
import sys
import types
from dataclasses import dataclass, field

ALLOWED_MODULES = ("bisect", "collections", "copy", "dataclasses", "fractions", "functools",
                   "heapq", "itertools", "math", "numpy", "operator", "random", "statistics",
                   "torch", "transformers", "typing", "eagle_mini")
CLOSED_MODULES = ("eagle_mini.course.guard", "eagle_mini.course.submission",
                  "eagle_mini.course.autograde", "eagle_mini.course.assignments",
                  "eagle_mini.cli", "eagle_mini.tooling")
CLOSED_NAMES = {"eval", "exec", "compile", "open", "globals", "locals", "vars", "setattr",
                "delattr", "breakpoint", "input", "help", "memoryview", "get_ipython", "exit",
                "quit", "getattr", "hasattr"}
CLOSED_ATTRIBUTES = {"sys", "os", "modules", "gc", "ctypes", "importlib", "inspect", "builtins",
                     "subprocess", "signal", "threading", "multiprocessing", "guard", "submission",
                     "autograde", "assignments", "f_back", "f_globals", "f_locals", "f_builtins",
                     "f_code", "tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code",
                     "cr_code", "co_code", "co_consts", "getprofile", "gettrace", "settrace",
                     "setprofile", "get_objects", "get_referrers", "get_referents"}
NAMED_ATTRIBUTE = {"getattr", "hasattr"}  # allowed with a literal attribute name
NOTEBOOK_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


class Refused(Exception):
    """Code graded functions may not contain."""


@dataclass
class Extracted:
    """What of one solution cell is graded. code: the kept statements; refused: asked or helper
    function -> why it is not run; notes: what a reader of the report should know."""
    code: str
    refused: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _module_allowed(name: str) -> bool:
    return (name.partition(".")[0] in ALLOWED_MODULES
            and not any(name == c or name.startswith(c + ".") for c in CLOSED_MODULES))


class _Screen(ast.NodeVisitor):
    """Raises Refused at the first construct graded code may not contain."""

    def refuse(self, node, why: str):
        raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")

    def visit_Name(self, node):
        if _dunder(node.id) or node.id in CLOSED_NAMES:
            self.refuse(node, f"`{node.id}` is not allowed in graded code")

    def visit_Attribute(self, node):
        if _dunder(node.attr) or node.attr in CLOSED_ATTRIBUTES:
            self.refuse(node, f"`.{node.attr}` is not allowed in graded code")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and (_dunder(node.value) or node.value in CLOSED_ATTRIBUTES):
            self.refuse(node, f"the string {node.value!r} is not allowed in graded code")

    def visit_FunctionDef(self, node):
        if node.name == "__del__":  # it would run whenever the object is collected: after grading
            self.refuse(node, "`__del__` is not allowed in graded code")
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in NAMED_ATTRIBUTE:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.refuse(node, f"`{node.func.id}` needs a literal attribute name here")
            for arg in node.args + node.keywords:
                self.visit(arg)
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            if not _module_allowed(alias.name):
                self.refuse(node, f"`import {alias.name}`: graded code may import "
                                  f"{', '.join(ALLOWED_MODULES)}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level or not _module_allowed(module):
            self.refuse(node, f"`from {'.' * node.level}{module} import ...`: graded code may "
                              f"import {', '.join(ALLOWED_MODULES)}")
        for alias in node.names:
            if not _module_allowed(f"{module}.{alias.name}"):
                self.refuse(node, f"`from {module} import {alias.name}` is not allowed")
        self.generic_visit(node)

    def visit_alias(self, node):
        for name in filter(None, [node.name.rpartition(".")[2], node.asname]):
            if _dunder(name) or name in CLOSED_ATTRIBUTES or name == "*":
                self.refuse(node, f"importing `{name}` is not allowed")


def screen(node: ast.AST) -> None:
    """Raise Refused if `node` holds anything graded code may not (the module's docstring).

    >>> try:
    ...     screen(ast.parse("f.__code__"))
    ... except Refused as e:
    ...     print(e)
    line 1: `.__code__` is not allowed in graded code
    """
    _Screen().visit(node)


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _function(node: ast.FunctionDef) -> ast.FunctionDef:
    """`node` as graded: no annotations (evaluated when the function is defined), literal
    defaults only, no decorator; raises Refused otherwise."""
    if node.decorator_list:
        raise Refused(f"line {node.lineno}: `{node.name}` has a decorator, which would run before "
                      "grading: remove it")
    args = node.args
    for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
        if not _literal(default):
            raise Refused(f"line {default.lineno}: `{node.name}`'s default values must be "
                          "literals (numbers, strings, None, ...)")
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    node.returns = None
    screen(node)
    return node


def _constant(node) -> ast.Assign | None:
    """A top-level `NAME = literal` (annotation dropped), or None."""
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        node = ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)
    if (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
            and _literal(node.value)):
        screen(node)
        return node
    return None


def _bound(node) -> list[str]:
    """The names a dropped top-level statement would have bound."""
    if isinstance(node, (ast.ClassDef, ast.AsyncFunctionDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


def _keep(node, kept: list, refused: dict, dropped: dict) -> None:
    """Sort one top-level statement of a solution cell into kept, refused or dropped (name ->
    the statement that would have bound it)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        screen(node)  # a refused import refuses the whole cell: its functions may need it
        kept.append(node)
    elif isinstance(node, ast.FunctionDef):
        try:
            kept.append(_function(node))
        except Refused as e:
            refused[node.name] = str(e)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _constant(node) is not None:
        kept.append(_constant(node))
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.ClassDef, ast.AsyncFunctionDef)):
        dropped.update((name, node) for name in _bound(node))


def extract(source: str, asked: list[str]) -> Extracted:
    """What of a solution cell's `source` is graded for the `asked` functions."""
    try:
        body = ast.parse(source).body
    except SyntaxError as e:
        return Extracted("", {n: f"the cell does not parse: {e.msg} (line {e.lineno})" for n in asked})
    kept, refused, dropped = [], {}, {}
    try:
        for node in body:
            _keep(node, kept, refused, dropped)
    except Refused as e:
        return Extracted("", {n: str(e) for n in asked})
    used = {n.id for f in kept if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
            if isinstance(n, ast.Name)}
    notes = [f"line {dropped[name].lineno}: `{name}` is not graded (only functions, imports and "
             f"constants bound to a literal are), so the functions cannot use it"
             for name in sorted(used & set(dropped))]
    defined = {n.name for n in kept if isinstance(n, ast.FunctionDef)} | set(refused)
    missing = [n for n in asked if n not in defined]
    if missing:
        found = sorted(n.name for n in body if isinstance(n, ast.FunctionDef))
        notes.append(f"the cell defines no {', '.join(missing)}"
                     + (f" (it defines {', '.join(found)})" if found else ""))
    return Extracted(ast.unparse(ast.Module(body=kept, type_ignores=[])), refused, notes)


def _stub(name: str, why: str):
    def refused(*args, **kwargs):
        raise RuntimeError(f"{name} was not graded: {why}")
    refused.__name__ = refused.__qualname__ = name
    return refused


def define(namespace: dict, label: str, code: str, asked: list[str],
           refused: dict[str, str] | None = None) -> None:
    """Run `code` (what `extract` kept) in a copy of `namespace`'s public names and put the
    `asked` functions into `namespace`; a refused or missing one raises its reason when called."""
    refused = refused or {}
    private = {k: v for k, v in namespace.items()
               if not k.startswith("_") and k not in NOTEBOOK_NAMES}
    private.update(__name__="submission", __builtins__=builtins)
    filename = f"<submission {label}>"
    exec(compile(code, filename, "exec"), private)
    for name in asked:
        f = private.get(name)
        if name in refused:
            namespace[name] = _stub(name, refused[name])
        elif isinstance(f, types.FunctionType) and f.__code__.co_filename == filename:
            namespace[name] = f
        else:
            namespace[name] = _stub(name, f"the submission defines no function {name}")


def _numpy_scalars() -> tuple:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return ()
    return (numpy.bool_, numpy.int8, numpy.int16, numpy.int32, numpy.int64, numpy.uint8,
            numpy.float16, numpy.float32, numpy.float64)


def plain(value):
    """A copy of `value` made only of bool, int, float, str, None, lists, tuples, dicts, numpy
    values and exact torch tensors (a tensor keeps its autograd graph); raises TypeError on
    anything else, e.g. an object whose `__eq__` says yes to everything.

    >>> plain([1, (2.5, "x"), {"k": None}])
    [1, (2.5, 'x'), {'k': None}]
    """
    kind = type(value)
    if kind in (bool, int, float, str, type(None)):
        return value
    if kind in (list, tuple):
        return kind(plain(v) for v in value)
    if kind is dict:
        return {plain(k): plain(v) for k, v in dict.items(value)}
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
        return torch.Tensor.clone(value)
    if numpy is not None and kind is numpy.ndarray and value.dtype != object:
        return numpy.array(value, copy=True)
    if kind in _numpy_scalars():
        return value.item()
    raise TypeError(f"a {kind.__name__} is not a value the tests compare: return numbers, "
                    "lists, tuples, dicts or tensors")
