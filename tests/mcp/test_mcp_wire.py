"""The proxy's streamable-HTTP wire on aiohttp: the SSE splitter of the upstream side against
httpx2's reader (the SDK's own) under hypothesis, and the listener's HTTP behaviour tried with
raw requests on the real proxy (a subprocess): its statuses, a client that drops mid-stream,
DELETE ending a session and its stream, the idle timeout; ``server/discover``; the
environment's HTTP proxy."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from httpx2._sse import _SSEParser
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mcp.test_mcp_raw import _exchange
from tests.mcp_support import AUTH, ROOT, TEST_TIMEOUT_S, proxy_command, upstream_command
from tests.mcp_support import http_proxy as start_http_proxy
from toolguard.mcp._frames import MAX_FRAME_BYTES
from toolguard.mcp._http_upstream import _Events, env_proxy

# -- the SSE splitter -------------------------------------------------------------------------
_VALUE = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
_LINE_END = st.sampled_from(["\n", "\r\n", "\r"])
_FIELD_LINE = st.one_of(
    st.tuples(st.just("data"), st.sampled_from([": ", ":", ""]), _VALUE),
    st.tuples(st.just("event"), st.just(": "), st.sampled_from(["message", "ping", ""])),
    st.tuples(st.sampled_from(["id", "retry", "", "other"]), st.just(":"), _VALUE),
).map(lambda t: t[0] + (t[1] if t[1] or t[0] != "data" else "") + t[2])
_EVENT = st.lists(st.tuples(_FIELD_LINE, _LINE_END), max_size=5)


@st.composite
def _stream(draw: st.DrawFn) -> str:
    """A text/event-stream body: events of field lines and comments, each ended by a blank
    line (the last one maybe not), with every kind of line end."""
    parts: list[str] = []
    for lines in draw(st.lists(_EVENT, max_size=6)):
        parts.extend(line + end for line, end in lines)
        if draw(st.booleans()):
            parts.append(":a comment" + draw(_LINE_END))
        parts.append(draw(_LINE_END))
    if draw(st.booleans()):  # an event cut off at the end of the body: dropped
        parts.append("data: cut off" + draw(st.sampled_from(["", "\n", "\r\n"])))
    return "".join(parts)


def _reference(text: str) -> list[bytes]:
    """What httpx2's EventSource (the SDK's reader) makes of ``text``: the data of each
    ``message`` event that has some."""
    parser = _SSEParser(max_event_size=None)
    events = [*parser.decode(text), *parser.flush()]
    return [e.data.encode() for e in events if e.event == "message" and e.data]


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=400, deadline=None)
@given(_stream(), st.lists(st.integers(min_value=0), max_size=12))
def test_sse_splitter_reads_what_httpx2_reads_however_the_body_is_chunked(
        text: str, cuts: list[int]) -> None:
    got: list[bytes] = []
    events = _Events(got.append)
    for chunk in _split(text.encode(), cuts):  # a chunk may end inside a CRLF or a character
        events.feed(chunk)
    assert got == _reference(text)
    assert not events.overrun


def test_sse_splitter_one_chunk_per_byte_and_a_split_crlf() -> None:
    body = b"event: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: ping\r\n\r\ndata: x\r\n\r\n"
    got: list[bytes] = []
    events = _Events(got.append)
    for i in range(len(body)):
        events.feed(body[i:i + 1])
    assert got == [b'{"a":\n1}', b"x"]


def test_sse_splitter_refuses_a_line_over_the_frame_limit() -> None:
    got: list[bytes] = []
    events = _Events(got.append)
    events.feed(b"data: ")
    chunk = b"x" * (1 << 20)
    for _ in range(MAX_FRAME_BYTES // len(chunk) + 1):
        events.feed(chunk)
    assert events.overrun and got == []


# -- the listener, with raw HTTP --------------------------------------------------------------
INIT = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}})
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture(scope="module")
def proxy_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("wire")
    with start_http_proxy(tmp, tmp / "counts.json") as url:
        yield url


@asynccontextmanager
async def _http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TEST_TIMEOUT_S),
                                     headers=AUTH) as s:
        yield s


async def _open(http: aiohttp.ClientSession, url: str) -> str:
    """Initialize a session with raw requests; its Mcp-Session-Id."""
    async with http.post(url, data=INIT, headers=ACCEPT) as response:
        assert response.status == 200 and response.content_type == "application/json"
        answer = await response.json()
        assert answer["id"] == 1 and "protocolVersion" in answer["result"]
        sid = response.headers["mcp-session-id"]
    async with http.post(url, data=b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                         headers={**ACCEPT, "mcp-session-id": sid}) as response:
        assert response.status == 202
    return sid


async def _read_note(http: aiohttp.ClientSession, url: str, sid: str, rid: int) -> Any:
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
        "name": "read_note", "arguments": {"title": "todo"}}})
    async with http.post(url, data=body, headers={**ACCEPT, "mcp-session-id": sid}) as response:
        return response.status, (await response.json() if response.status == 200 else None)


async def test_listener_statuses(proxy_url: str) -> None:
    root = proxy_url.rsplit("/", 1)[0]
    async with _http() as http:
        sid = await _open(http, proxy_url)
        session = {**ACCEPT, "mcp-session-id": sid}
        async with http.put(proxy_url, data=b"{}", headers=session) as response:
            assert response.status == 405 and "POST" in response.headers["allow"]
        async with http.post(root + "/other", data=INIT, headers=ACCEPT) as response:
            assert response.status == 404
        async with http.post(proxy_url, data=INIT,
                             headers={**ACCEPT, "origin": "https://evil.example"}) as response:
            assert response.status == 403
        async with http.post(proxy_url, data=b"not json", headers=session) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == -32700
        for headers in (ACCEPT, {**ACCEPT, "mcp-session-id": "0" * 32}):
            async with http.post(proxy_url, data=b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
                                 headers=headers) as response:
                assert response.status == 404
                assert "Mcp-Session-Id" in (await response.json())["error"]["message"]
            async with http.get(proxy_url, headers=headers) as response:
                assert response.status == 404
        both = orjson.dumps([orjson.loads(INIT), {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
        async with http.post(proxy_url, data=both, headers=session) as response:
            assert response.status == 400  # initialize must come alone
        # an origin naming localhost passes; the answer is the upstream's, id and all
        status, answer = await _read_note(http, proxy_url, sid, 4)
        assert status == 200 and answer["id"] == 4
        assert answer["result"]["content"][0]["text"] == "buy milk"
        # one GET stream per session: a second one is refused while the first is open
        async with http.get(proxy_url, headers={**session, "accept": "text/event-stream"}
                            ) as stream:
            assert stream.status == 200 and stream.content_type == "text/event-stream"
            async with http.get(proxy_url, headers={**session, "accept": "text/event-stream"}
                                ) as second:
                assert second.status == 409
        # the client dropped the first: a new one may open (the proxy saw it go)
        for _ in range(100):
            async with http.get(proxy_url, headers={**session, "accept": "text/event-stream"}
                                ) as again:
                if again.status == 200:
                    break
            await asyncio.sleep(0.05)
        assert again.status == 200


async def test_a_client_dropping_mid_stream_leaves_the_session_serving(proxy_url: str) -> None:
    slow = orjson.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {
        "name": "count_slowly", "arguments": {"steps": 20}, "_meta": {"progressToken": "p"}}})
    async with _http() as http:
        sid = await _open(http, proxy_url)
        session = {**ACCEPT, "mcp-session-id": sid}
        async with http.post(proxy_url, data=slow, headers=session) as response:
            assert response.status == 200 and response.content_type == "text/event-stream"
            line = b""
            while not line.startswith(b"data:"):
                line = await response.content.readline()
            progress = orjson.loads(line[5:])
            assert progress["method"] == "notifications/progress"
            response.close()  # drop the connection while the call runs upstream
        # the same session goes on answering while the dropped call finishes upstream
        status, answer = await _read_note(http, proxy_url, sid, 11)
        assert status == 200 and answer["id"] == 11
        await asyncio.sleep(1.2)  # the dropped call's answer arrives with nobody to take it
        status, answer = await _read_note(http, proxy_url, sid, 12)
        assert status == 200 and answer["id"] == 12


async def test_delete_ends_the_session_and_its_get_stream(proxy_url: str) -> None:
    async with _http() as http:
        sid = await _open(http, proxy_url)
        session = {**ACCEPT, "mcp-session-id": sid}
        async with http.get(proxy_url, headers={**session, "accept": "text/event-stream"}
                            ) as stream:
            assert stream.status == 200
            async with http.delete(proxy_url, headers=session) as response:
                assert response.status == 200
            rest = await asyncio.wait_for(stream.content.read(), 5.0)  # ends, not hangs
            assert b"data:" not in rest
        status, _ = await _read_note(http, proxy_url, sid, 20)
        assert status == 404
        async with http.delete(proxy_url, headers=session) as response:
            assert response.status == 404


async def test_idle_sessions_end_after_the_timeout_open_ones_stay(tmp_path: Path) -> None:
    with start_http_proxy(tmp_path, tmp_path / "counts.json", "--session-idle-timeout",
                          "0.6") as url:
        async with _http() as http:
            idle, listening, busy = [await _open(http, url) for _ in range(3)]
            get = {**ACCEPT, "mcp-session-id": listening, "accept": "text/event-stream"}
            async with http.get(url, headers=get) as stream:
                assert stream.status == 200
                for rid in range(30, 36):  # a session in use stays, however long
                    await asyncio.sleep(0.25)
                    status, _ = await _read_note(http, url, busy, rid)
                    assert status == 200
                status, _ = await _read_note(http, url, listening, 40)
                assert status == 200  # an open GET stream keeps its session
            status, answer = await _read_note(http, url, idle, 41)
            assert status == 404, answer
            # a new session after that is served as ever
            status, _ = await _read_note(http, url, await _open(http, url), 42)
            assert status == 200


def test_session_idle_timeout_must_not_be_negative() -> None:
    done = subprocess.run(proxy_command("--session-idle-timeout", "-1", "--", "x"),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 2 and "--session-idle-timeout" in done.stderr


# -- the 2026-07-28 per-request envelope --------------------------------------------------------
DISCOVER = orjson.dumps({"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {
    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
              "io.modelcontextprotocol/clientCapabilities": {}}}})


async def test_server_discover_is_refused_clearly_and_initialize_still_works(
        tmp_path: Path, proxy_url: str) -> None:
    """The proxy speaks the handshake era (it initialized the upstream so): over stdio a
    ``server/discover`` reaches the upstream, which refuses the envelope on that connection
    with a JSON-RPC error; over HTTP, without a session, it is a 404 with a JSON-RPC error;
    either way the client's fallback, ``initialize``, is then served."""
    command = proxy_command(upstream=upstream_command(tmp_path / "counts.json"))
    with anyio.fail_after(TEST_TIMEOUT_S):
        answers = {m["id"]: m for m in map(orjson.loads,
                                           await _exchange(command, [DISCOVER, INIT], 2))}
    refused, initialized = answers["d"], answers[1]
    assert refused["error"]["code"] == -32600
    assert "handshake" in refused["error"]["message"]
    assert "protocolVersion" in initialized["result"]
    async with _http() as http:
        async with http.post(proxy_url, data=DISCOVER, headers=ACCEPT) as response:
            assert response.status == 404
            assert "error" in await response.json()
        await _open(http, proxy_url)


