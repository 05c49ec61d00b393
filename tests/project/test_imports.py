"""The package's import structure: no import circles, and heavy packages load only when used.

``import toolguard`` must stay light (≤ 8x a bare ``python -c pass``, measured in
``benchmarks/``): pydantic, pydantic-settings, jsonschema, typer, rich and asyncio load when a
guard, a policy file, the environment, a CLI command or ``acall`` needs them. The timing lives
in the benchmarks; these tests pin what is loaded, which is what the timing follows from.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "toolguard"
HEAVY = ("pydantic", "pydantic_settings", "jsonschema", "jsonschema_rs", "referencing",
         "typer", "rich", "asyncio", "tomllib")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_target(package: str, node: ast.ImportFrom) -> str:
    """The module ``from ... import`` reads from, in a module of ``package`` (relative
    imports resolved)."""
    if not node.level:
        return node.module or ""
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def _imports(path: Path, modules: set[str], *, type_checking: bool = False) -> set[str]:
    """The package modules ``path`` imports at run time: at module level or inside a function
    (a deferred import is still an edge of a circle); under ``if TYPE_CHECKING:`` too when
    ``type_checking`` is true (``tests/project/test_layout.py``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and not type_checking and _is_type_checking(node):
            for other in node.orelse:
                visit(other)
            return
        if isinstance(node, ast.ImportFrom):
            target = import_target(package, node)
            submodules = {f"{target}.{alias.name}" for alias in node.names} & modules
            if len(submodules) < len(node.names) and target in modules:
                found.add(target)  # a name defined in the module itself
            found.update(submodules)  # ``from . import _x``: the submodule, not the package
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(name)
    return found


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """Module → the package modules it imports (see :func:`_imports`). A submodule's import
    also runs its package's ``__init__``, which is not counted: every module would otherwise
    sit on a circle through ``toolguard/__init__.py``."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): _imports(p, modules, type_checking=type_checking) for p in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert graph["toolguard.engine._engine"], "the graph reader found no imports: it is broken"
    assert circles(graph) == []


def test_the_circle_finder_finds_the_circles_this_package_used_to_have() -> None:
    # _core -> _resolve -> _decorators -> (deferred) _engine -> _core, and
    # policy._loader <-> (deferred) _settings: the two import circles
    graph = {"toolguard.engine._core": {"toolguard.tools._resolve"},
             "toolguard.tools._resolve": {"toolguard.tools._decorators"},
             "toolguard.tools._decorators": {"toolguard.engine._engine"},
             "toolguard.engine._engine": {"toolguard.engine._core", "toolguard._errors"},
             "toolguard._errors": set(),
             "toolguard.policy._loader": {"toolguard.policy._settings"},
             "toolguard.policy._settings": {"toolguard.policy._loader"}}
    assert sorted(map(set, circles(graph)), key=sorted) == sorted([
        {"toolguard.engine._core", "toolguard.tools._decorators", "toolguard.engine._engine",
            "toolguard.tools._resolve"},
        {"toolguard.policy._loader", "toolguard.policy._settings"},
    ], key=sorted)


def test_a_deferred_import_counts_and_a_type_checking_one_counts_when_asked() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import X\n"
              "def f():\n    from ._c import Y\n")
    modules = {"toolguard._b", "toolguard._c", "toolguard._probe_for_test"}
    path = PACKAGE / "_probe_for_test.py"
    try:
        path.write_text(source, encoding="utf-8")
        found = _imports(path, modules)
        found_with_types = _imports(path, modules, type_checking=True)
    finally:
        path.unlink()
    assert found == {"toolguard._c"}
    assert found_with_types == {"toolguard._b", "toolguard._c"}


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.split()


@pytest.mark.parametrize("code", [
    "import toolguard",
    "from toolguard import Guard, Task, ToolResult, mutating, readonly, requires_approval",
    "import toolguard.stores",
])
def test_importing_toolguard_loads_no_heavy_package(code: str) -> None:
    assert _loaded_after(code) == []


def test_heavy_packages_load_when_used() -> None:
    loaded = _loaded_after(
        "import toolguard\n"
        "@toolguard.readonly\n"
        "def f(x: int) -> int:\n    return x\n"
        "toolguard.Guard(tools=[f]).task('t').call('f', {'x': 1})")
    assert "pydantic" in loaded and "jsonschema_rs" in loaded  # a guard with a typed tool
    assert not {"jsonschema", "pydantic_settings", "typer", "rich", "asyncio"} & set(loaded)
    loaded = _loaded_after("import toolguard\ntoolguard.load_policy_dict({})")
    assert "jsonschema" in loaded  # policy validation


def test_the_cli_help_loads_no_policy_machinery() -> None:
    loaded = _loaded_after(
        "import sys\nsys.argv = ['toolguard', '--help']\nfrom toolguard.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass")
    assert "typer" in loaded
    assert not {"pydantic", "pydantic_settings", "jsonschema", "asyncio"} & set(loaded)


def test_the_cli_help_does_not_read_the_package_metadata() -> None:
    """``--help`` never scans the installed distributions (``--version`` prints
    ``toolguard.__version__``, which the distribution's metadata is built from)."""
    probe = ("import sys\nsys.argv = ['toolguard', '--help']\nfrom toolguard.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print('importlib.metadata' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stderr.strip() == "False"


def test_without_a_jsonschema_rs_wheel_pure_python_jsonschema_decides() -> None:
    # jsonschema-rs is a dependency, but a platform without a wheel must still work: the
    # import fails there, and jsonschema decides validity (with the memo of valid arguments).
    probe = """
import sys

class NoWheel:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "jsonschema_rs":
            raise ImportError("no jsonschema-rs wheel for this platform")

sys.meta_path.insert(0, NoWheel())
import toolguard
from toolguard.tools._schema import fast_validators

@toolguard.readonly
def f(x: int) -> int:
    return x

task = toolguard.Guard(tools=[f]).task("t")
results = [task.call("f", {"x": 1}), task.call("f", '{"x": 2}'), task.call("f", {"x": "a"})]
print(fast_validators(), "jsonschema_rs" in sys.modules, "jsonschema" in sys.modules)
for r in results:
    print(r.decision, r.content)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "None False True"
    assert lines[1:] == ["allow 1", "allow 2",
                         "invalid [toolguard] Invalid arguments for f, not executed: "
                         "args.x: 'a' is not of type 'integer'. Fix the arguments and call "
                         "again."]


def test_the_redis_store_without_redis_py_names_the_extra_to_install() -> None:
    # The store is split over three modules (the store, its Lua scripts, its wire helpers):
    # whichever loads first, a missing redis-py is one ImportError naming the extra.
    probe = """
import sys
sys.modules["redis"] = None  # as if redis-py were not installed
try:
    import toolguard.stores.redis
except ImportError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == (
        "toolguard.stores.RedisStore needs redis-py: pip install 'agent-toolguard[redis]'")
