"""The transports of ``toolguard mcp-proxy``, on raw JSON-RPC frames.

- :class:`StdioUpstream`: the upstream server as a subprocess; newline-delimited JSON on its
  stdin/stdout, its stderr kept for error messages.
- :class:`HttpUpstream`: a streamable-HTTP upstream (an aiohttp client session): one POST
  per message, answers as JSON or SSE on that POST (``related`` to its request), plus the
  standalone GET stream.
- :func:`serve_stdio`: the proxy's own stdio, one client session.
- :class:`HttpListener`: the proxy serving streamable HTTP (aiohttp's low-level server), one
  link per ``Mcp-Session-Id``.

Frames are parsed with orjson only to learn what they are; the bytes read are the bytes sent
on (a frame that carries newlines, e.g. a pretty-printed HTTP body, is re-serialised compact,
since newline-delimited stdio and SSE ``data:`` lines cannot carry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import orjson

from ._mcp_link import Json, Link, UpstreamFailed, dumps

if TYPE_CHECKING:
    from aiohttp.web import BaseRequest, StreamResponse

__all__ = ["HttpListener", "HttpUpstream", "StdioUpstream", "serve_stdio"]

MAX_FRAME_BYTES = 256 * 1024 * 1024  # one JSON-RPC message, on stdio (asyncio's line limit)
_STDERR_TAIL_LINES = 12
_SESSION = "mcp-session-id"
_VERSION = "mcp-protocol-version"


def _nothing(*_: Any) -> None:
    return None


def _frames(data: bytes) -> list[tuple[bytes, Json]] | None:
    """The JSON-RPC messages of one frame (a message, or a batch of them); ``None`` when it is
    not JSON-RPC."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if isinstance(parsed, dict):
        if parsed.get("jsonrpc") != "2.0":
            return None
        return [(data if b"\n" not in data else dumps(parsed), parsed)]
    if isinstance(parsed, list) and parsed and all(
            isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in parsed):
        return [(dumps(m), m) for m in parsed]
    return None


class _Lines:
    """Splits a byte stream into its newline-terminated frames, calling ``on_frame`` with each
    non-blank one (without its line end) as soon as it is complete: no reader task, no
    coroutine hand-off per message."""

    def __init__(self, on_frame: Callable[[bytes], None]) -> None:
        self._on_frame = on_frame
        self._partial = bytearray()
        self.overrun = False

    def feed(self, data: bytes) -> None:
        if b"\n" not in data:
            self._partial += data
            if len(self._partial) > MAX_FRAME_BYTES:
                self.overrun = True
                self._partial.clear()
            return
        if self._partial:
            data = bytes(self._partial) + data
            self._partial.clear()
        *lines, rest = data.split(b"\n")
        if rest:
            self._partial += rest
        for line in lines:
            if line and not line.isspace():
                self._on_frame(line.rstrip(b"\r"))


