"""The in-memory call path: ``call`` and ``acall`` on a guard whose store is a plain
:class:`~toolguard.stores.memory.MemoryStore`, in enforce mode with no audit sink, run
prepare -> begin -> decide -> execute -> record without the general path's layers:
:func:`_memory_front` prepares, begins and decides, :func:`_memory_sync` /
:func:`_memory_async` run the tool (awaiting what ``acall``'s tool or ``run`` returns), and
:func:`_memory_record` records the outcome for both.

The stages are those of :func:`toolguard._pipeline._front` and the functions it hands over
to, with what only they need left out: no ``BeginRequest`` / ``FinishRequest`` tuples (the
store's ``begin_fields`` / ``finish_fields`` take the fields as arguments), no outcome record
for a success, one clock read for begin and the decision (the store's own clock when it is
the guard's, as for the store the guard builds), a call that does not run recorded without
``_conclude`` (it holds no claim: nothing to release). Whatever is not the plain case is the
general path's: a halt, a claim to release, a failed or unknown outcome (``_conclude``), an
approval, a wait for an identical call, the failure budget, and under ``acall`` a sync tool
without ``run`` (it runs in a worker thread, which a cancellation leaves running: the
pipeline). ``tests/test_fast_path.py`` checks that random call sequences give the same
results, history and state with this path on and off, for ``call`` and ``acall``.

:func:`begin_remote` and :func:`end_remote` are the same two halves for a caller whose tool
runs elsewhere and answers in a callback (the MCP proxy's upstream), with nothing awaited
between a message and what it causes; the same tests run them against ``acall``.
"""

from __future__ import annotations

from contextvars import Token
from inspect import isawaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any

from ._admit import _begin_failed
from ._call import CallRecord, Executor, _Config, _Outcome, _Prepared
from ._context import CURRENT_KEY as _CURRENT_KEY
from ._core import CallContext, Verdict, decide, stagnation_after, stagnation_possible
from ._execute import _close_awaitable
from ._limits import UNKNOWN_TOOLS
from ._outcomes import forwarded_key
from ._pipeline import _failed, _interrupted, _origin
from ._record import _digest, _executed_result, _finish_failed, progress_of
from ._results import ToolResult
from ._types import ALLOW, ENFORCE, HALT, MUTATING, POLL, WARN
from .stores._base import Snapshot
from .stores._base import new_tuple as _new
from .stores.memory import MemoryStore

if TYPE_CHECKING:
    from ._engine import Task

Front = tuple[ToolResult, BaseException | None] | tuple[None, tuple[_Prepared, Snapshot]]
"""``(result, the tool's exception)`` of a call this path finished, or ``(None, (p, snap))``:
the pipeline takes the prepared and begun call over (an approval, a wait, a budget, a
worker thread)."""
Begun = tuple[_Prepared, Snapshot, Verdict]
"""``(p, snap, verdict)`` of a call :func:`_memory_front` lets run now."""


def _memory_sync(task: Task, cfg: _Config, store: MemoryStore, tool: str, raw: Any,
                 executor: Executor | None) -> Front:
    """One ``call`` on ``store`` (see the module docstring)."""
    front = _memory_front(task, cfg, store, tool, raw, executor)
    if len(front) == 2:  # done, or the pipeline's
        return front
    p, snap, verdict = front
    # _execute._execute_sync, without the outcome record of a success
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = perf_counter()
    failed: _Outcome | None = None
    try:
        value = executor(p.args) if executor is not None else p.entry.call(**p.args)
        if p.entry.maybe_async and isawaitable(value):
            value = _close_awaitable(value, p)
    except BaseException as exc:  # noqa: BLE001 - _raised re-raises an interruption
        value, failed = None, _raised(task, cfg, tool, p, snap, exc, token, start)
    return _memory_record(task, cfg, store, tool, p, snap, verdict, value, failed, token,
                          start)


async def _memory_async(task: Task, cfg: _Config, store: MemoryStore, tool: str, raw: Any,
                        executor: Executor | None) -> Front:
    """One ``acall`` on ``store`` (see the module docstring); on the event loop's thread."""
    front = _memory_front(task, cfg, store, tool, raw, executor)
    if len(front) == 2:  # done, or the pipeline's
        return front
    p, snap, verdict = front
    if executor is None and p.entry.in_thread:  # a worker thread: the pipeline detaches it
        return None, (p, snap)
    # _execute._execute_async on the loop's thread, without the outcome record of a success
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = perf_counter()
    failed: _Outcome | None = None
    try:
        value = executor(p.args) if executor is not None else p.entry.call(**p.args)
        if isawaitable(value):
            value = await value
    except BaseException as exc:  # noqa: BLE001 - e.g. cancelled: _raised re-raises it
        value, failed = None, _raised(task, cfg, tool, p, snap, exc, token, start)
    return _memory_record(task, cfg, store, tool, p, snap, verdict, value, failed, token,
                          start)


