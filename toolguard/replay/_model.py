"""The neutral model every reader produces (:class:`Run` of :data:`Step` objects), the
:class:`Source` a reader reads from (one file: its problems, notes and counters) and the small
helpers that several readers share. Nothing here knows about policies or the guard."""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

import orjson

from toolguard._errors import ToolGuardError
from toolguard._results import _fast_constructor
from toolguard.hashing._json_text import load_json

from ._reading import HEAD_BYTES, _blocks

__all__ = [
    "Malformed",
    "Reader",
    "RecordedCall",
    "ReplayInputError",
    "ReplayNote",
    "Run",
    "Source",
    "Step",
    "TokenUsage",
    "UserTurn",
]

RUN_ID_KEYS: Final = ("id", "run", "case", "run_id")


class Malformed(Exception):
    """A line or message does not have the expected shape (becomes a ReplayInputError)."""


class ReplayInputError(ToolGuardError, ValueError):
    """A recorded transcript could not be read (or one line or run of it).

    Attributes:
        file: the file, as given.
        line: the 1-based line (JSONL), or ``None`` when the problem is not tied to one line.
        message: what is wrong, e.g. ``"not valid JSON: unexpected character (column 3)"``.
    """

    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file = file
        self.line = line
        self.message = message
        super().__init__(f"{file}:{line}: {message}" if line is not None else f"{file}: {message}")

    def __reduce__(self) -> tuple[type[ReplayInputError], tuple[str, int | None, str]]:
        # pickled by its fields (a worker of ``replay --jobs`` sends it back)
        return type(self), (self.file, self.line, self.message)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One tool call the agent proposed, with what the unguarded run got back.

    Attributes:
        tool: the tool name.
        args: the arguments as an object, or ``None`` when ``raw_args`` holds them.
        raw_args: the exact JSON text the model emitted (replayed as is, so malformed text is
            decision ``invalid`` exactly as at run time), or ``None``.
        result: the recorded result (any JSON value; ``None`` if none was recorded).
        is_error: the recorded result is an error.
        timeout: the call timed out: its real outcome is unknown.
        batch: calls with the same non-``None`` value, one after another, were emitted together
            in one model message.
        elapsed_s: seconds since the run started when the call was proposed, or ``None``.
        line: the 1-based line in a JSONL file, or ``None``.
    """

    tool: str
    args: Mapping[str, Any] | None = None
    raw_args: str | None = None
    result: Any = None
    is_error: bool = False
    timeout: bool = False
    batch: str | int | None = None
    elapsed_s: float | None = None
    line: int | None = None

    @property
    def arguments(self) -> Mapping[str, Any] | str | None:
        """What the guard receives: ``raw_args`` when recorded, else ``args``."""
        return self.raw_args if self.raw_args is not None else self.args

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields in order (``--jobs`` sends every call to a worker; a frozen
        slotted dataclass's own state functions cost ~3x that)."""
        return _unpickled_call, (self.tool, self.args, self.raw_args, self.result, self.is_error,
                          self.timeout, self.batch, self.elapsed_s, self.line)


new_call: Final[Callable[..., RecordedCall]] = _fast_constructor(RecordedCall)
"""``RecordedCall(...)`` (its fields in order) without the frozen dataclass's per-field
``object.__setattr__``: one per recorded call."""


def _unpickled_call(*fields: Any) -> RecordedCall:
    """:data:`new_call` under a name pickle can find."""
    return new_call(*fields)