class _UpstreamProtocol(asyncio.SubprocessProtocol):
    def __init__(self, owner: StdioUpstream) -> None:
        self._owner = owner
        self._lines = _Lines(owner._frame)
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._lines.feed(data)
            if self._lines.overrun:
                self._owner._set_gone(f"it wrote a message over {MAX_FRAME_BYTES} bytes")

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            asyncio.get_running_loop().create_task(self._owner._stdout_closed())

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class StdioUpstream:
    """The upstream as a subprocess speaking MCP on stdio.

    Args:
        command: its command line (run with the proxy's environment).
    """

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.name = shlex.join(command)
        self.gone: str | None = None
        self.handler: Callable[[bytes, Json, Any], None] = _nothing
        self.on_gone: Callable[[], None] = _nothing
        self.on_garbage: Callable[[bytes], None] = _nothing
        self._errlog = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._transport: asyncio.SubprocessTransport | None = None
        self._protocol: _UpstreamProtocol | None = None
        self._stdin: asyncio.WriteTransport | None = None

    async def start(self) -> None:
        """Start the process.

        Raises:
            UpstreamFailed: it could not be started (no such file, not executable).
        """
        loop = asyncio.get_running_loop()
        try:
            self._transport, self._protocol = await loop.subprocess_exec(
                lambda: _UpstreamProtocol(self), *self.command, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self._errlog)
        except OSError as exc:
            raise UpstreamFailed(f"the upstream MCP server `{self.name}` could not start "
                                 f"({type(exc).__name__}: {exc})") from None
        self._stdin = cast("asyncio.WriteTransport", self._transport.get_pipe_transport(0))

    def _frame(self, line: bytes) -> None:
        frames = _frames(line)
        if frames is None:
            self.on_garbage(line)
            return
        for raw, message in frames:
            self.handler(raw, message, None)

    async def _stdout_closed(self) -> None:
        why = "its stdout closed"
        if self._protocol is not None and self._transport is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._protocol.exited), 1.0)
                why = f"it exited with code {self._transport.get_returncode()}"
        self._set_gone(why)

    def _set_gone(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
            self.on_gone()

    def send(self, raw: bytes, message: Json) -> None:
        """Write one message (and its newline) to the upstream's stdin."""
        if self._stdin is None or self._stdin.is_closing():
            self._set_gone("its stdin closed")
            return
        self._stdin.write(raw + b"\n")

    def opened(self, protocol_version: str) -> None:
        """Nothing to do on stdio."""

    def stderr_tail(self) -> str:
        """The last lines the upstream wrote to stderr."""
        if self._errlog.closed:
            return ""
        self._errlog.flush()
        self._errlog.seek(0)
        lines = self._errlog.read().decode("utf-8", "replace").splitlines()
        self._errlog.seek(0, 2)
        return "\n".join(lines[-_STDERR_TAIL_LINES:])

    def describe_gone(self) -> str:
        """The error text every call gets once the upstream is gone."""
        tail = self.stderr_tail()
        return (f"the upstream MCP server `{self.name}` is gone ({self.gone}); the call was not "
                f"run." + (f" Its stderr ended with:\n{tail}" if tail else ""))

    async def close(self) -> None:
        """Close its stdin, give it 2 s to exit, then terminate (and kill) it."""
        transport, protocol = self._transport, self._protocol
        if transport is not None and protocol is not None:
            if self._stdin is not None:
                self._stdin.close()
            for stop in (None, transport.terminate, transport.kill):
                if protocol.exited.done():
                    break
                if stop is not None:
                    with contextlib.suppress(ProcessLookupError):
                        stop()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(protocol.exited), 2.0)
            transport.close()
        self._errlog.close()


class _Events:
    """Splits a ``text/event-stream`` body, fed in chunks of any size, into its events, as the
    HTML standard's event-stream interpretation says (the rules httpx2's ``EventSource``
    follows, which :mod:`tests.test_mcp_wire` holds this to under hypothesis): a line ends in
    CRLF, LF or CR, also when a chunk boundary splits the CRLF; an event's ``data`` lines are
    joined with LF; a blank line dispatches it; comments, ``id`` and ``retry`` are ignored; an
    event left without its blank line at the end of the body is dropped. ``on_data`` gets the
    data of each ``message`` event (the default type) that has any, as bytes."""

    def __init__(self, on_data: Callable[[bytes], None]) -> None:
        self._on_data = on_data
        self._partial = bytearray()  # the line being read
        self._data: list[bytes] = []
        self._event = b""
        self._skip_lf = False  # the last chunk ended in CR: a LF next is the same line end
        self.overrun = False

    def feed(self, chunk: bytes) -> None:
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        if b"\n" not in chunk and b"\r" not in chunk:
            self._partial += chunk
            if len(self._partial) > MAX_FRAME_BYTES:
                self.overrun = True
                self._partial.clear()
            return
        if self._partial:
            chunk = bytes(self._partial) + chunk
            self._partial.clear()
        if b"\r" in chunk:
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = chunk.split(b"\n")
        if rest:
            self._partial += rest
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line:
            data, event = self._data, self._event
            self._data, self._event = [], b""
            if data and event in (b"", b"message"):
                joined = data[0] if len(data) == 1 else b"\n".join(data)
                if joined:
                    self._on_data(joined)
            return
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value