def _memory_front(task: Task, cfg: _Config, store: MemoryStore, tool: str, raw: Any,
                  executor: Executor | None) -> Front | Begun:
    """Prepare, begin and decide one call on ``store``: a :data:`Front` (the result of a
    call that does not run; a halt raises), or the :data:`Begun` call that runs now."""
    claimed: tuple[_Prepared, Snapshot] | None = None
    guard = task.guard
    try:
        prepared = task._prepare(cfg, tool, raw, executor is not None)
        if type(prepared) is ToolResult:
            task.history.append(_new(CallRecord, (tool, raw, prepared)))
            return prepared, None
        p: _Prepared = prepared  # type: ignore[assignment]  # not a ToolResult: tested above
        entry = p.entry
        settings = entry.settings
        effect = p.effect
        policy = cfg.policy
        clock = guard._clock
        now = clock()
        try:
            snap = store.begin_fields(  # _admit._begin's request, as arguments
                task.task_id, UNKNOWN_TOOLS if entry.unknown else entry.spec.name,
                p.signature, p.key if effect is MUTATING or settings.requires_approval else "",
                p.claim, p.task_scope, True, effect is POLL, now,
                policy.idempotency.in_progress_ttl_s, p.call_id, settings.idempotency_ttl_s,
                now if store._clock is clock else None)
        except Exception as exc:  # noqa: BLE001 - _begin_failed re-raises or falls back
            snap = _begin_failed(task, cfg, p, exc, now)
        if snap.claimed:
            claimed = (p, snap)
        verdict = decide(_new(CallContext, (  # _admit._decide's context, read at begin's time
            task.task_id, entry.spec.name, settings, effect, p.sig, p.key, p.invalid,
            policy.budget, policy.approval.timeout_s, now, p.denied, p.exact,
        )), snap)
        decision = verdict.decision
        if verdict.ask_approval or verdict.wait:
            return None, (p, snap)
        if decision is not ALLOW and decision is not WARN:  # not run
            if decision is HALT or snap.claimed:
                return task._conclude(cfg, p, snap, verdict, None, None), None
            result = task._synthetic(p, snap, verdict)
            task.history.append(_new(CallRecord, (entry.spec.name, p.raw_args, result)))
            return result, None
        if snap.approval is not None or policy.budget.max_consecutive_failures is not None:
            return None, (p, snap)
        if snap.record is not None:
            _origin(p, snap)
    except BaseException as exc:
        _failed(task, cfg, tool, exc, claimed, False)
        raise
    return p, snap, verdict


def _final(p: _Prepared, snap: Snapshot, verdict: Verdict) -> bool:
    """Whether :func:`_memory_record` will hand a success of this begun call back as the
    very value the tool returned: a plain allow (no notice) that no stagnation warn can
    reach."""
    return verdict.decision is ALLOW and not verdict.notice and (
        p.effect is POLL or not stagnation_possible(p.entry.settings, p.signature, snap))


def _raised(task: Task, cfg: _Config, tool: str, p: _Prepared, snap: Snapshot,
            exc: BaseException, token: Token[Any] | None, start: float) -> _Outcome:
    """The tool raised ``exc``: a tool error's outcome (the error envelope), or, when it was
    interrupted or cancelled, an unknown outcome recorded (:func:`_interrupted`) and ``exc``
    re-raised."""
    if isinstance(exc, Exception):
        return task._failure(cfg, exc, perf_counter() - start)
    if token is not None:
        _CURRENT_KEY.reset(token)
    _interrupted(task, cfg, tool, p, snap, exc)
    raise exc


def _memory_record(task: Task, cfg: _Config, store: MemoryStore, tool: str, p: _Prepared,
                   snap: Snapshot, verdict: Verdict, value: Any, failed: _Outcome | None,
                   token: Token[Any] | None, start: float
                   ) -> tuple[ToolResult, BaseException | None]:
    """Record what the tool of a :data:`Begun` call did (returned ``value``, or ``failed``:
    its error or unknown outcome, which ``_conclude`` records) and build the result;
    ``token`` and ``start``: its idempotency key's context (None: none was set, as for a
    :class:`Remote` call) and its start time."""
    duration = perf_counter() - start
    if token is not None:
        _CURRENT_KEY.reset(token)
    try:
        if p.claim:
            task._notify(p)
        if failed is not None:  # an error or an unknown outcome: the general record
            return task._conclude(cfg, p, snap, verdict, failed, None), failed.exc
        settings = p.entry.settings
        effect = p.effect
        digest, kind = _digest(task._digests, settings.result, value)
        progress = progress_of(task, p.signature, settings.result, value, digest)
        judged = (kind + digest if effect is not POLL and (
            settings.stagnation_warn_at or settings.stagnation_block_at) else "")
        try:
            store.finish_fields(  # _record._finish's request of a success, as arguments
                task.task_id, p.entry.spec.name, p.signature, p.key, True, True, False,
                effect is MUTATING, digest, p.claim and p.remember, value, snap.claimed,
                settings.idempotency_ttl_s, task.guard._clock(), None, p.call_id, judged,
                settings.max_progress_resets, False, progress)
        except Exception as exc:  # noqa: BLE001 - _finish_failed re-raises or falls back
            if _finish_failed(task, cfg, p, exc, True):
                judged = ""  # not recorded: no stagnation warn either
        stagnant = stagnation_after(settings, p.signature, snap, judged) if judged else None
        return _executed_result(task, cfg, p, snap, verdict, None, stagnant, value, value,
                                True, None, duration), None
    except BaseException as exc:
        _failed(task, cfg, tool, exc, (p, snap) if snap.claimed else None, True)
        raise


