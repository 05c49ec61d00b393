"""Audit events and their sinks (after structlog: events flow through processors to sinks).

Every state transition of a call is one :class:`AuditEvent`. The finite-state machine is
DESIGN.md §2's: ``planning`` → ``validating`` → ``executing`` → ``planning``; ``validating``
→ ``needs_review`` (approval needed) or ``failed`` (halt); ``planning`` → ``completed``
when the task ends. Arguments are redacted (:func:`redact`) once per call, before its first
event is built, so no sink ever sees a secret. Every event of the call holds that one redacted
form: flat arguments as a dict, nested ones as their JSON text, which :class:`JsonlSink` writes
into each line as it is and from which ``event.args`` decodes a copy of the event's own on
first read (no tool that changes its arguments in place changes what was logged).

Sinks are callables taking one event. Built in: :class:`LoggingSink` (stdlib ``logging``),
:class:`JsonlSink` (append-only file, flushed per event, safe across threads),
:class:`MemorySink` (for tests) — and any callable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from pathlib import Path

from toolguard.hashing._redact import (
    REDACTED,
    KeyPattern,
    _safe_repr,
    _secret_key,
    redact,
    redact_text,
    secrets_in,
)

__all__ = [
    "AuditEvent",
    "AuditSink",
    "JsonlSink",
    "LoggingSink",
    "MemorySink",
    "redact",
    "scrub",
]

@dataclass(frozen=True)
class AuditEvent:
    """One transition of one call (or of the task).

    Attributes:
        time: clock time in seconds. task_id, call_id, tool: what it concerns.
        transition: ``"from->to"`` FSM states, e.g. ``"validating->executing"``.
        decision: the guard's decision (value of :class:`toolguard.Decision`), or "".
        reason: why. effect: readonly / mutating / poll. args_hash: 32 hex digits.
        args: the arguments, redacted. count: repeat count. duration_s: execution seconds.
        extra: anything else (budget figures, approval state, observed decision, errors).
            Keys the guard sets: ``final`` (True on the one event that records a call's
            outcome), ``idempotency_key``, ``halt`` (the halt's kind, e.g.
            ``"RepeatedToolCalls"``) and ``budget`` (the budget that halted it),
            ``observed`` (the decision a shadow policy would have taken), ``error_type``
            (the exception a tool raised), ``usage`` (on a task's end: its
            :class:`toolguard.Usage` figures).
    """

    time: float
    task_id: str
    call_id: str
    tool: str
    transition: str
    decision: str = ""
    reason: str = ""
    effect: str = ""
    args_hash: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    count: int = 0
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The event's fields as a dict. Shallow: ``args`` and ``extra`` are the event's own
        (redacted) objects, not copies, so a sink must not change them."""
        return {name: getattr(self, name) for name in _EVENT_FIELDS}

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the fields, ``args`` decoded (see :class:`_ArgsField`)."""
        return self.to_dict()


class _ArgsField:
    """``AuditEvent.args``: the value in the event's ``__dict__``, or, where the engine put
    the arguments' JSON text (an ``orjson.Fragment``, which ``orjson.dumps`` of the event
    writes as it is, and the bytes under :data:`_TEXT`), a dict decoded from that text on
    the first read and kept. A data descriptor, so every read passes here."""

    def __get__(self, event: AuditEvent | None, owner: type | None = None) -> Any:
        if event is None:
            return self
        state = event.__dict__
        args = state["args"]
        if type(args) is orjson.Fragment:
            args = state["args"] = orjson.loads(state[_TEXT])  # a race decodes it twice
        return args

    def __set__(self, event: AuditEvent, value: dict[str, Any]) -> None:
        event.__dict__["args"] = value  # by the dataclass's __init__ (it is frozen)


AuditEvent.args = _ArgsField()  # type: ignore[assignment]
_TEXT: Final = "_args_json"  # the key of the arguments' JSON text in an event's __dict__
_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent))
_new = object.__new__
_set = object.__setattr__
_Fragment = orjson.Fragment
_dumps = orjson.dumps


def event_fields(time: float, task_id: str, call_id: str, tool: str, transition: str,
                 decision: str, reason: str, effect: str, args_hash: str,
                 args: dict[str, Any] | bytes, count: int, duration_s: float,
                 extra: dict[str, Any]) -> dict[str, Any]:
    """The fields of one event as the engine gives them to :func:`emit`: a dict of every
    field, in the class's order (the order of a JSONL line's keys). ``args`` as bytes: the
    arguments' JSON text, held as an ``orjson.Fragment`` (see :func:`new_event`)."""
    return {
        "time": time, "task_id": task_id, "call_id": call_id, "tool": tool,
        "transition": transition, "decision": decision, "reason": reason, "effect": effect,
        "args_hash": args_hash, "args": _Fragment(args) if type(args) is bytes else args,
        "count": count, "duration_s": duration_s, "extra": extra}