def _why(exc: BaseException) -> str:
    """An HTTP client error as one phrase: its kind and message. A refused or unresolvable
    connection is ``ConnectError`` whatever the HTTP library calls it (the name the proxy has
    always given it, which users' log searches may hold)."""
    import aiohttp

    kind = "ConnectError" if isinstance(exc, aiohttp.ClientConnectorError) else type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError) and not str(exc):
        return f"{kind}: no answer in time"
    return f"{kind}: {exc}" if str(exc) else kind


def env_proxy(url: str) -> dict[str, Any]:
    """The HTTP proxy the environment names for ``url`` (``HTTP_PROXY``/``HTTPS_PROXY``,
    ``NO_PROXY``, credentials in the proxy URL or ``~/.netrc``), as aiohttp's own reader of
    them finds it, and as httpx2, the SDK's client, honours them by default.

    Returns:
        ``{"proxy": URL, "proxy_headers": {...}}`` to pass to each request, or ``{}`` for
        none. Read once per upstream session: aiohttp's ``trust_env`` reads the environment
        again in a thread on every request.
    """
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        return {}
    via: dict[str, Any] = {"proxy": proxy}
    if auth is not None:
        via["proxy_headers"] = {"proxy-authorization": auth.encode()}
    return via


class HttpUpstream:
    """A streamable-HTTP upstream session (an aiohttp client session of its own: keep-alive
    connections to the upstream, the C llhttp parser): one POST per message, answers as JSON
    or SSE on that POST (``related`` to its request), plus the standalone GET stream.

    Args:
        url: its MCP endpoint.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = url
        self.gone: str | None = None
        self.handler: Callable[[bytes, Json, Any], None] = _nothing
        self.on_gone: Callable[[], None] = _nothing
        self.on_garbage: Callable[[bytes], None] = _nothing
        self.session_id: str | None = None
        self._version: str | None = None
        self._http: Any = None  # the aiohttp.ClientSession, made in start() (inside the loop)
        self._via: dict[str, Any] = {}  # the proxy to reach it through, if the environment has one
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Make the HTTP client; nothing connects yet (the first POST, ``initialize``, does)."""
        import aiohttp

        # no overall deadline: an SSE answer lasts as long as its call, the GET stream as
        # long as the session; connecting gets 30 s, as a pooled connection waits for its turn
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=None, connect=30.0, sock_connect=30.0, sock_read=None))
        self._via = env_proxy(self.url)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        headers = {"accept": accept, "content-type": "application/json"}
        if self.session_id is not None:
            headers[_SESSION] = self.session_id
        if self._version is not None:
            headers[_VERSION] = self._version
        return headers

    def send(self, raw: bytes, message: Json) -> None:
        """POST one message; its answers (JSON or SSE) reach the handler as they come."""
        self._spawn(self._post(raw, message))

    def opened(self, protocol_version: str) -> None:
        """Send the version header from now on; open the standalone GET stream."""
        self._version = protocol_version
        self._spawn(self._listen())

    async def _post(self, raw: bytes, message: Json) -> None:
        import aiohttp

        rid = message.get("id") if "method" in message else None
        try:
            async with self._http.post(self.url, data=raw, headers=self._headers(),
                                       **self._via) as response:
                sid = response.headers.get(_SESSION)
                if sid and self.session_id is None:
                    self.session_id = sid
                if response.status == 202 or rid is None:
                    return
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if response.status == 404 and self.session_id is not None:
                    self._set_gone("it no longer knows the session (HTTP 404)")
                elif kind == "text/event-stream":
                    await self._events(response, rid)
                    return
                elif kind == "application/json":
                    self._deliver(await response.read(), rid)
                    return
                why = f"it answered HTTP {response.status} ({kind or 'no content type'})"
                if self._version is None:  # not even initialize: this is no MCP endpoint
                    self._set_gone(why)
                self._fail(rid, why)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self._set_gone(_why(exc))
            if rid is not None:
                self._fail(rid, f"it could not be reached ({self.gone})")

    async def _events(self, response: Any, related: Any) -> None:
        events = _Events(lambda data: self._deliver(data, related))
        async for chunk in response.content.iter_any():
            events.feed(chunk)
            if events.overrun:
                self._set_gone(f"it sent an event over {MAX_FRAME_BYTES} bytes")
                return

    def _deliver(self, data: bytes, related: Any) -> None:
        frames = _frames(data.strip())
        if frames is None:
            self.on_garbage(data)
            return
        for raw, message in frames:
            self.handler(raw, message, related)

    def _fail(self, rid: Any, why: str) -> None:
        self.handler(*_error_frame(rid, f"the upstream MCP server `{self.name}`: {why}"), rid)

    async def _listen(self) -> None:
        import aiohttp

        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with self._http.get(self.url, headers=self._headers("text/event-stream"),
                                      **self._via) as response:
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if response.status == 200 and kind == "text/event-stream":
                    await self._events(response, None)

    def _set_gone(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
            self.on_gone()

    def describe_gone(self) -> str:
        """The error text every call gets once the upstream is gone."""
        return f"the upstream MCP server `{self.name}` is gone ({self.gone}); the call was not run."

    async def close(self) -> None:
        """End the session (DELETE, 2 s at most), close the connections."""
        import aiohttp

        for task in list(self._tasks):
            task.cancel()
        if self._http is None:
            return
        if self.session_id is not None and self.gone is None:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._http.delete(self.url, headers=self._headers(), **self._via,
                                             timeout=aiohttp.ClientTimeout(total=2.0)):
                    pass
        await self._http.close()


def _error_frame(rid: Any, message: str) -> tuple[bytes, Json]:
    body: Json = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": message}}
    return dumps(body), body


# -- the proxy's own stdio --------------------------------------------------------------------
class _StdioClient:
    """:class:`~toolguard._mcp_link.ClientPort` on the proxy's stdout (one stream)."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write

    def send(self, raw: bytes, stream: Any, final: bool) -> None:
        self._write(raw + b"\n")

    def end(self, stream: Any) -> None:
        """Nothing to close on stdio."""


class _StdinProtocol(asyncio.Protocol):
    def __init__(self, lines: _Lines, done: asyncio.Future[None]) -> None:
        self._lines = lines
        self._done = done

    def data_received(self, data: bytes) -> None:
        self._lines.feed(data)

    def eof_received(self) -> bool:
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def _stdout_writer() -> Callable[[bytes], None]:
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    except ValueError:  # a regular file: plain blocking writes
        def write(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        return write
    return transport.write


async def serve_stdio(link: Link) -> None:
    """Serve one client on the proxy's stdin/stdout until stdin closes."""
    client = _StdioClient(await _stdout_writer())
    link.attach(client)

    def frame(line: bytes) -> None:
        frames = _frames(line)
        if frames is None:
            client.send(_PARSE_ERROR, None, False)
            return
        for raw, message in frames:
            link.from_client(raw, message)

    lines = _Lines(frame)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    try:
        await loop.connect_read_pipe(lambda: _StdinProtocol(lines, done), sys.stdin)
    except ValueError:  # a regular file: read it in a thread
        while data := await asyncio.to_thread(sys.stdin.buffer.readline):
            lines.feed(data)
        lines.feed(b"\n")
        return
    await done
    lines.feed(b"\n")  # a last message without its newline


_PARSE_ERROR = (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":'
                b'"not a JSON-RPC 2.0 message"}}')


# -- the proxy serving streamable HTTP ----------------------------------------------------------
_END = b""  # on a stream's queue, with final=True: the request gets no (more) answer


class _HttpClient:
    """:class:`~toolguard._mcp_link.ClientPort` of one HTTP session: each client request's POST
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
        """The session ended: every open stream of it ends now."""
        for stream in list(self.streams):
            self.end(stream)
        if self.standalone.full():
            self.standalone.get_nowait()
        self.standalone.put_nowait(None)


class HttpListener:
    """The proxy's streamable-HTTP endpoint at ``/mcp``, served by aiohttp's low-level
    server (:func:`serve_http`).

    Args:
        new_link: makes a link to a fresh upstream session (raises
            :class:`~toolguard._mcp_link.UpstreamFailed`).
        spare: the link made at start-up, given to the first session.
        host: the address served (an ``Origin`` header must name it or localhost).
        idle_timeout_s: a session with no HTTP request open for this many seconds is ended
            as by a DELETE (its upstream session closed); its id then gets 404, on which a
            client starts a new session. ``None``: sessions live until deleted.
    """

    def __init__(self, new_link: Callable[[], Awaitable[Link]], spare: Link | None,
                 host: str, idle_timeout_s: float | None = None) -> None:
        self._new_link = new_link
        self._spare = spare
        self._host = host
        self._idle_timeout_s = idle_timeout_s
        self._reaper: asyncio.Task[None] | None = None
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
        origin = request.headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            return web.Response(status=403, text="forbidden origin")
        if method == "POST":
            return await self._post(request)
        client = self.sessions.get(request.headers.get(_SESSION, ""))
        if client is None:
            return web.Response(status=404, text="unknown or missing Mcp-Session-Id")
        if method == "DELETE":
            await self._end_session(client)
            return web.Response(status=200)
        return await self._listen(request, client)

    def _origin_ok(self, origin: str) -> bool:
        from urllib.parse import urlsplit

        host = urlsplit(origin).hostname
        return host in ("localhost", "127.0.0.1", "::1", self._host)

    async def _end_session(self, client: _HttpClient) -> None:
        if self.sessions.pop(client.id, None) is not None:
            client.end_all()
            await asyncio.shield(client.link.close())  # to the end, if the client leaves

    async def _post(self, request: BaseRequest) -> StreamResponse:
        from aiohttp import web

        body = await request.read()
        frames = _frames(body.strip())
        if frames is None:
            return web.Response(body=_PARSE_ERROR, status=400, content_type="application/json")
        if any(m.get("method") == "initialize" for _, m in frames):
            if len(frames) != 1:
                return _jsonrpc_error(None, "initialize must come alone", 400)
            try:  # shielded: a client leaving meanwhile must not leave a half-made session
                client = await asyncio.shield(self._open_session())
            except UpstreamFailed as exc:
                return _jsonrpc_error(frames[0][1].get("id"), str(exc), 200)
        else:
            found = self.sessions.get(request.headers.get(_SESSION, ""))
            if found is None:
                return _jsonrpc_error(None, "unknown or missing Mcp-Session-Id", 404)
            client = found
        headers = {_SESSION: client.id}
        # requests whose answer this POST waits for (an id that is no string or number is
        # refused by the link, on the standalone stream)
        requests = [m["id"] for _, m in frames if isinstance(m.get("method"), str)
                    and isinstance(m.get("id"), (str, int))]
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


def _note_idle(session_id: str, idle_s: float) -> None:
    from ._mcp_link import _note

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


def _jsonrpc_error(rid: Any, message: str, status: int) -> StreamResponse:
    from aiohttp import web

    return web.Response(body=_error_frame(rid, message)[0], status=status,
                        content_type="application/json")


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
                        access_log=None)
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
