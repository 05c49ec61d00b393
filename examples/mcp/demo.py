"""The scripted loop through ``toolguard mcp-proxy``, with the real MCP client.

Starts ``toolguard mcp-proxy -- python examples/mcp/server.py`` over stdio (the way an MCP
client such as Claude Desktop would), then plays a looping agent: the same write 3 times, the
same read 6 times. Prints what came back for each call and how often the upstream server
really ran each tool (it counts its own executions)::

    python examples/mcp/demo.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio
import mcp.types as mt
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

SERVER = Path(__file__).resolve().with_name("server.py")


def outcome(result: mt.CallToolResult) -> str:
    """One line for a tool result: the tool's text, then the guard's notice if any."""
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    first = texts[0].splitlines()[0] if texts else ""
    notice = next((t for t in texts[1:] if t.startswith("[toolguard]")), "")
    flag = "error" if result.is_error else "ok"
    return f"{flag:5} {first[:70]}" + (f"\n{'':41}{notice[:90]}" if notice else "")


async def main() -> None:
    """Run the loop and print each answer."""
    with tempfile.TemporaryDirectory() as tmp:
        count_file = Path(tmp) / "counts.json"
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "toolguard.cli", "mcp-proxy", "--",
            sys.executable, str(SERVER), "--count-file", str(count_file)])
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            calls = [("write_note", {"title": "log", "body": "x"})] * 3 + [
                ("read_note", {"title": "todo"})] * 6
            for tool, args in calls:
                label = f"{tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
                try:
                    result = await session.call_tool(tool, args)
                except MCPError as exc:  # the guard's halt: a JSON-RPC error
                    print(f"{label:34} HALT  {exc.message[:80]}")
                    continue
                print(f"{label:34} {outcome(result)}")
            executions = await session.read_resource("notes://executions")
            text = executions.contents[0]
            if isinstance(text, mt.TextResourceContents):
                print(f"upstream executions: {text.text}")


if __name__ == "__main__":
    anyio.run(main)
