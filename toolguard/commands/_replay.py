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

import enum
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from toolguard._errors import PolicyError
from toolguard._types import Decision

from ._common import write_stdout
from ._progress import CtrlC, Progress

if TYPE_CHECKING:  # rich, the replay readers and the policy loader load when a command runs
    from rich.console import Console

    from toolguard.policy._model import Policy
    from toolguard.replay import (
        FileRuns,
        ReplayInputError,
        ReplayNote,
        ReplayReport,
        Run,
        RunReport,
        Totals,
    )
    from toolguard.replay._records import RenderedRun
    from toolguard.replay._report import RunRenderer
    from toolguard.tools._decorators import ToolSpec


__all__ = ["FailOn", "OutputFormat", "register", "replay"]

FAILED: int = 1
BAD_INPUT: int = 2
INTERRUPTED: int = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


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
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, show_default=False,
                     help="Replay in this many worker processes [default: the number of "
                          "CPUs]. The report is the same for any number."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar on stderr.")
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
    from toolguard.replay import readers
    from toolguard.replay._registry import reader_named

    from ._tables import stdout_console

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
    output = _Output(output_format, verbose, only_flagged, keep_runs=html is not None)
    interrupted = False
    try:
        _replay(paths, guard_policy, specs, input_format, allow_empty,
                jobs or os.cpu_count() or 1, output, quiet, details=html is not None)
    except KeyboardInterrupt:
        interrupted = True
    for note in _after_notes(output.totals, guard_policy, tools, specs):
        _note(note)
        output.notes.append(note)
    if interrupted:
        from rich.text import Text

        _stderr().print(Text(
            f"toolguard replay: interrupted: the report covers the {output.totals.runs} "
            "run(s) replayed so far", style="bold red"))
    elif not output.totals.runs and not (allow_empty and not output.problems):
        _fail("no runs to replay")
    output.finish()
    if html is not None:
        _write_html(output.report(), html)
    if interrupted:
        raise typer.Exit(INTERRUPTED)
    if output.problems:
        raise typer.Exit(BAD_INPUT)
    if _failed(output.totals, fail_on):
        raise typer.Exit(FAILED)


def _write_html(report: ReplayReport, path: Path) -> None:
    """Write the HTML report to ``path`` (through a temporary file beside it, so a failed
    write leaves no half page); exits 2 if it cannot be written."""
    from toolguard.replay._html import write_html

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


class _Output:
    """The report, written as the runs are replayed: ``jsonl`` lines and the ``json``
    document's runs go to stdout as each run is done; the table is printed at the end from
    its rows. Keeps the totals, the problems and the notes, and the runs only when
    ``keep_runs`` (the HTML report shows every run). Without ``keep_runs`` each run is
    rendered where it was replayed (:attr:`render`, for :func:`replay_stream`)."""

    def __init__(self, output_format: OutputFormat, verbose: bool, only_flagged: bool,
                 keep_runs: bool) -> None:
        from toolguard.replay import ReplayReport, Totals
        from toolguard.replay._report import JsonDocument, RunRenderer, TableRows

        self.format = output_format
        self.totals = Totals()
        self.problems: list[ReplayInputError] = []
        self.notes: list[ReplayNote] = []
        self.document = JsonDocument(write_stdout)
        self.rows = TableRows(verbose)
        self.only_flagged = only_flagged
        self.kept: ReplayReport | None = ReplayReport() if keep_runs else None
        self.renderer = RunRenderer(output_format.value, verbose)
        self.render: RunRenderer | None = None if keep_runs else self.renderer

    def add(self, run: RunReport | RenderedRun) -> int:
        """Write ``run`` (a report, or one rendered by :attr:`render`) and count it in;
        returns its calls replayed."""
        from toolguard.replay import RunReport
        from toolguard.replay._report import lines_text

        if isinstance(run, RunReport):
            if self.kept is not None:
                self.kept.runs.append(run)
            run = self.renderer(run)
        self.totals.add(run.counts)
        if self.format is OutputFormat.JSON:
            self.document.add_part(run.id, run.part)
        elif self.format is OutputFormat.JSONL:
            lines = lines_text(run.id, run.part)
            if lines:
                write_stdout(lines)
        else:
            self.rows.add_part(run.id, run.part)
        return run.counts.replayed

    def finish(self) -> None:
        from toolguard.replay._report import render_rows

        from ._tables import stdout_console

        totals = self.totals.as_dict(len(self.problems))
        if self.format is OutputFormat.JSON:
            self.document.finish(totals, self.problems, self.notes)
        elif self.format is OutputFormat.TABLE:
            render_rows(self.rows, totals, stdout_console(), only_flagged=self.only_flagged)

    def report(self) -> ReplayReport:
        """The report of the runs kept (``keep_runs``), with the problems and notes."""
        from toolguard.replay import ReplayReport

        runs = [] if self.kept is None else self.kept.runs
        return ReplayReport(runs, self.problems, self.notes)


@dataclass(frozen=True, slots=True)
class _FileEnd:
    """In the stream of runs: every run of this file was read."""

    path: Path
    opened: FileRuns


