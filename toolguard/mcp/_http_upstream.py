"""The streamable-HTTP upstream of ``toolguard mcp-proxy`` (:class:`HttpUpstream`, an aiohttp
client session), its SSE splitter and the environment's HTTP proxy for it; re-exported by
:mod:`toolguard.mcp._wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from ._frames import (
    _SESSION,
    _VERSION,
    MAX_FRAME_BYTES,
    UNKNOWN_OUTCOME,
    _error_frame,
    _frames,
    _nothing,
)
from ._ports import Json

__all__ = ["HttpUpstream", "env_proxy"]


class _Events:
    """Splits a ``text/event-stream`` body, fed in chunks of any size, into its events, as the
    HTML standard's event-stream interpretation says (the rules httpx2's ``EventSource``
    follows, which :mod:`tests.mcp.test_mcp_wire` holds this to under hypothesis): a line ends in
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


def _error_text(body: bytes) -> str:
    """``: `` and the message of an HTTP error's JSON body (a JSON-RPC error, or any object
    with a ``message``), or nothing."""
    import orjson

    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return f": {message[:500]}" if isinstance(message, str) and message else ""


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
                    if not await self._events(response, rid) and self.gone is None:
                        # no resumption here (Last-Event-ID): the answer will not come
                        self._fail(rid, "its event stream ended before the answer",
                                   unknown=True)
                    return
                elif kind == "application/json" and response.status < 300:
                    self._deliver(await response.read(), rid)
                    return
                why = f"it answered HTTP {response.status} ({kind or 'no content type'})"
                if kind == "application/json":  # an error's id (if any) is often null
                    why += _error_text(await response.read())
                if self._version is None:  # not even initialize: this is no MCP endpoint
                    self._set_gone(why)
                # a server error (a gateway's 502 or 504 among them) may come after the tool ran
                self._fail(rid, why, unknown=response.status >= 500)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self._set_gone(_why(exc))
            if rid is not None:
                self._fail(rid, f"it could not be reached ({self.gone})")

    async def _events(self, response: Any, related: Any) -> bool:
        """Deliver the events of an SSE answer; whether request ``related``'s answer was
        among them."""
        answered: list[bool] = []
        events = _Events(lambda data: self._deliver(data, related, answered))
        async for chunk in response.content.iter_any():
            events.feed(chunk)
            if events.overrun:
                self._set_gone(f"it sent an event over {MAX_FRAME_BYTES} bytes")
                break
        return bool(answered)

    def _deliver(self, data: bytes, related: Any, answered: list[bool] | None = None) -> None:
        frames = _frames(data.strip())
        if frames is None:
            self.on_garbage(data)
            return
        for raw, message in frames:
            if (answered is not None and related is not None and "method" not in message
                    and message.get("id") == related):
                answered.append(True)
            self.handler(raw, message, related)

    def _fail(self, rid: Any, why: str, unknown: bool = False) -> None:
        self.handler(*_error_frame(rid, f"the upstream MCP server `{self.name}`: {why}",
                                   data=UNKNOWN_OUTCOME if unknown else None), rid)

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

    def stderr_tail(self) -> str:
        """Nothing: an HTTP upstream's stderr is not the proxy's to read."""
        return ""

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
