"""The ``toolguard`` command line.

``toolguard check FILE...``
    Validate policy files: ``ok`` per valid file and exit 0, else every problem as
    ``file:line:col: key.path: message`` and exit 1.
``toolguard --version``
    The installed package's version.
``toolguard schema``
    Print the JSON Schema of a policy file (for editors and CI).
``toolguard explain [FILE] --tool NAME [--env ENV]``
    The effective settings of one tool and, for each value, where it came from: ``built-in``,
    ``decorator``, a file, or ``env TOOLGUARD_...``. Without FILE or ``--env`` the policy is the
    one the environment selects (``TOOLGUARD_POLICY`` / ``TOOLGUARD_ENV``).

Exit codes: 0 success, 1 invalid policy (``check``, where a missing file is one more problem),
2 bad input (an invalid policy given to ``explain``, bad options), never a traceback.

Every command is a small function on the module-level :data:`app`. A command written in
another module adds itself to the same app (``@app.command()`` on import, or a
``register(app)`` function called before :func:`main` runs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._errors import PolicyError
from .commands._common import fail as _fail
from .commands._common import load_cli_policy as _load
from .tools._decorators import ToolSpec

if TYPE_CHECKING:
    from rich.console import Console


# Each command imports what it needs (the policy loader, pydantic-settings, the replay
# readers) when it runs: ``toolguard --help`` loads typer, rich and the commands' signatures
# only.

__all__ = ["app", "main"]

INVALID = 1

app = typer.Typer(
    name="toolguard",
    help="Guard agents' tool calls: replay recorded runs through a policy, check and explain "
         "policies, guard coding agents through their hooks, serve MCP tools through the guard.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: typer's rich help imports rich's markdown renderer and doubles the
    # start-up of `toolguard --help` (benchmarks/README.md, start-up); the commands' own
    # output (tables, colours) is still rich
    rich_markup_mode=None,
)


def _print_version(given: bool) -> None:
    if given:
        from . import __version__  # the distribution's version too (pyproject.toml reads it)

        typer.echo(f"toolguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", help="Print the package version and exit.",
                           callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """Guard agents' tool calls: replay, policies, coding-agent hooks, the MCP proxy."""


def _stdout() -> Console:
    from .commands._tables import stdout_console

    return stdout_console()  # built per call: output goes to the current sys.stdout


@app.command()
def check(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Policy files (TOML). A missing file is a problem like any other.",
            show_default=False
        ),
    ],
) -> None:
    """Validate policy files, and each under the environment's TOOLGUARD_* overrides; exit 1
    listing every problem if any is invalid."""
    from rich.text import Text

    from .policy._loader import check_policy_files

    out = _stdout()
    failed = False
    shown: set[str] = set()  # a parent's problem is printed once, however many extend it
    for file in files:
        problems = check_policy_files([file])
        if not problems:
            out.print(Text.assemble((str(file), "bold"), ": ", ("ok", "green")))
            continue
        failed = True
        for problem in problems:
            if str(problem) not in shown:
                shown.add(str(problem))
                out.print(Text(str(problem), style="red"))
        if all(p.source.startswith("env ") for p in problems):  # PolicyProblem.source
            out.print(Text.assemble((str(file), "bold"), ": ", (
                "invalid under this environment's TOOLGUARD_* overrides", "red")))
        elif all(Path(p.source) != file for p in problems):  # only its extends chain failed
            out.print(Text.assemble((str(file), "bold"), ": ",
                                    ("invalid (a file it extends has problems)", "red")))
    if failed:
        raise typer.Exit(INVALID)


@app.command()
def schema() -> None:
    """Print the JSON Schema of a policy file."""
    from .policy._loader import policy_schema

    typer.echo(json.dumps(policy_schema(), indent=2, ensure_ascii=False))


