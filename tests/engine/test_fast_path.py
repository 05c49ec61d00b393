"""The one call path (``toolguard.engine._path``) gives the same in every configuration and split
or not: random sequences of calls (repeats, writes, polls, errors, timeouts, invalid and
unknown calls, approvals, budgets, ladder and stagnation rungs, a moving clock) produce the
same results, exceptions, executions, history and task state on a plain ``MemoryStore``
(the store's fields passed as arguments) and on a subclass that overrides ``begin`` and
``finish`` (request tuples, every outcome recorded through its record), with an audit sink
or without, and with ``call(run=)`` made as ``task.begin`` + ``finish`` / ``fail`` in the
second run; for ``call`` and for ``acall`` (async tools, sync tools in a worker thread,
``run=`` hooks sync and async, an async tool called with ``call``, an ``acall`` cancelled
while its tool runs, the MCP proxy's halves)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.engine._pending import abegin, begin_nowait
from toolguard.policy._model import (
    BudgetPolicy,
    IdempotencyPolicy,
    LadderPolicy,
    LadderThresholds,
    ToolPolicy,
)
from toolguard.stores.memory import MemoryStore
from toolguard.testing import FakeClock
from toolguard.tools._context import CURRENT_KEY


def _ladder(warn_at: int, block_at: int, halt_at: int) -> LadderThresholds:
    return LadderThresholds(warn_at=warn_at, block_at=block_at, halt_at=halt_at)


_POLICIES = [
    tg.Policy(ladder=LadderPolicy(readonly=_ladder(2, 3, 5), mutating=_ladder(2, 3, 4),
                                  stagnation_warn_at=3, stagnation_block_at=4),
              tools={"status": ToolPolicy(effect=tg.Effect.POLL, max_polls=4),
                     "deploy": ToolPolicy(requires_approval=True)}),
    tg.Policy(budget=BudgetPolicy(max_tool_calls=12),
              idempotency=IdempotencyPolicy(ttl_s=30.0),
              tools={"write": ToolPolicy(idempotency_scope="task"),
                     "flaky": ToolPolicy(idempotency_scope="off")}),
    tg.Policy(budget=BudgetPolicy(max_consecutive_failures=3)),
]

_TOOL = st.sampled_from(["search", "search", "search", "write", "write", "status", "flaky",
                         "slow", "deploy", "nope"])
_ARG = st.one_of(st.integers(0, 3), st.integers(0, 3),
                 st.sampled_from(["x", "", None, 2.0, [1, 2]]))
# (tool, argument, the JSON-text spelling) the model sends; "nope" is no tool
_CALLS = st.tuples(_TOOL, _ARG, st.booleans())
_STEPS = st.one_of(_CALLS, st.sampled_from(["tick", "turn"]))
# how a call is made (see _one)
_HOWS = ("call", "call_run", "acall", "acall_run", "acall_arun", "cancel", "remote")
_ASYNC_STEPS = st.one_of(st.tuples(_TOOL, _ARG, st.booleans(), st.sampled_from(_HOWS)),
                         st.sampled_from(["tick", "turn"]))


def _where() -> tuple[bool, tuple[str, str] | None]:
    """Where a tool runs: on the main thread or not (a plain tool under ``acall`` runs in a
    worker thread), and the idempotency key it sees with the execution it belongs to (the
    call id without its random suffix: a retry of an unknown outcome has the first's)."""
    current = CURRENT_KEY.get()
    return (threading.current_thread() is threading.main_thread(),
            None if current is None else (current[0], current[1].split("@")[0]))


def _functions(runs: list[tuple[str, Any, Any]]) -> dict[str, Callable[..., Any]]:
    """The tools' plain functions by name, each noting its run in ``runs`` (:func:`_where`);
    ``nope``: what a ``run=`` hook does for the name no tool has."""
    def search(q: Any = 0) -> Any:
        runs.append(("search", q, _where()))
        # the same outcome under other arguments: the stagnation rule's runs
        return None if q == 0 else "nothing found" if q in (1, 2, "") else f"found {q}"

    def write(q: Any = 0) -> str:
        runs.append(("write", q, _where()))
        return f"wrote {q}"

    def status(q: Any = 0) -> str:
        runs.append(("status", q, _where()))
        return "pending"

    def flaky(q: Any = 0) -> str:
        runs.append(("flaky", q, _where()))
        if q in (1, "x"):
            raise ValueError(f"bad {q}")
        return "ok"

    def slow(q: Any = 0) -> str:
        runs.append(("slow", q, _where()))
        if q == 1:
            raise TimeoutError("took too long")
        return "done"

    def deploy(q: Any = 0) -> str:
        runs.append(("deploy", q, _where()))
        return "deployed"

    def nope(q: Any = 0) -> str:
        runs.append(("nope", q, _where()))
        return "ran"

    return {f.__name__: f for f in (search, write, status, flaky, slow, deploy, nope)}


_EFFECTS = {"search": tg.Effect.READONLY, "write": tg.Effect.MUTATING,
            "status": tg.Effect.POLL, "flaky": tg.Effect.MUTATING,
            "slow": tg.Effect.MUTATING, "deploy": tg.Effect.MUTATING}


def _tools(functions: dict[str, Callable[..., Any]], is_async: bool = False) -> list[Any]:
    """The tools: the plain functions, or with ``is_async`` ``async def`` tools that yield
    to the event loop once, then run them."""
    return [tg.ToolSpec(name=name, func=_async(functions[name]) if is_async
                        else functions[name], effect=effect)
            for name, effect in _EFFECTS.items()]


def _async(func: Callable[..., Any]) -> Callable[..., Any]:
    async def tool(q: Any = 0) -> Any:
        await asyncio.sleep(0)
        return func(q)

    return tool


def _view(result: tg.ToolResult) -> dict[str, Any]:
    """A result without what differs between any two runs (the call id, the duration)."""
    fields = dataclasses.asdict(result)
    fields.pop("call_id")
    fields.pop("duration_s")
    return fields


def _one(loop: asyncio.AbstractEventLoop, task: tg.Task, func: Callable[..., Any], tool: str,
         args: Any, how: str) -> tg.ToolResult | str:
    """One call of ``tool``, made as ``how`` says: ``call`` or ``acall``, alone or with a
    ``run=`` hook that calls ``func`` (``acall_arun``: an async hook); ``cancel``: an
    ``acall`` cancelled while its async hook runs (``"cancelled"``); ``remote``: the two
    steps as the MCP proxy takes them (:func:`_remote`)."""
    def hook(args: dict[str, Any]) -> Any:
        return func(**args)

    async def async_hook(args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return func(**args)

    if how == "call":
        return task.call(tool, args)
    if how == "call_run" and getattr(task, "split", False):
        return _pending(task, tool, args, hook)
    if how == "call_run":
        return task.call(tool, args, run=hook)
    if how == "cancel":
        return loop.run_until_complete(_cancelled(task, tool, args, func))
    if how == "remote":
        return loop.run_until_complete(_remote(task, tool, args, hook))
    run = {"acall": None, "acall_run": hook, "acall_arun": async_hook}[how]
    return loop.run_until_complete(task.acall(tool, args, run=run))


def _pending(task: tg.Task, tool: str, args: Any, hook: Callable[[dict[str, Any]], Any]
             ) -> tg.ToolResult:
    """``task.call(tool, args, run=hook)`` made as its two halves, ``task.begin`` and
    ``finish`` / ``fail``, with the tool run between them by the caller."""
    pending = task.begin(tool, args)
    if pending.result is not None:
        return pending.result
    value, exc = _run_between(pending, hook)
    return pending.fail(exc) if exc is not None else pending.finish(value)


def _run_between(pending: tg.PendingCall, hook: Callable[[dict[str, Any]], Any]
                 ) -> tuple[Any, Exception | None]:
    """Run ``hook`` as the host runs a begun call's tool: what it returned, or raised. A
    host's tool reads no idempotency-key context; the in-process stand-in is given the one
    ``call`` sets, so that what it records compares."""
    p = pending._begun.p  # type: ignore[union-attr]  # it runs: begun
    token = CURRENT_KEY.set((p.key, p.origin or p.call_id))
    try:
        return hook(pending.args), None
    except Exception as exc:
        return None, exc
    finally:
        CURRENT_KEY.reset(token)


class _TupleStore(MemoryStore):
    """A store whose ``begin`` and ``finish`` are its own (they only count their calls): the
    path passes it request tuples, as any store other than a plain ``MemoryStore``."""

    calls = 0

    def begin(self, task_id: str, req: Any) -> Any:
        self.calls += 1
        return super().begin(task_id, req)

    def finish(self, task_id: str, req: Any) -> None:
        self.calls += 1
        super().finish(task_id, req)


async def _remote(task: tg.Task, tool: str, args: Any,
                  hook: Callable[[dict[str, Any]], Any]) -> tg.ToolResult:
    """The two steps as the MCP proxy takes them: :func:`begin_nowait` in a callback, the
    tool run between the steps (what it raises is the outcome), a call it hands over (an
    approval, a wait) goes on in ``abegin``, and a store that waits on I/O is ``abegin``'s
    from the start."""
    front = begin_nowait(task, tool, args)
    if isinstance(front, tg.PendingCall):
        pending = front
    else:
        pending = await abegin(task, tool, args, None, False, front)
    if pending.result is not None:
        return pending.result
    value, exc = _run_between(pending, hook)
    return await pending.afail(exc) if exc is not None else await pending.afinish(value)


async def _cancelled(task: tg.Task, tool: str, args: Any, func: Callable[..., Any]
                     ) -> tg.ToolResult | str:
    """``acall`` with a hook that calls ``func`` and then never ends, cancelled once it
    runs; the result of a call that does not run (or whose ``func`` raised)."""
    started = asyncio.Event()

    async def hook(args: dict[str, Any]) -> Any:
        func(**args)
        started.set()
        await asyncio.Event().wait()

    call = asyncio.ensure_future(task.acall(tool, args, run=hook))
    running = asyncio.ensure_future(started.wait())
    await asyncio.wait([call, running], return_when=asyncio.FIRST_COMPLETED)
    running.cancel()
    if call.done():
        return call.result()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    return "cancelled"


One = Callable[[asyncio.AbstractEventLoop, tg.Task, Callable[..., Any], str, Any, str],
              "tg.ToolResult | str"]


def _run(policy: tg.Policy, steps: list[Any], fast: bool, is_async: bool = False,
         one: One = _one) -> list[Any]:
    """Run ``steps`` on a fresh guard (each call made by ``one``, :func:`_one`'s way by
    default) and return everything a run leaves: results, halts, the tools' runs, history,
    usage and the store's state. ``fast``: a plain ``MemoryStore``; else the other
    configuration: a :class:`_TupleStore`, an audit sink, ``call(run=)`` split in two."""
    runs: list[tuple[str, Any, Any]] = []
    functions = _functions(runs)
    clock = FakeClock(1000.0)
    store = (MemoryStore if fast else _TupleStore)(max_entries=6, clock=clock)
    guard = tg.Guard(policy, _tools(functions, is_async), clock=clock, store=store,
                     audit=[] if fast else [tg.MemorySink()])
    task = guard.task("fast")  # one id for both runs: it is in the keys
    task.split = not fast  # type: ignore[attr-defined]  # _one's cue
    seen: list[Any] = []
    loop = asyncio.new_event_loop()
    for step in steps:
        if step == "tick":
            clock.advance(7.0)
            continue
        if step == "turn":
            task.new_turn()
            continue
        tool, arg, as_text, *how = step
        args: Any = {} if arg is None and as_text else {"q": arg}
        if as_text:
            args = f'{{"q": {arg!r}}}'.replace("'", '"') if arg is not None else "{}"
        try:
            result = one(loop, task, functions.get(tool, functions["nope"]), tool, args,
                         how[0] if how else "call")
            seen.append(result if isinstance(result, str) else _view(result))
        except tg.Halt as halt:
            seen.append(("halt", type(halt).__name__, str(halt)))
            task.resume()
        except tg.ToolGuardError as error:
            seen.append(("error", type(error).__name__, str(error)))
        except TypeError as error:  # the host's mistake (task.call of an async def tool)
            seen.append(("host error", str(error)))
    loop.run_until_complete(loop.shutdown_default_executor())  # sync tools' worker threads
    loop.close()
    seen.append(runs)
    seen.append([(r.tool, r.args, _view(r.result)) for r in task.history])
    usage = task.usage
    seen.append((usage.tool_calls, usage.per_tool, task.halted,
                 sorted(task.pending_approvals)))
    # the store's own state: idempotency records (claims included) and ladder counts
    seen.append([(key, record.state, record.content, expires)
                 for key, (record, expires, _) in store._records._data.items()])
    state = store._tasks["fast"]
    seen.append(([(k, v.count, v.polls, v.resets, v.last_digest, v.epoch)
                  for k, v in state.sigs.items()], list(state.seen), state.stagnation,
                 state.epoch, state.changes, state.failures))
    return seen


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(_POLICIES))), st.lists(_STEPS, max_size=40))
@example(0, [("search", 1, False), ("search", 2, True), ("search", "", False),  # stagnation
             ("search", 3, False), ("search", 3, False), ("search", 3, False)])
