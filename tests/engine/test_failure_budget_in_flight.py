"""The consecutive-failure budget counts calls in flight: 32 concurrent calls of a failing
tool do not all run, as they would if failures were counted only as calls finish."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import toolguard as tg
from toolguard.policy._model import BudgetPolicy

D = tg.Decision


def _policy(limit: int) -> tg.Policy:
    return tg.Policy(budget=BudgetPolicy(max_consecutive_failures=limit))


def test_concurrent_calls_of_a_failing_tool_stop_at_the_budget() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    @tg.readonly
    def fetch(page: int) -> str:
        with lock:
            ran.append(page)
        time.sleep(0.05)
        raise ConnectionError("the service is down")

    task = tg.Guard(_policy(6), [fetch]).task("t")
    barrier = threading.Barrier(32)

    def go(page: int) -> str:
        barrier.wait()
        try:
            return str(task.call("fetch", {"page": page}).decision)
        except tg.BudgetExceeded:
            return "halt"

    with ThreadPoolExecutor(32) as pool:
        decisions = Counter(pool.map(go, range(32)))
    assert len(ran) == 6 and decisions["allow"] == 6, decisions
    assert decisions["block"] + decisions["halt"] == 26
    with pytest.raises(tg.BudgetExceeded) as info:  # the six failures halt the task
        task.call("fetch", {"page": 99})
    assert info.value.budget == "max_consecutive_failures"


async def test_concurrent_acalls_of_a_failing_tool_stop_at_the_budget() -> None:
    ran: list[int] = []

    @tg.mutating
    async def send(n: int) -> str:
        ran.append(n)
        await asyncio.sleep(0.02)
        raise ConnectionError("down")

    task = tg.Guard(_policy(3), [send]).task("t")
    results = await asyncio.gather(*(task.acall("send", {"n": n}) for n in range(20)),
                                   return_exceptions=True)
    assert len(ran) == 3
    blocked = [r for r in results if isinstance(r, tg.ToolResult) and r.decision is D.BLOCK]
    assert len(blocked) == 17 and "failure budget" in blocked[0].reason


def test_a_healthy_tool_runs_again_once_its_calls_finish() -> None:
    @tg.readonly
    def ping(n: int) -> str:
        return f"pong {n}"

    task = tg.Guard(_policy(2), [ping]).task("t")
    assert all(task.call("ping", {"n": n}).executed for n in range(10))  # one at a time