# -- the environment's HTTP proxy ---------------------------------------------------------------
@pytest.mark.parametrize(("url", "expected"), [
    ("http://10.1.2.3:8000/mcp", "http://proxy.example:3128"),
    ("https://tools.example/mcp", "http://secure-proxy.example:3129"),
    ("http://localhost:8000/mcp", None),  # NO_PROXY
    ("http://internal.corp/mcp", None),
])
def test_the_upstream_is_reached_through_the_environments_proxy(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, expected: str | None) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY",
                 "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HTTP_PROXY", "http://user:secret@proxy.example:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy.example:3129")
    monkeypatch.setenv("NO_PROXY", "localhost,.corp")
    via = env_proxy(url)
    if expected is None:
        assert via == {}
        return
    assert str(via["proxy"]) == expected  # the credentials go in a header, not the URL
    if "secure" in expected:
        assert "proxy_headers" not in via
    else:
        assert via["proxy_headers"] == {"proxy-authorization": "Basic dXNlcjpzZWNyZXQ="}


def test_no_proxy_in_the_environment_means_a_direct_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("http://10.1.2.3:8000/mcp") == {}


def test_http_stacks_benchmark_smoke_run() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mcp_http_stacks.py"),
                           "--smoke"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TEST_TIMEOUT_S * 2, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    labels = [" ".join(row[:3 if row[0] == "client" else 2]) for row in rows]
    assert labels == ["listener aiohttp", "listener uvicorn-bare", "listener uvicorn-starlette",
                      "client aiohttp JSON", "client aiohttp SSE", "client httpx2 JSON",
                      "client httpx2 SSE"]
    assert all(row[-1] == "us" and float(row[-2]) >= 0 for row in rows)  # a figure, not asserted