@example(0, [("flaky", 1, False), ("flaky", 1, True), ("flaky", 1, False), "tick",  # a claim
             ("flaky", 2, False), ("flaky", 3, False), ("flaky", 3, False)])  # blocked
@example(0, [("write", 1, False), ("write", 1, False), ("write", 2, False), "tick",
             ("slow", 1, False), ("slow", 1, False), "turn", ("write", 1, False)])
def test_every_configuration_gives_the_same(policy: int, steps: list[Any]) -> None:
    assert _run(_POLICIES[policy], steps, True) == _run(_POLICIES[policy], steps, False)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(_POLICIES))), st.booleans(), st.lists(_ASYNC_STEPS, max_size=40))
@example(0, True, [("write", 1, False, "cancel"), ("write", 1, False, "acall"),  # to review
                   ("write", 1, False, "acall"), ("write", 2, True, "acall_arun")])
@example(1, False, [("write", 1, False, "acall"), ("write", 1, True, "acall"),  # cached
                    ("flaky", 1, False, "acall_run"), ("flaky", 2, False, "acall_arun"),
                    ("slow", 1, False, "acall"), ("search", 1, False, "call")])
@example(0, True, [("search", 1, False, "call"), ("search", 1, False, "acall"),  # async tool
                   ("search", 1, False, "cancel"), ("nope", 1, False, "acall_run")])
