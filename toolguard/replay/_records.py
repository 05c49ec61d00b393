"""What a replay reports: the guard's decision on each recorded call (:class:`StepReport`),
each run's (:class:`RunReport`), the whole replay's (:class:`ReplayReport`) and the bounded
counters a streamed replay keeps instead of its runs (:class:`Totals`). No replaying here
(``_runner.py``) and no rendering (``_report.py``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Final

from toolguard._results import _fast_constructor
from toolguard._types import Decision, Effect
from toolguard.hashing._redact import redact, redact_json_text
from toolguard.policy._model import AuditPolicy

from ._model import ReplayInputError, ReplayNote, Run

__all__ = ["COUNTED", "AnyOutcome", "Outcome", "RenderedOutcome", "RenderedRun", "ReplayReport",
           "RunCounts", "RunReport", "StepReport", "Totals", "excerpt", "failed"]

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
        return self.decision in _EXECUTED

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields in order (a frozen slotted dataclass's own state functions
        cost ~3x that; a run's steps are pickled field by field: :meth:`RunReport.__reduce__`)."""
        return _unpickled_step, _step_fields(self)

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON values (the ``--format json`` step object)."""
        decision = self.decision  # the names by look-up: str() of an enum is a Python call
        return {
            "index": self.index, "tool": self.tool, "args_hash": self.args_hash,
            "effect": _NAMES[self.effect], "decision": _NAMES[decision],
            "reason": self.reason, "count": self.count, "executed": decision in _EXECUTED,
        }


_NAMES: Final[dict[Decision | Effect | None, str | None]] = {
    None: None, **{member: str(member) for member in (*Decision, *Effect)}}
_DECISION_NAMES: Final = {d: str(d) for d in Decision}
_EXECUTED: Final = frozenset(d for d in Decision if d.executed)


new_step: Final[Callable[..., StepReport]] = _fast_constructor(StepReport)
"""``StepReport(...)`` (its fields in order) without the frozen dataclass's per-field
``object.__setattr__``: one per replayed call."""


def _unpickled_step(*fields: Any) -> StepReport:
    """:data:`new_step` under a name pickle can find."""
    return new_step(*fields)


_step_fields: Final[Callable[[StepReport], tuple[Any, ...]]] = attrgetter(
    *(f.name for f in fields(StepReport)))
"""A step's fields in order (what :data:`new_step` takes)."""


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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its steps' fields, one tuple per field, and its other fields (``--jobs``:
        every run comes back from a worker; each step pickled by itself cost the worker and
        this process together ~2x that, about a tenth of what the run's replay costs)."""
        return _unpickled_run, (tuple(zip(*map(_step_fields, self.steps), strict=True)),
                                _run_fields(self))

    @property
    def halted(self) -> bool:
        """True when the run ended in a halt."""
        return self.halted_at is not None

    def count(self, decision: Decision) -> int:
        """How many steps got ``decision`` (``halt``: 1 if the run halted)."""
        return self.decisions()[decision]

    def decisions(self) -> Counter[Decision]:
        """Steps per decision, in one pass over them."""
        return Counter(map(_decision, self.steps))

    @property
    def executed(self) -> int:
        """Calls that ran (``allow`` and ``warn``)."""
        counts = self.decisions()
        return counts[Decision.ALLOW] + counts[Decision.WARN]

    def reached(self, decision: Decision) -> bool:
        """True when some call of the run got ``decision``."""
        return any(s.decision is decision for s in self.steps)

    def summary(self) -> dict[str, Any]:
        """The per-run summary (JSON values): counts per decision, the halt, the metadata."""
        counts = self.decisions()
        out: dict[str, Any] = {"calls": self.calls, "replayed": self.replayed,
                               "not_replayed": self.calls - self.replayed,
                               "executed": counts[Decision.ALLOW] + counts[Decision.WARN]}
        out.update({str(d): counts[d] for d in COUNTED})
        out.update({"halt": self.halted, "halted_at": self.halted_at,
                    "halt_reason": self.halt_reason, "error": self.error,
                    "tokens": self.tokens, "cost_usd": self.cost_usd,
                    "unpriced_tokens": self.unpriced_tokens, "meta": self.meta})
        return out


_RUN_FIELDS: Final = tuple(f.name for f in fields(RunReport) if f.name != "steps")
_run_fields: Final[Callable[[RunReport], tuple[Any, ...]]] = attrgetter(*_RUN_FIELDS)


