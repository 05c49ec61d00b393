"""Replay recorded runs through the guard and collect every decision. No tool is executed, and
nothing is printed (``_report.py`` renders a :class:`ReplayReport`).

Each run is one task of a :class:`~toolguard.Guard` built for the policy plus the run's header
``effects`` (one guard per distinct combination). For each recorded call the guard lets run,
the recorded result stands in for the tool's (``Task._replay_call``), so counts, progress
detection and the idempotency cache evolve exactly as they would have at run time; calls it
does not let run get the guard's synthetic result and the run continues as the model's
recorded next step (what the model would have done after a block is unknowable, so later
decisions are an estimate). A halt ends the run; its remaining calls are not replayed.

Fixed for every replay, whatever the policy says:

* ``mode`` is ``enforce``: replay answers "what would enforcing this policy have done".
* The store is a private :class:`~toolguard.stores.MemoryStore` (never a shared Redis).
* Approvals are deferred (:func:`toolguard.testing.auto_defer`): a call that needs one is
  ``review`` and does not run; replay never asks a human.
* Tools named in the policy but absent from the transcripts are no error
  (``strict_tools = false``).
* Time is a fake clock that moves only with the calls' ``elapsed_s``, so TTLs and
  ``budget.timeout_s`` follow the recorded timeline, never the replay's own speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar, overload

from toolguard._errors import Halt, PolicyError
from toolguard._results import ToolResult
from toolguard._types import Decision, Effect, Mode
from toolguard.engine import _batch
from toolguard.engine._engine import Guard, Task
from toolguard.hashing._redact import redact, redact_text
from toolguard.policy._loader import load_policy_dict
from toolguard.policy._model import AuditPolicy, Policy, ToolPolicy
from toolguard.stores.memory import MemoryStore
from toolguard.testing import FakeClock, auto_defer
from toolguard.tools._decorators import ToolSpec

from ._model import RecordedCall, ReplayInputError, Run, Step, TokenUsage, UserTurn
from ._portions import Portion, replay_portion
from ._records import (
    AnyOutcome,
    Outcome,
    RenderedOutcome,
    RenderedRun,
    ReplayReport,
    RunReport,
    StepReport,
    Totals,
    excerpt,
    failed,
    new_step,
)

__all__ = ["Outcome", "ReplayReport", "RunReport", "StepReport", "Totals", "policy_with_effects",
           "replay_runs", "replay_stream"]

T = TypeVar("T")

def policy_with_effects(policy: Policy, effects: Mapping[str, Any], source: str) -> Policy:
    """``policy`` with a trace header's ``effects`` applied on top (the header wins).

    Args:
        policy: the base policy.
        effects: tool name → ``{"effect", "args", "rules"}`` (the ``../shared/cases`` format,
            a subset of a policy's ``[tools.NAME]`` table); validated like a policy file.
        source: how problems name the header, e.g. ``"trace.jsonl:1 effects"``.

    Returns:
        A new policy whose ``tools`` entries take every key the header sets (``rules``
        replace the policy's, like arrays in an ``extends`` chain) and keep the others.

    Raises:
        PolicyError: the effects are not valid policy keys.
    """
    overlay = load_policy_dict({"tools": dict(effects)}, source=source)
    tools: dict[str, ToolPolicy] = dict(policy.tools)
    for name, tp in overlay.tools.items():
        base = tools.get(name)
        tools[name] = tp if base is None else base.model_copy(
            update={key: getattr(tp, key) for key in tp.model_fields_set})
    return policy.model_copy(update={"tools": tools})


def replay_runs(
    runs: Iterable[Run],
    policy: Policy | None = None,
    *,
    tools: Sequence[ToolSpec] = (),
    on_run: Callable[[RunReport], None] | None = None,
    details: bool = False,
) -> ReplayReport:
    """Replay recorded runs through the guard (see the module docstring).

    Args:
        runs: the runs (:func:`~toolguard.replay.read_runs`), consumed one at a time (an
            iterator of one file's runs keeps memory to what the report holds).
        policy: the policy; default the built-in defaults.
        tools: tool specs with argument schemas (``read_tool_definitions``); when given, a
            recorded call of any other tool is ``invalid`` (unknown tool), as at run time.
            Without them every recorded tool name is registered without a schema.
        on_run: called after each run (e.g. to advance a progress bar).
        details: keep each step's :attr:`StepReport.details` (the HTML report shows them).

    Returns:
        The :class:`ReplayReport`. A run whose header ``effects`` are invalid is not replayed
        but listed in ``problems``; a guard failure inside a run stops that run only
        (``RunReport.error``) and is listed in ``problems`` too.
    """
    report = ReplayReport()
    for outcome in replay_stream(runs, policy, tools=tools, details=details):
        result, problem = outcome
        if result is not None:
            report.runs.append(result)
            if on_run is not None:
                on_run(result)
        if problem is not None:
            report.problems.append(problem)
    return report



@overload
def replay_stream(items: Iterable[Run | Portion | T], policy: Policy | None = None, *,
                  tools: Sequence[ToolSpec] = (), jobs: int = 1, details: bool = False,
                  render: None = None) -> Generator[Outcome | T, None, None]: ...


@overload
def replay_stream(items: Iterable[Run | Portion | T], policy: Policy | None = None, *,
                  tools: Sequence[ToolSpec] = (), jobs: int = 1, details: bool = False,
                  render: Callable[[RunReport], RenderedRun]
                  ) -> Generator[RenderedOutcome | T, None, None]: ...


def replay_stream(items: Iterable[Run | Portion | T], policy: Policy | None = None, *,
                  tools: Sequence[ToolSpec] = (), jobs: int = 1, details: bool = False,
                  render: Callable[[RunReport], RenderedRun] | None = None
                  ) -> Generator[AnyOutcome | T, None, None]:
    """Replay runs one by one as ``items`` yields them, in worker processes when ``jobs`` > 1.

    Args:
        items: the runs, portions of big trace files (:mod:`._portions`: with ``jobs`` > 1
            each is read by the worker that replays it) and any other values (say, a marker
            at the end of each file) that are handed back in their place in the order.
        policy: the policy; default the built-in defaults.
        tools: tool specs with argument schemas (see :func:`replay_runs`).
        details: keep each step's :attr:`StepReport.details` (see :func:`replay_runs`).
        jobs: worker processes; 1 replays in this process. Runs are independent of each
            other (each is one task of its own), so the outcomes do not depend on ``jobs``.
        render: turns each run's report into what the caller writes of it
            (:class:`~toolguard.replay._report.RunRenderer`), where the run was replayed: a
            worker then sends that back, not the run's steps, which costs this process
            (unpickling a step costs about what rendering it does) and the worker less.
            Pickled into the workers by reference.

    Yields:
        For each run, its :data:`Outcome` (with ``render``, its report rendered:
        :data:`RenderedOutcome`); each other item as it is; all in input order, each as soon
        as it and everything before it is done, with a bounded number of runs in flight. A
        run that makes its worker process die is that run's error.
    """
    replayer = _Replayer(policy or Policy(), tools, details, render)
    numbered = _numbered(items)
    if jobs <= 1:
        for item in numbered:
            if isinstance(item, tuple):
                yield replayer.outcome(*item)
            elif isinstance(item, Portion):  # read here, as a worker would
                yield from item.split.merge(item, replay_portion(replayer, *item.task))
            else:
                yield item
        return
    from ._parallel import pooled

    yield from pooled(numbered, replayer, jobs)


def _numbered(items: Iterable[Run | Portion | T]) -> Iterator[tuple[int, Run] | Portion | T]:
    number = 0
    for item in items:
        if isinstance(item, Run):
            yield number, item
            number += 1
        else:
            yield item


class _Replayer:
    """The guards and the clock of one replay."""

    def __init__(self, policy: Policy, tools: Sequence[ToolSpec], details: bool = False,
                 render: Callable[[RunReport], RenderedRun] | None = None) -> None:
        self.policy = policy.model_copy(update={"mode": Mode.ENFORCE})
        self.details = details
        self.render = render
        given = {spec.name: spec for spec in tools}
        self.known: set[str] | None = set(given) if given else None
        # Without definitions, recorded tools need no registration: the guard takes an
        # unknown name's effect from the policy (``Task._replay_call``).
        self.specs = list(given.values())
        self.clock = FakeClock(0.0)
        self.guards: dict[str, Guard] = {}

    def guard_for(self, run: Run) -> Guard:
        # json, not orjson: header values may be integers beyond 64 bits (then refused by the
        # policy's validation with a message, not by the serializer with a TypeError)
        key = json.dumps(run.effects, sort_keys=True, default=repr) if run.effects else ""
        guard = self.guards.get(key)
        if guard is None:
            policy = self.policy
            if run.effects:
                where = f"{run.file}:{run.line} effects" if run.line else f"{run.file} effects"
                policy = policy_with_effects(policy, run.effects, where)
            store = MemoryStore(max_entries=policy.idempotency.max_entries,
                                state_ttl_s=policy.store.state_ttl_s, clock=self.clock)
            guard = self.guards[key] = Guard(policy, self.specs, store=store,
                                             approver=auto_defer, clock=self.clock,
                                             strict_tools=False)
        return guard

    def finished(self, run: Run, report: RunReport) -> AnyOutcome:
        """The outcome of ``run`` replayed into ``report``: the report, rendered if the
        replay renders, and the problem of its error if it stopped on one."""
        outcome = failed(run, report)
        if self.render is None:
            return outcome
        return self.render(report), outcome[1]

    def outcome(self, number: int, run: Run) -> AnyOutcome:
        """Replay ``run``, the ``number``-th of the replay (its task id), and say what went
        wrong if something did."""
        try:
            guard = self.guard_for(run)
        except PolicyError as exc:
            return None, ReplayInputError(
                run.file, run.line, f"run {run.id}: invalid header effects: "
                + "; ".join(f"{p.path}: {p.message}" for p in exc.problems))
        except RecursionError:
            return None, ReplayInputError(
                run.file, run.line, f"run {run.id}: header effects nested too deeply")
        except Exception as exc:  # noqa: BLE001 - a header is data: whatever the policy
            # loader fails with on it (a regex too big to compile, say) is this run's problem,
            # and the other runs still replay
            return None, ReplayInputError(
                run.file, run.line, f"run {run.id}: invalid header effects: "
                f"{type(exc).__name__}: {exc}")
        task_id = f"replay-{number}:{run.id}"
        try:
            return self.finished(run, self.replay(guard, task_id, run))
        finally:  # runs are independent tasks: a finished one's state is garbage
            guard.store.clear_task(task_id)

    def replay(self, guard: Guard, task_id: str, run: Run) -> RunReport:
        report = RunReport(run.id, run.file, run.meta, calls=len(run.calls), format=run.format)
        task = guard.task(task_id)
        audit = guard.policy.audit
        start = self.clock()
        current: RecordedCall | None = None
        try:
            for item in _grouped(run.steps):
                if isinstance(item, RecordedCall):  # one call (nearly every step): nothing to merge
                    current = item
                    if item.elapsed_s is not None:
                        self._advance_to(start + item.elapsed_s)
                    arguments = item.arguments
                    report.steps.append(_step(report.replayed, item, arguments,
                                              self._call(task, item, arguments), audit,
                                              self.details))
                    report.replayed += 1
                    current = None
                elif isinstance(item, UserTurn):
                    task.new_turn()
                elif isinstance(item, TokenUsage):
                    if item.elapsed_s is not None:
                        self._advance_to(start + item.elapsed_s)
                    task.record_usage(item.input_tokens, item.output_tokens,
                                      model=item.model)
                else:
                    order = _batch.dedupe(task, [(c.tool, c.arguments) for c in item])[0]
                    first: list[ToolResult] = []
                    for call, (unique, duplicate) in zip(item, order, strict=True):
                        current = call
                        if call.elapsed_s is not None:
                            self._advance_to(start + call.elapsed_s)
                        arguments = call.arguments
                        if duplicate:  # identical calls in one message run once
                            result = _batch.copy_for(first[unique], True)
                        else:
                            result = self._call(task, call, arguments)
                            first.append(result)
                        report.steps.append(_step(report.replayed, call, arguments, result,
                                                  audit, self.details))
                        report.replayed += 1
                        current = None
        except Halt as exc:
            report.steps.append(_halt_step(report.replayed, current, exc, task, self.details))
            report.halted_at, report.halt_reason = report.replayed, exc.reason
            if current is not None:
                report.replayed += 1
        except Exception as exc:  # noqa: BLE001 - a guard failure (a bug, a store error)
            # stops this run only: reported as its error, the other runs still replay
            report.error = f"{type(exc).__name__}: {exc}"
        usage = task.usage
        report.tokens, report.cost_usd = usage.total_tokens, usage.cost_usd
        report.unpriced_tokens = usage.unpriced_tokens
        return report

    def _call(self, task: Task, call: RecordedCall, arguments: Mapping[str, Any] | str | None
              ) -> ToolResult:
        """The guard's decision on ``call`` (``arguments``: its ``arguments``)."""
        if self.known is not None and call.tool not in self.known:
            # Not among the given definitions: the guard answers as at run time (invalid).
            return task.call(call.tool, arguments)
        return task._replay_call(call.tool, arguments, call.result, is_error=call.is_error,
                                 timeout=call.timeout)

    def _advance_to(self, when: float) -> None:
        now = self.clock()
        if when > now:
            self.clock.advance(when - now)


def _grouped(steps: Sequence[Step]
             ) -> Iterator[RecordedCall | UserTurn | TokenUsage | list[RecordedCall]]:
    """The steps with each batch of two calls or more (consecutive calls sharing a ``batch``
    that is not ``None``) as one list; every other step as it is."""
    batch: list[RecordedCall] = []
    for step in steps:
        if isinstance(step, RecordedCall) and step.batch is not None:
            if batch and step.batch == batch[0].batch:
                batch.append(step)
                continue
            if batch:
                yield batch if len(batch) > 1 else batch[0]
            batch = [step]
            continue
        if batch:
            yield batch if len(batch) > 1 else batch[0]
            batch = []
        yield step
    if batch:
        yield batch if len(batch) > 1 else batch[0]


def _step(index: int, call: RecordedCall, arguments: Mapping[str, Any] | str | None,
          result: ToolResult, audit: AuditPolicy, details: bool) -> StepReport:
    """The report of ``call`` (``arguments``: its ``arguments``) decided as ``result``."""
    stale = result.decision is Decision.CACHED and (call.is_error or result.value != call.result)
    shown = None
    if details:
        # an executed call's notice is the guard's own text; what a call that did not run
        # got instead may quote a recorded result (a cached one), so it is redacted
        shown = _details(call, audit, result.notice or "" if result.decision.executed
                         else _redacted(_text(result.content)))
    return new_step(index, call.tool, result.args_hash, result.effect, result.decision,
                     result.reason, result.count, arguments, call.line, audit, stale,
                     shown)



_DETAIL_CHARS: Final = 400


def _details(call: RecordedCall | None, audit: AuditPolicy, notice: str) -> dict[str, str]:
    """:attr:`StepReport.details` of a step, ``notice`` already safe to show."""
    if call is None:
        return {"args": "", "result": "", "notice": _cut(notice)}
    result = call.result
    if isinstance(result, dict):  # redacted as arguments are: by key, and inside strings
        shown = _cut(_text(redact(result, audit.redact_pattern, _DETAIL_CHARS)))
    else:
        shown = _redacted(_text(result))
    args = excerpt({} if call.arguments is None else call.arguments, audit, _DETAIL_CHARS)
    return {"args": args, "result": shown, "notice": _cut(notice)}


def _text(value: Any) -> str:
    """A result as text: a string as is, anything else as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=repr,
                                                           ensure_ascii=False)


def _redacted(text: str) -> str:
    """``text`` redacted (credentials of a known shape) and cut to ``_DETAIL_CHARS``. A long
    text (a recorded result may be megabytes) is cut first to twice that: room for any
    shape of ``redact_text`` that starts before the cut to match whole (a URL's password
    is at most 200 characters; a PEM block matches to the end of the text)."""
    return _cut(redact_text(text[: 2 * _DETAIL_CHARS]))


def _cut(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def _halt_step(index: int, call: RecordedCall | None, exc: Halt, task: Task, details: bool
               ) -> StepReport:
    effect: Effect | None = None
    last = task.history[-1].result if task.history else None
    if call is not None and last is not None and last.decision is Decision.HALT:
        effect = last.effect
    return StepReport(index, call.tool if call else None, exc.args_hash, effect, Decision.HALT,
                      exc.reason, exc.count, call.arguments if call else None,
                      call.line if call else None,
                      task.guard.policy.audit,
                      details=_details(call, task.guard.policy.audit,
                                       _redacted(f"[toolguard] Halted: {exc}"))
                      if details else None)
