"""``toolguard mcp-proxy`` serving streamable HTTP: :class:`HttpListener` (one link per
``Mcp-Session-Id``, answers as JSON or SSE) on aiohttp's low-level server
(:func:`serve_http`); re-exported by :mod:`toolguard.mcp._wire`.

Who may use it (:class:`Access`), checked on every request before anything else is read:

- ``Host`` names the listen address and port (for a loopback address also ``localhost``,
  ``127.0.0.1`` or ``[::1]``), and an ``Origin``, when sent, names the same: a web page that
  rebinds a DNS name to the loopback address (DNS rebinding) is refused with a 403, as the
  MCP transport specification requires of a local server;
- ``Authorization: Bearer TOKEN`` carries the listener's token (compared in constant time):
  else a 401;
- at most ``max_sessions`` sessions (each with its own upstream session: a process, for a
  stdio upstream) exist or are being opened: an ``initialize`` beyond that is a 503;
- a POST body must arrive within :data:`BODY_TOTAL_S` in all, with no pause over
  :data:`BODY_IDLE_S`: else a 408 (a body trickling in a byte at a time would hold its
  handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._frames import _PARSE_ERROR, _SESSION, MAX_FRAME_BYTES, _error_frame, _frames
from ._ports import (
    CALL_REFUSED_AS_NOTIFICATION,
    INVALID_REQUEST,
    Json,
    UpstreamFailed,
    _hashable,
    _note,
)

if TYPE_CHECKING:
    from aiohttp.web import BaseRequest, StreamResponse

    from ._link import Link

__all__ = ["Access", "HttpListener", "serve_http"]

BODY_IDLE_S = 30.0  # a POST body that stops arriving for this long is dropped (a 408)
BODY_TOTAL_S = 120.0  # and one that has not all arrived after this long (a 408)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_END = b""  # on a stream's queue, with final=True: the request gets no (more) answer


class _HttpClient:
    """:class:`~toolguard.mcp._link.ClientPort` of one HTTP session: each client request's POST
    stream, and the standalone GET stream."""

    def __init__(self, session_id: str, link: Link) -> None:
        self.id = session_id
        self.link = link
        self.streams: dict[Any, asyncio.Queue[tuple[bytes, bool]]] = {}
        self.standalone: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1000)
        self.listening = False
        self.open_requests = 0  # HTTP requests of the session being served now
        self.last_seen = asyncio.get_running_loop().time()

    def send(self, raw: bytes, stream: Any, final: bool) -> None:
        queue = self.streams.get(stream) if stream is not None else None
        if queue is not None:
            queue.put_nowait((raw, final))
            if final:
                del self.streams[stream]
        elif not final:  # for the GET stream; the oldest goes when nobody reads
            if self.standalone.full():
                self.standalone.get_nowait()
            self.standalone.put_nowait(raw)

    def end(self, stream: Any) -> None:
        queue = self.streams.pop(stream, None)
        if queue is not None:
            queue.put_nowait((_END, True))

    def end_all(self) -> None:
        """The session ended: every open stream of it ends now, each request it waited for
        answered with an error (an SSE stream ending without its answer leaves a client
        waiting)."""
        for stream, queue in list(self.streams.items()):
            queue.put_nowait((_error_frame(stream, "the session ended before the answer")[0],
                              True))
        self.streams.clear()
        if self.standalone.full():
            self.standalone.get_nowait()
        self.standalone.put_nowait(None)


def is_loopback(host: str) -> bool:
    """Whether the listen address ``host`` is reachable from this machine only."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")  # noqa: S104 - recognising it, not binding it


