"""The MCP proxy's link in-process, against the real example upstream server (a subprocess
over stdio): when an answer goes to the client and when the guard records the call. The
client side is the link's own port interface, recording what it is sent; everything else is
the proxy's code as ``toolguard mcp-proxy`` runs it."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

import toolguard as tg
from tests.mcp_support import TEST_TIMEOUT_S, counts, upstream_command
from toolguard.adapters.mcp import GuardMiddleware
from toolguard.mcp._link import Link
from toolguard.mcp._proxy import _build_guard, _open_link
from toolguard.stores.memory import MemoryStore

POLICY = """\
[tools.read_note]
ladder = { warn_at = 2, block_at = 3, halt_at = 4 }
"""


class _Client:
    """The client port of a link: each answer it is sent, with the number of calls the
    guard had recorded at that moment and once the event loop next delivers I/O (a byte on
    a socket pair, as the client's next request would arrive); and every message."""

    def __init__(self, task: tg.Task) -> None:
        self.task = task
        self.sent: list[dict[str, Any]] = []
        self.finals: list[dict[str, Any]] = []
        self.closed = False
        self.at_send: list[int] = []
        self.at_next_io: list[int] = []
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        asyncio.get_running_loop().add_reader(self._reader, self._io)
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def send(self, raw: bytes, stream: Any, final: bool) -> None:
        self.sent.append(orjson.loads(raw))
        if final and not self.closed:
            self.finals.append(self.sent[-1])
            self.at_send.append(len(self.task.history))
            self._writer.send(b"x")

    def end(self, stream: Any) -> None:
        """Nothing to close."""

    def _io(self) -> None:
        for _ in self._reader.recv(64):  # one byte per answer; several may come at once
            self.at_next_io.append(len(self.task.history))
            self.answers.put_nowait(self.finals[len(self.at_next_io) - 1])

    def close(self) -> None:
        self.closed = True
        asyncio.get_running_loop().remove_reader(self._reader)
        self._reader.close()
        self._writer.close()


@asynccontextmanager
async def _linked(tmp_path: Path, audit: Path | None = None, call_timeout_s: float = 30.0
                  ) -> AsyncIterator[tuple[Link, _Client, Path]]:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    count_file = tmp_path / "counts.json"
    middleware = GuardMiddleware(_build_guard(tg.load_policy(policy_file, env={}), audit),
                                 task_id="link")
    link = await _open_link(upstream_command(count_file), None, middleware, TEST_TIMEOUT_S,
                            call_timeout_s)
    client = _Client(middleware.task_of(None))
    link.attach(client)
    try:
        yield link, client, count_file
    finally:
        client.close()
        await link.close()
        for sink in middleware.guard._sinks:  # the proxy's process ends instead
            if isinstance(sink, tg.JsonlSink):
                sink.close()


async def _request(link: Link, client: _Client, rid: int, method: str,
                   params: dict[str, Any]) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    link.from_client(orjson.dumps(message), message)
    answer = await asyncio.wait_for(client.answers.get(), TEST_TIMEOUT_S)
    assert answer["id"] == rid
    return answer


async def _call(link: Link, client: _Client, rid: int, tool: str,
                arguments: dict[str, Any]) -> dict[str, Any]:
    answer = await _request(link, client, rid, "tools/call",
                            {"name": tool, "arguments": arguments})
    result: dict[str, Any] = answer["result"]
    return result


def _text(result: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in result["content"])


@pytest.mark.skipif(sys.platform == "win32", reason="socketpair readers: a selector loop")
async def test_an_allowed_answer_goes_out_before_its_record_and_is_recorded_before_any_io(
        tmp_path: Path) -> None:
    """A plain allow's answer leaves as the upstream's bytes arrive, before the guard records
    the call, and the record is there before the loop delivers anything else; a warned call
    (the guard adds a notice) is recorded first; a repeated write is answered from the
    record, so the upstream ran it once."""
    async with _linked(tmp_path) as (link, client, count_file):
        await _request(link, client, 1, "tools/list", {})
        first = await _call(link, client, 2, "read_note", {"title": "todo"})
        assert "[toolguard]" not in _text(first)
        assert (client.at_send[-1], client.at_next_io[-1]) == (0, 1)
        warned = await _call(link, client, 3, "read_note", {"title": "todo"})
        assert "[toolguard]" in _text(warned)  # the warn rung's notice
        assert (client.at_send[-1], client.at_next_io[-1]) == (2, 2)
        blocked = await _call(link, client, 4, "read_note", {"title": "todo"})
        assert blocked["isError"] is True and "Blocked" in _text(blocked)
        write = {"title": "log", "body": "x"}
        assert "[toolguard]" not in _text(await _call(link, client, 5, "write_note", write))
        assert client.at_send[-1] + 1 == client.at_next_io[-1]  # out first, recorded next
        cached = await _call(link, client, 6, "write_note", write)
        assert "already" in _text(cached)
    assert counts(count_file) == {"read_note": 2, "write_note": 1}


async def test_with_an_audit_sink_the_task_path_records_before_it_answers(
        tmp_path: Path) -> None:
    """An audit sink takes the general path (the guard's task): the call is recorded, and
    its audit events written, before its answer goes out."""
    audit = tmp_path / "audit.jsonl"
    async with _linked(tmp_path, audit) as (link, client, _):
        await _request(link, client, 1, "tools/list", {})
        await _call(link, client, 2, "read_note", {"title": "todo"})
        assert client.at_send[-1] == 1
    assert audit.read_text().count('"read_note"') >= 2


async def test_a_cancelled_call_is_recorded_as_an_unknown_outcome_and_gets_no_answer(
        tmp_path: Path) -> None:
    """The client cancels a call the upstream is still running: no answer goes out, and the
    guard records the call as failed with an unknown outcome (the tool may have run), not as
    still running."""
    async with _linked(tmp_path) as (link, client, _):
        await _request(link, client, 1, "tools/list", {})
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "count_slowly", "arguments": {"steps": 100}}}
        link.from_client(orjson.dumps(message), message)
        await asyncio.sleep(0.3)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 2, "reason": "the user stopped it"}}
        link.from_client(orjson.dumps(cancel), cancel)
        history = client.task.history
        assert len(history) == 1 and history[0].tool == "count_slowly"
        content = str(history[0].result.content)
        assert history[0].result.is_error and "cancelled" in content
        assert "the outcome is unknown" in content
        await asyncio.sleep(0.3)
        assert [m.get("id") for m in client.sent if "result" in m or "error" in m] == [1]
        assert type(link.middleware.guard._store) is MemoryStore  # the path under test


async def test_identical_writes_in_flight_at_once_run_once(tmp_path: Path) -> None:
    """Three identical writes sent before any answer: the first is begun in the link's
    callback and runs upstream, the others wait for it in the guard's task (the pipeline's
    wait) and get its stored result; the upstream runs it once."""
    async with _linked(tmp_path) as (link, client, count_file):
        await _request(link, client, 1, "tools/list", {})
        for rid in (2, 3, 4):
            message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
                "name": "write_note", "arguments": {"title": "log", "body": "x"}}}
            link.from_client(orjson.dumps(message), message)
        answers = [await asyncio.wait_for(client.answers.get(), TEST_TIMEOUT_S)
                   for _ in range(3)]
    assert sorted(a["id"] for a in answers) == [2, 3, 4]
    texts = {a["id"]: _text(a["result"]) for a in answers}
    assert "[toolguard]" not in texts[2]
    assert all("already" in texts[rid] for rid in (3, 4))
    assert counts(count_file) == {"write_note": 1}
