"""A heartbeat on the event loop: how often it ran while something else was awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Beats:
    """The number of 10 ms heartbeats the loop completed (``count``)."""

    count = 0


@asynccontextmanager
async def heartbeat() -> AsyncIterator[Beats]:
    """Count the loop's 10 ms heartbeats while the ``async with`` body runs: a blocked loop
    counts none."""
    beats = Beats()

    async def beat() -> None:
        while True:
            await asyncio.sleep(0.01)
            beats.count += 1

    ticking = asyncio.create_task(beat())
    try:
        yield beats
    finally:
        ticking.cancel()