@dataclasses.dataclass(frozen=True)
class Access:
    """Who may use an :class:`HttpListener` (see the module docstring).

    Attributes:
        host: the listen address (a name, or an IPv4 or IPv6 address without brackets).
        port: the listen port.
        token: the bearer token every request must carry.
        max_sessions: sessions (and so upstream sessions) at most, open or being opened.
        extra_hosts: more names a client may reach the listener by (``--allow-host``).
    """

    host: str
    port: int
    token: str
    max_sessions: int
    extra_hosts: frozenset[str] = frozenset()

    @functools.cached_property
    def names(self) -> frozenset[str] | None:
        """The host names ``Host`` and ``Origin`` may give (lower case, IPv6 without
        brackets); ``None``: any (a wildcard address, no ``extra_hosts``)."""
        names = {h.lower().strip("[]") for h in self.extra_hosts}
        if is_loopback(self.host):
            names |= LOOPBACK_NAMES | {self.host.lower()}
        elif not _is_wildcard(self.host):
            names.add(self.host.lower())
        elif not names:
            return None
        return frozenset(names)

    @functools.cached_property
    def _hosts(self) -> frozenset[str]:
        """``Host`` values accepted as they are spelled, without parsing (the usual case)."""
        spelled = set()
        for name in self.names or ():
            bracketed = f"[{name}]" if ":" in name else name
            spelled.add(f"{bracketed}:{self.port}")
            if self.port == 80:
                spelled.add(bracketed)
        return frozenset(spelled)

    @functools.cached_property
    def _token(self) -> bytes:
        return self.token.encode()

    def refusal(self, host: str | None, origin: str | None, authorization: str | None
                ) -> tuple[int, str] | None:
        """The status and reason to refuse a request with these headers; ``None``: it may
        be served."""
        if host not in self._hosts and not self._names_us(f"//{host}" if host else None):
            return 403, "forbidden: the Host header does not name this listener"
        if origin is not None and not self._names_us(origin, ("http", "https")):
            return 403, "forbidden origin"
        scheme, _, token = (authorization or "").strip().partition(" ")
        # bytes, as a header may carry anything (aiohttp keeps undecodable bytes as
        # surrogates); compared in constant time
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode("utf-8", "surrogateescape"), self._token):
            return 401, "unauthorized: send Authorization: Bearer <the proxy's token>"
        return None

    def _names_us(self, url: str | None, schemes: tuple[str, ...] = ("",)) -> bool:
        from urllib.parse import urlsplit

        if url is None:
            return False
        try:
            parts = urlsplit(url)
            port = parts.port or {"https": 443}.get(parts.scheme, 80)
        except ValueError:  # "http://[::1", a port out of range: refused, not a 500
            return False
        names = self.names
        return (parts.scheme in schemes and port == self.port and parts.hostname is not None
                and (names is None or parts.hostname in names))


