"""The pure decision core: ``decide(context, snapshot) -> Verdict``. No I/O, no clock reads.

One function reads a frozen per-call :class:`CallContext` (after tenacity's ``RetryCallState``)
and the store's :class:`~toolguard.stores.Snapshot` and returns a :class:`Verdict`. The sync and
async shells in ``engine/_engine.py`` do all I/O (store, approver, tool, audit) around it.

Stages, in order (DESIGN.md §2's CheckBudget → CheckPermission → CheckIdempotency →
ValidateSchema, with the ladder of DESIGN.md §1):

1. halted task → halt again;
2. budgets: max_tool_calls, max_tokens, timeout_s, the tool's max_calls,
   max_consecutive_failures → halt (``BudgetExceeded``);
   an identical call running right now → wait and share its result (concurrent duplicates
   are one call, not a loop);
   for poll calls max_polls → halt (``BudgetExceeded``);
3. ladder halt: repeat count ≥ ``halt_at`` → halt (``RepeatedToolCalls``), before the
   idempotency cache, so a model that keeps repeating an already-done write is stopped too;
4. permission: a tool the policy denies → block;
5. argument schema → invalid (before approval: no reviewer is asked about a call that cannot
   run — a deliberate reordering of the design's pipeline);
6. approval (``requires_approval``, or an earlier identical call with an unknown outcome: it
   timed out, or its claim outlived ``in_progress_ttl_s`` unfinished, which every store
   reports as an unknown record) → review / block (rejected) / halt (``ApprovalTimedOut``);
7. idempotency: a completed record → cached;
8. ladder: count ≥ ``block_at`` → block; then the retry of a call whose last attempts failed
   with a transient error (a rate limit, a 5xx, a timeout: ``snap.transient``) → warn with
   a notice to back off, or block once ``transient_retries`` of them failed (such failures
   are not repeats: the store takes their attempts back from the count); count ≥ ``warn_at``
   → warn; else allow (a call a human approved skips this rung: its earlier attempts were
   waiting, not looping);
9. stagnation: the tool's calls since the last progress form a run of ``stagnation_block_at
   - 1`` calls with other arguments each and one outcome → block (its next call would most
   likely only repeat that outcome).

After the call ran, :func:`stagnation_after` judges its outcome: the call that makes such a
run ``stagnation_warn_at`` long is a warn, with a notice naming what repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from toolguard._errors import ApprovalTimedOut, BudgetExceeded, Halt, RepeatedToolCalls
from toolguard._results import _fast_constructor
from toolguard._types import (
    ALLOW,
    BLOCK,
    CACHED,
    COMPLETED,
    HALT,
    IN_PROGRESS,
    INVALID,
    POLL,
    READONLY,
    REVIEW,
    UNKNOWN,
    WARN,
    Decision,
    Effect,
)
from toolguard.stores._base import ApprovalState, Snapshot

if TYPE_CHECKING:
    from toolguard.tools._resolve import ToolSettings

__all__ = ["Budgets", "CallContext", "Verdict", "decide", "outcome_kind", "stagnation_after",
           "stagnation_possible"]


class Budgets(Protocol):
    """The budgets :func:`decide` reads (``None``: no limit): a
    :class:`~toolguard.policy.BudgetPolicy`, or the engine's plain copy of one
    (``toolguard.engine._call.Budget``, read faster on every call)."""

    @property
    def max_tool_calls(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def timeout_s(self) -> float | None: ...
    @property
    def max_consecutive_failures(self) -> int | None: ...


class CallContext(NamedTuple):
    """Everything about one call that the decision reads (immutable; built once per call).

    Attributes:
        task_id, tool: what is called. settings: the tool's resolved settings.
        effect: the effect of this call (rules may differ from the tool's).
        args_hash: canonical arguments hash. idempotency_key: ``task:tool:hash``.
        invalid: why the arguments are invalid, or None.
        budget: the policy's budgets. approval_timeout_s: seconds a pending approval may wait.
        now: clock time in seconds.
        denied: nothing classifies this call under ``default_effect = "deny"``: no decorator,
            no ``[tools.X]`` effect or approval, no matching rule.
        exact_hash: the hash of the exact argument values the tool would receive (no
            argument options applied): what an approval is bound to.
    """

    task_id: str
    tool: str
    settings: ToolSettings
    effect: Effect
    args_hash: str
    idempotency_key: str
    invalid: str | None
    budget: Budgets
    approval_timeout_s: float
    now: float
    denied: bool = False
    exact_hash: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision for one call.

    Attributes:
        decision: what to do. reason: one line on why. notice: hint for the model.
        halt: the :class:`Halt` subclass to raise (decision ``halt``).
        budget / limit / usage: for ``BudgetExceeded`` (names the budget; calls, tokens or s).
        ask_approval: no stored decision yet: ask the approver, then decide again.
        wait: an identical call is in progress: wait for it, then decide again.
        retry: the retry of a call that failed with a transient error: its notice goes with
            its result even when it fails again.
    """

    decision: Decision
    reason: str = ""
    notice: str | None = None
    halt: type[Halt] | None = None
    budget: str = ""
    limit: float = 0.0
    usage: float = 0.0
    ask_approval: bool = False
    wait: bool = False
    retry: bool = False


ALLOWED = Verdict(ALLOW)
WAIT = Verdict(CACHED, reason="an identical call is in progress", wait=True)
"""An identical call is running right now: wait for it and share its result."""
_verdict: Callable[..., Verdict] = _fast_constructor(Verdict)
"""``Verdict(...)`` without the frozen dataclass's ``object.__setattr__`` per field (3x
faster): the warn, cached and block verdicts are built on every such call."""
_HALT_KINDS: dict[str, type[Halt]] = {
    cls.__name__: cls for cls in (Halt, RepeatedToolCalls, BudgetExceeded, ApprovalTimedOut)
}


def halt_kind(name: str) -> type[Halt]:
    """The :class:`Halt` subclass called ``name`` (for a halt read back from a store)."""
    return _HALT_KINDS.get(name, Halt)


def _budget(name: str, limit: float, usage: float, what: str, verb: str = "exceeded"
            ) -> Verdict:
    return Verdict(
        HALT,
        reason=f"budget {name} {verb}: {what} (limit {limit:g}, used {usage:g})",
        halt=BudgetExceeded, budget=name, limit=limit, usage=usage,
    )


def _number(value: object) -> float:
    """A persisted halt's limit or usage, as the first raise gave it (an int stays an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value


_USAGE_BUDGETS: Final = frozenset({"max_tool_calls", "max_calls", "max_tokens", "timeout_s",
                                   "max_cost_usd"})


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def decide(ctx: CallContext, snap: Snapshot) -> Verdict:
    """Decide one call. Pure: the same inputs always give the same verdict."""
    if snap.halted is not None:
        halted = snap.halted
        budget = str(halted.get("budget", ""))
        then = (f"raise {budget} (guard.reload_policy), then call task.resume() to continue"
                if budget in _USAGE_BUDGETS  # the usage stays: resuming alone halts again
                else "call task.resume() to continue")
        return Verdict(
            HALT,
            reason=f"task is halted ({halted.get('reason', 'halted')}); {then}",
            halt=halt_kind(str(halted.get("kind", "Halt"))),
            budget=budget,  # the first halt's, for BudgetExceeded
            limit=_number(halted.get("limit")),
            usage=_number(halted.get("usage")),
        )

    b, s = ctx.budget, ctx.settings
    if b.max_tool_calls is not None and snap.calls > b.max_tool_calls:
        return _budget("max_tool_calls", b.max_tool_calls, snap.calls, "too many tool calls")
    if b.max_tokens is not None and snap.tokens > b.max_tokens:
        return _budget("max_tokens", b.max_tokens, snap.tokens, "too many tokens")
    if b.timeout_s is not None and ctx.now - snap.started_at > b.timeout_s:
        return _budget("timeout_s", b.timeout_s, round(ctx.now - snap.started_at, 3),
                       "the task ran too long (seconds)")
    if s.max_calls is not None and snap.tool_calls > s.max_calls:
        return _budget("max_calls", s.max_calls, snap.tool_calls,
                       f"too many calls of {ctx.tool}")
    if (b.max_consecutive_failures is not None
            and snap.consecutive_failures >= b.max_consecutive_failures):
        return _budget("max_consecutive_failures", b.max_consecutive_failures,
                       snap.consecutive_failures,
                       f"{ctx.tool} failed {_times(snap.consecutive_failures)} in a row",
                       "reached")  # halts when the count reaches the limit, unlike the others

    record = snap.record
    if record is not None and record.state is IN_PROGRESS and not snap.claimed:
        # An identical call is running right now (another thread, coroutine or worker): a
        # concurrent duplicate, not a sequential loop. Wait and share its result.
        return WAIT

    laddered = ctx.effect is not POLL
    if not laddered:
        if snap.polls > s.max_polls:
            return _budget("max_polls", s.max_polls, snap.polls,
                           f"{ctx.tool} polled that often with the same arguments")
        warn_at = block_at = 0
    else:
        # s.ladder_for(ctx.effect), as plain ints (hot path)
        warn_at, block_at, halt_at = s.readonly_at if ctx.effect is READONLY else s.mutating_at
        if snap.count >= halt_at:
            return Verdict(
                HALT,
                reason=f"{ctx.tool} was called {_times(snap.count)} with the same arguments "
                       "without progress",
                halt=RepeatedToolCalls,
            )

    if ctx.denied:
        return Verdict(
            BLOCK,
            reason=f"{ctx.tool} is not allowed: the policy refuses tools it does not classify "
                   "(default_effect = \"deny\")",
        )
    if ctx.invalid is not None:
        return Verdict(INVALID, reason=ctx.invalid)

    unknown = (record is not None and record.state is UNKNOWN
               and not snap.claimed and not s.forwards_idempotency_key)
    completed = record is not None and record.state is COMPLETED
    approved = False
    if (s.requires_approval and not completed) or unknown:
        approval = snap.approval
        if approval is not None and approval.state == ApprovalState.USED:
            approval = None  # spent by the call it approved: ask afresh
        elif (approval is not None and approval.state == ApprovalState.APPROVED
              and approval.args_hash != ctx.exact_hash):
            # The same key (argument options fold them together) but other values than the
            # reviewer approved: another path, another spelling, another memo. Ask afresh.
            approval = None
        if approval is None or approval.state == ApprovalState.PENDING:
            if (approval is not None
                    and ctx.now - approval.requested_at > ctx.approval_timeout_s):
                return Verdict(
                    HALT,
                    reason=f"approval of {ctx.tool} timed out after "
                           f"{ctx.approval_timeout_s:g} s",
                    halt=ApprovalTimedOut,
                )
            why = ("an identical earlier call ended without a known outcome (it timed out or "
                   "was interrupted): it may already have happened"
                   if unknown else f"{ctx.tool} requires human approval")
            return Verdict(REVIEW, reason=why, ask_approval=True)
        if approval.state == ApprovalState.REJECTED:
            return Verdict(BLOCK,
                           reason=f"approval rejected: {approval.reason or 'no reason given'}")
        # A human approved this exact call: earlier attempts that waited for that approval
        # are not a loop, so only the halt rung (checked above) still applies.
        approved = True

    if completed and not snap.claimed:
        return _verdict(
            CACHED,
            reason="an identical call already completed in this task",
            notice=f"This exact {ctx.tool} call already ran successfully earlier in this "
                   "task, so it was NOT executed again; the result above is the stored "
                   "result of that call. Do not repeat it: read that result and move on.",
        )

    if laddered and not approved:
        stagnation_at = s.stagnation_block_at
        if stagnation_at and snap.stagnation + 1 >= stagnation_at:
            what = _stagnated(ctx.tool, snap.stagnation, snap.stagnation_outcome)
            return _verdict(
                BLOCK,
                reason=f"stagnation: {what} since the last progress",
                notice=f"Change approach: use another tool, or fix the cause before calling "
                       f"{ctx.tool} again.",
            )
        if snap.count >= block_at:
            return _verdict(
                BLOCK,
                reason=f"{ctx.tool} was called {_times(snap.count)} with the same arguments "
                       "without progress",
            )
        if snap.transient and s.transient_retries:
            return _transient(ctx.tool, snap.transient, s.transient_retries)
        if snap.count >= warn_at:
            return _verdict(
                WARN,
                reason=f"repeated {_times(snap.count)} without progress",
                notice=f"You have called {ctx.tool} with these same arguments "
                       f"{_times(snap.count)} without progress. Do not repeat it: change the "
                       "query, the path or the arguments, or use another tool.",
            )
    return ALLOWED


def _transient(tool: str, failed: int, retries: int) -> Verdict:
    """The verdict on an identical retry of a call whose last ``failed`` attempts failed with
    a transient error: a retry with a notice to back off, until ``retries`` have failed."""
    if failed > retries:
        return _verdict(
            BLOCK,
            reason=f"{tool} failed {_times(failed)} in a row with a transient error "
                   f"(transient_retries {retries})",
            notice=f"{tool} keeps failing with a temporary error (a rate limit, a server error "
                   "or a timeout): the service looks unavailable. Do not retry it now; tell "
                   "the user, or continue with what does not need it.",
        )
    return _verdict(
        WARN,
        reason=f"retry {failed} of {retries} after a transient error",
        notice=f"The previous identical {tool} call failed with a temporary error (a rate "
               f"limit, a server error or a timeout). Wait a moment or back off before "
               f"retrying; after {retries} failed retries it will not run again.",
        retry=True,
    )


# Outcome kinds: the first character of a stagnation outcome digest (FinishRequest.outcome).
EMPTY_RESULT, ERROR_RESULT, SOME_RESULT = "0", "e", "r"


def outcome_kind(success: bool, normalized: object) -> str:
    """The kind character of a call's outcome: an error, an empty result (``""``, ``[]``,
    ``{}``, ``None``, or text saying it found nothing), or any other result."""
    if not success:
        return ERROR_RESULT
    if normalized is None or normalized in _EMPTY_VALUES:
        return EMPTY_RESULT
    if isinstance(normalized, str):
        text = normalized.strip().lower()
        if not text or text in _EMPTY_TEXTS or text.startswith(("found 0 ", "no results",
                                                                "no matches", "0 results")):
            return EMPTY_RESULT
    return SOME_RESULT


_EMPTY_TEXTS: Final = frozenset({"[]", "{}", "null", "none", "0"})
# compared by ==, never changed: built once, not a list and a dict per call
_EMPTY_VALUES: Final[tuple[object, ...]] = ("", [], {})


def _stagnated(tool: str, run: int, outcome: str) -> str:
    kind = outcome[:1]
    what = ("failed with the same error" if kind == ERROR_RESULT
            else "returned the same empty result" if kind == EMPTY_RESULT
            else "returned the same result")
    return f"{run} different {tool} calls {what}"


def _grows(recent: str, signature: str) -> bool:
    """Whether a call with ``signature`` grows a run whose recent signatures are ``recent``
    (newline-separated, oldest first; :func:`~toolguard.stores._base.stagnation_recent`)."""
    # the same call again, the common case, read first: a split costs ~4x a comparison
    return signature != recent and signature not in recent.split("\n")


def stagnation_possible(settings: ToolSettings, signature: str, snap: Snapshot) -> bool:
    """Whether :func:`stagnation_after` can give a warn for this call, whatever its outcome:
    False when even an outcome that repeats the run's cannot make the run ``warn_at`` long.
    Read before the call runs (the in-memory call path then knows the guard will hand a
    success back unchanged). Pure; for every outcome, ``stagnation_after(...) is not None``
    implies it is True.
    """
    warn_at = settings.stagnation_warn_at
    if not warn_at:
        return False
    return max(1, snap.stagnation + _grows(snap.stagnation_signature, signature)) >= warn_at


def stagnation_after(settings: ToolSettings, signature: str, snap: Snapshot, outcome: str
                     ) -> Verdict | None:
    """The stagnation warn for a call of ``settings.name`` that has just run, or None.

    ``signature`` is the call's ``tool:args_hash``; ``snap`` the snapshot its decision read;
    ``outcome`` its outcome digest (its kind character, then the digest of its normalised
    result or error; "" for a call the rule does not count: a poll, an unknown outcome, a
    transient failure). The run grows when the outcome repeats under other arguments than
    the run's last ``CYCLE_CALLS - 1`` calls; arguments among those again (the same call, or
    a cycle such as an A/B alternation) are the repeat ladder's to judge, and neither grow
    nor break the run. Pure: it mirrors what the store records for the same call.
    """
    warn_at = settings.stagnation_warn_at
    if not warn_at or not outcome:
        return None
    run = 1
    if outcome == snap.stagnation_outcome:
        run = snap.stagnation + _grows(snap.stagnation_signature, signature)
    if run < warn_at:
        return None
    what = _stagnated(settings.name, run, outcome)
    return _verdict(
        WARN,
        reason=f"stagnation: {what} since the last progress",
        notice=f"{what} since the last progress. Rewording the arguments is not helping: "
               "change approach (another tool, a different strategy), or stop and report.",
    )
