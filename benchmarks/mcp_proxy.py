"""Per-call overhead of ``toolguard mcp-proxy``: the same MCP client calling the example
upstream server directly, through the proxy with the guard off (the hop alone), and through
the proxy guarding (the figure that matters), over stdio and over streamable HTTP.

::

    python benchmarks/mcp_proxy.py                   # 9 rounds of 200 calls per path,
                                                     # then 1,000 paired iterations
    python benchmarks/mcp_proxy.py --smoke           # every path, a few calls (CI)
    python benchmarks/mcp_proxy.py --json out.json   # also write the figures
    python benchmarks/mcp_proxy.py --only stdio      # one transport
    python benchmarks/mcp_proxy.py --instructions    # callgrind instruction counts (~25 min)

Besides the wall time, each batch records the CPU time that the client, the proxy and the
upstream spent (Linux: /proc of this process and its descendants): a call is one chain of
hand-offs, so its CPU is its latency less the waiting. On a shared machine it moves with the
load too (caches, hyperthreads), only less. The figure that does not move is
``--instructions``: each process of the chain (client, upstream, each proxy) runs once under
``valgrind --tool=callgrind`` with 50 calls and once with 550, and the difference over 500
is its instructions per call; the ratio is the chain's instructions through the proxy over
the direct chain's (user-space instructions: the proxy's extra system calls and context
switches, 2 reads, 2 writes and ~3 epoll waits per call on stdio, are not in it).

All six sessions are open at once (real subprocesses, the SDK's ``ClientSession``; on HTTP one
upstream server on 127.0.0.1, the proxies listening in front of it) and each round runs one
batch per path in a fresh random order, so the machine's noise hits every path alike. A
path's figure is the median over rounds of its mean per-call time; the ratios are computed
within each round against the same transport's direct path, then reduced to their median.
Besides the rounds, the paired measurement runs one call on each of a transport's three
paths in turn (direct, guard off, guarding, in a rotating order), each timed alone, for
``--paired`` (1,000) iterations: every path sees the same fraction of a second of the
machine, so a slow spell of a shared host (which moves a whole batch of 200 calls, and a
round's ratio by ±0.15 here) falls on all three alike. Each process is then as cold at each
call as it is behind an agent whose model thinks for seconds between two tool calls (the
proxy most: it idles while the other paths run); ``--burst N`` makes it N calls per path in
turn, each process warm after the first. Its figure is the ratio of the mean per-call times,
with the spread of that ratio over ten blocks of iterations. This is the verdict's figure;
the rounds are kept beside it, as are their CPU times.

The call is ``read_note(title="todo")``, a readonly tool answering from memory, under a policy
whose ladder and budget never trigger: the allow path of the guard plus two JSON-RPC hops. The
load average before and after is part of the report: on a shared machine it says how much to
trust the absolute times (the ratios are what the interleaving protects).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' process helpers: one copy of starting and stopping

from tests.mcp_support import AUTH, free_port, running  # noqa: E402

UPSTREAM = [sys.executable, str(ROOT / "examples" / "mcp" / "server.py")]
POLICY = """\
[budget]
max_tool_calls = 100000000
[tools.read_note]
ladder = { warn_at = 99999997, block_at = 99999998, halt_at = 99999999 }
"""
TARGET_RATIO = 1.2  # the target: proxied round trip ≤ 1.2x the direct one


TRANSPORTS = ("stdio", "http")
PATHS = ("direct", "proxy_guard_off", "proxy_guarded")


def _proxy(*options: str, upstream: list[str] | None = None) -> list[str]:
    command = [sys.executable, "-m", "toolguard.cli", "mcp-proxy", *options]
    return [*command, "--", *upstream] if upstream else command


async def _open(stack: AsyncExitStack, command: list[str]) -> ClientSession:
    params = StdioServerParameters(command=command[0], args=command[1:])
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def _open_http(stack: AsyncExitStack, url: str) -> ClientSession:
    http = await stack.enter_async_context(create_mcp_http_client(headers=AUTH))
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def _sessions(stack: AsyncExitStack, tmp: Path, transports: tuple[str, ...]
                    ) -> dict[tuple[str, str], ClientSession]:
    """Every path's session, keyed by (transport, path)."""
    guarded, off = tmp / "bench.toml", tmp / "off.toml"
    guarded.write_text(POLICY)
    off.write_text('mode = "off"\n' + POLICY)
    policies = {"proxy_guard_off": off, "proxy_guarded": guarded}
    sessions: dict[tuple[str, str], ClientSession] = {}
    if "stdio" in transports:
        sessions["stdio", "direct"] = await _open(stack, UPSTREAM)
        for path, policy in policies.items():
            sessions["stdio", path] = await _open(
                stack, _proxy("--policy", str(policy), upstream=UPSTREAM))
    if "http" in transports:
        up_port = free_port()
        upstream_url = f"http://127.0.0.1:{up_port}/mcp"
        stack.enter_context(running([*UPSTREAM, "--http", f"127.0.0.1:{up_port}"], up_port,
                                    tmp / "upstream.log", timeout_s=60))
        sessions["http", "direct"] = await _open_http(stack, upstream_url)
        for path, policy in policies.items():
            port = free_port()
            stack.enter_context(running(_proxy(
                "--policy", str(policy), "--upstream-url", upstream_url,
                "--listen", f"127.0.0.1:{port}"), port, tmp / f"{path}.log", timeout_s=60))
            sessions["http", path] = await _open_http(stack, f"http://127.0.0.1:{port}/mcp")
    return sessions