@example(0, False, [("deploy", 1, False, "remote"), ("write", 1, False, "remote"),  # halves
                    ("write", 1, False, "remote"), ("flaky", 1, False, "remote"),
                    ("search", 1, False, "remote"), ("search", 1, False, "remote"),
                    ("search", 1, False, "remote"), ("search", 1, False, "remote"),
                    ("search", 1, False, "remote"), ("nope", 1, False, "remote")])
def test_every_configuration_gives_the_same_under_acall(policy: int, is_async: bool,
                                                          steps: list[Any]) -> None:
    """The same for calls made with ``acall`` too (``is_async``: the tools are ``async
    def``; else a plain tool under ``acall`` runs in a worker thread)."""
    assert (_run(_POLICIES[policy], steps, True, is_async)
            == _run(_POLICIES[policy], steps, False, is_async))


@pytest.mark.parametrize("is_async", [False, True])
def test_the_configurations_differ(is_async: bool) -> None:
    """Pins that the comparisons above compare something: the subclassed store is passed
    request tuples (its own ``begin`` / ``finish`` run), the plain one is not, and a sink
    sees the calls."""
    loop = asyncio.new_event_loop()
    for store, sink in ((MemoryStore(), None), (_TupleStore(), tg.MemorySink())):
        guard = tg.Guard(tools=_tools(_functions([]), is_async), store=store,
                         audit=[] if sink is None else [sink])
        task = guard.task("t")
        result = (loop.run_until_complete(task.acall("search", {"q": 1})) if is_async
                  else task.call("search", {"q": 1}))
        assert result.decision is tg.Decision.ALLOW
        assert guard._fields is (sink is None)
        if sink is not None:
            assert isinstance(store, _TupleStore) and store.calls == 2
            assert [e.transition for e in sink.events] == ["validating->executing",
                                                           "executing->planning"]
    loop.close()


