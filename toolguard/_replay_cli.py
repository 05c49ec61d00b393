"""``toolguard replay``: what a policy would have done to recorded agent runs.

::

    toolguard replay PATH... [--policy FILE | --env NAME] [--tools TOOLS.json]
                     [--format table|json|jsonl] [--verbose] [--fail-on halt|block|never]

No tool is executed: for each call the guard lets run, the recorded result is fed back (see
:mod:`toolguard.replay`). Exit codes: 0 the replay ran; 1 with ``--fail-on`` when some run
reached that decision (``block`` counts a halt too); 2 for unreadable input, an invalid policy
or tool file, or bad options, each problem on stderr naming the file (and the line, for JSONL).
A bad line or run is reported and the rest still replays, and the exit code is still 2. Never
a traceback.

Added to the ``toolguard`` app by :func:`register`.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from ._errors import PolicyError
from ._types import Decision

if TYPE_CHECKING:  # the replay readers and the policy loader load when the command runs
    from rich.console import Console

    from ._decorators import ToolSpec
    from ._policy import Policy
    from .replay import ReplayInputError, ReplayReport, Run

__all__ = ["FailOn", "OutputFormat", "register", "replay"]

FAILED: int = 1
BAD_INPUT: int = 2
_PROGRESS_MIN_RUNS = 20  # fewer runs replay in a blink: no progress bar
_PIPE_WIDTH = 160


class OutputFormat(str, enum.Enum):
    """``--format``: a rich table, one JSON document, or one JSON object per step."""

    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"


class FailOn(str, enum.Enum):
    """``--fail-on``: the decision that makes the command exit 1 (``block``: block or halt)."""

    HALT = "halt"
    BLOCK = "block"
    NEVER = "never"


def register(app: typer.Typer) -> None:
    """Add the ``replay`` command to ``app``."""
    app.command("replay")(replay)


def replay(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Transcripts: toolguard trace JSONL, OpenAI Chat Completions or "
                            "Anthropic Messages JSON (detected), or directories of them.",
                       show_default=False),
    ],
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The policy file (TOML).", dir_okay=False),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option("--env", help="Load <TOOLGUARD_POLICY_DIR or policies>/NAME.toml."),
    ] = None,
    tools: Annotated[
        Path | None,
        typer.Option("--tools", help="Tool definitions (OpenAI function tools, JSON) whose "
                                     "schemas validate the recorded arguments.",
                     dir_okay=False),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="Output format.")
    ] = OutputFormat.TABLE,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Table: list every non-allow step.")
    ] = False,
    fail_on: Annotated[
        FailOn,
        typer.Option("--fail-on", help="Exit 1 if any run reached this decision "
                                       "(block: a block or a halt)."),
    ] = FailOn.NEVER,
) -> None:
    """Replay recorded agent runs through a policy, executing no tool.

    Reports every decision the policy would have taken (warn, cached, block, review, invalid,
    halt)."""
    from .replay import read_runs
    from .replay._report import jsonl_lines, render_table, to_json_text

    if policy is not None and env is not None:
        _fail("give --policy FILE or --env NAME, not both")
    guard_policy = _load_policy(policy, env)
    specs = _load_tools(tools)
    runs, problems = read_runs(paths)
    for problem in problems:
        _error(problem)
    if not runs:
        _fail("no runs to replay")

    report = _replay(runs, guard_policy, specs)
    for problem in report.problems:  # runs that could not be replayed (bad header effects)
        _error(problem)
    report.problems[:0] = problems  # the output lists every problem, reading ones first
    if output_format is OutputFormat.JSON:
        typer.echo(to_json_text(report))
    elif output_format is OutputFormat.JSONL:
        for line in jsonl_lines(report):
            typer.echo(line)
    else:
        render_table(report, _stdout(), verbose=verbose)

    if report.problems:
        raise typer.Exit(BAD_INPUT)
    if _failed(report, fail_on):
        raise typer.Exit(FAILED)


def _replay(runs: Sequence[Run], policy: Policy, specs: Sequence[ToolSpec]) -> ReplayReport:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .replay import replay_runs

    if len(runs) < _PROGRESS_MIN_RUNS or not sys.stderr.isatty():
        return replay_runs(runs, policy, tools=specs)
    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        bar = progress.add_task("replay", total=len(runs))
        return replay_runs(runs, policy, tools=specs,
                           on_run=lambda _: progress.advance(bar))


def _failed(report: ReplayReport, fail_on: FailOn) -> bool:
    if fail_on is FailOn.NEVER:
        return False
    if report.runs_with(Decision.HALT):
        return True
    return fail_on is FailOn.BLOCK and bool(report.runs_with(Decision.BLOCK))


def _load_policy(file: Path | None, env: str | None) -> Policy:
    """The policy to replay with; exits 2 listing every problem if it is invalid."""
    from rich.text import Text

    from ._policy_loader import load_policy, policy_from_env

    try:
        if file is not None:
            return load_policy(file)
        if env is not None:
            environ = {k: v for k, v in os.environ.items() if k.upper() != "TOOLGUARD_POLICY"}
            return policy_from_env({**environ, "TOOLGUARD_ENV": env})
        return policy_from_env()
    except PolicyError as error:
        for problem in error.problems:
            _stderr().print(Text(f"toolguard replay: {problem}", style="red"))
        _fail(f"invalid policy ({len(error.problems)} problem(s))")


def _load_tools(path: Path | None) -> list[ToolSpec]:
    from .replay import ReplayInputError, read_tool_definitions

    if path is None:
        return []
    try:
        return read_tool_definitions(path)
    except ReplayInputError as error:
        _error(error)
        raise typer.Exit(BAD_INPUT) from None


def _stdout() -> Console:
    from rich.console import Console

    console = Console(highlight=False, markup=False)  # data is printed as written
    # A pipe or a CI log has no width limit: do not squeeze the table into 80 columns.
    return console if console.is_terminal else Console(highlight=False, markup=False,
                                                        width=_PIPE_WIDTH)


def _stderr() -> Console:
    from rich.console import Console

    # Built per call so that output goes to the current sys.stderr (tests swap it).
    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


def _error(problem: ReplayInputError) -> None:
    from rich.text import Text

    _stderr().print(Text(f"toolguard replay: {problem}", style="red"))


def _fail(message: str) -> NoReturn:
    from rich.text import Text

    _stderr().print(Text(f"toolguard replay: error: {message}", style="bold red"))
    raise typer.Exit(BAD_INPUT)
