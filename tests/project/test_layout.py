"""The package's layout: no module over ~500 lines of code, so each stage of the
call path and each concern of the CLI, the stores and the proxy reads on its own; at most a
dozen modules directly in ``toolguard/`` (the rest in a subpackage per concern, each saying in
its docstring what it owns and what it may import); no import circle at all, not even one
that only the type checker follows (``if TYPE_CHECKING:``): a module that needs another's
type alone takes a protocol instead; and no function bound into a class by assignment
(``_begin = _admit._begin`` in a class body): a method is defined where its class is, and a
class that hands work to a stage calls the stage's function, so a reader (and a tool)
follows a call from the method to the function it runs.

A module's docstring does not count: the Redis store's key layout, the loader's pipeline and
the engine's call path are documented there on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .test_imports import circles, import_graph, import_target, module_name

PACKAGE = Path(__file__).resolve().parents[2] / "toolguard"
MAX_LINES = 500
MAX_ROOT_MODULES = 12

NOT_YET_MOVED: frozenset[str] = frozenset()


def code_lines(path: Path) -> int:
    """Lines of ``path`` after its module docstring (all of them when it has none)."""
    text = path.read_text(encoding="utf-8")
    body = ast.parse(text).body
    first = body[0] if body else None
    docstring_end = 0
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        docstring_end = first.end_lineno or 0
    return len(text.splitlines()) - docstring_end


def test_no_module_is_over_500_lines_of_code() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50, "found too few modules: the package path is wrong"
    over = {str(p.relative_to(PACKAGE)): n for p in modules if (n := code_lines(p)) > MAX_LINES}
    assert over == {}


def test_code_lines_skips_the_docstring_only(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""Doc\n\nmore doc\n"""\n\nx = 1\ny = 2\n', encoding="utf-8")
    assert code_lines(path) == 3
    path.write_text("x = 1\n'''not a docstring'''\n", encoding="utf-8")
    assert code_lines(path) == 2


def test_at_most_a_dozen_modules_sit_directly_in_the_package() -> None:
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in NOT_YET_MOVED)
    assert "__init__" in root, "found no package root: the package path is wrong"
    assert len(root) <= MAX_ROOT_MODULES, root


def test_every_subpackage_says_what_it_owns() -> None:
    packages = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
    assert packages, "found no subpackage: the package path is wrong"
    missing = [p.name for p in packages
               if not ast.get_docstring(ast.parse((p / "__init__.py").read_text("utf-8")))]
    assert missing == []


def test_no_import_circle_even_one_only_the_type_checker_follows() -> None:
    graph = import_graph(type_checking=True)
    run_time = import_graph()
    assert any(graph[m] - run_time[m] for m in graph), (
        "found no import under TYPE_CHECKING: the graph reader is broken")
    assert circles(graph) == []


Bound = tuple[str, str | None]  # a local name's module, and the name in it (None: the module)


def _bindings(name: str, tree: ast.Module, package: str, modules: set[str]
              ) -> dict[str, Bound]:
    """What each name of module ``name`` is bound to by its imports (anywhere in it,
    ``TYPE_CHECKING`` and function bodies included) and its top-level functions."""
    bound: dict[str, Bound] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.partition(".")[0]
                bound[local] = (alias.name if alias.asname else local, None)
        elif isinstance(node, ast.ImportFrom):
            target = import_target(package, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                bound[alias.asname or alias.name] = (
                    (submodule, None) if submodule in modules else (target, alias.name))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            bound[node.name] = (name, node.name)
    return bound


def _class_assignments(body: list[ast.stmt]) -> list[ast.Assign | ast.AnnAssign]:
    """The assignments of a class body, also those under ``if`` / ``try`` / ``with``; not
    those inside its methods or nested classes."""
    found: list[ast.Assign | ast.AnnAssign] = []
    for node in body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            found.append(node)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, [])
                found += _class_assignments(
                    [s for h in inner for s in h.body] if field == "handlers" else inner)
    return found


def bound_functions(sources: dict[str, str], packages: set[str]) -> list[str]:
    """``module:line: statement`` for every class-body assignment, in ``sources`` (module
    name -> source), whose value is a module-level function of one of them: ``name = func``,
    ``name = module.func`` (whatever the import's spelling, re-exports followed), or either
    wrapped in ``staticmethod`` / ``classmethod``. ``packages``: the names that are
    packages (an ``__init__``), for relative imports."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    modules = set(trees)
    bindings = {name: _bindings(name, tree, name if name in packages else
                                name.rpartition(".")[0], modules)
                for name, tree in trees.items()}

    def is_function(module: str, attr: str, hops: int = 0) -> bool:
        if module not in bindings or hops > len(bindings):
            return False
        target = bindings[module].get(attr)
        if target == (module, attr):  # defined there
            return True
        return target is not None and target[1] is not None and is_function(
            target[0], target[1], hops + 1)

    def module_of(node: ast.expr, module: str) -> str | None:
        if isinstance(node, ast.Name):
            target = bindings[module].get(node.id)
            return target[0] if target is not None and target[1] is None else None
        if isinstance(node, ast.Attribute):
            base = module_of(node.value, module)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def binds_function(node: ast.expr, module: str) -> bool:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("staticmethod", "classmethod") and len(node.args) == 1):
            return binds_function(node.args[0], module)
        if isinstance(node, ast.Tuple):
            return any(binds_function(item, module) for item in node.elts)
        if isinstance(node, ast.Name):
            target = bindings[module].get(node.id)
            return target is not None and target[1] is not None and is_function(
                target[0], target[1])
        if isinstance(node, ast.Attribute):
            base = module_of(node.value, module)
            return base is not None and is_function(base, node.attr)
        return False

    return [f"{name}:{stmt.lineno}: {ast.unparse(stmt)}"
            for name, tree in trees.items()
            for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
            for stmt in _class_assignments(cls.body)
            if stmt.value is not None and binds_function(stmt.value, name)]


def test_no_function_is_bound_into_a_class_by_assignment() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in paths}
    packages = {module_name(p) for p in paths if p.name == "__init__.py"}
    assert "toolguard.engine" in packages, "found no engine package: the package path is wrong"
    assert bound_functions(sources, packages) == []


def test_the_binding_finder_finds_every_spelling_of_a_bound_function() -> None:
    stage = "def _begin(task):\n    return task\n"
    engine = "from ._stage import _begin\n"  # a package re-exporting a stage's function
    task = """from . import _stage
from ._stage import _begin as begin
import toolguard.engine._stage as stage
import toolguard.engine._stage
from toolguard.engine import _begin as reexported


def helper(x):
    return x


class Task:
    _begin = _stage._begin
    begin = begin
    helper = helper
    other = stage._begin
    dotted = toolguard.engine._stage._begin
    again = reexported
    wrapped = staticmethod(helper)
    pair = (helper, 1)
    if True:
        nested: object = helper
    __eq__ = object.__eq__
    limit = 3
    name = _stage.__name__

    def method(self):
        local = helper
        return local(self)
"""
    found = bound_functions({"toolguard.engine": engine, "toolguard.engine._stage": stage,
                             "toolguard.engine._task": task}, {"toolguard.engine"})
    assert [line.partition(": ")[2] for line in found] == [
        "_begin = _stage._begin", "begin = begin", "helper = helper", "other = stage._begin",
        "dotted = toolguard.engine._stage._begin", "again = reexported",
        "wrapped = staticmethod(helper)", "pair = (helper, 1)", "nested: object = helper"]
    assert found[0].startswith("toolguard.engine._task:13: ")
