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
from typing import Any

import toolguard as tg

RUNS: Counter[str] = Counter()  # how often each tool body ran (reset per test)

LOOKUP = ("lookup", {"city": "Paris"})
REFUND = ("refund", {"order_id": "A1", "amount_cents": 500})
WRITE = ("write_file", {"path": "notes.txt", "text": "hello"})
READ = ("read_file", {"path": "notes.txt"})

# The model's messages, in order: one tool call each. The halt comes at index HALT_AT.
SCRIPT: list[tuple[str, dict[str, Any]]] = [LOOKUP, REFUND, WRITE, WRITE, WRITE, *[READ] * 6]
HALT_AT = 9

ALLOW, WARN, CACHED, BLOCK, HALT = (tg.Decision.ALLOW, tg.Decision.WARN, tg.Decision.CACHED,
                                    tg.Decision.BLOCK, tg.Decision.HALT)
# what task.history records, in order (the review of the refund comes first: it waited)
DECISIONS = [("lookup", ALLOW), ("refund", tg.Decision.REVIEW), ("refund", ALLOW),
             ("write_file", ALLOW), ("write_file", CACHED), ("write_file", CACHED),
             ("read_file", ALLOW), ("read_file", ALLOW), ("read_file", WARN),
             ("read_file", BLOCK), ("read_file", HALT),
             ("read_file", ALLOW), ("read_file", ALLOW)]  # after task.resume()
BODIES = {"lookup": 1, "refund": 1, "write_file": 1, "read_file": 5}

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
    return tg.load_policy_dict({"strict_tools": False, **sections, "tools": {
        "lookup": {"effect": "readonly"}, "refund": {"requires_approval": True},
        "write_file": {"effect": "mutating"}, "read_file": {"effect": "readonly"}}})


def decisions(task: tg.Task) -> list[tuple[str, tg.Decision]]:
    return [(r.tool, r.result.decision) for r in task.history]