class HttpListener:
    """The proxy's streamable-HTTP endpoint at ``/mcp``, served by aiohttp's low-level
    server (:func:`serve_http`).

    Args:
        new_link: makes a link to a fresh upstream session (raises
            :class:`~toolguard.mcp._link.UpstreamFailed`).
        spare: the link made at start-up, given to the first session.
        access: who may use it.
        idle_timeout_s: a session with no HTTP request open for this many seconds is ended
            as by a DELETE (its upstream session closed); its id then gets 404, on which a
            client starts a new session. ``None``: sessions live until deleted.
    """

    def __init__(self, new_link: Callable[[], Awaitable[Link]], spare: Link | None,
                 access: Access, idle_timeout_s: float | None = None) -> None:
        self._new_link = new_link
        self._spare = spare
        self._access = access
        self._idle_timeout_s = idle_timeout_s
        self._reaper: asyncio.Task[None] | None = None
        self._opening = 0  # sessions whose upstream session is being opened
        self.sessions: dict[str, _HttpClient] = {}

    async def close(self) -> None:
        """End every session (and the spare link)."""
        if self._reaper is not None:
            self._reaper.cancel()
        clients = list(self.sessions.values())
        links = [c.link for c in clients]
        for client in clients:
            client.end_all()
        if self._spare is not None:
            links.append(self._spare)
        self.sessions.clear()
        self._spare = None
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)

    async def handle(self, request: BaseRequest) -> StreamResponse:
        """Serve one HTTP request (aiohttp's low-level handler)."""
        from aiohttp import web

        if request.path != "/mcp":
            return web.Response(status=404, text="not found")
        method = request.method
        if method not in ("GET", "POST", "DELETE"):
            return web.Response(status=405, text="method not allowed",
                                headers={"allow": "GET, POST, DELETE"})
        headers = request.headers
        refused = self._access.refusal(headers.get("host"), headers.get("origin"),
                                       headers.get("authorization"))
        if refused is not None:
            status, why = refused
            return web.Response(status=status, text=why, headers={
                "www-authenticate": 'Bearer realm="toolguard mcp-proxy"'} if status == 401
                else None)
        if method == "POST":
            return await self._post(request)
        client = self.sessions.get(request.headers.get(_SESSION, ""))
        if client is None:
            return web.Response(status=404, text="unknown or missing Mcp-Session-Id")
        if method == "DELETE":
            await self._end_session(client)
            return web.Response(status=200)
        return await self._listen(request, client)

    async def _end_session(self, client: _HttpClient) -> None:
        if self.sessions.pop(client.id, None) is not None:
            client.end_all()
            await asyncio.shield(client.link.close())  # to the end, if the client leaves

    async def _post(self, request: BaseRequest) -> StreamResponse:
        from aiohttp import web

        body = await _body(request)
        if body is None:
            return web.Response(status=408, text=f"the body did not arrive in time (a pause "
                                f"over {BODY_IDLE_S:g} s, or over {BODY_TOTAL_S:g} s in all)")
        frames = _frames(body.strip())
        if frames is None:
            return web.Response(body=_PARSE_ERROR, status=400, content_type="application/json")
        # requests whose answer this POST waits for, each on its own id: a stream keyed twice
        # would leave one POST waiting for an answer that goes to the other
        requests = [m["id"] for _, m in frames if isinstance(m.get("method"), str) and "id" in m]
        if not all(_hashable(rid) for rid in requests):  # checked before a session is made
            return _jsonrpc_error(None, "a request id is a string or an integer", 400,
                                  INVALID_REQUEST)
        if any(m.get("method") == "initialize" for _, m in frames):
            if len(frames) != 1:
                return _jsonrpc_error(None, "initialize must come alone", 400)
            cap = self._access.max_sessions
            if len(self.sessions) + self._opening >= cap:
                return _jsonrpc_error(frames[0][1].get("id"), f"too many sessions (at most "
                                      f"{cap}): end one with DELETE, or wait for one to "
                                      "time out", 503)
            self._opening += 1
            try:  # shielded: a client leaving meanwhile must not leave a half-made session
                client = await asyncio.shield(self._open_session())
            except UpstreamFailed as exc:
                return _jsonrpc_error(frames[0][1].get("id"), str(exc), 200)
            finally:
                self._opening -= 1
        else:
            if any(_refused_notification(m) for _, m in frames):
                return _jsonrpc_error(None, CALL_REFUSED_AS_NOTIFICATION, 400, INVALID_REQUEST)
            found = self.sessions.get(request.headers.get(_SESSION, ""))
            if found is None:
                return _jsonrpc_error(None, "unknown or missing Mcp-Session-Id", 404)
            client = found
        headers = {_SESSION: client.id}
        seen: set[Any] = set()
        for rid in requests:
            if rid in client.streams or rid in seen:
                return _jsonrpc_error(rid, f"request id {rid!r} is in use", 409,
                                      INVALID_REQUEST)
            seen.add(rid)
        client.last_seen = asyncio.get_running_loop().time()
        if not requests:
            for raw, message in frames:
                client.link.from_client(raw, message)
            return web.Response(status=202, headers=headers)
        queue: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue()
        for rid in requests:
            client.streams[rid] = queue
        client.open_requests += 1
        try:
            for raw, message in frames:
                client.link.from_client(raw, message)
            first = await queue.get()
            if len(requests) == 1 and first[1] and first[0]:
                return web.Response(body=first[0], content_type="application/json",
                                    headers=headers)
            return await _sse(request, first, queue, len(requests), headers)
        finally:  # answered, or the client went away (aiohttp cancels the handler)
            client.open_requests -= 1
            client.last_seen = asyncio.get_running_loop().time()
            for rid in requests:
                if client.streams.get(rid) is queue:
                    del client.streams[rid]

    async def _open_session(self) -> _HttpClient:
        link, self._spare = self._spare, None
        if link is None:
            link = await self._new_link()
        client = _HttpClient(secrets.token_hex(16), link)
        link.attach(client, client.id)
        self.sessions[client.id] = client
        if self._idle_timeout_s is not None and self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap(
                self._idle_timeout_s))
        return client

    async def _reap(self, idle_s: float) -> None:
        """End the sessions idle for ``idle_s`` seconds, checking a few times per period."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 30.0))
            now = loop.time()
            idle = [c for c in self.sessions.values() if c.open_requests == 0
                    and not c.listening and now - c.last_seen >= idle_s]
            for client in idle:
                _note_idle(client.id, idle_s)
                await self._end_session(client)

    async def _listen(self, request: BaseRequest, client: _HttpClient) -> StreamResponse:
        from aiohttp import web

        if client.listening:
            return web.Response(status=409, text="a GET stream is already open")
        client.listening = True
        try:
            response = await _event_stream(request, {_SESSION: client.id})
            while (raw := await client.standalone.get()) is not None:
                await response.write(b"event: message\ndata: " + raw + b"\n\n")
            await response.write_eof()
            return response
        finally:  # the session ended, or the client went away
            client.listening = False
            client.last_seen = asyncio.get_running_loop().time()


def _refused_notification(message: Json) -> bool:
    return message.get("method") == "tools/call" and "id" not in message


async def _body(request: BaseRequest) -> bytes | None:
    """The POST's body; ``None`` when ``BODY_IDLE_S`` pass without a byte of it, or it is
    not all there ``BODY_TOTAL_S`` after the headers (a client that never finishes its body,
    or trickles it, would hold its handler forever).

    Raises:
        aiohttp.web.HTTPRequestEntityTooLarge: it is, or says it is, over ``MAX_FRAME_BYTES``.
    """
    from aiohttp import web

    size = request.content_length
    if size is not None and size > MAX_FRAME_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_FRAME_BYTES, actual_size=size)
    content = request.content
    body = bytearray()
    deadline = asyncio.get_running_loop().time() + BODY_TOTAL_S
    while True:
        # what has arrived already (a small POST's whole body, usually) is taken without a
        # timer: asyncio.wait_for costs a task and a loop iteration per chunk
        try:
            chunk = content.read_nowait()
            if not chunk:
                if content.at_eof():
                    return bytes(body)
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return None
                chunk = await asyncio.wait_for(content.readany(), min(BODY_IDLE_S, left))
                if not chunk:
                    return bytes(body)
        except asyncio.TimeoutError:
            return None
        except ConnectionError:  # the client left mid-body: nobody reads the answer
            raise web.HTTPBadRequest(text="the connection closed inside the body") from None
        body += chunk
        if len(body) > MAX_FRAME_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_FRAME_BYTES, actual_size=len(body))


def _note_idle(session_id: str, idle_s: float) -> None:
    _note(f"ended HTTP session {session_id[:8]}... after {idle_s:g} s without a request")


async def _event_stream(request: BaseRequest, headers: dict[str, str]) -> StreamResponse:
    from aiohttp import web

    response = web.StreamResponse(headers={**headers, "cache-control": "no-cache"})
    response.content_type = "text/event-stream"
    await response.prepare(request)
    return response


async def _sse(request: BaseRequest, first: tuple[bytes, bool],
               queue: asyncio.Queue[tuple[bytes, bool]], pending: int,
               headers: dict[str, str]) -> StreamResponse:
    """The answers of a POST's requests (and what the upstream sent about them) as SSE,
    until each request has its answer."""
    response = await _event_stream(request, headers)
    left, item = pending, first
    while True:
        if item[0]:
            await response.write(b"event: message\ndata: " + item[0] + b"\n\n")
        if item[1]:
            left -= 1
            if left == 0:
                break
        item = await queue.get()
    await response.write_eof()
    return response


def _jsonrpc_error(rid: Any, message: str, status: int, code: int = -32000) -> StreamResponse:
    from aiohttp import web

    return web.Response(body=_error_frame(rid, message, code)[0], status=status,
                        content_type="application/json")


def _server_logger() -> logging.Logger:
    """aiohttp's server log, with a client's malformed HTTP (a bad chunk size, a header over
    8 KiB) as one line: its 400 is the client's fault, no traceback of the proxy's."""
    logger = logging.getLogger("toolguard.mcp_proxy.http")
    if not logger.filters:
        logger.addFilter(_client_fault)
    return logger


def _client_fault(record: logging.LogRecord) -> bool:
    from aiohttp.http_exceptions import HttpProcessingError

    exc = record.exc_info[1] if record.exc_info else None
    if not isinstance(exc, HttpProcessingError):
        return True
    first = (exc.message or type(exc).__name__).strip().splitlines()[0]
    _note(f"refused a malformed HTTP request (HTTP {exc.code}): {first[:200]}")
    return False


async def serve_http(listener: HttpListener, host: str, port: int) -> None:
    """Serve ``listener`` on ``host:port`` with aiohttp's low-level server (no router, no
    access log; a handler is cancelled when its client goes away) until SIGTERM or SIGINT;
    then end every session."""
    import signal

    from aiohttp import web

    loop = asyncio.get_running_loop()

    def request(message: Any, payload: Any, protocol: Any, writer: Any,
                task: asyncio.Task[None]) -> BaseRequest:
        return web.BaseRequest(message, payload, protocol, writer, task, loop,
                               client_max_size=MAX_FRAME_BYTES)

    server = web.Server(listener.handle, request_factory=request, handler_cancellation=True,
                        access_log=None, logger=_server_logger())
    runner = web.ServerRunner(server, shutdown_timeout=1.0)
    await runner.setup()
    stop = asyncio.Event()
    try:
        await web.TCPSite(runner, host, port).start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows
                loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await listener.close()
        await runner.cleanup()
