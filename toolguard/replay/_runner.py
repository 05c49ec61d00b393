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
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from toolguard._decorators import ToolSpec
from toolguard._engine import Guard, Task
from toolguard._errors import Halt, PolicyError
from toolguard._policy import AuditPolicy, Policy, ToolPolicy
from toolguard._policy_loader import load_policy_dict
from toolguard._redact import redact, redact_json_text, redact_text
from toolguard._results import ToolResult, _fast_constructor
from toolguard._types import Decision, Effect, Mode
from toolguard.stores.memory import MemoryStore
from toolguard.testing import FakeClock, auto_defer

from ._model import RecordedCall, ReplayInputError, ReplayNote, Run, Step, TokenUsage, UserTurn

__all__ = ["Outcome", "ReplayReport", "RunReport", "StepReport", "Totals", "policy_with_effects",
           "replay_runs", "replay_stream"]

T = TypeVar("T")

COUNTED: Final = (Decision.ALLOW, Decision.WARN, Decision.CACHED, Decision.BLOCK,
                  Decision.REVIEW, Decision.INVALID)
"""Decisions counted per run (a halt is a flag and a step index, not a count)."""

_EXCERPT_CHARS: Final = 80


@dataclass(frozen=True, slots=True)
class StepReport:
    """The guard's decision on one recorded call.

    Attributes:
        index: 0-based index of the call in its run.
        tool: the tool name; ``None`` for a halt caused by token usage reported between calls.
        args_hash: the canonical arguments hash (``""`` when there is no call).
        effect: the effect the call was judged with, or ``None``.
        decision: what the guard did.
        reason: one line on why (``""`` for a plain allow).
        count: the call's repeat count (1 = first since the last progress).
        args: a one-line excerpt of the arguments, at most 80 characters, redacted as the
            audit redacts them (made when read: only the verbose table shows it).
        line: the 1-based line of the call in a JSONL file, or ``None``.
        arguments: the call's recorded arguments (``RecordedCall.arguments``), or ``None``.
        audit: the ``[audit]`` policy that redacts the excerpt.
        stale: a ``cached`` answer that differs from what the recorded call returned (the
            model would have read an outdated result).
        details: with ``replay_runs(details=True)`` only (``None`` otherwise), what a person
            looking at the call wants to see, redacted and cut short: ``{"args"`` (up to 400
            characters), ``"result"`` (the recorded result, up to 400), ``"notice"`` (what the
            guard gave the model instead of or after the result: a warn's notice, a
            synthetic result, the halt; ``""`` for a plain allow)``}``.
    """

    index: int
    tool: str | None
    args_hash: str
    effect: Effect | None
    decision: Decision
    reason: str
    count: int
    arguments: Mapping[str, Any] | str | None = field(default=None, repr=False, compare=False)
    line: int | None = None
    audit: AuditPolicy | None = field(default=None, repr=False, compare=False)
    stale: bool = False
    details: dict[str, str] | None = field(default=None, repr=False, compare=False)

    @property
    def args(self) -> str:
        """A one-line excerpt of the arguments (see the class docstring); ``""`` without a
        call. Redacting every step's arguments up front was a third of a replay's time."""
        if self.tool is None:  # a halt on token usage, between calls
            return ""
        return excerpt({} if self.arguments is None else self.arguments,
                       self.audit if self.audit is not None else AuditPolicy())

    @property
    def executed(self) -> bool:
        """True exactly for ``allow`` and ``warn``: the recorded result was fed back."""
        return self.decision.executed

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON values (the ``--format json`` step object)."""
        return {
            "index": self.index, "tool": self.tool, "args_hash": self.args_hash,
            "effect": None if self.effect is None else str(self.effect),
            "decision": str(self.decision), "reason": self.reason, "count": self.count,
            "executed": self.executed,
        }


@dataclass(slots=True)
class RunReport:
    """Every decision on one run.

    Attributes:
        id: the run's id. file: the file it came from. meta: its metadata (header keys).
        format: the input format it was read as (``Run.format``).
        calls: recorded calls in the run. replayed: calls the guard decided on (fewer than
            ``calls`` after a halt).
        steps: one :class:`StepReport` per replayed call (a halt caused by token usage adds
            a step without a tool).
        halted_at: index of the call at which the run halted, or ``None``.
        halt_reason: why it halted, or ``None``.
        error: a guard failure that stopped the run early (a bug or a store error), or ``None``.
        tokens: model tokens the recording reported (up to the halt).
        cost_usd: what those of a known model cost (``genai-prices``), in US dollars.
        unpriced_tokens: those whose model the recording does not name or the price table
            does not know.
    """

    id: str
    file: str
    meta: dict[str, Any]
    calls: int
    format: str = ""
    replayed: int = 0
    steps: list[StepReport] = field(default_factory=list)
    halted_at: int | None = None
    halt_reason: str | None = None
    error: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = 0

    @property
    def halted(self) -> bool:
        """True when the run ended in a halt."""
        return self.halted_at is not None

    def count(self, decision: Decision) -> int:
        """How many steps got ``decision`` (``halt``: 1 if the run halted)."""
        return sum(1 for s in self.steps if s.decision is decision)

    @property
    def executed(self) -> int:
        """Calls that ran (``allow`` and ``warn``)."""
        return sum(1 for s in self.steps if s.executed)

    def reached(self, decision: Decision) -> bool:
        """True when some call of the run got ``decision``."""
        return any(s.decision is decision for s in self.steps)

    def summary(self) -> dict[str, Any]:
        """The per-run summary (JSON values): counts per decision, the halt, the metadata."""
        out: dict[str, Any] = {"calls": self.calls, "replayed": self.replayed,
                               "not_replayed": self.calls - self.replayed,
                               "executed": self.executed}
        out.update({str(d): self.count(d) for d in COUNTED})
        out.update({"halt": self.halted, "halted_at": self.halted_at,
                    "halt_reason": self.halt_reason, "error": self.error,
                    "tokens": self.tokens, "cost_usd": self.cost_usd,
                    "unpriced_tokens": self.unpriced_tokens, "meta": self.meta})
        return out


@dataclass(slots=True)
class ReplayReport:
    """The result of a replay: the runs and the input problems met on the way.

    Attributes:
        runs: one :class:`RunReport` per replayed run, in input order.
        problems: lines, runs or files that could not be read or replayed.
        notes: records the readers did not use, one per kind and file (no effect on the exit
            code).
    """

    runs: list[RunReport] = field(default_factory=list)
    problems: list[ReplayInputError] = field(default_factory=list)
    notes: list[ReplayNote] = field(default_factory=list)

    def runs_with(self, decision: Decision) -> list[RunReport]:
        """The runs in which some call got ``decision``."""
        return [r for r in self.runs if r.reached(decision)]

    def totals(self) -> dict[str, Any]:
        """Totals over all runs (JSON values); see :meth:`Totals.as_dict`."""
        totals = Totals()
        for run in self.runs:
            totals.add(run)
        return totals.as_dict(len(self.problems))


@dataclass(slots=True)
class Totals:
    """Counts over the runs replayed so far, added one run at a time (a streamed replay keeps
    these, not the runs).

    Attributes:
        runs, calls, replayed, executed, errors: summed over the runs (``errors``: runs that
            stopped on a guard error).
        decisions: steps per decision (``halt``: halted runs).
        runs_with: runs in which at least one call got the decision.
        tools: the tool names the runs called.
        tokens, cost_usd, unpriced_tokens: the recorded model usage (:class:`RunReport`).
    """

    runs: int = 0
    calls: int = 0
    replayed: int = 0
    executed: int = 0
    errors: int = 0
    decisions: dict[str, int] = field(
        default_factory=lambda: {str(d): 0 for d in (*COUNTED, Decision.HALT)})
    runs_with: dict[str, int] = field(
        default_factory=lambda: {str(d): 0 for d in (*COUNTED[1:], Decision.HALT)})
    tools: set[str] = field(default_factory=set)
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = 0

    def add(self, run: RunReport) -> None:
        """Count ``run`` in."""
        self.runs += 1
        self.tokens += run.tokens
        self.cost_usd += run.cost_usd
        self.unpriced_tokens += run.unpriced_tokens
        self.calls += run.calls
        self.replayed += run.replayed
        self.errors += run.error is not None
        seen: set[str] = set()
        for step in run.steps:
            name = str(step.decision)
            if step.decision is not Decision.HALT:
                self.decisions[name] += 1
            self.executed += step.executed
            seen.add(name)
            if step.tool is not None:
                self.tools.add(step.tool)
        if run.halted:
            self.decisions["halt"] += 1
        for name in seen & self.runs_with.keys():
            self.runs_with[name] += 1

    def as_dict(self, problems: int) -> dict[str, Any]:
        """The ``totals`` of the JSON report: ``runs``, ``calls``, ``replayed``,
        ``not_replayed``, ``executed``, ``decisions`` (steps per decision; ``halt``: halted
        runs), ``runs_with`` (runs in which at least one call got that decision), ``errors``
        and ``problems`` (their number, given)."""
        return {
            "runs": self.runs,
            "calls": self.calls,
            "replayed": self.replayed,
            "not_replayed": self.calls - self.replayed,
            "executed": self.executed,
            "decisions": dict(self.decisions),
            "runs_with": dict(self.runs_with),
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 9),  # whole nano-dollars
            "unpriced_tokens": self.unpriced_tokens,
            "errors": self.errors,
            "problems": problems,
        }


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


Outcome = tuple[RunReport | None, ReplayInputError | None]
"""What replaying one run gave: its report (``None`` when it could not be replayed at all, for
invalid header ``effects``) and the problem to report about it, if any."""


def replay_stream(items: Iterable[Run | T], policy: Policy | None = None, *,
                  tools: Sequence[ToolSpec] = (), jobs: int = 1, details: bool = False
                  ) -> Generator[Outcome | T, None, None]:
    """Replay runs one by one as ``items`` yields them, in worker processes when ``jobs`` > 1.

    Args:
        items: the runs, with any other values (say, a marker at the end of each file) that
            are handed back in their place in the order.
        policy: the policy; default the built-in defaults.
        tools: tool specs with argument schemas (see :func:`replay_runs`).
        details: keep each step's :attr:`StepReport.details` (see :func:`replay_runs`).
        jobs: worker processes; 1 replays in this process. Runs are independent of each
            other (each is one task of its own), so the outcomes do not depend on ``jobs``.

    Yields:
        For each run, its :data:`Outcome`; each other item as it is; all in input order, each
        as soon as it and everything before it is done, with a bounded number of runs in
        flight. A run that makes its worker process die is that run's error.
    """
    replayer = _Replayer(policy or Policy(), tools, details)
    numbered = _numbered(items)
    if jobs <= 1:
        for item in numbered:
            yield replayer.outcome(*item) if isinstance(item, tuple) else item
        return
    from ._parallel import pooled

    yield from pooled(numbered, replayer, jobs)


def _numbered(items: Iterable[Run | T]) -> Iterator[tuple[int, Run] | T]:
    number = 0
    for item in items:
        if isinstance(item, Run):
            yield number, item
            number += 1
        else:
            yield item


class _Replayer:
    """The guards and the clock of one replay."""

    def __init__(self, policy: Policy, tools: Sequence[ToolSpec], details: bool = False
                 ) -> None:
        self.policy = policy.model_copy(update={"mode": Mode.ENFORCE})
        self.details = details
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

    def outcome(self, number: int, run: Run) -> Outcome:
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
            return failed(run, self.replay(guard, task_id, run))
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
                if isinstance(item, UserTurn):
                    task.new_turn()
                elif isinstance(item, TokenUsage):
                    if item.elapsed_s is not None:
                        self._advance_to(start + item.elapsed_s)
                    task.record_usage(item.input_tokens, item.output_tokens,
                                      model=item.model)
                elif len(item) == 1:  # one call: nothing to merge
                    call = current = item[0]
                    if call.elapsed_s is not None:
                        self._advance_to(start + call.elapsed_s)
                    report.steps.append(_step(report.replayed, call, self._call(task, call),
                                              audit, self.details))
                    report.replayed += 1
                    current = None
                else:
                    order = task._dedupe([(c.tool, c.arguments) for c in item])[0]
                    first: list[ToolResult] = []
                    for call, (unique, duplicate) in zip(item, order, strict=True):
                        current = call
                        if call.elapsed_s is not None:
                            self._advance_to(start + call.elapsed_s)
                        if duplicate:  # identical calls in one message run once
                            result = task._copy_for(first[unique], True)
                        else:
                            result = self._call(task, call)
                            first.append(result)
                        report.steps.append(_step(report.replayed, call, result, audit,
                                                  self.details))
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

    def _call(self, task: Task, call: RecordedCall) -> ToolResult:
        if self.known is not None and call.tool not in self.known:
            # Not among the given definitions: the guard answers as at run time (invalid).
            return task.call(call.tool, call.arguments)
        return task._replay_call(call.tool, call.arguments, call.result,
                                 is_error=call.is_error, timeout=call.timeout)

    def _advance_to(self, when: float) -> None:
        now = self.clock()
        if when > now:
            self.clock.advance(when - now)


def failed(run: Run, result: RunReport) -> Outcome:
    """``result`` with the problem of its error, if the run stopped on one."""
    if result.error is None:
        return result, None
    # a bug in the guard: the run is incomplete, say so
    return result, ReplayInputError(
        run.file, run.line, f"run {run.id}: stopped after {result.replayed} call(s) by a guard "
        f"error: {result.error}")


def _grouped(steps: Sequence[Step]) -> Iterator[UserTurn | TokenUsage | list[RecordedCall]]:
    """The steps with each batch (consecutive calls sharing a ``batch``) as one list."""
    batch: list[RecordedCall] = []
    for step in steps:
        if isinstance(step, RecordedCall) and batch and (
                step.batch is not None and step.batch == batch[0].batch):
            batch.append(step)
            continue
        if batch:
            yield batch
            batch = []
        if isinstance(step, RecordedCall):
            batch = [step]
        else:
            yield step
    if batch:
        yield batch


def _step(index: int, call: RecordedCall, result: ToolResult, audit: AuditPolicy,
          details: bool) -> StepReport:
    stale = result.decision is Decision.CACHED and (call.is_error or result.value != call.result)
    shown = None
    if details:
        # an executed call's notice is the guard's own text; what a call that did not run
        # got instead may quote a recorded result (a cached one), so it is redacted
        shown = _details(call, audit, result.notice or "" if result.decision.executed
                         else _redacted(_text(result.content)))
    return _new_step(index, call.tool, result.args_hash, result.effect, result.decision,
                     result.reason, result.count, call.arguments, call.line, audit, stale,
                     shown)


_new_step: Final[Callable[..., StepReport]] = _fast_constructor(StepReport)
"""``StepReport(...)`` (its fields in order) without the frozen dataclass's per-field
``object.__setattr__``: one per replayed call."""

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


def excerpt(arguments: Mapping[str, Any] | str, audit: AuditPolicy,
            limit: int = _EXCERPT_CHARS) -> str:
    """A one-line excerpt of a call's ``arguments`` (``RecordedCall.arguments``), redacted
    as the audit redacts them (``audit``: the policy's ``[audit]``): the value of a single
    argument, else compact JSON; the raw text when the model's JSON text was recorded. At
    most ``limit`` characters."""
    if isinstance(arguments, str):
        text = redact_json_text(arguments, audit.redact_pattern)
    else:
        args = redact(arguments, audit.redact_pattern, 10 * limit)
        if len(args) == 1 and isinstance(next(iter(args.values())), str):
            text = str(next(iter(args.values())))
        else:
            # the standard library writes integers of any size (orjson stops at 64 bits)
            text = json.dumps(args, default=repr, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
