"""What forwarding raw JSON-RPC frames makes possible to get wrong, tried on the real proxy,
the real example upstream and the real MCP client (subprocesses; stdio and streamable HTTP):
ids of interleaved concurrent calls, progress reaching its own call, the upstream's own
requests (elicitation, sampling, roots) passing through to the right client, the proxy's own
approval question beside them, byte-for-byte answers, a large message, garbage upstreams."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mt
import orjson
import pytest
from mcp.client.session import ClientRequestContext

from tests.mcp_support import (
    TEST_TIMEOUT_S,
    counts,
    free_port,
    http_session,
    label,
    proxy_command,
    running,
    stdio_session,
    upstream_command,
)
from tests.mcp_support import http_proxy as start_http_proxy


def _text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent), result
    return first.text


async def test_interleaved_concurrent_calls_each_get_their_own_answer_and_progress(
        tmp_path: Path) -> None:
    command = proxy_command(upstream=upstream_command(tmp_path / "counts.json"))
    steps = [4, 1, 3, 2, 5]
    progress: dict[int, list[float]] = {n: [] for n in steps}
    answers: dict[Any, str] = {}

    async def slow(session: Any, n: int) -> None:
        async def seen(value: float, total: float | None, message: str | None) -> None:
            progress[n].append(value)
        answers[n] = _text(await session.call_tool("count_slowly", {"steps": n},
                                                   progress_callback=seen))

    async def read(session: Any, title: str) -> None:
        result = await session.call_tool("read_note", {"title": title})
        answers[title] = f"{label(result)}: {_text(result)}"

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command) as session, anyio.create_task_group() as group:
            for n in steps:  # answers come back in another order than asked
                group.start_soon(slow, session, n)
            group.start_soon(read, session, "todo")
            group.start_soon(read, session, "missing")
    assert {n: answers[n] for n in steps} == {n: f"counted to {n}" for n in steps}
    assert progress == {n: [float(i) for i in range(1, n + 1)] for n in steps}
    # the upstream's own error result (MCPServer hides its text) reaches its own call
    assert answers["todo"] == "allow: buy milk"
    assert answers["missing"] == "error: Error executing tool read_note"


def _client_callbacks(tag: str, asked: list[str], both: anyio.Event | None = None,
                      waiting: list[str] | None = None) -> dict[str, Any]:
    """Elicitation, sampling and roots callbacks that answer with ``tag`` (and, for the
    upstream's own elicitation, wait until ``both`` is set once two clients were asked)."""
    async def elicit(context: ClientRequestContext,
                     params: mt.ElicitRequestParams) -> mt.ElicitResult:
        asked.append(params.message)
        if params.message.startswith("toolguard:"):  # the proxy's own approval question
            return mt.ElicitResult(action="accept", content={"approve": True})
        if both is not None and waiting is not None:
            waiting.append(tag)
            if len(waiting) == 2:
                both.set()
            await both.wait()  # both clients' calls are in flight at once
        return mt.ElicitResult(action="accept", content={"ok": tag == "yes"})

    async def sample(context: ClientRequestContext,
                     params: mt.CreateMessageRequestParams) -> mt.CreateMessageResult:
        return mt.CreateMessageResult(role="assistant", model="test",
                                      content=mt.TextContent(type="text", text=f"hi {tag}"))

    async def roots(context: ClientRequestContext) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root(uri=f"file:///work/{tag}")])

    return {"elicitation": elicit, "sampling": sample, "roots": roots}


async def _ask_all(session: Any) -> list[str]:
    return [_text(await session.call_tool("ask_client", {"kind": kind}))
            for kind in ("elicit", "sample", "roots")]


APPROVE_ASKING = '[tools.ask_client]\nrequires_approval = true\n'


async def test_upstream_requests_pass_through_stdio_beside_the_proxys_own_question(
        tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(APPROVE_ASKING)
    command = proxy_command("--policy", str(policy),
                            upstream=upstream_command(tmp_path / "counts.json"))
    asked: list[str] = []
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command, **_client_callbacks("yes", asked)) as session:
            answers = await _ask_all(session)
    assert answers == ['elicit: accept {"ok": true}', "sample: hi yes",
                       "roots: file:///work/yes"]
    # each call: the proxy's approval question (its own id space), then the upstream's own
    assert [a.split(" ")[0] for a in asked] == ["toolguard:", "Proceed?", "toolguard:",
                                                "toolguard:"]
    assert counts(tmp_path / "counts.json") == {"ask_client": 3}


