"""One client session of ``toolguard mcp-proxy`` joined to one upstream session, on raw JSON-RPC.

Every message is parsed once (orjson) to learn its kind, id and method; it is re-serialised
only when the proxy changes it. What the link acts on:

- the client's ``initialize``: answered by the proxy from the upstream's own ``initialize``
  result (the proxy initialized the upstream itself, declaring elicitation, sampling and
  roots so the upstream's own requests of that kind can reach the client); the client's
  capabilities are kept (elicitation). ``notifications/initialized`` is not passed on (the
  proxy sent its own).
- ``tools/call``: through the guard. On the in-memory call path the guard's two halves run
  in the link's own callbacks (:meth:`GuardMiddleware.begin_json` as the request arrives,
  :meth:`GuardMiddleware.end_json` as the upstream answers), with no task, coroutine or
  event-loop turn between a message and what it causes; otherwise (the tool not learnt yet,
  an approval or a wait, an audit sink, a Redis store) a task runs
  :meth:`GuardMiddleware.guard_json`, whose ``run`` sends the request upstream and awaits the
  answer. Either way the request goes upstream as the client's bytes unless the guard changed
  the arguments, and an allowed call's answer goes back as the upstream's bytes. When the
  guard hands a success back unchanged (``Remote.final``) those bytes go to the client as
  they arrive, and the guard records the call right after, in the same callback: the record
  is off the round trip the client waits for, and no later message finds it missing.
- ``tools/list`` answers: the tools are registered with the guard on their way through.
- ``notifications/cancelled`` of a call: passed on; a guarded call waiting for the upstream
  stops waiting and gets no answer, as JSON-RPC wants. The upstream may have run it (a
  cancellation is advisory in MCP), so the guard records its outcome as unknown.
- a ``tools/call`` without an id (a notification): refused, never passed on (the guard answers
  every call, and a notification cannot be answered).

A guarded call sent upstream ends in one of two ways: its answer, or an unknown outcome
(:class:`~toolguard._outcomes.OutcomeUnknown`, recorded as for a tool that raised
``TimeoutError``, so an identical retry goes to review instead of running again) when the
upstream goes away or breaks its stream (a frame over the limit), when no answer came within
the call timeout (the upstream is then sent ``notifications/cancelled`` for it, as the MCP
spec asks of a sender that stops waiting), or when the client cancels it.

Everything else (resources, prompts, completions, logging, pings, notifications, progress, the
upstream's requests to the client and the client's answers) passes through byte for byte. Ids
are never rewritten: one link joins exactly one client session to one upstream session, so the
two id spaces are the peers' own. The proxy's own requests (its ``initialize``, a ``tools/list``
to learn a tool, an elicitation to ask for an approval) use string ids with a random 64-bit
prefix per link, which neither peer ever sees from the other side; a peer request that reuses
one of them while it is pending is refused with an error instead of being confused with it.

Routing on streamable HTTP: a message the upstream sent on a request's own stream
(``related``) goes to the client on that request's stream; otherwise a progress notification
goes to the stream of the request whose ``progressToken`` it carries, and anything else to the
stream of the only request in flight if there is one, else to the session's standalone stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from ._mcp_frames import UNKNOWN_OUTCOME
from ._mcp_ports import (
    CALL_REFUSED_AS_NOTIFICATION,
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PROXY_CAPABILITIES,
    ClientPort,
    Handler,
    Json,
    UpstreamFailed,
    UpstreamGone,
    UpstreamPort,
    _error,
    _hashable,
    _id_maker,
    _LinkAsker,
    _note,
    _progress_token,
    _UpstreamCallError,
    dumps,
    handshake,
)
from ._outcomes import OutcomeUnknown
from ._task import current_idempotency_key

if TYPE_CHECKING:
    from ._fast import Remote
    from .adapters.mcp import GuardMiddleware

__all__ = ["PROXY_CAPABILITIES", "ClientPort", "Handler", "Link", "UpstreamFailed",
           "UpstreamGone", "UpstreamPort", "dumps", "handshake"]

_MISSING = object()


class Link:
    """One client session and its upstream session; see the module docstring.

    Args:
        up: the upstream session, initialized (:func:`handshake`).
        init: the upstream's ``initialize`` result.
        middleware: the guard (shared by every link of the proxy).
        early: messages the upstream sent during the handshake, delivered once a client is
            attached.
        call_timeout_s: how long a guarded call sent upstream waits for its answer (seconds)
            before its outcome is recorded as unknown.
    """

    def __init__(self, up: UpstreamPort, init: Json, middleware: GuardMiddleware,
                 early: list[tuple[bytes, Json, Any]], call_timeout_s: float) -> None:
        self.up = up
        self.call_timeout_s = call_timeout_s
        self.init = init
        self.middleware = middleware
        self.session_id: str | None = None
        self.client: ClientPort | None = None
        self.client_caps: Json = {}
        self._new_id = _id_maker()
        self._loop = asyncio.get_running_loop()
        self._mine_up: dict[Any, asyncio.Future[Json]] = {}  # the proxy's requests upstream
        self._mine_down: dict[Any, asyncio.Future[Json]] = {}  # the proxy's to the client
        self._calls: dict[Any, asyncio.Future[tuple[bytes, Json]]] = {}  # guarded, forwarded
        self._remote: dict[Any, Remote] = {}  # the same, begun in a callback (begin_json)
        # of both, by id: the loop time each times out at, in that order (one timeout)
        self._deadlines: dict[Any, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None  # for the first of them
        self._open: dict[Any, Any] = {}  # client requests in flight: id -> progress token
        self._guarding: set[Any] = set()  # of those, the tools/calls the guard holds
        self._progress: dict[Any, Any] = {}  # progress token -> client request id
        self._listing: set[Any] = set()  # client tools/list requests in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._learning = asyncio.Lock()
        self._held: list[tuple[bytes, Any, bool]] = []  # for the client, before it attaches
        up.handler, up.on_gone = self.from_upstream, self.upstream_gone
        up.on_garbage = self._garbage
        for raw, message, related in early:
            self.from_upstream(raw, message, related)

    def attach(self, client: ClientPort, session_id: str | None = None) -> None:
        """Join the client session (its id names the guard task, unless ``--task-id``)."""
        self.client, self.session_id = client, session_id
        held, self._held = self._held, []
        for raw, stream, final in held:
            client.send(raw, stream, final)

    def _to_client(self, raw: bytes, stream: Any, final: bool) -> None:
        if self.client is None:
            self._held.append((raw, stream, final))
        else:
            self.client.send(raw, stream, final)

    # -- from the client ------------------------------------------------------------------
    def from_client(self, raw: bytes, message: Json) -> None:
        """One message from the client: act on it or pass it on (see the module docstring)."""
        method = message.get("method")
        if not isinstance(method, str):  # an answer to the upstream's request, or to ours
            mid = message.get("id", _MISSING)
            if not _hashable(mid) or ("result" not in message and "error" not in message):
                self._reply(message.get("id"), error=_error(INVALID_REQUEST,
                                                            "not a JSON-RPC 2.0 message"))
                return
            mine = self._mine_down.pop(mid, None) if self._mine_down else None
            if mine is not None:
                if not mine.done():
                    mine.set_result(message)
            elif self.up.gone is None:
                self.up.send(raw, message)
            return
        rid = message.get("id", _MISSING)
        if rid is _MISSING:  # a notification
            if method == "notifications/initialized":
                return
            if method == "tools/call":
                _note(CALL_REFUSED_AS_NOTIFICATION)
                self._reply(None, error=_error(INVALID_REQUEST, CALL_REFUSED_AS_NOTIFICATION))
                return
            if method == "notifications/cancelled":
                self._cancel(message.get("params"))
            if self.up.gone is None:
                self.up.send(raw, message)
            return
        params = message.get("params")
        if not _hashable(rid):
            self._reply(None, error=_error(INVALID_REQUEST, "a request id is a string or number"))
            return
        if method == "initialize":
            self._initialize(rid, params)
            return
        if rid in self._mine_up or rid in self._open:
            self._send(rid, error=_error(INVALID_REQUEST, f"request id {rid!r} is in use"))
            return
        if params is not None and not isinstance(params, dict):  # an upstream would not answer
            self._send(rid, error=_error(INVALID_PARAMS, "params must be a JSON object"))
            return
        if self.up.gone is not None:
            self._answer_gone(rid, method)
            return
        token = _progress_token(params)
        self._open[rid] = token
        if token is not None:
            self._progress[token] = rid
        if method == "tools/call" and isinstance(params, dict) and isinstance(
                params.get("name"), str):
            self._guarding.add(rid)
            if not self.middleware.knows(params["name"]) or not self._begin(
                    rid, raw, message, params):
                self._spawn(self._guarded(rid, raw, message, params))
            return
        if method == "tools/list":
            self._listing.add(rid)
        self.up.send(raw, message)

    def _initialize(self, rid: Any, params: Any) -> None:
        caps = params.get("capabilities") if isinstance(params, dict) else None
        self.client_caps = caps if isinstance(caps, dict) else {}
        result = dict(self.init)
        info = result.get("serverInfo")
        info = dict(info) if isinstance(info, dict) else {}
        info["title"] = f"{info.get('title') or info.get('name') or 'MCP server'} " \
                        "(guarded by toolguard)"
        result["serverInfo"] = info
        self._send(rid, result=result)

    def _cancel(self, params: Any) -> None:
        target = params.get("requestId", _MISSING) if isinstance(params, dict) else _MISSING
        if target is _MISSING or target not in self._open:
            return
        self._close_request(target)
        # the client wants no answer; the upstream may have run it all the same
        self._lost(target, OutcomeUnknown("the client cancelled the call after it was sent "
                                          "to the upstream"))
        if self.client is not None:
            self.client.end(target)

    def _answer_gone(self, rid: Any, method: str) -> None:
        from .adapters.mcp import error_result

        if method == "tools/call":  # answered before the guard: nothing is recorded
            self._send(rid, result=error_result(self.up.describe_gone()))
        else:
            self._send(rid, error=_error(CONNECTION_CLOSED, self.up.describe_gone()))

    # -- a guarded tools/call -------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _begin(self, rid: Any, raw: bytes, message: Json, params: Json) -> bool:
        """The guard's first half, in this callback (see the module docstring): False where
        it does not apply and a task must guard the call."""
        from .adapters.mcp import HaltError

        name: str = params["name"]
        arguments = params.get("arguments")
        try:
            kind, begun = self.middleware.begin_json(
                self.middleware.task_of(self.session_id), name, arguments)
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
        elif self.up.gone is not None:  # as guard_json's run: the tool did not run
            self._end(rid, begun, None, UpstreamGone(self.up.describe_gone()))
        else:
            call: Remote = begun
            self._remote[rid] = call
            self._send_call(rid, _outgoing(raw, message, call.args, call.forwarded_key),
                            message)
        return True

    def _send_call(self, rid: Any, raw: bytes, message: Json) -> None:
        """Send a guarded call upstream (``raw``: from :func:`_outgoing`), its deadline
        set: a time in a dict, not a timer
        per call (a timer handle made and cancelled costs ~15x as much, measured on uvloop
        and asyncio's loop); one timer, :meth:`_sweep`, waits for the first deadline."""
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

    def _answered(self, rid: Any, call: Remote, raw: bytes, reply: Json) -> None:
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

    def _end(self, rid: Any, call: Remote, result: Json | None, exc: BaseException | None,
             raw: bytes = b"", sent: bool = False) -> None:
        """The guard's second half for a call :meth:`_begin` sent, and the client's answer."""
        from .adapters.mcp import HaltError

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
                       begun: Any = None) -> None:
        """A call the guard's task guards (see the module docstring); ``begun``: one that
        :meth:`_begin` began and the pipeline goes on with."""
        from .adapters.mcp import HaltError

        name: str = params["name"]
        arguments = params.get("arguments")
        answered: list[tuple[Any, bytes]] = []

        async def run(args: dict[str, Any]) -> Mapping[str, Any]:
            if self.up.gone is not None:
                raise UpstreamGone(self.up.describe_gone())
            forwards = self.middleware.guard.settings(name).forwards_idempotency_key
            out = _outgoing(raw, message, args, current_idempotency_key() if forwards else None)
            waiting: asyncio.Future[tuple[bytes, Json]] = self._loop.create_future()
            self._calls[rid] = waiting
            self._send_call(rid, out, message)
            reply_raw, reply = await waiting
            result = _call_result(reply)
            if isinstance(result, Exception):
                raise result
            answered.append((result, reply_raw))
            return result

        try:
            if begun is None and not self.middleware.knows(name):
                await self.learn_tools()
                if self.middleware.knows(name) and self._begin(rid, raw, message, params):
                    return
            outcome = await self.middleware.guard_json(
                self.middleware.task_of(self.session_id), name, arguments, run,
                _LinkAsker(self, rid), begun=begun)
        except HaltError as halt:
            self._finish(rid, error=halt.error())
            return
        except UpstreamGone as gone:
            self._finish(rid, error=_error(CONNECTION_CLOSED, str(gone)))
            return
        except Exception as exc:  # noqa: BLE001 - a bug must still answer the call
            self._internal(rid, name, exc)
            return
        result, reply_raw = answered[0] if answered else (None, b"")
        self._answer(rid, name, outcome, result, reply_raw, False)

    def _finish(self, rid: Any, *, result: Any = None, error: Json | None = None) -> None:
        self._guarding.discard(rid)
        if rid in self._open:  # else the client cancelled it: no answer
            self._send(rid, result=result, error=error)

    def _finish_raw(self, rid: Any, raw: bytes) -> None:
        self._guarding.discard(rid)
        if rid in self._open:
            self._close_request(rid)
            self._to_client(raw, rid, True)

    async def learn_tools(self, timeout_s: float | None = None) -> None:
        """List the upstream's tools (every page) and register the new ones with the guard.

        Raises:
            UpstreamGone: the upstream went away. asyncio.TimeoutError: it took over ``timeout_s``.
        """
        async with self._learning:
            cursor: Any = None
            for _ in range(1000):  # a bound on a server that pages forever
                params = {} if cursor is None else {"cursor": cursor}
                reply = await asyncio.wait_for(self.ask_upstream("tools/list", params),
                                               timeout_s)
                result = reply.get("result")
                if not isinstance(result, dict):
                    return
                self._register(result)
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    return

    def _register(self, result: Any) -> None:
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            self.middleware.register_tools(tools)

    async def ask_upstream(self, method: str, params: Json) -> Json:
        """A request of the proxy's own to the upstream; its answer (``result`` or ``error``).

        Raises:
            UpstreamGone: the upstream is or went away.
        """
        if self.up.gone is not None:
            raise UpstreamGone(self.up.describe_gone())
        pid = self._new_id()
        waiting: asyncio.Future[Json] = self._loop.create_future()
        self._mine_up[pid] = waiting
        self.up.send(dumps({"jsonrpc": "2.0", "id": pid, "method": method, "params": params}),
                     {"id": pid, "method": method})
        try:
            return await waiting
        finally:
            self._mine_up.pop(pid, None)

    async def ask_client(self, method: str, params: Json, related: Any) -> Json:
        """A request of the proxy's own to the client, on the stream of client request
        ``related``; the client's answer (``result`` or ``error``)."""
        pid = self._new_id()
        waiting: asyncio.Future[Json] = self._loop.create_future()
        self._mine_down[pid] = waiting
        self._to_client(dumps({"jsonrpc": "2.0", "id": pid, "method": method,
                               "params": params}), related, False)
        try:
            return await waiting
        finally:
            self._mine_down.pop(pid, None)

    # -- from the upstream ----------------------------------------------------------------
    def from_upstream(self, raw: bytes, message: Json, related: Any) -> None:
        """One message from the upstream (``related``: the request whose HTTP stream carried
        it, if known)."""
        method = message.get("method")
        if not isinstance(method, str):  # an answer
            rid = message.get("id")
            if not _hashable(rid):
                return
            mine = self._mine_up.pop(rid, None) if self._mine_up else None
            if mine is not None:
                if not mine.done():
                    mine.set_result(message)
                return
            call = self._remote.pop(rid, None) if self._remote else None
            if call is not None:
                self._deadlines.pop(rid, None)
                self._answered(rid, call, raw, message)
                return
            waiting = self._calls.pop(rid, None) if self._calls else None
            if waiting is not None:
                self._deadlines.pop(rid, None)
                if not waiting.done():
                    waiting.set_result((raw, message))
                return
            if rid not in self._open:
                return  # cancelled by the client, or no request of it: no answer to pass
            self._close_request(rid)
            if rid in self._listing:
                self._listing.discard(rid)
                self._register(message.get("result"))
            self._to_client(raw, rid, True)
            return
        if "id" in message:  # the upstream's own request to the client
            if _hashable(message["id"]) and message["id"] in self._mine_down:
                refusal: Json = {"jsonrpc": "2.0", "id": message["id"], "error": _error(
                    INVALID_REQUEST, f"request id {message['id']!r} is in use")}
                self.up.send(dumps(refusal), refusal)
                return
            self._to_client(raw, self._stream(related), False)
            return
        stream = related
        if method == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if _hashable(token):
                stream = self._progress.get(token, related)
        self._to_client(raw, self._stream(stream), False)

    def _stream(self, related: Any) -> Any:
        if related is not None and related in self._open:
            return related
        if len(self._open) == 1:
            return next(iter(self._open))
        return None

    def upstream_gone(self) -> None:
        """The upstream went away: every request waiting for it gets an error; a guarded
        call it was running, an unknown outcome."""
        gone = UpstreamGone(self.up.describe_gone())
        for waiting in self._mine_up.values():
            if not waiting.done():
                waiting.set_exception(gone)
        self._mine_up.clear()
        tail = self.up.stderr_tail()
        lost = OutcomeUnknown(  # the reason first, as in _timed_out
            f"the upstream MCP server went away ({self.up.gone}) after the call was sent to "
            f"it (`{self.up.name}`" + (f"; its stderr ended with: {tail}" if tail else "") + ")")
        for rid in [*self._calls, *self._remote]:
            self._lost(rid, lost)
        for rid in [r for r in self._open if r not in self._guarding]:
            self._send(rid, error=_error(CONNECTION_CLOSED, str(gone)))

    def _garbage(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        _note(f"ignored a line from the upstream `{self.up.name}` that is not JSON-RPC: "
              f"{text[:200]!r}")

    # -- answering --------------------------------------------------------------------------
    def _close_request(self, rid: Any) -> None:
        token = self._open.pop(rid, None)
        if token is not None:
            self._progress.pop(token, None)

    def _send(self, rid: Any, *, result: Any = None, error: Json | None = None) -> None:
        self._close_request(rid)
        body: Json = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            body["error"] = error
        else:
            body["result"] = result
        self._to_client(dumps(body), rid, True)

    def _reply(self, rid: Any, *, error: Json) -> None:
        self._to_client(dumps({"jsonrpc": "2.0", "id": rid, "error": error}), None, False)

    async def close(self) -> None:
        """End the link: stop the guarded calls, close the upstream session."""
        for task in list(self._tasks):
            task.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._deadlines.clear()
        remote, self._remote = self._remote, {}
        for rid, call in remote.items():  # an unknown outcome each, as a cancelled task's
            self._end(rid, call, None, asyncio.CancelledError())
        for waiting in (*self._mine_down.values(), *self._mine_up.values()):
            waiting.cancel()
        await self.up.close()


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
    stream cut before the answer: :data:`~toolguard._mcp_frames.UNKNOWN_OUTCOME`)."""
    result = reply.get("result")
    if isinstance(result, dict):
        return result
    error = reply.get("error")
    text = str((error.get("message") if isinstance(error, dict) else None)
               or "the upstream gave no result")
    if isinstance(error, dict) and error.get("data") == UNKNOWN_OUTCOME:
        return OutcomeUnknown(text)
    return _UpstreamCallError(text)
