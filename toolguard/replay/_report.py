"""Render a :class:`~toolguard.replay.ReplayReport`: a rich table, JSON, or JSON lines.

* table: one row per run (calls, executed, warn, cached, block, review, invalid, and where and
  why it halted; the cost of the recorded model usage when some run reported tokens), a
  totals row, and one line with the number of runs per decision; with
  ``verbose`` also every step that was not a plain allow (tool, an argument excerpt, reason).
* json: ``{"runs": [{"id", "file", "format", "steps": [...], "summary": {...}}],
  "totals": {...}, "problems": [...], "notes": [...]}`` (``format``: the input format the run
  was read as; ``notes``: records a reader did not use, per kind; see
  :meth:`StepReport.to_dict`, :meth:`RunReport.summary` and :meth:`ReplayReport.totals` for
  the other keys).
* jsonl: one step per line, each with its run's ``"run"`` id.

Each format writes a run from its *part*, everything but the run's id (:func:`json_part`,
:func:`lines_part`, :func:`row_part`), which :class:`RunRenderer` makes where the run was
replayed: a worker of ``replay --jobs`` sends that text back, not the run's steps, and the
reading process adds the id, settled in file order, as it writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from toolguard._types import Decision

from ._model import ReplayInputError, ReplayNote
from ._records import RenderedRun, RunCounts
from ._runner import ReplayReport, RunReport

__all__ = ["JsonDocument", "RunRenderer", "TableRows", "json_part", "jsonl_lines",
           "lines_part", "lines_text", "render_rows", "render_table", "row_part", "run_lines",
           "to_json", "to_json_text"]

_COUNTS: Final = (Decision.WARN, Decision.CACHED, Decision.BLOCK, Decision.REVIEW,
                  Decision.INVALID)
_STYLE: Final = {Decision.WARN: "yellow", Decision.CACHED: "cyan", Decision.BLOCK: "red",
                 Decision.REVIEW: "magenta", Decision.INVALID: "red", Decision.HALT: "bold red"}
# Metadata already shown as the run id, or too long for a table cell.
_HIDDEN_META: Final = frozenset({"id", "run", "case", "run_id", "task_id", "trial", "source",
                                 "description"})
_META_CHARS: Final = 40


@dataclass(frozen=True, slots=True)
class RunRenderer:
    """Turns a run's report into its :class:`RenderedRun` for ``format`` (``json``, ``jsonl``
    or ``table``; ``verbose``: the table's rows of non-allow steps too). Pickles by reference
    into the workers."""

    format: str
    verbose: bool = False

    def __call__(self, run: RunReport) -> RenderedRun:
        part: Any
        if self.format == "json":
            part = json_part(run)
        elif self.format == "jsonl":
            part = lines_part(run)
        else:
            part = row_part(run, self.verbose)
        return RenderedRun(run.id, RunCounts.of(run), part)


def to_json(report: ReplayReport) -> dict[str, Any]:
    """The report as JSON values (the ``--format json`` document)."""
    return {
        "runs": [_run_json(run) for run in report.runs],
        **_tail_json(report.totals(), report.problems, report.notes),
    }


def _run_json(run: RunReport) -> dict[str, Any]:
    return {"id": run.id, "file": run.file, "format": run.format,
            "steps": [s.to_dict() for s in run.steps], "summary": run.summary()}


_STEPS_OPEN: Final = b'{\n  "runs": [\n    {\n      "steps": '
_STEPS_CLOSE: Final = b"\n    }\n  ]\n}"


def json_part(run: RunReport) -> dict[str, Any]:
    """``run``'s object in the JSON document but its id (:meth:`JsonDocument.add_part`), its
    steps as the text orjson indents them to where they stand in the document (bytes), or as
    their values where orjson refuses one."""
    steps = [s.to_dict() for s in run.steps]
    text: bytes | list[dict[str, Any]]
    try:
        text = orjson.dumps({"runs": [{"steps": steps}]}, option=orjson.OPT_INDENT_2
                            )[len(_STEPS_OPEN):-len(_STEPS_CLOSE)]
    except TypeError:
        text = steps
    return {"file": run.file, "format": run.format, "steps": text, "summary": run.summary()}


def _tail_json(totals: dict[str, Any], problems: Sequence[ReplayInputError],
               notes: Sequence[ReplayNote]) -> dict[str, Any]:
    return {
        "totals": totals,
        "problems": [{"file": p.file, "line": p.line, "message": p.message} for p in problems],
        "notes": [{"file": n.file, "line": n.line, "message": n.message, "count": n.count}
                  for n in notes],
    }


def to_json_text(report: ReplayReport) -> str:
    """:func:`to_json` as indented JSON text (what :class:`JsonDocument` writes)."""
    parts: list[str] = []
    document = JsonDocument(parts.append)
    for run in report.runs:
        document.add(run)
    document.finish(report.totals(), report.problems, report.notes)
    return "".join(parts).removesuffix("\n")


_RUNS_OPEN: Final = '{\n  "runs": [\n    '
_RUNS_CLOSE: Final = "\n  ]\n}"


class JsonDocument:
    """Writes the ``--format json`` document run by run as the runs are replayed, then the
    totals, problems and notes: memory holds one run, not the report. The text is
    :func:`to_json` indented by two spaces; each run's object (and the rest) by orjson, by the
    standard library where orjson refuses a value (see :func:`_dumps`)."""

    def __init__(self, write: Callable[[str], object]) -> None:
        """``write``: takes each piece of text in turn (the document ends with a newline)."""
        self.write = write
        self.runs = 0

    def add(self, run: RunReport) -> None:
        """Write ``run``'s object into the ``runs`` list."""
        self.add_part(run.id, json_part(run))

    def add_part(self, run_id: str, part: dict[str, Any]) -> None:
        """Write the object of the run ``run_id`` whose other members are ``part``
        (:func:`json_part`)."""
        value = {"id": run_id, **part}
        steps = part["steps"]
        if isinstance(steps, bytes):
            value["steps"] = orjson.Fragment(steps)
        try:  # indented where it stands in the document: cut out of it, not re-indented
            text = orjson.dumps({"runs": [value]}, option=orjson.OPT_INDENT_2,
                                default=str).decode()[len(_RUNS_OPEN):-len(_RUNS_CLOSE)]
        except TypeError:
            if isinstance(steps, bytes):  # orjson wrote them: it reads them back as they were
                value["steps"] = orjson.loads(steps)
            text = _dumps(value, indent=True).replace("\n", "\n    ")
        self.write((_RUNS_OPEN if not self.runs else ",\n    ") + text)
        self.runs += 1

    def finish(self, totals: dict[str, Any], problems: Sequence[ReplayInputError],
               notes: Sequence[ReplayNote]) -> None:
        """Close the ``runs`` list and write the rest of the document."""
        tail = _dumps(_tail_json(totals, problems, notes), indent=True)
        self.write(('{\n  "runs": [],\n' if not self.runs else "\n  ],\n") + tail[2:] + "\n")


