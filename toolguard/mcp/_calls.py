"""The guarded ``tools/call`` of a :class:`~toolguard.mcp._link.Link`, and how each ends.

A call goes through the guard's two steps (:meth:`toolguard.Task.begin`, then the
:class:`~toolguard.PendingCall`'s ``finish`` / ``fail`` / ``unknown``) in the link's own
callbacks, or in a task that awaits them (see :mod:`toolguard.mcp._link` for when); one the
guard allows goes upstream (:func:`_outgoing`) with a deadline, and ends in its answer
(:func:`_call_result`) or in an unknown outcome (:meth:`GuardedCalls._lost`): the deadline
passed (the upstream is sent ``notifications/cancelled``), the upstream went away or the
client cancelled the call.

:class:`GuardedCalls` is a base of :class:`~toolguard.mcp._link.Link` and holds no state of its
own: it declares the link's state and methods it works on (so this module needs no import of
the link's, not even for its types).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from toolguard._outcomes import OutcomeUnknown
from toolguard.engine._pending import PendingCall

from ._frames import UNKNOWN_OUTCOME
from ._ports import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    Json,
    UpstreamGone,
    _error,
    _LinkAsker,
    _note,
    _UpstreamCallError,
    dumps,
)
from ._results import HaltError

if TYPE_CHECKING:
    from toolguard.adapters.mcp import GuardMiddleware

    from ._ports import UpstreamPort

__all__ = ["IDEMPOTENCY_META", "GuardedCalls"]


class GuardedCalls:
    """The guarded calls of a :class:`~toolguard.mcp._link.Link`; see the module docstring."""

    # the link's state this works on (set by Link.__init__)
    up: UpstreamPort
    middleware: GuardMiddleware
    session_id: str | None
    client_caps: Json
    call_timeout_s: float
    _loop: asyncio.AbstractEventLoop
    _calls: dict[Any, asyncio.Future[tuple[bytes, Json]]]
    _remote: dict[Any, PendingCall]
    _deadlines: dict[Any, float]
    _sweeper: asyncio.TimerHandle | None
    _open: dict[Any, Any]
    _guarding: set[Any]
    _tasks: set[asyncio.Task[None]]

    if TYPE_CHECKING:  # the link's methods this calls
        def _to_client(self, raw: bytes, stream: Any, final: bool) -> None: ...
        def _close_request(self, rid: Any) -> None: ...
        def _send(self, rid: Any, *, result: Any = None, error: Json | None = None) -> None: ...
        async def learn_tools(self, timeout_s: float | None = None) -> None: ...
        async def ask_client(self, method: str, params: Json, related: Any) -> Json: ...

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _begin(self, rid: Any, raw: bytes, message: Json, params: Json) -> bool:
        """The guard's first half, in this callback (see the module docstring): False where
        it does not apply and a task must guard the call."""
        name: str = params["name"]
        try:
            kind, begun = self.middleware.begin_json(
                self.middleware.task_of(self.session_id), name, params.get("arguments"))
        except HaltError as halt:
            self._finish(rid, error=halt.error())
            return True
        except Exception as exc:  # noqa: BLE001 - a bug must still answer the call
            self._internal(rid, name, exc)
            return True
        if kind == "acall":
            return False
        if kind == "done":
            self._finish(rid, result=begun)
        elif kind == "pipeline":
            self._spawn(self._guarded(rid, raw, message, params, begun))
        else:
            self._forward(rid, raw, message, begun)
        return True

    def _forward(self, rid: Any, raw: bytes, message: Json, pending: PendingCall) -> None:
        """Send a call the guard lets run upstream; its answer comes to :meth:`_answered`."""
        if self.up.gone is not None:  # a failed call, as for a tool that raised
            self._end(rid, pending, None, UpstreamGone(self.up.describe_gone()))
            return
        self._remote[rid] = pending
        self._send_call(rid, _outgoing(raw, message, pending.args, pending.forwarded_key),
                        message)

    def _send_call(self, rid: Any, raw: bytes, message: Json) -> None:
        """Send a guarded call upstream (``raw``: from :func:`_outgoing`), its deadline
        set: a time in a dict, not a timer per call (a timer handle made and cancelled costs
        ~15x as much, measured on uvloop and asyncio's loop); one timer, :meth:`_sweep`,
        waits for the first deadline."""
        self._deadlines[rid] = self._loop.time() + self.call_timeout_s
        if self._sweeper is None:
            self._sweeper = self._loop.call_later(self.call_timeout_s, self._sweep)
        self.up.send(raw, message)

    def _sweep(self) -> None:
        """Time out the calls whose deadline passed; wait for the next one."""
        self._sweeper = None
        now = self._loop.time()
        expired = []
        for rid, deadline in self._deadlines.items():
            if deadline > now:
                break
            expired.append(rid)
        for rid in expired:
            self._timed_out(rid)
        if self._deadlines:
            first = next(iter(self._deadlines.values()))
            self._sweeper = self._loop.call_later(max(first - now, 0.0), self._sweep)

    def _timed_out(self, rid: Any) -> None:
        # the reason first: the guard's error text keeps the first 300 characters
        why = (f"the upstream MCP server did not answer within {self.call_timeout_s:g} s "
               f"(`{self.up.name}`)")
        if self.up.gone is None:  # it should stop, and not answer (MCP's cancellation)
            cancel: Json = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": rid, "reason": f"toolguard: {why}"}}
            self.up.send(dumps(cancel), cancel)
        self._lost(rid, OutcomeUnknown(why))

    def _lost(self, rid: Any, why: OutcomeUnknown) -> None:
        """A guarded call sent upstream will get no answer: its outcome is unknown."""
        self._deadlines.pop(rid, None)
        waiting = self._calls.pop(rid, None)
        if waiting is not None and not waiting.done():
            waiting.set_exception(why)
        call = self._remote.pop(rid, None)
        if call is not None:
            self._end(rid, call, None, why)

    def _answered(self, rid: Any, call: PendingCall, raw: bytes, reply: Json) -> None:
        """The upstream answered a call :meth:`_begin` sent: pass it on, record it."""
        result = _call_result(reply)
        if isinstance(result, Exception):
            self._end(rid, call, None, result)
            return
        sent = call.final and rid in self._open and result.get("isError") is not True
        if sent:  # the guard hands it back unchanged: out now, recorded right after
            self._close_request(rid)
            self._to_client(raw, rid, True)
        self._end(rid, call, result, None, raw, sent)

    def _end(self, rid: Any, call: PendingCall, result: Json | None,
             exc: BaseException | None, raw: bytes = b"", sent: bool = False) -> None:
        """The guard's second half for a call :meth:`_forward` sent, and the client's
        answer."""
        try:
            outcome = self.middleware.end_json(call, result, exc)
        except HaltError as halt:
            self._finish(rid, error=halt.error())
            return
        except BaseException as error:
            if error is exc:  # a cancellation, recorded as an unknown outcome: no answer
                self._guarding.discard(rid)
                return
            if not isinstance(error, Exception):
                raise
            self._internal(rid, call.tool, error)
            return
        self._answer(rid, call.tool, outcome, result, raw, sent)

    def _answer(self, rid: Any, name: str, outcome: Any, result: Any, raw: bytes,
                sent: bool) -> None:
        if sent:  # the upstream's answer went out as it arrived
            self._guarding.discard(rid)
            if outcome is not result:  # the record failed (a store that failed closed)
                _note(f"{name}: the guard's record failed after the upstream's answer went "
                      f"to the client: {str(outcome)[:200]}")
        elif result is not None and outcome is result:  # the tool ran, the guard added nothing
            self._finish_raw(rid, raw)
        else:
            self._finish(rid, result=outcome)

    def _internal(self, rid: Any, name: str, exc: Exception) -> None:
        _note(f"internal error guarding {name}: {type(exc).__name__}: {exc}")
        self._finish(rid, error=_error(INTERNAL_ERROR, f"toolguard: internal error: {exc}"))

    async def _guarded(self, rid: Any, raw: bytes, message: Json, params: Json,
                       start: Any = None) -> None:
        """A call the guard's task guards (see the module docstring): begun (``start``:
        one that :meth:`_begin` began and handed over), sent upstream, its answer awaited
        and recorded, all awaited (:meth:`_aend`)."""
        name: str = params["name"]
        try:
            if start is None and not self.middleware.knows(name):
                await self.learn_tools()
                if self.middleware.knows(name) and self._begin(rid, raw, message, params):
                    return
            begun = await self.middleware.abegin_json(
                self.middleware.task_of(self.session_id), name, params.get("arguments"),
                _LinkAsker(self, rid), start=start)
        except HaltError as halt:
            self._finish(rid, error=halt.error())
            return
        except UpstreamGone as gone:
            self._finish(rid, error=_error(CONNECTION_CLOSED, str(gone)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug must still answer the call
            self._internal(rid, name, exc)
            return
        if not isinstance(begun, PendingCall):  # the call does not run
            self._finish(rid, result=begun)
            return
        if self.up.gone is not None:  # a failed call, as in _forward
            await self._aend(rid, begun, None, UpstreamGone(self.up.describe_gone()))
            return
        waiting: asyncio.Future[tuple[bytes, Json]] = self._loop.create_future()
        self._calls[rid] = waiting
        self._send_call(rid, _outgoing(raw, message, begun.args, begun.forwarded_key),
                        message)
        try:
            reply_raw, reply = await waiting
        except OutcomeUnknown as why:  # the deadline passed, the upstream or client left
            await self._aend(rid, begun, None, why)
            return
        except asyncio.CancelledError as cancel:  # the link closes: recorded, re-raised
            await self._aend(rid, begun, None, cancel)
            raise
        result = _call_result(reply)
        if isinstance(result, Exception):
            await self._aend(rid, begun, None, result)
        else:
            await self._aend(rid, begun, result, None, reply_raw)

    async def _aend(self, rid: Any, call: PendingCall, result: Json | None,
                    exc: BaseException | None, raw: bytes = b"") -> None:
        """:meth:`_end` for a call :meth:`_guarded` sent, in its task (a store that waits
        on I/O records from a worker thread); a cancellation is recorded and re-raised."""
        try:
            outcome = await self.middleware.aend_json(call, result, exc)
        except HaltError as halt:
            self._finish(rid, error=halt.error())
            return
        except Exception as error:  # noqa: BLE001 - a bug must still answer the call
            self._internal(rid, call.tool, error)
            return
        self._answer(rid, call.tool, outcome, result, raw, False)

    def _finish(self, rid: Any, *, result: Any = None, error: Json | None = None) -> None:
        self._guarding.discard(rid)
        if rid in self._open:  # else the client cancelled it: no answer
            self._send(rid, result=result, error=error)

    def _finish_raw(self, rid: Any, raw: bytes) -> None:
        self._guarding.discard(rid)
        if rid in self._open:
            self._close_request(rid)
            self._to_client(raw, rid, True)



IDEMPOTENCY_META = "toolguard/idempotency-key"


def _outgoing(raw: bytes, message: Json, args: Any, key: str | None) -> bytes:
    """A guarded ``tools/call`` as it goes upstream: the client's bytes, unless the guard
    validated the arguments into other values, or the tool forwards its idempotency key
    (``forwards_idempotency_key``): then in ``params._meta["toolguard/idempotency-key"]``
    (MCP's place for metadata, under a prefix of its own), the same key for a retry of a call
    whose outcome is unknown, for the upstream to deduplicate on."""
    params: Json = message["params"]
    if key is None and args == params.get("arguments"):
        return raw
    sent: Json = {**params, "arguments": args}
    if key is not None:
        meta = params.get("_meta")
        sent["_meta"] = {**(meta if isinstance(meta, dict) else {}), IDEMPOTENCY_META: key}
    return dumps({**message, "params": sent})


def _call_result(reply: Json) -> Json | Exception:
    """The ``CallToolResult`` of the upstream's answer to a ``tools/call``, or the error a
    JSON-RPC error answer (or one without a result) is for the guard: an unknown outcome
    for one the proxy wrote of a request the upstream may have acted on (an HTTP 5xx, a
    stream cut before the answer: :data:`~toolguard.mcp._frames.UNKNOWN_OUTCOME`)."""
    result = reply.get("result")
    if isinstance(result, dict):
        return result
    error = reply.get("error")
    text = str((error.get("message") if isinstance(error, dict) else None)
               or "the upstream gave no result")
    if isinstance(error, dict) and error.get("data") == UNKNOWN_OUTCOME:
        return OutcomeUnknown(text)
    return _UpstreamCallError(text)
