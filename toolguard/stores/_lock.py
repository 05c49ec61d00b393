"""A mutex for the guard's short critical sections, that threads cannot convoy on.

The guard holds a lock for a few microseconds per call (the in-memory store's ``begin`` and
``finish``, the registry of calls in progress). With a plain :class:`threading.Lock`, a
thread that finds it taken blocks in the OS. If the holder was preempted by the interpreter's
thread switch (every ``sys.getswitchinterval()``, 5 ms), each release hands the lock to a
sleeping thread that must then win the GIL back: every later critical section costs two
context switches, and the convoy never clears. Measured on the read-only allow path
(``benchmarks/run.py``, "threads"): 50k calls/s from one thread, 14k from two to eight.

Here a waiter never sleeps inside the lock: it retries ``acquire(blocking=False)`` and sleeps
``time.sleep(1e-6)`` between tries, which releases the GIL so the holder runs on and
releases. Threads then take turns a switch interval at a time, as they would with no lock:
about 40k calls/s from two to eight threads. The uncontended path is one non-blocking
``acquire``, as cheap as a plain lock. Not reentrant; no timeout.

Latency: with 16 threads calling flat out, the slowest calls (p99.9 ~130 ms, max ~0.7 s) are
the GIL's round robin of 16 busy threads at 5 ms each: the same with no lock at all. The
convoying plain lock had a shorter tail (~3 ms) only because it switched threads on every
call, at a third of the throughput.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

__all__ = ["YieldingLock", "wait_for"]

_PAUSE_S = 1e-6  # the kernel rounds it up (timer slack, ~50 µs); 0 spins on the GIL instead


def wait_for(lock: threading.Lock) -> None:
    """Take ``lock``, already found held: retry without blocking, pausing between tries."""
    try_acquire = lock.acquire
    while not try_acquire(False):
        time.sleep(_PAUSE_S)


class YieldingLock:
    """A non-reentrant mutex whose waiters poll instead of queueing (see the module doc).

    Use it as ``with lock:``; hot paths may inline ``if not lock.raw.acquire(False):
    wait_for(lock.raw)`` ... ``lock.raw.release()`` to skip the two method calls.
    """

    __slots__ = ("raw",)

    def __init__(self) -> None:
        self.raw = threading.Lock()

    def __enter__(self) -> None:
        raw = self.raw
        if not raw.acquire(False):
            wait_for(raw)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.raw.release()

    def locked(self) -> bool:
        return self.raw.locked()
