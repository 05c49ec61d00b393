"""Read recorded agent runs: detect the format of a file and parse it into neutral :class:`Run`
objects that the runner replays. Nothing here knows about policies or the guard.

Formats, detected from the content (a ``.jsonl`` suffix always means the trace format):

1. **toolguard trace JSONL** (the ``../shared/cases`` format): one call per line,
   ``{"tool", "args", "result", "is_error"}``, optionally ``raw_args`` (the model's exact JSON
   text, replayed instead of ``args``), ``batch`` (calls emitted together share a value),
   ``error_type`` (``"timeout"``: the outcome is unknown), ``usage`` (``{"input_tokens",
   "output_tokens"}``, the model tokens spent to propose the call) and ``elapsed_s`` (seconds
   since the run started when the call was proposed). A line without a ``tool`` key is a header
   and starts a new run (unless it holds arguments, ``args``, ``raw_args`` or ``arguments``:
   then it is a call that lost its ``tool``, reported and skipped): its ``effects`` are kept for the
   runner, its other keys (``case``, ``run``, ``source``, ...) are the run's metadata. A line
   holding ``messages`` or ``traj`` is a whole chat run (JSONL of chat transcripts). A line with
   ``usage`` and no ``tool`` (nor a run id or ``effects``) reports the tokens of a model turn
   that proposed no call, such as the final answer: a step of the current run, not a header;
   its ``elapsed_s`` moves the clock as a call's does.
2. **OpenAI Chat Completions** messages: a message list, an object with ``messages`` (or
   ``traj``), or a list of such objects (the tau-bench layout, whose ``task_id``, ``trial`` and
   ``reward`` become metadata). ``tool_calls[].function.arguments`` is kept as the JSON text the
   model emitted. Results are matched by ``tool_call_id``; the Chat format has no error flag, so
   a result is an error when its message says ``"is_error": true`` or ``"status": "error"``, or
   its text starts with ``"Error:"`` (tau-bench's and many frameworks' convention).
   The deprecated function-calling API is read too: an assistant ``function_call``
   (``{"name", "arguments"}``) is answered by the next ``role: "function"`` message with its
   ``name``. A result that matches no earlier call without a result is reported as a problem
   (its call cannot be replayed, so the replay covers less than the run) and ignored; the
   rest of the run replays.
3. **Anthropic Messages**: ``tool_use`` blocks in assistant content, ``tool_result`` blocks
   (with ``is_error``) in user content, in the same containers as 2.

In both chat formats a user message is a new turn (an Anthropic user message made only of
``tool_result`` blocks is not), several calls in one assistant message form a batch, and a
message's ``usage`` (``prompt_tokens``/``completion_tokens`` or ``input_tokens``/
``output_tokens``) is reported before its calls.

Problems are :class:`ReplayInputError` objects naming the file and, for JSONL, the 1-based line:
an unreadable file is raised; a bad line or a bad run inside a readable file is collected and
skipped, and the rest of the file is still read.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from jsonschema.exceptions import SchemaError

from toolguard._canonical import load_json
from toolguard._decorators import ToolSpec, recorded_tool
from toolguard._errors import ToolGuardError
from toolguard._schema import ArgsValidator

__all__ = [
    "Format",
    "RecordedCall",
    "ReplayInputError",
    "Run",
    "Step",
    "TokenUsage",
    "UserTurn",
    "read_file",
    "read_runs",
    "read_tool_definitions",
]

Format: TypeAlias = Literal["trace", "openai", "anthropic"]

_CHAT_KEYS: Final = ("messages", "traj")
_ERROR_TEXT: Final = re.compile(r"^\s*Error:")
_RUN_ID_KEYS: Final = ("id", "run", "case", "run_id")


class _Malformed(Exception):
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


@dataclass(frozen=True, slots=True)
class UserTurn:
    """A new user message: progress for the ladder and ``until_change`` idempotency."""

    line: int | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Model tokens spent (counted toward ``budget.max_tokens``); ``elapsed_s``: seconds since
    the run started, from a trace line of usage alone (moves the clock, as a call's does)."""

    input_tokens: int = 0
    output_tokens: int = 0
    line: int | None = None
    elapsed_s: float | None = None


Step: TypeAlias = RecordedCall | UserTurn | TokenUsage