async def _batch(session: ClientSession, calls: int) -> tuple[float, float]:
    """Mean seconds per call over ``calls`` sequential calls, and the CPU seconds per call
    that this process and all its descendants (client, proxy, upstream) spent meanwhile."""
    cpu = _cpu_seconds()
    start = time.perf_counter()
    for _ in range(calls):
        result = await session.call_tool("read_note", {"title": "todo"})
        if result.is_error:
            raise RuntimeError(f"unexpected error result: {result}")
    wall = (time.perf_counter() - start) / calls
    return wall, (_cpu_seconds() - cpu) / calls


async def _paired(sessions: dict[tuple[str, str], ClientSession], transport: str,
                  iterations: int, burst: int) -> dict[str, Any]:
    """The paired measurement of one transport (see the module docstring): ``iterations``
    times, ``burst`` calls on each path in turn, in a rotating order."""
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for i in range(iterations):
        for k in range(len(PATHS)):  # a rotating order: no path always first or last
            path = PATHS[(i + k) % len(PATHS)]
            session = sessions[transport, path]
            start = time.perf_counter()
            for _ in range(burst):
                result = await session.call_tool("read_note", {"title": "todo"})
                if result.is_error:
                    raise RuntimeError(f"unexpected error result: {result}")
            times[path].append((time.perf_counter() - start) / burst)
    block = max(iterations // 10, 1)  # the spread over ten blocks

    def ratio(path: str, lo: int = 0, hi: int = iterations) -> float:
        return statistics.fmean(times[path][lo:hi]) / statistics.fmean(times["direct"][lo:hi])

    blocks = sorted(ratio("proxy_guarded", lo, lo + block)
                    for lo in range(0, iterations - block + 1, block))
    x_direct = ratio("proxy_guarded")
    return {"iterations": iterations, "burst": burst,
            "mean_us": {path: statistics.fmean(t) * 1e6 for path, t in times.items()},
            "x_direct": x_direct, "x_direct_guard_off": ratio("proxy_guard_off"),
            "blocks_of": block, "x_direct_blocks": [blocks[0], statistics.median(blocks),
                                                    blocks[-1]],
            "status": "PASS" if x_direct <= TARGET_RATIO else "MISS"}


def _cpu_seconds() -> float:
    """CPU seconds this process and its descendants have run so far (Linux: user + system
    time of /proc/PID/stat, which keeps the time of threads that have ended, as the SDK's
    worker threads do; 10 ms ticks, so a batch should run for a second or more; elsewhere 0).
    """
    ticks, todo, seen = 0, [os.getpid()], set()
    while todo:
        pid = todo.pop()
        seen.add(pid)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(k) for k in (task / "children").read_text().split()
                            if int(k) not in seen)
        except (OSError, ValueError, IndexError):  # a process that just ended; or no /proc
            continue
    return ticks / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.0


