"""A small real MCP server to put behind ``toolguard mcp-proxy`` (written with the official SDK).

Tools, each with the MCP annotations the proxy reads its effects from:

- ``read_note(title)``: ``readOnlyHint`` → readonly.
- ``write_note(title, body)``: a local write (``destructiveHint``/``openWorldHint`` false) →
  mutating, idempotency scope ``until_change``; sends ``notifications/resources/updated``
  for ``notes://executions``.
- ``delete_note(title)``: ``destructiveHint`` → mutating, idempotency scope ``task``.
- ``count_slowly(steps)``: readonly, reports progress once per step (0.05 s each).
- ``ask_client(kind)``: readonly; asks the client something in the middle of the call (a
  request of the server's own that a proxy must pass through): ``elicit`` (a form),
  ``sample`` (a model completion) or ``roots`` (its roots).
- ``big_note(size)``: readonly, answers ``size`` characters (a large message).

The server counts its own executions per tool in the JSON file ``--count-file`` (default: the
``TOOLGUARD_EXAMPLE_COUNT_FILE`` environment variable, else none), which is also readable as
the resource ``notes://executions``; a prompt ``summarize`` shows prompt pass-through.

Run::

    python examples/mcp/server.py                           # MCP over stdio
    python examples/mcp/server.py --http 127.0.0.1:8765     # streamable HTTP at /mcp

``--start-delay S`` waits S seconds before serving (a slow upstream); ``--fail-start`` writes an
error to stderr and exits 3 (an upstream that cannot start); ``--pid-file`` writes the pid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import SamplingMessage, TextContent, ToolAnnotations

try:
    import fcntl
except ImportError:  # Windows: one server process per count file
    fcntl = None  # type: ignore[assignment]

NOTES: dict[str, str] = {"todo": "buy milk"}
COUNT_FILE: Path | None = None

server = MCPServer("toolguard-example-notes")


def _counted(tool: str) -> None:
    """Add one execution of ``tool`` to the count file (read-modify-write under an exclusive
    lock where the OS has ``fcntl``: a proxy serving several HTTP sessions runs one server
    process per session, all counting in the same file)."""
    if COUNT_FILE is None:
        return
    with COUNT_FILE.with_suffix(".lock").open("a") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        counts = json.loads(COUNT_FILE.read_text()) if COUNT_FILE.exists() else {}
        counts[tool] = counts.get(tool, 0) + 1
        tmp = COUNT_FILE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(counts))
        tmp.replace(COUNT_FILE)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_note(title: str) -> str:
    """Read a note.

    Args:
        title: the note's title.
    """
    _counted("read_note")
    if title not in NOTES:
        raise ValueError(f"no note titled {title!r}")
    return NOTES[title]


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                         idempotentHint=False, openWorldHint=False))
async def write_note(title: str, body: str, ctx: Context) -> str:
    """Append to a note (creating it).

    Args:
        title: the note's title.
        body: text to append.
    """
    _counted("write_note")
    NOTES[title] = NOTES.get(title, "") + body
    # tell the client the execution counts changed (a notification the proxy relays)
    with contextlib.suppress(Exception):  # a client without a notification channel misses it
        await ctx.session.send_resource_updated("notes://executions")
    return f"saved {title!r} ({len(NOTES[title])} characters)"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                         idempotentHint=True, openWorldHint=False))
def delete_note(title: str) -> str:
    """Delete a note for good.

    Args:
        title: the note's title.
    """
    _counted("delete_note")
    existed = NOTES.pop(title, None) is not None
    return f"deleted {title!r}" if existed else f"no note titled {title!r}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def count_slowly(steps: int, ctx: Context) -> str:
    """Count to ``steps``, reporting progress after each (0.05 s per step).

    Args:
        steps: how far to count (1-100).
    """
    _counted("count_slowly")
    for step in range(1, steps + 1):
        await anyio.sleep(0.05)
        await ctx.report_progress(step, steps, f"step {step}")
    return f"counted to {steps}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def ask_client(kind: str, ctx: Context) -> str:
    """Ask the client something mid-call and say what it answered.

    Args:
        kind: ``elicit`` (a yes/no form), ``sample`` (a model completion) or ``roots``.
    """
    _counted("ask_client")
    session = ctx.session
    if kind == "elicit":
        answer = await session.elicit_form(
            "Proceed?", {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            related_request_id=ctx.request_id)
        return f"elicit: {answer.action} {json.dumps(answer.content, sort_keys=True)}"
    if kind == "sample":
        with warnings.catch_warnings():  # deprecated at 2026-07-28; this is 2025-11-25
            warnings.simplefilter("ignore")
            result = await session.create_message(
                [SamplingMessage(role="user", content=TextContent(type="text", text="hi"))],
                max_tokens=5, related_request_id=ctx.request_id)
        text = result.content.text if isinstance(result.content, TextContent) else "?"
        return f"sample: {text}"
    if kind == "roots":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            roots = await session.list_roots()
        return "roots: " + " ".join(str(root.uri) for root in roots.roots)
    raise ValueError(f"unknown kind {kind!r}")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def big_note(size: int) -> str:
    """A note of ``size`` characters (a large message).

    Args:
        size: how many characters.
    """
    _counted("big_note")
    return "x" * size


@server.resource("notes://executions", mime_type="application/json")
def executions() -> str:
    """How many times each tool ran in this server (from the count file)."""
    if COUNT_FILE is None or not COUNT_FILE.exists():
        return "{}"
    return COUNT_FILE.read_text()


@server.prompt()
def summarize(title: str) -> str:
    """Ask the model to summarize one note."""
    return f"Summarize the note {title!r} in one sentence."


def main(argv: list[str] | None = None) -> None:
    """Parse the options and serve until stdin closes (stdio) or the process is stopped."""
    global COUNT_FILE  # noqa: PLW0603 - the tools read it; set once before serving
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at /mcp")
    parser.add_argument("--count-file", type=Path,
                        default=os.environ.get("TOOLGUARD_EXAMPLE_COUNT_FILE"))
    parser.add_argument("--start-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--fail-start", action="store_true")
    parser.add_argument("--pid-file", type=Path)
    args = parser.parse_args(argv)
    if args.fail_start:
        print("notes server: cannot open the notes database (--fail-start)", file=sys.stderr)
        raise SystemExit(3)
    if args.pid_file:
        args.pid_file.write_text(str(os.getpid()))
    COUNT_FILE = args.count_file
    time.sleep(args.start_delay)
    if args.http:
        host, _, port = args.http.rpartition(":")
        server.run("streamable-http", host=host, port=int(port))
    else:
        server.run()


if __name__ == "__main__":
    main()
