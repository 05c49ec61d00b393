"""``toolguard replay``: what a policy would have done to recorded agent runs.

::

    toolguard replay PATH... [--policy FILE | --env NAME] [--tools TOOLS.json]
                     [--input-format NAME] [--allow-empty]
                     [--format table|json|jsonl] [--verbose] [--only-flagged]
                     [--fail-on halt|block|never] [--html REPORT.html]
    toolguard replay --list-formats

No tool is executed: for each call the guard lets run, the recorded result is fed back (see
:mod:`toolguard.replay`). Files are read and replayed one at a time, so memory holds one
file's runs and the report, not the corpus; on a terminal, big inputs get a progress bar per
file on stderr. Exit codes: 0 the replay ran; 1 with ``--fail-on`` when some run reached that
decision (``block`` counts a halt too); 2 for unreadable or unrecognised input, a file without
any tool call (unless ``--allow-empty``), an invalid policy or tool file, or bad options, each
problem on stderr naming the file (and the line, for JSONL) and the format it was read as. A
bad line, run or file is reported and the rest still replays, and the exit code is still 2.
Records a reader does not use are counted and noted once per kind on stderr (no exit code).
A policy ``mode`` other than ``enforce`` (replay judges as ``enforce``) and a ``--tools`` file
that defines none of the recordings' tools are noted once each.
Never a traceback.

Added to the ``toolguard`` app by :func:`register`.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from ._errors import PolicyError
from ._types import Decision

if TYPE_CHECKING:  # rich, the replay readers and the policy loader load when a command runs
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from ._decorators import ToolSpec
    from ._policy import Policy
    from .replay import (
        ReplayInputError,
        ReplayNote,
        ReplayReport,
        Run,
        RunReport,
    )


__all__ = ["FailOn", "OutputFormat", "register", "replay"]

FAILED: int = 1
BAD_INPUT: int = 2
_PROGRESS_MIN_BYTES = 1 << 20  # less input replays in a blink: no progress bar
_PROGRESS_MIN_FILES = 20


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
        list[Path] | None,
        typer.Argument(help="Recorded runs (the format is detected per file; see "
                            "--list-formats), or directories of them.",
                       show_default=False),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The policy file (TOML), or a shipped policy's "
                                       "name (toolguard policies).", dir_okay=False),
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
    only_flagged: Annotated[
        bool, typer.Option("--only-flagged",
                           help="Table: list only the runs with a decision other than allow "
                                "(the totals still count every run).")
    ] = False,
    fail_on: Annotated[
        FailOn,
        typer.Option("--fail-on", help="Exit 1 if any run reached this decision "
                                       "(block: a block or a halt)."),
    ] = FailOn.NEVER,
    input_format: Annotated[
        str | None,
        typer.Option("--input-format", metavar="NAME",
                     help="Read every file in this format instead of detecting it "
                          "(see --list-formats)."),
    ] = None,
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty",
                           help="Input without tool calls is no problem: a file without any "
                                "(or empty), a directory without recordings.")
    ] = False,
    list_formats: Annotated[
        bool, typer.Option("--list-formats", help="List the input formats and exit.")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", metavar="REPORT.html", dir_okay=False,
                     help="Also write the report as one self-contained HTML page (a "
                          "timeline of each run's calls; click a call for its details)."),
    ] = None,
) -> None:
    """Replay recorded agent runs through a policy, executing no tool.

    Reports every decision the policy would have taken (warn, cached, block, review, invalid,
    halt)."""
    from ._tables import stdout_console
    from .replay import readers
    from .replay._registry import reader_named
    from .replay._report import jsonl_lines, render_table, to_json_text

    if list_formats:
        _print_formats(stdout_console())
        return
    if not paths:
        _fail("give the recorded runs to replay: files or directories (formats: "
              "toolguard replay --list-formats)")
    if policy is not None and env is not None:
        _fail("give --policy FILE or --env NAME, not both")
    if input_format is not None and reader_named(input_format) is None:
        _fail(f"unknown --input-format {input_format!r}; one of: "
              f"{', '.join(r.name for r in readers())}")
    guard_policy = _load_policy(policy, env)
    specs = _load_tools(tools)
    report = _replay(paths, guard_policy, specs, input_format, allow_empty,
                     details=html is not None)
    for note in _after_notes(report, guard_policy, tools, specs):
        _note(note)
        report.notes.append(note)
    if not report.runs and not (allow_empty and not report.problems):
        _fail("no runs to replay")
    if output_format is OutputFormat.JSON:
        typer.echo(to_json_text(report))
    elif output_format is OutputFormat.JSONL:
        for line in jsonl_lines(report):
            typer.echo(line)
    else:
        render_table(report, stdout_console(), verbose=verbose, only_flagged=only_flagged)
    if html is not None:
        _write_html(report, html)

    if report.problems:
        raise typer.Exit(BAD_INPUT)
    if _failed(report, fail_on):
        raise typer.Exit(FAILED)


def _write_html(report: ReplayReport, path: Path) -> None:
    """Write the HTML report to ``path`` (through a temporary file beside it, so a failed
    write leaves no half page); exits 2 if it cannot be written."""
    from .replay._html import write_html

    temporary = path.with_name(f".{path.name}.tmp")
    try:
        try:
            with temporary.open("w", encoding="utf-8") as out:
                write_html(report, out)
            temporary.replace(path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        _fail(f"cannot write {path}: {exc.strerror or exc}")


def _replay(paths: Sequence[Path], policy: Policy, specs: Sequence[ToolSpec],
            input_format: str | None, allow_empty: bool, *, details: bool = False
            ) -> ReplayReport:
    """Read and replay file by file; each file's problems and notes go to stderr as soon as
    it is done, and into the report, reading problems before replay ones."""
    from .replay import ReplayReport, UniqueIds, iter_files, open_file, replay_runs

    report = ReplayReport()
    files = list(iter_files(paths, report.problems,
                            notes=report.notes if allow_empty else None))
    for problem in report.problems:  # directories without any transcript
        _error(problem)
    for note in report.notes:
        _note(note)
    unique = UniqueIds()
    with _FileProgress(files) as progress:
        for path in files:
            opened = open_file(path, input_format=input_format, allow_empty=allow_empty)
            runs = progress.track(path, unique(opened.runs))
            part = replay_runs(runs, policy, tools=specs, on_run=progress.advance,
                               details=details)
            progress.done(path)
            report.runs.extend(part.runs)
            for problem in (*opened.problems, *part.problems):
                _error(problem)
                report.problems.append(problem)
            for note in opened.notes:
                _note(note)
                report.notes.append(note)
    return report


def _after_notes(report: ReplayReport, policy: Policy, tools: Path | None,
                 specs: Sequence[ToolSpec]) -> list[ReplayNote]:
    """Notes on the replay as a whole, once each: a policy ``mode`` replay does not apply
    (replay judges as ``enforce``, see :mod:`toolguard.replay`), and a ``--tools`` file that
    defines none of the tools the recordings call (then every call is ``invalid``)."""
    from ._types import Mode
    from .replay import ReplayNote

    notes = []
    if policy.mode is not Mode.ENFORCE:
        notes.append(ReplayNote(
            policy.source_of("mode"), f"replay judges as in enforce mode; the policy's mode = "
            f"{policy.mode.value} is not applied"))
    called = {step.tool for run in report.runs for step in run.steps if step.tool is not None}
    if tools is not None and called and called.isdisjoint(spec.name for spec in specs):
        notes.append(ReplayNote(str(tools), "the tools file defines none of the recordings' "
                                f"{len(called)} tool(s), so every call is invalid"))
    return notes


class _FileProgress:
    """A progress bar per file on stderr while it replays (calls replayed so far), for inputs
    big enough to take a while, on a terminal only."""

    def __init__(self, files: Sequence[Path]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        size = 0
        for path in files:
            with contextlib.suppress(OSError):  # reported when the file is read
                size += path.stat().st_size
        self.progress: Progress | None = None
        big = size >= _PROGRESS_MIN_BYTES or len(files) >= _PROGRESS_MIN_FILES
        if big and _on_terminal():
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.fields[calls]} calls"),
                                     console=Console(stderr=True), transient=True)
        self.task: TaskID | None = None
        self.files = len(files)
        self.number = 0  # of the file being replayed
        self.calls = 0  # replayed in that file so far

    def __enter__(self) -> _FileProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def track(self, path: Path, runs: Iterator[Run]) -> Iterator[Run]:
        """Show ``path``'s bar (it pulses: a file's run count is known only once read)."""
        self.number += 1
        self.calls = 0
        if self.progress is not None:
            self.task = self.progress.add_task(
                f"[{self.number}/{self.files}] {path.name}", total=None, calls=0)
        return runs

    def advance(self, run: RunReport) -> None:
        """One more run replayed."""
        self.calls += run.replayed
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, calls=self.calls)

    def done(self, path: Path) -> None:
        """``path`` is replayed: its bar goes."""
        if self.progress is not None and self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None


def _on_terminal() -> bool:
    """A person is watching stderr (a progress bar would not garble a log)."""
    return sys.stderr.isatty()


def _print_formats(console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    from ._tables import FOLD_MIN_WIDTH, print_table
    from .replay import readers

    table = Table(title="toolguard replay input formats", title_justify="left")
    table.add_column("name", no_wrap=True)
    for name in ("files", "what"):
        table.add_column(name, overflow="fold", min_width=FOLD_MIN_WIDTH)
    for reader in readers():
        table.add_row(reader.name, " ".join(reader.suffixes), reader.description)
    print_table(console, table)
    console.print(Text("Detected per file from its content; --input-format NAME forces one. "
                       "'openai' and 'anthropic' name the chat reader."))


def _failed(report: ReplayReport, fail_on: FailOn) -> bool:
    if fail_on is FailOn.NEVER:
        return False
    if report.runs_with(Decision.HALT):
        return True
    return fail_on is FailOn.BLOCK and bool(report.runs_with(Decision.BLOCK))


def _load_policy(file: Path | None, env: str | None) -> Policy:
    """The policy to replay with; exits 2 listing every problem if it is invalid."""
    from rich.text import Text

    from ._cli_common import read_cli_policy

    try:
        return read_cli_policy(file, env)
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


def _stderr() -> Console:
    # Built per call so that output goes to the current sys.stderr (tests swap it).
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


def _error(problem: ReplayInputError) -> None:
    from rich.text import Text

    from .replay._report import printable

    _stderr().print(Text(printable(f"toolguard replay: {problem}"), style="red"))


def _note(note: ReplayNote) -> None:
    from rich.text import Text

    from .replay._report import printable

    _stderr().print(Text(printable(f"toolguard replay: {note}"), style="yellow"))


def _fail(message: str) -> NoReturn:
    from rich.text import Text

    _stderr().print(Text(f"toolguard replay: error: {message}", style="bold red"))
    raise typer.Exit(BAD_INPUT)
