"""The transports of ``toolguard mcp-proxy``, on raw JSON-RPC frames.

- :class:`StdioUpstream`: the upstream server as a subprocess; newline-delimited JSON on its
  stdin/stdout, its stderr kept for error messages.
- :class:`HttpUpstream`: a streamable-HTTP upstream (httpx, the SDK's own HTTP client): one
  POST per message, answers as JSON or SSE on that POST (``related`` to its request), plus the
  standalone GET stream.
- :func:`serve_stdio`: the proxy's own stdio, one client session.
- :class:`HttpListener`: the proxy serving streamable HTTP (a Starlette app under uvicorn,
  both installed with the SDK), one link per ``Mcp-Session-Id``.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

import orjson

from ._mcp_link import Json, Link, UpstreamFailed, dumps

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

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


class HttpUpstream:
    """A streamable-HTTP upstream session.

    Args:
        url: its MCP endpoint.
    """

    def __init__(self, url: str) -> None:
        import httpx2

        self.url = url
        self.name = url
        self.gone: str | None = None
        self.handler: Callable[[bytes, Json, Any], None] = _nothing
        self.on_gone: Callable[[], None] = _nothing
        self.on_garbage: Callable[[bytes], None] = _nothing
        self.session_id: str | None = None
        self._version: str | None = None
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=None))
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Nothing to start: the first POST (``initialize``) connects."""

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
        import httpx2

        rid = message.get("id") if "method" in message else None
        try:
            async with self._http.stream("POST", self.url, content=raw,
                                         headers=self._headers()) as response:
                sid = response.headers.get(_SESSION)
                if sid and self.session_id is None:
                    self.session_id = sid
                if response.status_code == 202 or rid is None:
                    return
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if response.status_code == 404 and self.session_id is not None:
                    self._set_gone("it no longer knows the session (HTTP 404)")
                elif kind == "text/event-stream":
                    await self._events(response, rid)
                    return
                elif kind == "application/json":
                    self._deliver(await response.aread(), rid)
                    return
                why = f"it answered HTTP {response.status_code} ({kind or 'no content type'})"
                if self._version is None:  # not even initialize: this is no MCP endpoint
                    self._set_gone(why)
                self._fail(rid, why)
        except httpx2.HTTPError as exc:
            self._set_gone(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            if rid is not None:
                self._fail(rid, f"it could not be reached ({self.gone})")

    async def _events(self, response: Any, related: Any) -> None:
        from httpx2 import EventSource

        async for event in EventSource(response, max_event_size=None):
            if event.event == "message" and event.data:
                self._deliver(event.data.encode(), related)

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
        import httpx2

        with contextlib.suppress(httpx2.HTTPError):
            async with self._http.stream("GET", self.url, headers=self._headers(
                    "text/event-stream")) as response:
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                if response.status_code == 200 and kind == "text/event-stream":
                    await self._events(response, None)

    def _set_gone(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
            self.on_gone()

    def describe_gone(self) -> str:
        """The error text every call gets once the upstream is gone."""
        return f"the upstream MCP server `{self.name}` is gone ({self.gone}); the call was not run."

    async def close(self) -> None:
        """End the session (DELETE), close the connections."""
        import httpx2

        for task in list(self._tasks):
            task.cancel()
        if self.session_id is not None and self.gone is None:
            with contextlib.suppress(httpx2.HTTPError):
                await self._http.delete(self.url, headers=self._headers(), timeout=2.0)
        await self._http.aclose()


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
class _HttpClient:
    """:class:`~toolguard._mcp_link.ClientPort` of one HTTP session: each client request's POST
    stream, and the standalone GET stream."""

    def __init__(self, session_id: str, link: Link) -> None:
        self.id = session_id
        self.link = link
        self.streams: dict[Any, asyncio.Queue[tuple[bytes, bool]]] = {}
        self.standalone: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1000)
        self.listening = False

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
            queue.put_nowait((b"", True))


class HttpListener:
    """The proxy's streamable-HTTP endpoint at ``/mcp``.

    Args:
        new_link: makes a link to a fresh upstream session (raises
            :class:`~toolguard._mcp_link.UpstreamFailed`).
        spare: the link made at start-up, given to the first session.
        host: the address served (an ``Origin`` header must name it or localhost).
    """

    def __init__(self, new_link: Callable[[], Awaitable[Link]], spare: Link | None,
                 host: str) -> None:
        self._new_link = new_link
        self._spare = spare
        self._host = host
        self.sessions: dict[str, _HttpClient] = {}

    def app(self) -> Any:
        """The ASGI app."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[Route("/mcp", self._endpoint, methods=["GET", "POST",
                                                                        "DELETE"])])

    async def close(self) -> None:
        """End every session (and the spare link)."""
        links = [c.link for c in self.sessions.values()]
        if self._spare is not None:
            links.append(self._spare)
        self.sessions.clear()
        self._spare = None
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)

    async def _endpoint(self, request: Request) -> Response:
        from starlette.responses import PlainTextResponse

        origin = request.headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            return PlainTextResponse("forbidden origin", status_code=403)
        if request.method == "POST":
            return await self._post(request)
        client = self.sessions.get(request.headers.get(_SESSION, ""))
        if client is None:
            return PlainTextResponse("unknown or missing Mcp-Session-Id", status_code=404)
        if request.method == "DELETE":
            del self.sessions[client.id]
            await client.link.close()
            return PlainTextResponse("", status_code=200)
        return self._listen(client)

    def _origin_ok(self, origin: str) -> bool:
        from urllib.parse import urlsplit

        host = urlsplit(origin).hostname
        return host in ("localhost", "127.0.0.1", "::1", self._host)

    async def _post(self, request: Request) -> Response:
        from starlette.responses import Response

        body = await request.body()
        frames = _frames(body.strip())
        if frames is None:
            return Response(_PARSE_ERROR, status_code=400, media_type="application/json")
        headers: dict[str, str] = {}
        if any(m.get("method") == "initialize" for _, m in frames):
            if len(frames) != 1:
                return _jsonrpc_error(None, "initialize must come alone", 400)
            try:
                client = await self._open_session()
            except UpstreamFailed as exc:
                return _jsonrpc_error(frames[0][1].get("id"), str(exc), 200)
        else:
            found = self.sessions.get(request.headers.get(_SESSION, ""))
            if found is None:
                return _jsonrpc_error(None, "unknown or missing Mcp-Session-Id", 404)
            client = found
        headers[_SESSION] = client.id
        # requests whose answer this POST waits for (an id that is no string or number is
        # refused by the link, on the standalone stream)
        requests = [m["id"] for _, m in frames if isinstance(m.get("method"), str)
                    and isinstance(m.get("id"), (str, int))]
        if not requests:
            for raw, message in frames:
                client.link.from_client(raw, message)
            return Response(status_code=202, headers=headers)
        queue: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue()
        for rid in requests:
            client.streams[rid] = queue
        for raw, message in frames:
            client.link.from_client(raw, message)
        first = await queue.get()
        if len(requests) == 1 and first[1] and first[0]:
            return Response(first[0], media_type="application/json", headers=headers)
        return _sse(first, queue, len(requests), client, requests, headers)

    async def _open_session(self) -> _HttpClient:
        link, self._spare = self._spare, None
        if link is None:
            link = await self._new_link()
        client = _HttpClient(secrets.token_hex(16), link)
        link.attach(client, client.id)
        self.sessions[client.id] = client
        return client

    def _listen(self, client: _HttpClient) -> Response:
        from starlette.responses import PlainTextResponse, StreamingResponse

        if client.listening:
            return PlainTextResponse("a GET stream is already open", status_code=409)
        client.listening = True

        async def events() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"event: message\ndata: " + await client.standalone.get() + b"\n\n"
            finally:
                client.listening = False

        return StreamingResponse(events(), media_type="text/event-stream", headers={
            _SESSION: client.id, "cache-control": "no-cache"})


def _sse(first: tuple[bytes, bool], queue: asyncio.Queue[tuple[bytes, bool]], pending: int,
         client: _HttpClient, requests: list[Any], headers: dict[str, str]) -> Response:
    from starlette.responses import StreamingResponse

    async def events() -> AsyncIterator[bytes]:
        left, item = pending, first
        try:
            while True:
                if item[0]:
                    yield b"event: message\ndata: " + item[0] + b"\n\n"
                if item[1]:
                    left -= 1
                    if left == 0:
                        return
                item = await queue.get()
        finally:
            for rid in requests:
                if client.streams.get(rid) is queue:
                    del client.streams[rid]

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={**headers, "cache-control": "no-cache"})


def _jsonrpc_error(rid: Any, message: str, status: int) -> Response:
    from starlette.responses import Response

    return Response(_error_frame(rid, message)[0], status_code=status,
                    media_type="application/json")


async def serve_http(listener: HttpListener, host: str, port: int) -> None:
    """Serve ``listener`` with uvicorn until the process is stopped; then end every session."""
    import uvicorn

    config = uvicorn.Config(listener.app(), host=host, port=port, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=1)
    try:
        await uvicorn.Server(config).serve()
    finally:
        await listener.close()
