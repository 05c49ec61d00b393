"""The script every adapter test plays through its framework's own fake model.

An async read once, one approval, an identical write x3, an identical read x6. Through the
default ladders (read-only 3/4/5, mutating 2/3/4) the guard must answer:

- ``lookup`` (async def): allow, its body runs once;
- ``refund`` (``requires_approval``): review → the framework's own approval → allow, once,
  and that run is the attempt that waited (count 1), not a repeat;
- ``write_file`` x3: allow, cached, cached: the body runs once, the model sees the notice;
- ``read_file`` x6: allow, allow, warn, block, then the 5th halts the task; after
  ``task.resume()`` the run continues: the 5th runs again (a new turn: count 1) and the 6th.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import toolguard as tg

RUNS: Counter[str] = Counter()  # how often each tool body ran (reset per test)

LOOKUP = ("lookup", {"city": "Paris"})
REFUND = ("refund", {"order_id": "A1", "amount_cents": 500})
WRITE = ("write_file", {"path": "notes.txt", "text": "hello"})
READ = ("read_file", {"path": "notes.txt"})

# The model's messages, in order: one tool call each. The halt comes at index HALT_AT.
SCRIPT: list[tuple[str, dict[str, Any]]] = [LOOKUP, REFUND, WRITE, WRITE, WRITE, *[READ] * 6]
HALT_AT = 9

ALLOW, WARN, CACHED, BLOCK, HALT, REVIEW = (
    tg.Decision.ALLOW, tg.Decision.WARN, tg.Decision.CACHED, tg.Decision.BLOCK,
    tg.Decision.HALT, tg.Decision.REVIEW)


def expected(*, review: bool, after_resume: int) -> list[tuple[str, tg.Decision, int]]:
    """(tool, decision, repeat count) of each guarded call, in order. ``review``: the guard
    sees the refund before its approval (it sends it to review; the approved run is then the
    same attempt, count 1). ``after_resume``: reads the framework runs after task.resume()
    (a new turn: counts restart)."""
    return [("lookup", ALLOW, 1), *([("refund", REVIEW, 1)] if review else []),
            ("refund", ALLOW, 1), ("write_file", ALLOW, 1), ("write_file", CACHED, 2),
            ("write_file", CACHED, 3), ("read_file", ALLOW, 1), ("read_file", ALLOW, 2),
            ("read_file", WARN, 3), ("read_file", BLOCK, 4), ("read_file", HALT, 5),
            *[("read_file", ALLOW, n) for n in range(1, after_resume + 1)]]


def bodies(after_resume: int) -> dict[str, int]:
    return {"lookup": 1, "refund": 1, "write_file": 1, "read_file": 3 + after_resume}


_RESULTS = {"executing->planning", "validating->planning", "validating->failed",
            "validating->needs_review"}


def audited(sink: tg.MemorySink) -> list[tuple[str, tg.Decision, int]]:
    """The result of each guarded call from the audit trail (the public record), in order:
    one event per call (an approver's answer is an event of its own, left out)."""
    return [(e.tool, tg.Decision(e.decision), e.count) for e in sink.events
            if e.transition in _RESULTS and e.tool and not e.reason.startswith("approval: ")]


CACHED_NOTICE = "already ran successfully earlier in this task"
WARN_NOTICE = "You have called read_file with these same arguments 3 times"
BLOCKED = "[toolguard] Blocked, not executed"


async def lookup(city: str) -> str:
    """Look up the weather of a city.

    Args:
        city: the city's name.
    """
    await asyncio.sleep(0)
    RUNS["lookup"] += 1
    return f"sunny in {city}"


def refund(order_id: str, amount_cents: int) -> str:
    """Refund an order.

    Args:
        order_id: the order. amount_cents: how much, in cents.
    """
    RUNS["refund"] += 1
    return f"refunded {amount_cents} cents on {order_id}"


def write_file(path: str, text: str) -> str:
    """Write a file.

    Args:
        path: where. text: what.
    """
    RUNS["write_file"] += 1
    return f"wrote {len(text)} bytes to {path}"


def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: which.
    """
    RUNS["read_file"] += 1
    return f"contents of {path}: hello"


def policy(**sections: Any) -> tg.Policy:
    """Effects by name, as a deployment's policy gives them for framework tool objects;
    ``sections`` adds top-level policy sections (``budget={...}``)."""
    return tg.load_policy_dict({**sections, "tools": {
        "lookup": {"effect": "readonly"}, "refund": {"requires_approval": True},
        "write_file": {"effect": "mutating"}, "read_file": {"effect": "readonly"}}})


def guard(tools: list[Any], **sections: Any) -> tuple[tg.Guard, tg.MemorySink]:
    """A guard that knows ``tools`` (framework tool objects or functions) and audits to a
    memory sink."""
    sink = tg.MemorySink()
    return tg.Guard(policy(**sections), tools=tools, audit=[sink]), sink


@pytest.fixture(autouse=True)
def fresh_runs() -> Iterator[None]:
    """Each test counts its own tool runs, and gets an event loop of its own: a framework's
    sync entry point (``Runner.run_sync``, ``agent.run_sync``) runs on the thread's default
    loop and leaves it open, so it is given one that is closed after the test."""
    RUNS.clear()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@tg.mutating
def save(path: str, text: str) -> str:
    """Save a note (marked with toolguard's own decorator, under the framework's).

    Args:
        path: where. text: what.
    """
    RUNS["save"] += 1
    return f"saved {path}"


SAVE = ("save", {"path": "n.txt", "text": "x"})