@dataclass(slots=True)
class Run:
    """One recorded agent run (one guard task).

    Attributes:
        id: a name unique among the runs read together (header ``run``/``case``/``id``,
            ``"{task_id}-{trial}"``, or the file name with ``#n`` for the n-th run of a file).
        file: the file it came from.
        format: ``trace``, ``openai`` or ``anthropic``.
        meta: metadata shown in the report (header keys, tau-bench ``task_id``/``trial``/
            ``reward``), JSON values.
        steps: calls, user turns and usage reports, in order.
        effects: the header's ``effects`` (tool name → ``{"effect", "args", "rules"}``), applied
            on top of the policy by the runner, or ``None``.
        line: the 1-based line where the run starts (JSONL), or ``None``.
    """

    id: str
    file: str
    format: Format
    meta: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    effects: dict[str, Any] | None = None
    line: int | None = None

    @property
    def calls(self) -> list[RecordedCall]:
        """The recorded calls, in order."""
        return [s for s in self.steps if isinstance(s, RecordedCall)]


def read_runs(paths: Sequence[str | Path]) -> tuple[list[Run], list[ReplayInputError]]:
    """Read every run of every file (a directory stands for the ``*.json``/``*.jsonl`` files
    below it, subdirectories included, sorted by path). Run ids are made unique across all
    files.

    Args:
        paths: files or directories.

    Returns:
        The runs in file order, and the problems of lines or runs that were skipped and of
        files that could not be read at all.
    """
    runs: list[Run] = []
    problems: list[ReplayInputError] = []
    for path in _expand(paths, problems):
        try:
            file_runs, file_problems = read_file(path)
        except ReplayInputError as error:
            problems.append(error)
            continue
        runs.extend(file_runs)
        problems.extend(file_problems)
    seen: dict[str, int] = {}
    for run in runs:
        n = seen.get(run.id, 0) + 1
        seen[run.id] = n
        if n > 1:
            run.id = f"{run.id}#{n}"
    return runs, problems


def _expand(paths: Sequence[str | Path], problems: list[ReplayInputError]) -> Iterator[Path]:
    for item in paths:
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix in (".json", ".jsonl"))
            if not files:
                problems.append(ReplayInputError(str(path), None, "no .json or .jsonl files"))
            yield from files
        else:
            yield path


