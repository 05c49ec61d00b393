"""Per-call overhead of ``toolguard mcp-proxy``: the same MCP client calling the example
upstream server directly, through the proxy with the guard off (the hop alone), and through
the proxy guarding (the figure that matters).

::

    python benchmarks/mcp_proxy.py                   # 9 rounds of 200 calls per path
    python benchmarks/mcp_proxy.py --smoke           # every path, a few calls (CI)
    python benchmarks/mcp_proxy.py --json out.json   # also write the figures

All three sessions are open at once (real subprocesses over stdio, the SDK's ``ClientSession``)
and each round runs one batch per path in a fresh random order, so the machine's noise hits
every path alike. A path's figure is the median over rounds of its mean per-call time; the
ratios are computed within each round, then reduced to their median. The call is
``read_note(title="todo")``, a readonly tool answering from memory, under a policy whose
ladder and budget never trigger: the allow path of the guard plus two JSON-RPC hops.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = [sys.executable, str(ROOT / "examples" / "mcp" / "server.py")]
POLICY = """\
[budget]
max_tool_calls = 100000000
[tools.read_note]
ladder = { warn_at = 99999997, block_at = 99999998, halt_at = 99999999 }
"""
TARGET_RATIO = 1.2  # issue 14: proxied round trip ≤ 1.2x the direct one


def _proxy(*options: str) -> list[str]:
    return [sys.executable, "-m", "toolguard.cli", "mcp-proxy", *options, "--", *UPSTREAM]


async def _open(stack: AsyncExitStack, command: list[str]) -> ClientSession:
    params = StdioServerParameters(command=command[0], args=command[1:])
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def _batch(session: ClientSession, calls: int) -> float:
    """Mean seconds per call over ``calls`` sequential calls."""
    start = time.perf_counter()
    for _ in range(calls):
        result = await session.call_tool("read_note", {"title": "todo"})
        if result.is_error:
            raise RuntimeError(f"unexpected error result: {result}")
    return (time.perf_counter() - start) / calls


async def measure(calls: int, rounds: int, warmup: int) -> dict[str, Any]:
    """Run the interleaved rounds; return the report."""
    with tempfile.TemporaryDirectory() as tmp:
        guarded, off = Path(tmp) / "bench.toml", Path(tmp) / "off.toml"
        guarded.write_text(POLICY)
        off.write_text('mode = "off"\n' + POLICY)
        async with AsyncExitStack() as stack:
            sessions = {
                "direct": await _open(stack, UPSTREAM),
                "proxy_guard_off": await _open(stack, _proxy("--policy", str(off))),
                "proxy_guarded": await _open(stack, _proxy("--policy", str(guarded))),
            }
            for session in sessions.values():
                await _batch(session, warmup)
            per_round: list[dict[str, float]] = []
            for _ in range(rounds):
                order = list(sessions)
                random.shuffle(order)
                per_round.append({name: await _batch(sessions[name], calls) for name in order})
    median = {name: statistics.median(r[name] for r in per_round) * 1e6 for name in sessions}
    ratio = statistics.median(r["proxy_guarded"] / r["direct"] for r in per_round)
    hop = statistics.median(r["proxy_guard_off"] / r["direct"] for r in per_round)
    guard_us = statistics.median((r["proxy_guarded"] - r["proxy_guard_off"]) * 1e6
                                 for r in per_round)
    return {
        "calls_per_round": calls, "rounds": rounds,
        "median_us": median,
        "x_direct": ratio, "x_direct_guard_off": hop, "guard_us": guard_us,
        "target_x_direct": TARGET_RATIO,
        "status": "PASS" if ratio <= TARGET_RATIO else "MISS",
    }


async def middleware_us(calls: int) -> float:
    """Mean µs per call of the guard middleware alone (in-process, the upstream answer
    ready-made): what the proxy's guarding costs without any I/O."""
    from types import SimpleNamespace

    import mcp.types as mt

    import toolguard as tg
    from toolguard.adapters.mcp import GuardMiddleware

    policy = tg.load_policy_dict({"budget": {"max_tool_calls": 10**8}, "tools": {"read_note": {
        "ladder": {"warn_at": 99999997, "block_at": 99999998, "halt_at": 99999999}}}})
    middleware = GuardMiddleware(tg.Guard(policy, strict_tools=False))
    middleware.register_tools([mt.Tool(
        name="read_note", annotations=mt.ToolAnnotations(readOnlyHint=True),
        input_schema={"type": "object", "properties": {"title": {"type": "string"}},
                      "required": ["title"]})])
    answer = mt.CallToolResult(content=[mt.TextContent(type="text", text="buy milk")],
                               structured_content={"result": "buy milk"})

    async def forward(args: dict[str, Any]) -> mt.CallToolResult:
        return answer

    ctx: Any = SimpleNamespace(request=None)  # stdio: no HTTP request, no session header
    for _ in range(min(calls, 100)):
        await middleware.guarded_call(ctx, "read_note", {"title": "todo"}, forward)
    start = time.perf_counter()
    for _ in range(calls):
        await middleware.guarded_call(ctx, "read_note", {"title": "todo"}, forward)
    return (time.perf_counter() - start) / calls * 1e6


def render(report: dict[str, Any]) -> str:
    """The report as a few lines of text."""
    m = report["median_us"]
    return "\n".join([
        f"MCP per-call round trip ({report['rounds']} rounds x {report['calls_per_round']} "
        "calls, medians):",
        f"  direct                   {m['direct']:9.0f} us",
        f"  proxy, guard off         {m['proxy_guard_off']:9.0f} us   "
        f"x{report['x_direct_guard_off']:.2f} direct (the extra hop)",
        f"  proxy, guarded           {m['proxy_guarded']:9.0f} us   "
        f"x{report['x_direct']:.2f} direct (target <= x{report['target_x_direct']})"
        f"  {report['status']}",
        f"  guarded - guard off      {report['guard_us']:9.0f} us per call",
        f"  guard middleware alone   {report['middleware_us']:9.0f} us per call (in-process)",
    ])


def main() -> None:
    """Parse the options, measure, print (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="a few calls: every path runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    calls, rounds, warmup = (3, 2, 2) if args.smoke else (args.calls, args.rounds, 50)
    report = anyio.run(measure, calls, rounds, warmup)
    report["middleware_us"] = anyio.run(middleware_us, 20 if args.smoke else 5000)
    report["smoke"] = args.smoke
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
