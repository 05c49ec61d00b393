"""Read recorded agent runs: find the files, pick a reader per file (``_registry``), and hand
the runs on file by file, lazily, so a replay holds one file's runs at a time, never the corpus.

Problems are :class:`ReplayInputError` objects naming the file (and the 1-based line, for JSON
lines): a file that cannot be read, or whose format no reader recognises, is one problem; a bad
line or a bad run inside a readable file is one problem and the rest of the file is still read.
A file that yields no tool call is a problem too (exit 2 in the CLI: a CI gate must not pass on
nothing), naming the format it was read as and what was found, unless ``allow_empty`` or the
model spoke without calling any tool (then it is a :class:`ReplayNote`, like records a reader
does not use, which are counted once per kind).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from jsonschema.exceptions import SchemaError

from toolguard.hashing._json_text import load_json
from toolguard.tools._decorators import ToolSpec, recorded_tool
from toolguard.tools._schema import ArgsValidator

from ._model import ReplayInputError, ReplayNote, Run, Source, json_type
from ._reading import HEAD_BYTES, head_objects
from ._registry import Reader, detect, reader_named, readers, suffixes

__all__ = [
    "FileRuns",
    "UniqueIds",
    "iter_files",
    "open_file",
    "read_file",
    "read_runs",
    "read_tool_definitions",
]

_HINT: Final = "give --input-format NAME (toolguard replay --list-formats)"


@dataclass(slots=True)
class FileRuns:
    """The runs of one file, read as :attr:`runs` is iterated.

    Attributes:
        file: the file, as given.
        format: the name of the reader that reads it, or ``None`` (unreadable, unrecognised).
        runs: the runs, lazily; iterate once.
        problems: filled while reading (complete once ``runs`` is exhausted).
        notes: records the reader did not use, per kind (complete once ``runs`` is exhausted).
        size: the file's size in bytes (0 if it cannot be read).
        fatal: the problem that stopped the file from being read at all, or ``None``.
    """

    file: str
    format: str | None
    runs: Iterator[Run]
    problems: list[ReplayInputError] = field(default_factory=list)
    notes: list[ReplayNote] = field(default_factory=list)
    size: int = 0
    fatal: ReplayInputError | None = None

    def fail(self, error: ReplayInputError) -> None:
        """The file cannot be read at all."""
        self.fatal = error
        self.problems.append(error)


def open_file(path: str | Path, *, input_format: str | None = None,
              allow_empty: bool = False) -> FileRuns:
    """Detect the format of one file (or take ``input_format``) and read its runs lazily.

    Args:
        path: the file.
        input_format: a reader's name (``--list-formats``) to use instead of detection.
        allow_empty: a file without tool calls is no problem.

    Returns:
        The :class:`FileRuns`; nothing is raised: an unreadable or unrecognised file is one
        problem and no run.

    Raises:
        ValueError: ``input_format`` names no reader.
    """
    name = str(path)
    forced = None if input_format is None else reader_named(input_format)
    if input_format is not None and forced is None:
        raise ValueError(f"unknown input format {input_format!r} (one of "
                         f"{', '.join(r.name for r in readers())})")
    out = FileRuns(name, None, iter(()))
    try:
        _regular(Path(path))
        with Path(path).open("rb") as handle:
            head = handle.read(HEAD_BYTES)
        out.size = Path(path).stat().st_size
    except OSError as exc:
        out.fail(ReplayInputError(name, None, f"cannot read: {exc.strerror or exc}"))
        return out
    if not head.strip():
        if allow_empty:  # no tool call, which --allow-empty allows
            out.notes.append(ReplayNote(name, "empty file: nothing to replay"))
        else:
            out.fail(ReplayInputError(name, None, "empty file (--allow-empty allows it)"))
        return out
    reader = forced or detect(Path(path), head)
    if reader is None:
        out.fail(ReplayInputError(name, None, f"format not recognised: {_describe(head)}; {_HINT}"))
        return out
    out.format = reader.name
    source = Source(Path(path), reader.name)
    source.forced = forced is not None
    out.runs = _read(reader, source, out, allow_empty)
    return out


def _regular(path: Path) -> None:
    """Raises OSError unless ``path`` is a regular file (or absent: opening it says so).
    A FIFO would block the read until some writer came, a device could be endless."""
    if path.exists() and not path.is_file():
        raise IsADirectoryError(0, "not a regular file (a directory, FIFO or device)")


def _read(reader: Reader, source: Source, out: FileRuns, allow_empty: bool) -> Iterator[Run]:
    fatal = yield from read_counted(reader, source)
    finish_file(reader, source, out, allow_empty, fatal)


def read_counted(reader: Reader, source: Source) -> Generator[Run, None,
                                                               ReplayInputError | None]:
    """The runs ``reader`` reads from ``source``, counted in it; returns the problem that
    stopped the reading, if one did (the runs before it are handed on)."""
    try:
        for run in reader.read(source):
            source.runs += 1
            source.calls += len(run.calls)
            yield run
    except Exception as error:  # noqa: BLE001 - the file is data: a record shaped in a
        # way the reader does not expect must end this file, not the replay
        return error if isinstance(error, ReplayInputError) else ReplayInputError(
            source.file, None, f"cannot be read as {reader.name}: {type(error).__name__}: "
            f"{error}; runs handed on before it still replay")
    return None


def finish_file(reader: Reader, source: Source, out: FileRuns, allow_empty: bool,
                fatal: ReplayInputError | None) -> None:
    """Hand the problems and notes of a file read to its end (or to ``fatal``) to ``out``,
    and say so when the file held no tool call."""
    out.problems.extend(sorted(source.problems, key=lambda p: p.line or 0))
    if fatal is not None:
        out.fail(fatal)
        out.notes.extend(source.notes)
        return
    out.notes.extend(source.notes)
    if source.calls or allow_empty or source.problems:  # problems: not silent already
        return
    found = f"{source.runs} run(s), no tool call"
    if source.no_calls_by_design is not None:
        out.notes.append(ReplayNote(source.file, f"{found}: {source.no_calls_by_design}"))
        return
    if source.model_turns and not reader.calls_expected:
        out.notes.append(ReplayNote(source.file, f"{found}: the model answered "
                                    f"{source.model_turns} time(s) without calling a tool"))
        return
    unused = "; ".join(n.message + (f" ({n.count} times)" if n.count > 1 else "")
                       for n in source.notes)
    out.problems.append(ReplayInputError(
        source.file, None, f"read as {reader.name}: {found}"
        + (f" (unused: {unused})" if unused else "")
        + f"; not a {reader.name} file? {_HINT}, or --allow-empty"))


def _describe(head: bytes) -> str:
    """What an unrecognised file looks like, for the problem message."""
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive that no reader claims"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-32 LE starts with FF FE too
        return "UTF-16 or UTF-32 text (a byte order mark): save it as UTF-8"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the end of the head
            return (f"not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start})")
    objects = head_objects(head, limit=1)
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if objects and len(head.splitlines()) > 1:
        return "JSON lines whose first object has keys " + _keys(objects[0])
    try:
        value = load_json(head)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if isinstance(value, dict):
        return "a JSON object with keys " + _keys(value)
    if value is not None:
        return f"a JSON {json_type(value)}"

    if text[:1] == b"{":
        return "a JSON object none of the readers knows"
    if text[:1] == b"[":
        return "a JSON list none of the readers knows"
    return "neither JSON nor JSON lines"


def _keys(value: dict[str, Any]) -> str:
    names = sorted(value)
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "(none)"


def iter_files(paths: Iterable[str | Path], problems: list[ReplayInputError], *,
               notes: list[ReplayNote] | None = None) -> Iterator[Path]:
    """The files to read: each file as given; each directory as the files below it (sorted by
    path) whose name ends with a suffix some reader claims. A directory with none is a
    problem, or a note in ``notes`` when that list is given (``--allow-empty``)."""
    claimed = suffixes()
    for item in paths:
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.name.endswith(claimed))
            if not files:
                found = f"no {', '.join(claimed)} files"
                if notes is not None:
                    notes.append(ReplayNote(str(path), f"{found}: nothing to replay"))
                else:
                    problems.append(ReplayInputError(str(path), None,
                                                     f"{found} (--allow-empty allows it)"))
            yield from files
        else:
            yield path


class UniqueIds:
    """Makes run ids unique across the files of one replay (``id``, ``id#2``, ...)."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def __call__(self, runs: Iterable[Run]) -> Iterator[Run]:
        """``runs`` with ids renamed where taken."""
        for run in runs:
            run.id = self.name(run.id)
            yield run

    def name(self, run_id: str) -> str:
        """The id of the next run whose own id is ``run_id``."""
        n = self._seen.get(run_id, 0) + 1
        self._seen[run_id] = n
        return f"{run_id}#{n}" if n > 1 else run_id


def read_file(path: str | Path, *, input_format: str | None = None,
              allow_empty: bool = False) -> tuple[list[Run], list[ReplayInputError]]:
    """Read every run of one file (see :func:`open_file`).

    Returns:
        The runs, and the problems of lines or runs that were skipped.

    Raises:
        ReplayInputError: the file cannot be read at all, or its format is not recognised.
    """
    opened = open_file(path, input_format=input_format, allow_empty=allow_empty)
    runs = list(opened.runs)
    if opened.fatal is not None:
        raise opened.fatal
    return runs, opened.problems


def read_runs(paths: Sequence[str | Path], *, input_format: str | None = None,
              allow_empty: bool = False) -> tuple[list[Run], list[ReplayInputError]]:
    """Read every run of every file (a directory stands for the files below it whose suffix a
    reader claims, sorted by path). Run ids are made unique across all files. This holds every
    run in memory; the CLI replays file by file instead (:func:`open_file`).

    Args:
        paths: files or directories.
        input_format: a reader's name to use for every file instead of detection.
        allow_empty: files without tool calls are no problem.

    Returns:
        The runs in file order, and the problems of lines or runs that were skipped and of
        files that could not be read at all.
    """
    runs: list[Run] = []
    problems: list[ReplayInputError] = []
    unique = UniqueIds()
    for path in iter_files(paths, problems):
        opened = open_file(path, input_format=input_format, allow_empty=allow_empty)
        runs.extend(unique(opened.runs))
        problems.extend(opened.problems)
    return runs, problems


def read_tool_definitions(path: str | Path) -> list[ToolSpec]:
    """Read tool definitions whose schemas validate the recorded arguments.

    Args:
        path: a JSON file holding a list (or an object with ``tools``) of OpenAI function tools
            (``{"type": "function", "function": {"name", "description", "parameters"}}``);
            bare ``{"name", "parameters"}`` objects and Anthropic tools (``input_schema``) are
            read too.

    Returns:
        One :func:`~toolguard.tools._decorators.recorded_tool` spec per tool.

    Raises:
        ReplayInputError: the file cannot be read, is not such a list, a tool has no name, two
            share one, or a schema is not a valid JSON Schema.
    """
    name = str(path)
    try:
        _regular(Path(path))
        value = load_json(Path(path).read_bytes())
    except OSError as exc:
        raise ReplayInputError(name, None, f"cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ReplayInputError(name, exc.lineno, f"not valid JSON: {exc.msg} "
                                                 f"(column {exc.colno})") from None
    if isinstance(value, dict) and isinstance(value.get("tools"), list):
        value = value["tools"]
    if not isinstance(value, list):
        raise ReplayInputError(name, None, "expected a list of tool definitions")
    specs: dict[str, ToolSpec] = {}
    for i, item in enumerate(value):
        definition = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(definition, dict) or not isinstance(definition.get("name"), str):
            raise ReplayInputError(name, None, f"tool {i}: no function.name")
        tool = definition["name"]
        schema = definition.get("parameters", definition.get("input_schema"))
        if schema is not None and not isinstance(schema, dict):
            raise ReplayInputError(name, None, f"tool {tool!r}: parameters must be an object")
        if schema is not None:
            try:
                ArgsValidator(schema)
            except SchemaError as exc:
                raise ReplayInputError(name, None, f"tool {tool!r}: parameters is not a valid "
                                                   f"JSON Schema: {exc.message}") from None
        if tool in specs:
            raise ReplayInputError(name, None, f"tool {tool!r} is defined twice")
        description = definition.get("description")
        specs[tool] = recorded_tool(tool, schema,
                                    description if isinstance(description, str) else "")
    return list(specs.values())