def _unpickled_run(columns: tuple[tuple[Any, ...], ...], state: tuple[Any, ...]) -> RunReport:
    """The run :meth:`RunReport.__reduce__` pickled."""
    run = RunReport(**dict(zip(_RUN_FIELDS, state, strict=True)))
    run.steps = list(map(new_step, *columns)) if columns else []
    return run


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


@dataclass(frozen=True, slots=True)
class RunCounts:
    """What the totals and the progress take from a run: all of it but its steps, which
    are counted (``replay --jobs`` sends these back from a worker, not the steps).

    Attributes:
        calls, replayed, tokens, cost_usd, unpriced_tokens: the run's (:class:`RunReport`).
        executed: calls that ran (``allow`` and ``warn``).
        error: the run stopped on a guard error.
        halted: the run ended in a halt.
        decisions: ``(decision name, steps)`` for each decision some step got, in the
            order of first appearance (``halt``: a step without a tool that halted on
            token usage).
        tools: the tool names the run called.
    """

    calls: int
    replayed: int
    executed: int
    error: bool
    halted: bool
    tokens: int
    cost_usd: float
    unpriced_tokens: int
    decisions: tuple[tuple[str, int], ...]
    tools: frozenset[str]

    @classmethod
    def of(cls, run: RunReport) -> RunCounts:
        """The counts of ``run``, in one pass over its steps."""
        counts = run.decisions()
        return cls(run.calls, run.replayed, counts[Decision.ALLOW] + counts[Decision.WARN],
                   run.error is not None, run.halted, run.tokens, run.cost_usd,
                   run.unpriced_tokens,
                   tuple((_DECISION_NAMES[d], n) for d, n in counts.items()),
                   frozenset(tool for tool in set(map(_tool, run.steps)) if tool is not None))


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

    def add(self, run: RunReport | RunCounts) -> None:
        """Count ``run`` in (a report, or the counts :meth:`RunCounts.of` took from one)."""
        counts = run if isinstance(run, RunCounts) else RunCounts.of(run)
        self.runs += 1
        self.tokens += counts.tokens
        self.cost_usd += counts.cost_usd
        self.unpriced_tokens += counts.unpriced_tokens
        self.calls += counts.calls
        self.replayed += counts.replayed
        self.errors += counts.error
        for name, n in counts.decisions:
            if name != "halt":
                self.decisions[name] += n
            if name in self.runs_with:
                self.runs_with[name] += 1
        self.executed += counts.executed
        self.tools.update(counts.tools)
        if counts.halted:
            self.decisions["halt"] += 1

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


_decision: Final[Callable[[StepReport], Decision]] = attrgetter("decision")
_tool: Final[Callable[[StepReport], str | None]] = attrgetter("tool")


@dataclass(slots=True)
class RenderedRun:
    """A run's part of the report in one output format, made where the run was replayed (by a
    worker of ``replay --jobs``, which then sends this back instead of the run's steps; made
    by :class:`toolguard.replay._report.RunRenderer`).

    Attributes:
        id: the run's id, kept out of ``part`` and written with it: ids given by position
            and ids made unique across files are settled in file order after the run was
            replayed.
        counts: what the totals and the progress take from the run.
        part: the format's part (``_report.json_part``, ``lines_part``, ``row_part``).
    """

    id: str
    counts: RunCounts
    part: Any


Outcome = tuple[RunReport | None, ReplayInputError | None]
RenderedOutcome = tuple[RenderedRun | None, ReplayInputError | None]
"""An :data:`Outcome` whose report was rendered where it was replayed."""
AnyOutcome = tuple[RunReport | RenderedRun | None, ReplayInputError | None]
"""Either (what the replay's machinery hands on)."""
"""What replaying one run gave: its report (``None`` when it could not be replayed at all, for
invalid header ``effects``) and the problem to report about it, if any."""


def failed(run: Run, result: RunReport) -> Outcome:
    """``result`` with the problem of its error, if the run stopped on one."""
    if result.error is None:
        return result, None
    # a bug in the guard: the run is incomplete, say so
    return result, ReplayInputError(
        run.file, run.line, f"run {run.id}: stopped after {result.replayed} call(s) by a guard "
        f"error: {result.error}")
