"""Replay runs in worker processes (``toolguard replay --jobs N``), handing the outcomes back
in input order.

The runs are read in this process and sent to the workers in batches of about
:data:`BATCH_CALLS` calls, except a big trace file's, which the workers read themselves a
portion at a time (:mod:`._portions`: this process only finds where to cut); at most two
batches or portions per worker are in flight, so memory holds a bounded number of runs
whatever the input's size. Each worker has its own
:class:`~toolguard.replay._runner._Replayer` (runs are independent tasks, so which worker
replays a run does not change its outcome). Workers are forked where the platform can (they
start with the policy already loaded) and ignore SIGINT: Ctrl-C reaches this process, which
stops them. A worker that dies (a crash in native code, the OOM killer) breaks the pool: the
pool is started again, the batch it was replaying (a portion: read in this process) is
replayed one run at a time to find the run that kills it, which is reported as that run's
error, and the other runs still replay. A run that cannot cross to a worker or back (pickle
cannot reach values nested as deep as the readers accept) replays in this process.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final, Protocol, TypeVar

from ._model import Run
from ._portions import Portion, PortionResult, read_portion, replay_portion
from ._records import AnyOutcome, RunReport

__all__ = ["BATCH_CALLS", "pooled"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")

BATCH_CALLS = 512  # not Final: a test sends small batches
"""Calls per batch sent to a worker: enough to make the pickling of a batch cheap beside its
replay, few enough to keep every worker busy till the end."""

_IN_FLIGHT_PER_JOB: Final = 2


class _Replayer(Protocol):
    """What a worker needs of the replay (:class:`toolguard.replay._runner._Replayer`, which
    pickles into each worker): replay the ``number``-th run; the outcome of a run replayed
    into a report."""

    def outcome(self, number: int, run: Run) -> AnyOutcome: ...

    def finished(self, run: Run, report: RunReport) -> AnyOutcome: ...

_worker: list[_Replayer] = []  # the replayer of this worker process


def _start(replayer: _Replayer) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker[:] = [replayer]


def _replay_batch(batch: list[tuple[int, Run]]) -> list[AnyOutcome]:
    return [_worker[0].outcome(number, run) for number, run in batch]


def _replay_portion(task: tuple[str, int, int, int]) -> PortionResult:
    return replay_portion(_worker[0], *task)


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

    def submit(self, batch: list[tuple[int, Run]]) -> Future[list[AnyOutcome]]:
        return self._submit(_replay_batch, batch)

    def submit_portion(self, portion: Portion) -> Future[PortionResult]:
        return self._submit(_replay_portion, portion.task)

    def _submit(self, function: Callable[[A], R], argument: A) -> Future[R]:
        try:
            return self.executor.submit(function, argument)
        except BrokenProcessPool:  # a worker died since the last submit
            self.restart()
            return self.executor.submit(function, argument)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def pooled(items: Iterator[tuple[int, Run] | Portion | T], replayer: _Replayer, jobs: int
           ) -> Iterator[AnyOutcome | T]:
    """:func:`~toolguard.replay._runner.replay_stream` with ``jobs`` worker processes.

    ``items``: numbered runs, portions of trace files (:mod:`._portions`, each read and
    replayed by one worker) and other values (not tuples), handed back in order; see
    :func:`~toolguard.replay._runner.replay_stream`. The workers start with the first full
    batch or portion: an input smaller than that replays in this process."""
    pool: _Pool | None = None
    # a batch: numbered runs and the other items between them, in order; or one portion
    pending: deque[_Pending[T]] = deque()
    batch: list[tuple[int, Run] | T] = []
    calls = 0
    try:
        for item in items:
            if isinstance(item, Portion):
                pool = pool or _Pool(replayer, jobs)
                if batch:
                    pending.append((batch, pool.submit(_runs(batch))))
                    batch, calls = [], 0
                pending.append((item, pool.submit_portion(item)))
            else:
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


# a batch or a portion, and the future of its outcomes (list[AnyOutcome] or PortionResult)
_Pending = tuple["list[tuple[int, Run] | T] | Portion", "Future[Any]"]


def _runs(batch: list[tuple[int, Run] | T]) -> list[tuple[int, Run]]:
    return [item for item in batch if isinstance(item, tuple)]


def _take(pending: deque[_Pending[T]], pool: _Pool | None) -> Iterator[AnyOutcome | T]:
    """The outcomes of the first pending batch or portion, waiting for them, and the batch's
    other items."""
    assert pool is not None
    batch, future = pending.popleft()
    if isinstance(batch, Portion):
        yield from _portion_outcomes(batch, future, pending, pool)
        return
    try:
        outcomes: Iterator[AnyOutcome] = iter(future.result())
    except BrokenProcessPool:
        _resubmit(pending, pool)
        outcomes = iter([_alone(pool, *item) for item in _runs(batch)])
    except Exception:  # noqa: BLE001 - the batch could not be sent or sent back
        # (pickling): the run that cannot is found run by run
        outcomes = iter([_alone(pool, *item) for item in _runs(batch)])
    for item in batch:
        yield next(outcomes) if isinstance(item, tuple) else item


def _portion_outcomes(portion: Portion, future: Future[PortionResult],
                      pending: deque[_Pending[T]], pool: _Pool) -> Iterator[AnyOutcome]:
    try:
        result = future.result()
    except Exception as exc:  # noqa: BLE001 - a worker died, or the outcomes could not
        # be sent back: this process reads the portion and its runs replay one at a time
        if isinstance(exc, BrokenProcessPool):
            _resubmit(pending, pool)
        source, runs, fatal = read_portion(*portion.task)
        outcomes = [(run.id, _alone(pool, portion.start + i, run))
                    for i, run in enumerate(runs)]
        result = source, fatal[0], outcomes
    yield from portion.split.merge(portion, result)


def _resubmit(pending: deque[_Pending[T]], pool: _Pool) -> None:
    """After a worker died: which run killed it is unknown (every pending batch broke with
    the pool), so the pool starts again and the later batches and portions are sent again;
    the caller replays the one at hand one run at a time, with nothing else in the pool."""
    pool.restart()
    for i, (later, _) in enumerate(pending):
        pending[i] = (later, pool.submit_portion(later) if isinstance(later, Portion)
                      else pool.submit(_runs(later)))


def _alone(pool: _Pool, number: int, run: Run) -> AnyOutcome:
    """Replay one run by itself; if its worker dies, that is the run's error. A run that
    cannot be sent to a worker or back (pickling: values nested deeper than pickle's
    recursion reaches, which the readers accept) replays in this process, as with
    ``--jobs 1``: its outcome does not depend on the number of jobs."""
    try:
        return pool.submit([(number, run)]).result()[0]
    except BrokenProcessPool:
        pool.restart()
    except Exception:  # noqa: BLE001 - the worker catches the replay's own failures: this is
        # the run or its outcome failing to cross between the processes
        return pool.replayer.outcome(number, run)
    return pool.replayer.finished(run, RunReport(
        run.id, run.file, run.meta, calls=len(run.calls), format=run.format,
        error="the worker process replaying it died"))
