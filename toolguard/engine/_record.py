"""The record stage: ``store.finish`` records the outcome (progress, failures, the
idempotency record, a halt), and the result the model reads is built: the tool's, or a
synthetic one saying why the call did not run."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from toolguard._errors import (
    BudgetExceeded,
    Halt,
    StoreError,
)
from toolguard._outcomes import is_transient
from toolguard._results import ToolResult, new_result
from toolguard._types import (
    ALLOW,
    CACHED,
    HALT,
    INVALID,
    MUTATING,
    POLL,
    READONLY,
    REVIEW,
    Decision,
)
from toolguard.hashing._canonical import value_digest
from toolguard.hashing._normalize import progress_marks
from toolguard.stores._base import (
    ApprovalRecord,
    ApprovalState,
    FinishRequest,
    Snapshot,
)
from toolguard.stores._base import new_tuple as _new

from . import _approve, _events, _storeops
from ._call import CallRecord, _Config, _Outcome, _Prepared
from ._content import as_text as _as_text
from ._content import with_notice as _with_notice
from ._core import ERROR_RESULT, Verdict, halt_kind, outcome_kind, stagnation_after

if TYPE_CHECKING:
    from toolguard.hashing._normalize import ResultNormalizer

    from ._call import TaskState

log = logging.getLogger("toolguard")


def finish(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, outcome: _Outcome | None,
            halt: dict[str, Any] | None = None) -> Verdict | None:
    """Record the call's outcome; return the stagnation warn it earned, if any."""
    executed = outcome is not None
    if not executed and not snap.claimed and halt is None:
        return None  # nothing to record: the attempt was counted by begin
    success = outcome is not None and outcome.success
    content = outcome.content if outcome is not None and success else None
    mutating = p.effect is MUTATING
    settings = p.entry.settings
    result_digest, judged, progress, transient = "", "", "", False
    if outcome is not None and not outcome.unknown:
        # compared without its volatile parts (the model still gets it whole)
        digest, kind = digest_memo(task._digests, settings.result, outcome.content)
        result_digest = digest if success else ""
        if success:
            progress = progress_of(task, p.signature, settings.result, outcome.content, digest)
        transient = (not success and settings.transient_retries > 0
                     and is_transient(outcome.content, outcome.exc, settings.result.transient))
        if p.effect is not POLL and not transient and (settings.stagnation_warn_at
                                                       or settings.stagnation_block_at):
            judged = (kind if success else ERROR_RESULT) + digest
    unknown = outcome is not None and mutating and outcome.unknown
    release, call_id = snap.claimed, p.call_id
    if release and not success and not unknown and snap.record is not None:
        # The claim an approved retry took over from an unknown outcome (only such a claim
        # comes with a record: _approve.take_unknown), and the retry failed or never ran:
        # the earlier call may still have happened, so its unknown outcome stays.
        unknown, release, call_id = True, False, snap.record.call_id
    req: FinishRequest = _new(FinishRequest, (  # every field, in order (hot path)
        p.entry.spec.name, p.signature, p.key, executed, success, unknown,
        mutating, result_digest,
        success and p.claim and p.remember,  # store_result
        content, release, settings.idempotency_ttl_s, task.guard._clock(),
        halt, call_id, judged, settings.max_progress_resets, transient, progress,
    ))
    try:
        task.guard._store.finish(task.task_id, req)
    except Exception as exc:  # noqa: BLE001 - _finish_failed re-raises or falls back
        if finish_failed(task, cfg, p, exc, executed):
            return None
    if req.unknown and (p.entry.settings.requires_approval
                        or not p.entry.settings.forwards_idempotency_key):
        # An earlier approval covered a call that may now have happened: a retry needs
        # a fresh decision.
        record = ApprovalRecord(ApprovalState.PENDING, task.guard._clock(),
                                "outcome unknown", p.entry.spec.name,
                                _approve.kept_args(cfg, p.args), p.exact)
        _storeops.store_op(task, cfg, p, lambda: task.guard._store.set_approval(
            task.task_id, p.key, record, p.entry.settings.idempotency_ttl_s),
            fallback=lambda: None)
    return stagnation_after(settings, p.signature, snap, judged) if judged else None