def read_file(path: str | Path) -> tuple[list[Run], list[ReplayInputError]]:
    """Read the runs of one file, detecting its format.

    Args:
        path: a ``.jsonl`` trace, or a JSON file of chat messages (any other suffix is
            detected from the content).

    Returns:
        The runs, and the problems of lines or runs that were skipped.

    Raises:
        ReplayInputError: the file cannot be read, is empty, or is not JSON / JSONL at all.
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ReplayInputError(name, None, f"cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise ReplayInputError(name, None, "empty file")
    reader = _Reader(name, Path(path).stem)
    if Path(path).suffix == ".jsonl":
        reader.jsonl(data)
        return reader.runs, reader.problems
    try:
        value = load_json(data)
    except json.JSONDecodeError as exc:
        lines = [x for x in data.splitlines() if x.strip()]
        if len(lines) > 1 and _is_object(lines[0]):
            reader.jsonl(data)
            return reader.runs, reader.problems
        raise ReplayInputError(name, exc.lineno, f"not valid JSON: {exc.msg} "
                                                 f"(column {exc.colno})") from None
    reader.document(value)
    if not reader.runs and not reader.problems:
        raise ReplayInputError(name, None, "no runs found")
    return reader.runs, reader.problems


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(load_json(line), dict)
    except json.JSONDecodeError:
        return False


class _Reader:
    """Collects the runs and problems of one file."""

    def __init__(self, file: str, stem: str) -> None:
        self.file = file
        self.stem = stem
        self.runs: list[Run] = []
        self.problems: list[ReplayInputError] = []

    def problem(self, line: int | None, message: str) -> None:
        self.problems.append(ReplayInputError(self.file, line, message))

    def default_id(self) -> str:
        return self.stem if not self.runs else f"{self.stem}#{len(self.runs) + 1}"

    # -- one JSON document -----------------------------------------------------------------
    def document(self, value: Any) -> None:
        if isinstance(value, dict):
            if any(k in value for k in _CHAT_KEYS):
                self.chat_run(value, None, "the document")
            elif "tool" in value:
                self.trace_run([(1, value)])
            else:
                raise ReplayInputError(self.file, None, "a JSON object must hold 'messages' "
                                                        "or 'traj' (a chat transcript)")
        elif isinstance(value, list):
            runs = any(isinstance(r, dict) and any(k in r for k in _CHAT_KEYS) for r in value)
            if not runs and any(isinstance(m, dict) and "role" in m for m in value):
                # messages: one without a role is reported by _chat_steps, not the whole file
                self.chat_messages(value, {}, None, "the document")
            elif runs:
                # a list of runs: a bad element is reported and skipped, the rest replays
                for i, item in enumerate(value):
                    where = f"run {i} of the list"
                    if not isinstance(item, dict):
                        self.problem(None, f"{where}: expected an object with 'messages' or "
                                           f"'traj', got {_json_type(item)}")
                    elif any(k in item for k in _CHAT_KEYS):
                        self.chat_run(item, None, where)
                    else:
                        self.problem(None, f"{where}: an object without 'messages' or 'traj'")
            else:
                raise ReplayInputError(self.file, None, "a JSON list must hold chat messages "
                                                        "or runs (objects with 'messages')")
        else:
            raise ReplayInputError(self.file, None, "expected a JSON object or list, got "
                                                    f"{type(value).__name__}")

    # -- trace JSONL -----------------------------------------------------------------------
    def jsonl(self, data: bytes) -> None:
        chunk: list[tuple[int, dict[str, Any]]] = []
        for number, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                value = load_json(raw)
            except json.JSONDecodeError as exc:
                self.problem(number, f"not valid JSON: {exc.msg} (column {exc.colno})")
                continue
            if not isinstance(value, dict):
                self.problem(number, f"expected a JSON object, got {_json_type(value)}")
            elif any(k in value for k in _CHAT_KEYS):
                self.chat_run(value, number, f"line {number}")
            elif "tool" in value or _is_usage_line(value):
                chunk.append((number, value))  # a usage line: tokens of a turn with no call
            elif stray := sorted(_CALL_KEYS & value.keys()):  # a call that lost its tool
                self.problem(number, "a call without 'tool' (it has "
                             f"{', '.join(repr(k) for k in stray)}); line skipped")
            else:  # a header starts a new run
                if chunk:
                    self.trace_run(chunk)
                chunk = [(number, value)]
        if chunk:
            self.trace_run(chunk)
        self.problems.sort(key=lambda p: p.line or 0)  # call lines are checked per run

    def trace_run(self, chunk: list[tuple[int, dict[str, Any]]]) -> None:
        first_line, first = chunk[0]
        headed = not ("tool" in first or _is_usage_line(first))
        header: dict[str, Any] = first if headed else {}
        body = chunk[1:] if headed else chunk  # may be empty: a run without calls
        effects = header.get("effects")
        if effects is not None and not isinstance(effects, dict):
            self.problem(first_line, "header 'effects' must be an object; run skipped")
            return
        meta = {k: v for k, v in header.items() if k != "effects"}
        run = Run(_run_id(meta) or self.default_id(), self.file, "trace", meta,
                  effects=effects, line=first_line)
        for number, item in body:
            try:
                run.steps.extend(_trace_steps(item, number))
            except _Malformed as exc:
                self.problem(number, f"{exc}; line skipped")
        self.runs.append(run)

    # -- chat transcripts ------------------------------------------------------------------
    def chat_run(self, obj: Mapping[str, Any], line: int | None, where: str) -> None:
        messages = next((obj[k] for k in _CHAT_KEYS if k in obj), None)
        if not isinstance(messages, list):
            self.problem(line, f"{where}: 'messages' must be a list; run skipped")
            return
        meta = {k: v for k, v in obj.items()  # scalars only: "info" and the like are bulky
                if k not in _CHAT_KEYS and k != "system"
                and (v is None or isinstance(v, (str, int, float, bool)))}
        self.chat_messages(messages, meta, line, where)

    def chat_messages(self, messages: list[Any], meta: dict[str, Any], line: int | None,
                      where: str) -> None:
        run_id = _run_id(meta)
        if run_id is None and "task_id" in meta:
            run_id = (f"{meta['task_id']}-{meta['trial']}" if "trial" in meta
                      else str(meta["task_id"]))
        named = f"{where}{f' ({run_id})' if run_id else ''}"
        try:
            steps, fmt, orphans = _chat_steps(messages, line)
        except _Malformed as exc:
            self.problem(line, f"{named}: {exc}; run skipped")
            return
        for orphan in orphans:
            self.problem(line, f"{named}: {orphan}")
        self.runs.append(Run(run_id or self.default_id(), self.file, fmt, meta, steps,
                             line=line))


# The arguments of a call: a line with them but no "tool" is a broken call, not a header.
# (Other call keys, such as "result" or "elapsed_s", are also plausible run metadata.)
_CALL_KEYS: Final = frozenset({"args", "raw_args", "arguments"})


def _run_id(meta: Mapping[str, Any]) -> str | None:
    for key in _RUN_ID_KEYS:
        value = meta.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _is_usage_line(value: Mapping[str, Any]) -> bool:
    """A trace line that reports model tokens without a call (a turn that proposed none, such
    as the final answer): ``usage`` and no ``tool``, none of a header's keys (a run id or
    ``effects``) and no arguments (then it is a call that lost its tool). A step of the
    current run; its other keys (the answer's text, say) are not used."""
    return ("tool" not in value and "usage" in value
            and not (value.keys() & _HEADER_KEYS) and not (value.keys() & _CALL_KEYS))


_HEADER_KEYS: Final = frozenset({"effects", *_RUN_ID_KEYS})


def _trace_steps(item: Mapping[str, Any], line: int) -> list[Step]:
    if _is_usage_line(item):
        return [replace(_usage(item["usage"], line), elapsed_s=_seconds(item.get("elapsed_s")))]
    tool = item.get("tool")
    if not isinstance(tool, str) or not tool:
        raise _Malformed("'tool' must be a non-empty string")
    is_error = item.get("is_error", False)
    if not isinstance(is_error, bool):
        raise _Malformed("'is_error' must be true or false")
    raw = item.get("raw_args")
    if raw is not None and not isinstance(raw, str):
        raise _Malformed("'raw_args' must be a string (the model's JSON text)")
    args, raw = _arguments(item.get("args"), raw)
    batch = item.get("batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (str, int))):
        raise _Malformed("'batch' must be a number or a string")
    elapsed = _seconds(item.get("elapsed_s"))
    steps: list[Step] = []
    if "usage" in item:
        steps.append(_usage(item["usage"], line))
    steps.append(RecordedCall(
        tool=tool, args=args, raw_args=raw, result=item.get("result"), is_error=is_error,
        timeout=item.get("error_type") == "timeout", batch=batch, elapsed_s=elapsed, line=line,
    ))
    return steps


def _seconds(value: Any) -> float | None:
    """An ``elapsed_s`` value as float seconds (``None`` if absent)."""
    if value is None:
        return None
    seconds = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an integer beyond a float's range
            seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise _Malformed("'elapsed_s' must be a number of seconds ≥ 0")
    return seconds


def _arguments(args: Any, raw: str | None) -> tuple[Mapping[str, Any] | None, str | None]:
    """Arguments as given; anything but an object or JSON text is passed on as JSON text, so
    the guard judges it (decision ``invalid``) exactly as it would a model's."""
    if raw is not None:
        return None, raw
    if args is None or isinstance(args, dict):
        return args, None
    if isinstance(args, str):
        return None, args
    return None, json.dumps(args)


def _usage(value: Any, line: int | None) -> TokenUsage:
    if not isinstance(value, dict):
        raise _Malformed("'usage' must be an object")
    counts: list[int] = []
    for names in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        n = next((value[k] for k in names if k in value), 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise _Malformed(f"'usage.{names[0]}' must be an integer ≥ 0")
        counts.append(n)
    return TokenUsage(counts[0], counts[1], line)


def _chat_steps(messages: list[Any], line: int | None
                ) -> tuple[list[Step], Format, list[str]]:
    """Steps of one OpenAI or Anthropic message list (see the module docstring), its format,
    and a problem for each result that matches no call (the run is still replayed).

    A result goes to the earliest call with its id that has none yet: ids are not always
    unique in one transcript (tau-bench reuses some), but a result always follows its call.

    Raises:
        _Malformed: a message is malformed (the whole run is skipped).
    """
    steps: list[Step] = []
    # call id -> positions in steps of calls without a result; ids are strings, the legacy
    # API's are ("function_call", name) pairs, so no string id can take their results
    waiting: dict[CallKey, list[int]] = {}
    orphans: list[str] = []  # what the run ignores: results without a call, unknown messages
    fmt: Format = "openai"

    def deliver(call_id: Any, content: Any, error: bool, i: int) -> None:
        key: CallKey = call_id if isinstance(call_id, tuple) else str(call_id)
        positions = waiting.get(key)
        if not positions:
            # A result without its call: the transcript was cut, or its ids are wrong. Its
            # call cannot be replayed, so the replay covers less than the run: say so.
            named = (f"function {call_id[1]!r}" if isinstance(call_id, tuple)
                     else f"call id {call_id!r}")
            orphans.append(f"message {i}: a tool result for {named}, which no earlier call "
                           "without a result has; result ignored")
            return
        position = positions.pop(0)
        call = steps[position]
        assert isinstance(call, RecordedCall)  # positions index calls only
        steps[position] = replace(call, result=content, is_error=error)

    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _Malformed(f"message {i} is not an object")
        role, content = m.get("role"), m.get("content")
        if role in ("tool", "function"):  # "function": the legacy function_call API
            error = (m.get("is_error") is True or m.get("status") == "error"
                     or (isinstance(content, str) and bool(_ERROR_TEXT.match(content))))
            call_id = (m.get("tool_call_id") if role == "tool"
                       else ("function_call", str(m.get("name"))))
            deliver(call_id, content, error, i)
        elif role == "user":
            blocks = content if isinstance(content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            for block in results:
                fmt = "anthropic"
                deliver(block.get("tool_use_id"), block.get("content"),
                        block.get("is_error") is True, i)
            if not results or len(results) < len(blocks):
                steps.append(UserTurn(line))
            if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
                orphans.append(f"message {i}: a tool_use block in a user message (calls "
                               "come from the assistant); block ignored")
        elif role == "assistant":
            if m.get("usage") is not None:
                try:
                    steps.append(_usage(m["usage"], line))
                except _Malformed as exc:
                    raise _Malformed(f"message {i}: {exc}") from None
            calls, anthropic = _assistant_calls(m, i, line)
            if anthropic:
                fmt = "anthropic"
            for call_id, call in calls:
                waiting.setdefault(call_id, []).append(len(steps))
                steps.append(replace(call, batch=f"message {i}") if len(calls) > 1 else call)
            if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                orphans.append(f"message {i}: a tool_result block in an assistant message "
                               "(results come from the user); block ignored")
        elif role not in _QUIET_ROLES:
            orphans.append(f"message {i}: role {_short(role)} is not one of user, assistant, "
                           "tool, function, system or developer; message ignored")
    return steps, fmt, orphans


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


CallKey: TypeAlias = "str | tuple[str, str]"
_QUIET_ROLES: Final = ("system", "developer")  # instructions: nothing to replay


def _assistant_calls(m: Mapping[str, Any], i: int, line: int | None
                     ) -> tuple[list[tuple[CallKey, RecordedCall]], bool]:
    """The calls of one assistant message with their ids (OpenAI ``tool_calls``, then
    Anthropic ``tool_use`` blocks), and whether it held any ``tool_use`` block."""
    anthropic = False
    calls: list[tuple[CallKey, RecordedCall]] = []
    tool_calls = m.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise _Malformed(f"message {i}: 'tool_calls' must be a list")
    for tc in tool_calls:
        function = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _Malformed(f"message {i}: a tool call without function.name")
        args, raw = _arguments(function.get("arguments"), None)
        calls.append((str(tc.get("id")), RecordedCall(function["name"], args, raw, line=line)))
    legacy = m.get("function_call")
    if legacy is not None:  # the deprecated function-calling API: one call, no id; it is
        # answered by the next "function" message with its name
        if not isinstance(legacy, dict) or not isinstance(legacy.get("name"), str):
            raise _Malformed(f"message {i}: a function_call without a name")
        args, raw = _arguments(legacy.get("arguments"), None)
        calls.append((("function_call", legacy["name"]),
                      RecordedCall(legacy["name"], args, raw, line=line)))
    content = m.get("content")
    for block in content if isinstance(content, list) else []:
        if not (isinstance(block, dict) and block.get("type") == "tool_use"):
            continue
        anthropic = True
        if not isinstance(block.get("name"), str):
            raise _Malformed(f"message {i}: a tool_use block without a name")
        args, raw = _arguments(block.get("input"), None)
        calls.append((str(block.get("id")), RecordedCall(block["name"], args, raw, line=line)))
    return calls, anthropic


def read_tool_definitions(path: str | Path) -> list[ToolSpec]:
    """Read tool definitions whose schemas validate the recorded arguments.

    Args:
        path: a JSON file holding a list (or an object with ``tools``) of OpenAI function tools
            (``{"type": "function", "function": {"name", "description", "parameters"}}``);
            bare ``{"name", "parameters"}`` objects and Anthropic tools (``input_schema``) are
            read too.

    Returns:
        One :func:`~toolguard._decorators.recorded_tool` spec per tool.

    Raises:
        ReplayInputError: the file cannot be read, is not such a list, a tool has no name, two
            share one, or a schema is not a valid JSON Schema.
    """
    name = str(path)
    try:
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