def _replay(paths: Sequence[Path], policy: Policy, specs: Sequence[ToolSpec],
            input_format: str | None, allow_empty: bool, jobs: int, output: _Output,
            quiet: bool, *, details: bool = False) -> None:
    """Read and replay file by file, run by run, into ``output``; each file's problems and
    notes go to stderr as soon as its runs are replayed, and into ``output``, reading
    problems before replay ones. ``details``: keep each step's details (the HTML report)."""
    from toolguard.replay import UniqueIds, iter_files, open_file, replay_stream
    from toolguard.replay._portions import Portion, split

    files = list(iter_files(paths, output.problems,
                            notes=output.notes if allow_empty else None))
    for problem in output.problems:  # directories without any transcript
        _error(problem)
    for note in output.notes:
        _note(note)
    unique = UniqueIds()

    def items() -> Iterator[Run | Portion | _FileEnd]:
        for path in files:
            opened = open_file(path, input_format=input_format, allow_empty=allow_empty)
            # a big trace file with workers: each reads the portions it replays
            yield from split(opened, allow_empty, unique) if jobs > 1 else unique(opened.runs)
            yield _FileEnd(path, opened)

    held: list[ReplayInputError] = []  # the replay problems of the file being replayed
    with Progress(files, quiet) as progress, CtrlC() as ctrl_c:
        stream = replay_stream(items(), policy, tools=specs, jobs=jobs, details=details,
                               render=output.render)
        try:
            for item in stream:
                if ctrl_c.pressed:
                    raise KeyboardInterrupt
                if isinstance(item, _FileEnd):
                    progress.file_done()
                    for seen in (*item.opened.problems, *held):
                        _error(seen)
                        output.problems.append(seen)
                    held.clear()
                    for note in item.opened.notes:
                        _note(note)
                        output.notes.append(note)
                    continue
                result, trouble = item
                if result is not None:
                    progress.advance(output.add(result))
                if trouble is not None:
                    held.append(trouble)
        finally:
            stream.close()  # stops the workers, on Ctrl-C too


def _after_notes(totals: Totals, policy: Policy, tools: Path | None,
                 specs: Sequence[ToolSpec]) -> list[ReplayNote]:
    """Notes on the replay as a whole, once each: a policy ``mode`` replay does not apply
    (replay judges as ``enforce``, see :mod:`toolguard.replay`), and a ``--tools`` file that
    defines none of the tools the recordings call (then every call is ``invalid``)."""
    from toolguard._types import Mode
    from toolguard.replay import ReplayNote

    notes = []
    if policy.mode is not Mode.ENFORCE:
        notes.append(ReplayNote(
            policy.source_of("mode"), f"replay judges as in enforce mode; the policy's mode = "
            f"{policy.mode.value} is not applied"))
    called = totals.tools
    if tools is not None and called and called.isdisjoint(spec.name for spec in specs):
        notes.append(ReplayNote(str(tools), "the tools file defines none of the recordings' "
                                f"{len(called)} tool(s), so every call is invalid"))
    return notes


def _print_formats(console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    from toolguard.replay import readers

    from ._tables import FOLD_MIN_WIDTH, print_table

    table = Table(title="toolguard replay input formats", title_justify="left")
    table.add_column("name", no_wrap=True)
    for name in ("files", "what"):
        table.add_column(name, overflow="fold", min_width=FOLD_MIN_WIDTH)
    for reader in readers():
        table.add_row(reader.name, " ".join(reader.suffixes), reader.description)
    print_table(console, table)
    console.print(Text("Detected per file from its content; --input-format NAME forces one. "
                       "'openai' and 'anthropic' name the chat reader."))


def _failed(totals: Totals, fail_on: FailOn) -> bool:
    if fail_on is FailOn.NEVER:
        return False
    if totals.runs_with[str(Decision.HALT)]:
        return True
    return fail_on is FailOn.BLOCK and bool(totals.runs_with[str(Decision.BLOCK)])


def _load_policy(file: Path | None, env: str | None) -> Policy:
    """The policy to replay with; exits 2 listing every problem if it is invalid."""
    from rich.text import Text

    from ._common import read_cli_policy

    try:
        return read_cli_policy(file, env)
    except PolicyError as error:
        for problem in error.problems:
            _stderr().print(Text(f"toolguard replay: {problem}", style="red"))
        _fail(f"invalid policy ({len(error.problems)} problem(s))")


def _load_tools(path: Path | None) -> list[ToolSpec]:
    from toolguard.replay import ReplayInputError, read_tool_definitions

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

    from toolguard.replay._report import printable

    _stderr().print(Text(printable(f"toolguard replay: {problem}"), style="red"))


def _note(note: ReplayNote) -> None:
    from rich.text import Text

    from toolguard.replay._report import printable

    _stderr().print(Text(printable(f"toolguard replay: {note}"), style="yellow"))


def _fail(message: str) -> NoReturn:
    from rich.text import Text

    _stderr().print(Text(f"toolguard replay: error: {message}", style="bold red"))
    raise typer.Exit(BAD_INPUT)