async def measure(calls: int, rounds: int, warmup: int,
                  transports: tuple[str, ...] = TRANSPORTS, paired: int = 0,
                  burst: int = 1) -> dict[str, Any]:
    """Run the interleaved rounds, then ``paired`` iterations of the paired measurement per
    transport (``burst`` calls per path each); return the report."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            sessions = await _sessions(stack, Path(tmp), transports)
            for session in sessions.values():
                await _batch(session, warmup)
            per_round: list[dict[tuple[str, str], float]] = []
            cpu_round: list[dict[tuple[str, str], float]] = []
            for _ in range(rounds):
                order = list(sessions)
                random.shuffle(order)
                figures = {key: await _batch(sessions[key], calls) for key in order}
                per_round.append({key: wall for key, (wall, _) in figures.items()})
                cpu_round.append({key: cpu for key, (_, cpu) in figures.items()})
            pairs = ({t: await _paired(sessions, t, paired, burst) for t in transports}
                     if paired else {})
    report: dict[str, Any] = {"calls_per_round": calls, "rounds": rounds,
                              "target_x_direct": TARGET_RATIO,
                              "load_average": {"before": list(load_before),
                                               "after": list(os.getloadavg())}}
    for transport in transports:
        def ratio(path: str, rounds_: list[dict[tuple[str, str], float]],
                  transport: str = transport) -> float:
            return statistics.median(r[transport, path] / r[transport, "direct"]
                                     for r in rounds_ if r[transport, "direct"] > 0)

        def median_us(path: str, rounds_: list[dict[tuple[str, str], float]],
                      transport: str = transport) -> float:
            return statistics.median(r[transport, path] for r in rounds_) * 1e6

        x_direct = ratio("proxy_guarded", per_round)
        has_cpu = all(r[transport, "direct"] > 0 for r in cpu_round)
        report[transport] = {
            "median_us": {path: median_us(path, per_round) for path in PATHS},
            "x_direct": x_direct, "x_direct_guard_off": ratio("proxy_guard_off", per_round),
            "guard_us": statistics.median(
                (r[transport, "proxy_guarded"] - r[transport, "proxy_guard_off"]) * 1e6
                for r in per_round),
            "cpu_us": {path: median_us(path, cpu_round) for path in PATHS} if has_cpu else None,
            "cpu_x_direct": ratio("proxy_guarded", cpu_round) if has_cpu else None,
            "cpu_x_direct_guard_off": (ratio("proxy_guard_off", cpu_round) if has_cpu
                                       else None),
            "rounds_status": "PASS" if x_direct <= TARGET_RATIO else "MISS",
        }
        if transport in pairs:
            report[transport]["paired"] = pairs[transport]
        # the verdict: the paired figure where it was measured, else the rounds'
        report[transport]["status"] = (pairs[transport]["status"] if transport in pairs
                                       else report[transport]["rounds_status"])
    report["status"] = ("PASS" if all(report[t]["status"] == "PASS" for t in transports)
                        else "MISS")
    return report


async def middleware_us(calls: int) -> float:
    """Mean µs per call of the guard alone as the proxy runs it (``begin_json`` and
    ``end_json`` on the upstream's answer as JSON, ready-made, in-process): what guarding
    costs without I/O."""
    from mcp_wakeup import guard_middleware, proxied

    middleware, task = guard_middleware()
    for _ in range(min(calls, 100)):
        proxied(middleware, task)
    start = time.perf_counter()
    for _ in range(calls):
        proxied(middleware, task)
    return (time.perf_counter() - start) / calls * 1e6


def render(report: dict[str, Any]) -> str:
    """The report as a few lines of text."""
    load = report["load_average"]
    lines = [f"MCP per-call round trip ({report['rounds']} rounds x "
             f"{report['calls_per_round']} calls, medians; load average "
             f"{load['before'][0]:.1f} before, {load['after'][0]:.1f} after):"]
    for transport in TRANSPORTS:
        if transport not in report:
            continue
        t = report[transport]
        m = t["median_us"]
        lines += [
            f"  {transport}, rounds:",
            f"    direct                 {m['direct']:9.0f} us",
            f"    proxy, guard off       {m['proxy_guard_off']:9.0f} us   "
            f"x{t['x_direct_guard_off']:.2f} direct (the extra hop)",
            f"    proxy, guarded         {m['proxy_guarded']:9.0f} us   "
            f"x{t['x_direct']:.2f} direct (target <= x{report['target_x_direct']})"
            f"  {t['rounds_status']}",
            f"    guarded - guard off    {t['guard_us']:9.0f} us per call",
        ]
        if t["cpu_us"] is not None:
            c = t["cpu_us"]
            lines.append(
                f"    CPU per call (client+proxy+upstream): direct {c['direct']:.0f} us, "
                f"guard off {c['proxy_guard_off']:.0f} us (x{t['cpu_x_direct_guard_off']:.2f}),"
                f" guarded {c['proxy_guarded']:.0f} us (x{t['cpu_x_direct']:.2f})")
        if "paired" in t:
            pr, mean = t["paired"], t["paired"]["mean_us"]
            lo, mid, hi = pr["x_direct_blocks"]
            lines += [
                f"  {transport}, paired ({pr['iterations']} iterations x {pr['burst']} call"
                f"{'s' if pr['burst'] > 1 else ''} per path, means):",
                f"    direct {mean['direct']:.0f} us, guard off {mean['proxy_guard_off']:.0f} us "
                f"(x{pr['x_direct_guard_off']:.3f}), guarded {mean['proxy_guarded']:.0f} us "
                f"(x{pr['x_direct']:.3f}; ten blocks: x{lo:.2f} / x{mid:.2f} / x{hi:.2f})"
                f"  {pr['status']}",
            ]
    lines.append(f"  guard middleware alone   {report['middleware_us']:7.0f} us per call "
                 "(in-process)")
    return "\n".join(lines)


INSTRUCTION_ROLES = ("client", "upstream", "proxy_guard_off", "proxy_guarded")
_FEW, _MANY = 50, 550


async def _instructions_run(transport: str, role: str, calls: int, out: Path) -> None:
    """One session for callgrind: ``calls`` calls, with ``role``'s process under valgrind
    (``client``: this process is, the caller wraps it)."""
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        policy = tmp / "policy.toml"
        policy.write_text(('mode = "off"\n' if role == "proxy_guard_off" else "") + POLICY)
        upstream = [*valgrind, *UPSTREAM] if role == "upstream" else UPSTREAM
        proxy_wrap = valgrind if role.startswith("proxy") else []
        options = ["--policy", str(policy), "--start-timeout", "600"]
        async with AsyncExitStack() as stack:
            if transport == "stdio":
                command = ([*proxy_wrap, *_proxy(*options, upstream=UPSTREAM)]
                           if proxy_wrap else upstream)
                session = await _open(stack, command)
            else:
                up_port = free_port()
                stack.enter_context(running(
                    [*upstream, "--http", f"127.0.0.1:{up_port}"], up_port, tmp / "up.log",
                    timeout_s=600, stop_timeout_s=300))
                url = f"http://127.0.0.1:{up_port}/mcp"
                if proxy_wrap:
                    port = free_port()
                    stack.enter_context(running(
                        [*proxy_wrap, *_proxy(*options, "--upstream-url", url,
                                              "--listen", f"127.0.0.1:{port}")],
                        port, tmp / "proxy.log", timeout_s=600, stop_timeout_s=300))
                    url = f"http://127.0.0.1:{port}/mcp"
                session = await _open_http(stack, url)
            for _ in range(calls):
                result = await session.call_tool("read_note", {"title": "todo"})
                if result.is_error:
                    raise RuntimeError(f"unexpected error result: {result}")


def _instructions(transport: str, role: str, calls: int, tmp: Path) -> int:
    """Instructions callgrind counted in ``role``'s process over a whole session."""
    out = tmp / f"{transport}.{role}.{calls}.callgrind"
    command = [sys.executable, __file__, "--instructions-run", transport, role, str(calls),
               str(out)]
    if role == "client":
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command]
    subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=3600)
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {out}")