def jsonl_lines(report: ReplayReport) -> Iterator[str]:
    """One JSON object per step, in run order, each with a ``"run"`` key (no newline)."""
    for run in report.runs:
        yield from run_lines(run)


def run_lines(run: RunReport) -> Iterator[str]:
    """``--format jsonl``: one JSON object per step of ``run``, each with a ``"run"`` key (no
    newline): :func:`lines_text` of its :func:`lines_part`."""
    # only "\n" ends a line: JSON text may hold U+2028 and other line breaks of str.splitlines
    yield from lines_text(run.id, lines_part(run)).split("\n")[:-1]


def lines_part(run: RunReport) -> bytes | list[dict[str, Any]]:
    """``run``'s steps for :func:`lines_text`: their objects by orjson, one per line (a string
    in JSON holds no raw newline, so each line after the first starts with ``\\n{``); their
    values where orjson refuses one."""
    steps = [step.to_dict() for step in run.steps]
    try:
        return b"\n".join(map(orjson.dumps, steps))
    except TypeError:
        return steps


def lines_text(run_id: str, part: bytes | list[dict[str, Any]]) -> str:
    """The ``--format jsonl`` lines of the run ``run_id`` (each ending with a newline; ``""``
    without a step) from its :func:`lines_part`: as :func:`run_lines` writes them, the
    ``"run"`` key put in front of each object."""
    if not part:
        return ""
    if isinstance(part, bytes):
        try:
            prefix = b'{"run":' + orjson.dumps(run_id) + b","
        except TypeError:  # an id orjson refuses: the whole line by the standard library
            part = [orjson.loads(line) for line in part.split(b"\n")]
        else:
            return (prefix + part[1:].replace(b"\n{", b"\n" + prefix) + b"\n").decode()
    return "".join(_dumps({"run": run_id, **step}, indent=False) + "\n" for step in part)