@pytest.fixture(scope="module", params=["http-upstream", "stdio-upstream"])
def http_url(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("raw-http")
    policy = tmp / "policy.toml"
    policy.write_text(APPROVE_ASKING)
    with start_http_proxy(tmp, tmp / "counts.json", "--policy", str(policy),
                          stdio_upstream=request.param == "stdio-upstream") as url:
        yield url


async def test_two_http_clients_each_get_their_own_upstream_requests(http_url: str) -> None:
    both = anyio.Event()
    waiting: list[str] = []
    asked: dict[str, list[str]] = {"yes": [], "no": []}
    answers: dict[str, list[str]] = {}

    async def client(tag: str) -> None:
        callbacks = _client_callbacks(tag, asked[tag], both, waiting)
        async with http_session(http_url, **callbacks) as session:
            answers[tag] = await _ask_all(session)

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with anyio.create_task_group() as group:
            group.start_soon(client, "yes")
            group.start_soon(client, "no")
    assert answers == {tag: [f'elicit: accept {{"ok": {str(tag == "yes").lower()}}}',
                             f"sample: hi {tag}", f"roots: file:///work/{tag}"]
                       for tag in ("yes", "no")}
    for tag in ("yes", "no"):  # each client was asked its own questions only
        assert [a.split(" ")[0] for a in asked[tag]] == ["toolguard:", "Proceed?",
                                                         "toolguard:", "toolguard:"]


@pytest.mark.parametrize("size", [3_000_000])
async def test_a_large_message_passes_through(tmp_path: Path, http_url: str, size: int) -> None:
    command = proxy_command(upstream=upstream_command(tmp_path / "counts.json"))
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command) as session:
            over_stdio = await session.call_tool("big_note", {"size": size})
        async with http_session(http_url) as session:
            over_http = await session.call_tool("big_note", {"size": size})
    for result in (over_stdio, over_http):
        assert label(result) == "allow" and _text(result) == "x" * size


async def _exchange(command: list[str], lines: list[bytes], answers: int) -> list[bytes]:
    """Write raw JSON-RPC lines to ``command``'s stdin; read ``answers`` lines back."""
    process = await anyio.open_process(command, stderr=subprocess.DEVNULL)
    out: list[bytes] = []
    buffer = b""
    try:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send(b"".join(line + b"\n" for line in lines))
        while len(out) < answers:
            buffer += await process.stdout.receive()
            *done, buffer = buffer.split(b"\n")
            out.extend(d for d in done if d)
    finally:
        process.terminate()
        await process.wait()
    return out


async def test_answers_are_the_upstreams_bytes(tmp_path: Path) -> None:
    """The same raw requests to the upstream directly and through the proxy: apart from
    ``initialize`` (the proxy answers it, naming itself), every answer is the upstream's own
    line, byte for byte, ids of both kinds included."""
    init = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    requests = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "a-string-id", "method": "resources/list"},
        {"jsonrpc": "2.0", "id": 7, "method": "prompts/get",
         "params": {"name": "summarize", "arguments": {"title": "todo"}}},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
         "params": {"name": "read_note", "arguments": {"title": "todo"}}},
        {"jsonrpc": "2.0", "id": 9, "method": "ping"},
        {"jsonrpc": "2.0", "id": 10, "method": "no/such/method"},
    ]
    lines = [init, *(orjson.dumps(r) for r in requests)]
    upstream = upstream_command(tmp_path / "counts.json")
    with anyio.fail_after(TEST_TIMEOUT_S):
        direct = await _exchange(upstream, lines, 6)
        proxied = await _exchange(proxy_command(upstream=upstream), lines, 6)
    def by_id(answers: list[bytes]) -> dict[Any, bytes]:
        return {orjson.loads(line)["id"]: line for line in answers}

    direct_by_id, proxied_by_id = by_id(direct), by_id(proxied)  # the server answers in
    assert set(direct_by_id) == {0, "a-string-id", 7, 8, 9, 10}  # any order it likes
    assert {k: v for k, v in proxied_by_id.items() if k != 0} == {
        k: v for k, v in direct_by_id.items() if k != 0}
    title = orjson.loads(proxied_by_id[0])["result"]["serverInfo"]["title"]
    assert title.endswith("(guarded by toolguard)")


def test_a_garbage_stdio_upstream_fails_with_one_clean_error() -> None:
    garbage = [sys.executable, "-c",
               "import time; print('Welcome to notes 1.0', flush=True); time.sleep(30)"]
    done = subprocess.run(proxy_command(upstream=garbage), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 1
    assert "does not speak MCP" in done.stderr and "Welcome to notes 1.0" in done.stderr
    assert "time.sleep(30)" in done.stderr  # names the upstream
    assert "Traceback" not in done.stderr and "pydantic" not in done.stderr.lower()
    assert len(done.stderr.strip().splitlines()) <= 2


def test_a_non_mcp_http_upstream_fails_with_one_clean_error(tmp_path: Path) -> None:
    port = free_port()
    with running([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                 port, tmp_path / "http.log"):
        done = subprocess.run(
            proxy_command("--upstream-url", f"http://127.0.0.1:{port}/mcp"),
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=TEST_TIMEOUT_S, check=False)
    assert done.returncode == 1
    assert f"http://127.0.0.1:{port}/mcp" in done.stderr and "HTTP 501" in done.stderr
    assert "Traceback" not in done.stderr