# -- a tool that runs elsewhere and answers later (the MCP proxy's upstream) -----------------
class Remote:
    """A begun call whose tool runs outside this process and answers in a later callback
    (the MCP proxy's upstream): :func:`begin_remote` made it, :func:`end_remote` records it.
    No idempotency-key context is set for it (its tool cannot read one) and nothing awaits:
    both halves run synchronously on the caller's thread.

    Attributes:
        args: the validated arguments to send to the tool.
        final: a success will be handed back unchanged (:func:`_final`): the caller may pass
            it on before :func:`end_remote`, which it calls with no await between.
    """

    @property
    def forwarded_key(self) -> str | None:
        """The idempotency key to send with the call when its tool forwards it
        (``forwards_idempotency_key``), as ``current_idempotency_key()`` gives it on the
        other paths; else ``None``."""
        p = self.p
        if not p.entry.settings.forwards_idempotency_key:
            return None
        return forwarded_key(p.key, p.origin or p.call_id)

    __slots__ = ("args", "cfg", "final", "p", "snap", "start", "store", "task", "tool",
                 "verdict")

    def __init__(self, task: Task, cfg: _Config, store: MemoryStore, tool: str,
                 begun: Begun) -> None:
        self.task, self.cfg, self.store, self.tool = task, cfg, store, tool
        self.p, self.snap, self.verdict = begun
        self.args: dict[str, Any] = self.p.args
        self.final = _final(self.p, self.snap, self.verdict)
        self.start = perf_counter()


def begin_remote(task: Task, tool: str, raw: Any
                 ) -> Remote | tuple[ToolResult, None] | tuple[None, Any] | None:
    """Prepare, begin and decide a call that the caller runs itself, elsewhere (as
    ``acall(tool, raw, run=...)`` would, on this path only).

    Returns:
        ``None`` where this path does not apply (an audit sink, a mode other than enforce,
        a store other than a plain :class:`~toolguard.stores.memory.MemoryStore`): use
        ``acall``. Else a :class:`Remote` to run now, ``(result, None)`` for a call that
        does not run (blocked, invalid, cached, ...), or ``(None, start)``: the pipeline
        takes the begun call over (an approval, a wait, a failure budget), as
        ``task._run_async(tool, raw, run, approver, False, start)``.

    Raises:
        Halt: the task halted, or halts with this call.
        ToolGuardError: the store failed closed.
    """
    cfg = task.guard._config
    store = task.guard._store
    if (cfg.policy.mode is not ENFORCE or task.guard._sinks or type(store) is not MemoryStore
            or not task._fast):
        return None
    front = _memory_front(task, cfg, store, tool, raw, _elsewhere)
    if len(front) == 2:
        if front[0] is None:
            return None, (cfg, *front[1])
        return front[0], None
    return Remote(task, cfg, store, tool, front)


def end_remote(call: Remote, value: Any, exc: BaseException | None = None
               ) -> ToolResult:
    """Record what the tool of ``call`` did: returned ``value``, or raised ``exc`` (an
    ``Exception``: a tool error, recorded as a failure; anything else, e.g.
    ``asyncio.CancelledError``: an unknown outcome recorded, then ``exc`` re-raised).

    Returns:
        The call's result, as ``acall`` gives it.

    Raises:
        Halt: as for ``acall``. ``exc``, when it is not an ``Exception``.
    """
    task, cfg, tool, p, snap = call.task, call.cfg, call.tool, call.p, call.snap
    failed: _Outcome | None = None
    if exc is not None:  # as _memory_async's except clause
        failed = _raised(task, cfg, tool, p, snap, exc, None, call.start)
        value = None
    return _memory_record(task, cfg, call.store, tool, p, snap, call.verdict, value, failed,
                          None, call.start)[0]


def _elsewhere(args: dict[str, Any]) -> Any:  # pragma: no cover - a marker, never called
    raise AssertionError("a Remote call's tool runs elsewhere")