def _dumps(value: Any, indent: bool) -> str:
    """JSON text by orjson; by the standard library for what orjson refuses (an integer beyond
    64 bits, a lone surrogate, nesting past 255 levels), which writes integers exactly and
    escapes everything beyond ASCII; values nested past 64 levels are cut off there."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0,
                            default=str).decode()
    except TypeError:
        pass
    options: dict[str, Any] = {"indent": 2 if indent else None, "default": str,
                               "separators": None if indent else (",", ":")}
    try:
        return json.dumps(value, **options)
    except RecursionError:
        return json.dumps(_cut(value, _MAX_DEPTH), **options)


_MAX_DEPTH: Final = 64


def _cut(value: Any, depth: int) -> Any:
    """``value`` with the containers below ``depth`` levels replaced by a note."""
    if isinstance(value, dict):
        if depth <= 0:
            return "(nested too deeply to show)"
        return {k: _cut(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return "(nested too deeply to show)"
        return [_cut(v, depth - 1) for v in value]
    return value


# C0 and C1 control characters but tab and newline: a recording's text (a run id, a tool
# name, an argument) shown raw on a terminal could clear the screen, retitle the window or
# hide what follows ("\x1b[2J"); shown escaped instead.
_CONTROLS: Final = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))
                    if c not in (0x09, 0x0A)}


def printable(text: str) -> str:
    """``text`` with every control character (but tab and newline) escaped as ``\\xNN``: what a
    recording says, safe to print on a terminal."""
    return text.translate(_CONTROLS)


class TableRows:
    """What the table shows, added run by run (a streamed replay keeps these, not the runs):
    one row of a few short cells per run and, with ``verbose``, one per step that was not a
    plain allow."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        # (run id, meta, calls, executed, counts, cost, halt, flagged, tokens)
        self.rows: list[tuple[str, str, int, int, tuple[int, ...], Text, Text, bool, int]] = []
        self.steps: list[tuple[str, str, str, Text, str, str, str]] = []

    def add(self, run: RunReport) -> None:
        """Add ``run``'s row (and its non-allow steps)."""
        self.add_part(run.id, row_part(run, self.verbose))

    def add_part(self, run_id: str, part: _RowPart) -> None:
        """Add the row of the run ``run_id`` from its :func:`row_part`."""
        row, steps = part
        shown = printable(run_id)
        self.rows.append((shown, *row))
        if self.verbose:
            self.steps += [(shown, *step) for step in steps]


# a table row but its run id (meta, calls, executed, counts, cost, halt, flagged, tokens),
# and with ``verbose`` each non-allow step's row but its run id
_RowPart = tuple[tuple[str, int, int, tuple[int, ...], Text, Text, bool, int],
                 list[tuple[str, str, Text, str, str, str]]]


def row_part(run: RunReport, verbose: bool) -> _RowPart:
    """``run``'s cells in the table but its id (:meth:`TableRows.add_part`); with
    ``verbose`` also each non-allow step's."""
    counts = run.decisions()
    flagged = run.error is not None or counts.keys() - {Decision.ALLOW} != set()
    row = (_meta_text(run), run.calls, counts[Decision.ALLOW] + counts[Decision.WARN],
           tuple(counts[d] for d in _COUNTS), _cost_text(run.cost_usd, run.unpriced_tokens),
           _halt_text(run), flagged, run.tokens)
    if not verbose:
        return row, []
    return row, [(str(step.index), printable(step.tool or "(token usage)"),
                  Text(str(step.decision), style=_STYLE.get(step.decision, "")),
                  str(step.count), printable(step.args), printable(step.reason))
                 for step in run.steps if step.decision is not Decision.ALLOW]


def render_table(report: ReplayReport, console: Console, *, verbose: bool = False,
                 only_flagged: bool = False) -> None:
    """Print the per-run table, the totals and (``verbose``) every non-allow step.

    Args:
        report: what to show.
        console: where to print (stdout in the CLI): a table on a terminal, plain columns
            otherwise (:func:`toolguard.commands._tables.print_table`).
        verbose: also list every step whose decision is not ``allow``.
        only_flagged: list only the runs with a decision other than ``allow`` (or an
            error); the totals still count every run.
    """
    rows = TableRows(verbose)
    for run in report.runs:
        rows.add(run)
    render_rows(rows, report.totals(), console, only_flagged=only_flagged)