@app.command()
def explain(
    tool: Annotated[str, typer.Option("--tool", help="The tool name the model calls.")],
    file: Annotated[
        Path | None,
        typer.Argument(help="A policy file, or a shipped policy's name (default: the one "
                                 "the environment selects)."),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option("--env", help="Load <TOOLGUARD_POLICY_DIR or policies>/ENV.toml."),
    ] = None,
) -> None:
    """Show a tool's effective settings and where each value came from."""
    from rich.table import Table
    from rich.text import Text

    from .policy._model import BudgetPolicy
    from .tools._resolve import resolve_tool, spell_env_tools

    if file is not None and env is not None:
        _fail("give a policy FILE or --env, not both")
    policy = _load(file, env)
    try:  # an override like TOOLGUARD_TOOLS__SENDEMAIL__… reaches --tool sendEmail, as in a Guard
        policy = spell_env_tools(policy, [tool])
        settings = resolve_tool(policy, ToolSpec(name=tool, func=_undecorated))
    except PolicyError as exc:
        _fail(str(exc))

    from .commands._tables import FOLD_MIN_WIDTH, print_table
    from .replay._report import printable  # a policy's text may hold control characters

    out = _stdout()
    if tool not in policy.tools:  # nothing in the policy names it: default_effect decides
        effect = policy.default_effect
        what = ("its calls are refused unless a decorator classifies the function"
                if effect == "deny" else f"it is {effect} unless a decorator classifies it")
        out.print(Text(printable(
            f"{tool} is not declared in the policy (no [tools.{tool}] section): "
            f"default_effect = \"{effect}\" ({policy.source_of('default_effect')}) decides it; "
            f"{what}."), style="yellow"))
    table = Table(title=printable(f"{tool}: effective settings"), title_justify="left")
    table.add_column("setting", no_wrap=True)  # key names stay whole, as typed in a policy
    for column in ("value", "source"):
        table.add_column(column, overflow="fold", min_width=FOLD_MIN_WIDTH)
    for item in dataclasses.fields(settings):
        if item.name in {"name", "sources"}:
            continue
        source = settings.sources.get(item.name, settings.sources.get("effect", "built-in"))
        value = getattr(settings, item.name)
        shown = ("none (the tool's effect)" if item.name == "shell" and value is None
                 else "0 (off)" if item.name in _OFF_AT_ZERO and value == 0 else _show(value))
        table.add_row(item.name, printable(shown), printable(source))
    table.add_section()
    table.add_row("mode", str(policy.mode), policy.source_of("mode"))
    table.add_row("max_args_bytes", _show(policy.max_args_bytes),
                  policy.source_of("max_args_bytes"))
    table.add_row("require_task", _show(policy.require_task), policy.source_of("require_task"))
    for name in BudgetPolicy.model_fields:
        key = f"budget.{name}"
        table.add_row(key, _show(getattr(policy.budget, name)), policy.source_of(key))
    print_table(out, table)
    files = ", ".join(policy.sources) or "none (built-in defaults)"
    out.print(Text(f"policy files: {files}"))
    out.print(Text(
        "Decorator arguments (@requires_approval, @mutating(...)) are not visible here: this "
        "command does not import your tools. In code, guard.settings(NAME) shows the full "
        "resolution, decorator included.", style="dim"))




@app.command()
def policies() -> None:
    """List the policies the package ships: load one by name (tg.load_policy("default"),
    --policy default, extends = "default")."""
    from rich.text import Text

    from .policy._shipped import shipped_policies

    out = _stdout()
    shipped = shipped_policies()
    width = max(map(len, shipped), default=0)
    for name, path in shipped.items():
        out.print(Text.assemble((name.ljust(width), "bold"), "  ", _summary(path)))
    out.print(Text(f"(files: {', '.join(sorted({str(p.parent) for p in shipped.values()}))})",
                   style="dim"))


def _summary(path: Path) -> str:
    """A policy file's first sentence, from its leading comment (after the ``#:schema``
    line)."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#:"):
            continue
        if not line.startswith("#") or not line.strip("# "):
            break
        words += line.lstrip("#").split()
    text = " ".join(words)
    end = text.find(". ")
    return text if end < 0 else text[:end + 1]


def _register_commands() -> None:
    from .commands._replay import register
    from .commands._tune import register as register_tune
    from .hooks._cli import register as register_hooks
    from .mcp._proxy import register as register_mcp_proxy

    register(app)
    register_mcp_proxy(app)
    register_tune(app)
    register_hooks(app)


_register_commands()


def main() -> None:
    """Entry point of the ``toolguard`` script (and of ``python -m toolguard.cli``)."""
    for stream in (sys.stdout, sys.stderr):
        # A transcript may hold text the terminal cannot encode (a lone surrogate escape,
        # "\ud800", is valid JSON): print it escaped instead of failing mid-report.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
    except OSError as exc:  # the output cannot be written (a full disk, a closed terminal):
        # every input was read already, and each reader reports its own OSErrors
        where = f" ({exc.filename})" if exc.filename else " (writing the output)"
        with contextlib.suppress(OSError):
            sys.stderr.write(f"toolguard: error: {exc.strerror or exc}{where}\n")
        raise SystemExit(2) from None


_OFF_AT_ZERO = frozenset({"stagnation_warn_at", "stagnation_block_at", "max_progress_resets"})


def _show(value: object) -> str:
    """A setting's value for the table."""
    if value is None:
        return "none (no limit)"
    from .policy._model import LadderThresholds

    if isinstance(value, LadderThresholds):
        return f"warn_at {value.warn_at}, block_at {value.block_at}, halt_at {value.halt_at}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_show_model(v)}" for k, v in value.items()) or "none"
    if isinstance(value, tuple):
        return "; ".join(_show_model(v) for v in value) or "none"
    return str(value)


def _show_model(value: object) -> str:
    dump = getattr(value, "model_dump", None)
    if dump is None:
        return str(value)
    fields = dump(mode="json", exclude_defaults=True)
    return json.dumps(fields, ensure_ascii=False)


def _undecorated(*args: object, **kwargs: object) -> None:
    """Stands for the tool's function: ``explain`` sees no decorator arguments."""


if __name__ == "__main__":
    main()
