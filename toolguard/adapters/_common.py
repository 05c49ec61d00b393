"""What the adapters share: the lazy import, task handles, halts a framework lets through,
approval answers. No framework is imported here."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any, TypeVar

from cachetools import LRUCache

from toolguard import (
    ApprovalDecision,
    ApprovalRequest,
    Guard,
    Halt,
    PolicyError,
    Task,
    approve,
    defer,
    reject,
)

__all__ = ["Tasks", "approval_payload", "as_decision", "framework_halt", "known", "require"]

E = TypeVar("E", bound=Exception)


def require(extra: str, *modules: str) -> list[ModuleType]:
    """Import ``modules`` for the adapter of ``extra``.

    Raises:
        ImportError: one is missing; the message names ``pip install 'agent-toolguard[extra]'``.
    """
    try:
        return [importlib.import_module(name) for name in modules]
    except ImportError as exc:
        raise ImportError(
            f"toolguard.adapters needs the {extra} extra: pip install 'agent-toolguard[{extra}]' "
            f"({exc})") from exc


def known(guard: Guard, name: str, tool: Any, **options: Any) -> None:
    """Register ``tool`` (a framework's tool object, or ``name`` with ``options`` for
    :meth:`~toolguard.Guard.register`) unless the guard knows a tool called ``name``: its
    schema then validates the calls, and the policy's ``[tools.<name>]`` applies to it.

    Raises:
        PolicyError: the policy refuses it (e.g. another tool of that name appeared).
    """
    if _registered(guard, name):
        return
    try:
        guard.register(tool, **options)
    except PolicyError:
        if not _registered(guard, name):  # else another thread registered it meanwhile
            raise


def _registered(guard: Guard, name: str) -> bool:
    try:
        guard.settings(name)
    except KeyError:
        return False
    return True


class Tasks:
    """One :class:`~toolguard.Task` handle per task id, so a task's ``history`` and the
    previous results a block quotes survive from one framework call to the next (state
    itself lives in the guard's store, whatever the handle). Bounded (least recently used
    handles are dropped; their state stays in the store) and thread-safe.

    Args:
        guard: the guard. max_tasks: how many handles to keep.
    """

    def __init__(self, guard: Guard, max_tasks: int = 1024) -> None:
        self.guard = guard
        self._handles: LRUCache[str, Task] = LRUCache(max_tasks)
        self._lock = threading.Lock()

    def __call__(self, task_id: str) -> Task:
        """The handle of ``task_id`` (created on first use)."""
        with self._lock:
            task = self._handles.get(task_id)
            if task is None:
                task = self._handles[task_id] = self.guard.task(task_id)
            return task


_MIXED: dict[tuple[type[Halt], type[Exception]], type[Halt]] = {}


def _mixed(kind: type[Halt], base: type[Exception]) -> type[Halt]:
    mixed = _MIXED.get((kind, base))
    if mixed is None:
        def reduce(self: Any) -> Any:  # pickles as the plain halt: the mix is not importable
            return self.halt.__reduce__()

        mixed = _MIXED.setdefault((kind, base), type(
            kind.__name__, (kind, base), {"__reduce__": reduce, "__module__": base.__module__}))
    return mixed


def framework_halt(halt: Halt, base: type[E]) -> Halt:
    """``halt`` as an instance of both its own class (``RepeatedToolCalls``, ...) and the
    framework's ``base``: the exception class the framework lets through its ``except
    Exception`` handlers (LangGraph's ``GraphBubbleUp``, the Agents SDK's
    ``AgentsException``). ``except tg.Halt`` and ``except tg.RepeatedToolCalls`` still catch
    it; ``.halt`` is the original."""
    cls = _mixed(type(halt), base)
    exc = cls.__new__(cls)
    base.__init__(exc, str(halt))  # the framework's own attributes (e.g. run_data)
    exc.__dict__.update(halt.__dict__)
    exc.halt = halt  # type: ignore[attr-defined]
    return exc


def approval_payload(request: ApprovalRequest) -> dict[str, Any]:
    """What a human reviewer is shown (JSON-ready): tool, redacted arguments, key, reason."""
    return {"tool": request.tool, "args": dict(request.args),
            "idempotency_key": request.idempotency_key, "reason": request.reason,
            "task_id": request.task_id}


def as_decision(answer: Any) -> ApprovalDecision:
    """A reviewer's answer as a decision: ``"approve"`` / ``"reject"`` / ``"defer"``, ``True``
    / ``False``, an :class:`~toolguard.ApprovalDecision`, or a mapping
    ``{"decision": ..., "reason": ...}`` (``"type"`` and ``"message"`` are read too, as
    LangChain's human-in-the-loop answers spell them). Anything else defers, saying why."""
    if isinstance(answer, ApprovalDecision):
        return answer
    reason = ""
    if isinstance(answer, Mapping):
        reason = str(answer.get("reason") or answer.get("message") or "")
        answer = answer.get("decision", answer.get("type"))
    if answer is True or answer == "approve":
        return approve()
    if answer is False or answer == "reject":
        return reject(reason or "rejected by the reviewer")
    if answer == "defer":
        return defer(reason or "the reviewer deferred the decision")
    return defer(f"the reviewer's answer {answer!r} is not approve, reject or defer")