def render_rows(rows: TableRows, totals: dict[str, Any], console: Console, *,
                only_flagged: bool = False) -> None:
    """:func:`render_table` from the rows and the totals (``ReplayReport.totals``)."""
    from toolguard.commands._tables import FOLD_MIN_WIDTH, print_table

    shown = [row for row in rows.rows if not only_flagged or row[7]]
    show_meta = any(row[1] for row in shown)
    show_cost = any(row[8] for row in rows.rows)
    table = Table(title="toolguard replay", title_justify="left")
    table.add_column("run", overflow="fold", min_width=FOLD_MIN_WIDTH)
    if show_meta:
        table.add_column("meta", overflow="fold", min_width=FOLD_MIN_WIDTH)
    for name in ("calls", "executed", *(str(d) for d in _COUNTS)):
        table.add_column(name, justify="right", no_wrap=True)
    if show_cost:
        table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("halted", overflow="fold", min_width=FOLD_MIN_WIDTH)
    for run_id, meta, calls, executed, counts, cost, halt, _, _ in shown:
        cells: list[str | Text] = [run_id]
        if show_meta:
            cells.append(meta)
        cells += [str(calls), str(executed)]
        cells += [_count(n, d) for n, d in zip(counts, _COUNTS, strict=True)]
        if show_cost:
            cells.append(cost)
        cells.append(halt)
        table.add_row(*cells)
    if rows.rows:
        table.add_section()
        decisions = totals["decisions"]
        cells = [Text(f"total ({_plural(totals['runs'], 'run')})", style="bold")]
        if show_meta:
            cells.append("")
        cells += [str(totals["calls"]), str(totals["executed"])]
        cells += [_count(decisions[str(d)], d) for d in _COUNTS]
        if show_cost:
            cells.append(_cost_text(totals["cost_usd"], totals["unpriced_tokens"]))
        cells.append(_count(decisions["halt"], Decision.HALT, " halted"))
        table.add_row(*cells)
    print_table(console, table)
    if len(shown) < len(rows.rows):
        console.print(Text(f"{_plural(len(rows.rows) - len(shown), 'run')} with every call "
                           "allowed not listed (--only-flagged)"))
    with_ = totals["runs_with"]
    console.print(Text(
        f"{_plural(totals['runs'], 'run')}, {_plural(totals['calls'], 'call')}: "
        f"runs with warn {with_['warn']}, "
        f"cached {with_['cached']}, block {with_['block']}, review {with_['review']}, "
        f"invalid {with_['invalid']}, halt {with_['halt']}; "
        f"{_plural(totals['not_replayed'], 'call')} not replayed after a halt"))
    if rows.verbose:
        _render_steps(rows, console)


def _render_steps(rows: TableRows, console: Console) -> None:
    from toolguard.commands._tables import FOLD_MIN_WIDTH, print_table

    table = Table(title="steps that were not a plain allow", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("run", "left"), ("step", "right"), ("tool", "left"), ("decision", "left"),
        ("count", "right"), ("args", "left"), ("reason", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold",
                         min_width=FOLD_MIN_WIDTH if justify == "left" else None)
    for row in rows.steps:
        table.add_row(*row)
    if table.row_count:
        print_table(console, table)
    else:
        console.print(Text("every step was allowed"))


def _count(n: int, decision: Decision, suffix: str = "") -> Text:
    if not n:
        return Text("0" if not suffix else "", style="dim")
    return Text(f"{n}{suffix}", style=_STYLE.get(decision, ""))


def cost_text(usd: float, unpriced_tokens: int) -> str:
    """``$0.2393``, with ``+?`` when some tokens had no known price."""
    return f"${usd:.4f}" + ("+?" if unpriced_tokens else "")


def _cost_text(usd: float, unpriced_tokens: int) -> Text:
    return Text(cost_text(usd, unpriced_tokens), style="" if usd or unpriced_tokens else "dim")


def _halt_text(run: RunReport) -> Text:
    if run.error is not None:
        return Text(printable(f"error: {run.error}"), style="bold red")
    if run.halted_at is None:
        return Text("")
    return Text(printable(f"step {run.halted_at}: {run.halt_reason}"),
                style=_STYLE[Decision.HALT])


def _meta_text(run: RunReport) -> str:
    parts = [f"{k}={v}" for k, v in run.meta.items()
             if k not in _HIDDEN_META and (v is None or isinstance(v, (str, int, float, bool)))]
    text = printable(", ".join(parts))
    return text if len(text) <= _META_CHARS else text[: _META_CHARS - 1] + "…"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
