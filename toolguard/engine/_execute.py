"""The execute stage: run the tool (or the caller's executor) with the idempotency key in
context and time it; a sync tool under ``acall`` runs in a worker thread; a raised exception
becomes the one-line error envelope (:class:`~toolguard.engine._call._Outcome`), and an
interrupted run gives its claim back or records an unknown outcome."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from inspect import isawaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from toolguard._outcomes import is_unknown_outcome
from toolguard._types import ALLOW
from toolguard.stores._base import Snapshot
from toolguard.tools._context import CURRENT_KEY as _CURRENT_KEY

from . import _approve, _events, _record, _wait
from ._call import Executor, Started, TaskState, _Config, _Outcome, _Prepared, _RecordedError
from ._content import safe_str as _safe_str
from ._threads import Handoff

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("toolguard")
B = TypeVar("B", bound=Started)
"""The begun call (:class:`toolguard.engine._path.Begun`), seen through :class:`Started`."""
Record = Callable[[TaskState, B, Any, _Outcome | None, float], Any]
""":func:`toolguard.engine._path.record`, passed in (the path imports this module)."""
Interrupted = Callable[[TaskState, B, BaseException], None]
""":func:`toolguard.engine._path.interrupted`, passed in."""


async def until_done(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` whatever cancellations arrive meanwhile."""
    import asyncio

    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])


def retrieved(future: asyncio.Future[Any]) -> None:
    """Read a detached thread's exception, so asyncio does not report it as never retrieved
    (the pipeline records it)."""
    if not future.cancelled():
        future.exception()


def close_awaitable(value: Awaitable[Any], p: _Prepared) -> Any:
    _approve.discard(value)
    raise TypeError(f"{p.entry.spec.name} is async: call it with task.acall()")


async def run_async(task: TaskState, b: B, executor: Executor | None,
                    record: Record[B], interrupted: Interrupted[B]
                    ) -> tuple[Any, _Outcome | None, float]:
    """Run the tool of the begun call ``b`` under ``acall``: ``(value, None, seconds)`` when
    it returned, ``(None, outcome, seconds)`` when it raised (its error envelope). An
    ``async def`` tool (or ``run``) is awaited on the loop; a sync tool runs inline when it
    is declared ``inline`` (a fast pure function), else in a worker thread
    (:func:`in_thread`). Interrupted or cancelled: ``interrupted(task, b, exc)`` records an
    unknown outcome and ``exc`` is re-raised.

    Raises:
        BaseException: the cancellation or interruption of the run.
    """
    p = b.p
    threaded = executor is None and p.entry.in_thread
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = perf_counter()
    try:
        if threaded:
            return await in_thread(task, b, record, interrupted)
        value = executor(p.args) if executor is not None else p.entry.call(**p.args)
        if isawaitable(value):
            value = await value
    except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
        took = perf_counter() - start
        return None, failure(b.cfg, exc, took), took
    except BaseException as exc:  # e.g. cancelled by asyncio.wait_for
        if not threaded:  # a thread's cancellation is recorded when the thread ends
            interrupted(task, b, exc)
        raise
    finally:
        _CURRENT_KEY.reset(token)
    return value, None, perf_counter() - start


async def in_thread(task: TaskState, b: B, record: Record[B], interrupted: Interrupted[B]
                    ) -> tuple[Any, _Outcome | None, float]:
    """A sync tool under ``acall``, in a worker thread: a plain function would block the
    event loop, and concurrent identical acalls would then run one after another and count
    as repeats instead of sharing one execution. As LangChain and pydantic-ai do for sync
    tools, it runs with the context (idempotency key, task) copied. A cancellation goes on
    to the caller at once (a thread cannot be stopped), and what the tool really did is
    recorded by the worker thread when it ends (``record``): an identical call meanwhile
    waits on its claim, so no second run starts beside the first."""
    import asyncio

    handoff = Handoff()
    future = asyncio.get_running_loop().run_in_executor(None, functools.partial(
        contextvars.copy_context().run, handoff.run, b.p.entry.call, b.args))
    try:
        value = await asyncio.shield(future)
    except asyncio.CancelledError as cancel:
        future.add_done_callback(retrieved)
        if handoff.detach(functools.partial(_record_later, task, b, record, interrupted)):
            raise
        # it ended meanwhile: record it now, then go on cancelled
        _record_later(task, b, record, interrupted, handoff.value, handoff.exc,
                      handoff.duration_s)
        raise cancel from None
    except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
        return None, failure(b.cfg, exc, handoff.duration_s), handoff.duration_s
    except BaseException as exc:  # the thread was interrupted: unknown
        interrupted(task, b, exc)
        raise
    return value, None, handoff.duration_s


def _record_later(task: TaskState, b: B, record: Record[B], interrupted: Interrupted[B],
                  value: Any, exc: BaseException | None, took: float) -> None:
    """Record what the tool of a cancelled ``acall`` did, once it ended (in its worker
    thread). Nobody awaits this: a failure is logged."""
    try:
        if exc is None:
            record(task, b, value, None, took)
        elif isinstance(exc, Exception):
            record(task, b, None, failure(b.cfg, exc, took), took)
        else:  # the thread was interrupted: unknown
            interrupted(task, b, exc)
    except BaseException:
        log.exception("toolguard: recording the outcome of cancelled %s failed",
                      b.p.entry.spec.name)


def failure(cfg: _Config, exc: Exception, duration_s: float) -> _Outcome:
    # The error envelope (DESIGN.md §2, cause 1): a one-line structured error, no
    # traceback, so the model does not guess at its own arguments.
    name = type(exc).__name__
    unknown = is_unknown_outcome(exc, cfg.timeout_types)
    if isinstance(exc, _RecordedError):
        content = exc.content
    else:
        message = " ".join(_safe_str(exc).split()) or name  # its __str__ may raise too
        if len(message) > 300:
            message = message[:299] + "…"
        content = f"Error ({name}): {message}"
        if unknown:
            content += (" [the outcome is unknown: the action may or may not have "
                        "happened; check before retrying]")
    return _Outcome(value=None, content=content, success=False, unknown=unknown,
                    error_type=None if isinstance(exc, _RecordedError) else name,
                    exc=exc, duration_s=duration_s)


def give_back(task: TaskState, cfg: _Config, claimed: tuple[_Prepared, Snapshot] | None) -> None:
    """Release the claim of a call that will not run (best effort: the store may be the
    reason), so identical calls need not wait for ``in_progress_ttl_s``."""
    if claimed is not None:
        with contextlib.suppress(Exception):
            _record.finish(task, cfg, *claimed, None)
            _wait.notify(task, claimed[0])


def abandon(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
    """The tool was interrupted (KeyboardInterrupt, task cancellation): record it as a
    failure whose outcome is unknown, so the claim is not left behind and an identical
    retry of a mutating call goes to review instead of running blind."""
    outcome = _Outcome(content="interrupted", success=False, unknown=True)
    _record.finish(task, cfg, p, snap, outcome)
    _wait.notify(task, p)
    _events.event(task, "executing->failed", p.entry.spec.name, ALLOW,
                "interrupted while running: its outcome is unknown", p, cfg)
