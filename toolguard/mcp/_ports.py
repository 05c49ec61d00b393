"""What a ``toolguard mcp-proxy`` link joins, and how it starts: the two ports (the
upstream session, the client session) as protocols, the errors a link raises, the JSON-RPC
error codes it answers with, and :func:`handshake`, the proxy's own ``initialize`` of the
upstream; and the link's small helpers (its JSON-RPC ids and errors, the reasons a guarded
call ends without an answer, its elicitation :class:`_LinkAsker`). Split from
:mod:`toolguard.mcp._link`, which re-exports the public names.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ClientPort", "UpstreamFailed", "UpstreamGone", "UpstreamPort", "dumps",
           "handshake"]

Json = dict[str, Any]
dumps = orjson.dumps

CONNECTION_CLOSED = -32000
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CALL_REFUSED_AS_NOTIFICATION = ("refused a tools/call without an id (a notification): the guard "
                                "answers every call, so a call must be a request")
# what the proxy declares to the upstream, so the upstream's own requests of these kinds reach
# the client (a client without one answers them with an error, which passes back)
PROXY_CAPABILITIES: Json = {"elicitation": {"form": {}, "url": {}}, "sampling": {},
                            "roots": {"listChanged": True}}


class UpstreamFailed(Exception):
    """The upstream server could not start, or did not answer ``initialize`` (the message
    names it)."""


class UpstreamGone(Exception):
    """The upstream went away while a call waited for it (the message names it)."""


Handler = Callable[[bytes, Json, Any], None]


class UpstreamPort(Protocol):
    """One upstream MCP session (a subprocess over stdio, or a streamable-HTTP session)."""

    name: str
    gone: str | None
    handler: Handler  # (raw, message, related request id or None): every upstream message
    on_gone: Callable[[], None]
    on_garbage: Callable[[bytes], None]

    def send(self, raw: bytes, message: Json) -> None:
        """Send one message (``raw`` is its JSON, without a newline)."""

    def opened(self, protocol_version: str) -> None:
        """The session is initialized at ``protocol_version``."""

    def describe_gone(self) -> str:
        """The error text every call gets once the upstream is gone."""

    def stderr_tail(self) -> str:
        """The last lines the upstream wrote to stderr, redacted ("" if it has none)."""

    async def close(self) -> None:
        """End the session (stop the process, or DELETE the HTTP session)."""


class ClientPort(Protocol):
    """One client session (the proxy's stdio, or one ``Mcp-Session-Id``)."""

    def send(self, raw: bytes, stream: Any, final: bool) -> None:
        """Send one message on the stream of client request ``stream`` (``None``: the
        standalone one); ``final``: it is that request's answer, which ends the stream."""

    def end(self, stream: Any) -> None:
        """Request ``stream`` will get no answer (it was cancelled): close its stream."""


def _id_maker() -> Callable[[], str]:
    prefix = f"toolguard-{secrets.token_hex(8)}-"
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter)}"


async def handshake(up: UpstreamPort, timeout_s: float) -> tuple[Json, list[tuple[bytes, Json,
                                                                                  Any]]]:
    """Initialize the upstream session as the proxy's own client.

    Returns:
        The upstream's ``initialize`` result, and the messages it sent meanwhile (for the link).

    Raises:
        UpstreamFailed: it exited, wrote something that is not JSON-RPC, answered with an
            error, or did not answer within ``timeout_s`` seconds.
    """
    from mcp.types.version import LATEST_HANDSHAKE_VERSION

    from toolguard import __version__

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Json] = loop.create_future()
    early: list[tuple[bytes, Json, Any]] = []
    init_id = _id_maker()()

    def fail(problem: str) -> None:
        if not answer.done():
            answer.set_exception(UpstreamFailed(f"the upstream MCP server `{up.name}` {problem}"))

    def on_message(raw: bytes, message: Json, related: Any) -> None:
        if message.get("id") == init_id and "method" not in message:
            if not answer.done():
                answer.set_result(message)
        else:
            early.append((raw, message, related))

    def on_garbage(line: bytes) -> None:
        text = line.decode("utf-8", "replace").strip()
        fail(f"does not speak MCP: it wrote {text[:200]!r}, which is not a JSON-RPC message")

    up.handler, up.on_garbage = on_message, on_garbage
    up.on_gone = lambda: fail(f"could not start or connect ({up.gone})")
    request: Json = {"jsonrpc": "2.0", "id": init_id, "method": "initialize", "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": PROXY_CAPABILITIES,
        "clientInfo": {"name": "toolguard-mcp-proxy", "version": __version__}}}
    up.send(dumps(request), request)
    try:
        reply = await asyncio.wait_for(answer, timeout_s)
    except asyncio.TimeoutError:
        raise UpstreamFailed(f"the upstream MCP server `{up.name}` did not answer initialize "
                             f"within {timeout_s:g} s") from None
    result = reply.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("protocolVersion"), str):
        error = reply.get("error")
        why = (error.get("message") if isinstance(error, dict) else None) or "no result"
        raise UpstreamFailed(f"the upstream MCP server `{up.name}` refused initialize: {why}")
    up.opened(result["protocolVersion"])
    up.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
            {"method": "notifications/initialized"})
    return result, early


def _note(text: str) -> None:
    """One line on the proxy's stderr (the client's log of the server)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"toolguard mcp-proxy: {text}", file=sys.stderr, flush=True)


# -- the link's own helpers ------------------------------------------------------------------
class _UpstreamCallError(Exception):
    """The upstream answered ``tools/call`` with a JSON-RPC error."""


class _ClientAsking(Protocol):
    """What a :class:`_LinkAsker` needs of its link (a :class:`~toolguard.mcp._link.Link`):
    the client's declared capabilities, and a request of the proxy's own to the client."""

    client_caps: Json

    async def ask_client(self, method: str, params: Json, related: Any) -> Json:
        """Send ``method`` to the client on the stream of client request ``related``;
        return its answer (``result`` or ``error``)."""
        ...


class _LinkAsker:
    """:class:`toolguard.adapters.mcp.Asker` on a link: an elicitation request of the proxy's
    own to the client, related to the call."""

    def __init__(self, link: _ClientAsking, rid: Any) -> None:
        self._link = link
        self._rid = rid

    @property
    def can_elicit(self) -> bool:
        return isinstance(self._link.client_caps.get("elicitation"), dict)

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        from toolguard.adapters.mcp import ElicitationFailed

        reply = await self._link.ask_client("elicitation/create", {
            "mode": "form", "message": message, "requestedSchema": dict(schema)}, self._rid)
        result = reply.get("result")
        if isinstance(result, dict):
            return result
        error = reply.get("error")
        raise ElicitationFailed(str(error.get("message") if isinstance(error, dict) else error))


def _error(code: int, message: str) -> Json:
    return {"code": code, "message": message}


def _hashable(value: Any) -> bool:
    """A JSON-RPC id the proxy keys on: a string or an integer (``true`` is no id, and in a
    dict it would be the same key as ``1``)."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _progress_token(params: Any) -> Any:
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if _hashable(token) else None