def new_event(state: dict[str, Any], text: bytes | None) -> AuditEvent:
    """The :class:`AuditEvent` of ``state`` (:func:`event_fields`), which becomes its
    ``__dict__``: its attributes set in one step (a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, most of an event's cost). ``text``: the arguments'
    JSON text where ``state["args"]`` is its ``orjson.Fragment``, decoded only when read
    (:class:`_ArgsField`); the event then holds a copy of ``state`` with it."""
    event = _new(AuditEvent)
    _set(event, "__dict__", state if text is None else {**state, _TEXT: text})
    return event


def emit(sinks: tuple[AuditSink, ...], state: dict[str, Any], text: bytes | None) -> bool:
    """Give the event of ``state`` (:func:`event_fields`; ``text``: see :func:`new_event`)
    to every sink; False if none could write it. The event is made for what each sink
    takes, at most once: a :class:`JsonlSink` takes its JSON line, ``state`` serialized as
    it is (the same bytes as :func:`_jsonl` of its :class:`AuditEvent`: a dataclass is
    written as the dict of its fields, in order), or, where it cannot be serialized so,
    that function's line of the event; any other sink the :class:`AuditEvent`. A broken
    sink does not break the call, but it is never silent: the log says which event it did
    not write."""
    written = False
    line: bytes | None = None
    event: AuditEvent | None = None
    for sink in sinks:
        try:
            if type(sink) is JsonlSink:
                if line is None:  # state serialized as it is (see the docstring)
                    try:
                        line = _dumps(state, default=_safe_repr, option=_LINE)
                    except (TypeError, orjson.JSONEncodeError):
                        line = _jsonl(new_event(state, text))
                sink._append(line)
            else:
                if event is None:
                    event = new_event(state, text)
                sink(event)
            written = True
        except Exception:  # noqa: BLE001 - logged: a broken sink does not break the call
            _log.exception("toolguard: audit sink %r failed: the event %s %s of %s (%s) "
                           "was NOT written", sink, state["transition"], state["decision"],
                           state["call_id"] or state["task_id"], state["tool"])
    return written

AuditSink = Callable[[AuditEvent], None]


def scrub(message: str, path: Sequence[str | int] | None, quoted: Any,
          pattern: KeyPattern | None) -> str:
    """``message``, a validation problem at ``path`` (``["flights", 1]``) that may quote the
    offending value ``quoted``, without the secrets it could show: all of ``quoted`` when a key
    on ``path`` matches ``pattern``, else the value of every key matching ``pattern`` at any
    depth of ``quoted`` (``[{'token': '…'}] is not of type 'object'``), each replaced by
    ``"[REDACTED]"``; and credentials of a known shape too
    (:func:`toolguard.hashing._redact.redact_text`). A message quotes nothing but ``quoted`` and
    schema values, so the search is bounded by the failing value, not the arguments."""
    if pattern is not None:
        inside = any(isinstance(key, str) and _secret_key(key, pattern) for key in path or ())
        for value in [quoted] if inside else secrets_in(quoted, pattern):
            if value is None or value == "":
                continue
            text = value if isinstance(value, str) else _safe_repr(value)
            message = message.replace(_safe_repr(value), REDACTED).replace(text, REDACTED)
    return redact_text(message)