def finish_failed(task: TaskState, cfg: _Config, p: _Prepared, exc: Exception,
                   executed: bool) -> bool:
    """``store.finish`` raised ``exc``. Raises (``fail_closed``, or the tool did not run);
    True: the outcome was not recorded (logged, the result is still returned); False: the
    policy fails open and the caller goes on as if it had been recorded."""
    if not executed:
        _storeops.store_failed(task, cfg, p, exc, fallback=False)
    # The tool already ran: a store failure now must not lose its result. Record
    # what we can, warn, and return the result (the claim expires by its TTL).
    try:
        _storeops.store_failed(task, cfg, p, exc, fallback=True, transition="executing->planning")
    except StoreError as error:
        log.warning("toolguard: %s (the result is returned)", error)
        _events.event(task, "executing->planning", p.entry.spec.name, ALLOW,
                    f"state not recorded: {error}", p, cfg)
        return True
    return False


MEMO_CHARS: Final = 4096
"""Text results up to this length are memoized per task (:func:`digest_memo`)."""
MEMO_ENTRIES: Final = 16
"""Distinct texts a task's memo keeps (then it starts again, empty)."""


def digest_of(normalizer: ResultNormalizer, content: Any) -> tuple[str, str]:
    """``(digest, kind)`` of a successful result ``content``: the :func:`value_digest` of its
    normalized form (progress and stagnation compare it) and its :func:`outcome_kind`
    character. Raises what the normalizer raises (nothing for plain JSON values)."""
    normalized = normalizer(content)
    return value_digest(normalized), outcome_kind(True, normalized)


_NONE_DIGEST: Final = (value_digest(None), outcome_kind(True, None))


def digest_memo(memo: dict[str, tuple[ResultNormalizer, str, str]], normalizer: ResultNormalizer,
            content: Any) -> tuple[str, str]:
    """:func:`digest_of`, memoized in ``memo`` for plain ``str`` results of at most
    :data:`MEMO_CHARS` characters: normalizing a short text costs ~2k instructions per
    character (the volatile patterns), and a result that repeats (a poll, the same error, a
    stagnating run) is the same text again. The normalizer is pure, so equal texts under the
    same normalizer give equal digests; an entry of another normalizer is recomputed."""
    if content is None:  # a tool without a return value: every normalizer keeps None
        return _NONE_DIGEST
    if type(content) is not str or len(content) > MEMO_CHARS:
        return digest_of(normalizer, content)
    hit = memo.get(content)
    if hit is not None and hit[0] is normalizer:
        return hit[1], hit[2]
    digest, kind = digest_of(normalizer, content)
    if hit is None and len(memo) >= MEMO_ENTRIES:
        memo.clear()  # one atomic step: threads may share the task
    memo[content] = (normalizer, digest, kind)
    return digest, kind


def progress_of(task: TaskState, signature: str, normalizer: ResultNormalizer, content: Any,
                digest: str) -> str:
    """The digest of the explicit progress fields (:func:`progress_marks`) of a successful
    result whose output moved, "" otherwise (:class:`~toolguard.stores.FinishRequest`'s
    ``progress``). Searched only when this task handle saw another output of the signature
    last: a result that repeats, or a first one, costs nothing (a first output's fields are
    then new at the next change, one reset beyond ``max_progress_resets`` at most)."""
    last = task._last_digest
    before = last.get(signature)
    last[signature] = digest
    last.move_to_end(signature)
    if len(last) > task._limit:
        last.popitem(last=False)
    if before is None or before == digest:
        return ""
    marks = progress_marks(normalizer(content))
    return value_digest(marks) if marks else ""


def halt_exc(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict) -> Halt:
    kind = verdict.halt or halt_kind("Halt")
    common: dict[str, Any] = {
        "task_id": task.task_id, "tool": p.entry.spec.name, "args": _events.redacted(p, cfg),
        "args_hash": p.sig, "count": snap.count,
    }
    if issubclass(kind, BudgetExceeded):
        return kind(verdict.reason, budget=verdict.budget or "unknown",
                    limit=verdict.limit, usage=verdict.usage, **common)
    return kind(verdict.reason, **common)


