"""The ``toolguard replay`` command in a test app, invoked as a user would."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner, Result

from toolguard.commands._replay import register


def make_app() -> typer.Typer:
    """A Typer app with only the ``replay`` command."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def root() -> None:
        """toolguard (test app)."""

    register(app)
    return app


def replay(*args: str | Path) -> Result:
    """Run ``toolguard replay ARGS``; never a traceback: any exception is the SystemExit that
    carries the exit code."""
    result = CliRunner().invoke(make_app(), ["replay", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result
