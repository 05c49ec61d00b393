"""The package's layout: no module over ~500 lines of code, so each stage of the
call path and each concern of the CLI, the stores and the proxy reads on its own.

A module's docstring does not count: the Redis store's key layout, the loader's pipeline and
the engine's call path are documented there on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "toolguard"
MAX_LINES = 500


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
