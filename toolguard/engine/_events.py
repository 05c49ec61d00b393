"""The audit stage: ``task.history`` and one :class:`~toolguard.AuditEvent` per state
transition of a call (DESIGN.md §2), to every sink of the guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from toolguard._results import ToolResult
from toolguard._types import BLOCK, Decision
from toolguard.hashing._redact import shown_args
from toolguard.stores._base import Snapshot
from toolguard.stores._base import new_tuple as _new

from ._audit import emit, event_fields
from ._call import CallRecord, _Config, _Prepared
from ._core import Verdict

if TYPE_CHECKING:
    from ._call import TaskState

_Fragment = orjson.Fragment


def record(task: TaskState, p: _Prepared, result: ToolResult, transition: str, cfg: _Config,
            halt: dict[str, Any] | None = None) -> None:
    """Keep the call in the history and emit its outcome event (``extra["final"]``; a halt's
    ``kind`` and ``budget`` from ``halt``)."""
    task.history.append(_new(CallRecord, (p.entry.spec.name, p.raw_args, result)))
    if task.guard._sinks:
        extra: dict[str, Any] = {"final": True}
        if result.idempotency_key:
            extra["idempotency_key"] = result.idempotency_key
        if halt is not None:
            extra["halt"] = halt.get("kind", "")
            if halt.get("budget"):
                extra["budget"] = halt["budget"]
        if result.observed is not None:
            extra["observed"] = str(result.observed)
        if result.error_type:
            extra["error_type"] = result.error_type
        call_event(task, p, cfg, transition, result.decision._value_, result.reason,
                   result.count, result.duration_s, extra)


def event(task: TaskState, transition: str, tool: str, decision: Decision, reason: str,
           p: _Prepared | None = None, cfg: _Config | None = None, count: int = 0,
           extra: dict[str, Any] | None = None) -> bool:
    """Emit one audit event (of the call ``p``, whose tool is ``tool``, with ``cfg``, or
    of the task); False if no sink could write it."""
    guard = task.guard
    if not guard._sinks:
        return True
    if p is None or cfg is None:
        return emit(guard._sinks, event_fields(
            guard._clock(), task.task_id, "", tool, transition, decision._value_, reason, "",
            "", {}, count, 0.0, extra or {}), None)
    return call_event(task, p, cfg, transition, decision._value_, reason, count, 0.0,
                      extra or {})


def call_event(task: TaskState, p: _Prepared, cfg: _Config, transition: str, decision: str,
               reason: str, count: int, duration_s: float, extra: dict[str, Any]) -> bool:
    """Emit one event of the call ``p``: the call's fields (the arguments as :func:`shown`)
    with this transition's; False if no sink could write it.

    The dict of the event's fields is built here whole, for each event (a dict display
    costs less than copying a dict of the call's shared fields made once per call and
    setting the transition's seven: ~5k instructions per call of two events)."""
    guard = task.guard
    args = p.redacted
    if args is None:
        args = shown(p, cfg)
    text = args if type(args) is bytes else None
    return emit(guard._sinks, {
        "time": guard._clock(), "task_id": task.task_id, "call_id": p.call_id,
        "tool": p.entry.spec.name, "transition": transition, "decision": decision,
        "reason": reason, "effect": p.effect._value_, "args_hash": p.sig,
        "args": args if text is None else _Fragment(text), "count": count,
        "duration_s": duration_s, "extra": extra}, text)


def executing(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict
               ) -> Verdict:
    """Audit the start of an execution. If no sink could write it and the policy fails
    closed (``store.on_error``), the call does not run unaudited: it is blocked."""
    if call_event(task, p, cfg, "validating->executing", verdict.decision._value_,
                  verdict.reason, snap.count, 0.0, {}):
        return verdict
    on_error = getattr(task.guard._store, "on_error", None) or cfg.policy.store.on_error
    if on_error != "fail_closed":
        return verdict
    return Verdict(BLOCK, reason="the audit event of this call could not be written, and "
                                 "the policy fails closed (store.on_error): not run unaudited")


def shown(p: _Prepared, cfg: _Config) -> dict[str, Any] | bytes:
    """The call's arguments as its audit events hold them (redacted and truncated by the
    policy's ``[audit]``; nested ones as their JSON text, see
    :func:`toolguard.hashing._redact.shown_args`), computed once per call and kept on
    ``p``."""
    if p.redacted is None:
        audit = cfg.policy.audit
        p.redacted = shown_args(p.args, audit.redact_pattern, audit.max_value_chars, p.text)
    return p.redacted


def redacted(p: _Prepared, cfg: _Config) -> dict[str, Any]:
    """The call's arguments as halts show them (as :func:`shown`): a dict, a copy of its
    own when the events hold the text."""
    args = shown(p, cfg)
    if isinstance(args, bytes):
        decoded: dict[str, Any] = orjson.loads(args)
        return decoded
    return args