def test_begin_nowait_says_what_each_call_needs() -> None:
    """Pins that the ``remote`` steps above go through both steps: a plain allow is a
    :class:`PendingCall` whose success goes back unchanged (``final``), a warned call is
    one whose result the guard adds to, a block is finished at once, an approval is handed
    over to ``abegin``, an audit sink keeps a success from going out before it is recorded,
    and a store that waits on I/O is ``abegin``'s (it must run off the event loop)."""
    policy = tg.Policy(ladder=LadderPolicy(readonly=_ladder(2, 3, 5)),
                       tools={"deploy": ToolPolicy(requires_approval=True)})
    guard = tg.Guard(policy, tools=_tools(_functions([])))
    task = guard.task("remote")
    first = begin_nowait(task, "search", {"q": 1})
    assert isinstance(first, tg.PendingCall) and first.result is None
    assert first.final and first.args == {"q": 1}
    value: dict[str, list[str]] = {"hits": []}
    result = first.finish(value)
    assert result.decision is tg.Decision.ALLOW and result.content is value  # unchanged
    second = begin_nowait(task, "search", {"q": 1})
    assert isinstance(second, tg.PendingCall) and not second.final  # the warn rung's notice
    assert second.finish(value).notice
    blocked = begin_nowait(task, "search", {"q": 1})
    assert isinstance(blocked, tg.PendingCall) and blocked.result is not None
    assert blocked.result.decision is tg.Decision.BLOCK and not blocked.final
    handed = begin_nowait(task, "deploy", {"q": 1})
    assert handed is not None and not isinstance(handed, tg.PendingCall)  # abegin's
    audited = begin_nowait(tg.Guard(policy, tools=_tools(_functions([])),
                                    audit=[tg.MemorySink()]).task("sink"), "search", {})
    assert isinstance(audited, tg.PendingCall) and not audited.final
    blocking = MemoryStore()
    blocking.blocking = True  # type: ignore[misc]  # as a Redis store says
    assert begin_nowait(tg.Guard(policy, tools=_tools(_functions([])),
                                 store=blocking).task("blocking"), "search", {}) is None
    stagnating = tg.Guard(tg.Policy(ladder=LadderPolicy(stagnation_warn_at=1)),
                          tools=_tools(_functions([]))).task("stagnating")
    maybe = begin_nowait(stagnating, "search", {"q": 2})
    assert isinstance(maybe, tg.PendingCall) and not maybe.final  # any outcome may warn
