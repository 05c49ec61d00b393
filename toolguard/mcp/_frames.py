"""The JSON-RPC frames of ``toolguard mcp-proxy``'s transports (:mod:`toolguard.mcp._wire`):
telling a frame's messages apart, splitting a byte stream into newline-delimited frames, the
error frames the proxy writes itself, and the limits and header names every transport shares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ._ports import Json, dumps

MAX_FRAME_BYTES = 256 * 1024 * 1024  # one JSON-RPC message, on stdio (asyncio's line limit)
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


# ``error.data`` of an error the proxy writes for a request the upstream may or may not have
# acted on (an HTTP 5xx, a stream cut before the answer): for a tools/call, an unknown outcome
UNKNOWN_OUTCOME: Json = {"toolguard": "the outcome is unknown"}


def _error_frame(rid: Any, message: str, code: int = -32000, data: Json | None = None
                 ) -> tuple[bytes, Json]:
    error: Json = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body: Json = {"jsonrpc": "2.0", "id": rid, "error": error}
    return dumps(body), body


_PARSE_ERROR = (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":'
                b'"not a JSON-RPC 2.0 message"}}')
