"""Big trace files read by the workers of ``replay --jobs`` themselves, a portion each.

Shipping every run from the reading process to a worker cost that process about as much as
reading it (parsing, building the calls, pickling them): with two jobs it was the busiest of
three processes. Instead, this process only finds where portions of about
:data:`PORTION_BYTES` may be cut: before a header line (:func:`~._trace.starts_run`), where
the trace reader starts a new run, so a portion reads the same alone as within the file. A
worker reads and replays a whole portion and sends back the outcomes and what its reader
met; this process merges them in file order (:meth:`Split.merge`), so the report is the one
a single process gives: ids given by position (``stem#n``) and ids made unique across files
are settled here, the problems are sorted and the skipped lines counted over the whole file,
and a portion that stops the reader drops the portions after it.

Finding the cuts reads the file once more but parses only lines without ``"tool"`` past
each portion's size (a line with it is taken for a call, never cut before: a header that
holds the word only makes its portion longer).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import orjson

from ._formats import FileRuns, UniqueIds, finish_file, read_counted
from ._model import ReplayInputError, Run, Source, default_id
from ._records import AnyOutcome
from ._trace import READER, starts_run

__all__ = ["PORTION_BYTES", "Portion", "PortionResult", "Split", "portions", "read_portion",
           "replay_portion", "split"]

PORTION_BYTES = 1 << 20  # not Final: tests cut small portions
"""About how much of a trace file one worker reads and replays at a time (~4,000 calls of a
coding agent): big enough that a portion's outcomes are few messages, small enough to keep
both workers busy to the end and to stop soon after Ctrl-C."""

_TOOL: Final = b'"tool"'

PortionResult = tuple[Source, "ReplayInputError | None", list[tuple[str, AnyOutcome]]]
"""What a worker sends back for a portion: the source it read (problems, skipped lines,
notes, counters), the problem that stopped its reader if one did, and each run's own id with
its outcome."""


class _Replayer(Protocol):
    """What a portion needs of the replay (:class:`toolguard.replay._runner._Replayer`)."""

    def outcome(self, number: int, run: Run) -> AnyOutcome: ...


@dataclass(frozen=True, slots=True)
class Portion:
    """In the stream of runs: the whole runs of ``size`` bytes of a trace file from byte
    ``start`` (a line's start; ``lines``: the lines before it), for one worker."""

    split: Split
    start: int
    size: int
    lines: int
    last: bool

    @property
    def task(self) -> tuple[str, int, int, int]:
        """What a worker needs to read the portion: the path, ``start``, ``size``,
        ``lines``."""
        return str(self.split.source.path), self.start, self.size, self.lines


class Split:
    """One trace file read in portions: finds them (:func:`portions`) and merges what the
    workers send back, in order, into the file's :class:`~._formats.FileRuns` (its
    problems and notes are complete once the last portion is merged)."""

    def __init__(self, opened: FileRuns, allow_empty: bool, unique: UniqueIds) -> None:
        self.opened = opened
        self.allow_empty = allow_empty
        self.unique = unique
        self.source = Source(Path(opened.file), "trace")  # the whole file's, merged
        self.stopped = False  # a portion's reader stopped: the later ones do not count

    def merge(self, portion: Portion, result: PortionResult) -> list[AnyOutcome]:
        """The outcomes of ``portion`` under the ids a single reader gives; merges its
        source into the file's and ends the file after the last portion."""
        if self.stopped:
            return []
        part, fatal, outcomes = result
        merged = self.source
        defaulted = set(part.defaulted)
        out: list[AnyOutcome] = []
        for i, (own, outcome) in enumerate(outcomes):
            name = default_id(merged.stem, merged.runs + i) if i in defaulted else own
            out.append(_renamed(outcome, own, self.unique.name(name)))
        merged.add(part)
        if fatal is not None or portion.last:
            self.stopped = True
            merged.report_bad_lines()
            finish_file(READER, merged, self.opened, self.allow_empty, fatal)
        return out


def _renamed(outcome: AnyOutcome, own: str, name: str) -> AnyOutcome:
    """``outcome`` of the run read as ``own``, for the run named ``name``."""
    if name == own:
        return outcome
    report, problem = outcome
    if report is not None:
        report.id = name
    prefix = f"run {own}: "  # how the runner's problems about a run start
    if problem is not None and problem.message.startswith(prefix):
        problem = ReplayInputError(problem.file, problem.line,
                                   f"run {name}: {problem.message[len(prefix):]}")
    return report, problem


def split(opened: FileRuns, allow_empty: bool, unique: UniqueIds
          ) -> Iterator[Run] | Iterator[Portion]:
    """The runs of ``opened`` (:func:`~._formats.open_file`) with ids made unique, or for a
    trace file of at least two portions, its portions (its runs are not read here)."""
    if opened.format != READER.name or opened.size < 2 * PORTION_BYTES:
        return unique(opened.runs)
    return portions(opened, allow_empty, unique)


def portions(opened: FileRuns, allow_empty: bool, unique: UniqueIds) -> Iterator[Portion]:
    """The portions of the trace file ``opened`` (:func:`~._formats.open_file`), in order;
    its runs are not read here (``opened.runs`` stays as it is)."""
    whole = Split(opened, allow_empty, unique)
    previous: tuple[int, int, int] | None = None
    try:
        for cut in _cuts(whole.source.path, PORTION_BYTES):
            if previous is not None:
                yield Portion(whole, *previous, last=False)
            previous = cut
    except OSError as exc:  # the file went away since it was opened
        opened.fail(ReplayInputError(opened.file, None, f"cannot read: {exc.strerror or exc}"))
        return
    if previous is not None:
        yield Portion(whole, *previous, last=True)


def _cuts(path: Path, every: int) -> Iterator[tuple[int, int, int]]:
    """``(start, size, lines before)`` of each portion: cut before the first header line at
    least ``every`` bytes after the start of the portion. The bytes before that point are
    read as one block and only their newlines counted (splitting them into lines cost this
    process a third of what a worker spends reading its portion)."""
    start = lines = 0
    with path.open("rb") as handle:
        while True:
            skipped = handle.read(every)
            offset = start + len(skipped)
            newlines = skipped.count(b"\n")
            if len(skipped) == every and not skipped.endswith(b"\n"):
                rest = handle.readline()  # the line the block ends inside
                offset += len(rest)
                newlines += rest.endswith(b"\n")
            while raw := handle.readline():
                if _header(raw):
                    yield start, offset - start, lines
                    start, lines = offset, lines + newlines
                    handle.seek(start)
                    break
                offset += len(raw)
                newlines += 1
            else:
                break
    if offset > start:
        yield start, offset - start, lines


def _header(raw: bytes) -> bool:
    if _TOOL in raw:
        return False
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and starts_run(value)


def read_portion(path: str, start: int, size: int, lines: int
                 ) -> tuple[Source, Iterator[Run], list[ReplayInputError | None]]:
    """The source and the runs of one portion; once the runs are read, the list holds the
    problem that stopped the reader, or ``None``."""
    source = Source(Path(path), "trace")
    source.portion = (start, size, lines)
    fatal: list[ReplayInputError | None] = []

    def runs() -> Iterator[Run]:
        fatal.append((yield from read_counted(READER, source)))

    return source, runs(), fatal


def replay_portion(replayer: _Replayer, path: str, start: int, size: int, lines: int
                   ) -> PortionResult:
    """Read and replay one portion (in a worker)."""
    source, runs, fatal = read_portion(path, start, size, lines)
    # task ids: ``start + i`` is unique in the file (a portion has fewer runs than bytes)
    outcomes = [(run.id, replayer.outcome(start + i, run)) for i, run in enumerate(runs)]
    return source, fatal[0], outcomes