class MemorySink:
    """Keeps events in ``self.events`` (a list). Thread-safe appends (list.append is atomic)."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def __call__(self, event: AuditEvent) -> None:
        self.events.append(event)


class LoggingSink:
    """Sends each event to a stdlib logger (default ``logging.getLogger("toolguard.audit")``)
    at INFO, or WARNING for block, halt, review and invalid decisions, with the event dict
    as ``extra={"audit": ...}``."""

    _LOUD = frozenset({"block", "halt", "review", "invalid"})

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("toolguard.audit")

    def __call__(self, event: AuditEvent) -> None:
        level = logging.WARNING if event.decision in self._LOUD else logging.INFO
        if self.logger.isEnabledFor(level):
            self.logger.log(
                level, "%s %s %s %s%s", event.task_id, event.tool, event.transition,
                event.decision, f": {event.reason}" if event.reason else "",
                extra={"audit": event.to_dict()},
            )


_LINE: Final = orjson.OPT_APPEND_NEWLINE
_log = logging.getLogger("toolguard")


def _jsonl(event: AuditEvent) -> bytes:
    """One JSON line of ``event``; strings that are not valid Unicode (a lone surrogate, which
    UTF-8 cannot hold) written with the surrogate as ``\\udXXX`` text, and ``args`` and
    ``extra`` replaced by a note when even that cannot be serialized.

    The nested arguments of the engine's events are their JSON text, made once per call and
    written into each line as it is (an ``orjson.Fragment``, see :func:`new_event`)."""
    try:  # orjson writes the dataclass itself: no dict is built, nothing copied
        return orjson.dumps(event, default=_safe_repr, option=_LINE)
    except (TypeError, orjson.JSONEncodeError):
        pass
    record = event.to_dict()
    try:
        return orjson.dumps(_valid_text(record), default=_safe_repr, option=_LINE)
    except (TypeError, orjson.JSONEncodeError, RecursionError) as exc:
        note = {"$unserializable": f"{type(exc).__name__}: {exc}"}
        return orjson.dumps(_valid_text({**record, "args": note, "extra": note}),
                            default=_safe_repr, option=_LINE)


def _valid_text(value: Any) -> Any:
    """``value`` with every string (keys too) valid Unicode: a lone surrogate becomes its
    ``\\udXXX`` escape (``backslashreplace``)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_valid_text(v) for v in value]
    return value


class JsonlSink:
    """Appends one JSON line per event to ``path`` and flushes it at once.

    Safe across threads (a lock serializes writes). The file is opened in append mode, so
    several processes may share it line by line on POSIX. Close with :meth:`close` or use as
    a context manager.
    """

    def __init__(self, path: str | Path) -> None:
        from pathlib import Path  # with the first JSONL sink, not with import toolguard

        self.path = Path(path)
        self._lock = threading.Lock()
        # unbuffered: each line goes to the file in one write(2) of its own, nothing is held
        self._file = self.path.open("ab", buffering=0)

    def __call__(self, event: AuditEvent) -> None:
        """Write ``event`` as one line. Values JSON cannot hold are written as their
        ``repr``; if the event still cannot be serialized (an ``extra`` nested too deeply),
        its ``args`` and ``extra`` are replaced by a note saying why, so the event itself is
        never dropped.

        Raises:
            OSError: the file cannot be written (the guard logs that the event was lost).
        """
        self._append(_jsonl(event))

    def _append(self, line: bytes) -> None:
        """Write ``line`` whole: one write(2), and what one cut short left (a signal, a full
        disk) before any other thread of the process writes."""
        lock = self._lock
        lock.acquire()  # acquire and release: half the instructions of `with`
        try:
            written = self._file.write(line)
            if written != len(line):
                self._write_rest(memoryview(line)[written or 0:])
        finally:
            lock.release()

    def _write_rest(self, rest: memoryview) -> None:
        while rest:
            written = self._file.write(rest)
            if not written:
                raise OSError(f"could not write the audit line to {self.path}")
            rest = rest[written:]

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
