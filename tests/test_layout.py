"""The package's shape: layers that import only downwards, no import circles, a short public API.

The circle check reads every `import` statement of the package with `ast`, those inside functions
included (a lazy import hides a circle from Python but not from a reader), and looks for a cycle
in the module graph.
"""
import ast
import pathlib

import eagle_mini

PACKAGE = pathlib.Path(eagle_mini.__file__).parent
ALGORITHM = ["target", "tree", "draft", "lookup", "hybrid", "sampling", "verify", "decode",
             "methods"]
# The layers from the bottom up (docs/architecture.md): a module may import its own layer and the
# ones below it, never one above. A module's layer is named by its folder, or by its file for the
# top level of the package; `eagle_mini/__init__.py` (the public API) stands above them all.
LAYERS = [
    ("base", ["errors", "results", "assets", "data"]),
    ("algorithm", ALGORITHM),
    ("heads", ["heads"]),
    ("runtime", ["models", "runtime"]),
    ("training", ["training"]),
    ("measurement", ["measure"]),
    ("experiments", ["experiments"]),
    ("course", ["course"]),
    ("tooling", ["tooling"]),
    ("cli", ["cli", "__main__"]),
]


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: pathlib.Path, known) -> set[str]:
    """Package modules that module `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:   # `from . import x` imports the module x
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def find_cycle(graph):
    """One import circle as a list of modules, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state:
                cycle = visit(n)
                if cycle:
                    return cycle
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return None


def test_the_checker_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_relative_and_lazy_imports(tmp_path):
    graph = import_graph()
    assert "eagle_mini.verify" in graph["eagle_mini.decode"]
    assert "eagle_mini.data" in graph["eagle_mini.measure.bench"]
    planted = tmp_path / "z.py"
    planted.write_text("from .auto import x\n\ndef f():\n    from ..decode import y\n"
                       "    from .. import tree\n")
    assert imported("eagle_mini.runtime.z", planted, modules()) == {
        "eagle_mini.runtime.auto", "eagle_mini.decode", "eagle_mini.tree"}


def test_no_import_circle_anywhere_in_the_package():
    assert find_cycle(import_graph()) is None


def layer_of(module: str) -> int:
    """The index in LAYERS of a package module (`eagle_mini.runtime.auto` -> runtime's)."""
    first = module.split(".")[1]
    for i, (_, members) in enumerate(LAYERS):
        if first in members:
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)")


def upward_arrows(graph) -> list[str]:
    """Every import that runs up the layers, as "a (layer) -> b (layer)"."""
    out = []
    for m, deps in sorted(graph.items()):
        if m == "eagle_mini":
            continue
        for d in sorted(deps - {"eagle_mini"}):
            if layer_of(d) > layer_of(m):
                out.append(f"{m} ({LAYERS[layer_of(m)][0]}) -> {d} ({LAYERS[layer_of(d)][0]})")
    return out


def test_every_module_is_in_a_layer():
    for m in import_graph():
        if m != "eagle_mini":
            layer_of(m)


def test_no_import_runs_up_the_layers():
    assert upward_arrows(import_graph()) == []


def test_the_layer_check_finds_a_planted_upward_import():
    graph = import_graph()
    graph["eagle_mini.decode"] = graph["eagle_mini.decode"] | {"eagle_mini.measure.bench"}
    graph["eagle_mini.models"] = graph["eagle_mini.models"] | {"eagle_mini.tooling.report"}
    assert upward_arrows(graph) == [
        "eagle_mini.decode (algorithm) -> eagle_mini.measure.bench (measurement)",
        "eagle_mini.models (runtime) -> eagle_mini.tooling.report (tooling)"]


def test_the_algorithm_does_not_read_the_methods_table():
    """Method names are resolved at the edge (the CLI, `runtime/run.py`): the algorithm takes
    trees and drafters, and only the table itself imports its own layer's drafters."""
    graph = import_graph()
    readers = {m for m, deps in graph.items() if "eagle_mini.methods" in deps
               and m.split(".")[1] in ALGORITHM}
    assert readers == set(), readers


def test_models_imports_no_measurement_experiment_or_tooling():
    graph = import_graph()
    assert not {m for m in graph["eagle_mini.models"]
                if m.startswith(("eagle_mini.measure", "eagle_mini.experiments", "eagle_mini.tooling"))}


CLI_MODULES = sorted((PACKAGE / "cli").glob("*.py"))


def test_the_cli_defines_no_decoding_helper():
    assert {p.stem for p in CLI_MODULES} >= {"__init__", "common", "decode", "heads"}
    for path in CLI_MODULES:
        tree = ast.parse(path.read_text())
        calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                 for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not calls & {"forward", "generate", "generate_vanilla", "draft", "verify_greedy"}, path
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "run_method"
                       for n in tree.body), path


def test_only_the_cli_imports_argparse():
    users = [name for name, path in modules().items()
             if not name.startswith("eagle_mini.cli") and "argparse" in imported_names(path)]
    assert users == []


def imported_names(path: pathlib.Path) -> set[str]:
    """Every module name a file imports (standard library included), anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_public_api_is_short_and_complete():
    for name in ("load_target", "default_head", "generate", "generate_vanilla", "DynamicTree",
                 "EagleDecoder", "EagleMiniError"):
        assert name in eagle_mini.__all__ and hasattr(eagle_mini, name)
    assert len(eagle_mini.__all__) <= 15


MAX_FUNCTION_LINES = 60


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function longer than `limit` lines, from its `def` line to the last
    line of its body (decorators excluded), nested functions and methods included."""
    import ast as _ast
    return [(n.name, n.end_lineno - n.lineno + 1) for n in _ast.walk(_ast.parse(source))
            if isinstance(n, (_ast.FunctionDef, _ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_in_the_package_is_longer_than_60_lines():
    import pathlib as _pathlib
    package = _pathlib.Path(eagle_mini.__file__).parent
    found = [f"{path.relative_to(package.parent).as_posix()}: {name} ({n} lines)"
             for path in sorted(package.rglob("*.py"))
             for name, n in long_functions(path.read_text())]
    assert not found, (f"split these into named helpers (at most {MAX_FUNCTION_LINES} lines "
                       "each):\n" + "\n".join(found))


def test_the_length_check_finds_a_planted_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    planted = f"@decorator\ndef short():\n    pass\n\n\ndef too_long():\n{body}\n"
    assert long_functions(planted) == [("too_long", 61)]
    assert long_functions(planted, limit=61) == []
