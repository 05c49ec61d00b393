"""What a cold wake-up costs the MCP proxy's guard: the same guarded call timed hot (back to
back) and after the process has idled, plus the machine's cross-process hand-off.

::

    python benchmarks/mcp_wakeup.py                  # ~10 s
    python benchmarks/mcp_wakeup.py --smoke          # a few calls (CI)
    python benchmarks/mcp_wakeup.py --json out.json  # also write the figures

Why it exists: behind an agent (and in ``mcp_proxy.py``'s paired measurement) the proxy
sleeps between two tool calls while the client and the upstream run, so every call finds its
caches cold. This measures that penalty on the guard alone, in-process, with no I/O:
``GuardMiddleware.begin_json`` and ``end_json`` (the two steps of ``Task.begin``) on the
example server's answer, as the proxy runs them in its callbacks (:func:`proxied`), timed by
the thread's CPU clock (``time.thread_time_ns``: the preemption of a busy machine is not in
it), once per call

- ``hot``: calls back to back;
- ``after_idle``: each call after ``--idle-ms`` (2 ms, about one direct MCP round trip here)
  of ``time.sleep``.

And a pipe ping-pong between two processes (one byte each way, ``os.read``/``os.write``):
a round trip is two wake-ups, which the proxy's hop adds to the direct chain's two;
``same_cpu`` pins both processes to one CPU (where the scheduler allows it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

ANSWER: dict[str, Any] = {"content": [{"type": "text", "text": "buy milk"}],
                          "structuredContent": {"result": "buy milk"}, "isError": False}
"""The example server's answer to ``read_note(title="todo")``, as JSON."""


def guard_middleware() -> tuple[Any, Any]:
    """The proxy's guard for the example's ``read_note`` (its annotations, a policy whose
    ladder never fires): ``(GuardMiddleware, its default task)``."""
    import toolguard as tg
    from toolguard.adapters.mcp import GuardMiddleware

    policy = tg.load_policy_dict({"budget": {"max_tool_calls": 10**8}, "tools": {"read_note": {
        "ladder": {"warn_at": 99999997, "block_at": 99999998, "halt_at": 99999999}}}})
    middleware = GuardMiddleware(tg.Guard(policy, strict_tools=False))
    middleware.register_tools([{
        "name": "read_note", "annotations": {"readOnlyHint": True},
        "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}},
                        "required": ["title"]}}])
    return middleware, middleware.task_of(None)


def proxied(middleware: Any, task: Any) -> Any:
    """One ``read_note`` call through the guard as the proxy guards it: begun as the request
    arrives, recorded as the upstream's answer (``ANSWER``) comes."""
    kind, pending = middleware.begin_json(task, "read_note", {"title": "todo"})
    if kind != "run":
        raise RuntimeError(f"the guard did not let the call run: {kind} {pending}")
    return middleware.end_json(pending, ANSWER)


async def guard_us(calls: int, idle_s: float) -> dict[str, float]:
    """Median and 90th percentile µs of thread CPU per guarded call, hot and after idling."""
    middleware, task = guard_middleware()

    async def one() -> int:
        start = time.thread_time_ns()
        proxied(middleware, task)
        return time.thread_time_ns() - start

    for _ in range(min(calls, 200)):
        await one()
    report: dict[str, float] = {}
    for name, idle in (("hot", 0.0), ("after_idle", idle_s)):
        times = []
        for _ in range(calls):
            if idle:
                time.sleep(idle)  # noqa: ASYNC251 - the process idles, as the proxy does
            times.append(await one())
        times.sort()
        report[f"{name}_median_us"] = statistics.median(times) / 1e3
        report[f"{name}_p90_us"] = times[int(0.9 * (len(times) - 1))] / 1e3
    report["x_cold"] = report["after_idle_median_us"] / report["hot_median_us"]
    return report


def ping_pong_us(round_trips: int, same_cpu: bool) -> float | None:
    """Median µs of a one-byte round trip between this process and a child over two pipes;
    ``None`` where it cannot run (no ``fork``, or no affinity for ``same_cpu``)."""
    if not hasattr(os, "fork") or (same_cpu and not hasattr(os, "sched_setaffinity")):
        return None
    request_r, request_w = os.pipe()
    answer_r, answer_w = os.pipe()
    before = os.sched_getaffinity(0) if same_cpu else None
    if same_cpu:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the child inherits it
    pid = os.fork()
    if pid == 0:  # the child answers every byte, until the request pipe closes
        try:
            os.close(request_w)
            os.close(answer_r)
            while os.read(request_r, 1):
                os.write(answer_w, b"x")
        finally:
            os._exit(0)
    os.close(request_r)
    os.close(answer_w)
    try:
        times = []
        for i in range(round_trips + 50):
            start = time.perf_counter_ns()
            os.write(request_w, b"x")
            os.read(answer_r, 1)
            if i >= 50:
                times.append(time.perf_counter_ns() - start)
    finally:
        os.close(request_w)
        os.waitpid(pid, 0)
        os.close(answer_r)
        if before is not None:
            os.sched_setaffinity(0, before)
    return statistics.median(times) / 1e3


def main() -> None:
    """Parse the options, measure, print (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--idle-ms", type=float, default=2.0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    calls = 20 if args.smoke else args.calls
    report: dict[str, Any] = {"calls": calls, "idle_ms": args.idle_ms,
                              "guard": asyncio.run(guard_us(calls, args.idle_ms / 1e3)),
                              "ping_pong_us": {"free": ping_pong_us(calls * 5, False),
                                               "same_cpu": ping_pong_us(calls * 5, True)}}
    g, pp = report["guard"], report["ping_pong_us"]
    print(f"guarded call, thread CPU ({calls} calls): hot {g['hot_median_us']:.1f} us "
          f"(p90 {g['hot_p90_us']:.1f}), after {args.idle_ms:g} ms idle "
          f"{g['after_idle_median_us']:.1f} us (p90 {g['after_idle_p90_us']:.1f}): "
          f"x{g['x_cold']:.1f}")
    for name, value in pp.items():
        print(f"pipe round trip between two processes, {name.replace('_', ' ')}: "
              + (f"{value:.1f} us" if value is not None else "n/a"))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
