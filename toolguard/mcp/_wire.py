"""The transports of ``toolguard mcp-proxy``, on raw JSON-RPC frames.

- :class:`StdioUpstream`: the upstream server as a subprocess; newline-delimited JSON on its
  stdin/stdout, its stderr kept for error messages.
- :class:`HttpUpstream` (:mod:`toolguard.mcp._http_upstream`): a streamable-HTTP upstream (an
  aiohttp client session): one POST per message, answers as JSON or SSE on that POST
  (``related`` to its request), plus the standalone GET stream.
- :func:`serve_stdio`: the proxy's own stdio, one client session.
- :class:`HttpListener` (:mod:`toolguard.mcp._http_listener`): the proxy serving streamable
  HTTP (aiohttp's low-level server), one link per ``Mcp-Session-Id``.

Frames (:mod:`toolguard.mcp._frames`) are parsed with orjson only to learn what they are; the
bytes read are the bytes sent on (a frame that carries newlines, e.g. a pretty-printed HTTP
body, is re-serialised compact, since newline-delimited stdio and SSE ``data:`` lines cannot
carry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from toolguard.hashing._redact import redact_text

from ._frames import _PARSE_ERROR, MAX_FRAME_BYTES, _frames, _Lines, _nothing
from ._http_listener import HttpListener, serve_http
from ._http_upstream import HttpUpstream, env_proxy
from ._ports import Json, UpstreamFailed

if TYPE_CHECKING:
    from ._link import Link

__all__ = ["MAX_FRAME_BYTES", "HttpListener", "HttpUpstream", "StdioUpstream", "env_proxy",
           "serve_http", "serve_stdio"]

_STDERR_TAIL_LINES = 12


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


def upstream_env() -> dict[str, str]:
    """The environment of an upstream process: the proxy's, without its ``TOOLGUARD_*``
    variables. They configure the guard (the store's URL, with its password; the policy), and
    an upstream with a shell tool would hand them to the model's commands, which could then
    reach the store the guard keeps its approvals in."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("TOOLGUARD_")}


class StdioUpstream:
    """The upstream as a subprocess speaking MCP on stdio.

    Args:
        command: its command line, run with the proxy's environment minus the proxy's own
            ``TOOLGUARD_*`` settings (:func:`upstream_env`).
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
                stdout=subprocess.PIPE, stderr=self._errlog, env=upstream_env())
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
        """The last lines the upstream wrote to stderr, with every credential of a known
        shape redacted (:func:`toolguard.hashing._redact.redact_text`): they go to the client."""
        if self._errlog.closed:
            return ""
        self._errlog.flush()
        self._errlog.seek(0)
        lines = self._errlog.read().decode("utf-8", "replace").splitlines()
        self._errlog.seek(0, 2)
        return redact_text("\n".join(lines[-_STDERR_TAIL_LINES:]))

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


# -- the proxy's own stdio --------------------------------------------------------------------
class _StdioClient:
    """:class:`~toolguard.mcp._link.ClientPort` on the proxy's stdout (one stream)."""

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


def _is_pipe(stream: Any) -> bool:
    """Whether ``stream`` is a pipe, socket or terminal: what a loop's pipe transport takes.
    A regular file (``< requests.jsonl``, ``> answers.jsonl``) is not: asyncio's loop refuses
    it with ValueError, and uvloop's (libuv) aborts the process, so it is never offered."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def _stdout_writer() -> Callable[[bytes], None]:
    if _is_pipe(sys.stdout):
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
        return transport.write

    def write(data: bytes) -> None:  # a regular file: plain blocking writes
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return write


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
    if not _is_pipe(sys.stdin):  # a regular file: read it in a thread
        while data := await asyncio.to_thread(sys.stdin.buffer.readline):
            lines.feed(data)
        lines.feed(b"\n")
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    await loop.connect_read_pipe(lambda: _StdinProtocol(lines, done), sys.stdin)
    await done
    lines.feed(b"\n")  # a last message without its newline
