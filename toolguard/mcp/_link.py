"""One client session of ``toolguard mcp-proxy`` joined to one upstream session, on raw JSON-RPC.

Every message is parsed once (orjson) to learn its kind, id and method; it is re-serialised
only when the proxy changes it. What the link acts on:

- the client's ``initialize``: answered by the proxy from the upstream's own ``initialize``
  result (the proxy initialized the upstream itself, declaring elicitation, sampling and
  roots so the upstream's own requests of that kind can reach the client); the client's
  capabilities are kept (elicitation). ``notifications/initialized`` is not passed on (the
  proxy sent its own).
- ``tools/call``: through the guard's two steps, :meth:`toolguard.Task.begin` and the
  :class:`toolguard.PendingCall` it gives (``finish`` / ``fail`` / ``unknown``). On the
  in-memory call path both run in the link's own callbacks
  (:meth:`GuardMiddleware.begin_json` as the request arrives,
  :meth:`GuardMiddleware.end_json` as the upstream answers), with no task, coroutine or
  event-loop turn between a message and what it causes; otherwise (the tool not learnt yet,
  an approval or a wait, an audit sink, a Redis store) a task begins the call
  (:meth:`GuardMiddleware.abegin_json`), sends it upstream, awaits the answer and records
  it (:meth:`GuardMiddleware.aend_json`). Either way the request goes upstream as the
  client's bytes unless the guard changed the arguments, and an allowed call's answer goes
  back as the upstream's bytes. When the guard hands a success back unchanged
  (``PendingCall.final``) those bytes go to the client as they arrive, and the guard records
  the call right after, in the same callback: the record is off the round trip the client
  waits for, and no later message finds it missing.
- ``tools/list`` answers: the tools are registered with the guard on their way through.
- ``notifications/cancelled`` of a call: passed on; a guarded call waiting for the upstream
  stops waiting and gets no answer, as JSON-RPC wants. The upstream may have run it (a
  cancellation is advisory in MCP), so the guard records its outcome as unknown.
- a ``tools/call`` without an id (a notification): refused, never passed on (the guard answers
  every call, and a notification cannot be answered).

A guarded call sent upstream ends in one of two ways: its answer, or an unknown outcome
(:class:`~toolguard._outcomes.OutcomeUnknown`, reported with ``PendingCall.unknown``, as
for a tool that raised ``TimeoutError``, so an identical retry goes to review instead of
running again) when the upstream goes away or breaks its stream (a frame over the limit),
when no answer came within the call timeout (the upstream is then sent
``notifications/cancelled`` for it, as the MCP spec asks of a sender that stops waiting),
or when the client cancels it. The guarded calls
are :class:`~toolguard.mcp._calls.GuardedCalls`, a base of :class:`Link`.

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
from typing import TYPE_CHECKING, Any

from toolguard._outcomes import OutcomeUnknown

from ._calls import GuardedCalls
from ._ports import (
    CALL_REFUSED_AS_NOTIFICATION,
    CONNECTION_CLOSED,
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
    _note,
    _progress_token,
    dumps,
    handshake,
)

if TYPE_CHECKING:
    from toolguard.adapters.mcp import GuardMiddleware
    from toolguard.engine._pending import PendingCall

__all__ = ["PROXY_CAPABILITIES", "ClientPort", "Handler", "Link", "UpstreamFailed",
           "UpstreamGone", "UpstreamPort", "dumps", "handshake"]

_MISSING = object()


class Link(GuardedCalls):
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
        self._remote: dict[Any, PendingCall] = {}  # the same, begun in a callback
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
        from toolguard.adapters.mcp import error_result

        if method == "tools/call":  # answered before the guard: nothing is recorded
            self._send(rid, result=error_result(self.up.describe_gone()))
        else:
            self._send(rid, error=_error(CONNECTION_CLOSED, self.up.describe_gone()))

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