def conclude(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict,
              outcome: _Outcome | None, observed: Decision | None) -> ToolResult:
    """Record the outcome and build the result (or raise the halt)."""
    tool = p.entry.spec.name
    decision = verdict.decision
    if decision is HALT and observed is None:
        exc = halt_exc(task, cfg, p, snap, verdict)
        halt = None if snap.halted is not None else {
            "kind": type(exc).__name__, "reason": verdict.reason, "tool": tool,
            "args_hash": p.sig, "count": snap.count}
        if halt is not None and verdict.budget:  # later calls raise the same details
            halt.update(budget=verdict.budget, limit=verdict.limit, usage=verdict.usage)
        finish(task, cfg, p, snap, None, halt=halt)
        result = ToolResult(tool, p.call_id, HALT, f"[toolguard] Halted: {exc}",
                            is_error=True, reason=verdict.reason, count=snap.count,
                            effect=p.effect, args_hash=p.sig, idempotency_key=p.key)
        _events.record(task, p, result, "validating->failed", cfg,
                     {"kind": type(exc).__name__, "budget": verdict.budget})
        raise exc
    stagnant = finish(task, cfg, p, snap, outcome)
    if outcome is not None:
        return executed_result(task, cfg, p, snap, verdict, observed, stagnant, outcome.value,
                                outcome.content, outcome.success, outcome.error_type,
                                outcome.duration_s)
    result = synthetic(task, p, snap, verdict)
    transition = ("validating->needs_review" if decision is REVIEW
                  else "validating->planning")
    _events.record(task, p, result, transition, cfg)
    return result


def executed_result(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot, verdict: Verdict,
                     observed: Decision | None, stagnant: Verdict | None, value: Any,
                     content: Any, success: bool, error_type: str | None, duration_s: float
                     ) -> ToolResult:
    """The result of a call that ran and was recorded, from its outcome's fields (an
    :class:`_Outcome`'s; ``stagnant``: the stagnation warn its record earned): kept in the
    history and, for a read-only success, as the last result a blocked repeat quotes."""
    raw_content = content
    decision = verdict.decision
    if stagnant is not None and decision is ALLOW:  # this call made the run long
        verdict, decision = stagnant, stagnant.decision
        if observed is not None:
            observed = decision
    notice = verdict.notice if observed is None else None
    if notice and (success or verdict is stagnant or verdict.retry):
        content = _with_notice(content, notice)
    elif success is False:
        notice = None
    result = new_result(  # positional, in ToolResult's order (hot path)
        p.entry.spec.name, p.call_id, ALLOW if observed is not None else decision, content,
        value, not success, error_type, verdict.reason, notice, snap.count, p.effect, p.sig,
        p.key, duration_s, observed,
    )
    if success and p.effect is READONLY:
        last = task._last_content
        last[p.signature] = raw_content
        if len(last) > task._limit:
            last.popitem(last=False)
    _events.record(task, p, result, "executing->planning", cfg)
    return result


def synthetic(task: TaskState, p: _Prepared, snap: Snapshot, verdict: Verdict) -> ToolResult:
    tool = p.entry.spec.name
    decision = verdict.decision
    if decision is CACHED and snap.record is not None:
        stored = snap.record.content
        return new_result(  # positional, in ToolResult's order (hot path)
            tool, p.call_id, decision, _with_notice(stored, verdict.notice), stored, False,
            None, verdict.reason, verdict.notice, snap.count, p.effect, p.sig, p.key)
    if decision is INVALID and p.entry.unknown:
        names = ", ".join(sorted(task.guard._config.entries)) or "none"
        text = f"[toolguard] Unknown tool {tool!r}. Available tools: {names}."
    elif decision is INVALID:
        text = (f"[toolguard] Invalid arguments for {tool}, not executed: {verdict.reason}. "
                "Fix the arguments and call again.")
    elif decision is REVIEW:
        text = (f"[toolguard] {tool} was not executed: {verdict.reason}. It is waiting for a "
                "human decision; do not retry it until told it was approved.")
    else:
        text = f"[toolguard] Blocked, not executed: {verdict.reason}."
        if verdict.notice:  # what to do instead (the stagnation rule says)
            text += f" {verdict.notice}"
        if verdict.reason.startswith(tool) and "same arguments" in verdict.reason:
            text += (" It will not run again with these arguments: change the arguments, "
                     "use another tool, or tell the user what is blocking you.")
            previous = task._last_content.get(p.signature)
            if p.effect is READONLY and previous is not None:
                text += f"\nThe previous result of this call was:\n{_as_text(previous)}"
    return new_result(tool, p.call_id, decision, text, None, True, None, verdict.reason, None,
                      snap.count, p.effect, p.sig, p.key)


def plain(task: TaskState, p: _Prepared, outcome: _Outcome) -> ToolResult:
    result = new_result(p.entry.spec.name, p.call_id, ALLOW, outcome.content,
                        value=outcome.value, is_error=not outcome.success,
                        error_type=outcome.error_type, effect=p.effect, args_hash=p.sig,
                        idempotency_key=p.key, duration_s=outcome.duration_s)
    remember(task, CallRecord(p.entry.spec.name, p.raw_args, result))
    return result


def remember(task: TaskState, record: CallRecord) -> None:
    task.history.append(record)