@dataclass(frozen=True, slots=True)
class UserTurn:
    """A new user message: progress for the ladder and ``until_change`` idempotency."""

    line: int | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Model tokens spent (counted toward ``budget.max_tokens``); ``elapsed_s``: seconds since
    the run started, from a trace line of usage alone (moves the clock, as a call's does);
    ``model``: the model that spent them, where the recording names it (prices them for
    ``budget.max_cost_usd``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    line: int | None = None
    elapsed_s: float | None = None
    model: str | None = None


Step: TypeAlias = RecordedCall | UserTurn | TokenUsage


@dataclass(slots=True)
class Run:
    """One recorded agent run (one guard task).

    Attributes:
        id: a name unique among the runs read together (header ``run``/``case``/``id``,
            ``"{task_id}-{trial}"``, or the file name with ``#n`` for the n-th run of a file).
        file: the file it came from.
        format: the name of the reader that read it (``toolguard replay --list-formats``);
            ``openai`` or ``anthropic`` for the chat formats.
        meta: metadata shown in the report (header keys, tau-bench ``task_id``/``trial``/
            ``reward``), JSON values.
        steps: calls, user turns and usage reports, in order.
        effects: the header's ``effects`` (tool name → ``{"effect", "args", "rules"}``), applied
            on top of the policy by the runner, or ``None``.
        line: the 1-based line where the run starts (JSONL), or ``None``.
    """

    id: str
    file: str
    format: str
    meta: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    effects: dict[str, Any] | None = None
    line: int | None = None

    @property
    def calls(self) -> list[RecordedCall]:
        """The recorded calls, in order."""
        return [s for s in self.steps if isinstance(s, RecordedCall)]


def run_id(meta: Mapping[str, Any]) -> str | None:
    for key in RUN_ID_KEYS:
        value = meta.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def seconds(value: Any) -> float | None:
    """An ``elapsed_s`` value as float seconds (``None`` if absent)."""
    if value is None:
        return None
    seconds = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an integer beyond a float's range
            seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise Malformed("'elapsed_s' must be a number of seconds ≥ 0")
    return seconds


def arguments(args: Any, raw: str | None) -> tuple[Mapping[str, Any] | None, str | None]:
    """Arguments as given; anything but an object or JSON text is passed on as JSON text, so
    the guard judges it (decision ``invalid``) exactly as it would a model's."""
    if raw is not None:
        return None, raw
    if args is None or isinstance(args, dict):
        return args, None
    if isinstance(args, str):
        return None, args
    return None, json.dumps(args)


def usage(value: Any, line: int | None) -> TokenUsage:
    if not isinstance(value, dict):
        raise Malformed("'usage' must be an object")
    counts: list[int] = []
    for names in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        n = next((value[k] for k in names if k in value), 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise Malformed(f"'usage.{names[0]}' must be an integer ≥ 0")
        counts.append(n)
    return TokenUsage(counts[0], counts[1], line, model=model_name(value))


def model_name(value: Any) -> str | None:
    """``value["model"]`` when ``value`` is an object and that is a non-empty string."""
    model = value.get("model") if isinstance(value, dict) else None
    return model if isinstance(model, str) and model else None


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_SANITIZED: Final = re.compile(r"\[REDACTED_[A-Z_]+ len=\d+ sha=[0-9a-f]+\]")


def call_arguments(text: Any, source: Source, line: int | None
                   ) -> tuple[Mapping[str, Any] | None, str | None]:
    """Arguments recorded as the model's JSON text (``function.arguments``): kept as text so
    malformed JSON is ``invalid`` as at run time, except a sanitizer's placeholder
    (``[REDACTED_ARGUMENTS len=N sha=X]``, as in published fixtures whose arguments were
    scrubbed): the original was valid (the tool ran), so it becomes ``{"redacted": text}`` and
    identical placeholders (same original text) are still the same call; noted once."""
    if isinstance(text, str) and _SANITIZED.fullmatch(text.strip()):
        source.unrecognised("arguments replaced by a sanitizer's placeholder; a repeat is "
                            "judged by the placeholder (same hash = same original text)", line)
        return {"redacted": text.strip()}, None
    return arguments(text, None)


@dataclass(frozen=True, slots=True)
class ReplayNote:
    """Something a reader met and did not use, counted per kind (not an error: the exit code
    does not change). ``line``: the first line of that kind (JSONL), or ``None``."""

    file: str
    message: str
    count: int = 1
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        times = f" ({self.count} times)" if self.count > 1 else ""
        return f"{where}: note: {self.message}{times}"


class Source:
    """One file being read by one reader: what readers report while reading it.

    Attributes:
        path: the file. file: its name as given. format: the reader's name.
        problems: lines or runs that were skipped (exit 2).
        model_turns: model messages seen (a file with some and no call is a chat without tools,
            not an unread file).
        calls: calls in the runs read so far. runs: runs handed on so far.
        no_calls_by_design: set by a reader when the file is one its tool writes without any
            conversation (say, a Claude Code file of summaries only): then no call is a note.
    """

    def __init__(self, path: Path, format_name: str) -> None:
        self.path = path
        self.file = str(path)
        self.format = format_name
        self.problems: list[ReplayInputError] = []
        self.model_turns = 0
        self.calls = 0
        self.uncaptured = 0
        self.no_calls_by_design: str | None = None  # why this file has no call, if it is fine
        self.forced = False  # the format was given (--input-format), not detected
        self._kinds: Counter[str] = Counter()
        self._first: dict[str, int | None] = {}
        self.runs = 0  # runs handed on so far
        # a portion of the file (``replay --jobs``): its first byte, size and lines before
        self.portion: tuple[int, int, int] | None = None
        self.defaulted: list[int] = []  # in a portion: the runs named by default_id
        self.bad: dict[str, list[tuple[int, str]]] = {}  # json_lines: kind -> (line, message)
        name = path.name
        for suffix in (".traj.json", ".jsonl", ".json", ".traj", ".eval"):
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        self.stem = name

    def problem(self, line: int | None, message: str) -> None:
        """Report a line or run that was skipped."""
        self.problems.append(ReplayInputError(self.file, line, message))

    def unrecognised(self, kind: str, line: int | None = None) -> None:
        """Count a record the reader does not use; reported once per ``kind``."""
        self._kinds[kind] += 1
        self._first.setdefault(kind, line)

    def add(self, part: Source) -> None:
        """Count in what was met reading a later portion of the same file (``--jobs``)."""
        self.runs += part.runs
        self.calls += part.calls
        self.model_turns += part.model_turns
        self.uncaptured += part.uncaptured
        self.problems += part.problems
        for kind, lines in part.bad.items():
            self.bad.setdefault(kind, []).extend(lines)
        self._kinds.update(part._kinds)
        for kind, line in part._first.items():
            self._first.setdefault(kind, line)

    @property
    def notes(self) -> list[ReplayNote]:
        """One note per kind of record left unused, with its count."""
        return [ReplayNote(self.file, kind, n, self._first[kind])
                for kind, n in self._kinds.items()]

    def default_id(self) -> str:
        """The file's stem for its first run; ``stem#n`` for a later run without an id of its
        own (``n``: its position in the file)."""
        if self.portion is not None:  # the runs before the portion are not known here
            self.defaulted.append(self.runs)
        return default_id(self.stem, self.runs)

    def read_head(self) -> bytes:
        """The first :data:`HEAD_BYTES` of the file (empty if it cannot be read)."""
        try:
            with self.path.open("rb") as handle:
                return handle.read(HEAD_BYTES)
        except OSError:
            return b""

    def read_bytes(self) -> bytes:
        """The whole file.

        Raises:
            ReplayInputError: it cannot be read, or is empty.
        """
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ReplayInputError(self.file, None, f"cannot read: {exc.strerror or exc}"
                                   ) from None
        if not data.strip():
            raise ReplayInputError(self.file, None, "empty file")
        return data

    def load_json(self, data: bytes | None = None) -> Any:
        """The file (or ``data``) as one JSON document.

        Raises:
            ReplayInputError: unreadable, empty, or not valid JSON.
        """
        raw = self.read_bytes() if data is None else data
        try:
            return load_json(raw)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(self.file, exc.lineno, f"not valid JSON ({self.format}): "
                                   f"{exc.msg} (column {exc.colno})") from None
        except RecursionError:
            raise ReplayInputError(self.file, None, "JSON nested too deeply") from None

    def json_lines(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each non-blank line as a JSON object with its 1-based number, read line by line
        (memory bounded by the longest line). A line that is not a JSON object is a problem
        naming its line; several of one kind (a pretty-printed JSON document read as JSON
        lines: every line) are one problem with their count, at the first of them.

        Raises:
            ReplayInputError: the file cannot be opened.
        """
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise ReplayInputError(self.file, None, f"cannot read: {exc.strerror or exc}"
                                   ) from None
        bad = self.bad  # kind -> (line, its message), in order
        start, size, before = self.portion or (0, None, 0)
        try:
            with handle:
                handle.seek(start)
                for first, block, long_runs in _blocks(handle, size, before):
                    for index, raw in enumerate(block):
                        if raw.isspace():  # bytes.strip() strips the same ASCII whitespace
                            continue
                        try:
                            if index in long_runs:
                                value = load_json(raw)
                            else:  # load_json(raw) by orjson alone (see _blocks)
                                try:
                                    value = orjson.loads(raw)
                                except orjson.JSONDecodeError:  # load_json reads a lone
                                    # surrogate escape, or says what is wrong
                                    value = load_json(raw)
                        except json.JSONDecodeError as exc:
                            bad.setdefault("not valid JSON", []).append(
                                (first + index + 1,
                                 f"not valid JSON: {exc.msg} (column {exc.colno})"))
                            continue
                        except RecursionError:
                            bad.setdefault("nested", []).append(
                                (first + index + 1, "JSON nested too deeply; line skipped"))
                            continue
                        if not isinstance(value, dict):
                            kind = f"expected a JSON object, got {json_type(value)}"
                            bad.setdefault(kind, []).append((first + index + 1, kind))
                            continue
                        yield first + index + 1, value
        finally:
            if self.portion is None:  # a portion's are merged with the others' first
                self.report_bad_lines()

    def report_bad_lines(self) -> None:
        """The lines :meth:`json_lines` skipped as problems: one per kind, at its first line,
        with the number of the others."""
        for lines in self.bad.values():
            first, message = lines[0]
            if len(lines) > 1:
                message = (f"{message.removesuffix('; line skipped')}, and "
                           f"{len(lines) - 1} more line(s) like it; {len(lines)} lines "
                           "skipped (not JSON lines? see --input-format)")
            self.problem(first, message)
        self.bad = {}


def default_id(stem: str, runs: int) -> str:
    """The id of a file's run that has none, after ``runs`` runs (see
    :meth:`Source.default_id`)."""
    return stem if not runs else f"{stem}#{runs + 1}"


def unrecorded_args(source: Source, line: int | None) -> dict[str, Any]:
    """Arguments for a call whose arguments were not recorded (a span without them): unique
    per call, so the call counts toward budgets but is never taken for a repeat; noted once."""
    source.unrecognised("tool calls without recorded arguments: counted, but not judged for "
                        "repeats", line)
    source.uncaptured += 1
    return {"(arguments not recorded)": source.uncaptured}


def usage_counts(value: Any, inputs: tuple[str, ...], outputs: tuple[str, ...],
                 line: int | None = None, model: str | None = None) -> TokenUsage | None:
    """A :class:`TokenUsage` from the first integer key of ``inputs`` (summed: Anthropic counts
    cache reads and writes apart from ``input_tokens``) and of ``outputs``; ``None`` when
    ``value`` is not an object or holds none of them."""
    if not isinstance(value, dict):
        return None

    def count(keys: tuple[str, ...]) -> int | None:
        found = [value[k] for k in keys
                 if isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
                 and value[k] >= 0]
        return sum(found) if found else None

    spent_in, spent_out = count(inputs), count(outputs)
    if spent_in is None and spent_out is None:
        return None
    return TokenUsage(spent_in or 0, spent_out or 0, line, model=model)


@dataclass(frozen=True, slots=True)
class Reader:
    """One input format.

    Attributes:
        name: what ``--input-format`` takes and the report's run ``format`` says (the chat
            reader says ``openai`` or ``anthropic`` per run).
        description: one line for ``--list-formats``.
        suffixes: file name endings a directory walk includes (``.jsonl``, ``.traj``, ...).
        detect: ``(path, head bytes) -> bool``: this file is in this format.
        read: the runs of one file, lazily; problems and unused records go to the source.
        calls_expected: a file of this format without calls is a problem even if the model
            spoke (a trace or a trajectory is nothing but its calls).
    """

    name: str
    description: str
    suffixes: tuple[str, ...]
    detect: Callable[[Path, bytes], bool]
    read: Callable[[Source], Iterator[Run]]
    calls_expected: bool = False
