"""Replay runs in worker processes (``toolguard replay --jobs N``), handing the outcomes back
in input order.

The runs are read in this process and sent to the workers in batches of about
:data:`BATCH_CALLS` calls; at most two batches per worker are in flight, so memory holds a
bounded number of runs whatever the input's size. Each worker has its own
:class:`~toolguard.replay._runner._Replayer` (runs are independent tasks, so which worker
replays a run does not change its outcome). Workers are forked where the platform can (they
start with the policy already loaded) and ignore SIGINT: Ctrl-C reaches this process, which
stops them. A worker that dies (a crash in native code, the OOM killer) breaks the pool: the
pool is started again, the batch it was replaying is replayed one run at a time to find the
run that kills it, which is reported as that run's error, and the other runs still replay.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final, Protocol, TypeVar

from ._model import Run
from ._records import Outcome, RunReport, failed

__all__ = ["BATCH_CALLS", "pooled"]

T = TypeVar("T")

BATCH_CALLS = 512  # not Final: a test sends small batches
"""Calls per batch sent to a worker: enough to make the pickling of a batch cheap beside its
replay, few enough to keep every worker busy till the end."""

_IN_FLIGHT_PER_JOB: Final = 2


class _Replayer(Protocol):
    """What a worker needs of the replay (:class:`toolguard.replay._runner._Replayer`, which
    pickles into each worker): replay the ``number``-th run."""

    def outcome(self, number: int, run: Run) -> Outcome: ...

_worker: list[_Replayer] = []  # the replayer of this worker process


def _start(replayer: _Replayer) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker[:] = [replayer]


def _replay_batch(batch: list[tuple[int, Run]]) -> list[Outcome]:
    return [_worker[0].outcome(number, run) for number, run in batch]


class _Pool:
    """A process pool that can be started again after a worker died."""

    def __init__(self, replayer: _Replayer, jobs: int) -> None:
        self.replayer = replayer
        self.jobs = jobs
        methods = multiprocessing.get_all_start_methods()
        self.context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.executor = self._new()

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.jobs, mp_context=self.context, initializer=_start,
                                   initargs=(self.replayer,))

    def restart(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.executor = self._new()

    def submit(self, batch: list[tuple[int, Run]]) -> Future[list[Outcome]]:
        try:
            return self.executor.submit(_replay_batch, batch)
        except BrokenProcessPool:  # a worker died since the last submit
            self.restart()
            return self.executor.submit(_replay_batch, batch)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def pooled(items: Iterator[tuple[int, Run] | T], replayer: _Replayer, jobs: int
           ) -> Iterator[Outcome | T]:
    """:func:`~toolguard.replay._runner.replay_stream` with ``jobs`` worker processes.

    ``items``: numbered runs and other values (not tuples), handed back in order; see
    :func:`~toolguard.replay._runner.replay_stream`. The workers start with the first full
    batch: an input smaller than that replays in this process."""
    pool: _Pool | None = None
    # a batch: numbered runs and the other items between them, in order
    pending: deque[tuple[list[tuple[int, Run] | T], Future[list[Outcome]]]] = deque()
    batch: list[tuple[int, Run] | T] = []
    calls = 0
    try:
        for item in items:
            batch.append(item)
            if not isinstance(item, tuple):
                if pool is None and len(batch) == 1:  # nothing before it is pending
                    batch.clear()
                    yield item
                continue
            calls += len(item[1].calls)
            if calls < BATCH_CALLS:
                continue
            pool = pool or _Pool(replayer, jobs)
            pending.append((batch, pool.submit(_runs(batch))))
            batch, calls = [], 0
            while len(pending) > _IN_FLIGHT_PER_JOB * jobs:
                yield from _take(pending, pool)
        if pool is not None and batch:
            pending.append((batch, pool.submit(_runs(batch))))
            batch = []
        while pending:
            yield from _take(pending, pool)
        for item in batch:  # one batch in all: no worker is worth starting
            yield replayer.outcome(*item) if isinstance(item, tuple) else item
    finally:
        if pool is not None:
            pool.close()


def _runs(batch: list[tuple[int, Run] | T]) -> list[tuple[int, Run]]:
    return [item for item in batch if isinstance(item, tuple)]


def _take(pending: deque[tuple[list[tuple[int, Run] | T], Future[list[Outcome]]]],
          pool: _Pool | None) -> Iterator[Outcome | T]:
    """The outcomes of the first pending batch, waiting for them, and its other items."""
    assert pool is not None
    batch, future = pending.popleft()
    try:
        outcomes = iter(future.result())
    except BrokenProcessPool:
        # Which run killed the worker is unknown (every pending batch broke with the pool):
        # this batch's runs go one at a time through the pool with nothing else in it, then
        # the later batches are sent again.
        pool.restart()
        outcomes = iter([_alone(pool, *item) for item in _runs(batch)])
        for i, (later, _) in enumerate(pending):
            pending[i] = (later, pool.submit(_runs(later)))
    except Exception:  # noqa: BLE001 - the batch could not be sent or sent back
        # (pickling): the run that cannot is found run by run
        outcomes = iter([_alone(pool, *item) for item in _runs(batch)])
    for item in batch:
        yield next(outcomes) if isinstance(item, tuple) else item


def _alone(pool: _Pool, number: int, run: Run) -> Outcome:
    """Replay one run by itself; if its worker dies, that is the run's error."""
    try:
        return pool.submit([(number, run)]).result()[0]
    except BrokenProcessPool:
        pool.restart()
        error = "the worker process replaying it died"
    except Exception as exc:  # noqa: BLE001 - say what, for this run only
        error = f"{type(exc).__name__}: {exc}"
    return failed(run, RunReport(run.id, run.file, run.meta, calls=len(run.calls),
                                 format=run.format, error=error))