def instructions(transports: tuple[str, ...]) -> dict[str, Any]:
    """Instructions per call of each process of the chain, and the chains' ratios."""
    report: dict[str, Any] = {"calls": [_FEW, _MANY]}
    with tempfile.TemporaryDirectory() as tmp_name:
        for transport in transports:
            per_call = {role: (_instructions(transport, role, _MANY, Path(tmp_name))
                               - _instructions(transport, role, _FEW, Path(tmp_name)))
                        / (_MANY - _FEW) for role in INSTRUCTION_ROLES}
            direct = per_call["client"] + per_call["upstream"]
            report[transport] = {
                "per_call": per_call, "direct": direct,
                "x_direct": (direct + per_call["proxy_guarded"]) / direct,
                "x_direct_guard_off": (direct + per_call["proxy_guard_off"]) / direct,
            }
    return report


def render_instructions(report: dict[str, Any]) -> str:
    """The instruction counts as a few lines of text."""
    lines = ["MCP per-call instructions (callgrind; 550-call session minus 50-call session):"]
    for transport in TRANSPORTS:
        if transport in report:
            t, c = report[transport], report[transport]["per_call"]
            lines.append(
                f"  {transport}: client {c['client'] / 1e3:.0f}k + upstream "
                f"{c['upstream'] / 1e3:.0f}k = direct {t['direct'] / 1e3:.0f}k; proxy guard off "
                f"+{c['proxy_guard_off'] / 1e3:.0f}k (x{t['x_direct_guard_off']:.3f}), "
                f"guarded +{c['proxy_guarded'] / 1e3:.0f}k (x{t['x_direct']:.3f})")
    return "\n".join(lines)


def main() -> None:
    """Parse the options, measure, print (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--paired", type=int, default=1000,
                        help="iterations of the paired measurement per transport (0: none)")
    parser.add_argument("--burst", type=int, default=1,
                        help="calls per path in each iteration of the paired measurement")
    parser.add_argument("--smoke", action="store_true", help="a few calls: every path runs")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", choices=TRANSPORTS, help="measure one transport")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per call with callgrind instead")
    parser.add_argument("--instructions-run", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    transports = (args.only,) if args.only else TRANSPORTS
    if args.instructions_run:
        transport, role, n, out = args.instructions_run
        anyio.run(_instructions_run, transport, role, int(n), Path(out))
        return
    if args.instructions:
        counted = instructions(transports)
        print(render_instructions(counted))
        if args.json:
            args.json.write_text(json.dumps(counted, indent=2))
        return
    calls, rounds, warmup = (3, 2, 2) if args.smoke else (args.calls, args.rounds, 50)
    report = anyio.run(measure, calls, rounds, warmup, transports,
                       4 if args.smoke else args.paired, args.burst)
    report["middleware_us"] = anyio.run(middleware_us, 20 if args.smoke else 5000)
    report["smoke"] = args.smoke
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
