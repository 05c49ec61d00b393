"""The execute stage: run the tool (or the caller's executor) with the idempotency key in
context and time it; a sync tool under ``acall`` runs in a worker thread; a raised exception
becomes the one-line error envelope (:class:`~toolguard._call._Outcome`), and an
interrupted run gives its claim back or records an unknown outcome."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ._content import safe_str as _safe_str
from ._context import CURRENT_KEY as _CURRENT_KEY
from ._outcomes import is_unknown_outcome
from ._threads import Handoff
from ._types import ALLOW
from .stores._base import Snapshot

if TYPE_CHECKING:
    import asyncio

    from ._engine import Task

from ._call import Executor, _Config, _Detached, _Outcome, _Prepared, _RecordedError


async def _until_done(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` whatever cancellations arrive meanwhile."""
    import asyncio

    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([future])


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Read a detached thread's exception, so asyncio does not report it as never retrieved
    (the pipeline records it)."""
    if not future.cancelled():
        future.exception()


def _discard(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _close_awaitable(value: Awaitable[Any], p: _Prepared) -> Any:
    _discard(value)
    raise TypeError(f"{p.entry.spec.name} is async: call it with task.acall()")


def _execute_sync(task: Task, cfg: _Config, p: _Prepared, executor: Executor | None
                  ) -> _Outcome:
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = time.perf_counter()
    try:
        value = executor(p.args) if executor is not None else p.entry.call(**p.args)
        if p.entry.maybe_async and inspect.isawaitable(value):
            value = _close_awaitable(value, p)
        return _Outcome(value, value, True, False, None, None, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
        return task._failure(cfg, exc, time.perf_counter() - start)
    finally:
        _CURRENT_KEY.reset(token)


async def _execute_async(task: Task, cfg: _Config, p: _Prepared,
                         executor: Executor | None) -> _Outcome:
    token = _CURRENT_KEY.set((p.key, p.origin or p.call_id))
    start = time.perf_counter()
    try:
        if executor is not None:
            value = executor(p.args)
        elif p.entry.in_thread:
            import asyncio

            # A plain function would block the event loop, and concurrent identical
            # acalls would then run one after another and count as repeats instead of
            # sharing one execution. As LangChain and pydantic-ai do for sync tools, run
            # it in a worker thread, with the context (idempotency key, task) copied.
            handoff = Handoff()
            future = asyncio.get_running_loop().run_in_executor(None, functools.partial(
                contextvars.copy_context().run, handoff.run, p.entry.call, p.args))
            try:
                value = await asyncio.shield(future)
            except asyncio.CancelledError as cancel:
                # A thread cannot be stopped, and the caller must not wait for it: the
                # cancellation goes on at once, and what the tool really did is recorded
                # when it ends (an identical call meanwhile waits on its claim, so no
                # second run starts beside the first, and a retry then gets the stored
                # result instead of an unknown outcome).
                future.add_done_callback(_retrieved)

                def outcome(value: Any, exc: BaseException | None, took: float
                            ) -> _Outcome:
                    if isinstance(exc, Exception):
                        return task._failure(cfg, exc, took)
                    if exc is not None:  # the thread was interrupted: unknown
                        return _Outcome(content="interrupted", success=False,
                                        unknown=True, duration_s=took)
                    return _Outcome(value, value, True, False, None, None, took)

                raise _Detached(cancel, handoff, outcome) from None
        else:
            value = p.entry.call(**p.args)
        if inspect.isawaitable(value):
            value = await value
        return _Outcome(value, value, True, False, None, None, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - any tool error becomes an error envelope
        return task._failure(cfg, exc, time.perf_counter() - start)
    finally:
        _CURRENT_KEY.reset(token)


def _failure(cfg: _Config, exc: Exception, duration_s: float) -> _Outcome:
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


def _give_back(task: Task, cfg: _Config, claimed: tuple[_Prepared, Snapshot] | None) -> None:
    """Release the claim of a call that will not run (best effort: the store may be the
    reason), so identical calls need not wait for ``in_progress_ttl_s``."""
    if claimed is not None:
        with contextlib.suppress(Exception):
            task._finish(cfg, *claimed, None)
            task._notify(claimed[0])


def _abandon(task: Task, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
    """The tool was interrupted (KeyboardInterrupt, task cancellation): record it as a
    failure whose outcome is unknown, so the claim is not left behind and an identical
    retry of a mutating call goes to review instead of running blind."""
    outcome = _Outcome(content="interrupted", success=False, unknown=True)
    task._finish(cfg, p, snap, outcome)
    task._notify(p)
    task._event("executing->failed", p.entry.spec.name, ALLOW,
                "interrupted while running: its outcome is unknown", p, cfg)
